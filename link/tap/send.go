package tap

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// Send frames the RoCEv2 packets (see link.Packet) and emits them, in
// order, to their neighbours' MACs. A packet whose neighbour is not known
// yet waits (bounded, Config.QueuePerNeighbour and QueueTotal) while the
// host resolves it; it is emitted by the Receive that learns the MAC, or
// dropped by the Timer that gives up. Packets that cannot be sent are
// counted under a TxDropReason. Send is done with pkts when it returns.
//
// The IP and UDP headers come from p.Net: a zero (or unspecified) Src is
// the host's first address of the destination's family (for IPv6, the
// link-local address when the destination is link-local or the host has
// no other); a zero SrcPort or DstPort is 4791; a zero HopLimit is 64.
// TrafficClass and, for IPv6, FlowLabel are sent as given. The IPv4 ID is
// 0 and DF is set whatever p.Net says, as link.Packet requires of the
// ICRC in p.Buf.
func (h *Host) Send(now time.Time, pkts []link.Packet) {
	for i := range pkts {
		if r := h.send(now, &pkts[i]); r != TxDropNone {
			h.stats.TxDropped[r]++
		}
	}
}

func (h *Host) send(now time.Time, p *link.Packet) TxDropReason {
	n, r := h.outNet(p)
	if r == TxLoopback && h.loop != nil {
		h.loop.Loop(n, p.Buf)
		return TxDropNone
	}
	if r != TxDropNone {
		return r
	}
	ipLen := n.IPHeaderSize() + wire.UDPHeaderSize + len(p.Buf)
	frameLen := ethHdrLen + ipLen

	var mac [6]byte
	if n.Dst.IsMulticast() || n.Dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		mac = multicastMAC(n.Dst)
	} else {
		e := h.neigh.lookup(n.Dst)
		if e == nil {
			if e = h.newEntry(now, n.Dst); e == nil {
				return TxCacheFull
			}
			e.state, e.src = nudIncomplete, n.Src
			h.startSolicit(now, e)
		}
		e.used = now
		if e.state == nudIncomplete {
			return h.enqueue(e, frameLen, &n, p.Buf)
		}
		if e.stale(now, h.cfg.ReachableTime) {
			// Use the MAC, and re-confirm it (RFC 4861 7.3.3, without
			// the DELAY state: nothing above tells the host that the
			// neighbour answers).
			e.state, e.src = nudProbe, n.Src
			h.startSolicit(now, e)
		}
		mac = e.mac
	}
	b := h.buf[:frameLen]
	h.putRoCE(b, mac, &n, p.Buf)
	h.out.Emit(b)
	h.stats.TxPackets++
	h.stats.TxBytes += uint64(len(p.Buf))
	return TxDropNone
}

// outNet returns the IP and UDP fields a packet given to Send goes out
// with (Send's defaults filled in, ID 0 and DF set), or why it cannot go:
// TxLoopback, last, when it is fit to go but for one of the host's own
// addresses (a Looper takes those).
func (h *Host) outNet(p *link.Packet) (wire.Net, TxDropReason) {
	n := p.Net
	n.Dst = n.Dst.Unmap().WithZone("")
	n.Src = n.Src.Unmap().WithZone("")
	if !n.Dst.IsValid() || n.Dst.IsUnspecified() {
		return n, TxBadAddress
	}
	if !n.Src.IsValid() || n.Src.IsUnspecified() {
		n.Src = h.source(n.Dst)
		if !n.Src.IsValid() {
			return n, TxBadSource
		}
	}
	if n.Src.Is4() != n.Dst.Is4() {
		return n, TxBadAddress
	}
	if !h.isOurs(n.Src) {
		return n, TxBadSource
	}
	if n.SrcPort == 0 {
		n.SrcPort = wire.RoCEv2Port
	}
	if n.DstPort == 0 {
		n.DstPort = wire.RoCEv2Port
	}
	if n.HopLimit == 0 {
		n.HopLimit = defaultHopLimit
	}
	n.ID, n.DontFragment = 0, true
	if n.IPHeaderSize()+wire.UDPHeaderSize+len(p.Buf) > h.cfg.MTU || len(p.Buf) > link.MaxPacketSize {
		return n, TxTooBig
	}
	if h.isOurs(n.Dst) {
		return n, TxLoopback
	}
	return n, TxDropNone
}

