package pipe_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// Traffic classes: DSCP 46 (EF) with each ECN codepoint, so that a test
// also sees the DSCP bits pass untouched.
const (
	notECT = 0xb8
	ect1   = 0xb9
	ect0   = 0xba
	ce     = 0xbb
)

// sized builds a valid RC SEND Only whose PSN is i and whose whole packet
// (BTH through ICRC) is size bytes, sealed for n.
func sized(n *wire.Net, i, size int) []byte {
	h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, DestQP: 0x123, PSN: wire.PSN(i)}}
	b := wire.AppendPacket(nil, n, &h, make([]byte, size-wire.BTHSize-wire.ICRCSize))
	if len(b) != size {
		panic(fmt.Sprintf("sized: %d bytes, want %d", len(b), size))
	}
	return b
}

// sendTC sends packets first..first+len(tcs)-1, of size bytes, in one
// Send call, packet k with traffic class tcs[k].
func sendTC(t *testing.T, e *pipe.Endpoint, n *wire.Net, first, size int, tcs ...uint8) {
	t.Helper()
	pkts := make([]link.Packet, len(tcs))
	for k, tc := range tcs {
		pkts[k] = link.Packet{Buf: sized(n, first+k, size), Net: wire.Net{TrafficClass: tc}}
	}
	require.NoError(t, e.Send(pkts))
}

// repeat returns n copies of tc.
func repeat(tc uint8, n int) []uint8 {
	s := make([]uint8, n)
	for i := range s {
		s[i] = tc
	}
	return s
}

// tcs returns the index and traffic class of each packet.
func tcs(pkts []link.Packet) (idx []int, tc []uint8) {
	for _, p := range pkts {
		idx = append(idx, index(p.Buf))
		tc = append(tc, p.Net.TrafficClass)
	}
	return idx, tc
}

// TestBottleneckRate: packets that reach the bottleneck faster than Rate
// depart one len/Rate after the other, in order, and arrive Delay later,
// to the nanosecond; an idle bottleneck serves a packet from its arrival;
// the rounding to nanoseconds does not add up.
func TestBottleneckRate(t *testing.T) {
	t.Run("burst", func(t *testing.T) {
		clk := clock.NewFake(time0)
		// 1000-byte packets at 1 MB/s: 1 ms each.
		a, b := pair(t, pipe.Config{Clock: clk, Faults: pipe.Faults{Rate: 1e6, Delay: 5 * ms}})
		n := netFrom(t, a, b)
		sendTC(t, a, &n, 0, 1000, repeat(0, 10)...)
		require.Equal(t, 10, b.Queued())
		clk.Advance(5 * ms)
		for k := range 10 {
			clk.Advance(ms - 1)
			require.Empty(t, drain(t, b), "packet %d departs at %d ms, not before", k, k+1)
			clk.Advance(1)
			require.Equal(t, []int{k}, indices(drain(t, b)), "packet %d", k)
		}
		// Idle for a while: the next packet takes 1 ms from its arrival,
		// not from the last departure.
		clk.Advance(100 * ms)
		sendTC(t, a, &n, 10, 1000, 0)
		clk.Advance(6*ms - 1)
		require.Empty(t, drain(t, b))
		clk.Advance(1)
		require.Equal(t, []int{10}, indices(drain(t, b)))
		require.Equal(t, link.Stats{TxPackets: 11, TxBytes: 11000}, txPart(a.Stats()))
	})
	t.Run("steady sender", func(t *testing.T) {
		// One 1000-byte packet every 0.5 ms into a 1 ms/packet
		// bottleneck: they arrive one per ms, the queue growing.
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Clock: clk, Faults: pipe.Faults{Rate: 1e6}})
		n := netFrom(t, a, b)
		arrived := map[int]time.Duration{}
		for step := range 80 {
			if step < 20 {
				sendTC(t, a, &n, step, 1000, 0)
			}
			clk.Advance(ms / 2)
			for _, i := range indices(drain(t, b)) {
				arrived[i] = clk.Now().Sub(time0)
			}
		}
		require.Len(t, arrived, 20)
		for i := range 20 {
			require.Equal(t, time.Duration(i+1)*ms, arrived[i], "packet %d", i)
		}
	})
	t.Run("no rounding drift", func(t *testing.T) {
		// 1000 bytes at 3e8 B/s is 3333.3 ns: 300 packets take exactly
		// 1 ms, not 300 rounded-up nanoseconds more.
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Clock: clk, Faults: pipe.Faults{Rate: 3e8}})
		n := netFrom(t, a, b)
		sendTC(t, a, &n, 0, 1000, repeat(0, 300)...)
		clk.Advance(3333)
		require.Empty(t, drain(t, b), "the first departs at 3334 ns, rounded up")
		clk.Advance(1)
		require.Equal(t, []int{0}, indices(drain(t, b)))
		clk.Advance(ms - 3334 - 1)
		require.Equal(t, seq(1, 299), indices(drain(t, b)))
		clk.Advance(1)
		require.Equal(t, []int{299}, indices(drain(t, b)))
	})
	t.Run("rate change", func(t *testing.T) {
		// Queued packets keep their departures; the next ones follow the
		// last at the new rate.
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Clock: clk, Faults: pipe.Faults{Rate: 1e6}})
		n := netFrom(t, a, b)
		sendTC(t, a, &n, 0, 1000, 0, 0)
		a.SetFaults(pipe.Faults{Rate: 2e6})
		sendTC(t, a, &n, 2, 1000, 0, 0)
		var at []time.Duration
		for range 8 {
			clk.Advance(ms / 2)
			for range drain(t, b) {
				at = append(at, clk.Now().Sub(time0))
			}
		}
		require.Equal(t, []time.Duration{ms, 2 * ms, 5 * ms / 2, 3 * ms}, at)
	})
}

