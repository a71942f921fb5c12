// Package tap is softhca's TAP link: softhca as a host of its own on an
// Ethernet link, with its own MAC and IPv4 and IPv6 addresses, speaking
// RoCEv2 in whole Ethernet frames. It has two layers: Host, the frame
// protocol (no I/O, no goroutines, no clock), and Link, which opens a TAP
// device with github.com/songgao/water and runs a Host on its frames.
//
// # Link
//
// Open creates a TAP interface (CAP_NET_ADMIN) or attaches to an existing
// one (`ip tuntap add mode tap user USER name NAME` lets USER open it
// without privileges), sets its MTU, brings it up and, for one it
// created, gives the kernel's side the LinkConfig.KernelAddrs. The Link is
// a link.Link, link.Poller and link.Interface: hca.Open takes the device's
// GID table (GID 0 the link-local address of the MAC, then the host's
// addresses), node GUID (from the MAC) and active MTU (rxe's rule) from
// it, and the transport keeps the IP fields of what it receives as they
// arrived, since the Host has checked every ICRC over the real headers.
//
// Unlike link/udp, a TAP host can share a machine with the kernel's
// rdma_rxe (which owns UDP port 4791 of the kernel's addresses, not of
// softhca's), and its packets carry their real IPv4 ID, TOS, TTL and flow
// label into a UD receive's GRH area.
//
//   - Send frames each packet through the Host and writes the frame to the
//     device (one write(2) per frame; a device that refuses it drops it,
//     counted). Packets to the host's own addresses are looped back (a
//     device talking to itself, as rxe loops them back): their ICRC is
//     checked and they wait in a bounded queue (LinkConfig.LoopbackQueue)
//     for the reader, which a read deadline in the past wakes.
//   - Recv, TryRecv and WaitReadable read frames with the runtime's poller
//     and hand each to the Host, which answers ARP, neighbour discovery
//     and echo requests on the way and returns the RoCEv2 packets.
//   - The neighbour cache's timer is a clock.Timer of LinkConfig.Clock,
//     armed while a resolution is pending, and the host announces itself
//     (gratuitous ARP, unsolicited neighbour advertisements) at Open and
//     in three rounds over the next half second, so that a TAP put on a
//     bridge just after Open is known to its peers.
//   - Stats reports link.Stats, every frame and packet drop by name in
//     Stats.Drops (which the device's drop counters include, prefixed
//     "link: "); HostStats the Host's own counters.
//
// # Host
//
// Host is protocol code in the style of the transport: its methods take
// the current time, emit frames through an Emitter and return; it starts
// no goroutine, sleeps never and reads no clock. Tests drive it frame by
// frame with an injected time.
//
//   - Receive(now, frame, p) classifies one Ethernet frame. A RoCEv2
//     packet (IPv4 or IPv6, UDP to port 4791, to one of the host's
//     addresses) is checked by wire.Parse, ICRC included, over the IP and
//     UDP headers as they arrived (all 32 bits: the IPv4 Identification
//     is read, not solved for, unlike on a UDP socket), and returned in p
//     with its Net as it arrived: addresses, ports, traffic class, hop
//     limit, flow label, ID and DF. ARP requests and IPv6 neighbour
//     solicitations for the host's addresses, and ICMP and ICMPv6 echo
//     requests to them, are answered; ARP replies and neighbour
//     advertisements update the neighbour cache. Everything else is
//     dropped and counted under one DropReason. Each frame has exactly
//     one Outcome, and the counters add up: Stats.RxFrames is the sum of
//     RxDelivered, the answers, RxLearned and every RxDropped.
//   - Send(now, pkts) frames RoCEv2 packets (Ethernet, IPv4 or IPv6, UDP)
//     and emits them to the destination's MAC from the neighbour cache.
//     The IPv4 header has ID 0 and DF set, the values the ICRC in each
//     packet was computed with (see link.Packet), the traffic class and
//     hop limit as given. A destination without a MAC is resolved (ARP
//     request, neighbour solicitation) while its packets wait, bounded
//     per neighbour and in all.
//   - Timer(now) retries resolutions, gives up on neighbours that never
//     answer (dropping and counting what waited for them), and
//     NextDeadline says when it is next due.
//
// # Neighbour cache
//
// A fixed number of entries (Config.NeighbourCache), after RFC 4861's
// neighbour unreachability detection as Linux runs it for ARP and ND
// alike: an entry is incomplete (requests out, packets waiting), reachable
// (confirmed by a reply less than Config.ReachableTime ago), stale
// (learned from the neighbour's own request, or reachable too long ago),
// or probe (stale and in use: packets keep going to the MAC while unicast
// requests re-confirm it). Config.Solicits unanswered requests, one every
// Config.RetryInterval, remove the entry. Replies the host did not ask for
// create no entry (Linux's arp_accept=0), and a full cache evicts the
// least recently used entry that has no packets waiting.
//
// # Why byte views, not gopacket
//
// The host reads and writes its headers through offsets into the frame,
// in one pass, as wire does for the InfiniBand headers; gopacket
// (github.com/google/gopacket/layers) is the tests' oracle instead: they
// build the frames they feed the host with it, decode every frame the
// host emits with it, and check that re-encoding that with computed
// checksums gives the same bytes. The reasons:
//
//   - The host must tell every way a frame fails apart, with a named
//     counter each. gopacket's decoders fail with formatted errors (which
//     allocate, and would have to be mapped back to reasons), stop at the
//     first layer they do not know, and check less than the host must: no
//     IPv4 header checksum, no UDP or ICMP checksums, none of RFC 4861's
//     validity rules for neighbour discovery.
//   - The answers are the requests with a few fields changed: an ARP
//     reply is 28 bytes, a neighbour advertisement 32, an echo reply the
//     request's message with a new type and checksum. Writing those bytes
//     is less code than filling layer structs and serialising them, and
//     does not allocate serialisation buffers.
//   - The RoCEv2 path must not allocate per frame, on receive or send.
//
// Nothing the host does per frame allocates: not Receive, not Send (frames
// are assembled in one buffer of the host's and emitted from it), not
// waiting for resolution (a bounded pool of frame buffers, each made the
// first time it is needed and reused after). The tests check this with
// testing.AllocsPerRun.
//
// # Addresses and MTU
//
// The IPv6 link-local address derived from the MAC (the modified EUI-64,
// wire.GUIDFromMAC and wire.LinkLocalFromGUID) is always one of the
// host's addresses, as it is the kernel's on an interface and rxe's GID at
// index 0. PathMTU is the InfiniBand MTU rxe derives from the interface
// MTU (wire.NetdevPathMTU: less 80 bytes, rounded down, so 1024 for
// 1500).
//
// # Ownership and threading
//
// A Host is not safe for concurrent use: its owner (the Link, with one
// mutex) serialises Receive, Send, Timer and Stats, and Emit runs inside
// them.
// The frame given to Emit is the host's and valid only until Emit
// returns; the frame given to Receive is the caller's, and the p.Buf of a
// Delivered packet points into it.
package tap
