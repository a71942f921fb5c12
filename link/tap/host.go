package tap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// Emitter takes the frames a Host sends.
type Emitter interface {
	// Emit sends one Ethernet frame (destination MAC first, no FCS). The
	// frame is the host's buffer, valid only until Emit returns.
	Emit(frame []byte)
}

// Looper is an Emitter that also takes the packets Send is given for the
// host's own addresses, which no frame on the link would bring back
// (Link loops them back to its reader, as rxe does). Without it Send
// drops them (TxLoopback).
type Looper interface {
	Emitter
	// Loop takes one such packet: n is the IP and UDP fields it goes
	// with (Send's defaults filled in), ib the InfiniBand packet, the
	// caller's, valid only until Loop returns.
	Loop(n wire.Net, ib []byte)
}

// Config describes a host. The zero value of each field but MAC means its
// default.
type Config struct {
	// MAC is the host's Ethernet address: unicast and not zero.
	MAC [6]byte
	// Addrs are the host's IPv4 and IPv6 addresses (unicast; IPv4-mapped
	// addresses count as IPv4, zones are ignored). The IPv6 link-local
	// address derived from MAC (wire.LinkLocalFromGUID of
	// wire.GUIDFromMAC, rxe's GID index 0) is always the host's too, as
	// the kernel gives it to an interface, so the host answers neighbour
	// discovery for it.
	Addrs []netip.Addr
	// MTU is the interface's IP MTU: Send drops larger packets, and
	// PathMTU derives the InfiniBand MTU from it. Default 1500; at least
	// 1280 (IPv6 needs it) and at most 65535.
	MTU int
	// NeighbourCache is the number of neighbours the cache holds.
	// Default 256.
	NeighbourCache int
	// QueuePerNeighbour is how many packets may wait for one neighbour
	// to be resolved. Default 128: an RC QP's first burst (up to its
	// window of 128 packets, and the ACKs with it) to a peer not yet
	// resolved waits whole instead of losing its tail to a retry timeout
	// (Linux keeps 101 full-sized frames, unres_qlen_bytes).
	QueuePerNeighbour int
	// QueueTotal is how many packets may wait for resolution in all; their
	// buffers are made when first needed and kept. Default 512.
	QueueTotal int
	// Solicits is how many requests (ARP requests, neighbour
	// solicitations) one resolution or re-confirmation sends before it
	// gives up. Default 3, as Linux's mcast_solicit and ucast_solicit.
	Solicits int
	// RetryInterval is the time between those requests, and after the
	// last before giving up. Default 1s (Linux's retrans_time, RFC 4861's
	// RetransTimer).
	RetryInterval time.Duration
	// ReachableTime is how long a neighbour's confirmed MAC is trusted;
	// after it, the next packet to the neighbour still uses the MAC but
	// starts a re-confirmation. Default 30s (RFC 4861's
	// REACHABLE_TIME, without the random factor).
	ReachableTime time.Duration
}

// Defaults of Config.
const (
	DefaultMTU               = 1500
	DefaultNeighbourCache    = 256
	DefaultQueuePerNeighbour = 128
	DefaultQueueTotal        = 512
	DefaultSolicits          = 3
	DefaultRetryInterval     = time.Second
	DefaultReachableTime     = 30 * time.Second
)

// Host is the frame layer of a host on an Ethernet link: see the package
// comment. A Host is not safe for concurrent use; its owner serialises the
// calls, and Emit is called from within them.
type Host struct {
	cfg  Config
	out  Emitter
	loop Looper // out, if it is a Looper
	mac  [6]byte

	// The host's addresses: as netip for Send's checks, and as arrays
	// for Receive's, with the IPv6 solicited-node groups.
	addrs     []netip.Addr
	v4        [][4]byte
	v6        [][16]byte
	v6Sol     [][16]byte
	linkLocal netip.Addr

	// buf is where every frame the host builds is assembled, except those
	// that wait for resolution (in pool).
	buf []byte
	// wp is wire.Parse's output for the packet being received.
	wp wire.Packet

	neigh neighTable
	pool  framePool
	stats Stats
}

