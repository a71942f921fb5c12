package interop

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket/pcapgo"

	"github.com/softhca/softhca/wire"
)

// ethFrame wraps a RoCEv2 packet from src to dst in Ethernet.
func ethFrame(src, dst string, op wire.OpCode, payload []byte) []byte {
	n := wire.Net{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
		SrcPort: 49152, DstPort: 4791, HopLimit: 64, DontFragment: true, ID: 7}
	h := wire.Headers{BTH: wire.BTHFields{OpCode: op, DestQP: 0x11, PSN: 5, PKey: 0xffff}}
	f := make([]byte, 14, 2048)
	f[12], f[13] = 0x08, 0x00
	return wire.AppendFrame(f, &n, &h, payload)
}

// TestCaptureFrameAccounting feeds frames to a capture without a socket and
// checks the counts, the ICRC verdicts and the payload check.
func TestCaptureFrameAccounting(t *testing.T) {
	guest := "10.77.0.2"
	c := &Capture{guest: netip.MustParseAddr(guest), done: make(chan struct{}), stop: make(chan struct{})}
	c.stats.ToGuest = DirStats{Bad: map[string]int{}, Ops: map[string]int{}}
	c.stats.FromGuest = DirStats{Bad: map[string]int{}, Ops: map[string]int{}}
	c.check = func(d Direction, p *wire.Packet) error {
		if bytes.Contains(p.Payload, []byte("wrong")) {
			return errors.New("wrong data")
		}
		return nil
	}
	good := ethFrame("10.77.0.1", guest, wire.RCSendOnly, []byte("hello"))
	corrupt := ethFrame("10.77.0.1", guest, wire.RCSendOnly, []byte("hello"))
	corrupt[len(corrupt)-8] ^= 0x01 // a payload bit: the ICRC no longer matches
	wrong := ethFrame(guest, "10.77.0.1", wire.RCSendOnly, []byte("wrong"))
	ack := ethFrame(guest, "10.77.0.1", wire.RCAcknowledge, nil)
	var pkt wire.Packet
	for _, f := range [][]byte{good, corrupt, wrong, ack} {
		c.frame(f, &pkt)
	}
	st := c.stats
	if st.ToGuest.Packets != 2 || st.ToGuest.Good != 1 || st.ToGuest.Bad[wire.DropBadICRC.String()] != 1 {
		t.Errorf("host->guest: %d packets, %d good, bad %v; want 2, 1 and one bad ICRC", st.ToGuest.Packets, st.ToGuest.Good, st.ToGuest.Bad)
	}
	if st.FromGuest.Packets != 2 || st.FromGuest.Good != 2 || st.FromGuest.PayloadErrors != 1 {
		t.Errorf("guest->host: %d packets, %d good, %d payload errors; want 2, 2 and 1", st.FromGuest.Packets, st.FromGuest.Good, st.FromGuest.PayloadErrors)
	}
	if len(st.Problems) != 2 || !strings.Contains(st.Problems[0], wire.DropBadICRC.String()) || !strings.Contains(st.Problems[1], "wrong data") {
		t.Errorf("problems %q, want the bad ICRC and the wrong data", st.Problems)
	}
	if n := st.After(FromGuest, st.times[FromGuest][1]); n != 1 {
		t.Errorf("%d guest->host packets at or after the second one's time, want 1", n)
	}
	if n := st.After(ToGuest, st.times[ToGuest][0]); n != 2 {
		t.Errorf("%d host->guest packets at or after the first one's time, want 2", n)
	}
	if got := st.FromGuest.Ops["RC Acknowledge"]; got != 1 {
		t.Errorf("guest->host RC Acknowledge count %d, want 1", got)
	}

	// The frames it kept make a pcap file that reads back.
	path := filepath.Join(t.TempDir(), "c.pcap")
	if err := c.WritePcap(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		n++
		if n == 2 && !bytes.Equal(data, corrupt) {
			t.Error("second frame in the pcap differs from the one captured")
		}
	}
	if n != 4 {
		t.Errorf("pcap holds %d frames, want 4", n)
	}
}

