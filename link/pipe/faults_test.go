package pipe_test

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"testing"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// bigQueue keeps Capacity out of the way of tests that send everything
// before receiving.
const bigQueue = 1 << 16

// TestDeterminism: the same seed and the same sends give the same
// received packets and counters; another seed gives others; the two
// directions draw from different streams.
func TestDeterminism(t *testing.T) {
	type result struct {
		ab, ba [][]byte
		sa, sb link.Stats
	}
	run := func(seed uint64) result {
		a, b := pair(t, pipe.Config{Seed: seed, Capacity: bigQueue, Faults: pipe.Faults{
			Loss: 0.1, Duplicate: 0.1, Corrupt: 0.1, ReorderWindow: 5,
		}})
		nab, nba := netFrom(t, a, b), netFrom(t, b, a)
		var r result
		for i := 0; i < 2000; i += 100 {
			sendN(t, a, &nab, i, i+100)
			sendN(t, b, &nba, i, i+100)
			if i%300 == 0 { // receive now and then, at the same points
				r.ab = append(r.ab, drain(t, b)...)
				r.ba = append(r.ba, drain(t, a)...)
			}
		}
		r.ab = append(r.ab, drain(t, b)...)
		r.ba = append(r.ba, drain(t, a)...)
		r.sa, r.sb = a.Stats(), b.Stats()
		return r
	}
	r1 := run(1)
	require.Equal(t, r1, run(1))
	require.NotEqual(t, r1.ab, run(2).ab)
	require.NotEqual(t, indices(r1.ab), indices(r1.ba), "the directions draw from different streams")
	for _, s := range []link.Stats{r1.sa, r1.sb} {
		require.Positive(t, s.InjectedLoss)
		require.Positive(t, s.InjectedDuplicate)
		require.Positive(t, s.InjectedCorrupt)
		require.Positive(t, s.InjectedReorder)
	}
}

// TestLossAndDuplicate: over 20,000 packets, the loss and duplication
// rates are near their probabilities, and the counters match what the
// receiver sees exactly.
func TestLossAndDuplicate(t *testing.T) {
	const n = 20000
	a, b := pair(t, pipe.Config{Seed: 7, Capacity: bigQueue, Faults: pipe.Faults{Loss: 0.1, Duplicate: 0.05}})
	nab := netFrom(t, a, b)
	sendN(t, a, &nab, 0, n)
	got := indices(drain(t, b))
	require.True(t, slices.IsSorted(got), "no reordering")

	var seen [n]int
	for _, i := range got {
		seen[i]++
	}
	var lost, dup uint64
	for _, c := range seen {
		switch c {
		case 0:
			lost++
		case 1:
		case 2:
			dup++
		default:
			t.Fatalf("a packet arrived %d times", c)
		}
	}
	sa, sb := a.Stats(), b.Stats()
	require.Equal(t, lost, sa.InjectedLoss)
	require.Equal(t, dup, sa.InjectedDuplicate)
	require.Equal(t, uint64(n), sa.TxPackets)
	require.Equal(t, sa.TxPackets-sa.InjectedLoss+sa.InjectedDuplicate, sb.RxPackets)
	// Expected 2,000 (sd 42) and 900 (sd 29): bounds of about 7 sd.
	require.InDelta(t, 2000, float64(lost), 300)
	require.InDelta(t, 900, float64(dup), 200)
	require.Zero(t, sa.InjectedCorrupt)
	require.Zero(t, sa.InjectedReorder)
}