// TestBottleneckQueue: a packet that finds Queue packets waiting to
// depart is dropped and counted, exactly those; both copies of a
// duplicate take a place; Queue 0 drops nothing.
func TestBottleneckQueue(t *testing.T) {
	t.Run("overflow", func(t *testing.T) {
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Clock: clk, Faults: pipe.Faults{Rate: 1e6, Queue: 4}})
		n := netFrom(t, a, b)
		sendTC(t, a, &n, 0, 1000, repeat(0, 10)...)
		require.Equal(t, uint64(6), a.Stats().QueueDropped, "packets 4..9 find 4 queued")
		require.Equal(t, 4, b.Queued())
		// At 1 ms packet 0 has departed: room for one more.
		clk.Advance(ms)
		require.Equal(t, []int{0}, indices(drain(t, b)))
		sendTC(t, a, &n, 10, 1000, 0, 0)
		require.Equal(t, uint64(7), a.Stats().QueueDropped)
		clk.Advance(time.Second)
		require.Equal(t, []int{1, 2, 3, 10}, indices(drain(t, b)))
		sa, sb := a.Stats(), b.Stats()
		require.Equal(t, link.Stats{TxPackets: 12, TxBytes: 12000, QueueDropped: 7}, txPart(sa))
		require.Equal(t, sa.TxPackets-sa.QueueDropped, sb.RxPackets)
	})
	t.Run("duplicates", func(t *testing.T) {
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Clock: clk, Faults: pipe.Faults{Duplicate: 1, Rate: 1e6, Queue: 5}})
		n := netFrom(t, a, b)
		sendTC(t, a, &n, 0, 1000, 0, 0, 0)
		clk.Advance(time.Second)
		require.Equal(t, []int{0, 0, 1, 1, 2}, indices(drain(t, b)))
		require.Equal(t, uint64(1), a.Stats().QueueDropped)
		require.Equal(t, uint64(3), a.Stats().InjectedDuplicate)
	})
	t.Run("unlimited", func(t *testing.T) {
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Clock: clk, Capacity: bigQueue, Faults: pipe.Faults{Rate: 1e6}})
		n := netFrom(t, a, b)
		sendTC(t, a, &n, 0, 1000, repeat(0, 1000)...)
		clk.Advance(time.Second)
		require.Equal(t, seq(0, 1000), indices(drain(t, b)))
		require.Zero(t, a.Stats().QueueDropped)
	})
}

// TestBottleneckMarkCE: an ECN-capable packet that finds MarkCE or more
// packets queued is marked CE (DSCP untouched) and counted; below the
// threshold, and for packets that are not ECN-capable, nothing is marked;
// marking follows the depth down as the queue drains.
func TestBottleneckMarkCE(t *testing.T) {
	clk := clock.NewFake(time0)
	a, b := pair(t, pipe.Config{Clock: clk, Faults: pipe.Faults{Rate: 1e6, MarkCE: 3}})
	n := netFrom(t, a, b)

	// Depths 0..7.
	sendTC(t, a, &n, 0, 1000, repeat(ect0, 8)...)
	require.Equal(t, uint64(5), a.Stats().InjectedCE)
	clk.Advance(time.Second)
	idx, got := tcs(drainNet(t, b))
	require.Equal(t, seq(0, 8), idx)
	require.Equal(t, []uint8{ect0, ect0, ect0, ce, ce, ce, ce, ce}, got)

	// Every codepoint at depths 3..7: only ECT(0) and ECT(1) change; a
	// packet already CE is not counted.
	sendTC(t, a, &n, 10, 1000, ect0, ect0, ect0, notECT, ect1, ce, ect0, notECT)
	require.Equal(t, uint64(7), a.Stats().InjectedCE)
	clk.Advance(time.Second)
	_, got = tcs(drainNet(t, b))
	require.Equal(t, []uint8{ect0, ect0, ect0, notECT, ce, ce, ce, notECT}, got)

	// Depth 3 marks; once two have departed the depth is 2 and does not.
	sendTC(t, a, &n, 20, 1000, ect0, ect0, ect0, ect0)
	clk.Advance(2 * ms)
	sendTC(t, a, &n, 24, 1000, ect0)
	clk.Advance(time.Second)
	_, got = tcs(drainNet(t, b))
	require.Equal(t, []uint8{ect0, ect0, ect0, ce, ect0}, got)
	require.Equal(t, uint64(8), a.Stats().InjectedCE)

	// A long queue of packets that are not ECN-capable: none marked.
	sendTC(t, a, &n, 30, 1000, repeat(notECT, 100)...)
	clk.Advance(time.Second)
	_, got = tcs(drainNet(t, b))
	require.Equal(t, repeat(notECT, 100), got)
	require.Equal(t, uint64(8), a.Stats().InjectedCE)
	require.Zero(t, a.Stats().QueueDropped)
}

