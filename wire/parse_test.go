package wire_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

func TestDropReasonString(t *testing.T) {
	seen := map[string]bool{}
	for r := range wire.DropReason(wire.NumDropReasons) {
		s := r.String()
		require.NotEmpty(t, s)
		require.NotContains(t, s, "drop reason", "reason %d has no name", r)
		require.False(t, seen[s], "duplicate name %q", s)
		seen[s] = true
	}
	require.Equal(t, "none", wire.DropNone.String())
	require.Equal(t, "ICRC mismatch", wire.DropBadICRC.String())
	require.Equal(t, fmt.Sprintf("drop reason %d", wire.NumDropReasons), wire.DropReason(wire.NumDropReasons).String())
	require.Equal(t, "drop reason 255", wire.DropReason(255).String())
}

// checkParsed checks every field of a parsed packet against what built it.
func checkParsed(t *testing.T, tp testPacket, p *wire.Packet) {
	t.Helper()
	op := tp.hdr.BTH.OpCode
	e := expectedOps[op]
	require.Equal(t, tp.hdr, p.Headers())
	require.Equal(t, tp.payload, p.Payload)
	require.Equal(t, make([]byte, -len(tp.payload)&3), p.Pad)
	require.Equal(t, tp.ib, p.Raw)
	require.Equal(t, binary.LittleEndian.Uint32(tp.ib[len(tp.ib)-4:]), p.ICRC)
	require.Equal(t, op.Info(), p.Info())
	require.Equal(t, tp.ib[:12], []byte(p.BTH))
	has := map[string]bool{}
	for _, h := range e.hdrs {
		has[h] = true
	}
	for name, v := range map[string][]byte{
		"DETH": p.DETH, "FETH": p.FETH, "RETH": p.RETH, "AtomicETH": p.AtomicETH,
		"AETH": p.AETH, "AtomicAckETH": p.AtomicAckETH, "ImmDt": p.ImmDt,
		"IETH": p.IETH, "CNPReserved": p.CNPReserved,
	} {
		if has[name] {
			require.NotNil(t, v, "%s missing", name)
			require.Equal(t, len(v), cap(v), "%s view must not reach past its header", name)
		} else {
			require.Nil(t, v, "%s present", name)
		}
	}
	require.Equal(t, len(p.Payload), cap(p.Payload), "payload view must not reach into the pad")
}

// TestParseEveryOpCode parses random packets of every valid opcode, IPv4
// and IPv6, with all three entry points.
func TestParseEveryOpCode(t *testing.T) {
	r := newRand(3)
	for _, op := range validOpCodes() {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/v6=%v", op, v6), func(t *testing.T) {
				for range 10 {
					tp := randPacket(r, op, v6, 300)
					var p wire.Packet

					require.Equal(t, wire.DropNone, wire.ParseTransport(tp.ib, &p))
					checkParsed(t, tp, &p)

					frame := tp.frame()
					// Ethernet padding after the IP packet is ignored.
					frame = append(frame, make([]byte, r.IntN(3)*23)...)
					require.Equal(t, wire.DropNone, wire.Parse(frame, &p))
					checkParsed(t, tp, &p)
					require.Equal(t, tp.net, p.Net)

					n := tp.net
					if !v6 {
						n.ID = uint16(r.Uint32()) // must be ignored
					}
					require.Equal(t, wire.DropNone, wire.ParseDatagram(tp.ib, &n, &p))
					checkParsed(t, tp, &p)
					require.Equal(t, tp.net, p.Net, "ParseDatagram must recover the IPv4 ID")
				}
			})
		}
	}
}

// TestParseReusesPacket checks that a parse clears the views an earlier
// packet left in the same Packet.
func TestParseReusesPacket(t *testing.T) {
	r := newRand(4)
	var p wire.Packet
	for range 500 {
		ops := validOpCodes()
		tp := randPacket(r, ops[r.IntN(len(ops))], r.IntN(2) == 0, 64)
		require.Equal(t, wire.DropNone, wire.Parse(tp.frame(), &p))
		checkParsed(t, tp, &p)
	}
}

// ibCase breaks one thing in an otherwise good InfiniBand packet.
type ibCase struct {
	name string
	want wire.DropReason
	// build returns the packet, BTH through ICRC; reseal asks for a valid
	// ICRC to be computed over it afterwards, so that the one broken
	// thing is all that is wrong.
	build  func(n *wire.Net) []byte
	reseal bool
}

