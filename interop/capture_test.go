package interop

import (
	"bytes"
	"errors"
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