// TestCE: with probability CE an ECN-capable packet arrives marked CE,
// the counter matching exactly; packets that are not ECN-capable never
// are, and CE stays CE.
func TestCE(t *testing.T) {
	const n = 20000
	a, b := pair(t, pipe.Config{Seed: 9, Capacity: bigQueue, Faults: pipe.Faults{CE: 0.25}})
	nab := netFrom(t, a, b)
	codepoints := []uint8{ect0, notECT, ect1, ce}
	for i := 0; i < n; i += 100 {
		sent := make([]uint8, 100)
		for k := range sent {
			sent[k] = codepoints[(i+k)%4]
		}
		sendTC(t, a, &nab, i, 100, sent...)
	}
	idx, got := tcs(drainNet(t, b))
	require.Equal(t, seq(0, n), idx)
	var marked uint64
	for i, tc := range got {
		switch sent := codepoints[i%4]; sent {
		case ect0, ect1:
			if tc == ce {
				marked++
			} else {
				require.Equal(t, sent, tc)
			}
		default:
			require.Equal(t, sent, tc, "packet %d", i)
		}
	}
	require.Equal(t, marked, a.Stats().InjectedCE)
	// 10,000 ECN-capable packets: expected 2,500 (sd 43).
	require.InDelta(t, 2500, float64(marked), 300)

	a.SetFaults(pipe.Faults{CE: 1})
	sendTC(t, a, &nab, 0, 100, ect0, ect1, notECT, ce)
	_, got = tcs(drainNet(t, b))
	require.Equal(t, []uint8{ce, ce, notECT, ce}, got)
	require.Equal(t, marked+2, a.Stats().InjectedCE)
}

// TestFilterMarksCE: the filter can set the traffic class of chosen
// packets; turning an ECN-capable packet CE counts as InjectedCE.
func TestFilterMarksCE(t *testing.T) {
	a, b := pair(t, pipe.Config{})
	n := netFrom(t, a, b)
	a.SetFilter(func(p *link.Packet) pipe.Verdict {
		if index(p.Buf)%2 == 1 {
			p.Net.TrafficClass |= 3
		}
		return pipe.Pass
	})
	sendTC(t, a, &n, 0, 100, ect0, ect0, notECT, notECT, ce, ce)
	_, got := tcs(drainNet(t, b))
	require.Equal(t, []uint8{ect0, ce, notECT, ce, ce, ce}, got)
	require.Equal(t, uint64(1), a.Stats().InjectedCE, "only the ECT(0) packet 1 was marked")
}

// TestBottleneckDeterminism: with clock.Fake, the same seed and the same
// sends at the same times give the same packets, traffic classes and
// counters, with every fault and the bottleneck at work; another seed
// gives others.
func TestBottleneckDeterminism(t *testing.T) {
	type result struct {
		idx   []int
		tc    []uint8
		stats link.Stats
	}
	run := func(seed uint64) result {
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Seed: seed, Clock: clk, Capacity: bigQueue, Faults: pipe.Faults{
			Loss: 0.05, Duplicate: 0.05, Corrupt: 0.05, CE: 0.05, ReorderWindow: 3,
			Delay: ms, Rate: 1e6, Queue: 20, MarkCE: 8,
		}})
		n := netFrom(t, a, b)
		var r result
		next := 0
		for step := range 400 {
			k := 1 + step%5
			sendTC(t, a, &n, next, 200+step%9*100, repeat(ect0, k)...)
			next += k
			clk.Advance(ms)
			idx, tc := tcs(drainNet(t, b))
			r.idx, r.tc = append(r.idx, idx...), append(r.tc, tc...)
		}
		clk.Advance(time.Second)
		idx, tc := tcs(drainNet(t, b))
		r.idx, r.tc = append(r.idx, idx...), append(r.tc, tc...)
		r.stats = a.Stats()
		require.Equal(t, r.stats.TxPackets-r.stats.InjectedLoss+r.stats.InjectedDuplicate-r.stats.QueueDropped,
			b.Stats().RxPackets)
		return r
	}
	r1 := run(1)
	require.Positive(t, r1.stats.QueueDropped)
	require.Positive(t, r1.stats.InjectedCE)
	require.Positive(t, r1.stats.InjectedLoss)
	require.Positive(t, r1.stats.InjectedReorder)
	require.Equal(t, r1, run(1))
	require.NotEqual(t, r1, run(2))
}
