// Package pingpong is softhca's version of rdma-core's pingpong examples
// (libibverbs/examples: ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong
// and ibv_srq_pingpong, as in rdma-core 44, Debian 12), behind the
// command "softhca pingpong {rc,uc,ud,srq}". Either side of a run can be
// the rdma-core binary on a Linux rxe (or RoCE) device and the other
// softhca: the out-of-band TCP exchange, the QP attributes, the messages
// on the wire and the output are the examples'.
//
// # The exchange
//
// The client connects to the server's TCP port (18515) and sends its
// address, "LID:QPN:PSN:GID" as sprintf("%04x:%06x:%06x:%s") with the GID
// as 32 hex digits, NUL-terminated, 52 bytes in all (Dest.Message,
// ParseMessage). The server connects its QP to it, answers with its own,
// and the client sends "done\0". srq sends 256 messages each way. Each
// side then moves its QP(s) to RTS (RC: max_dest_rd_atomic 1,
// min_rnr_timer 12, timeout 14, retry_cnt 7, rnr_retry 7; the GRH only if
// the peer sent a GID, hop limit 1, source GID index -g) and the client
// sends first. Every message is one SEND of -s bytes from the buffer the
// receives land in; each side sends again when its last send and the
// peer's answer have completed.
//
// # What softhca chooses
//
// rdma-core finds its device, its GID and its port MTU in the kernel.
// softhca opens its device (hca.Device) on a UDP socket (link/udp) bound
// to the local address of the exchange's TCP connection, port 4791,
// unless Config.Addr names another; GID index 1 is that address
// (IPv4-mapped), as with rxe, and the peer's packets go to the IP address
// in the peer's GID, port 4791 (Config.PeerPort). The port's active MTU,
// the limit of a UD message, follows the interface as rxe's follows its
// netdev (hca.ActiveMTUFor). The socket uses UDP GSO and GRO unless
// Config.NoGSO (--no-gso). RoCE needs a GRH, so as on rxe a side
// started without -g cannot connect: the peer fails to move its QP to RTR
// (or to create its address handle), with a hint. GID index 0 is the
// link-local fe80:: GID made from the node GUID, as on rxe, which no
// socket is bound to: -g 0, and an index without a GID (which rdma-core
// would read as an all-zero GID), fail before anything is opened. A
// peer's GID the device cannot send to fails the connect, and the client
// connects before it sends "done", so that the server fails as well
// (see the exchange).
//
// # Threading
//
// Run uses the calling goroutine for the verbs, as the examples do; the
// device's transport runs on its own goroutines.
package pingpong