// New returns a host that emits its frames to out.
func New(cfg Config, out Emitter) (*Host, error) {
	if out == nil {
		return nil, errors.New("tap: no Emitter")
	}
	if cfg.MAC == ([6]byte{}) || isMulticastMAC(cfg.MAC[:]) {
		return nil, fmt.Errorf("tap: MAC %s is not a unicast address", macString(cfg.MAC))
	}
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.MTU < 1280 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("tap: MTU %d is outside 1280..65535", cfg.MTU)
	}
	def := func(v *int, d int, name string) error {
		if *v == 0 {
			*v = d
		}
		if *v < 0 {
			return fmt.Errorf("tap: %s %d is negative", name, *v)
		}
		return nil
	}
	if err := errors.Join(
		def(&cfg.NeighbourCache, DefaultNeighbourCache, "NeighbourCache"),
		def(&cfg.QueuePerNeighbour, DefaultQueuePerNeighbour, "QueuePerNeighbour"),
		def(&cfg.QueueTotal, DefaultQueueTotal, "QueueTotal"),
		def(&cfg.Solicits, DefaultSolicits, "Solicits"),
	); err != nil {
		return nil, err
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	if cfg.ReachableTime == 0 {
		cfg.ReachableTime = DefaultReachableTime
	}
	if cfg.RetryInterval < 0 || cfg.ReachableTime < 0 {
		return nil, errors.New("tap: negative RetryInterval or ReachableTime")
	}

	h := &Host{out: out, mac: cfg.MAC}
	h.loop, _ = out.(Looper)
	h.linkLocal = wire.LinkLocalFromGUID(wire.GUIDFromMAC(cfg.MAC))
	addrs := make([]netip.Addr, 0, len(cfg.Addrs)+1)
	addrs = append(addrs, cfg.Addrs...)
	addrs = append(addrs, h.linkLocal)
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			return nil, fmt.Errorf("tap: %v is not a unicast address", a)
		}
		if h.isOurs(a) {
			continue
		}
		h.addrs = append(h.addrs, a)
		if a.Is4() {
			h.v4 = append(h.v4, a.As4())
		} else {
			h.v6 = append(h.v6, a.As16())
			h.v6Sol = append(h.v6Sol, solicitedNode(a.As16()))
		}
	}
	cfg.Addrs = h.addrs
	h.cfg = cfg

	// The largest frame the host builds: a RoCEv2 packet within the MTU,
	// or an echo reply as large as the MTU.
	h.buf = make([]byte, ethHdrLen+cfg.MTU)
	h.neigh.init(cfg.NeighbourCache, cfg.QueuePerNeighbour)
	h.pool.init(cfg.QueueTotal, ethHdrLen+min(cfg.MTU, wire.IPv6HeaderSize+wire.UDPHeaderSize+link.MaxPacketSize))
	return h, nil
}

// MAC returns the host's MAC address.
func (h *Host) MAC() [6]byte { return h.mac }

// Addrs returns the host's addresses: Config.Addrs (unmapped, without
// zones or duplicates), then the link-local address if Config.Addrs does
// not list it.
func (h *Host) Addrs() []netip.Addr { return append([]netip.Addr(nil), h.addrs...) }

// LinkLocal returns the host's IPv6 link-local address, derived from its
// MAC as the kernel and rxe derive it: rxe's GID at index 0.
func (h *Host) LinkLocal() netip.Addr { return h.linkLocal }

// MTU returns the interface MTU.
func (h *Host) MTU() int { return h.cfg.MTU }

// PathMTU returns the active path MTU in bytes rxe would use on the
// interface (wire.NetdevPathMTU of the MTU: 1024 for 1500).
func (h *Host) PathMTU() int { return wire.NetdevPathMTU(h.cfg.MTU) }

// Config returns the configuration, defaults filled in and Addrs as
// Addrs returns them.
func (h *Host) Config() Config {
	c := h.cfg
	c.Addrs = h.Addrs()
	return c
}

// Stats returns the host's counters.
func (h *Host) Stats() Stats { return h.stats }

// isOurs reports whether a (unmapped, without zone) is one of the host's
// addresses.
func (h *Host) isOurs(a netip.Addr) bool {
	for _, o := range h.addrs {
		if o == a {
			return true
		}
	}
	return false
}

