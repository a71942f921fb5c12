// Package udp is softhca's default link: RoCEv2 packets (BTH through
// ICRC) carried as UDP datagrams on an ordinary, unprivileged UDP socket,
// interoperable with Linux rdma_rxe and RoCE NICs. It implements
// link.Link.
//
// # The socket and why each option is set
//
// Open creates an IPv4 or IPv6 UDP socket bound to Config.Addr (RoCEv2
// peers send to port 4791; tests bind port 0). An unspecified IPv6
// address ([::]) makes a dual-stack socket: IPv4 peers appear as
// IPv4-mapped addresses in the kernel, and the link unmaps them, so every
// wire.Net it produces or consumes holds plain 4-byte IPv4 addresses, as
// the ICRC requires.
//
//   - Don't fragment: IP_MTU_DISCOVER = IP_PMTUDISC_DO (IPv4) and
//     IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DO plus IPV6_DONTFRAG (IPv6). RoCEv2
//     sets DF, and the ICRC covers the IPv4 flags and Identification. On an
//     unconnected socket with DF set, Linux sends IP ID 0, so a sender can
//     compute the ICRC before the kernel builds the IP header; a packet
//     larger than the path MTU is refused (EMSGSIZE, counted as TxDropped)
//     rather than fragmented.
//   - The UDP checksum: RoCEv2 senders send 0. On IPv4 the link sets
//     SO_NO_CHECK when it can, but Linux refuses GSO on such a socket, so
//     with GSO active the kernel fills in a checksum instead (rdma_rxe
//     accepts both). IPv6 always carries one. Info.NoUDPChecksum says which.
//   - Buffers: SO_RCVBUF/SO_SNDBUF of 4 MiB (SO_RCVBUFFORCE/SO_SNDBUFFORCE
//     when privileged, to exceed net.core.[rw]mem_max); failures are
//     ignored and the resulting sizes reported by Info.
//   - Wildcard bind: IP_PKTINFO / IPV6_RECVPKTINFO, so that Recv can fill
//     Net.Dst with the address the datagram was really sent to (the ICRC
//     covers it). On send, a packet whose Net.Src is set leaves from that
//     address (an IP_PKTINFO / IPV6_PKTINFO control message). With a
//     specific bind the kernel uses the bound address and Net.Src is not
//     consulted.
//   - Traffic class, received: IP_RECVTOS (IPv4 and dual-stack sockets)
//     and IPV6_RECVTCLASS (IPv6 sockets), always, so that Recv reports
//     each datagram's IPv4 TOS / IPv6 traffic class in Net.TrafficClass,
//     and the transport sees the CE marks (ECN field 0b11) that congested
//     routers set, whether or not this link sends ECN-capable packets
//     itself. It costs a control message per datagram, parsed without
//     allocating. On a dual-stack socket IPv4 datagrams report IP_TOS,
//     IPv6 ones IPV6_TCLASS.
//   - Hop limit, received: IP_RECVTTL / IPV6_RECVHOPLIMIT, so that
//     Net.HopLimit is the TTL the datagram arrived with: a UD receive's
//     40-byte header area carries it, as rxe's does (ibv_init_ah_from_wc
//     copies it into the reply's address).
//   - ECN (Config.ECN): IP_TOS = 2 and, on IPv6 sockets, IPV6_TCLASS = 2,
//     so that every packet leaves with ECT(0) (DSCP 0). A dual-stack
//     socket gets both, since its IPv4 traffic takes IP_TOS. GSO segments
//     inherit it.
//
// The UDP source port is the socket's port for every packet: the rxe
// convention 0xC000|entropy cannot be followed per packet on one socket,
// and peers accept any source port. Packets to a Net whose DstPort is 0 go
// to Config.RemotePort (default 4791). The traffic class is the socket's
// (0, or ECT(0) with Config.ECN), not Net.TrafficClass; hop limit and flow
// label are the socket's defaults. The ICRC masks all three.
//
// # Segmentation offloads
//
// With Config.GSO and a kernel that offers UDP_SEGMENT, Send coalesces
// each run of consecutive packets with the same destination (and source)
// and the same length, the last of the run possibly shorter, into one
// super-packet (at most 64 segments and 65000 bytes), passed to sendmmsg
// with a UDP_SEGMENT control message; the kernel (or the NIC) splits it.
// The kernel numbers the IPv4 Identification of the segments of a DF
// super-packet 0, 1, 2, ... (inet_gso_segment), not 0 each, so for IPv4
// the link rewrites the ICRC of segment k for ID k: the CRC is linear, so
// that is an XOR with a value that depends only on k and the packet length
// (cached per length). The caller's buffer is never modified: a packet of
// at most copyMax (512) bytes is copied into the link's staging buffer,
// end to end with the rest of its run, and its ICRC rewritten there, so
// that a run of small packets reaches the kernel as one iovec (the kernel
// copies each iovec separately, at a cost per iovec that exceeds copying
// a small packet); a larger packet goes as iovecs of its own pieces, its
// rewritten ICRC a separate 4-byte iovec. If the kernel
// refuses a super-packet with EIO (a device without checksum offload),
// GSO is switched off for good and the packets are sent one by one.
//
// With Config.GRO and a kernel that offers UDP_GRO, the kernel may hand
// Recv several datagrams of one flow coalesced into one (the UDP_GRO
// control message gives the segment size). They are received into the
// link's own 64 KiB buffers (BatchSize of them) and copied, one segment
// per packet, into the caller's buffers; segments that do not fit into
// this call's packets are kept, in order, for the next Recv. Every segment
// gets the coalesced datagram's Net, traffic class included (the kernel
// does not coalesce datagrams whose IP headers differ in it). Without GRO
// recvmmsg writes straight into the caller's buffers.
//
// # Ownership and threading
//
// As link.Link says: Send may be called from several goroutines at once
// (they are serialised by a mutex that guards the reused mmsghdr, iovec and
// control-message arrays) and is done with the packets when it returns;
// Recv is called by one goroutine at a time and fills the caller's buffers
// (a datagram larger than a buffer's capacity is dropped and counted as
// RxTruncated). Both integrate with Go's network poller through
// syscall.RawConn: a blocked Recv or a Send waiting for socket buffer
// space parks its goroutine instead of a thread, and Close wakes it with
// net.ErrClosed. The link starts no goroutines. Neither Send nor Recv
// allocates in steady state.
package udp
