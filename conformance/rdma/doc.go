// Package rdma is the conformance suite's backend for any device
// libibverbs drives: Linux's soft-RoCE (rxe0), a RoCE NIC, or softhca's
// own drop-in libibverbs.so.1 (softhca0). `softhca conformance --target
// rdma:DEVICE` selects it.
//
// # Two processes
//
// The runner (this package, pure Go, in the process running the suite)
// never calls libibverbs itself: the drop-in library is a Go c-shared
// library, and one process cannot hold two Go runtimes
// (golang/go#18976). Each device a case opens is a process of its own,
// the verbs agent: agent.c, embedded here and compiled on first use into
// the user's cache directory (BuildAgent; gcc and libibverbs-dev), linked
// with -libverbs, which loads whichever libibverbs.so.1 its environment
// finds (LD_LIBRARY_PATH puts softhca's first). Open starts one agent,
// OpenPair two; Close ends the agent and reaps it.
//
// The agent is one thread in one loop: it receives a request on fd 3 (a
// SOCK_SEQPACKET unix socket, the other end of which the runner holds),
// makes the verb call, and sends one response. It never blocks in a verb:
// it keeps the completion channels' fds and the async fd non-blocking and
// acknowledges every event as soon as it takes one. The waiting a case
// asks for happens in the runner:
//
//   - GetEvent and GetAsyncEvent in blocking mode poll the runner's copy
//     of the fd (passed back with SCM_RIGHTS: the same open file
//     description, so it is readable exactly when the agent's is) until
//     it is readable or the context ends, then ask the agent, which
//     answers with the event or EAGAIN (another waiter took it: wait
//     again). In non-blocking mode (SetNonBlocking, SetAsyncNonBlocking)
//     they ask at once, and the agent's EAGAIN is the answer.
//   - The runner counts the events each CQ, QP and SRQ got and the acks
//     the case made. Destroy destroys the object in the agent (a busy one
//     fails at once, as libibverbs' ibv_cmd_destroy_* do) and then waits
//     for the count to reach zero; when the context ends first it returns
//     the context's error, the object already destroyed, and the next
//     Destroy resumes the wait.
//
// # Who owns what
//
// The agent owns every libibverbs object; the runner names them by
// handles, indexes into the agent's table (0 is NULL; a handle is never
// reused, so a stale one fails with EINVAL). A CQ's, QP's and SRQ's
// context pointer in the agent is its handle, by which events name it;
// the contexts a case gives (cq_context, qp_context, srq_context) stay in
// the runner, mapped by handle, as do address handles' attributes.
//
// Memory: RegMR copies. Each region is a memfd the runner maps shared and
// fills with the buffer's contents, then passes to the agent, which maps
// it shared at the same offset in its page and registers its mapping.
// MR.Bytes() is the runner's mapping (what the case reads and writes),
// MR.Addr() and SGE() the agent's addresses (what work requests carry).
// The runner's mappings stay until Close, so that Bytes() never faults.
//
// Goroutines: any goroutine may call any method; one call to the agent
// is in flight at a time (a mutex around request and response), waits
// for fds hold no lock.
//
// # The protocol
//
// Each message is one SOCK_SEQPACKET record of at most 192 KiB of
// little-endian fields in a fixed order, without padding: u8, u16, u32,
// u64, i32 as named; a GID is 16 bytes; a list is a u32 count and its
// records.
//
//	request:  u32 op, then the op's fields
//	response: u32 errno (0: success), then the op's result fields, which
//	          a failed call has only for the posts (their refused index)
//
// An fd travels as SCM_RIGHTS beside the bytes: the memfd with REG_MR,
// the async fd with HELLO's response, a channel's fd with
// CREATE_COMP_CHANNEL's. The ops (opHello..opDestroyQP, numbered from 1
// in this order in proto.go and agent.c) and their fields:
//
//	HELLO                  → u32 version (1); the async fd
//	QUERY_DEVICE           → device record: fw_ver [64], node_guid,
//	                         sys_image_guid, max_mr_size, page_size_cap
//	                         (u64, GUIDs in host order), 32 u32 in
//	                         struct ibv_device_attr's order from vendor_id
//	                         to max_srq_sge, u16 max_pkeys, u8
//	                         local_ca_ack_delay, u8 phys_port_cnt, u32
//	                         max_inline_data (probed: the largest an RC QP
//	                         is created with), tm_caps (5 × u32)
//	QUERY_PORT u8 port     → port record (struct ibv_port_attr's order)
//	QUERY_GID u8 port, i32 index → gid
//	QUERY_PKEY u8 port, i32 index → u16 pkey (host order)
//	ALLOC_PD               → u32 pd
//	REG_MR u32 pd, u32 access, u64 length, u32 page offset, u8 kind
//	    (0 NULL, 1 empty, 2 the memfd) → u32 mr, u64 addr, u32 lkey,
//	    u32 rkey, u64 length
//	CREATE_COMP_CHANNEL    → u32 channel; the channel's fd
//	CREATE_CQ i32 cqe, u32 channel, i32 comp_vector → u32 cq, i32 cqe
//	RESIZE_CQ u32 cq, i32 cqe → i32 cqe
//	REQ_NOTIFY_CQ u32 cq, u8 solicited_only
//	POLL_CQ u32 cq, u32 n  → list of WC records (at most 1024): u64
//	    wr_id, u32 status, opcode, vendor_err, byte_len, imm (imm_data in
//	    host order, or invalidated_rkey with IBV_WC_WITH_INV), qp_num,
//	    src_qp, wc_flags, u16 pkey_index, slid, u8 sl, dlid_path_bits,
//	    u64 tm tag, u32 tm priv
//	GET_CQ_EVENT u32 channel → u32 cq
//	GET_ASYNC_EVENT        → u32 event_type, u8 kind (0 none, 1 CQ, 2 QP,
//	                         3 SRQ, 4 port), u32 handle, u8 port
//	CREATE_SRQ u32 pd, u32 max_wr, max_sge, srq_limit, u8 tag matching,
//	    u32 max_num_tags, max_ops, u32 cq → u32 srq
//	MODIFY_SRQ u32 srq, u32 mask, u32 max_wr, max_sge, srq_limit
//	QUERY_SRQ u32 srq      → u32 max_wr, max_sge, srq_limit
//	POST_SRQ_RECV, POST_RECV u32 srq or qp, list of (u64 wr_id, list of
//	    SGEs (u64 addr, u32 length, u32 lkey)) → i32 refused index (-1)
//	POST_SEND u32 qp, list of (u64 wr_id, u32 opcode, send_flags,
//	    imm_data (host order), invalidate_rkey, u64 rdma remote_addr, u32
//	    rdma rkey, u64 atomic remote_addr, compare_add, swap, u32 atomic
//	    rkey, u32 ah, remote_qpn, remote_qkey, list of SGEs) → i32
//	    refused index; the agent fills wr.ud for a UD QP, wr.atomic for an
//	    atomic opcode, wr.rdma otherwise
//	POST_SRQ_OPS u32 srq, list of (u64 wr_id, u32 opcode, flags,
//	    unexpected_cnt, handle, u64 recv_wr_id, tag, mask, list of SGEs)
//	    → i32 refused index, list of u32 handles (one per op)
//	CREATE_AH u32 pd, AH record (dgid, u32 flow_label, u8 sgid_index,
//	    hop_limit, traffic_class, u16 dlid, u8 sl, src_path_bits,
//	    static_rate, is_global, port_num) → u32 ah
//	CREATE_QP u32 pd, send_cq, recv_cq, srq, cap (5 × u32), u8 qp_type,
//	    u8 sq_sig_all → u32 qp, u32 qp_num, cap granted
//	QUERY_QP u32 qp, u32 mask → QP attribute record (struct ibv_qp_attr's
//	    order, AH records for ah_attr and alt_ah_attr)
//	MODIFY_QP u32 qp, u32 mask, QP attribute record
//	ATTACH_MCAST, DETACH_MCAST u32 qp, gid, u16 lid
//	DEALLOC_PD, DEREG_MR, DESTROY_COMP_CHANNEL, DESTROY_CQ, DESTROY_SRQ,
//	DESTROY_AH, DESTROY_QP u32 handle
//
// Errors: a verb's failure comes back as its errno and is returned as a
// *verbs.Error wrapping it (errors.Is(err, syscall.EINVAL) holds, as with
// the softhca backend). The runner's decoders never panic on a short or
// hostile response: it is an error wrapping EPROTO (FuzzDecodeResponse).
// When the agent is gone, every call fails with an error wrapping
// ErrAgentExited that names the agent, its exit status and the end of its
// stderr; methods without an error result return zero values (Poll
// polls nothing), and TransportDiag says what became of the agent.
package rdma