func (h *Host) ours4(a [4]byte) bool {
	for _, o := range h.v4 {
		if o == a {
			return true
		}
	}
	return false
}

func (h *Host) ours6(a [16]byte) bool {
	for _, o := range h.v6 {
		if o == a {
			return true
		}
	}
	return false
}

// dst6Kind classifies an IPv6 destination.
type dst6Kind uint8

const (
	dst6Other     dst6Kind = iota // not for the host
	dst6Unicast                   // one of its addresses
	dst6Solicited                 // the solicited-node group of one
	dst6AllNodes                  // ff02::1
)

func (h *Host) classify6(a [16]byte) dst6Kind {
	if a[0] != 0xff {
		if h.ours6(a) {
			return dst6Unicast
		}
		return dst6Other
	}
	if a == ipv6AllNodes {
		return dst6AllNodes
	}
	for _, s := range h.v6Sol {
		if s == a {
			return dst6Solicited
		}
	}
	return dst6Other
}

// Receive handles one Ethernet frame (destination MAC first, no FCS) that
// arrived at the host, and says what it did. A RoCEv2 packet for the host
// is Delivered: p.Buf is the InfiniBand packet (BTH through ICRC, a slice
// of frame) and p.Net its IP and UDP fields as they arrived (addresses,
// ports, traffic class, hop limit, flow label, the IPv4 ID and DF), the
// ICRC having been checked over the real headers. Requests for the host
// are Answered (the answer is emitted before Receive returns); neighbour
// replies, and overheard ARP packets that tell a cached neighbour's MAC,
// are Learned (emitting the packets that waited for the neighbour); and
// everything else is Dropped for the returned reason. Packets that waited
// for a neighbour may also be emitted when a request from it is
// Answered. p (which must not be nil) is written only when the outcome is
// Delivered.
func (h *Host) Receive(now time.Time, frame []byte, p *link.Packet) (Outcome, DropReason) {
	h.stats.RxFrames++
	o, r := h.receive(now, frame, p)
	switch o {
	case Delivered:
		h.stats.RxDelivered++
		h.stats.RxBytes += uint64(len(p.Buf))
	case Learned:
		h.stats.RxLearned++
	case Dropped:
		h.stats.RxDropped[r]++
	case Answered:
		// Counted by kind where the answer is made.
	case numOutcomes:
	}
	return o, r
}

func drop(r DropReason) (Outcome, DropReason) { return Dropped, r }

func (h *Host) receive(now time.Time, frame []byte, p *link.Packet) (Outcome, DropReason) {
	if len(frame) < ethHdrLen {
		return drop(DropTruncated)
	}
	dst := [6]byte(frame[ethDst:])
	if dst != h.mac && dst != broadcastMAC && (dst[0] != 0x33 || dst[1] != 0x33) {
		return drop(DropNotForUs)
	}
	if src := frame[ethSrc : ethSrc+6]; isMulticastMAC(src) || [6]byte(src) == h.mac {
		return drop(DropBadSourceMAC)
	}
	switch binary.BigEndian.Uint16(frame[ethType:]) {
	case etherTypeIPv4:
		return h.receiveIPv4(frame, p)
	case etherTypeIPv6:
		return h.receiveIPv6(now, frame, p)
	case etherTypeARP:
		return h.receiveARP(now, frame)
	case etherTypeVLAN, etherTypeQinQ, etherTypeQ91:
		return drop(DropVLAN)
	default:
		return drop(DropNotIP)
	}
}

