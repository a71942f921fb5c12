package tap

import (
	"strconv"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// Outcome says what Receive did with a frame. Every frame has exactly one
// outcome, and is counted under exactly one of Stats.RxDelivered, an
// answer counter, Stats.RxLearned, or an RxDropped reason.
type Outcome uint8

// Outcomes of Receive.
const (
	// Dropped: the frame was discarded; the DropReason says why.
	Dropped Outcome = iota
	// Delivered: a RoCEv2 packet for the device, returned in the
	// link.Packet.
	Delivered
	// Answered: an ARP request, a neighbour solicitation or an echo
	// request for one of the host's addresses; the answer was emitted.
	Answered
	// Learned: an ARP reply or neighbour advertisement for a neighbour
	// in the cache, or an overheard ARP packet (not for the host) that
	// told it a cached neighbour's MAC; the entry was updated, and
	// packets waiting for the neighbour were emitted.
	Learned
	numOutcomes
)

var outcomeNames = [...]string{
	Dropped:   "dropped",
	Delivered: "delivered",
	Answered:  "answered",
	Learned:   "learned",
}

// String names the outcome.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "outcome " + strconv.Itoa(int(o))
}

// DropReason says why Receive dropped a frame.
type DropReason uint8

// Reasons Receive drops a frame for, in the order it checks them.
const (
	DropNone DropReason = iota
	// DropTruncated: the frame ends before the headers it announces (an
	// Ethernet, ARP, IP, UDP or ICMP header, or the IP total length).
	DropTruncated
	// DropBadSourceMAC: the Ethernet source is a multicast address or the
	// host's own MAC (a frame looped back to its sender), or an ARP
	// packet's sender hardware address is.
	DropBadSourceMAC
	// DropNotForUs: the Ethernet destination is neither the host's MAC,
	// the broadcast address nor an IPv6 multicast address; or the IP
	// destination is not one of the host's addresses (for IPv6, nor one
	// of their solicited-node groups, nor all-nodes for neighbour
	// discovery); or an ARP request or neighbour solicitation asks for
	// another host's address.
	DropNotForUs
	// DropVLAN: the frame carries an 802.1Q or 802.1ad VLAN tag. The
	// host is on one untagged link.
	DropVLAN
	// DropNotIP: the EtherType is neither IPv4, IPv6 nor ARP (or the
	// frame is 802.3 with a length, such as spanning tree).
	DropNotIP
	// DropBadARP: an ARP packet that is not Ethernet/IPv4 (hardware type
	// 1, protocol 0x0800, lengths 6 and 4) or whose operation is neither
	// request nor reply.
	DropBadARP
	// DropBadIPHeader: the IP version disagrees with the EtherType, the
	// IPv4 header length is below 20 bytes, or the total length is
	// shorter than the header.
	DropBadIPHeader
	// DropIPv4Checksum: the IPv4 header checksum is wrong.
	DropIPv4Checksum
	// DropBadSourceIP: the IP source is multicast or broadcast, or
	// unspecified where that is not allowed (anywhere but in an IPv6
	// duplicate address detection solicitation).
	DropBadSourceIP
	// DropFragment: an IPv4 fragment (MF set or a fragment offset) or an
	// IPv6 packet with a fragment header. The host does not reassemble:
	// RoCEv2 sets DF.
	DropFragment
	// DropIPv6Extension: an IPv6 packet with an extension header other
	// than a fragment header (hop-by-hop options, routing, destination
	// options, ...).
	DropIPv6Extension
	// DropOtherProtocol: IP carrying neither UDP nor ICMP (ICMPv6).
	DropOtherProtocol
	// DropBadUDPLength: the UDP length is below 8 or beyond the IP
	// payload.
	DropBadUDPLength
	// DropOtherUDPPort: UDP to a destination port other than RoCEv2's
	// 4791.
	DropOtherUDPPort
	// DropUDPChecksum: a non-zero UDP checksum is wrong. (RoCEv2 senders
	// send 0, which means none, on IPv6 too; A17.2.3.)
	DropUDPChecksum
	// DropICMPChecksum: the ICMP or ICMPv6 checksum is wrong.
	DropICMPChecksum
	// DropOtherICMP: an ICMP message the host does not answer or use
	// (anything but an echo request, and for ICMPv6 a neighbour
	// solicitation or advertisement), or an echo request with a non-zero
	// code.
	DropOtherICMP
	// DropBadND: a neighbour solicitation or advertisement that RFC 4861
	// (7.1.1, 7.1.2) says to discard: hop limit not 255, code not 0, too
	// short, a multicast target, an option of length 0 or running past
	// the end, a duplicate address detection probe with a source
	// link-layer option or to a unicast address, a multicast
	// advertisement with the solicited flag, or an advertisement without
	// a target link-layer address for a neighbour still being resolved.
	DropBadND
	// DropUnsolicited: an ARP reply or neighbour advertisement for an
	// address the cache holds no entry for. Like Linux (arp_accept=0),
	// the host does not create entries from replies it did not ask for.
	DropUnsolicited
	// DropTooLong: the InfiniBand packet in a RoCEv2 frame is longer than
	// link.MaxPacketSize, or the answer to an echo request would exceed
	// the MTU.
	DropTooLong
	// DropRoCE: a RoCEv2 frame that wire.Parse rejects (a bad ICRC, a
	// malformed InfiniBand header, IPv4 options, ...); Stats.RxRoCE says
	// which of wire's reasons.
	DropRoCE
	numDropReasons
)