// rawPacket encodes headers for op, then sets the pad count, appends data
// (payload and pad together) and room for the ICRC, without any checks.
func rawPacket(op wire.OpCode, pad int, data int) []byte {
	h := randHeaders(newRand(uint64(op)), op)
	h.BTH.TVer = 0
	b := make([]byte, h.Len()+data+4)
	h.Encode(b, 0)
	wire.BTH(b).SetPadCount(pad)
	for i := range data {
		b[h.Len()+i] = byte(i + 1)
	}
	return b
}

func ibCases() []ibCase {
	var cs []ibCase
	good := func(op wire.OpCode, pl int) func(n *wire.Net) []byte {
		return func(n *wire.Net) []byte {
			h := canonical(randHeaders(newRand(uint64(op)+100), op), pl)
			return wire.AppendPacket(nil, n, &h, bytes.Repeat([]byte{0x5a}, pl))
		}
	}
	// Truncated at every length short of the opcode's headers plus ICRC,
	// so at every header boundary.
	for _, op := range validOpCodes() {
		e := expectedOps[op]
		for l := 0; l < e.hdrLen+4; l++ {
			cs = append(cs, ibCase{fmt.Sprintf("truncated/%s/%d", op, l), wire.DropTruncated,
				func(n *wire.Net) []byte { return good(op, 0)(n)[:l] }, l >= 16})
		}
	}
	for tver := 1; tver < 16; tver++ {
		cs = append(cs, ibCase{fmt.Sprintf("TVer %d", tver), wire.DropBadTVer, func(n *wire.Net) []byte {
			b := good(wire.RCSendOnly, 8)(n)
			b[1] |= byte(tver)
			return b
		}, true})
	}
	for i := range 256 {
		op := wire.OpCode(i)
		if _, ok := expectedOps[op]; ok {
			continue
		}
		want := wire.DropReservedOpCode
		if i >= 0x40 && i <= 0x5f {
			want = wire.DropUnsupportedTransport
		}
		cs = append(cs, ibCase{fmt.Sprintf("opcode 0x%02x", i), want, func(n *wire.Net) []byte {
			b := good(wire.RCSendOnly, 64)(n)
			b[0] = byte(op)
			return b
		}, true})
	}
	for _, op := range []wire.OpCode{wire.RCAcknowledge, wire.RCAtomicAcknowledge, wire.RCRDMAReadRequest,
		wire.RCCompareSwap, wire.RCFetchAdd, wire.RCFlush, wire.CNP} {
		cs = append(cs,
			ibCase{fmt.Sprintf("payload on %s", op), wire.DropPayloadNotAllowed, good(op, 4), true},
			ibCase{fmt.Sprintf("payload and pad on %s", op), wire.DropPayloadNotAllowed,
				func(*wire.Net) []byte { return rawPacket(op, 3, 4) }, true},
			ibCase{fmt.Sprintf("pad on %s", op), wire.DropBadPad,
				func(*wire.Net) []byte { return rawPacket(op, 1, 0) }, true},
			ibCase{fmt.Sprintf("no payload %s", op), wire.DropNone, good(op, 0), true},
		)
	}
	for _, pl := range []int{0, 1, 4, 7, 9, 12, 16} {
		cs = append(cs, ibCase{fmt.Sprintf("atomic write with %d bytes", pl), wire.DropBadPayloadLength,
			good(wire.RCAtomicWrite, pl), true})
	}
	cs = append(cs, ibCase{"atomic write with 8 bytes", wire.DropNone, good(wire.RCAtomicWrite, 8), true})
	for _, op := range []wire.OpCode{wire.RCSendOnly, wire.RCRDMAWriteFirst, wire.UDSendOnly, wire.RCRDMAReadResponseLast} {
		for pad := 1; pad < 4; pad++ {
			cs = append(cs, ibCase{fmt.Sprintf("%s pad %d > data 0", op, pad), wire.DropBadPad,
				func(*wire.Net) []byte { return rawPacket(op, pad, 0) }, true})
		}
		for _, data := range []int{1, 2, 3, 5, 6, 7, 4097} {
			for pad := range 4 {
				cs = append(cs, ibCase{fmt.Sprintf("%s pad %d data %d", op, pad, data), wire.DropBadPad,
					func(*wire.Net) []byte { return rawPacket(op, pad, data) }, true})
			}
		}
		// Pad bytes themselves are not checked (rxe does not either).
		cs = append(cs, ibCase{fmt.Sprintf("%s non-zero pad bytes", op), wire.DropNone,
			func(*wire.Net) []byte { return rawPacket(op, 3, 8) }, true})
	}
	return cs
}

