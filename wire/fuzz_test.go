package wire_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// Fuzz targets (style §3.7, after quic-go's FuzzFrames): whatever the
// input, nothing panics, and whatever parses re-encodes to something that
// parses to the same values, at the length the PacketLen formula gives.
// Seeds: every captured rxe frame and synthesised packets of every valid
// opcode, IPv4 and IPv6.

// seedPackets returns synthesised packets of every valid opcode with a few
// payload lengths, both families.
func seedPackets() []testPacket {
	r := newRand(50)
	var out []testPacket
	for _, op := range validOpCodes() {
		for _, v6 := range []bool{false, true} {
			for _, max := range []int{0, 3, 33} {
				out = append(out, randPacket(r, op, v6, max))
			}
		}
	}
	return out
}

func FuzzParse(f *testing.F) {
	for _, fr := range captureIPFrames(f) {
		f.Add(fr)
	}
	for _, tp := range seedPackets() {
		f.Add(tp.frame())
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		var p wire.Packet
		r := wire.Parse(frame, &p)
		require.Less(t, int(r), wire.NumDropReasons)
		if r == wire.DropBadICRC {
			// Everything else was right: with the ICRC fixed the frame
			// must parse. (This also lets mutations reach the checks
			// below, which a random ICRC almost never would.)
			frame = bytes.Clone(frame)
			off := ibOffset(frame)
			wire.PutICRC(&p.Net, frame[off:off+len(p.Raw)])
			r = wire.Parse(frame, &p)
			require.Equal(t, wire.DropNone, r, "ICRC fixed")
		}
		if r != wire.DropNone {
			return
		}
		h := p.Headers()
		payload := bytes.Clone(p.Payload)
		n := p.Net
		require.NoError(t, h.Validate(len(payload)))
		require.True(t, wire.CheckICRC(&n, p.Raw))

		out := wire.AppendFrame(nil, &n, &h, payload)
		require.Len(t, out, n.IPHeaderSize()+wire.UDPHeaderSize+h.PacketLen(len(payload)))
		var q wire.Packet
		require.Equal(t, wire.DropNone, wire.Parse(out, &q))
		require.Equal(t, h, q.Headers())
		require.Equal(t, payload, q.Payload)
		require.Equal(t, n, q.Net)
		// The re-encoding is a fixed point.
		require.Equal(t, out, wire.AppendFrame(nil, &q.Net, &h, q.Payload))
		// And it is the input, but for what the fields do not keep.
		requireSameBut(t, frame[:len(out)], out, notKept(frame[:len(out)], h.BTH.OpCode, len(q.Pad)))
	})
}

// notKept marks the bits of a good frame that Parse does not report and
// AppendFrame therefore writes its own way: the IPv4 header checksum, the
// UDP checksum, and what notKeptIB marks.
func notKept(frame []byte, op wire.OpCode, pad int) []byte {
	m := make([]byte, len(frame))
	off := ibOffset(frame)
	if frame[0]>>4 == 4 {
		m[10], m[11] = 0xff, 0xff
	}
	m[off-2], m[off-1] = 0xff, 0xff
	markNotKeptIB(m[off:], op, pad)
	return m
}

// markNotKeptIB marks, in the mask m of an InfiniBand packet, the reserved
// bits and bytes (BTH Resv6 and Resv7, the DETH reserved byte, FETH
// reserved bits, the CNP's reserved block), the pad bytes, and the ICRC,
// which covers some of them.
func markNotKeptIB(m []byte, op wire.OpCode, pad int) {
	m[4] |= 0x3f
	m[8] |= 0x7f
	h := 12
	for _, name := range expectedOps[op].hdrs {
		switch name {
		case "DETH":
			m[h+4] = 0xff
			h += 8
		case "FETH":
			m[h], m[h+1], m[h+2], m[h+3] = 0xff, 0xff, 0xff, 0xc0
			h += 4
		case "CNPReserved":
			for i := range 16 {
				m[h+i] = 0xff
			}
			h += 16
		case "RETH":
			h += 16
		case "AtomicETH":
			h += 28
		case "AtomicAckETH":
			h += 8
		default: // AETH, ImmDt, IETH
			h += 4
		}
	}
	for i := len(m) - 4 - pad; i < len(m); i++ {
		m[i] = 0xff
	}
}

// requireSameBut checks that got equals want except for the bits of mask.
func requireSameBut(t *testing.T, want, got, mask []byte) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range got {
		if mask[i] != 0xff {
			require.Equal(t, want[i]&^mask[i], got[i]&^mask[i], "byte %d of %x", i, got)
		}
	}
}