// NumDropReasons is the number of drop reasons, DropNone included, for
// arrays indexed by DropReason.
const NumDropReasons = int(numDropReasons)

var dropNames = [...]string{
	DropNone:          "none",
	DropTruncated:     "truncated",
	DropBadSourceMAC:  "bad source MAC",
	DropNotForUs:      "not for us",
	DropVLAN:          "VLAN tag",
	DropNotIP:         "not IP or ARP",
	DropBadARP:        "bad ARP",
	DropBadIPHeader:   "bad IP header",
	DropIPv4Checksum:  "bad IPv4 header checksum",
	DropBadSourceIP:   "bad source IP",
	DropFragment:      "IP fragment",
	DropIPv6Extension: "IPv6 extension header",
	DropOtherProtocol: "other IP protocol",
	DropBadUDPLength:  "bad UDP length",
	DropOtherUDPPort:  "other UDP port",
	DropUDPChecksum:   "bad UDP checksum",
	DropICMPChecksum:  "bad ICMP checksum",
	DropOtherICMP:     "other ICMP message",
	DropBadND:         "bad neighbour discovery message",
	DropUnsolicited:   "unsolicited neighbour reply",
	DropTooLong:       "too long",
	DropRoCE:          "bad RoCEv2 packet",
}

// String names the reason.
func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return "drop reason " + strconv.Itoa(int(r))
}

// TxDropReason says why Send (or Timer, for packets that waited) dropped a
// RoCEv2 packet.
type TxDropReason uint8

// Reasons a packet given to Send is not sent.
const (
	TxDropNone TxDropReason = iota
	// TxBadAddress: the destination is missing, unspecified, or of
	// another family than the source.
	TxBadAddress
	// TxBadSource: the source is not one of the host's addresses, or it
	// was left zero and the host has no address of the destination's
	// family.
	TxBadSource
	// TxLoopback: the destination is one of the host's own addresses and
	// the Emitter is no Looper. A frame to itself would never come back
	// from the network; a Looper (Link) takes such packets instead.
	TxLoopback
	// TxTooBig: the IP packet would exceed the MTU.
	TxTooBig
	// TxCacheFull: the destination needs resolving and every neighbour
	// cache entry is busy resolving another.
	TxCacheFull
	// TxQueueFull: the destination is being resolved and its queue
	// (Config.QueuePerNeighbour) or the host's (Config.QueueTotal) is
	// full.
	TxQueueFull
	// TxUnresolved: the packet waited for a neighbour that did not answer
	// Config.Solicits requests.
	TxUnresolved
	numTxDropReasons
)

// NumTxDropReasons is the number of send drop reasons, TxDropNone
// included.
const NumTxDropReasons = int(numTxDropReasons)

