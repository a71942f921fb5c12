package tap_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/wire"
)

func TestNewValidates(t *testing.T) {
	out := &recorder{}
	for name, cfg := range map[string]tap.Config{
		"zero MAC":      {},
		"multicast MAC": {MAC: [6]byte{0x01, 0, 0x5e, 0, 0, 1}},
		"small MTU":     {MAC: hostMAC, MTU: 1279},
		"large MTU":     {MAC: hostMAC, MTU: 65536},
		"multicast":     {MAC: hostMAC, Addrs: []netip.Addr{netip.MustParseAddr("224.0.0.1")}},
		"unspecified":   {MAC: hostMAC, Addrs: []netip.Addr{netip.IPv6Unspecified()}},
		"broadcast":     {MAC: hostMAC, Addrs: []netip.Addr{netip.MustParseAddr("255.255.255.255")}},
		"zero address":  {MAC: hostMAC, Addrs: []netip.Addr{{}}},
		"negative":      {MAC: hostMAC, QueueTotal: -1},
	} {
		_, err := tap.New(cfg, out)
		require.Error(t, err, name)
	}
	_, err := tap.New(tap.Config{MAC: hostMAC}, nil)
	require.Error(t, err, "no emitter")
}

// TestAddrsAndMTU: the link-local address from the MAC (rxe's GID 0, the
// rxe guest of the captures: 52:54:00:77:00:02), IPv4-mapped and
// duplicate addresses folded, and the path MTU by rxe's rule.
func TestAddrsAndMTU(t *testing.T) {
	h, err := tap.New(tap.Config{
		MAC:   [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x02},
		Addrs: []netip.Addr{netip.MustParseAddr("::ffff:10.77.0.2"), netip.MustParseAddr("10.77.0.2"), host6},
	}, &recorder{})
	require.NoError(t, err)
	ll := netip.MustParseAddr("fe80::5054:ff:fe77:2")
	require.Equal(t, ll, h.LinkLocal())
	require.Equal(t, []netip.Addr{netip.MustParseAddr("10.77.0.2"), host6, ll}, h.Addrs())
	require.Equal(t, 1500, h.MTU())
	require.Equal(t, 1024, h.PathMTU())

	h, _ = newHost(t, tap.Config{MTU: 9000})
	require.Equal(t, 4096, h.PathMTU())
	require.Equal(t, hostLL, h.LinkLocal())
	c := h.Config()
	require.Equal(t, tap.DefaultNeighbourCache, c.NeighbourCache)
	require.Equal(t, tap.DefaultSolicits, c.Solicits)
	require.Equal(t, []netip.Addr{host4, host6, hostLL}, c.Addrs)
}