func FuzzParseTransport(f *testing.F) {
	for _, fr := range captureIPFrames(f) {
		f.Add(fr[ibOffset(fr):])
	}
	for _, tp := range seedPackets() {
		f.Add(tp.ib)
	}
	n := randNet(newRand(51), false)
	f.Fuzz(func(t *testing.T, ib []byte) {
		var p wire.Packet
		r := wire.ParseTransport(ib, &p)
		require.Less(t, int(r), wire.NumDropReasons)
		if r != wire.DropNone {
			return
		}
		h := p.Headers()
		payload := bytes.Clone(p.Payload)
		require.NoError(t, h.Validate(len(payload)))
		// The views tile the packet.
		require.Equal(t, len(ib), h.Len()+len(p.Payload)+len(p.Pad)+wire.ICRCSize)
		require.Equal(t, len(ib), h.PacketLen(len(payload)))
		require.Equal(t, ib, p.Raw)

		out := wire.AppendPacket(nil, &n, &h, payload)
		require.Len(t, out, h.PacketLen(len(payload)))
		require.True(t, wire.CheckICRC(&n, out))
		var q wire.Packet
		require.Equal(t, wire.DropNone, wire.ParseTransport(out, &q))
		require.Equal(t, h, q.Headers())
		require.Equal(t, payload, q.Payload)
		mask := make([]byte, len(ib))
		markNotKeptIB(mask, h.BTH.OpCode, len(p.Pad))
		requireSameBut(t, ib, out, mask)
	})
}

// datagramNet builds the Net a UDP socket would report from fuzzed
// address bytes: IPv6 when both are 16 bytes long, otherwise IPv4 from the
// first 4 bytes (zero-padded). A 1-byte src gives the zero Addr (and a
// 1-byte dst an IPv6 Dst), which callers should not pass but which must
// not crash the parser either.
func datagramNet(src, dst []byte, srcPort uint16, df bool) wire.Net {
	n := wire.Net{SrcPort: srcPort, DstPort: wire.RoCEv2Port, DontFragment: df}
	if len(src) == 1 {
		if len(dst) == 1 {
			n.Dst = netip.IPv6Loopback()
		}
		return n
	}
	if len(src) == 16 && len(dst) == 16 {
		n.Src, n.Dst = netip.AddrFrom16([16]byte(src)), netip.AddrFrom16([16]byte(dst))
		n.DontFragment = false
		return n
	}
	var s, d [4]byte
	copy(s[:], src)
	copy(d[:], dst)
	n.Src, n.Dst = netip.AddrFrom4(s), netip.AddrFrom4(d)
	return n
}

// fuzzFlow is the ICRCFlow FuzzParseDatagram checks ParseDatagramFlow
// through: one for all inputs, so that each finds the previous one's flow.
// Fuzz inputs run one at a time in a process.
var fuzzFlow wire.ICRCFlow

func FuzzParseDatagram(f *testing.F) {
	for _, fr := range captureIPFrames(f) {
		df := binary.BigEndian.Uint16(fr[6:])&0x4000 != 0
		f.Add(fr[ibOffset(fr):], fr[12:16], fr[16:20], binary.BigEndian.Uint16(fr[20:]), df)
	}
	for _, tp := range seedPackets() {
		s, d := tp.net.Src.AsSlice(), tp.net.Dst.AsSlice()
		f.Add(tp.ib, s, d, tp.net.SrcPort, tp.net.DontFragment)
		f.Add(tp.ib, []byte{0}, d, tp.net.SrcPort, tp.net.DontFragment)
	}
	f.Fuzz(func(t *testing.T, ib, src, dst []byte, srcPort uint16, df bool) {
		n := datagramNet(src, dst, srcPort, df)
		var p wire.Packet
		r := wire.ParseDatagram(ib, &n, &p)
		require.Less(t, int(r), wire.NumDropReasons)
		// Through an ICRCFlow, as the engine parses: the same, whether
		// it held another flow (the package's) or this one.
		for range 2 {
			var q wire.Packet
			require.Equal(t, r, wire.ParseDatagramFlow(ib, &n, &q, &fuzzFlow))
			require.Equal(t, p, q)
		}
		if r == wire.DropBadICRC {
			// Seal it with an ID of the fuzzer's choice: it must parse and
			// give that ID back.
			ib = bytes.Clone(ib)
			sealed := n
			if !n.IsIPv6() {
				sealed.ID = srcPort*0x9e37 ^ 0x5a5a
			}
			wire.PutICRC(&sealed, ib)
			r = wire.ParseDatagram(ib, &n, &p)
			require.Equal(t, wire.DropNone, r, "ICRC fixed")
			require.Equal(t, sealed, p.Net)
		}
		if r != wire.DropNone {
			return
		}
		// What was recovered verifies the packet in full.
		require.True(t, wire.CheckICRC(&p.Net, ib))
		want := n
		want.ID = p.Net.ID
		require.Equal(t, want, p.Net)

		h := p.Headers()
		payload := bytes.Clone(p.Payload)
		out := wire.AppendPacket(nil, &p.Net, &h, payload)
		require.Len(t, out, h.PacketLen(len(payload)))
		var q wire.Packet
		require.Equal(t, wire.DropNone, wire.ParseDatagram(out, &n, &q))
		require.Equal(t, p.Net, q.Net, "the re-encoded packet gives back the same ID")
		require.Equal(t, h, q.Headers())
		require.Equal(t, payload, q.Payload)
		mask := make([]byte, len(ib))
		markNotKeptIB(mask, h.BTH.OpCode, len(p.Pad))
		requireSameBut(t, ib, out, mask)
		if !n.IsIPv6() {
			id, ok := wire.SolveIPv4ID(&n, out)
			require.True(t, ok)
			require.Equal(t, p.Net.ID, id)
		}

		// As a frame, it parses with the same Net (if n is one a socket
		// could report).
		if !n.Src.IsValid() || !n.Dst.IsValid() || n.Src.Is4() != n.Dst.Is4() {
			return
		}
		fr := wire.AppendFrame(nil, &p.Net, &h, payload)
		require.Equal(t, wire.DropNone, wire.Parse(fr, &q))
		require.Equal(t, p.Net, q.Net)
	})
}

