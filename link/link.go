// Package link moves RoCEv2 packets between a device and the network. A
// Link sends and receives whole InfiniBand packets (BTH through ICRC)
// together with the IP and UDP fields around them (wire.Net); it knows
// nothing of queue pairs.
//
// Implementations: link/udp (a UDP socket, unprivileged, the default),
// link/tap (a TAP device: softhca as a host of its own on an Ethernet
// link, with its own MAC and addresses; an Interface), link/pipe (an
// in-memory pair with seeded fault injection, for tests).
//
// # Ownership and threading
//
// Buffers belong to the caller in both directions, in the wireguard-go
// style: Send may be called from several goroutines and is done with the
// packets when it returns; Recv fills buffers the caller provides (each
// Packet.Buf must have capacity for MaxPacketSize bytes) and is called by
// one goroutine at a time. Close makes a blocked Recv return
// net.ErrClosed and releases every goroutine the link started.
//
// Two optional interfaces save a copy each way. A BulkReceiver (link/udp
// with GRO) reads whole coalesced datagrams into large buffers its caller
// lends it and hands the packets out as views of them; the caller decides
// when a buffer is free again. A Gatherer's Send (link/udp) takes packets
// whose Payload lies apart from Buf, where the caller keeps it (a
// registered region), and is done with it when Send returns.
package link

import (
	"net/netip"

	"github.com/softhca/softhca/wire"
)

// MaxPacketSize is the largest InfiniBand packet a link carries: a 4096-byte
// path MTU payload plus the largest header stack, pad and ICRC, rounded
// up. A receive buffer must have at least this capacity.
const MaxPacketSize = 4096 + 128

// Packet is one RoCEv2 datagram.
type Packet struct {
	// Buf is the InfiniBand packet, BTH through ICRC.
	Buf []byte
	// Net holds the IP and UDP fields. On send, Src/SrcPort may be left
	// zero for the link to fill with its own address; the ICRC in Buf
	// must have been computed with the values the link will put on the
	// wire (ID 0, DontFragment set). Whether TrafficClass is sent as given
	// is the link's choice (link/pipe carries it; link/udp sends its
	// socket's, ECT(0) with ECN); the ICRC masks it. On receive, the link
	// fills the addresses and ports and the traffic class as it arrived
	// (its low two bits are the ECN field: 0b11 is a CE mark); the IPv4 ID
	// is unknown (0) unless the link sees IP headers.
	Net wire.Net
	// Payload, when set, is the middle of the packet, sent from where it
	// lies (a registered region) instead of from a copy in Buf: the
	// packet is Buf[:PayloadAt], then Payload, then Buf[PayloadAt:]. Only
	// a Gatherer's Send is given such packets; received packets never
	// have one.
	Payload   []byte
	PayloadAt int
}

// Len returns the packet's length, Payload included.
func (p *Packet) Len() int { return len(p.Buf) + len(p.Payload) }

// Gatherer is a Link whose Send takes packets with a Payload apart from
// Buf (link/udp: the payload is one more iovec of sendmsg, and the kernel
// copies it from where it lies, without a copy in user space first).
type Gatherer interface {
	Link
	// Gathers reports whether Send takes packets with a Payload.
	Gathers() bool
}

// Link is a packet path between a device and its peers.
type Link interface {
	// Send transmits the packets in order. A packet the link cannot
	// deliver is dropped and counted, not reported: the transport
	// recovers lost packets. Send returns an error only when the link is
	// closed or broken.
	Send(pkts []Packet) error
	// Recv blocks until at least one packet arrives, stores up to
	// len(pkts) of them in the callers' buffers (reslicing each Buf to
	// the packet's length) and returns how many.
	Recv(pkts []Packet) (int, error)
	// LocalAddr returns the IP address and UDP port the link receives on
	// and sends from.
	LocalAddr() (wire.Net, error)
	// Stats returns the link's counters.
	Stats() Stats
	// Close closes the link.
	Close() error
}

