package pipe_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// TestInOrder: without faults, both directions deliver every packet, in
// order, byte for byte, and count them.
func TestInOrder(t *testing.T) {
	a, b := pair(t, pipe.Config{})
	for _, dir := range []struct {
		name     string
		src, dst *pipe.Endpoint
	}{{"AB", a, b}, {"BA", b, a}} {
		t.Run(dir.name, func(t *testing.T) {
			n := netFrom(t, dir.src, dir.dst)
			want := make([][]byte, 100)
			var bytes uint64
			for i := range want {
				want[i] = packet(&n, i)
				bytes += uint64(len(want[i]))
			}
			sendEach(t, dir.src, want[:50]...)
			batch := make([]link.Packet, 50)
			for i := range batch {
				batch[i].Buf = want[50+i]
			}
			require.NoError(t, dir.src.Send(batch))
			require.Equal(t, 100, dir.dst.Queued())

			require.Equal(t, want, recvN(t, dir.dst, 100))
			require.Zero(t, dir.dst.Queued())
			require.Equal(t, link.Stats{TxPackets: 100, TxBytes: bytes}, txPart(dir.src.Stats()))
			require.Equal(t, link.Stats{RxPackets: 100, RxBytes: bytes}, rxPart(dir.dst.Stats()))
		})
	}
}

// TestRecvNet: Recv reports the addresses as a UDP socket would (Src the
// sender's, Dst the receiver's, DF set, ID 0, nothing else), whatever
// addresses the sender passed, with the sender's traffic class, and the
// packets pass wire.ParseDatagram.
func TestRecvNet(t *testing.T) {
	addr := func(s string, port uint16) wire.Net {
		return wire.Net{Src: netip.MustParseAddr(s), SrcPort: port}
	}
	for _, tc := range []struct {
		name         string
		cfgA, cfgB   wire.Net
		wantA, wantB wire.Net
	}{
		{"default", wire.Net{}, wire.Net{}, addr("10.0.0.1", 4791), addr("10.0.0.2", 4791)},
		{"IPv4", addr("192.0.2.1", 50000), addr("::ffff:198.51.100.7", 0), addr("192.0.2.1", 50000), addr("198.51.100.7", 4791)},
		{"IPv6", addr("2001:db8::1", 0), addr("2001:db8::2", 4791), addr("2001:db8::1", 4791), addr("2001:db8::2", 4791)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, pipe.Config{AddrA: tc.cfgA, AddrB: tc.cfgB})
			la, err := a.LocalAddr()
			require.NoError(t, err)
			require.Equal(t, tc.wantA, la)
			lb, err := b.LocalAddr()
			require.NoError(t, err)
			require.Equal(t, tc.wantB, lb)

			for _, dir := range []struct{ src, dst *pipe.Endpoint }{{a, b}, {b, a}} {
				s, _ := dir.src.LocalAddr()
				d, _ := dir.dst.LocalAddr()
				want := wire.Net{Src: s.Src, SrcPort: s.SrcPort, Dst: d.Src, DstPort: d.SrcPort, DontFragment: true}
				pkt := packet(&want, 7)
				// The Net given to Send is ignored but for its traffic
				// class (DSCP 46, ECT(0)), which the ICRC masks.
				bogus := wire.Net{Src: netip.MustParseAddr("203.0.113.9"), Dst: netip.MustParseAddr("203.0.113.10"),
					ID: 99, HopLimit: 3, FlowLabel: 5, TrafficClass: 0xba}
				require.NoError(t, dir.src.Send([]link.Packet{{Buf: pkt, Net: bogus}}))
				slots := bufs(1)
				slots[0].Net = bogus
				n, err := dir.dst.Recv(slots)
				require.NoError(t, err)
				require.Equal(t, 1, n)
				want.TrafficClass = 0xba
				require.Equal(t, want, slots[0].Net)
				var p wire.Packet
				require.Equal(t, wire.DropNone, wire.ParseDatagram(slots[0].Buf, &slots[0].Net, &p))
				require.Zero(t, p.Net.ID)
			}
		})
	}
	require.Panics(t, func() { pipe.New(pipe.Config{AddrB: addr("2001:db8::2", 0)}) })
}