// TestCaptureHostSide checks the capture's header checks: the host
// side's address and MAC on every packet to and from the guest, and on a
// TAP host's packets to the guest IPv4 ID 0 with DF set.
func TestCaptureHostSide(t *testing.T) {
	guest := netip.MustParseAddr("10.77.0.2")
	hostMAC := net.HardwareAddr{0x02, 0x00, 10, 77, 0, 10}
	guestMAC := net.HardwareAddr{0x52, 0x54, 0x00, 77, 0, 2}
	otherMAC := net.HardwareAddr{0x02, 0x00, 10, 77, 0, 1}
	// frame is a RoCEv2 frame between the MACs and addresses, with IPv4
	// ID id and DF df.
	frame := func(srcMAC, dstMAC net.HardwareAddr, src, dst string, id uint16, df bool) []byte {
		n := wire.Net{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst),
			SrcPort: 49152, DstPort: 4791, HopLimit: 64, DontFragment: df, ID: id}
		h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, DestQP: 0x11, PSN: 5, PKey: 0xffff}}
		f := make([]byte, 14, 2048)
		copy(f[0:], dstMAC)
		copy(f[6:], srcMAC)
		f[12], f[13] = 0x08, 0x00
		return wire.AppendFrame(f, &n, &h, []byte("data"))
	}
	cases := []struct {
		name     string
		frame    []byte
		tap      bool
		dir      Direction
		problems []string // what the problem must say; none: no header error
	}{
		{"to the guest from the host", frame(hostMAC, guestMAC, "10.77.0.10", "10.77.0.2", 0, true), true, ToGuest, nil},
		{"from the guest to the host", frame(guestMAC, hostMAC, "10.77.0.2", "10.77.0.10", 4321, true), true, FromGuest, nil},
		{"to the guest from the bridge's address", frame(hostMAC, guestMAC, "10.77.0.1", "10.77.0.2", 0, true), true, ToGuest,
			[]string{"source address 10.77.0.1, want softhca's 10.77.0.10"}},
		{"to the guest from another MAC", frame(otherMAC, guestMAC, "10.77.0.10", "10.77.0.2", 0, true), true, ToGuest,
			[]string{"source MAC 02:00:0a:4d:00:01"}},
		{"to the guest with an IPv4 ID", frame(hostMAC, guestMAC, "10.77.0.10", "10.77.0.2", 7, true), true, ToGuest,
			[]string{"IPv4 ID 7, DF true"}},
		{"to the guest without DF", frame(hostMAC, guestMAC, "10.77.0.10", "10.77.0.2", 0, false), true, ToGuest,
			[]string{"IPv4 ID 0, DF false"}},
		{"to the guest with an IPv4 ID, not a TAP host", frame(hostMAC, guestMAC, "10.77.0.10", "10.77.0.2", 7, false), false, ToGuest, nil},
		{"from the guest to the bridge's address and MAC", frame(guestMAC, otherMAC, "10.77.0.2", "10.77.0.1", 1, true), true, FromGuest,
			[]string{"destination address 10.77.0.1", "destination MAC 02:00:0a:4d:00:01"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Capture{guest: guest, host: HostSide{Addr: netip.MustParseAddr("10.77.0.10"), MAC: hostMAC, TAP: tc.tap}}
			c.stats.ToGuest = DirStats{Bad: map[string]int{}, Ops: map[string]int{}}
			c.stats.FromGuest = DirStats{Bad: map[string]int{}, Ops: map[string]int{}}
			var pkt wire.Packet
			c.frame(tc.frame, &pkt)
			ds := c.stats.Dir(tc.dir)
			if ds.Packets != 1 || ds.Good != 1 {
				t.Fatalf("%s: %d packets, %d good; want 1 good (header errors do not make a packet bad)", tc.dir, ds.Packets, ds.Good)
			}
			wantErrors := 0
			if len(tc.problems) > 0 {
				wantErrors = 1
			}
			if ds.HeaderErrors != wantErrors {
				t.Errorf("%d header errors, want %d (problems %q)", ds.HeaderErrors, wantErrors, c.stats.Problems)
			}
			for _, want := range tc.problems {
				if len(c.stats.Problems) != 1 || !strings.Contains(c.stats.Problems[0], want) {
					t.Errorf("problems %q, want one saying %q", c.stats.Problems, want)
				}
			}
		})
	}
}