// seedHeaderBytes gives the header fuzz targets all-zero, all-ones and
// captured bytes at the given offset after the BTH.
func seedHeaderBytes(f *testing.F, size int) {
	f.Add(make([]byte, size))
	f.Add(bytes.Repeat([]byte{0xff}, size))
	for _, fr := range captureIPFrames(f)[:20] {
		ib := fr[ibOffset(fr):]
		if len(ib) >= size {
			f.Add(ib[:size])
		}
		if len(ib) >= 12+size {
			f.Add(ib[12 : 12+size])
		}
	}
}

// checkReencode checks that Encode(Fields()) gives back b with the bits
// of mask (the header's reserved bits) cleared.
func checkReencode(t *testing.T, b, out, reservedMask []byte) {
	t.Helper()
	want := bytes.Clone(b)
	for i := range want {
		want[i] &^= reservedMask[i]
	}
	require.Equal(t, want, out)
}

func FuzzBTH(f *testing.F) {
	seedHeaderBytes(f, wire.BTHSize)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < wire.BTHSize {
			return
		}
		b = b[:wire.BTHSize]
		fl := wire.BTH(b).Fields()
		out := wire.BTH(dirty(wire.BTHSize))
		out.Encode(&fl)
		require.Equal(t, fl, out.Fields())
		checkReencode(t, b, out, unhex("00000000 3f000000 7f000000"))

		// Setters write their field from the fuzzed bytes and nothing else.
		v := binary.BigEndian.Uint32(b[8:]) ^ binary.BigEndian.Uint32(b[4:])
		s := wire.BTH(bytes.Clone(b))
		s.SetPSN(wire.PSN(v))
		s.SetDestQP(v >> 3)
		s.SetPadCount(int(v >> 7))
		s.SetAckReq(v&1 != 0)
		want := fl
		want.PSN, want.DestQP, want.PadCount, want.AckReq = wire.PSN(v&0xffffff), v>>3&0xffffff, int(v>>7)&3, v&1 != 0
		require.Equal(t, want, s.Fields())
		keep := unhex("ffcfffff ff000000 7f000000")
		for i := range b {
			require.Equal(t, b[i]&keep[i], s[i]&keep[i], "byte %d", i)
		}
	})
}

func FuzzRETH(f *testing.F) {
	seedHeaderBytes(f, wire.RETHSize)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < wire.RETHSize {
			return
		}
		b = b[:wire.RETHSize]
		fl := wire.RETH(b).Fields()
		out := wire.RETH(dirty(wire.RETHSize))
		out.Encode(&fl)
		require.Equal(t, fl, out.Fields())
		require.Equal(t, b, []byte(out))
	})
}