// TestARPRequestAnswered: an ARP request for the host's address gets a
// reply to the asker, and the asker is learned (stale: the next packet to
// it goes at once, with a unicast probe to re-confirm it).
func TestARPRequestAnswered(t *testing.T) {
	h, out := newHost(t, tap.Config{})
	var p link.Packet
	o, r := h.Receive(t0, arpFrame(t, bcastMAC, layers.ARPRequest, peerMAC, peer4, [6]byte{}, host4), &p)
	require.Equal(t, tap.Answered, o)
	require.Equal(t, tap.DropNone, r)
	f := out.take()
	require.Len(t, f, 1)
	require.Len(t, f[0], 42)
	pkt := requireIsomorphic(t, f[0])
	e := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	require.Equal(t, hw(peerMAC), e.DstMAC)
	require.Equal(t, hw(hostMAC), e.SrcMAC)
	a := pkt.Layer(layers.LayerTypeARP).(*layers.ARP)
	require.Equal(t, uint16(layers.ARPReply), a.Operation)
	require.Equal(t, hostMAC[:], a.SourceHwAddress)
	require.Equal(t, host4.AsSlice(), a.SourceProtAddress)
	require.Equal(t, peerMAC[:], a.DstHwAddress)
	require.Equal(t, peer4.AsSlice(), a.DstProtAddress)
	s := h.Stats()
	require.Equal(t, uint64(1), s.ARPReplies)

	ib, n := sendTo(h, t0.Add(time.Millisecond), peer4, 1, 100)
	f = out.take()
	require.Len(t, f, 2, "the packet and a unicast probe")
	probe := decode(t, f[0])
	require.Equal(t, hw(peerMAC), probe.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
	require.Equal(t, uint16(layers.ARPRequest), probe.Layer(layers.LayerTypeARP).(*layers.ARP).Operation)
	requireRoCE(t, f[1], peerMAC, n, ib)

	// An address probe (RFC 5227: sender 0.0.0.0) is answered, to 0.0.0.0.
	o, _ = h.Receive(t0, arpFrame(t, bcastMAC, layers.ARPRequest, otherMAC, netip.IPv4Unspecified(), [6]byte{}, host4), &p)
	require.Equal(t, tap.Answered, o)
	f = out.take()
	require.Len(t, f, 1)
	a = requireIsomorphic(t, f[0]).Layer(layers.LayerTypeARP).(*layers.ARP)
	require.Equal(t, []byte{0, 0, 0, 0}, a.DstProtAddress)
	require.Equal(t, otherMAC[:], a.DstHwAddress)

	// A request for another host is not answered.
	o, r = h.Receive(t0, arpFrame(t, bcastMAC, layers.ARPRequest, otherMAC, other4, [6]byte{}, peer4), &p)
	require.Equal(t, tap.Dropped, o)
	require.Equal(t, tap.DropNotForUs, r)
	require.Empty(t, out.take())
	s = h.Stats()
	require.Equal(t, uint64(2), s.ARPReplies)
	require.Equal(t, uint64(1), s.RxDropped[tap.DropNotForUs])
	requireCounted(t, s)
}

// TestARPResolution: a packet to an unknown neighbour sends a broadcast
// ARP request and waits, with those that follow, until the reply; then
// they leave in order to the MAC learned.
func TestARPResolution(t *testing.T) {
	h, out := newHost(t, tap.Config{})
	var ibs [][]byte
	var nets []wire.Net
	for i := range 3 {
		ib, n := sendTo(h, t0, peer4, uint32(i), 50*i)
		ibs, nets = append(ibs, ib), append(nets, n)
	}
	f := out.take()
	require.Len(t, f, 1, "one request, the packets wait")
	pkt := requireIsomorphic(t, f[0])
	require.Equal(t, hw(bcastMAC), pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
	a := pkt.Layer(layers.LayerTypeARP).(*layers.ARP)
	require.Equal(t, uint16(layers.ARPRequest), a.Operation)
	require.Equal(t, hostMAC[:], a.SourceHwAddress)
	require.Equal(t, host4.AsSlice(), a.SourceProtAddress)
	require.Equal(t, make([]byte, 6), a.DstHwAddress)
	require.Equal(t, peer4.AsSlice(), a.DstProtAddress)
	s := h.Stats()
	require.Equal(t, uint64(3), s.TxQueued)
	require.Equal(t, uint64(0), s.TxPackets)
	d, ok := h.NextDeadline()
	require.True(t, ok)
	require.Equal(t, t0.Add(time.Second), d)

	var p link.Packet
	o, _ := h.Receive(t0.Add(time.Millisecond), arpFrame(t, hostMAC, layers.ARPReply, peerMAC, peer4, hostMAC, host4), &p)
	require.Equal(t, tap.Learned, o)
	f = out.take()
	require.Len(t, f, 3)
	for i := range f {
		requireRoCE(t, f[i], peerMAC, nets[i], ibs[i])
	}
	_, ok = h.NextDeadline()
	require.False(t, ok, "nothing left to resolve")

	// Resolved: the next packet goes at once, without a request.
	ib, n := sendTo(h, t0.Add(2*time.Second), peer4, 9, 10)
	f = out.take()
	require.Len(t, f, 1)
	requireRoCE(t, f[0], peerMAC, n, ib)
	// Overheard: a request for another host from the known MAC changes
	// nothing; a gratuitous ARP with another MAC moves the neighbour.
	o, r := h.Receive(t0, arpFrame(t, bcastMAC, layers.ARPRequest, peerMAC, peer4, [6]byte{}, other4), &p)
	require.Equal(t, tap.DropNotForUs, r, "%v", o)
	o, _ = h.Receive(t0, arpFrame(t, bcastMAC, layers.ARPRequest, otherMAC, peer4, [6]byte{}, peer4), &p)
	require.Equal(t, tap.Learned, o)
	ib2, n2 := sendTo(h, t0.Add(2*time.Second), peer4, 10, 10)
	f = out.take()
	require.Len(t, f, 2, "stale: a probe, and the packet to the new MAC")
	requireRoCE(t, f[1], otherMAC, n2, ib2)

	s = h.Stats()
	require.Equal(t, uint64(5), s.TxPackets)
	require.Equal(t, uint64(2), s.ARPRequests)
	require.Equal(t, uint64(1), s.Resolved)
	require.Equal(t, uint64(2), s.RxLearned)
	require.Equal(t, uint64(len(ibs[0])+len(ibs[1])+len(ibs[2])+len(ib)+len(ib2)), s.TxBytes)
	require.Equal(t, link.Stats{TxPackets: 5, TxBytes: s.TxBytes}, s.Link())
	requireCounted(t, s)
}

// TestResolutionFails: without a reply the host asks Solicits times, one
// RetryInterval apart, then drops what waited and counts it.
func TestResolutionFails(t *testing.T) {
	for _, dst := range []netip.Addr{peer4, peer6} {
		t.Run(dst.String(), func(t *testing.T) {
			h, out := newHost(t, tap.Config{})
			sendTo(h, t0, dst, 1, 10)
			sendTo(h, t0.Add(500*time.Millisecond), dst, 2, 10)
			require.Len(t, out.take(), 1)
			h.Timer(t0.Add(999 * time.Millisecond))
			require.Empty(t, out.take(), "not yet")
			for i := 1; i < tap.DefaultSolicits; i++ {
				now := t0.Add(time.Duration(i) * time.Second)
				d, ok := h.NextDeadline()
				require.True(t, ok)
				require.Equal(t, now, d)
				h.Timer(now)
				f := out.take()
				require.Len(t, f, 1, "retry %d", i)
				requireIsomorphic(t, f[0])
			}
			h.Timer(t0.Add(time.Duration(tap.DefaultSolicits) * time.Second))
			require.Empty(t, out.take())
			_, ok := h.NextDeadline()
			require.False(t, ok)
			s := h.Stats()
			require.Equal(t, uint64(2), s.TxDropped[tap.TxUnresolved])
			require.Equal(t, uint64(1), s.ResolveFailed)
			require.Equal(t, uint64(tap.DefaultSolicits), s.ARPRequests+s.NeighbourSolicits)
			require.Equal(t, uint64(2), s.Link().TxDropped)

			// A late reply is unsolicited now: the entry is gone.
			var p link.Packet
			var o tap.Outcome
			var r tap.DropReason
			if dst.Is4() {
				o, r = h.Receive(t0.Add(4*time.Second), arpFrame(t, hostMAC, layers.ARPReply, peerMAC, peer4, hostMAC, host4), &p)
			} else {
				o, r = h.Receive(t0.Add(4*time.Second), naFrame(t, hostMAC, peer6, host6, peer6, 0x60, peerMAC), &p)
			}
			require.Equal(t, tap.Dropped, o)
			require.Equal(t, tap.DropUnsolicited, r)
			require.Empty(t, out.take())
			requireCounted(t, h.Stats())
		})
	}
}

// TestQueueBound: packets waiting for resolution are bounded per
// neighbour and in all; the excess is dropped and counted.
func TestQueueBound(t *testing.T) {
	h, out := newHost(t, tap.Config{QueuePerNeighbour: 4, QueueTotal: 6})
	for i := range 6 {
		sendTo(h, t0, peer4, uint32(i), 8)
	}
	s := h.Stats()
	require.Equal(t, uint64(4), s.TxQueued)
	require.Equal(t, uint64(2), s.TxDropped[tap.TxQueueFull])
	for i := range 4 {
		sendTo(h, t0, other4, uint32(i), 8)
	}
	s = h.Stats()
	require.Equal(t, uint64(6), s.TxQueued, "the pool holds 6")
	require.Equal(t, uint64(4), s.TxDropped[tap.TxQueueFull])
	require.Len(t, out.take(), 2, "a request for each")

	// The pool's buffers come back when the waiting packets leave.
	var p link.Packet
	o, _ := h.Receive(t0, arpFrame(t, hostMAC, layers.ARPReply, peerMAC, peer4, hostMAC, host4), &p)
	require.Equal(t, tap.Learned, o)
	require.Len(t, out.take(), 4)
	for i := range 3 {
		sendTo(h, t0, other4, uint32(10+i), 8)
	}
	s = h.Stats()
	require.Equal(t, uint64(8), s.TxQueued, "other4's queue is full at 4")
	require.Equal(t, uint64(5), s.TxDropped[tap.TxQueueFull])
}

// TestCacheExpiry: a confirmed MAC is trusted for ReachableTime; after
// it, packets still go to it while unicast requests re-confirm it; with
// no answer the entry goes, and the next packet resolves afresh.
func TestCacheExpiry(t *testing.T) {
	h, out := newHost(t, tap.Config{ReachableTime: 10 * time.Second})
	sendTo(h, t0, peer4, 0, 8)
	var p link.Packet
	h.Receive(t0, arpFrame(t, hostMAC, layers.ARPReply, peerMAC, peer4, hostMAC, host4), &p)
	require.Len(t, out.take(), 2)

	sendTo(h, t0.Add(9*time.Second), peer4, 1, 8)
	require.Len(t, out.take(), 1, "still reachable")

	// Expired: the packet goes, with a unicast request.
	ib, n := sendTo(h, t0.Add(10*time.Second), peer4, 2, 8)
	f := out.take()
	require.Len(t, f, 2)
	probe := requireIsomorphic(t, f[0])
	require.Equal(t, hw(peerMAC), probe.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
	a := probe.Layer(layers.LayerTypeARP).(*layers.ARP)
	require.Equal(t, uint16(layers.ARPRequest), a.Operation)
	require.Equal(t, peerMAC[:], a.DstHwAddress)
	requireRoCE(t, f[1], peerMAC, n, ib)

	// A reply re-confirms it: no more requests.
	h.Receive(t0.Add(10500*time.Millisecond), arpFrame(t, hostMAC, layers.ARPReply, peerMAC, peer4, hostMAC, host4), &p)
	_, ok := h.NextDeadline()
	require.False(t, ok)
	sendTo(h, t0.Add(20*time.Second), peer4, 3, 8)
	require.Len(t, out.take(), 1, "reachable again until 20.5s")

	// Expired again, and this time unanswered.
	sendTo(h, t0.Add(21*time.Second), peer4, 4, 8)
	require.Len(t, out.take(), 2)
	for i := 1; i <= tap.DefaultSolicits; i++ {
		h.Timer(t0.Add(21*time.Second + time.Duration(i)*time.Second))
		sendTo(h, t0.Add(21*time.Second+time.Duration(i)*time.Second), peer4, uint32(4+i), 8)
	}
	f = out.take()
	// Two retries, each before a packet that still goes to the old MAC;
	// then the entry is gone and the next packet waits behind a
	// broadcast request.
	require.Len(t, f, 2*(tap.DefaultSolicits-1)+1)
	last := requireIsomorphic(t, f[len(f)-1])
	require.Equal(t, hw(bcastMAC), last.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
	s := h.Stats()
	require.Equal(t, uint64(1), s.ResolveFailed)
	require.Equal(t, uint64(1), s.TxQueued-1, "one waits now (and the very first did)")
}

// TestCacheFull: a full cache evicts its least recently used entry that
// is not being resolved; when every entry is, the packet is dropped.
func TestCacheFull(t *testing.T) {
	h, out := newHost(t, tap.Config{NeighbourCache: 2})
	var p link.Packet
	resolve := func(now time.Time, a netip.Addr, mac [6]byte) {
		sendTo(h, now, a, 0, 8)
		o, _ := h.Receive(now, arpFrame(t, hostMAC, layers.ARPReply, mac, a, hostMAC, host4), &p)
		require.Equal(t, tap.Learned, o)
	}
	resolve(t0, peer4, peerMAC)
	resolve(t0.Add(time.Second), other4, otherMAC)
	sendTo(h, t0.Add(2*time.Second), peer4, 1, 8) // peer4 used last
	out.take()

	third := netip.MustParseAddr("10.0.0.4")
	sendTo(h, t0.Add(3*time.Second), third, 1, 8)
	require.Equal(t, uint64(1), h.Stats().Evicted)
	sendTo(h, t0.Add(3*time.Second), peer4, 2, 8)
	f := out.take()
	require.Len(t, f, 2, "a request for 10.0.0.4, and peer4's packet, still known")
	requireRoCE(t, f[1], peerMAC, wire.Net{Src: host4, Dst: peer4, SrcPort: entropyPt, DstPort: wire.RoCEv2Port, TrafficClass: 2, HopLimit: 64, DontFragment: true}, ibPacket(&wire.Net{Src: host4, Dst: peer4, SrcPort: entropyPt, DstPort: wire.RoCEv2Port, DontFragment: true}, 2, 8))

	// other4 was evicted: it is resolved afresh, evicting peer4; then
	// both entries are resolving and a third address finds no room.
	sendTo(h, t0.Add(4*time.Second), other4, 3, 8)
	require.Equal(t, uint64(2), h.Stats().Evicted)
	sendTo(h, t0.Add(4*time.Second), netip.MustParseAddr("10.0.0.5"), 1, 8)
	require.Equal(t, uint64(1), h.Stats().TxDropped[tap.TxCacheFull])
}

// TestNeighbourSolicitationAnswered: solicitations for the host's global
// and link-local addresses get solicited advertisements with its MAC;
// duplicate address detection gets an advertisement to all nodes; the
// solicitor is learned.
func TestNeighbourSolicitationAnswered(t *testing.T) {
	h, out := newHost(t, tap.Config{})
	var p link.Packet
	for _, target := range []netip.Addr{host6, hostLL} {
		o, r := h.Receive(t0, nsFrame(t, peerLL, target), &p)
		require.Equal(t, tap.Answered, o, "%v", r)
		f := out.take()
		require.Len(t, f, 1)
		pkt := requireIsomorphic(t, f[0])
		require.Equal(t, hw(peerMAC), pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
		ip6 := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		require.Equal(t, ip(target), ip6.SrcIP)
		require.Equal(t, ip(peerLL), ip6.DstIP)
		require.Equal(t, uint8(255), ip6.HopLimit)
		na := pkt.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
		require.True(t, na.Solicited())
		require.True(t, na.Override())
		require.False(t, na.Router())
		require.Equal(t, ip(target), na.TargetAddress)
		require.Equal(t, layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: hostMAC[:]}}, na.Options)
	}

	// Duplicate address detection: from ::, without an option.
	o, _ := h.Receive(t0, nsFrame(t, netip.IPv6Unspecified(), host6), &p)
	require.Equal(t, tap.Answered, o)
	f := out.take()
	require.Len(t, f, 1)
	pkt := requireIsomorphic(t, f[0])
	require.Equal(t, hw([6]byte{0x33, 0x33, 0, 0, 0, 1}), pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
	require.Equal(t, ip(allNodes), pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6).DstIP)
	na := pkt.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
	require.False(t, na.Solicited())
	require.True(t, na.Override())

	// The solicitor was learned: a packet to it leaves at once, with a
	// unicast solicitation to re-confirm it.
	ib, n := sendTo(h, t0, peerLL, 1, 64)
	f = out.take()
	require.Len(t, f, 2)
	pkt = requireIsomorphic(t, f[0])
	require.Equal(t, hw(peerMAC), pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
	require.Equal(t, ip(peerLL), pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6).DstIP)
	require.NotNil(t, pkt.Layer(layers.LayerTypeICMPv6NeighborSolicitation))
	requireRoCE(t, f[1], peerMAC, n, ib)

	// Not ours, and not valid.
	o, r := h.Receive(t0, nsFrame(t, peerLL, peer6), &p)
	require.Equal(t, tap.DropNotForUs, r, "%v", o)
	bad := nsFrame(t, peerLL, host6)
	bad[14+7] = 64 // hop limit: not from this link
	o, r = h.Receive(t0, bad, &p)
	require.Equal(t, tap.Dropped, o)
	require.Equal(t, tap.DropBadND, r)
	s := h.Stats()
	require.Equal(t, uint64(3), s.NeighbourAdverts)
	requireCounted(t, s)
}

// TestNeighbourResolution: an IPv6 packet to an unknown neighbour sends a
// solicitation to its solicited-node group and waits for the
// advertisement.
func TestNeighbourResolution(t *testing.T) {
	h, out := newHost(t, tap.Config{})
	ib, n := sendTo(h, t0, peer6, 1, 300)
	f := out.take()
	require.Len(t, f, 1)
	pkt := requireIsomorphic(t, f[0])
	group, groupMAC := solicitedNode(peer6)
	require.Equal(t, hw(groupMAC), pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
	ip6 := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	require.Equal(t, ip(host6), ip6.SrcIP)
	require.Equal(t, ip(group), ip6.DstIP)
	require.Equal(t, uint8(255), ip6.HopLimit)
	ns := pkt.Layer(layers.LayerTypeICMPv6NeighborSolicitation).(*layers.ICMPv6NeighborSolicitation)
	require.Equal(t, ip(peer6), ns.TargetAddress)
	require.Equal(t, layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: hostMAC[:]}}, ns.Options)

	// An advertisement without the target's MAC cannot resolve it.
	var p link.Packet
	o, r := h.Receive(t0, naFrame(t, hostMAC, peer6, host6, peer6, 0x60, [6]byte{}), &p)
	require.Equal(t, tap.DropBadND, r, "%v", o)
	o, _ = h.Receive(t0, naFrame(t, hostMAC, peer6, host6, peer6, 0x60, peerMAC), &p)
	require.Equal(t, tap.Learned, o)
	f = out.take()
	require.Len(t, f, 1)
	requireRoCE(t, f[0], peerMAC, n, ib)

	// An unsolicited advertisement without override does not change a
	// known MAC; with override it does.
	o, _ = h.Receive(t0, naFrame(t, bcastMAC, peer6, allNodes, peer6, 0, otherMAC), &p)
	require.Equal(t, tap.Learned, o)
	ib, n = sendTo(h, t0, peer6, 2, 8)
	f = out.take()
	require.Len(t, f, 2, "stale now: a probe and the packet, still to peerMAC")
	requireRoCE(t, f[1], peerMAC, n, ib)
	o, _ = h.Receive(t0, naFrame(t, bcastMAC, peer6, allNodes, peer6, 0x20, otherMAC), &p)
	require.Equal(t, tap.Learned, o)
	ib, n = sendTo(h, t0, peer6, 3, 8)
	f = out.take()
	require.Len(t, f, 2)
	requireRoCE(t, f[1], otherMAC, n, ib)

	// A multicast advertisement must not claim to be solicited.
	o, r = h.Receive(t0, naFrame(t, bcastMAC, peer6, allNodes, peer6, 0x60, peerMAC), &p)
	require.Equal(t, tap.DropBadND, r, "%v", o)
	requireCounted(t, h.Stats())
}

// TestEcho: ICMP and ICMPv6 echo requests to the host's addresses are
// answered with the identifier, sequence and data, and right checksums.
func TestEcho(t *testing.T) {
	h, out := newHost(t, tap.Config{})
	data := []byte("softhca echo data, odd length.")
	var p link.Packet
	o, _ := h.Receive(t0, echo4Frame(t, host4, 0x1234, 7, data), &p)
	require.Equal(t, tap.Answered, o)
	f := out.take()
	require.Len(t, f, 1)
	pkt := requireIsomorphic(t, f[0])
	require.Equal(t, hw(peerMAC), pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
	ip4 := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	require.Equal(t, ip(host4), ip4.SrcIP.To4())
	require.Equal(t, ip(peer4), ip4.DstIP.To4())
	icmp := pkt.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	require.Equal(t, layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoReply, 0), icmp.TypeCode)
	require.Equal(t, uint16(0x1234), icmp.Id)
	require.Equal(t, uint16(7), icmp.Seq)
	require.Equal(t, data, icmp.Payload)

	for _, dst := range []netip.Addr{host6, hostLL} {
		o, _ = h.Receive(t0, echo6Frame(t, dst, 0x4321, 9, data), &p)
		require.Equal(t, tap.Answered, o)
		f = out.take()
		require.Len(t, f, 1)
		pkt = requireIsomorphic(t, f[0])
		ip6 := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		require.Equal(t, ip(dst), ip6.SrcIP)
		require.Equal(t, ip(peer6), ip6.DstIP)
		require.Equal(t, layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoReply, 0), pkt.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6).TypeCode)
		echo := pkt.Layer(layers.LayerTypeICMPv6Echo).(*layers.ICMPv6Echo)
		require.Equal(t, uint16(0x4321), echo.Identifier)
		require.Equal(t, uint16(9), echo.SeqNumber)
		require.Equal(t, data, echo6Data(pkt))
	}

	// Bad checksums are not answered.
	bad := echo4Frame(t, host4, 1, 1, data)
	bad[len(bad)-1] ^= 1
	o, r := h.Receive(t0, bad, &p)
	require.Equal(t, tap.DropICMPChecksum, r, "%v", o)
	bad = echo6Frame(t, host6, 1, 1, data)
	bad[len(bad)-1] ^= 1
	_, r = h.Receive(t0, bad, &p)
	require.Equal(t, tap.DropICMPChecksum, r)
	require.Empty(t, out.take())
	s := h.Stats()
	require.Equal(t, uint64(1), s.EchoReplies)
	require.Equal(t, uint64(2), s.Echo6Replies)
	requireCounted(t, s)
}

