package wire_test

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/softhca/softhca/internal/testcaps"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// Helpers shared by the tests, fuzz targets and benchmarks. They are
// written from the specifications (IBTA chapter 9, RFC 791, RFC 8200,
// RFC 768 and rxe_icrc.c), not from the package's code, so that they can
// serve as references.

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x50f7_4ca0)) }

// validOpCodes lists the opcodes the package defines, from the independent
// expectation table in opcode_test.go.
func validOpCodes() []wire.OpCode {
	var ops []wire.OpCode
	for op := range 256 {
		if expectedOps[wire.OpCode(op)].name != "" {
			ops = append(ops, wire.OpCode(op))
		}
	}
	return ops
}

// randNet returns random IP and UDP fields of the given family, with the
// RoCEv2 destination port.
func randNet(r *rand.Rand, v6 bool) wire.Net {
	n := wire.Net{
		SrcPort:      uint16(r.Uint32()),
		DstPort:      wire.RoCEv2Port,
		TrafficClass: uint8(r.Uint32()),
		HopLimit:     uint8(r.Uint32()),
	}
	if v6 {
		var s, d [16]byte
		fill(r, s[:])
		fill(r, d[:])
		n.Src, n.Dst = netip.AddrFrom16(s), netip.AddrFrom16(d)
		n.FlowLabel = r.Uint32() & 0xfffff
	} else {
		var s, d [4]byte
		fill(r, s[:])
		fill(r, d[:])
		n.Src, n.Dst = netip.AddrFrom4(s), netip.AddrFrom4(d)
		n.ID = uint16(r.Uint32())
		n.DontFragment = r.IntN(4) != 0
	}
	return n
}

func fill(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	fill(r, b)
	return b
}

// randHeaders returns random values for every header, each within its
// wire field, with the given opcode and TVer 0.
func randHeaders(r *rand.Rand, op wire.OpCode) wire.Headers {
	return wire.Headers{
		BTH: wire.BTHFields{
			OpCode:         op,
			SolicitedEvent: r.IntN(2) == 0,
			MigReq:         r.IntN(2) == 0,
			PKey:           uint16(r.Uint32()),
			FECN:           r.IntN(2) == 0,
			BECN:           r.IntN(2) == 0,
			DestQP:         r.Uint32() & 0xffffff,
			AckReq:         r.IntN(2) == 0,
			PSN:            wire.PSN(r.Uint32() & 0xffffff),
		},
		DETH: wire.DETHFields{QKey: r.Uint32(), SrcQP: r.Uint32() & 0xffffff},
		FETH: wire.FETHFields{PlacementType: uint8(r.IntN(16)), Selectivity: uint8(r.IntN(4))},
		RETH: wire.RETHFields{VirtualAddress: r.Uint64(), RKey: r.Uint32(), DMALength: r.Uint32()},
		AtomicETH: wire.AtomicETHFields{
			VirtualAddress: r.Uint64(), RKey: r.Uint32(),
			SwapAddData: r.Uint64(), CompareData: r.Uint64(),
		},
		AETH:         wire.AETHFields{Syndrome: wire.Syndrome(r.Uint32()), MSN: r.Uint32() & 0xffffff},
		AtomicAckETH: r.Uint64(),
		ImmDt:        r.Uint32(),
		IETH:         r.Uint32(),
	}
}

// randPayloadLen returns a payload length the opcode allows, up to max.
func randPayloadLen(r *rand.Rand, op wire.OpCode, max int) int {
	e := expectedOps[op]
	switch {
	case !e.payload:
		return 0
	case e.fixed > 0:
		return e.fixed
	}
	return r.IntN(max + 1)
}

// canonical clears the header fields the opcode does not carry, and the
// pad count (which Encode derives from the payload), so that Headers
// values compare equal to what a parse returns.
func canonical(h wire.Headers, payloadLen int) wire.Headers {
	m := expectedOps[h.BTH.OpCode].hdrs
	c := wire.Headers{BTH: h.BTH}
	c.BTH.PadCount = -payloadLen & 3
	for _, x := range m {
		switch x {
		case "DETH":
			c.DETH = h.DETH
		case "FETH":
			c.FETH = h.FETH
		case "RETH":
			c.RETH = h.RETH
		case "AtomicETH":
			c.AtomicETH = h.AtomicETH
		case "AETH":
			c.AETH = h.AETH
		case "AtomicAckETH":
			c.AtomicAckETH = h.AtomicAckETH
		case "ImmDt":
			c.ImmDt = h.ImmDt
		case "IETH":
			c.IETH = h.IETH
		}
	}
	return c
}

