package pcap_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"

	gplayers "github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/softhca/softhca/wire"
	"github.com/softhca/softhca/wire/pcap"
	"github.com/stretchr/testify/require"
)

var (
	v4a = netip.MustParseAddr("192.0.2.1")
	v4b = netip.MustParseAddr("192.0.2.2")
	v6a = netip.MustParseAddr("2001:db8::a:1")
	v6b = netip.MustParseAddr("2001:db8::b:2")
)

// testPacket is an InfiniBand packet and the IP and UDP fields it was
// sent with.
type testPacket struct {
	net wire.Net
	h   wire.Headers
	ib  []byte // BTH through ICRC
}

func (p *testPacket) op() wire.OpCode { return p.h.BTH.OpCode }

func (p *testPacket) String() string {
	return fmt.Sprintf("%s over IPv%d", p.op(), map[bool]int{false: 4, true: 6}[p.net.IsIPv6()])
}

// testPackets builds one packet for every opcode wire defines, each over
// IPv4 and over IPv6, with the headers the opcode carries filled in and
// payload lengths that need every pad count.
func testPackets() []testPacket {
	nets := []wire.Net{
		// HopLimit 0: the writer must write 64.
		{Src: v4a, Dst: v4b, SrcPort: 0xc001, DstPort: wire.RoCEv2Port, ID: 0x4242, DontFragment: true},
		{Src: v6a, Dst: v6b, SrcPort: 0xc002, DstPort: wire.RoCEv2Port, HopLimit: 17, TrafficClass: 0x60, FlowLabel: 0x12345},
	}
	var pkts []testPacket
	for _, n := range nets {
		for i := range 256 {
			op := wire.OpCode(i)
			info := op.Info()
			if !info.Valid {
				continue
			}
			h := wire.Headers{
				BTH: wire.BTHFields{OpCode: op, PKey: 0xffff, DestQP: 0x100 + uint32(i),
					AckReq: info.Pos.Last() && info.Request, PSN: wire.MakePSN(0xfffff0 + uint32(i))},
				DETH:         wire.DETHFields{QKey: 0x11111111, SrcQP: 0x22},
				FETH:         wire.FETHFields{PlacementType: 1, Selectivity: 1},
				RETH:         wire.RETHFields{VirtualAddress: 0x7f0000001000, RKey: 0x1234, DMALength: 4096},
				AtomicETH:    wire.AtomicETHFields{VirtualAddress: 0x7f0000002000, RKey: 0x5678, SwapAddData: 2, CompareData: 1},
				AETH:         wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: uint32(i)},
				AtomicAckETH: 0x0102030405060708,
				ImmDt:        0xdeadbeef,
				IETH:         0x9abc,
			}
			size := 0
			switch {
			case info.FixedLen > 0:
				size = info.FixedLen
			case info.Payload:
				size = 1 + i*37%301
			}
			payload := make([]byte, size)
			for j := range payload {
				payload[j] = byte(i + j)
			}
			ib := wire.AppendPacket(nil, &n, &h, payload)
			// Keep only the headers the opcode carries, as a parse
			// returns them.
			var parsed wire.Packet
			if r := wire.ParseTransport(ib, &parsed); r != wire.DropNone {
				panic(fmt.Sprintf("%s: %s", op, r))
			}
			pkts = append(pkts, testPacket{net: n, h: parsed.Headers(), ib: ib})
		}
	}
	return pkts
}

// writePcap writes the packets with WritePacket, one microsecond apart,
// and returns the file.
func writePcap(t *testing.T, pkts []testPacket, start time.Time) []byte {
	t.Helper()
	var file bytes.Buffer
	w, err := pcap.NewWriter(&file)
	require.NoError(t, err)
	for i := range pkts {
		p := &pkts[i]
		require.NoError(t, w.WritePacket(start.Add(time.Duration(i)*time.Microsecond), &p.net, p.ib), "%s", p)
	}
	return file.Bytes()
}

// readPcap reads every frame of a pcap file.
func readPcap(t *testing.T, file []byte) ([][]byte, []time.Time) {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(file))
	require.NoError(t, err)
	require.Equal(t, gplayers.LinkTypeEthernet, r.LinkType())
	require.GreaterOrEqual(t, r.Snaplen(), uint32(65535))
	var frames [][]byte
	var times []time.Time
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return frames, times
		}
		require.NoError(t, err)
		require.Equal(t, ci.Length, ci.CaptureLength, "frame %d was cut", len(frames)+1)
		frames = append(frames, data)
		times = append(times, ci.Timestamp)
	}
}