// TestCorruption: about Corrupt of the packets arrive with exactly one bit
// flipped, wire.ParseDatagram rejects every one of them and accepts every
// other packet, the counter matches exactly, and the flips land anywhere
// in the packet except the ICRC-masked BTH byte 4.
func TestCorruption(t *testing.T) {
	for _, tc := range []struct {
		name   string
		addrA  wire.Net
		n      int
		expect float64
	}{
		{"IPv4", wire.Net{}, 20000, 1000},
		{"IPv6", wire.Net{Src: mustAddr("2001:db8::a"), SrcPort: 4791}, 20000, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addrB := wire.Net{}
			if tc.addrA.Src.Is6() {
				addrB = wire.Net{Src: mustAddr("2001:db8::b")}
			}
			a, b := pair(t, pipe.Config{Seed: 3, AddrA: tc.addrA, AddrB: addrB, Capacity: bigQueue,
				Faults: pipe.Faults{Corrupt: 0.05}})
			nab := netFrom(t, a, b)
			sendN(t, a, &nab, 0, tc.n)
			got := drain(t, b)
			require.Len(t, got, tc.n)

			var corrupted uint64
			var where [3]int // BTH, payload and pad, ICRC
			var p wire.Packet
			for i, g := range got {
				want := packet(&nab, i)
				require.Len(t, g, len(want))
				flipped, at := 0, 0
				for k := range g {
					if d := bits.OnesCount8(g[k] ^ want[k]); d > 0 {
						flipped += d
						at = k
					}
				}
				r := wire.ParseDatagram(g, &nab, &p)
				switch flipped {
				case 0:
					require.Equal(t, wire.DropNone, r, "packet %d", i)
				case 1:
					require.NotEqual(t, wire.DropNone, r, "packet %d, byte %d", i, at)
					require.NotEqual(t, 4, at, "byte 4 is masked by the ICRC")
					corrupted++
					switch {
					case at < wire.BTHSize:
						where[0]++
					case at < len(g)-wire.ICRCSize:
						where[1]++
					default:
						where[2]++
					}
				default:
					t.Fatalf("packet %d has %d bits flipped", i, flipped)
				}
			}
			require.Equal(t, corrupted, a.Stats().InjectedCorrupt)
			require.InDelta(t, tc.expect, float64(corrupted), 200) // sd 31
			for _, w := range where {
				require.Positive(t, w, "flips in BTH, payload, ICRC: %v", where)
			}
		})
	}
	t.Run("any bytes", func(t *testing.T) {
		a, b := pair(t, pipe.Config{Faults: pipe.Faults{Corrupt: 1}})
		junk := []byte{1, 2, 3, 4, 5, 6, 7}
		sendEach(t, a, junk, nil)
		got := drain(t, b)
		require.Len(t, got, 2)
		flipped := 0
		for k := range junk {
			flipped += bits.OnesCount8(got[0][k] ^ junk[k])
		}
		require.Equal(t, 1, flipped)
		require.Empty(t, got[1])
		require.Equal(t, uint64(1), a.Stats().InjectedCorrupt, "an empty packet cannot be corrupted")
	})
}

// TestReorder: with ReorderWindow k, every packet is received exactly
// once; a packet is received after at most k-1 packets sent after it (if
// j > i is received before i, then j-i <= k-1), and that bound is reached;
// InjectedReorder counts exactly the packets received before some packet
// sent earlier.
func TestReorder(t *testing.T) {
	const n = 20000
	for _, k := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("k=%d", k), func(t *testing.T) {
			a, b := pair(t, pipe.Config{Seed: uint64(k), Capacity: bigQueue, Faults: pipe.Faults{ReorderWindow: k}})
			nab := netFrom(t, a, b)
			sendN(t, a, &nab, 0, n)
			got := indices(drain(t, b))
			require.Equal(t, seq(0, n), slices.Sorted(slices.Values(got)))

			maxSeen, worst := -1, 0
			for _, i := range got {
				if maxSeen > i {
					require.LessOrEqual(t, maxSeen-i, k-1, "packet %d received after %d", i, maxSeen)
					worst = max(worst, maxSeen-i)
				}
				maxSeen = max(maxSeen, i)
			}
			require.Equal(t, k-1, worst, "the bound is reached")

			var overtakers uint64
			low := n
			for p := len(got) - 1; p >= 0; p-- {
				if low < got[p] {
					overtakers++
				}
				low = min(low, got[p])
			}
			require.Positive(t, overtakers)
			require.Equal(t, overtakers, a.Stats().InjectedReorder)
		})
	}
	t.Run("off releases held", func(t *testing.T) {
		a, b := pair(t, pipe.Config{Faults: pipe.Faults{ReorderWindow: 50}})
		nab := netFrom(t, a, b)
		sendN(t, a, &nab, 0, 10)
		a.SetFaults(pipe.Faults{})
		sendN(t, a, &nab, 10, 12)
		got := indices(drain(t, b))
		require.ElementsMatch(t, seq(0, 12), got)
		require.Equal(t, []int{10, 11}, got[10:])
	})
}