// source returns the host's address that packets to dst leave from when
// they name none, or the zero Addr if it has none of dst's family.
func (h *Host) source(dst netip.Addr) netip.Addr {
	if dst.Is4() {
		if len(h.v4) > 0 {
			return netip.AddrFrom4(h.v4[0])
		}
		return netip.Addr{}
	}
	if !dst.IsLinkLocalUnicast() {
		for _, a := range h.v6 {
			if b := netip.AddrFrom16(a); !b.IsLinkLocalUnicast() {
				return b
			}
		}
	}
	return h.linkLocal
}

// putRoCE assembles a RoCEv2 frame in b (exactly its length).
func (h *Host) putRoCE(b []byte, mac [6]byte, n *wire.Net, ib []byte) {
	et := uint16(etherTypeIPv4)
	if n.IsIPv6() {
		et = etherTypeIPv6
	}
	putEth(b, mac, h.mac, et)
	k := wire.EncodeIPUDP(b[ethHdrLen:], n, len(ib))
	copy(b[ethHdrLen+k:], ib)
}

// enqueue keeps a packet for e, framed but for the destination MAC, until
// e is resolved.
func (h *Host) enqueue(e *neighbour, frameLen int, n *wire.Net, ib []byte) TxDropReason {
	if len(e.queue) == cap(e.queue) {
		return TxQueueFull
	}
	i, b := h.pool.get(frameLen)
	if i < 0 {
		return TxQueueFull
	}
	h.putRoCE(b, [6]byte{}, n, ib)
	e.queue = append(e.queue, i)
	h.stats.TxQueued++
	return TxDropNone
}

// flush emits the packets waiting for e, now that its MAC is known.
func (h *Host) flush(e *neighbour) {
	for _, i := range e.queue {
		b := h.pool.frames[i]
		copy(b[ethDst:], e.mac[:])
		h.out.Emit(b)
		hdr := ethHdrLen + wire.IPv4HeaderSize + wire.UDPHeaderSize
		if binary.BigEndian.Uint16(b[ethType:]) == etherTypeIPv6 {
			hdr = ethHdrLen + wire.IPv6HeaderSize + wire.UDPHeaderSize
		}
		h.stats.TxPackets++
		h.stats.TxBytes += uint64(len(b) - hdr)
		h.pool.put(i)
	}
	e.queue = e.queue[:0]
}

// newEntry makes an entry for a, evicting the least recently used entry
// that is not resolving when the cache is full; nil when every entry is
// resolving.
func (h *Host) newEntry(now time.Time, a netip.Addr) *neighbour {
	e := h.neigh.add(a)
	if e == nil {
		v := h.neigh.victim()
		if v == nil {
			return nil
		}
		h.neigh.remove(v)
		h.stats.Evicted++
		e = h.neigh.add(a)
	}
	e.used = now
	return e
}

// learn records that addr is at mac. confirmed says the neighbour
// answered the host (an ARP reply to its MAC, a solicited advertisement):
// the entry becomes reachable. Otherwise (the neighbour's own request, an
// overheard or unsolicited message) a new or changed MAC is stale and an
// unchanged one keeps its state. create makes an entry when there is none
// (evicting if need be). An entry being resolved takes the MAC and emits
// its waiting packets. learn reports whether an entry took the news.
func (h *Host) learn(now time.Time, addr netip.Addr, mac [6]byte, confirmed, create bool) bool {
	e := h.neigh.lookup(addr)
	if e == nil {
		if !create {
			return false
		}
		if e = h.newEntry(now, addr); e == nil {
			return false
		}
		e.state, e.mac = nudStale, mac
		return true
	}
	switch {
	case e.state == nudIncomplete:
		e.mac = mac
		e.state = nudStale
		if confirmed {
			e.state, e.confirmed = nudReachable, now
		}
		e.sent = 0
		h.stats.Resolved++
		h.flush(e)
	case confirmed:
		e.mac, e.state, e.confirmed, e.sent = mac, nudReachable, now, 0
	case mac != e.mac:
		e.mac, e.state, e.sent = mac, nudStale, 0
	}
	return true
}

// startSolicit sends the first request of a resolution (nudIncomplete) or
// re-confirmation (nudProbe) of e.
func (h *Host) startSolicit(now time.Time, e *neighbour) {
	e.sent = 1
	e.next = now.Add(h.cfg.RetryInterval)
	h.solicit(e)
}