// TestTrafficClass: each packet keeps the traffic class it was sent with
// through duplication, delay and reordering, and the filter sees it.
func TestTrafficClass(t *testing.T) {
	const n = 500
	clk := clock.NewFake(time0)
	a, b := pair(t, pipe.Config{Seed: 5, Clock: clk, Capacity: bigQueue,
		Faults: pipe.Faults{Duplicate: 0.2, ReorderWindow: 4, Delay: ms}})
	nab := netFrom(t, a, b)
	tc := func(i int) uint8 { return uint8(i*7) ^ uint8(i>>3) }
	filtered, seen := 0, 0
	a.SetFilter(func(p *link.Packet) pipe.Verdict {
		filtered++
		if p.Net.TrafficClass == tc(index(p.Buf)) {
			seen++
		}
		return pipe.Pass
	})
	for i := 0; i < n; i += 5 {
		batch := make([]link.Packet, 5)
		for k := range batch {
			batch[k] = link.Packet{Buf: packet(&nab, i+k), Net: wire.Net{TrafficClass: tc(i + k)}}
		}
		require.NoError(t, a.Send(batch))
	}
	clk.Advance(ms)
	got := drainNet(t, b)
	require.Equal(t, n, filtered)
	require.Equal(t, n, seen, "the filter sees the traffic class")
	require.Len(t, got, n+int(a.Stats().InjectedDuplicate))
	for _, p := range got {
		want := nab
		want.TrafficClass = tc(index(p.Buf))
		require.Equal(t, want, p.Net, "packet %d", index(p.Buf))
	}
}

// TestSendCopies: the caller may reuse its buffer once Send returns.
func TestSendCopies(t *testing.T) {
	a, b := pair(t, pipe.Config{})
	buf := []byte{1, 2, 3, 4}
	require.NoError(t, a.Send([]link.Packet{{Buf: buf}}))
	buf[0] = 9
	require.Equal(t, [][]byte{{1, 2, 3, 4}}, drain(t, b))
}

// TestRecvBatch: Recv returns as many packets as fit, and drops (and
// counts) a packet that does not fit its buffer, filling the slot with the
// next one.
func TestRecvBatch(t *testing.T) {
	a, b := pair(t, pipe.Config{})
	n := netFrom(t, a, b)
	sendN(t, a, &n, 0, 10)
	slots := bufs(4)
	var sizes []int
	var got []int
	for len(got) < 10 {
		k, err := b.Recv(slots)
		require.NoError(t, err)
		sizes = append(sizes, k)
		for _, p := range slots[:k] {
			got = append(got, index(p.Buf))
		}
	}
	require.Equal(t, []int{4, 4, 2}, sizes)
	require.Equal(t, seq(0, 10), got)

	small := []link.Packet{{Buf: make([]byte, 0, 64)}, {Buf: make([]byte, 0, 64)}}
	sendEach(t, a, make([]byte, 16), make([]byte, 65), make([]byte, 64), make([]byte, 100))
	k, err := b.Recv(small)
	require.NoError(t, err)
	require.Equal(t, 2, k)
	require.Len(t, small[0].Buf, 16)
	require.Len(t, small[1].Buf, 64)
	k, err = b.TryRecv(small)
	require.NoError(t, err)
	require.Zero(t, k)
	st := b.Stats()
	require.Equal(t, uint64(2), st.RxTruncated)
	require.Equal(t, uint64(12), st.RxPackets)

	k, err = b.Recv(nil)
	require.NoError(t, err)
	require.Zero(t, k)
}

// TestOversize: a packet longer than link.MaxPacketSize is not taken.
func TestOversize(t *testing.T) {
	a, b := pair(t, pipe.Config{})
	sendEach(t, a, make([]byte, link.MaxPacketSize+1), make([]byte, link.MaxPacketSize))
	got := drain(t, b)
	require.Len(t, got, 1)
	require.Len(t, got[0], link.MaxPacketSize)
	require.Equal(t, uint64(1), a.Stats().TxDropped)
	require.Equal(t, uint64(1), a.Stats().TxPackets)
}

