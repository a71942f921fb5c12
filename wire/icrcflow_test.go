package wire_test

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// oddNets are Nets a bad caller or the receive path may hand over: zero
// or mixed-family addresses. The cache must give what the plain functions
// give for them, and never panic.
func oddNets() []wire.Net {
	v4 := netip.AddrFrom4([4]byte{10, 77, 0, 2})
	v6 := netip.MustParseAddr("fd00::3")
	mapped := netip.AddrFrom16(v4.As16())
	return []wire.Net{
		{},
		{DstPort: wire.RoCEv2Port, DontFragment: true},
		{Dst: v4, SrcPort: 1, DstPort: wire.RoCEv2Port},
		{Src: v4, SrcPort: 2, DstPort: wire.RoCEv2Port, ID: 7},
		{Src: v4, Dst: v6, SrcPort: 3, DstPort: wire.RoCEv2Port, DontFragment: true},
		{Src: v6, Dst: v4, SrcPort: 4, DstPort: wire.RoCEv2Port},
		{Src: mapped, Dst: v4, SrcPort: 5, DstPort: wire.RoCEv2Port},
		{Src: v4, Dst: mapped, SrcPort: 6, DstPort: wire.RoCEv2Port},
		{Src: netip.MustParseAddr("fe80::1%eth0"), Dst: v6, DstPort: wire.RoCEv2Port},
	}
}

// flowNets returns n random flows of both families, flows that differ
// from one of them in a single key field, and the odd ones, with a random
// ID each (ignored for IPv6, as the ICRC has none).
func flowNets(r *rand.Rand, n int) []wire.Net {
	nets := oddNets()
	for range n {
		nets = append(nets, randNet(r, r.IntN(3) == 0))
	}
	base := randNet(r, false)
	nets = append(nets, base)
	for i := range 5 {
		v := base
		switch i {
		case 4:
			v.Src = v.Src.Next()
		case 0:
			v.DontFragment = !v.DontFragment
		case 1:
			v.SrcPort++
		case 2:
			v.DstPort++
		case 3:
			v.Dst = v.Dst.Next()
		}
		nets = append(nets, v)
	}
	return nets
}

// TestICRCFlowDifferential: one ICRCFlow, used for flows that change,
// repeat and come back, gives what the plain functions give, for random
// bytes of random lengths: ICRC, ICRCGather, Seal and SolveIPv4ID (on
// sealed packets, which solve, and on random ones, which mostly do not).
func TestICRCFlowDifferential(t *testing.T) {
	r := newRand(70)
	nets := flowNets(r, 12)
	var f wire.ICRCFlow
	cur := 0
	for i := range 20000 {
		switch r.IntN(4) {
		case 0: // another flow, or back to an earlier one
			cur = r.IntN(len(nets))
		case 1: // the same flow with a new ID
			nets[cur].ID = uint16(r.Uint32())
		}
		n := nets[cur]
		size := wire.BTHSize + wire.ICRCSize + r.IntN(200)
		if i%100 == 0 {
			size += r.IntN(9000)
		}
		pkt := randBytes(r, size)
		ib := pkt[:size-wire.ICRCSize]
		require.Equal(t, wire.ICRC(&n, ib), f.ICRC(&n, ib), "ICRC %d: %+v", i, n)

		hl := wire.BTHSize + r.IntN(len(ib)-wire.BTHSize+1)
		pad := r.IntN(4)
		require.Equal(t, wire.ICRCGather(&n, ib[:hl], ib[hl:], pad), f.ICRCGather(&n, ib[:hl], ib[hl:], pad),
			"ICRCGather %d: %+v", i, n)

		want, got := bytes.Clone(pkt), bytes.Clone(pkt)
		wire.Seal(&n, want)
		f.Seal(&n, got)
		require.Equal(t, want, got, "Seal %d: %+v", i, n)

		for _, p := range [][]byte{pkt, want} {
			q := n
			q.ID = uint16(r.Uint32()) // ignored
			id, ok := wire.SolveIPv4ID(&q, p)
			fid, fok := f.SolveIPv4ID(&q, p)
			require.Equal(t, ok, fok, "SolveIPv4ID %d: %+v", i, n)
			require.Equal(t, id, fid, "SolveIPv4ID %d: %+v", i, n)
		}
		if n.Src.Is4() {
			id, ok := f.SolveIPv4ID(&n, want)
			require.True(t, ok)
			require.Equal(t, n.ID, id)
		}
	}
}

// TestICRCFlowOddNets: Nets with zero or mixed-family addresses take the
// plain path's result through the cache and do not panic, before and
// after a valid flow was cached.
func TestICRCFlowOddNets(t *testing.T) {
	r := newRand(71)
	pkt := randBytes(r, 64)
	valid := randNet(r, false)
	for _, fresh := range []bool{true, false} {
		for _, n := range oddNets() {
			var f wire.ICRCFlow
			if !fresh {
				f.ICRC(&valid, pkt)
			}
			require.NotPanics(t, func() {
				require.Equal(t, wire.ICRC(&n, pkt), f.ICRC(&n, pkt))
				id, ok := wire.SolveIPv4ID(&n, pkt)
				fid, fok := f.SolveIPv4ID(&n, pkt)
				require.Equal(t, ok, fok)
				require.Equal(t, id, fid)
			}, "%+v", n)
			// The flow cached before is not disturbed.
			require.Equal(t, wire.ICRC(&valid, pkt), f.ICRC(&valid, pkt))
		}
	}
	// The zero ICRCFlow holds no flow, not the zero Net's.
	var f wire.ICRCFlow
	var zero wire.Net
	require.Equal(t, wire.ICRC(&zero, pkt), f.ICRC(&zero, pkt))
	zero.Src, zero.Dst = netip.AddrFrom4([4]byte{}), netip.AddrFrom4([4]byte{})
	require.Equal(t, wire.ICRC(&zero, pkt), f.ICRC(&zero, pkt))
}

