package wire_test

import (
	"hash/crc32"
	"net/netip"
	"testing"

	"github.com/softhca/softhca/wire"
)

// benchPacket is an RC RDMA WRITE Middle with a 4096-byte payload in IPv4,
// the common full-MTU data packet.
type benchPacket struct {
	net     wire.Net
	hdr     wire.Headers
	payload []byte
	frame   []byte // IP header through ICRC
	ib      []byte // BTH through ICRC (aliases frame)
}

func newBenchPacket(op wire.OpCode, payloadLen int) benchPacket {
	n := wire.Net{
		Src: netip.AddrFrom4([4]byte{10, 77, 0, 2}), Dst: netip.AddrFrom4([4]byte{10, 77, 0, 3}),
		SrcPort: 0xc271, DstPort: wire.RoCEv2Port, HopLimit: 64, ID: 0x0af3, DontFragment: true,
	}
	h := wire.Headers{BTH: wire.BTHFields{OpCode: op, PKey: 0xffff, DestQP: 0x19, PSN: 0x1f6abc}}
	payload := make([]byte, payloadLen)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	frame := wire.AppendFrame(nil, &n, &h, payload)
	return benchPacket{n, h, payload, frame, frame[wire.IPv4HeaderSize+wire.UDPHeaderSize:]}
}

func BenchmarkParse(b *testing.B) {
	bp := newBenchPacket(wire.RCRDMAWriteMiddle, 4096)
	var p wire.Packet
	b.ReportAllocs()
	b.SetBytes(int64(len(bp.frame)))
	for b.Loop() {
		if wire.Parse(bp.frame, &p) != wire.DropNone {
			b.Fatal("drop")
		}
	}
}

func BenchmarkParseDatagram(b *testing.B) {
	bp := newBenchPacket(wire.RCRDMAWriteMiddle, 4096)
	n := bp.net
	n.ID = 0
	var p wire.Packet
	if wire.ParseDatagram(bp.ib, &n, &p) != wire.DropNone || p.Net.ID != bp.net.ID {
		b.Fatal("setup")
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(bp.ib)))
	for b.Loop() {
		if wire.ParseDatagram(bp.ib, &n, &p) != wire.DropNone {
			b.Fatal("drop")
		}
	}
}

func BenchmarkParseTransport(b *testing.B) {
	bp := newBenchPacket(wire.RCRDMAWriteMiddle, 4096)
	var p wire.Packet
	b.ReportAllocs()
	b.SetBytes(int64(len(bp.ib)))
	for b.Loop() {
		if wire.ParseTransport(bp.ib, &p) != wire.DropNone {
			b.Fatal("drop")
		}
	}
}

// BenchmarkEncode builds a packet in place: headers, payload copy, ICRC.
func BenchmarkEncode(b *testing.B) {
	bp := newBenchPacket(wire.RCRDMAWriteMiddle, 4096)
	buf := make([]byte, len(bp.ib))
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		hl := bp.hdr.Encode(buf, len(bp.payload))
		copy(buf[hl:], bp.payload)
		wire.Seal(&bp.net, buf)
	}
	if string(buf) != string(bp.ib) {
		b.Fatal("encoded packet differs")
	}
}

// BenchmarkICRC4096 and BenchmarkCRC32Raw4096 run over the same bytes
// (BTH and 4096 bytes of payload): the difference is the masked
// pseudo-header.
func BenchmarkICRC4096(b *testing.B) {
	bp := newBenchPacket(wire.RCRDMAWriteMiddle, 4096)
	data := bp.ib[:len(bp.ib)-wire.ICRCSize]
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		wire.ICRC(&bp.net, data)
	}
}

func BenchmarkCRC32Raw4096(b *testing.B) {
	bp := newBenchPacket(wire.RCRDMAWriteMiddle, 4096)
	data := bp.ib[:len(bp.ib)-wire.ICRCSize]
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		crc32.ChecksumIEEE(data)
	}
}