// TestCapacity: sends beyond Capacity are dropped and counted as
// TxDropped, delayed packets count against it, and a duplicate may take
// the queue one over.
func TestCapacity(t *testing.T) {
	t.Run("ready", func(t *testing.T) {
		a, b := pair(t, pipe.Config{Capacity: 8})
		n := netFrom(t, a, b)
		sendN(t, a, &n, 0, 10)
		require.Equal(t, 8, b.Queued())
		st := a.Stats()
		require.Equal(t, uint64(8), st.TxPackets)
		require.Equal(t, uint64(2), st.TxDropped)
		require.Equal(t, seq(0, 8), indices(drain(t, b)))
		sendN(t, a, &n, 10, 11)
		require.Equal(t, []int{10}, indices(drain(t, b)))
	})
	t.Run("delayed", func(t *testing.T) {
		clk := clock.NewFake(time0)
		a, b := pair(t, pipe.Config{Capacity: 4, Clock: clk, Faults: pipe.Faults{Delay: ms}})
		n := netFrom(t, a, b)
		sendN(t, a, &n, 0, 6)
		require.Equal(t, uint64(2), a.Stats().TxDropped)
		clk.Advance(ms)
		require.Equal(t, seq(0, 4), indices(drain(t, b)))
	})
	t.Run("duplicate", func(t *testing.T) {
		a, b := pair(t, pipe.Config{Capacity: 1, Faults: pipe.Faults{Duplicate: 1}})
		n := netFrom(t, a, b)
		sendN(t, a, &n, 0, 2)
		require.Equal(t, 2, b.Queued())
		st := a.Stats()
		require.Equal(t, link.Stats{TxPackets: 1, TxBytes: st.TxBytes, TxDropped: 1, InjectedDuplicate: 1}, st)
		require.Equal(t, []int{0, 0}, indices(drain(t, b)))
	})
}

// TestClose: Close ends one endpoint: a blocked Recv wakes with
// net.ErrClosed, Send and Recv fail, what was on its way to it is
// discarded with its timers, the peer's sends to it are dropped as
// TxDropped, and the peer still gets what it had sent.
func TestClose(t *testing.T) {
	clk := clock.NewFake(time0)
	a, b := pair(t, pipe.Config{Clock: clk})
	nab, nba := netFrom(t, a, b), netFrom(t, b, a)

	errc := make(chan error)
	go func() {
		_, err := b.Recv(bufs(1))
		errc <- err
	}()
	sendN(t, b, &nba, 0, 2) // b to a, before closing
	a.SetFaults(pipe.Faults{Delay: ms})
	sendN(t, a, &nab, 0, 1) // a to b, delayed
	require.Equal(t, 1, clk.Pending())
	require.Equal(t, 1, b.Queued())

	require.NoError(t, b.Close())
	require.ErrorIs(t, <-errc, net.ErrClosed)
	require.Zero(t, clk.Pending(), "delivery timers stopped")
	require.Zero(t, b.Queued())

	_, err := b.Recv(bufs(1))
	require.ErrorIs(t, err, net.ErrClosed)
	_, err = b.TryRecv(bufs(1))
	require.ErrorIs(t, err, net.ErrClosed)
	require.ErrorIs(t, b.Send([]link.Packet{{Buf: packet(&nba, 9)}}), net.ErrClosed)
	require.NoError(t, b.Close(), "Close is idempotent")

	before := a.Stats()
	sendN(t, a, &nab, 1, 4)
	require.NoError(t, a.Send(nil))
	st := a.Stats()
	require.Equal(t, before.TxDropped+3, st.TxDropped)
	require.Equal(t, before.TxPackets, st.TxPackets)

	require.Equal(t, []int{0, 1}, indices(drain(t, a)), "a still receives what b sent")
	require.Equal(t, uint64(2), b.Stats().TxPackets)
}

// TestCloseWhileTimerFires: with the real clock, closing while delivery
// timers fire is safe, and a Recv sees either packets or net.ErrClosed.
func TestCloseWhileTimerFires(t *testing.T) {
	for range 20 {
		a, b := pipe.New(pipe.Config{Faults: pipe.Faults{Delay: 1}})
		n := netFrom(t, a, b)
		done := make(chan error)
		go func() {
			slots := bufs(4)
			for {
				if _, err := b.Recv(slots); err != nil {
					done <- err
					return
				}
			}
		}()
		sendN(t, a, &n, 0, 50)
		require.NoError(t, b.Close())
		require.ErrorIs(t, <-done, net.ErrClosed)
		require.NoError(t, a.Close())
	}
}