// checkEthernet checks a frame's Ethernet header and returns what follows
// it.
func checkEthernet(t *testing.T, frame []byte, src, dst netip.Addr) []byte {
	t.Helper()
	require.GreaterOrEqual(t, len(frame), 60, "frames are padded to the Ethernet minimum")
	s, d := pcap.MACFor(src), pcap.MACFor(dst)
	require.Equal(t, d[:], frame[0:6])
	require.Equal(t, s[:], frame[6:12])
	typ := []byte{0x08, 0x00}
	if src.Is6() {
		typ = []byte{0x86, 0xdd}
	}
	require.Equal(t, typ, frame[12:14])
	return frame[14:]
}

// TestWritePacketRoundTrip writes a packet of every opcode over IPv4 and
// IPv6, reads the file back with pcapgo, and parses every frame with
// wire.Parse: the ICRC must verify, the IP and UDP fields must be those
// given (hop limit 0 written as 64), and the InfiniBand packet must be
// byte for byte the one written.
func TestWritePacketRoundTrip(t *testing.T) {
	pkts := testPackets()
	start := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	frames, times := readPcap(t, writePcap(t, pkts, start))
	require.Len(t, frames, len(pkts))
	for i, frame := range frames {
		p := &pkts[i]
		t.Run(p.String(), func(t *testing.T) {
			require.True(t, start.Add(time.Duration(i)*time.Microsecond).Equal(times[i]), "timestamp %v", times[i])
			ip := checkEthernet(t, frame, p.net.Src, p.net.Dst)
			var got wire.Packet
			require.Equal(t, wire.DropNone, wire.Parse(ip, &got))
			want := p.net
			if want.HopLimit == 0 {
				want.HopLimit = pcap.DefaultHopLimit
			}
			require.Equal(t, want, got.Net)
			require.Equal(t, p.ib, got.Raw)
			require.Equal(t, p.h, got.Headers())
		})
	}
}

// TestWritePacketKeepsICRC: the writer must not fix a bad ICRC.
func TestWritePacketKeepsICRC(t *testing.T) {
	p := testPackets()[0]
	p.ib[len(p.ib)-1] ^= 0x80
	frames, _ := readPcap(t, writePcap(t, []testPacket{p}, time.Unix(1, 0)))
	require.Len(t, frames, 1)
	ip := checkEthernet(t, frames[0], p.net.Src, p.net.Dst)
	var got wire.Packet
	require.Equal(t, wire.DropBadICRC, wire.Parse(ip, &got))
	require.Equal(t, p.ib, ip[len(ip)-len(p.ib):])
}

// TestWriteIPFrame writes frames that already have their IP header, as on
// the TAP link: the frame must come back unchanged after the Ethernet
// header (and before any Ethernet padding).
func TestWriteIPFrame(t *testing.T) {
	pkts := testPackets()
	var file bytes.Buffer
	w, err := pcap.NewWriter(&file)
	require.NoError(t, err)
	var ips [][]byte
	for i := range pkts {
		p := &pkts[i]
		n := p.net
		n.HopLimit = 200
		ip := wire.AppendFrame(nil, &n, &p.h, payloadOf(p))
		ips = append(ips, ip)
		require.NoError(t, w.WriteIPFrame(time.Unix(int64(i), 0), ip))
	}
	frames, _ := readPcap(t, file.Bytes())
	require.Len(t, frames, len(pkts))
	for i, frame := range frames {
		p := &pkts[i]
		t.Run(p.String(), func(t *testing.T) {
			ip := checkEthernet(t, frame, p.net.Src, p.net.Dst)
			require.Equal(t, ips[i], ip[:len(ips[i])])
			pad := ip[len(ips[i]):]
			require.Equal(t, make([]byte, len(pad)), pad, "Ethernet padding")
			var got wire.Packet
			require.Equal(t, wire.DropNone, wire.Parse(ip, &got))
			require.Equal(t, p.ib, got.Raw)
		})
	}
}

func TestErrors(t *testing.T) {
	w, err := pcap.NewWriter(io.Discard)
	require.NoError(t, err)
	ib := testPackets()[0].ib
	tests := []struct {
		name string
		n    wire.Net
		ib   []byte
	}{
		{"zero Net", wire.Net{}, ib},
		{"mixed families", wire.Net{Src: v4a, Dst: v6b}, ib},
		{"IPv4 too long", wire.Net{Src: v4a, Dst: v4b}, make([]byte, 65535-20-8+1)},
		{"IPv6 too long", wire.Net{Src: v6a, Dst: v6b}, make([]byte, 65535-8+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Error(t, w.WritePacket(time.Time{}, &tt.n, tt.ib))
		})
	}
	// The largest datagrams fit.
	require.NoError(t, w.WritePacket(time.Time{}, &wire.Net{Src: v4a, Dst: v4b}, make([]byte, 65535-20-8)))
	require.NoError(t, w.WritePacket(time.Time{}, &wire.Net{Src: v6a, Dst: v6b}, make([]byte, 65535-8)))

	for _, ip := range [][]byte{nil, {0x45}, make([]byte, 40), append([]byte{0x60}, make([]byte, 30)...)} {
		require.Error(t, w.WriteIPFrame(time.Time{}, ip), "%x", ip)
	}

	_, err = pcap.NewWriter(failWriter{})
	require.ErrorIs(t, err, errFail)
	w, err = pcap.NewWriter(&failAfter{n: 1})
	require.NoError(t, err)
	p := testPackets()[0]
	// pcapgo does not wrap the error it gets.
	require.ErrorContains(t, w.WritePacket(time.Time{}, &p.net, p.ib), errFail.Error())
}