// Poller is a Link that can also be read without waiting, so that a
// device's transport can be driven by an application that polls its
// completion queues (busy polling) as well as by its receive goroutine.
// TryRecv and WaitReadable take the place of Recv: a reader that uses
// them does not call Recv.
type Poller interface {
	Link
	// TryRecv is Recv without the wait: it returns 0 at once when no
	// packet is queued (or another goroutine is reading). It returns
	// fewer than len(pkts) packets only when it found nothing more
	// queued.
	TryRecv(pkts []Packet) (int, error)
	// WaitReadable calls ready whenever packets may be queued: at once,
	// then each time more arrive. It returns when ready returns true, or
	// when the link is closed (net.ErrClosed). A packet that arrives
	// after ready last read the link always calls it again; a ready that
	// leaves packets queued (a full batch) must read again before it
	// returns false.
	WaitReadable(ready func() bool) error
}

// BulkBufSize is the size of a buffer that holds any one UDP datagram,
// a coalesced one (GRO) included: a BulkReceiver's buffers.
const BulkBufSize = 65536

// MaxBulkSegments is the most packets one coalesced datagram carries (the
// kernel's UDP_GRO_CNT_MAX).
const MaxBulkSegments = 64

// BulkReceiver is a Poller that can read datagrams that each carry
// several packets (link/udp with GRO: the kernel coalesces a flow's
// datagrams) into buffers the caller gives it, and hand the packets out as
// views of those buffers instead of copying each into a buffer of its
// own. The caller owns the buffers and the views; it decides when a
// buffer is free again.
type BulkReceiver interface {
	Poller
	// Coalesces reports whether received datagrams may carry several
	// packets. When it is false, TryRecv into packet-sized buffers
	// costs no copy and TryRecvBulk has nothing to offer.
	Coalesces() bool
	// TryRecvBulk is TryRecv into bufs, each BulkBufSize bytes long: it
	// reads up to len(bufs) datagrams without waiting, each into the
	// next buffer, and stores the packets they carry in pkts, in order,
	// with in[i] the index of the buffer that pkts[i].Buf is a slice of.
	// It reads no more datagrams than pkts has room for at
	// MaxBulkSegments packets each (len(in) >= len(pkts)). It returns
	// how many buffers it wrote (a buffer whose datagram was dropped
	// counts) and how many packets it stored, and fewer than len(bufs)
	// buffers only when it found nothing more queued or pkts was full.
	TryRecvBulk(bufs [][]byte, pkts []Packet, in []int) (nbufs, npkts int, err error)
}

// Interface is a Link that is a host of its own on a network interface
// (link/tap): it has a MAC address, an MTU and several IP addresses, and
// sends from any of them. A device on an Interface takes its GID table,
// node GUID and active MTU from it, as rxe takes them from its netdev.
//
// An Interface sees the IP headers: Recv returns only packets whose ICRC
// it has checked over the headers they arrived with, all 32 bits of it,
// and fills Net with those headers as they were (the IPv4 ID and DF
// included), so that the reader need not check again.
type Interface interface {
	Link
	// Addrs returns the interface's addresses, the IPv6 link-local
	// address derived from MAC last (wire.LinkLocalFromGUID of
	// wire.GUIDFromMAC).
	Addrs() []netip.Addr
	// MAC returns the interface's Ethernet address.
	MAC() [6]byte
	// MTU returns the interface's IP MTU.
	MTU() int
}

// Stats are a link's counters. Every dropped packet is counted under a
// named reason.
type Stats struct {
	TxPackets, TxBytes uint64
	RxPackets, RxBytes uint64
	// TxDropped counts packets Send could not hand to the network.
	TxDropped uint64
	// RxTruncated counts received datagrams larger than the buffer.
	RxTruncated uint64
	// RxSocketDropped counts datagrams addressed to the link that the
	// kernel dropped before the link could read them, nearly always
	// because the socket's receive buffer was full (link/udp reads the
	// socket's drop count, SO_MEMINFO's SK_MEMINFO_DROPS).
	RxSocketDropped uint64
	// QueueDropped counts packets a bottleneck queue in the link dropped
	// because it was full (link/pipe's Faults.Queue).
	QueueDropped uint64
	// Injected fault counters (link/pipe).
	InjectedLoss, InjectedDuplicate, InjectedReorder, InjectedCorrupt uint64
	// InjectedCE counts the ECN-capable packets (ECT(0) or ECT(1) in the
	// traffic class) the link marked Congestion Experienced (link/pipe's
	// Faults.CE and Faults.MarkCE, and its filter).
	InjectedCE uint64
	// Drops are the link's own drop counters by name, beyond the fields
	// above, zeros included (link/tap's frame drops by reason); nil for
	// links without any.
	Drops map[string]uint64
}