// TestRoCEReceive: RoCEv2 frames to the host come out as link.Packets
// with the IP and UDP fields as they arrived, the ICRC checked over the
// real headers (for IPv4, the real Identification: a frame whose ID was
// changed after the ICRC was computed fails, though a UDP socket's solve
// would find an ID for it).
func TestRoCEReceive(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, udpSum := range []bool{false, true} {
			n := netFromPeer(v6)
			t.Run(n.Src.String()+map[bool]string{false: "", true: "/checksum"}[udpSum], func(t *testing.T) {
				h, out := newHost(t, tap.Config{})
				ib := ibPacket(&n, 5, 1000)
				var p link.Packet
				o, r := h.Receive(t0, roceFrame(t, n, ib, udpSum), &p)
				require.Equal(t, tap.Delivered, o, "%v", r)
				require.Equal(t, ib, p.Buf)
				require.Equal(t, n, p.Net)
				require.Empty(t, out.take())

				if udpSum {
					f := roceFrame(t, n, ib, true)
					f[14+n.IPHeaderSize()+6] ^= 0x40
					_, r = h.Receive(t0, f, &p)
					require.Equal(t, tap.DropUDPChecksum, r)
				}
				bad := append([]byte(nil), ib...)
				bad[len(bad)-1] ^= 1
				_, r = h.Receive(t0, roceFrame(t, n, bad, udpSum), &p)
				require.Equal(t, tap.DropRoCE, r)
				s := h.Stats()
				require.Equal(t, uint64(1), s.RxRoCE[wire.DropBadICRC])
				require.Equal(t, uint64(1), s.RxDelivered)
				require.Equal(t, uint64(len(ib)), s.RxBytes)
				requireCounted(t, s)
			})
		}
	}

	// The real ID: a frame with another ID than the ICRC's fails.
	h, _ := newHost(t, tap.Config{})
	n := netFromPeer(false)
	ib := ibPacket(&n, 5, 1000)
	n.ID++
	var p link.Packet
	_, r := h.Receive(t0, roceFrame(t, n, ib, false), &p)
	require.Equal(t, tap.DropRoCE, r)
	require.Equal(t, uint64(1), h.Stats().RxRoCE[wire.DropBadICRC])
	var wp wire.Packet
	n.ID = 0
	require.Equal(t, wire.DropNone, wire.ParseDatagram(ib, &n, &wp), "a UDP socket's solve would pass it")
}