var errFail = errors.New("write failed")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errFail }

// failAfter fails every write after the first n.
type failAfter struct{ n int }

func (f *failAfter) Write(b []byte) (int, error) {
	if f.n == 0 {
		return 0, errFail
	}
	f.n--
	return len(b), nil
}

func TestMACFor(t *testing.T) {
	tests := []struct {
		addr netip.Addr
		want [6]byte
	}{
		{netip.MustParseAddr("10.77.0.2"), [6]byte{0x02, 0x00, 10, 77, 0, 2}},
		{netip.MustParseAddr("2001:db8::1:2:3"), [6]byte{0x06, 0x01, 0x00, 0x02, 0x00, 0x03}},
		{netip.MustParseAddr("fe80::aa:bbcc:ddee"), [6]byte{0x06, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}},
		{netip.Addr{}, [6]byte{0x02}},
	}
	for _, tt := range tests {
		t.Run(tt.addr.String(), func(t *testing.T) {
			m := pcap.MACFor(tt.addr)
			require.Equal(t, tt.want, m)
			require.Equal(t, byte(0x02), m[0]&0x03, "locally administered unicast")
		})
	}
}

// TestConcurrentWriters writes from several goroutines at once: every
// packet must come out whole.
func TestConcurrentWriters(t *testing.T) {
	pkts := testPackets()
	var file bytes.Buffer
	w, err := pcap.NewWriter(&file)
	require.NoError(t, err)
	const writers = 4
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			for i := range pkts {
				p := &pkts[i]
				var err error
				if (i+g)%2 == 0 {
					err = w.WritePacket(time.Unix(0, 0), &p.net, p.ib)
				} else {
					err = w.WriteIPFrame(time.Unix(0, 0), wire.AppendFrame(nil, &p.net, &p.h, payloadOf(p)))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	frames, _ := readPcap(t, file.Bytes())
	require.Len(t, frames, writers*len(pkts))
	seen := map[string]int{}
	for _, frame := range frames {
		var got wire.Packet
		require.Equal(t, wire.DropNone, wire.Parse(frame[14:], &got))
		seen[string(got.Raw)]++
	}
	for i := range pkts {
		require.Equal(t, writers, seen[string(pkts[i].ib)], "%s", &pkts[i])
	}
}

func payloadOf(p *testPacket) []byte {
	var pp wire.Packet
	if r := wire.ParseTransport(p.ib, &pp); r != wire.DropNone {
		panic(r)
	}
	return pp.Payload
}

// TestNoAllocs: once the scratch buffer has grown, writing a packet
// allocates nothing.
func TestNoAllocs(t *testing.T) {
	w, err := pcap.NewWriter(io.Discard)
	require.NoError(t, err)
	pkts := testPackets()
	ips := make([][]byte, len(pkts))
	for i := range pkts {
		ips[i] = wire.AppendFrame(nil, &pkts[i].net, &pkts[i].h, payloadOf(&pkts[i]))
	}
	ts := time.Unix(1, 2)
	for i := range pkts {
		require.NoError(t, w.WritePacket(ts, &pkts[i].net, pkts[i].ib))
	}
	allocs := testing.AllocsPerRun(5, func() {
		for i := range pkts {
			if err := w.WritePacket(ts, &pkts[i].net, pkts[i].ib); err != nil {
				panic(err)
			}
			if err := w.WriteIPFrame(ts, ips[i]); err != nil {
				panic(err)
			}
		}
	})
	require.Zero(t, allocs)
}

func BenchmarkWritePacket(b *testing.B) {
	w, err := pcap.NewWriter(io.Discard)
	require.NoError(b, err)
	n := wire.Net{Src: v4a, Dst: v4b, SrcPort: 0xc000, DstPort: wire.RoCEv2Port, ID: 1, DontFragment: true}
	h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCRDMAWriteMiddle, PKey: 0xffff, DestQP: 0x11}}
	ib := wire.AppendPacket(nil, &n, &h, make([]byte, 1024))
	ts := time.Unix(1, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(ib)))
	for b.Loop() {
		if err := w.WritePacket(ts, &n, ib); err != nil {
			b.Fatal(err)
		}
	}
}