// refIPUDP writes, from RFC 791/8200/768 directly, the IP and UDP headers
// a RoCEv2 sender puts in front of an InfiniBand packet of ibLen bytes.
// The IPv4 header checksum is left to the caller (ipv4Sum).
func refIPUDP(n *wire.Net, ibLen int) []byte {
	udpLen := 8 + ibLen
	var b []byte
	if n.Src.Is6() {
		b = make([]byte, 40+8)
		b[0] = 0x60 | n.TrafficClass>>4
		b[1] = n.TrafficClass<<4 | byte(n.FlowLabel>>16)&0x0f
		b[2], b[3] = byte(n.FlowLabel>>8), byte(n.FlowLabel)
		b[4], b[5] = byte(udpLen>>8), byte(udpLen)
		b[6] = 17
		b[7] = n.HopLimit
		s, d := n.Src.As16(), n.Dst.As16()
		copy(b[8:], s[:])
		copy(b[24:], d[:])
	} else {
		b = make([]byte, 20+8)
		b[0] = 0x45
		b[1] = n.TrafficClass
		b[2], b[3] = byte((20+udpLen)>>8), byte(20+udpLen)
		b[4], b[5] = byte(n.ID>>8), byte(n.ID)
		if n.DontFragment {
			b[6] = 0x40
		}
		b[8] = n.HopLimit
		b[9] = 17
		s, d := n.Src.As4(), n.Dst.As4()
		copy(b[12:], s[:])
		copy(b[16:], d[:])
		sum := ipv4Sum(b[:20])
		b[10], b[11] = byte(sum>>8), byte(sum)
	}
	u := b[len(b)-8:]
	u[0], u[1] = byte(n.SrcPort>>8), byte(n.SrcPort)
	u[2], u[3] = byte(n.DstPort>>8), byte(n.DstPort)
	u[4], u[5] = byte(udpLen>>8), byte(udpLen)
	return b
}

// ipv4Sum is the RFC 1071 one's-complement checksum of an IPv4 header
// whose checksum field is zero.
func ipv4Sum(h []byte) uint16 {
	var s uint32
	for i := 0; i < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// refICRC is the slow reference ICRC, the way rxe_icrc.c computes it: take
// the frame as it is on the wire (IP header through pad, ICRC excluded),
// put 8 bytes of 0xFF in front for the LRH, overwrite the variant fields
// with ones (IPv4 TOS, TTL and header checksum; IPv6 traffic class, flow
// label and hop limit; UDP checksum; BTH byte 4) and run plain CRC-32 over
// the whole thing.
func refICRC(frame []byte) uint32 {
	buf := make([]byte, 0, 8+len(frame))
	buf = append(buf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	buf = append(buf, frame...)
	ip := buf[8:]
	var udp []byte
	switch ip[0] >> 4 {
	case 4:
		ip[1] = 0xff                // TOS
		ip[8] = 0xff                // TTL
		ip[10], ip[11] = 0xff, 0xff // header checksum
		udp = ip[int(ip[0]&0x0f)*4:]
	case 6:
		ip[0] |= 0x0f // traffic class, high nibble
		ip[1], ip[2], ip[3] = 0xff, 0xff, 0xff
		ip[7] = 0xff // hop limit
		udp = ip[40:]
	default:
		panic("refICRC: not IP")
	}
	udp[6], udp[7] = 0xff, 0xff // UDP checksum
	udp[8+4] = 0xff             // BTH byte 4: FECN, BECN, Resv6
	return crc32.ChecksumIEEE(buf[:len(buf)-4])
}

// frameFor builds the whole frame (IP header through ICRC) from the
// reference IP/UDP header and wire.AppendPacket's InfiniBand packet.
func frameFor(n *wire.Net, ib []byte) []byte {
	return append(refIPUDP(n, len(ib)), ib...)
}

// randPacket builds a random valid packet of the given family: its Net,
// Headers (canonical), payload and InfiniBand bytes (BTH through ICRC).
type testPacket struct {
	net     wire.Net
	hdr     wire.Headers
	payload []byte
	ib      []byte
}

func randPacket(r *rand.Rand, op wire.OpCode, v6 bool, maxPayload int) testPacket {
	n := randNet(r, v6)
	pl := randPayloadLen(r, op, maxPayload)
	h := canonical(randHeaders(r, op), pl)
	payload := randBytes(r, pl)
	ib := wire.AppendPacket(nil, &n, &h, payload)
	return testPacket{n, h, payload, ib}
}

func (tp testPacket) frame() []byte { return frameFor(&tp.net, tp.ib) }

// captureIPFrames returns every IP frame of the rxe captures, trimmed to
// the IP packet's length.
func captureIPFrames(tb testing.TB) [][]byte {
	tb.Helper()
	caps, err := testcaps.Load()
	require.NoError(tb, err)
	var out [][]byte
	for _, c := range caps {
		for _, f := range c.Frames {
			ip := f.IP()
			if ip == nil {
				continue
			}
			var l int
			switch ip[0] >> 4 {
			case 4:
				l = int(binary.BigEndian.Uint16(ip[2:]))
			case 6:
				l = 40 + int(binary.BigEndian.Uint16(ip[4:]))
			}
			out = append(out, ip[:l])
		}
	}
	require.NotEmpty(tb, out)
	return out
}

// ibOffset returns where the UDP payload starts in a frame.
func ibOffset(frame []byte) int {
	if frame[0]>>4 == 6 {
		return 40 + 8
	}
	return int(frame[0]&0x0f)*4 + 8
}