// TestRoCERoundTrip: what one host sends, another receives, both ways,
// over IPv4, IPv6 and the link-local addresses.
func TestRoCERoundTrip(t *testing.T) {
	a, outA := newHost(t, tap.Config{})
	b, outB := newHost(t, tap.Config{MAC: peerMAC, Addrs: []netip.Addr{peer4, peer6}})
	// wire frames between them until both are quiet.
	var pa, pb []link.Packet
	pump := func() {
		for {
			fa, fb := outA.take(), outB.take()
			if len(fa)+len(fb) == 0 {
				return
			}
			for _, f := range fa {
				var p link.Packet
				if o, r := b.Receive(t0, f, &p); o == tap.Delivered {
					pb = append(pb, link.Packet{Buf: append([]byte(nil), p.Buf...), Net: p.Net})
				} else {
					require.NotEqual(t, tap.Dropped, o, "%v", r)
				}
			}
			for _, f := range fb {
				var p link.Packet
				if o, r := a.Receive(t0, f, &p); o == tap.Delivered {
					pa = append(pa, link.Packet{Buf: append([]byte(nil), p.Buf...), Net: p.Net})
				} else {
					require.NotEqual(t, tap.Dropped, o, "%v", r)
				}
			}
		}
	}
	for i, pair := range [][2]netip.Addr{{host4, peer4}, {host6, peer6}, {hostLL, peerLL}} {
		for k := range 3 {
			n := wire.Net{Src: pair[0], Dst: pair[1], SrcPort: 0xc000 + uint16(k), DstPort: wire.RoCEv2Port, TrafficClass: 2, DontFragment: true}
			ab := ibPacket(&n, uint32(i*10+k), 256*k)
			a.Send(t0, []link.Packet{{Buf: ab, Net: n}})
			m := wire.Net{Src: pair[1], Dst: pair[0], SrcPort: 0xc100 + uint16(k), DstPort: wire.RoCEv2Port, HopLimit: 9, DontFragment: true}
			ba := ibPacket(&m, uint32(i*10+k), 100*k)
			b.Send(t0, []link.Packet{{Buf: ba, Net: m}})
			pump()
			require.Len(t, pb, 1)
			require.Equal(t, ab, pb[0].Buf)
			n.HopLimit = 64
			n.DontFragment = n.Src.Is4() // wire.Parse reads DF from IPv4 only
			m.DontFragment = m.Src.Is4()
			require.Equal(t, n, pb[0].Net)
			require.Len(t, pa, 1)
			require.Equal(t, ba, pa[0].Buf)
			require.Equal(t, m, pa[0].Net)
			pa, pb = nil, nil
		}
	}
	requireCounted(t, a.Stats())
	requireCounted(t, b.Stats())
	require.Equal(t, uint64(9), a.Stats().TxPackets)
	require.Equal(t, uint64(9), b.Stats().RxDelivered)
}

