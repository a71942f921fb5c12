package netpath_test

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/internal/netpath"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/wire"
)

// openLink opens a link/udp Link with GSO and GRO on side's IPv4 address
// inside its namespace: how issue 12's tests put two devices on a path.
func openLink(t *testing.T, p *netpath.Path, side int) *udp.Link {
	t.Helper()
	var l *udp.Link
	require.NoError(t, p.Do(side, func() (err error) {
		l, err = udp.Open(udp.Config{Addr: netip.AddrPortFrom(p.Addr(side), 0), GSO: true, GRO: true})
		return err
	}))
	t.Cleanup(func() { l.Close() })
	return l
}

// counter receives packets on a link in the background, checks each
// (ICRC included) and counts them.
type counter struct {
	n    atomic.Int64
	bad  atomic.Int64
	done chan struct{}
}

func count(l *udp.Link) *counter {
	c := &counter{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		pkts := make([]link.Packet, 64)
		for i := range pkts {
			pkts[i].Buf = make([]byte, link.MaxPacketSize)
		}
		var p wire.Packet
		for {
			k, err := l.Recv(pkts)
			if err != nil {
				return
			}
			for i := range k {
				n := pkts[i].Net
				if wire.ParseDatagram(pkts[i].Buf, &n, &p) != wire.DropNone {
					c.bad.Add(1)
				}
			}
			c.n.Add(int64(k))
		}
	}()
	return c
}

// waitFor waits until the counter reaches want; the watchdog fails the
// test if it does not.
func (c *counter) waitFor(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for c.n.Load() < int64(want) {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d packets", c.n.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, int64(want), c.n.Load(), "more packets than expected")
	require.Zero(t, c.bad.Load(), "packets that do not parse")
}

// TestBottleneck sends 4000-byte RoCEv2 packets between two link/udp
// Links across a 100 Mbit/s bottleneck with a 1000-packet queue. A blast
// of 3000 (in GSO batches of 64) overflows the queue: the queue counts
// drops, and exactly the others arrive. Then 2000 packets paced at 80
// Mbit/s, twice what the queue holds, all arrive and nothing is dropped.
func TestBottleneck(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Rate: 100e6, QueuePackets: 1000, MTU: 9000, Directions: netpath.From0})
	tx := openLink(t, p, 0)
	rx := openLink(t, p, 1)
	require.True(t, tx.Info().GSO, "GSO")
	require.True(t, rx.Info().GRO, "GRO")
	c := count(rx)
	t.Cleanup(func() { rx.Close(); <-c.done })

	src, err := tx.LocalAddr()
	require.NoError(t, err)
	dst, err := rx.LocalAddr()
	require.NoError(t, err)
	n := wire.Net{Src: src.Src, SrcPort: src.SrcPort, Dst: dst.Src, DstPort: dst.SrcPort, DontFragment: true}
	const size = 4000 // InfiniBand packet: BTH, payload, ICRC
	packets := func(k int) []link.Packet {
		pkts := make([]link.Packet, k)
		for i := range pkts {
			h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff, DestQP: 7, PSN: wire.PSN(i)}}
			pkts[i] = link.Packet{Buf: wire.AppendPacket(nil, &n, &h, make([]byte, size-wire.BTHSize-wire.ICRCSize)), Net: n}
		}
		return pkts
	}

	t.Run("blast", func(t *testing.T) {
		const total = 3000
		pkts := packets(total)
		for i := 0; i < total; i += 64 {
			require.NoError(t, tx.Send(pkts[i:min(i+64, total)]))
		}
		require.Zero(t, tx.Stats().TxDropped)
		// The queue drops when a packet is enqueued, within Send: the
		// count is final.
		s, err := p.QdiscStats(0)
		require.NoError(t, err)
		t.Logf("after the blast: %+v", s)
		require.Positive(t, s.Drops, "a blast of %d packets into a queue of 1000 drops", total)
		want := total - int(s.Drops)
		c.waitFor(t, want)
		s, err = p.QdiscStats(0)
		require.NoError(t, err)
		require.Equal(t, uint64(want), s.Packets, "the queue passed on what arrived")
		require.Zero(t, s.Backlog)
		require.Positive(t, s.Overlimits, "tbf held packets back")
	})

	t.Run("paced", func(t *testing.T) {
		const (
			total = 2000
			frame = size + 8 + 20 + 14 // with UDP, IPv4 and Ethernet headers
			rate  = 80e6
		)
		before, err := p.QdiscStats(0)
		require.NoError(t, err)
		got := c.n.Load()
		pkts := packets(total)
		// Packet i leaves at start + i*interval, or at once if the
		// sender is late: a late sender sends a short burst, which the
		// queue absorbs.
		interval := time.Duration(frame * 8 * float64(time.Second) / rate)
		start := time.Now()
		for i := range pkts {
			time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
			require.NoError(t, tx.Send(pkts[i:i+1]))
		}
		c.waitFor(t, int(got)+total)
		s, err := p.QdiscStats(0)
		require.NoError(t, err)
		t.Logf("paced at %.0f Mbit/s: %+v", rate/1e6, s)
		require.Equal(t, before.Drops, s.Drops, "drops")
		require.Equal(t, before.Packets+total, s.Packets)
	})
}