func (h *Host) receiveIPv4(frame []byte, p *link.Packet) (Outcome, DropReason) {
	ip := frame[ethHdrLen:]
	if len(ip) < ipv4MinHdr {
		return drop(DropTruncated)
	}
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[ipv4TotalLen:]))
	if ip[0]>>4 != 4 || ihl < ipv4MinHdr || total < ihl {
		return drop(DropBadIPHeader)
	}
	if total > len(ip) {
		return drop(DropTruncated)
	}
	ip = ip[:total] // without Ethernet padding
	if fold(sum(ip[:ihl], 0)) != 0xffff {
		return drop(DropIPv4Checksum)
	}
	if !h.ours4([4]byte(ip[ipv4Dst:])) {
		return drop(DropNotForUs)
	}
	// Multicast, class E and the limited broadcast are no sources, nor
	// is 0.0.0.0 outside DHCP and ARP probes.
	if src := ip[ipv4Src : ipv4Src+4]; src[0] >= 224 || [4]byte(src) == ([4]byte{}) {
		return drop(DropBadSourceIP)
	}
	if binary.BigEndian.Uint16(ip[ipv4FlagsFrag:])&(ipv4FlagMF|ipv4FragOff) != 0 {
		return drop(DropFragment)
	}
	switch ip[ipv4Proto] {
	case protoUDP:
		return h.receiveUDP(ip, ihl, ip[ipv4Src:ipv4Src+4], ip[ipv4Dst:ipv4Dst+4], p)
	case protoICMP:
		return h.receiveICMPv4(frame, ip, ihl)
	default:
		return drop(DropOtherProtocol)
	}
}

func (h *Host) receiveIPv6(now time.Time, frame []byte, p *link.Packet) (Outcome, DropReason) {
	ip := frame[ethHdrLen:]
	if len(ip) < ipv6HdrLen {
		return drop(DropTruncated)
	}
	if ip[0]>>4 != 6 {
		return drop(DropBadIPHeader)
	}
	total := ipv6HdrLen + int(binary.BigEndian.Uint16(ip[ipv6PayloadLen:]))
	if total > len(ip) {
		return drop(DropTruncated)
	}
	ip = ip[:total]
	kind := h.classify6([16]byte(ip[ipv6Dst:]))
	if kind == dst6Other {
		return drop(DropNotForUs)
	}
	src := ip[ipv6Src : ipv6Src+16]
	if src[0] == 0xff {
		return drop(DropBadSourceIP)
	}
	// The unspecified source is allowed only in a neighbour solicitation
	// (duplicate address detection); receiveNS checks the rest.
	unspecified := [16]byte(src) == ([16]byte{})
	next := ip[ipv6NextHeader]
	if unspecified && (next != protoICMPv6 || len(ip) == ipv6HdrLen || ip[ipv6HdrLen] != icmp6NS) {
		return drop(DropBadSourceIP)
	}
	switch next {
	case protoUDP:
		if kind != dst6Unicast {
			return drop(DropNotForUs)
		}
		return h.receiveUDP(ip, ipv6HdrLen, src, ip[ipv6Dst:ipv6Dst+16], p)
	case protoICMPv6:
		return h.receiveICMPv6(now, frame, ip, kind)
	case protoFragment:
		return drop(DropFragment)
	case protoHopByHop, protoRouting, protoDestOpts, protoESP, protoAH, protoMobility, protoHIP, protoShim6:
		return drop(DropIPv6Extension)
	default:
		return drop(DropOtherProtocol)
	}
}

// receiveUDP handles a UDP datagram in ip (whose header is hdr bytes) to
// one of the host's unicast addresses; src and dst are the IP header's
// address fields.
func (h *Host) receiveUDP(ip []byte, hdr int, src, dst []byte, p *link.Packet) (Outcome, DropReason) {
	u := ip[hdr:]
	if len(u) < udpHdrLen {
		return drop(DropTruncated)
	}
	n := int(binary.BigEndian.Uint16(u[udpLength:]))
	if n < udpHdrLen || n > len(u) {
		return drop(DropBadUDPLength)
	}
	if binary.BigEndian.Uint16(u[udpDstPort:]) != wire.RoCEv2Port {
		return drop(DropOtherUDPPort)
	}
	if binary.BigEndian.Uint16(u[udpChecksum:]) != 0 && fold(sum(u[:n], pseudoSum(src, dst, protoUDP, n))) != 0xffff {
		return drop(DropUDPChecksum)
	}
	if n-udpHdrLen > link.MaxPacketSize {
		return drop(DropTooLong)
	}
	// wire.Parse checks again what it must for the ICRC (no IPv4
	// options, the UDP length equal to the IP payload's), then the
	// InfiniBand headers, then the ICRC over the real IP and UDP headers.
	if r := wire.Parse(ip, &h.wp); r != wire.DropNone {
		h.stats.RxRoCE[r]++
		return drop(DropRoCE)
	}
	p.Buf = h.wp.Raw
	p.Net = h.wp.Net
	return Delivered, DropNone
}