// TestDrops: every frame the host does not take is dropped for one named
// reason, and nothing is emitted.
func TestDrops(t *testing.T) {
	n4, n6 := netFromPeer(false), netFromPeer(true)
	ib4, ib6 := ibPacket(&n4, 1, 64), ibPacket(&n6, 1, 64)
	good4 := func() []byte { return roceFrame(t, n4, ib4, false) }
	good6 := func() []byte { return roceFrame(t, n6, ib6, false) }
	with := func(f []byte, edit func(f []byte)) []byte { edit(f); return f }
	long := func() []byte {
		n := n4
		return roceFrame(t, n, ibPacket(&n, 1, link.MaxPacketSize), false)
	}
	udpTo := func(port layers.UDPPort) []byte {
		l3 := ipv4(peer4, host4, layers.IPProtocolUDP)
		u := &layers.UDP{SrcPort: 1000, DstPort: port}
		require.NoError(t, u.SetNetworkLayerForChecksum(l3))
		return serialize(t, ethernet(peerMAC, hostMAC, layers.EthernetTypeIPv4), l3, u, gopacket.Payload("x"))
	}
	vlanIP, vlanUDP := ipv4(peer4, host4, layers.IPProtocolUDP), &layers.UDP{SrcPort: 1, DstPort: rocePort}
	require.NoError(t, vlanUDP.SetNetworkLayerForChecksum(vlanIP))
	vlan := serialize(t, ethernet(peerMAC, hostMAC, layers.EthernetTypeDot1Q),
		&layers.Dot1Q{VLANIdentifier: 5, Type: layers.EthernetTypeIPv4}, vlanIP, vlanUDP, gopacket.Payload(ib4))
	hopByHop := serialize(t, ethernet(peerMAC, hostMAC, layers.EthernetTypeIPv6), ipv6(peer6, host6, layers.IPProtocolIPv6HopByHop, 1),
		&layers.IPv6HopByHop{Options: []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: []byte{0, 0, 0, 0}}}},
		gopacket.Payload("12345678"))
	frag6 := serialize(t, ethernet(peerMAC, hostMAC, layers.EthernetTypeIPv6), ipv6(peer6, host6, layers.IPProtocolIPv6Fragment, 64),
		gopacket.Payload([]byte{17, 0, 0, 1, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8}))
	unreach := serialize(t, ethernet(peerMAC, hostMAC, layers.EthernetTypeIPv4), ipv4(peer4, host4, layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, 3)}, gopacket.Payload("quoted header"))
	tcp := serialize(t, ethernet(peerMAC, hostMAC, layers.EthernetTypeIPv4), ipv4(peer4, host4, layers.IPProtocolTCP), gopacket.Payload(make([]byte, 20)))

	for _, tc := range []struct {
		name  string
		frame []byte
		want  tap.DropReason
	}{
		{"runt", []byte{1, 2, 3}, tap.DropTruncated},
		{"another MAC", with(good4(), func(f []byte) { copy(f, otherMAC[:]) }), tap.DropNotForUs},
		{"IPv4 multicast MAC", with(good4(), func(f []byte) { copy(f, []byte{1, 0, 0x5e, 0, 0, 1}) }), tap.DropNotForUs},
		{"another IPv4 address", with(good4(), func(f []byte) { f[33] = 9; fix4(f) }), tap.DropNotForUs},
		{"another IPv6 address", with(good6(), func(f []byte) { f[14+39] = 9 }), tap.DropNotForUs},
		{"multicast source MAC", with(good4(), func(f []byte) { f[6] |= 1 }), tap.DropBadSourceMAC},
		{"our own MAC", with(good4(), func(f []byte) { copy(f[6:], hostMAC[:]) }), tap.DropBadSourceMAC},
		{"VLAN tag", vlan, tap.DropVLAN},
		{"LLDP-ish EtherType", with(good4(), func(f []byte) { f[12], f[13] = 0x88, 0xcc }), tap.DropNotIP},
		{"802.3 length", with(good4(), func(f []byte) { f[12], f[13] = 0, 0x40 }), tap.DropNotIP},
		{"IPv4 header cut", good4()[:30], tap.DropTruncated},
		{"IPv4 total length beyond the frame", with(good4(), func(f []byte) { f[16]++; fix4(f) }), tap.DropTruncated},
		{"IPv6 payload beyond the frame", with(good6(), func(f []byte) { f[18]++ }), tap.DropTruncated},
		{"IPv6 in an IPv4 EtherType", with(good6(), func(f []byte) { f[12], f[13] = 8, 0 }), tap.DropBadIPHeader},
		{"IHL 4", with(good4(), func(f []byte) { f[14] = 0x44; fix4(f) }), tap.DropBadIPHeader},
		{"bad IPv4 checksum", with(good4(), func(f []byte) { f[24] ^= 0xff }), tap.DropIPv4Checksum},
		{"IPv4 multicast source", with(good4(), func(f []byte) { f[26] = 224; fix4(f) }), tap.DropBadSourceIP},
		{"IPv6 multicast source", with(good6(), func(f []byte) { f[22] = 0xff }), tap.DropBadSourceIP},
		{"IPv6 unspecified source", with(good6(), func(f []byte) { clear(f[22:38]) }), tap.DropBadSourceIP},
		{"IPv4 more fragments", with(good4(), func(f []byte) { f[20] = 0x20; fix4(f) }), tap.DropFragment},
		{"IPv4 fragment offset", with(good4(), func(f []byte) { f[20], f[21] = 0, 0xb9; fix4(f) }), tap.DropFragment},
		{"IPv6 fragment header", frag6, tap.DropFragment},
		{"IPv6 hop-by-hop", hopByHop, tap.DropIPv6Extension},
		{"TCP", tcp, tap.DropOtherProtocol},
		{"UDP to another port", udpTo(53), tap.DropOtherUDPPort},
		{"UDP length beyond IP", with(good4(), func(f []byte) { f[38] = 0xff }), tap.DropBadUDPLength},
		{"UDP length below 8", with(good4(), func(f []byte) { f[38], f[39] = 0, 7 }), tap.DropBadUDPLength},
		{"UDP header cut", with(good4()[:40], func(f []byte) { f[16], f[17] = 0, 26; fix4(f) }), tap.DropTruncated},
		{"bad UDP checksum", with(roceFrame(t, n4, ib4, true), func(f []byte) { f[40] ^= 1 }), tap.DropUDPChecksum},
		{"ICMP unreachable", unreach, tap.DropOtherICMP},
		{"echo to another address", echo4Frame(t, other4, 1, 1, nil), tap.DropNotForUs},
		{"IB packet too long", long(), tap.DropTooLong},
		{"bad ICRC", with(good6(), func(f []byte) { f[len(f)-5] ^= 1 }), tap.DropRoCE},
		{"unsolicited ARP reply", arpFrame(t, hostMAC, layers.ARPReply, peerMAC, peer4, hostMAC, host4), tap.DropUnsolicited},
		{"ARP reply for another", arpFrame(t, otherMAC, layers.ARPReply, peerMAC, peer4, otherMAC, other4), tap.DropNotForUs},
		{"ARP for IPv6", with(arpFrame(t, bcastMAC, layers.ARPRequest, peerMAC, peer4, [6]byte{}, host4), func(f []byte) { f[16] = 0x86 }), tap.DropBadARP},
		{"ARP op 3", with(arpFrame(t, bcastMAC, layers.ARPRequest, peerMAC, peer4, [6]byte{}, host4), func(f []byte) { f[21] = 3 }), tap.DropBadARP},
		{"ARP from a multicast MAC", with(arpFrame(t, bcastMAC, layers.ARPRequest, peerMAC, peer4, [6]byte{}, host4), func(f []byte) { f[22] |= 1 }), tap.DropBadSourceMAC},
		{"ARP cut", arpFrame(t, bcastMAC, layers.ARPRequest, peerMAC, peer4, [6]byte{}, host4)[:40], tap.DropTruncated},
		{"unsolicited NA", naFrame(t, hostMAC, peer6, host6, peer6, 0x60, peerMAC), tap.DropUnsolicited},
		{"NS with an option of length 0", with(nsFrame(t, peerLL, host6), func(f []byte) { f[len(f)-7] = 0; fixICMPv6(f) }), tap.DropBadND},
		{"echo to all nodes", with(echo6Frame(t, allNodes, 1, 1, nil), func(f []byte) { copy(f, []byte{0x33, 0x33, 0, 0, 0, 1}) }), tap.DropNotForUs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, out := newHost(t, tap.Config{MTU: 9000})
			var p link.Packet
			o, r := h.Receive(t0, tc.frame, &p)
			require.Equal(t, tc.want, r, "%v: %v", o, r)
			require.Equal(t, tap.Dropped, o)
			require.Empty(t, out.take())
			s := h.Stats()
			require.Equal(t, uint64(1), s.RxDropped[tc.want])
			require.Equal(t, uint64(1), s.Dropped())
			requireCounted(t, s)
		})
	}
}