// TestParseTransportDrops runs every one-thing-broken InfiniBand packet
// through ParseTransport, then (wrapped in consistent IP and UDP headers)
// through Parse and ParseDatagram, IPv4 and IPv6.
func TestParseTransportDrops(t *testing.T) {
	r := newRand(5)
	for _, tc := range ibCases() {
		t.Run(tc.name, func(t *testing.T) {
			for _, v6 := range []bool{false, true} {
				n := randNet(r, v6)
				ib := tc.build(&n)
				if tc.reseal {
					wire.PutICRC(&n, ib)
				}
				var p wire.Packet
				require.Equal(t, tc.want, wire.ParseTransport(ib, &p), "ParseTransport")
				require.Equal(t, tc.want, wire.Parse(frameFor(&n, ib), &p), "Parse")
				dn := n
				dn.ID = 0
				require.Equal(t, tc.want, wire.ParseDatagram(ib, &dn, &p), "ParseDatagram")
			}
		})
	}
}

// TestParseICRCDrops breaks only the ICRC: ParseTransport accepts, Parse
// and ParseDatagram drop.
func TestParseICRCDrops(t *testing.T) {
	r := newRand(6)
	for _, tc := range []struct {
		name    string
		corrupt func(tp *testPacket)
	}{
		{"payload bit", func(tp *testPacket) { tp.ib[12+r.IntN(len(tp.payload))] ^= 1 << r.IntN(8) }},
		{"ICRC bit", func(tp *testPacket) { tp.ib[len(tp.ib)-1-r.IntN(4)] ^= 1 << r.IntN(8) }},
		{"ICRC zero", func(tp *testPacket) { copy(tp.ib[len(tp.ib)-4:], []byte{0, 0, 0, 0}) }},
		{"PSN bit", func(tp *testPacket) { tp.ib[11] ^= 1 }},
		{"AckReq", func(tp *testPacket) { tp.ib[8] ^= 0x80 }},
		{"BTH Resv7", func(tp *testPacket) { tp.ib[8] ^= 0x01 }},
		{"P_Key", func(tp *testPacket) { tp.ib[2] ^= 0x80 }},
		{"source port", func(tp *testPacket) { tp.net.SrcPort ^= 1 }},
		{"source address", func(tp *testPacket) { tp.net.Src = tp.net.Dst }},
		{"byte-swapped ICRC", func(tp *testPacket) {
			i := tp.ib[len(tp.ib)-4:]
			binary.BigEndian.PutUint32(i, binary.LittleEndian.Uint32(i))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v6 := range []bool{false, true} {
				tp := randPacket(r, wire.RCSendOnly, v6, 200)
				for len(tp.payload) < 8 {
					tp = randPacket(r, wire.RCSendOnly, v6, 200)
				}
				frame := tp.frame() // before the break: the headers as sent
				before := bytes.Clone(tp.ib)
				tc.corrupt(&tp)
				if tc.name == "byte-swapped ICRC" && bytes.Equal(before, tp.ib) {
					continue // a palindromic ICRC
				}
				copy(frame[ibOffset(frame):], tp.ib)
				var p wire.Packet
				require.Equal(t, wire.DropNone, wire.ParseTransport(tp.ib, &p))
				require.Equal(t, wire.DropBadICRC, wire.Parse(frameFor(&tp.net, tp.ib), &p), "Parse")
				require.Equal(t, wire.DropBadICRC, wire.ParseDatagram(tp.ib, &tp.net, &p), "ParseDatagram")
				if tc.name != "source port" && tc.name != "source address" {
					require.Equal(t, wire.DropBadICRC, wire.Parse(frame, &p), "Parse, original headers")
				}
			}
		})
	}
}

// TestParseICRCMaskedFields changes only what the ICRC does not cover: the
// packet must still verify.
func TestParseICRCMaskedFields(t *testing.T) {
	r := newRand(7)
	for _, v6 := range []bool{false, true} {
		for range 50 {
			tp := randPacket(r, wire.RCRDMAWriteFirst, v6, 100)
			frame := tp.frame()
			ip := frame
			udp := frame[ibOffset(frame)-8:]
			if v6 {
				ip[0] = 0x60 | byte(r.IntN(16))
				ip[1], ip[2], ip[3] = byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())
				ip[7] = byte(r.Uint32())
			} else {
				ip[1], ip[8] = byte(r.Uint32()), byte(r.Uint32())
				ip[10], ip[11] = byte(r.Uint32()), byte(r.Uint32()) // header checksum is not checked
			}
			udp[6], udp[7] = byte(r.Uint32()), byte(r.Uint32())
			udp[8+4] = byte(r.Uint32()) // FECN, BECN, Resv6
			var p wire.Packet
			require.Equal(t, wire.DropNone, wire.Parse(frame, &p))
		}
	}
}