// TestReorderNoStarvation: held packets are delivered when the sender goes
// quiet, to a receiver that polls and to one that waits in Recv.
func TestReorderNoStarvation(t *testing.T) {
	f := pipe.Faults{ReorderWindow: 1000}
	t.Run("TryRecv", func(t *testing.T) {
		a, b := pair(t, pipe.Config{Faults: f})
		nab := netFrom(t, a, b)
		sendN(t, a, &nab, 0, 3)
		require.ElementsMatch(t, seq(0, 3), indices(drain(t, b)))
	})
	t.Run("Recv", func(t *testing.T) {
		a, b := pair(t, pipe.Config{Faults: f})
		nab := netFrom(t, a, b)
		got := make(chan []int)
		go func() {
			var idx []int
			slots := bufs(4)
			for len(idx) < 5 {
				k, err := b.Recv(slots)
				if err != nil {
					break
				}
				for _, p := range slots[:k] {
					idx = append(idx, index(p.Buf))
				}
			}
			got <- idx
		}()
		for i := range 5 {
			sendN(t, a, &nab, i, i+1)
		}
		require.ElementsMatch(t, seq(0, 5), <-got)
	})
}

// TestDelay: with a fake clock, nothing is receivable before the delay has
// passed and everything is after, also with reordering; a waiting Recv
// wakes during Advance; a changed Delay can let later packets arrive
// first.
func TestDelay(t *testing.T) {
	t.Run("fake clock", func(t *testing.T) {
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Clock: clk, Capacity: bigQueue, Faults: pipe.Faults{Delay: 10 * ms}})
		nab := netFrom(t, a, b)
		sendN(t, a, &nab, 0, 5)
		require.Equal(t, 5, b.Queued())
		require.Empty(t, drain(t, b))
		clk.Advance(9 * ms)
		require.Empty(t, drain(t, b))
		clk.Advance(ms)
		require.Equal(t, seq(0, 5), indices(drain(t, b)))
		require.Zero(t, clk.Pending())
	})
	t.Run("with reordering", func(t *testing.T) {
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Clock: clk, Capacity: bigQueue, Faults: pipe.Faults{Delay: ms, ReorderWindow: 4}})
		nab := netFrom(t, a, b)
		sendN(t, a, &nab, 0, 1000)
		require.Empty(t, drain(t, b))
		clk.Advance(ms)
		got := indices(drain(t, b))
		require.ElementsMatch(t, seq(0, 1000), got)
		require.False(t, slices.IsSorted(got))
	})
	t.Run("wakes Recv", func(t *testing.T) {
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Clock: clk, Faults: pipe.Faults{Delay: ms}})
		nab := netFrom(t, a, b)
		got := make(chan int)
		go func() {
			slots := bufs(1)
			if _, err := b.Recv(slots); err == nil {
				got <- index(slots[0].Buf)
			}
			close(got)
		}()
		sendN(t, a, &nab, 42, 43)
		clk.Advance(ms)
		require.Equal(t, 42, <-got)
	})
	t.Run("changed delay", func(t *testing.T) {
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Clock: clk, Faults: pipe.Faults{Delay: 10 * ms}})
		nab := netFrom(t, a, b)
		sendN(t, a, &nab, 0, 1)
		a.SetFaults(pipe.Faults{Delay: ms})
		sendN(t, a, &nab, 1, 2)
		clk.Advance(ms)
		require.Equal(t, []int{1}, indices(drain(t, b)))
		clk.Advance(9 * ms)
		require.Equal(t, []int{0}, indices(drain(t, b)))
	})
	t.Run("real clock", func(t *testing.T) {
		a, b := pair(t, pipe.Config{Faults: pipe.Faults{Delay: ms}})
		nab := netFrom(t, a, b)
		sendN(t, a, &nab, 0, 10)
		require.Equal(t, seq(0, 10), indices(recvN(t, b, 10)))
	})
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