// TestParseDatagramFlow: ParseDatagramFlow, through one ICRCFlow or none,
// gives ParseDatagram's drop reason and Packet (with the recovered ID) for
// valid packets of every opcode, IPv4 and IPv6, and for corrupted ones.
func TestParseDatagramFlow(t *testing.T) {
	r := newRand(72)
	ops := validOpCodes()
	var f wire.ICRCFlow
	var flows []wire.Net
	for i := range 4000 {
		tp := randPacket(r, ops[r.IntN(len(ops))], r.IntN(3) == 0, []int{0, 8, 64, 300}[i%4])
		if len(flows) > 0 && r.IntN(2) == 0 {
			// An earlier flow: reseal for it.
			id := tp.net.ID
			tp.net = flows[r.IntN(len(flows))]
			if !tp.net.IsIPv6() {
				tp.net.ID = id
			}
			wire.Seal(&tp.net, tp.ib)
		} else if len(flows) < 8 {
			flows = append(flows, tp.net)
		}
		ib := tp.ib
		if i%3 != 0 {
			ib = bytes.Clone(ib)
			switch r.IntN(3) {
			case 0:
				k := r.IntN(8 * len(ib))
				ib[k/8] ^= 1 << (k % 8)
			case 1:
				ib = ib[:r.IntN(len(ib)+1)]
			default:
				ib[r.IntN(len(ib))] = byte(r.Uint32())
			}
		}
		n := tp.net
		n.ID = 0 // a socket does not tell it
		var want, got, plain wire.Packet
		wr := wire.ParseDatagram(ib, &n, &want)
		require.Equal(t, wr, wire.ParseDatagramFlow(ib, &n, &got, &f), "%d: %s", i, tp.hdr.BTH.OpCode)
		require.Equal(t, want, got, "%d", i)
		require.Equal(t, wr, wire.ParseDatagramFlow(ib, &n, &plain, nil))
		require.Equal(t, want, plain)
		if i%3 == 0 {
			require.Equal(t, wire.DropNone, wr)
			require.Equal(t, tp.net, got.Net, "the ID recovered")
		}
	}
}

// TestICRCFlowAllocs: neither a cached flow nor a change of flow
// allocates.
func TestICRCFlowAllocs(t *testing.T) {
	r := newRand(73)
	a, c := randNet(r, false), randNet(r, false)
	pkt := randBytes(r, 100)
	var f wire.ICRCFlow
	require.Zero(t, testing.AllocsPerRun(100, func() {
		f.Seal(&a, pkt)
		f.Seal(&a, pkt)
		f.Seal(&c, pkt)
	}))
}

// TestICRCFlows: For gives each flow one ICRCFlow, the same every time;
// eight flows from one address on consecutive source ports (an rxe peer's
// QPs) get eight different ones; and packets checked through For, flows
// interleaved, parse as ParseDatagram parses them.
func TestICRCFlows(t *testing.T) {
	var fs wire.ICRCFlows
	base := wire.Net{Src: netip.AddrFrom4([4]byte{10, 77, 0, 2}), Dst: netip.AddrFrom4([4]byte{10, 77, 0, 3}),
		SrcPort: 0xc270, DstPort: wire.RoCEv2Port, DontFragment: true}
	seen := map[*wire.ICRCFlow]bool{}
	var pkts [][]byte
	var nets []wire.Net
	for i := range 8 {
		n := base
		n.SrcPort += uint16(i)
		n.ID = uint16(100 + i)
		require.Same(t, fs.For(&n), fs.For(&n))
		seen[fs.For(&n)] = true
		h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff, DestQP: uint32(0x10 + i), PSN: wire.PSN(i)}}
		pkts = append(pkts, wire.AppendPacket(nil, &n, &h, bytes.Repeat([]byte{byte(i)}, 64)))
		n.ID = 0 // as the socket delivers it
		nets = append(nets, n)
	}
	require.Len(t, seen, 8, "consecutive source ports share an ICRCFlow")
	require.NotPanics(t, func() { fs.For(&wire.Net{}) })
	var got, want wire.Packet
	for round := range 3 {
		for i, b := range pkts {
			n := nets[i]
			require.Equal(t, wire.DropNone, wire.ParseDatagramFlow(b, &n, &got, fs.For(&n)), "round %d flow %d", round, i)
			require.Equal(t, wire.DropNone, wire.ParseDatagram(b, &n, &want))
			require.Equal(t, want, got)
			require.Equal(t, uint16(100+i), got.Net.ID)
		}
	}
}
