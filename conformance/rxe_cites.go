package conformance

// Where rxe's deviations come from. Each names the source read: the Linux
// kernel (drivers/infiniband/..., read at torvalds/linux, the versions
// near the 6.1 kernel the suite was run on) or rdma-core v44.0
// (providers/rxe/rxe.c; Debian 12's libibverbs). What each does was also
// seen on rxe (Debian 12 kernel 6.1, rdma-core 44).
const (
	// rxeNoResetToErr: the RESET row of the kernel's table has only
	// RESET and INIT.
	rxeNoResetToErr = `drivers/infiniband/core/verbs.c: qp_state_table[IB_QPS_RESET] lists only [IB_QPS_RESET] and [IB_QPS_INIT], so ib_modify_qp_is_ok() refuses RESET -> ERR; drivers/infiniband/sw/rxe/rxe_qp.c: rxe_qp_chk_attr() "if (!ib_modify_qp_is_ok(cur_state, new_state, qp_type(qp), mask)) goto err1" (-EINVAL)`

	// rxeNoAltPath: the core refuses IB_QP_ALT_PATH on a RoCE port,
	// although rxe reports IBV_DEVICE_AUTO_PATH_MIG.
	rxeNoAltPath = `drivers/infiniband/core/verbs.c: _ib_modify_qp(): "if (attr_mask & IB_QP_ALT_PATH) { ... Today the core code can only handle alternate paths and APM for IB. Ban them in roce mode. */ if (!(rdma_protocol_ib(qp->device, attr->alt_ah_attr.port_num) && rdma_protocol_ib(qp->device, port))) { ret = -EINVAL;"; rxe0 reports AUTO_PATH_MIG in device_cap_flags (ibv_devinfo -v on the run's VM)`

	// rxeSQDAVAddsPort: uverbs turns IB_QP_AV without IB_QP_PORT into
	// both outside INIT -> RTR, and IB_QP_PORT is not optional for UC in
	// SQD -> SQD.
	rxeSQDAVAddsPort = `drivers/infiniband/core/uverbs_cmd.c: modify_qp(): outside INIT -> RTR "If only IP_QP_AV was set, add in IB_QP_PORT as well ... cmd->base.attr_mask |= IB_QP_PORT"; drivers/infiniband/core/verbs.c: qp_state_table[IB_QPS_SQD][IB_QPS_SQD].opt_param[IB_QPT_UC] has no IB_QP_PORT, so ib_modify_qp_is_ok() (from rxe_qp_chk_attr()) refuses it`

	// rxeNoLastWQE: rxe never raises IBV_EVENT_QP_LAST_WQE_REACHED.
	rxeNoLastWQE = `drivers/infiniband/sw/rxe/rxe_resp.c: check_resource(): a QP in QP_STATE_ERROR with an SRQ "return RESPST_EXIT" and nothing in rxe raises IB_EVENT_QP_LAST_WQE_REACHED (the responder's only event is IB_EVENT_SRQ_LIMIT_REACHED in get_srq_wqe()); observed: no event in 2 s after RTS/RESET -> ERR of an RC or UD QP on an SRQ`

	// rxeBadWRNull: the doorbell fails after every WR was queued, so
	// *bad_wr stays NULL.
	rxeBadWRNull = `rdma-core v44.0 providers/rxe/rxe.c: rxe_post_send() sets "*bad_wr = NULL", queues each WR (post_one_send() checks no QP state) and returns the error of post_send_db(), the doorbell write the kernel fails (drivers/infiniband/sw/rxe/rxe_verbs.c: rxe_post_send(): "if (unlikely(qp->req.state < QP_STATE_READY)) ... return -EINVAL"), with *bad_wr still NULL; rxe_post_recv() sets "*bad_wr = NULL" and returns EINVAL for "!rq->queue" (a QP on an SRQ) and for "ibqp->state == IBV_QPS_RESET" before any WR is looked at`

	// rxeRecvInErrNotFlushed: a receive posted in ERR stays queued.
	rxeRecvInErrNotFlushed = `rdma-core v44.0 providers/rxe/rxe.c: rxe_post_recv() only writes the WQE to the receive queue mapped from the kernel (no system call); drivers/infiniband/sw/rxe/rxe_resp.c: check_resource() flushes queued receives of a QP in QP_STATE_ERROR only when the responder task runs, which rxe_qp_error() (rxe_qp.c) and an arriving packet (rxe_resp_queue_pkt()) do, so a receive posted after the QP entered ERR is not completed`

	// rxeSQDrainedAlways: en_sqd_async_notify is stored, never read.
	rxeSQDrainedAlways = `drivers/infiniband/sw/rxe/rxe_req.c: req_next_wqe() and rxe_comp.c: complete_ack() raise IB_EVENT_SQ_DRAINED whenever the drain completes ("qp->req.state = QP_STATE_DRAINED; ... ev.event = IB_EVENT_SQ_DRAINED"); rxe_qp.c: rxe_qp_from_attr() stores qp->attr.en_sqd_async_notify, which nothing reads`

	// rxeDrainHoldsPosted: the drain check counts a WQE not in progress
	// as not started, and SQD -> RTS does not restart the requester.
	rxeDrainHoldsPosted = `drivers/infiniband/sw/rxe/rxe_req.c: req_next_wqe(): in QP_STATE_DRAIN the queue counts as drained unless the head WQE was started ("if (wqe && ((qp->req.wqe_index != consumer_index) || (wqe->state != wqe_state_posted)))"), and in DRAIN/DRAINED "(wqe->state != wqe_state_processing)) return NULL" holds every other WQE; rxe_qp.c: rxe_qp_from_attr() "case IB_QPS_RTS: qp->req.state = QP_STATE_READY" does not run the requester, so WQEs held in SQD wait for the next post_send doorbell; observed: a SEND being retried against RNR NAKs when the QP entered SQD raised SQ_DRAINED at once and never completed`

	// rxeFlushRecvFirst: rxe_qp_error runs the responder first.
	rxeFlushRecvFirst = `drivers/infiniband/sw/rxe/rxe_qp.c: rxe_qp_error() runs the responder task ("rxe_run_task(&qp->resp.task, 1)", which flushes the receive queue) before the completer and requester that flush the send queue`

	// rxeSolicitedErr: solicited-only fires only for the solicited
	// argument, which error completions do not set.
	rxeSolicitedErr = `drivers/infiniband/sw/rxe/rxe_cq.c: rxe_cq_post(): notifies a solicited-only CQ only "(cq->notify == IB_CQ_SOLICITED && solicited)", whatever the status; rxe_comp.c posts send completions with "rxe_cq_post(qp->scq, &cqe, 0)" and rxe_resp.c: do_complete() receive completions with "pkt ? bth_se(pkt) : 1"`

	// rxeUDQKeyHighBit: the WR's qkey goes on the wire as given.
	rxeUDQKeyHighBit = `drivers/infiniband/sw/rxe/rxe_req.c: init_req_packet(): "deth_set_qkey(pkt, ibwr->wr.ud.remote_qkey)" (GSI_QKEY for QP1 only): no use of the QP's qkey for a remote_qkey with the high bit set (rdma-core v44.0 providers/rxe/rxe.c: convert_send_wr() copies remote_qkey as is), and the receiver drops a DETH qkey that differs from its own`
)