// BenchmarkICRCAck is the small-packet case, where the pseudo-header is
// most of the work.
func BenchmarkICRCAck(b *testing.B) {
	bp := newBenchPacket(wire.RCAcknowledge, 0)
	data := bp.ib[:len(bp.ib)-wire.ICRCSize]
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		wire.ICRC(&bp.net, data)
	}
}

func BenchmarkICRCAckIPv6(b *testing.B) {
	bp := newBenchPacket(wire.RCAcknowledge, 0)
	bp.net.Src = netip.MustParseAddr("fd00::2")
	bp.net.Dst = netip.MustParseAddr("fd00::3")
	data := bp.ib[:len(bp.ib)-wire.ICRCSize]
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		wire.ICRC(&bp.net, data)
	}
}

func BenchmarkCRC32RawAck(b *testing.B) {
	bp := newBenchPacket(wire.RCAcknowledge, 0)
	data := bp.ib[:len(bp.ib)-wire.ICRCSize]
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		crc32.ChecksumIEEE(data)
	}
}

func BenchmarkParseAck(b *testing.B) {
	bp := newBenchPacket(wire.RCAcknowledge, 0)
	var p wire.Packet
	b.ReportAllocs()
	b.SetBytes(int64(len(bp.frame)))
	for b.Loop() {
		if wire.Parse(bp.frame, &p) != wire.DropNone {
			b.Fatal("drop")
		}
	}
}

// BenchmarkICRCSend64 compares the two ways of computing the ICRC of an
// IPv4 RC SEND Only with 64 bytes of payload, a ping-pong's message: the
// pseudo-header built and checksummed per packet (plain) and through an
// ICRCFlow holding the flow (flow), for sealing (ICRC) and for checking
// an arrival whose ID the socket hid (SolveIPv4ID).
func BenchmarkICRCSend64(b *testing.B) {
	bp := newBenchPacket(wire.RCSendOnly, 64)
	data := bp.ib[:len(bp.ib)-wire.ICRCSize]
	var f wire.ICRCFlow
	for _, bc := range []struct {
		name string
		fn   func()
	}{
		{"ICRC/plain", func() { wire.ICRC(&bp.net, data) }},
		{"ICRC/flow", func() { f.ICRC(&bp.net, data) }},
		{"SolveIPv4ID/plain", func() {
			if _, ok := wire.SolveIPv4ID(&bp.net, bp.ib); !ok {
				b.Fatal("no ID")
			}
		}},
		{"SolveIPv4ID/flow", func() {
			if _, ok := f.SolveIPv4ID(&bp.net, bp.ib); !ok {
				b.Fatal("no ID")
			}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.fn()
			}
		})
	}
}

// BenchmarkICRCInterleaved checks arrivals from eight flows in turn (an
// rxe peer's QPs, each on a source port of its own), the ID unknown as a
// socket delivers them: plain, through one ICRCFlow (which reloads at
// every packet) and through an ICRCFlows.
func BenchmarkICRCInterleaved(b *testing.B) {
	bp := newBenchPacket(wire.RCSendOnly, 64)
	var pkts [8][]byte
	var nets [8]wire.Net
	for i := range pkts {
		n := bp.net
		n.SrcPort += uint16(i)
		pkts[i] = wire.AppendPacket(nil, &n, &bp.hdr, bp.payload)
		n.ID = 0
		nets[i] = n
	}
	var f wire.ICRCFlow
	var fs wire.ICRCFlows
	for _, bc := range []struct {
		name string
		flow func(*wire.Net) *wire.ICRCFlow
	}{
		{"plain", nil},
		{"flow", func(*wire.Net) *wire.ICRCFlow { return &f }},
		{"flows", fs.For},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var p wire.Packet
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				n := &nets[i%len(nets)]
				var fl *wire.ICRCFlow
				if bc.flow != nil {
					fl = bc.flow(n)
				}
				if wire.ParseDatagramFlow(pkts[i%len(pkts)], n, &p, fl) != wire.DropNone {
					b.Fatal("drop")
				}
				i++
			}
		})
	}
}