func FuzzAETH(f *testing.F) {
	seedHeaderBytes(f, wire.AETHSize)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < wire.AETHSize {
			return
		}
		b = b[:wire.AETHSize]
		a := wire.AETH(b)
		fl := a.Fields()
		out := wire.AETH(dirty(wire.AETHSize))
		out.Encode(&fl)
		require.Equal(t, fl, out.Fields())
		require.Equal(t, b, []byte(out))
		s := a.Syndrome()
		require.NotEmpty(t, s.String())
		require.Equal(t, wire.AckKind(b[0]>>5&3), s.Kind())
		require.Equal(t, b[0]&0x1f, s.Value())
		require.Positive(t, wire.RNRTimerMicros(s.Value()))
	})
}

func FuzzAtomicETH(f *testing.F) {
	seedHeaderBytes(f, wire.AtomicETHSize)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < wire.AtomicETHSize {
			return
		}
		b = b[:wire.AtomicETHSize]
		fl := wire.AtomicETH(b).Fields()
		out := wire.AtomicETH(dirty(wire.AtomicETHSize))
		out.Encode(&fl)
		require.Equal(t, fl, out.Fields())
		require.Equal(t, b, []byte(out))
	})
}

func FuzzAtomicAckETH(f *testing.F) {
	seedHeaderBytes(f, wire.AtomicAckETHSize)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < wire.AtomicAckETHSize {
			return
		}
		b = b[:wire.AtomicAckETHSize]
		out := wire.AtomicAckETH(dirty(wire.AtomicAckETHSize))
		out.SetOriginalRemoteData(wire.AtomicAckETH(b).OriginalRemoteData())
		require.Equal(t, b, []byte(out))
	})
}

func FuzzDETH(f *testing.F) {
	seedHeaderBytes(f, wire.DETHSize)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < wire.DETHSize {
			return
		}
		b = b[:wire.DETHSize]
		fl := wire.DETH(b).Fields()
		out := wire.DETH(dirty(wire.DETHSize))
		out.Encode(&fl)
		require.Equal(t, fl, out.Fields())
		checkReencode(t, b, out, unhex("00000000 ff000000"))
	})
}

func FuzzFETH(f *testing.F) {
	seedHeaderBytes(f, wire.FETHSize)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < wire.FETHSize {
			return
		}
		b = b[:wire.FETHSize]
		fl := wire.FETH(b).Fields()
		out := wire.FETH(dirty(wire.FETHSize))
		out.Encode(&fl)
		require.Equal(t, fl, out.Fields())
		checkReencode(t, b, out, unhex("ffffffc0"))
	})
}

func FuzzImmDtIETH(f *testing.F) {
	seedHeaderBytes(f, wire.ImmDtSize)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < wire.ImmDtSize {
			return
		}
		b = b[:wire.ImmDtSize]
		i := wire.ImmDt(dirty(wire.ImmDtSize))
		i.SetValue(wire.ImmDt(b).Value())
		require.Equal(t, b, []byte(i))
		e := wire.IETH(dirty(wire.IETHSize))
		e.SetRKey(wire.IETH(b).RKey())
		require.Equal(t, b, []byte(e))
	})
}

// FuzzTMH fuzzes a SEND payload through ParseTMH, then re-encodes the TMH
// and RVH it found.
func FuzzTMH(f *testing.F) {
	for _, op := range []wire.TMOpcode{wire.TMNoTag, wire.TMRendezvous, wire.TMFin, wire.TMEager, 7} {
		for _, l := range []int{0, 15, 16, 31, 32, 40} {
			b := make([]byte, l)
			if l > 0 {
				b[0] = byte(op)
			}
			f.Add(b)
		}
	}
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, payload []byte) {
		tmh, rvh, data, ok := wire.ParseTMH(payload)
		if !ok {
			need := wire.TMHSize
			if len(payload) >= 1 && wire.TMOpcode(payload[0]) == wire.TMRendezvous {
				need += wire.RVHSize
			}
			require.Less(t, len(payload), need)
			require.Nil(t, tmh)
			require.Nil(t, rvh)
			require.Nil(t, data)
			return
		}
		fl := tmh.Fields()
		out := wire.TMH(dirty(wire.TMHSize))
		out.Encode(&fl)
		require.Equal(t, fl, out.Fields())
		checkReencode(t, payload[:wire.TMHSize], out, unhex("00ffffff 00000000 0000000000000000"))
		n := wire.TMHSize
		if tmh.Opcode() == wire.TMRendezvous {
			require.Len(t, rvh, wire.RVHSize)
			rf := rvh.Fields()
			ro := wire.RVH(dirty(wire.RVHSize))
			ro.Encode(&rf)
			require.Equal(t, []byte(rvh), []byte(ro))
			n += wire.RVHSize
		} else {
			require.Nil(t, rvh)
		}
		require.Equal(t, payload[n:], data)
	})
}