// TestFilter: the filter sees every admitted packet before the random
// faults, with the receiver's Net, drops exactly what it says (counted as
// InjectedLoss), may change the bytes, and can be removed.
func TestFilter(t *testing.T) {
	t.Run("third", func(t *testing.T) {
		a, b := pair(t, pipe.Config{})
		n := netFrom(t, a, b)
		count := 0
		a.SetFilter(func(p *link.Packet) pipe.Verdict {
			count++
			if count == 3 {
				return pipe.Drop
			}
			return pipe.Pass
		})
		sendN(t, a, &n, 0, 6)
		require.Equal(t, []int{0, 1, 3, 4, 5}, indices(drain(t, b)))
		require.Equal(t, uint64(1), a.Stats().InjectedLoss)
		a.SetFilter(nil)
		sendN(t, a, &n, 6, 8)
		require.Equal(t, []int{6, 7}, indices(drain(t, b)))
		require.Equal(t, 6, count)
	})
	t.Run("acks", func(t *testing.T) {
		a, b := pair(t, pipe.Config{})
		n := netFrom(t, a, b)
		a.SetFilter(func(p *link.Packet) pipe.Verdict {
			var pp wire.Packet
			if wire.ParseDatagram(p.Buf, &p.Net, &pp) != wire.DropNone {
				panic("filter sees a packet that does not parse with its Net")
			}
			if pp.BTH.OpCode() == wire.RCAcknowledge {
				return pipe.Drop
			}
			return pipe.Pass
		})
		var want []int
		for i := range 20 {
			if i%3 == 0 {
				sendEach(t, a, ack(&n, i))
			} else {
				sendEach(t, a, packet(&n, i))
				want = append(want, i)
			}
		}
		got := drain(t, b)
		require.Equal(t, want, indices(got))
		for _, p := range got {
			require.Equal(t, wire.RCSendOnly, wire.BTH(p).OpCode())
		}
		require.Equal(t, uint64(7), a.Stats().InjectedLoss)
		require.Zero(t, b.Stats().InjectedLoss, "faults count on the sender")
	})
	t.Run("before random faults", func(t *testing.T) {
		a, b := pair(t, pipe.Config{Faults: pipe.Faults{Loss: 1}})
		n := netFrom(t, a, b)
		calls := 0
		a.SetFilter(func(p *link.Packet) pipe.Verdict {
			calls++
			return pipe.Verdict(calls % 2) // drop every other one
		})
		sendN(t, a, &n, 0, 10)
		require.Equal(t, 10, calls)
		require.Empty(t, drain(t, b))
		require.Equal(t, uint64(10), a.Stats().InjectedLoss)
	})
	t.Run("mark ECN", func(t *testing.T) {
		a, b := pair(t, pipe.Config{})
		n := netFrom(t, a, b)
		a.SetFilter(func(p *link.Packet) pipe.Verdict {
			p.Buf[4] |= 0x80 // FECN, a bit the ICRC does not cover
			return pipe.Pass
		})
		sendN(t, a, &n, 0, 1)
		got := drain(t, b)
		require.Len(t, got, 1)
		require.True(t, wire.BTH(got[0]).FECN())
		var p wire.Packet
		require.Equal(t, wire.DropNone, wire.ParseDatagram(got[0], &n, &p))
	})
}

// TestSetFaults: faults change at run time, per direction.
func TestSetFaults(t *testing.T) {
	a, b := pair(t, pipe.Config{})
	nab, nba := netFrom(t, a, b), netFrom(t, b, a)
	sendN(t, a, &nab, 0, 100)
	require.Len(t, drain(t, b), 100)

	a.SetFaults(pipe.Faults{Loss: 1})
	require.Equal(t, pipe.Faults{Loss: 1}, a.Faults())
	require.Equal(t, pipe.Faults{}, b.Faults())
	sendN(t, a, &nab, 100, 200)
	sendN(t, b, &nba, 0, 100)
	require.Empty(t, drain(t, b))
	require.Len(t, drain(t, a), 100, "the other direction is unaffected")
	require.Equal(t, uint64(100), a.Stats().InjectedLoss)

	a.SetFaults(pipe.Faults{Loss: -1, Duplicate: -0.5, CE: -1, ReorderWindow: 1, Delay: -ms, Rate: -1, Queue: -1, MarkCE: -1})
	require.Equal(t, pipe.Faults{}, a.Faults(), "out-of-range values are normalized")
	sendN(t, a, &nab, 200, 300)
	require.Equal(t, seq(200, 300), indices(drain(t, b)))
}

// TestSendErrors: Send reports only a closed endpoint, not drops.
func TestSendErrors(t *testing.T) {
	a, b := pair(t, pipe.Config{Capacity: 1, Faults: pipe.Faults{Loss: 0.5, Corrupt: 1}})
	n := netFrom(t, a, b)
	for i := range 10 {
		require.NoError(t, a.Send([]link.Packet{{Buf: packet(&n, i)}, {Buf: nil}}))
	}
	require.NoError(t, a.Close())
	require.True(t, errors.Is(a.Send(nil), net.ErrClosed))
}