func (h *Host) receiveICMPv4(frame, ip []byte, ihl int) (Outcome, DropReason) {
	m := ip[ihl:]
	if len(m) < icmpHdrLen {
		return drop(DropTruncated)
	}
	if fold(sum(m, 0)) != 0xffff {
		return drop(DropICMPChecksum)
	}
	if m[icmpType] != icmpEchoRequest || m[icmpCode] != 0 {
		return drop(DropOtherICMP)
	}
	if ipv4MinHdr+len(m) > h.cfg.MTU {
		return drop(DropTooLong)
	}
	// RFC 792: the reply swaps the addresses and carries the request's
	// data; RFC 1122 3.2.2.6: the same identifier, sequence and data. No
	// IP options are copied.
	b := h.buf[:ethHdrLen+ipv4MinHdr+len(m)]
	putEth(b, [6]byte(frame[ethSrc:]), h.mac, etherTypeIPv4)
	putIPv4(b[ethHdrLen:], ip[1], ipv4MinHdr+len(m), protoICMP, [4]byte(ip[ipv4Dst:]), [4]byte(ip[ipv4Src:]))
	r := b[ethHdrLen+ipv4MinHdr:]
	copy(r, m)
	r[icmpType] = icmpEchoReply
	r[icmpChecksum], r[icmpChecksum+1] = 0, 0
	binary.BigEndian.PutUint16(r[icmpChecksum:], ^fold(sum(r, 0)))
	h.out.Emit(b)
	h.stats.EchoReplies++
	return Answered, DropNone
}

func (h *Host) receiveICMPv6(now time.Time, frame, ip []byte, kind dst6Kind) (Outcome, DropReason) {
	m := ip[ipv6HdrLen:]
	if len(m) < 4 {
		return drop(DropTruncated)
	}
	if fold(sum(m, pseudoSum(ip[ipv6Src:ipv6Src+16], ip[ipv6Dst:ipv6Dst+16], protoICMPv6, len(m)))) != 0xffff {
		return drop(DropICMPChecksum)
	}
	switch m[icmpType] {
	case icmp6EchoRequest:
		if kind != dst6Unicast {
			return drop(DropNotForUs)
		}
		if m[icmpCode] != 0 {
			return drop(DropOtherICMP)
		}
		if len(m) < icmpHdrLen {
			return drop(DropTruncated)
		}
		return h.echo6(frame, ip, m)
	case icmp6NS:
		return h.receiveNS(now, frame, ip, m, kind)
	case icmp6NA:
		return h.receiveNA(now, ip, m, kind)
	default:
		return drop(DropOtherICMP)
	}
}

// echo6 answers an ICMPv6 echo request (RFC 4443 4.2).
func (h *Host) echo6(frame, ip, m []byte) (Outcome, DropReason) {
	if ipv6HdrLen+len(m) > h.cfg.MTU {
		return drop(DropTooLong)
	}
	b := h.buf[:ethHdrLen+ipv6HdrLen+len(m)]
	tclass := uint8(binary.BigEndian.Uint32(ip) >> 20)
	putEth(b, [6]byte(frame[ethSrc:]), h.mac, etherTypeIPv6)
	src, dst := [16]byte(ip[ipv6Dst:]), [16]byte(ip[ipv6Src:])
	putIPv6(b[ethHdrLen:], tclass, len(m), protoICMPv6, defaultHopLimit, src, dst)
	r := b[ethHdrLen+ipv6HdrLen:]
	copy(r, m)
	r[icmpType] = icmp6EchoReply
	h.putICMPv6Checksum(r, src, dst)
	h.out.Emit(b)
	h.stats.Echo6Replies++
	return Answered, DropNone
}

func (h *Host) putICMPv6Checksum(m []byte, src, dst [16]byte) {
	m[icmpChecksum], m[icmpChecksum+1] = 0, 0
	binary.BigEndian.PutUint16(m[icmpChecksum:], ^fold(sum(m, pseudoSum(src[:], dst[:], protoICMPv6, len(m)))))
}