// TestSendDrops: packets Send cannot frame are counted by reason.
func TestSendDrops(t *testing.T) {
	h, out := newHost(t, tap.Config{Addrs: []netip.Addr{host6}})
	ib := make([]byte, 100)
	for _, tc := range []struct {
		name string
		n    wire.Net
		ib   []byte
		want tap.TxDropReason
	}{
		{"no destination", wire.Net{Src: host6}, ib, tap.TxBadAddress},
		{"unspecified destination", wire.Net{Dst: netip.IPv6Unspecified()}, ib, tap.TxBadAddress},
		{"families differ", wire.Net{Src: host6, Dst: peer4}, ib, tap.TxBadAddress},
		{"no IPv4 address", wire.Net{Dst: peer4}, ib, tap.TxBadSource},
		{"not our source", wire.Net{Src: peer6, Dst: host6}, ib, tap.TxBadSource},
		{"to ourselves", wire.Net{Dst: host6}, ib, tap.TxLoopback},
		{"beyond the MTU", wire.Net{Dst: peer6}, make([]byte, 1500-40-8+1), tap.TxTooBig},
	} {
		before := h.Stats().TxDropped
		h.Send(t0, []link.Packet{{Buf: tc.ib, Net: tc.n}})
		after := h.Stats().TxDropped
		before[tc.want]++
		require.Equal(t, before, after, tc.name)
	}
	require.Empty(t, out.take())
	h.Send(t0, []link.Packet{{Buf: make([]byte, 1500-40-8), Net: wire.Net{Dst: peer6}}})
	require.Len(t, out.take(), 1, "a solicitation; the packet fits and waits")
	require.Equal(t, uint64(1), h.Stats().TxQueued)
}