// TestParseFrameDrops breaks the IP or UDP header of a good frame.
func TestParseFrameDrops(t *testing.T) {
	r := newRand(8)
	v4 := func() []byte { return randPacket(r, wire.RCSendOnly, false, 64).frame() }
	v6 := func() []byte { return randPacket(r, wire.RCSendOnly, true, 64).frame() }
	put16 := func(b []byte, off int, v int) []byte { binary.BigEndian.PutUint16(b[off:], uint16(v)); return b }
	// wrapIB puts consistent headers around an InfiniBand packet of ibLen
	// bytes cut from a good one.
	cutUDP := func(v6 bool, udpLen int) []byte {
		n := randNet(r, v6)
		h := refIPUDP(&n, 0)
		h = h[:len(h)-8]
		if v6 {
			put16(h, 4, udpLen)
		} else {
			put16(h, 2, 20+udpLen)
		}
		return append(h, make([]byte, udpLen)...)
	}
	type frameCase struct {
		name  string
		frame []byte
		want  wire.DropReason
	}
	cs := []frameCase{
		{"empty", nil, wire.DropTruncated},
		{"IPv4 header cut", v4()[:19], wire.DropTruncated},
		{"IPv4 one byte", []byte{0x45}, wire.DropTruncated},
		{"IPv6 header cut", v6()[:39], wire.DropTruncated},
		{"IPv4 UDP header cut", cutUDP(false, 7), wire.DropTruncated},
		{"IPv6 UDP header cut", cutUDP(true, 7), wire.DropTruncated},
		{"IPv4 no UDP", cutUDP(false, 0), wire.DropTruncated},
		{"IPv4 frame shorter than total length", v4()[:50], wire.DropIPHeader},
		{"IPv6 frame shorter than payload length", v6()[:70], wire.DropIPHeader},
		{"IPv4 total length below header", put16(v4(), 2, 19), wire.DropIPHeader},
		{"IPv4 IHL 4", func() []byte { b := v4(); b[0] = 0x44; return b }(), wire.DropIPHeader},
		{"IPv4 IHL 15", func() []byte { b := v4(); b[0] = 0x4f; return b }(), wire.DropIPHeader},
		{"IPv4 options", func() []byte {
			b := v4()
			// A 4-byte NOP option, lengths adjusted.
			o := append(append(append([]byte{}, b[:20]...), 1, 1, 1, 1), b[20:]...)
			o[0] = 0x46
			return put16(o, 2, len(o))
		}(), wire.DropIPHeader},
		{"IPv4 more fragments", func() []byte { b := v4(); b[6] |= 0x20; return b }(), wire.DropIPHeader},
		{"IPv4 fragment offset", func() []byte { b := v4(); b[7] |= 1; return b }(), wire.DropIPHeader},
		{"IPv4 fragment offset high bit", func() []byte { b := v4(); b[6] |= 0x10; return b }(), wire.DropIPHeader},
		{"IPv4 reserved flag", func() []byte { b := v4(); b[6] |= 0x80; return b }(), wire.DropIPHeader},
		{"IPv4 TCP", func() []byte { b := v4(); b[9] = 6; return b }(), wire.DropNotUDP},
		{"IPv6 TCP", func() []byte { b := v6(); b[6] = 6; return b }(), wire.DropNotUDP},
		{"IPv6 hop-by-hop header", func() []byte { b := v6(); b[6] = 0; return b }(), wire.DropNotUDP},
		{"IPv4 port 4792", put16(v4(), 22, 4792), wire.DropNotRoCEv2},
		{"IPv6 port 4792", put16(v6(), 42, 4792), wire.DropNotRoCEv2},
		{"IPv4 ports swapped", func() []byte { b := v4(); put16(b, 20, 4791); return put16(b, 22, 1000) }(), wire.DropNotRoCEv2},
		{"IPv4 UDP length 0", put16(v4(), 24, 0), wire.DropUDPLength},
		{"IPv4 UDP length 8", put16(v4(), 24, 8), wire.DropUDPLength},
		{"IPv6 UDP length 0xffff", put16(v6(), 44, 0xffff), wire.DropUDPLength},
	}
	for _, ver := range []byte{0, 1, 2, 3, 5, 7, 8, 15} {
		b := v4()
		b[0] = ver<<4 | 5
		cs = append(cs, frameCase{fmt.Sprintf("IP version %d", ver), b, wire.DropNotIP})
	}
	for _, d := range []int{-1, 1, -4, 4} {
		b := v4()
		put16(b, 24, int(binary.BigEndian.Uint16(b[24:]))+d)
		cs = append(cs, frameCase{fmt.Sprintf("IPv4 UDP length %+d", d), b, wire.DropUDPLength})
		b = v6()
		put16(b, 44, int(binary.BigEndian.Uint16(b[44:]))+d)
		cs = append(cs, frameCase{fmt.Sprintf("IPv6 UDP length %+d", d), b, wire.DropUDPLength})
	}
	for _, tc := range cs {
		t.Run(tc.name, func(t *testing.T) {
			var p wire.Packet
			require.Equal(t, tc.want, wire.Parse(tc.frame, &p))
		})
	}
}