var txDropNames = [...]string{
	TxDropNone:   "none",
	TxBadAddress: "bad address",
	TxBadSource:  "source not ours",
	TxLoopback:   "to ourselves",
	TxTooBig:     "larger than the MTU",
	TxCacheFull:  "neighbour cache full",
	TxQueueFull:  "resolution queue full",
	TxUnresolved: "neighbour unresolved",
}

// String names the reason.
func (r TxDropReason) String() string {
	if r < numTxDropReasons {
		return txDropNames[r]
	}
	return "tx drop reason " + strconv.Itoa(int(r))
}

// Stats are a Host's counters.
type Stats struct {
	// RxFrames counts the frames given to Receive. Each is counted once
	// more, under its outcome: RxDelivered, one of the answer counters
	// (ARPReplies, NeighbourAdverts, EchoReplies, Echo6Replies),
	// RxLearned, or one RxDropped reason.
	RxFrames uint64
	// RxDelivered and RxBytes count the RoCEv2 packets Receive returned
	// and their bytes (the InfiniBand packet, BTH through ICRC).
	RxDelivered, RxBytes uint64
	// ARPReplies counts ARP requests answered; NeighbourAdverts, neighbour
	// solicitations answered; EchoReplies and Echo6Replies, ICMP and
	// ICMPv6 echo requests answered.
	ARPReplies, NeighbourAdverts, EchoReplies, Echo6Replies uint64
	// RxLearned counts the frames Receive Learned from: ARP replies and
	// neighbour advertisements for cached neighbours, and overheard ARP
	// packets that gave a cached neighbour a MAC.
	RxLearned uint64
	// RxDropped counts dropped frames by reason.
	RxDropped [NumDropReasons]uint64
	// RxRoCE breaks RxDropped[DropRoCE] down by wire.Parse's reason.
	RxRoCE [wire.NumDropReasons]uint64

	// TxPackets and TxBytes count the RoCEv2 packets emitted (bytes: the
	// InfiniBand packet), including those that waited for resolution.
	TxPackets, TxBytes uint64
	// TxQueued counts packets that had to wait for their neighbour to be
	// resolved (each is later counted as TxPackets or
	// TxDropped[TxUnresolved]).
	TxQueued uint64
	// TxDropped counts packets not sent, by reason.
	TxDropped [NumTxDropReasons]uint64

	// Announcements counts the gratuitous ARP requests and unsolicited
	// neighbour advertisements Announce sent.
	Announcements uint64
	// ARPRequests and NeighbourSolicits count the requests the host sent
	// to resolve or re-confirm neighbours, retries included.
	ARPRequests, NeighbourSolicits uint64
	// Resolved counts neighbours resolved (an entry that had none learned
	// a MAC); ResolveFailed, resolutions and re-confirmations that got no
	// answer (the entry was removed); Evicted, entries removed to make
	// room for another neighbour.
	Resolved, ResolveFailed, Evicted uint64
}

// Answered is the number of requests answered, of every kind.
func (s *Stats) Answered() uint64 {
	return s.ARPReplies + s.NeighbourAdverts + s.EchoReplies + s.Echo6Replies
}

// Dropped is the number of frames Receive dropped, for every reason.
func (s *Stats) Dropped() uint64 {
	var n uint64
	for _, v := range s.RxDropped {
		n += v
	}
	return n
}

// Link returns the counters a link.Link reports: RoCEv2 packets and bytes
// each way, TxDropped for every packet Send did not send, and RxTruncated
// for the frames dropped as too long (DropTooLong: mostly RoCEv2 packets
// too long for a link buffer).
func (s *Stats) Link() link.Stats {
	var txDropped uint64
	for _, v := range s.TxDropped {
		txDropped += v
	}
	return link.Stats{
		TxPackets:   s.TxPackets,
		TxBytes:     s.TxBytes,
		RxPackets:   s.RxDelivered,
		RxBytes:     s.RxBytes,
		TxDropped:   txDropped,
		RxTruncated: s.RxDropped[DropTooLong],
	}
}