// TestSendDefaults: a zero source, ports and hop limit are filled in; a
// multicast destination needs no resolution.
func TestSendDefaults(t *testing.T) {
	h, out := newHost(t, tap.Config{})
	var p link.Packet
	h.Receive(t0, arpFrame(t, bcastMAC, layers.ARPRequest, peerMAC, peer4, [6]byte{}, host4), &p)
	h.Receive(t0, nsFrame(t, peerLL, hostLL), &p)
	out.take()
	for _, tc := range []struct {
		dst, src netip.Addr
		mac      [6]byte
	}{
		{peer4, host4, peerMAC},
		{peerLL, hostLL, peerMAC},
		{netip.MustParseAddr("239.1.2.3"), host4, [6]byte{1, 0, 0x5e, 1, 2, 3}},
		{netip.MustParseAddr("ff0e::1:2:3"), host6, [6]byte{0x33, 0x33, 0, 2, 0, 3}},
		{netip.MustParseAddr("255.255.255.255"), host4, bcastMAC},
	} {
		n := wire.Net{Src: tc.src, Dst: tc.dst, SrcPort: wire.RoCEv2Port, DstPort: wire.RoCEv2Port, HopLimit: 64, DontFragment: true}
		ib := ibPacket(&n, 1, 20)
		h.Send(t0, []link.Packet{{Buf: ib, Net: wire.Net{Dst: tc.dst}}})
		f := out.take()
		require.NotEmpty(t, f, "%v", tc.dst)
		requireRoCE(t, f[len(f)-1], tc.mac, n, ib)
	}
	require.Equal(t, uint64(5), h.Stats().TxPackets)
}

// TestNoAllocs: receiving a RoCEv2 frame, sending one to a known
// neighbour, and waiting for resolution allocate nothing (once the pool's
// buffer exists).
func TestNoAllocs(t *testing.T) {
	c := &counter{}
	h, err := tap.New(tap.Config{MAC: hostMAC, Addrs: []netip.Addr{host4, host6}}, c)
	require.NoError(t, err)
	n4, n6 := netFromPeer(false), netFromPeer(true)
	f4, f6 := roceFrame(t, n4, ibPacket(&n4, 1, 1024), false), roceFrame(t, n6, ibPacket(&n6, 1, 1024), true)
	var p link.Packet
	require.Zero(t, testing.AllocsPerRun(100, func() {
		if o, _ := h.Receive(t0, f4, &p); o != tap.Delivered {
			panic("not delivered")
		}
		if o, _ := h.Receive(t0, f6, &p); o != tap.Delivered {
			panic("not delivered")
		}
	}), "Receive")

	h.Receive(t0, arpFrame(t, bcastMAC, layers.ARPRequest, peerMAC, peer4, [6]byte{}, host4), &p)
	h.Receive(t0, arpFrame(t, hostMAC, layers.ARPReply, peerMAC, peer4, hostMAC, host4), &p)
	sn := wire.Net{Src: host4, Dst: peer4, SrcPort: entropyPt, DstPort: wire.RoCEv2Port, DontFragment: true}
	pkts := []link.Packet{{Buf: ibPacket(&sn, 1, 1024), Net: sn}, {Buf: ibPacket(&sn, 2, 1024), Net: sn}}
	before := c.n
	require.Zero(t, testing.AllocsPerRun(100, func() { h.Send(t0, pkts) }), "Send")
	require.Equal(t, before+2*101, c.n)

	// Waiting for resolution, being resolved, going stale, being
	// re-confirmed in vain and removed; the first round makes the pool's
	// buffer.
	wait := []link.Packet{{Buf: pkts[0].Buf, Net: wire.Net{Src: host4, Dst: other4}}}
	reply := arpFrame(t, hostMAC, layers.ARPReply, otherMAC, other4, hostMAC, host4)
	now := t0
	cycle := func() {
		h.Send(now, wait)
		if o, _ := h.Receive(now, reply, &p); o != tap.Learned {
			panic("not learned")
		}
		now = now.Add(time.Hour)
		h.Send(now, wait)
		for i := 1; i <= tap.DefaultSolicits; i++ {
			h.Timer(now.Add(time.Duration(i) * time.Second))
		}
		now = now.Add(time.Hour)
	}
	cycle()
	require.Zero(t, testing.AllocsPerRun(100, cycle), "resolution")
	s := h.Stats()
	require.Equal(t, uint64(102), s.ResolveFailed)
	require.Equal(t, uint64(102), s.TxQueued)
}