// ndLinkAddr finds the first link-layer address option of type want among
// a neighbour discovery message's options. ok is false when the options
// are malformed (RFC 4861 7.1.1, 7.1.2: an option of length 0, one running
// past the end, or a link-layer address that is multicast).
func ndLinkAddr(opts []byte, want byte) (mac [6]byte, found, ok bool) {
	for len(opts) > 0 {
		if len(opts) < 2 {
			return mac, false, false
		}
		n := int(opts[1]) * 8
		if n == 0 || n > len(opts) {
			return mac, false, false
		}
		if opts[0] == want && !found {
			if isMulticastMAC(opts[2:8]) {
				return mac, false, false
			}
			mac, found = [6]byte(opts[2:8]), true
		}
		opts = opts[n:]
	}
	return mac, found, true
}

// receiveNS answers a neighbour solicitation for one of the host's
// addresses (RFC 4861 7.1.1, 7.2.3, 7.2.4; RFC 4862 5.4.3 for duplicate
// address detection).
func (h *Host) receiveNS(now time.Time, frame, ip, m []byte, kind dst6Kind) (Outcome, DropReason) {
	if ip[ipv6HopLimit] != ndHopLimit || m[icmpCode] != 0 || len(m) < ndFixedLen || m[ndTarget] == 0xff {
		return drop(DropBadND)
	}
	slla, hasSLLA, ok := ndLinkAddr(m[ndFixedLen:], ndOptSLLA)
	if !ok {
		return drop(DropBadND)
	}
	src := [16]byte(ip[ipv6Src:])
	dad := src == [16]byte{}
	if dad && (hasSLLA || kind != dst6Solicited) {
		return drop(DropBadND)
	}
	target := [16]byte(m[ndTarget:])
	if !h.ours6(target) {
		return drop(DropNotForUs)
	}
	if dad {
		// Defend the address: an unsolicited advertisement to all nodes.
		h.emitNA(multicastMAC(netip.AddrFrom16(ipv6AllNodes)), ipv6AllNodes, target, ndFlagOverride)
	} else {
		to := [6]byte(frame[ethSrc:])
		if hasSLLA {
			h.learn(now, netip.AddrFrom16(src), slla, false, true)
			to = slla
		}
		h.emitNA(to, src, target, ndFlagSolicit|ndFlagOverride)
	}
	h.stats.NeighbourAdverts++
	return Answered, DropNone
}

// receiveNA updates the cache from a neighbour advertisement (RFC 4861
// 7.1.2, 7.2.5).
func (h *Host) receiveNA(now time.Time, ip, m []byte, kind dst6Kind) (Outcome, DropReason) {
	if ip[ipv6HopLimit] != ndHopLimit || m[icmpCode] != 0 || len(m) < ndFixedLen || m[ndTarget] == 0xff {
		return drop(DropBadND)
	}
	flags := m[ndFlags]
	solicited, override := flags&ndFlagSolicit != 0, flags&ndFlagOverride != 0
	if solicited && kind != dst6Unicast {
		return drop(DropBadND)
	}
	tlla, hasTLLA, ok := ndLinkAddr(m[ndFixedLen:], ndOptTLLA)
	if !ok {
		return drop(DropBadND)
	}
	e := h.neigh.lookup(netip.AddrFrom16([16]byte(m[ndTarget:])))
	if e == nil {
		return drop(DropUnsolicited)
	}
	switch {
	case e.state == nudIncomplete && !hasTLLA:
		return drop(DropBadND)
	case e.state != nudIncomplete && !override && hasTLLA && tlla != e.mac:
		// Another MAC without the override flag: keep ours, but no
		// longer trust it (7.2.5).
		if e.state == nudReachable {
			e.state = nudStale
		}
	default:
		mac := e.mac
		if hasTLLA {
			mac = tlla
		}
		h.learn(now, e.addr, mac, solicited, false)
	}
	return Learned, DropNone
}