// TestParseDatagramFamilies covers ParseDatagram's use of n: the IPv4 ID
// is recovered whatever n.ID says, a wrong DontFragment or address fails,
// and IPv6 checks the full ICRC.
func TestParseDatagramFamilies(t *testing.T) {
	r := newRand(9)
	for range 100 {
		tp := randPacket(r, wire.UDSendOnly, false, 256)
		var p wire.Packet
		n := tp.net
		n.ID = ^tp.net.ID
		require.Equal(t, wire.DropNone, wire.ParseDatagram(tp.ib, &n, &p))
		require.Equal(t, tp.net.ID, p.Net.ID)
		require.Equal(t, tp.net, p.Net)

		n.DontFragment = !n.DontFragment
		require.Equal(t, wire.DropBadICRC, wire.ParseDatagram(tp.ib, &n, &p))

		n = tp.net
		n.Dst = netip.AddrFrom4([4]byte{10, 0, 0, byte(r.Uint32())})
		if n.Dst != tp.net.Dst {
			require.Equal(t, wire.DropBadICRC, wire.ParseDatagram(tp.ib, &n, &p))
		}

		tp6 := randPacket(r, wire.UDSendOnly, true, 256)
		n = tp6.net
		require.Equal(t, wire.DropNone, wire.ParseDatagram(tp6.ib, &n, &p))
		require.Equal(t, tp6.net, p.Net)
		n.HopLimit++ // masked
		n.FlowLabel ^= 0x12345
		require.Equal(t, wire.DropNone, wire.ParseDatagram(tp6.ib, &n, &p))
		n.DstPort++
		require.Equal(t, wire.DropBadICRC, wire.ParseDatagram(tp6.ib, &n, &p))
	}
}

// TestEncodeIPUDP compares the package's IP and UDP headers with the
// reference ones, byte for byte.
func TestEncodeIPUDP(t *testing.T) {
	r := newRand(10)
	for range 200 {
		v6 := r.IntN(2) == 0
		n := randNet(r, v6)
		ibLen := r.IntN(9000)
		want := refIPUDP(&n, ibLen)
		got := dirty(len(want) + 4)
		require.Equal(t, len(want), wire.EncodeIPUDP(got, &n, ibLen))
		require.Equal(t, want, got[:len(want)])
		require.Equal(t, len(want), n.IPHeaderSize()+wire.UDPHeaderSize)
		require.Equal(t, v6, n.IsIPv6())
	}
}

// TestAppendFrame checks the appending helpers: they extend dst without
// touching what it held, and the frame parses back.
func TestAppendFrame(t *testing.T) {
	r := newRand(11)
	for _, v6 := range []bool{false, true} {
		tp := randPacket(r, wire.RCRDMAWriteOnlyWithImm, v6, 50)
		prefix := []byte("prefix")
		for _, dst := range [][]byte{nil, bytes.Clone(prefix), append(make([]byte, 0, 4096), prefix...)} {
			out := wire.AppendFrame(dst, &tp.net, &tp.hdr, tp.payload)
			require.True(t, bytes.Equal(dst, out[:len(dst)]))
			require.Equal(t, tp.frame(), out[len(dst):])
			out = wire.AppendPacket(dst, &tp.net, &tp.hdr, tp.payload)
			require.True(t, bytes.Equal(dst, out[:len(dst)]))
			require.Equal(t, tp.ib, out[len(dst):])
		}
	}
}

// TestParseDatagramBadNet: a Net without valid addresses (which callers
// should never pass) makes ParseDatagram drop the packet, not panic.
func TestParseDatagramBadNet(t *testing.T) {
	r := newRand(12)
	tp := randPacket(r, wire.RCSendOnly, false, 64)
	for _, n := range []wire.Net{
		{},
		{Src: tp.net.Src},
		{Dst: tp.net.Dst},
		{Src: tp.net.Src, Dst: netip.IPv6Loopback()},
		{Src: netip.IPv6Loopback()},
	} {
		var p wire.Packet
		require.NotPanics(t, func() {
			require.Equal(t, wire.DropBadICRC, wire.ParseDatagram(tp.ib, &n, &p))
		})
	}
}