// TestAnnounce: a host announces its MAC for each address (a gratuitous
// ARP request per IPv4 address, an unsolicited override advertisement per
// IPv6 one), and a peer whose cache held another MAC for the addresses
// sends to the announced one at once.
func TestAnnounce(t *testing.T) {
	h, out := newHost(t, tap.Config{})
	peer, pout := newHost(t, tap.Config{MAC: peerMAC, Addrs: []netip.Addr{peer4, peer6}})
	var p link.Packet
	send := func(dst netip.Addr) {
		n := wire.Net{Src: peer4, Dst: dst, DstPort: wire.RoCEv2Port, HopLimit: 64, DontFragment: true}
		if dst.Is6() {
			n.Src = peer6
		}
		peer.Send(t0, []link.Packet{{Buf: ibPacket(&n, 0, 10), Net: n}})
	}
	// The peer first knows the addresses at otherMAC (a host that had
	// them before).
	send(host4)
	send(host6)
	pout.take()
	o, _ := peer.Receive(t0, arpFrame(t, peerMAC, layers.ARPReply, otherMAC, host4, peerMAC, peer4), &p)
	require.Equal(t, tap.Learned, o)
	na := naFrame(t, peerMAC, host6, peer6, host6, 0x60, otherMAC)
	copy(na[6:12], otherMAC[:])
	o, _ = peer.Receive(t0, na, &p)
	require.Equal(t, tap.Learned, o)
	for _, f := range pout.take() {
		require.Equal(t, hw(otherMAC), decode(t, f).Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
	}

	h.Announce()
	f := out.take()
	require.Len(t, f, 3, "one for host4, host6 and the link-local address")
	pkt := requireIsomorphic(t, f[0])
	require.Equal(t, hw(bcastMAC), pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC)
	a := pkt.Layer(layers.LayerTypeARP).(*layers.ARP)
	require.Equal(t, uint16(layers.ARPRequest), a.Operation)
	require.Equal(t, hostMAC[:], a.SourceHwAddress)
	require.Equal(t, host4.AsSlice(), a.SourceProtAddress)
	require.Equal(t, host4.AsSlice(), a.DstProtAddress, "an announcement: target address = sender address")
	require.Equal(t, make([]byte, 6), a.DstHwAddress)
	for i, want := range []netip.Addr{host6, hostLL} {
		pkt := requireIsomorphic(t, f[1+i])
		ip6 := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		require.Equal(t, ip(want), ip6.SrcIP)
		require.Equal(t, ip(allNodes), ip6.DstIP)
		require.Equal(t, uint8(255), ip6.HopLimit)
		adv := pkt.Layer(layers.LayerTypeICMPv6NeighborAdvertisement).(*layers.ICMPv6NeighborAdvertisement)
		require.Equal(t, ip(want), adv.TargetAddress)
		require.Equal(t, uint8(0x20), adv.Flags, "override, not solicited")
		require.Len(t, adv.Options, 1)
		require.Equal(t, layers.ICMPv6OptTargetAddress, adv.Options[0].Type)
		require.Equal(t, hostMAC[:], adv.Options[0].Data)
	}
	require.Equal(t, uint64(3), h.Stats().Announcements)

	// The peer takes the new MAC from them.
	for _, fr := range f {
		o, r := peer.Receive(t0, fr, &p)
		require.Contains(t, []tap.Outcome{tap.Learned, tap.Dropped}, o)
		if o == tap.Dropped {
			require.Equal(t, tap.DropUnsolicited, r, "the link-local announcement: the peer has no entry for it")
		}
	}
	for _, dst := range []netip.Addr{host4, host6} {
		send(dst)
		fs := pout.take()
		require.NotEmpty(t, fs)
		last := decode(t, fs[len(fs)-1])
		require.Equal(t, hw(hostMAC), last.Layer(layers.LayerTypeEthernet).(*layers.Ethernet).DstMAC, "to %v", dst)
	}
	requireCounted(t, h.Stats())
	requireCounted(t, peer.Stats())
}

// TestResolutionQueueDefault: by default a whole RC window (128 packets)
// waits for a neighbour being resolved and goes out when it answers; the
// next packet is dropped and counted. (With 16, an RC QP's first burst
// to a new peer lost its tail, which only a retry timeout recovered.)
func TestResolutionQueueDefault(t *testing.T) {
	h, out := newHost(t, tap.Config{})
	for i := range tap.DefaultQueuePerNeighbour + 1 {
		sendTo(h, t0, peer4, uint32(i), 20)
	}
	require.Len(t, out.take(), 1, "one ARP request")
	s := h.Stats()
	require.Equal(t, uint64(128), s.TxQueued)
	require.Equal(t, uint64(1), s.TxDropped[tap.TxQueueFull])
	var p link.Packet
	o, _ := h.Receive(t0, arpFrame(t, hostMAC, layers.ARPReply, peerMAC, peer4, hostMAC, host4), &p)
	require.Equal(t, tap.Learned, o)
	require.Len(t, out.take(), 128)
	require.Equal(t, uint64(128), h.Stats().TxPackets)
}

// looper is a recorder that also takes the packets for the host's own
// addresses.
type looper struct {
	recorder
	nets []wire.Net
	ibs  [][]byte
}

func (l *looper) Loop(n wire.Net, ib []byte) {
	l.nets, l.ibs = append(l.nets, n), append(l.ibs, bytes.Clone(ib))
}

// TestSendLoopsToALooper: a packet for one of the host's own addresses
// goes to a Looper emitter with Send's defaults filled in, no frame is
// emitted and nothing is dropped; one too large for the MTU is still
// dropped as such.
func TestSendLoopsToALooper(t *testing.T) {
	out := &looper{}
	h, err := tap.New(tap.Config{MAC: hostMAC, Addrs: []netip.Addr{host4, host6}}, out)
	require.NoError(t, err)
	n := wire.Net{Dst: host6, TrafficClass: 2}
	want := wire.Net{Src: host6, Dst: host6, SrcPort: wire.RoCEv2Port, DstPort: wire.RoCEv2Port, TrafficClass: 2, HopLimit: 64, DontFragment: true}
	ib := ibPacket(&want, 3, 40)
	big := ibPacket(&want, 4, 1500)
	h.Send(t0, []link.Packet{{Buf: ib, Net: n}, {Buf: big, Net: n}})
	require.Empty(t, out.take(), "no frame")
	require.Equal(t, []wire.Net{want}, out.nets)
	require.Equal(t, [][]byte{ib}, out.ibs)
	s := h.Stats()
	require.Zero(t, s.TxDropped[tap.TxLoopback])
	require.Equal(t, uint64(1), s.TxDropped[tap.TxTooBig])
}