// emitNA emits a neighbour advertisement for target (one of the host's
// addresses) with the target link-layer address option.
func (h *Host) emitNA(ethDst [6]byte, ipDst, target [16]byte, flags byte) {
	b := h.putND(ethDst, target, ipDst, icmp6NA, target, ndOptTLLA)
	b[ethHdrLen+ipv6HdrLen+ndFlags] = flags
	h.putICMPv6Checksum(b[ethHdrLen+ipv6HdrLen:], target, ipDst)
	h.out.Emit(b)
}

// putND assembles a neighbour discovery message (solicitation or
// advertisement) with one link-layer address option, the host's MAC, in
// h.buf, all but the flags and the checksum.
func (h *Host) putND(ethDst [6]byte, ipSrc, ipDst [16]byte, typ uint8, target [16]byte, opt uint8) []byte {
	b := h.buf[:ethHdrLen+ipv6HdrLen+ndMsgLen]
	putEth(b, ethDst, h.mac, etherTypeIPv6)
	putIPv6(b[ethHdrLen:], 0, ndMsgLen, protoICMPv6, ndHopLimit, ipSrc, ipDst)
	m := b[ethHdrLen+ipv6HdrLen:]
	clear(m[:ndTarget])
	m[icmpType] = typ
	copy(m[ndTarget:], target[:])
	m[ndFixedLen] = opt
	m[ndFixedLen+1] = 1
	copy(m[ndFixedLen+2:], h.mac[:])
	return b
}

// receiveARP answers ARP requests for the host's addresses and learns
// from replies (RFC 826, with Linux's arp_process choices).
func (h *Host) receiveARP(now time.Time, frame []byte) (Outcome, DropReason) {
	a := frame[ethHdrLen:]
	if len(a) < arpLen {
		return drop(DropTruncated)
	}
	if binary.BigEndian.Uint16(a[arpHType:]) != arpHWEth || binary.BigEndian.Uint16(a[arpPType:]) != etherTypeIPv4 ||
		a[arpHLen] != 6 || a[arpPLen] != 4 {
		return drop(DropBadARP)
	}
	op := binary.BigEndian.Uint16(a[arpOp:])
	if op != arpOpReq && op != arpOpRepl {
		return drop(DropBadARP)
	}
	sha, spa, tpa := [6]byte(a[arpSHA:]), [4]byte(a[arpSPA:]), [4]byte(a[arpTPA:])
	if isMulticastMAC(sha[:]) || sha == h.mac {
		return drop(DropBadSourceMAC)
	}
	if spa[0] >= 224 {
		return drop(DropBadSourceIP)
	}
	sender := netip.AddrFrom4(spa)
	if !h.ours4(tpa) {
		// Overheard (a request for another host, a gratuitous ARP): it
		// updates an entry the cache already has, as in Linux: it
		// resolves an incomplete one or moves one to another MAC.
		if e := h.neigh.lookup(sender); e != nil && (e.state == nudIncomplete || e.mac != sha) {
			h.learn(now, sender, sha, false, false)
			return Learned, DropNone
		}
		return drop(DropNotForUs)
	}
	if op == arpOpRepl {
		// A reply to the host asserts reachability; a broadcast one
		// does not (Linux: PACKET_HOST).
		if !h.learn(now, sender, sha, [6]byte(frame[ethDst:]) == h.mac, false) {
			return drop(DropUnsolicited)
		}
		return Learned, DropNone
	}
	// A request for us. Its sender is about to talk to us: learn it
	// (stale, unconfirmed), unless it is an address probe (sender
	// 0.0.0.0, RFC 5227), which is answered all the same.
	if spa != ([4]byte{}) {
		h.learn(now, sender, sha, false, true)
	}
	b := h.buf[:ethHdrLen+arpLen]
	putEth(b, sha, h.mac, etherTypeARP)
	r := b[ethHdrLen:]
	copy(r, a[:arpOp])
	binary.BigEndian.PutUint16(r[arpOp:], arpOpRepl)
	copy(r[arpSHA:], h.mac[:])
	copy(r[arpSPA:], tpa[:])
	copy(r[arpTHA:], sha[:])
	copy(r[arpTPA:], spa[:])
	h.out.Emit(b)
	h.stats.ARPReplies++
	return Answered, DropNone
}

// macString formats a MAC as 02:00:00:00:00:01.
func macString(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}
