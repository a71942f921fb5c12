package conformance

// This file holds what rxe's deviations cite more than once. Each
// citation was read in the sources the rxe target runs: the kernel is
// Linux 6.1.192 (Debian 12's linux-source-6.1 6.1.192-2, the guest's
// 6.1.0-56-amd64) and the user-space side is rdma-core v44.0 (Debian 12
// ships 44.0-2).

// rxeDeviates returns c with a deviation declared for rxe.
func rxeDeviates(c Case, cite, note string) Case {
	c.Deviations = append(c.Deviations, Deviation{Impl: ImplRxe, Cite: cite, Note: note})
	return c
}

// rxePostSendChecks is what rxe's ibv_post_send checks: the provider
// writes each WR into the mmap'd send queue itself, so the kernel's own
// rxe_verbs.c checks (for kernel ULPs) never see it.
const rxePostSendChecks = `rdma-core v44.0 providers/rxe/rxe.c: rxe_post_send() -> post_one_send() -> validate_send_wr(), which refuses only num_sge > max_sge, an atomic whose length is < 8 or whose remote_addr is not 8-byte aligned, an inline WR longer than max_inline, and a malformed BIND_MW; it never looks at the opcode against the QP type, the opcode of an inline WR or the total length, and init_send_wqe() copies the WR into the send queue as given`

// rxePostRecvChecks is what rxe's ibv_post_recv checks.
const rxePostRecvChecks = `rdma-core v44.0 providers/rxe/rxe.c: rxe_post_one_recv() checks only queue_full() and num_sge against max_sge, then memcpy()s the SGEs into the receive queue; the keys are first looked at when a message is placed: Linux 6.1.192 drivers/infiniband/sw/rxe/rxe_resp.c send_data_in() -> rxe_mr.c copy_data(), where lookup_mr() refuses a key that is unknown, of another PD or without IB_ACCESS_LOCAL_WRITE and rxe_mr_copy() a range outside the MR, and any error but -ENOSPC is RESPST_ERR_MALFORMED_WQE (IBV_WC_LOC_QP_OP_ERR)`

// rxeModifyQPUnchecked is why rxe accepts out-of-range QP attributes.
const rxeModifyQPUnchecked = `Linux 6.1.192 drivers/infiniband/core/uverbs_cmd.c modify_qp() checks only port numbers and qp_state/cur_qp_state <= IB_QPS_ERR before copying the attributes; core/verbs.c _ib_modify_qp() masks rq_psn/sq_psn to 24 bits ("rq_psn overflow, masking to 24 bits"); sw/rxe/rxe_qp.c rxe_qp_chk_attr() checks only the transition (ib_modify_qp_is_ok), port, caps, AV, alternate path, path_mtu > max_mtu, max_rd_atomic > max_qp_rd_atom and timeout > 31, and rxe_qp_from_attr() stores every other attribute as given (core/security.c checks P_Key indexes only for an InfiniBand port: ib_create_qp_security() makes no qp_sec on RoCE)`

// rxeCopyDataLength is why rxe completes a receive WR that a message does
// not fit with IBV_WC_LOC_QP_OP_ERR.
const rxeCopyDataLength = `Linux 6.1.192 drivers/infiniband/sw/rxe/rxe_mr.c copy_data(): "if (length > resid) { err = -EINVAL; ..." and rxe_resp.c send_data_in(): "return (err == -ENOSPC) ? RESPST_ERR_LENGTH : RESPST_ERR_MALFORMED_WQE;", so a message longer than the receive WR takes rxe_responder()'s RESPST_ERR_MALFORMED_WQE: "do_class_ac_error(qp, AETH_NAK_REM_OP_ERR, IB_WC_LOC_QP_OP_ERR)" for every QP type, completing the receive WR and moving the QP to ERR (the length and class D drop paths of RESPST_ERR_LENGTH are never reached)`

// rxeCreateQPSRQ is why rxe takes any non-XRC SRQ for any QP.
const rxeCreateQPSRQ = `Linux 6.1.192 drivers/infiniband/core/uverbs_std_types_qp.c UVERBS_METHOD_QP_CREATE (and uverbs_cmd.c create_qp() on the write path) refuses an SRQ only when its XRC-ness does not match the QP type; sw/rxe/rxe_qp.c rxe_qp_chk_init() checks the type, the CQs and the caps, and rxe_qp_from_init() takes init->srq (rxe_get(srq)) without comparing its PD or the QP type`

// rxeSGIDWithoutGID is where rxe's ENODATA for an empty source GID comes
// from.
const rxeSGIDWithoutGID = `Linux 6.1.192 drivers/infiniband/core/verbs.c _ib_modify_qp() -> rdma_fill_sgid_attr() -> core/cache.c rdma_get_gid_attr(): "const struct ib_gid_attr *attr = ERR_PTR(-ENODATA); ... if (!is_gid_entry_valid(table->data_vec[index])) goto done;" (EINVAL only for an index outside the table)`

// rxeHopLimit is why rxe reports another hop limit than the one an RC or
// UC QP's AV was given.
const rxeHopLimit = `Linux 6.1.192 drivers/infiniband/core/verbs.c _ib_modify_qp(): for a RoCE AV of a connected QP (RC/UC) from user space it calls ib_resolve_eth_dmac() -> ib_resolve_unicast_gid_dmac(), which resolves the route with rdma_addr_find_l2_eth_by_grh() and then does "grh->hop_limit = hop_limit;" with the route's value (core/addr.c addr4_resolve(): "addr->hoplimit = ip4_dst_hoplimit(&rt->dst)", 64 by default); rxe_qp_from_attr() stores that AV and rxe_query_qp() returns it. Also sw/rxe/rxe_qp.c rxe_qp_from_attr() stores max_dest_rd_atomic as roundup_pow_of_two(max_dest_rd_atomic)`

const rxeHopLimitNote = "reports the route's hop limit (64) instead of the ah_attr.grh.hop_limit set (33); an RC QP also reports max_dest_rd_atomic 3 as 4"