// solicit emits a request for e's MAC: broadcast (ARP) or to the
// solicited-node group (neighbour solicitation) while e has no MAC,
// unicast to the MAC it has when re-confirming it (RFC 4861 7.3.3; Linux
// probes the same way for ARP).
func (h *Host) solicit(e *neighbour) {
	unicast := e.state == nudProbe
	if e.addr.Is4() {
		b := h.buf[:ethHdrLen+arpLen]
		to, tha := broadcastMAC, [6]byte{}
		if unicast {
			to, tha = e.mac, e.mac
		}
		putEth(b, to, h.mac, etherTypeARP)
		a := b[ethHdrLen:]
		binary.BigEndian.PutUint16(a[arpHType:], arpHWEth)
		binary.BigEndian.PutUint16(a[arpPType:], etherTypeIPv4)
		a[arpHLen], a[arpPLen] = 6, 4
		binary.BigEndian.PutUint16(a[arpOp:], arpOpReq)
		spa, tpa := e.src.As4(), e.addr.As4()
		copy(a[arpSHA:], h.mac[:])
		copy(a[arpSPA:], spa[:])
		copy(a[arpTHA:], tha[:])
		copy(a[arpTPA:], tpa[:])
		h.out.Emit(b)
		h.stats.ARPRequests++
		return
	}
	target := e.addr.As16()
	ipDst := solicitedNode(target)
	to := multicastMAC(netip.AddrFrom16(ipDst))
	if unicast {
		ipDst, to = target, e.mac
	}
	src := e.src.As16()
	b := h.putND(to, src, ipDst, icmp6NS, target, ndOptSLLA)
	h.putICMPv6Checksum(b[ethHdrLen+ipv6HdrLen:], src, ipDst)
	h.out.Emit(b)
	h.stats.NeighbourSolicits++
}

// Timer sends the requests due by now (retries of resolutions and
// re-confirmations) and gives up on neighbours that did not answer
// Config.Solicits of them: their waiting packets are dropped
// (TxUnresolved) and their entries removed. Call it at NextDeadline, or
// more often.
func (h *Host) Timer(now time.Time) {
	for i := range h.neigh.entries {
		e := &h.neigh.entries[i]
		if !e.resolving() || now.Before(e.next) {
			continue
		}
		if e.sent < h.cfg.Solicits {
			e.sent++
			e.next = now.Add(h.cfg.RetryInterval)
			h.solicit(e)
			continue
		}
		h.stats.ResolveFailed++
		for _, q := range e.queue {
			h.pool.put(q)
			h.stats.TxDropped[TxUnresolved]++
		}
		e.queue = e.queue[:0]
		h.neigh.remove(e)
	}
}

// NextDeadline returns when Timer next has something to do, and false
// when nothing is pending (no neighbour is being resolved).
func (h *Host) NextDeadline() (time.Time, bool) {
	var t time.Time
	ok := false
	for i := range h.neigh.entries {
		e := &h.neigh.entries[i]
		if e.resolving() && (!ok || e.next.Before(t)) {
			t, ok = e.next, true
		}
	}
	return t, ok
}

// Announce tells the link the host's MAC for each of its addresses, as a
// host does when its interface comes up or moves (Linux's arp_notify and
// ndisc_notify, QEMU's announce after migration): a gratuitous ARP
// request (RFC 5227's announcement: sender and target the address) for
// each IPv4 address, and an unsolicited neighbour advertisement with the
// override flag to all-nodes (RFC 4861 7.2.6) for each IPv6 one. Peers
// whose caches hold another MAC for an address (a host that was there
// before, with another MAC) update them at once instead of sending to it
// until their entries go stale.
func (h *Host) Announce() {
	for _, a := range h.v4 {
		b := h.buf[:ethHdrLen+arpLen]
		putEth(b, broadcastMAC, h.mac, etherTypeARP)
		r := b[ethHdrLen:]
		binary.BigEndian.PutUint16(r[arpHType:], arpHWEth)
		binary.BigEndian.PutUint16(r[arpPType:], etherTypeIPv4)
		r[arpHLen], r[arpPLen] = 6, 4
		binary.BigEndian.PutUint16(r[arpOp:], arpOpReq)
		copy(r[arpSHA:], h.mac[:])
		copy(r[arpSPA:], a[:])
		clear(r[arpTHA : arpTHA+6])
		copy(r[arpTPA:], a[:])
		h.out.Emit(b)
		h.stats.Announcements++
	}
	for _, a := range h.v6 {
		h.emitNA(multicastMAC(netip.AddrFrom16(ipv6AllNodes)), ipv6AllNodes, a, ndFlagOverride)
		h.stats.Announcements++
	}
}
