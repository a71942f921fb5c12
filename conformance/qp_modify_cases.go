package conformance

import (
	"fmt"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// Cases for ibv_modify_qp(3) and ibv_query_qp(3) beyond the transition
// table (qp_state_table_cases.go): attribute ranges, IBV_QP_CUR_STATE,
// modifies without IBV_QP_STATE, the side effects of RESET, ERR and SQD,
// and what query_qp reports.

const qpNothingModified = `ibv_modify_qp(3) NOTES: "If any of the modify attributes or the modify mask are invalid, none of the attributes will be modified (including the QP state)"`

func init() {
	a := func(f func(*verbs.QPAttr)) func(*T, Device, *verbs.QPAttr) {
		return func(_ *T, _ Device, x *verbs.QPAttr) { f(x) }
	}
	Register(
		// Attribute ranges: each modify is the usual transition with one
		// value out of range; it must fail and change nothing.
		qpRangeCase("port_num-0", `ibv_modify_qp(3): port_num is the "primary port number"; ibv_query_port(3) numbers ports from 1; `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsReset, a(func(x *verbs.QPAttr) { x.PortNum = 0 })),
		qpRangeCase("port_num-past-last-port", `ibv_modify_qp(3): port_num is the "primary port number", at most phys_port_cnt (ibv_query_device(3)); `+qpNothingModified,
			Spec, verbs.QPTypeUD, qsReset, func(_ *T, d Device, x *verbs.QPAttr) { x.PortNum = d.QueryDevice().PhysPortCnt + 1 }),
		rxeDeviates(qpRangeCase("pkey_index-past-table", `ibv_modify_qp(3): pkey_index is the "primary P_Key index", an index into the port's P_Key table of pkey_tbl_len entries (ibv_query_port(3)); `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsReset, func(t *T, d Device, x *verbs.QPAttr) {
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				x.PKeyIndex = p.PKeyTblLen
			}),
			rxeModifyQPUnchecked, "accepts a pkey_index past the P_Key table (RoCE: no P_Key check at all)"),
		rxeDeviates(qpRangeCase("path_mtu-0", `ibv_modify_qp(3): path_mtu is an enum ibv_mtu, IBV_MTU_256 (1) .. IBV_MTU_4096 (5); 0 is no MTU; `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsInit, a(func(x *verbs.QPAttr) { x.PathMTU = 0 })),
			rxeModifyQPUnchecked, "accepts path_mtu 0: rxe_qp_chk_attr() refuses only a path_mtu above the port's max_mtu"),
		qpRangeCase("path_mtu-6", `ibv_modify_qp(3): path_mtu is an enum ibv_mtu, IBV_MTU_256 (1) .. IBV_MTU_4096 (5); 6 is no MTU; `+qpNothingModified,
			Spec, verbs.QPTypeUC, qsInit, a(func(x *verbs.QPAttr) { x.PathMTU = 6 })),
		qpRangeCase("path_mtu-above-port-max_mtu", `ibv_modify_qp(3): path_mtu "Path MTU (valid only for RC/UC QPs)"; a path cannot carry more than the port's max_mtu (ibv_query_port(3)); rxe rejects path_mtu > max_mtu; `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsInit, func(t *T, d Device, x *verbs.QPAttr) {
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				if p.MaxMTU >= verbs.MTU4096 {
					t.Skipf("the port's max_mtu is %s, the largest MTU: no valid path_mtu exceeds it (path_mtu 6 is covered by path_mtu-6)", p.MaxMTU)
				}
				x.PathMTU = p.MaxMTU + 1
			}),
		qpRangeCase("timeout-32", `ibv_modify_qp(3): timeout is the "local ack timeout for primary path", a 5-bit value (IBTA 9.7.6.1.3: 4.096 us * 2^timeout, 0..31); `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsRTR, a(func(x *verbs.QPAttr) { x.Timeout = 32 })),
		rxeDeviates(qpRangeCase("retry_cnt-8", `ibv_modify_qp(3): retry_cnt is the "retry count", a 3-bit value (IBTA 9.7.6.1.3: 0..7); `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsRTR, a(func(x *verbs.QPAttr) { x.RetryCnt = 8 })),
			rxeModifyQPUnchecked, "accepts retry_cnt 8 and stores it"),
		rxeDeviates(qpRangeCase("rnr_retry-8", `ibv_modify_qp(3): rnr_retry is the "RNR retry", a 3-bit value where 7 means infinite (IBTA 9.7.5.2.8: 0..7); `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsRTR, a(func(x *verbs.QPAttr) { x.RNRRetry = 8 })),
			rxeModifyQPUnchecked, "accepts rnr_retry 8 and stores it"),
		rxeDeviates(qpRangeCase("min_rnr_timer-32", `ibv_modify_qp(3): min_rnr_timer is the "minimum RNR NAK timer", a 5-bit code (IBTA table 45: 0..31); `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsInit, a(func(x *verbs.QPAttr) { x.MinRNRTimer = 32 })),
			rxeModifyQPUnchecked, "accepts min_rnr_timer 32 and stores it"),
		qpRangeCase("max_rd_atomic-above-max_qp_init_rd_atom", `ibv_modify_qp(3): max_rd_atomic is the "number of outstanding RDMA reads & atomic operations on the destination QP", bounded by the device's max_qp_init_rd_atom ("max depth per QP for initiation of RDMA Read & Atomic operations", ibv_query_device(3)); `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsRTR, func(t *T, d Device, x *verbs.QPAttr) {
				lim := d.QueryDevice().MaxQPInitRdAtom
				if lim >= 255 {
					t.Skipf("max_qp_init_rd_atom %d: max_rd_atomic (8 bits) cannot exceed it", lim)
				}
				x.MaxRdAtomic = uint8(lim + 1)
			}),
		rxeDeviates(qpRangeCase("max_dest_rd_atomic-above-max_qp_rd_atom", `ibv_modify_qp(3): max_dest_rd_atomic is the "number of responder resources for handling incoming RDMA reads & atomic operations", bounded by the device's max_qp_rd_atom (ibv_query_device(3)); `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsInit, func(t *T, d Device, x *verbs.QPAttr) {
				lim := d.QueryDevice().MaxQPRdAtom
				if lim >= 255 {
					t.Skipf("max_qp_rd_atom %d: max_dest_rd_atomic (8 bits) cannot exceed it", lim)
				}
				x.MaxDestRdAtomic = uint8(lim + 1)
			}),
			rxeModifyQPUnchecked, "accepts max_dest_rd_atomic above max_qp_rd_atom: only max_rd_atomic is bounded, and rxe_qp_from_attr() allocates roundup_pow_of_two(max_dest_rd_atomic) responder resources"),
		rxeDeviates(qpRangeCase("rq_psn-above-24-bits", `ibv_modify_qp(3): rq_psn is the "PSN for receive queue"; PSNs are 24 bits (IBTA 9.7.1); `+qpNothingModified+` (rxe masks the value to 24 bits instead)`,
			Spec, verbs.QPTypeRC, qsInit, a(func(x *verbs.QPAttr) { x.RQPSN = 1 << 24 })),
			rxeModifyQPUnchecked, "accepts an rq_psn above 24 bits and masks it to 24 bits"),
		rxeDeviates(qpRangeCase("sq_psn-above-24-bits", `ibv_modify_qp(3): sq_psn is the "PSN for send queue"; PSNs are 24 bits (IBTA 9.7.1); `+qpNothingModified+` (rxe masks the value to 24 bits instead)`,
			Spec, verbs.QPTypeUD, qsRTR, a(func(x *verbs.QPAttr) { x.SQPSN = 1 << 24 })),
			rxeModifyQPUnchecked, "accepts an sq_psn above 24 bits and masks it to 24 bits"),
		rxeDeviates(qpRangeCase("dest_qp_num-above-24-bits", `ibv_modify_qp(3): dest_qp_num is the "destination QP number"; QP numbers are 24 bits (IBTA 10.2.4.2); `+qpNothingModified,
			Spec, verbs.QPTypeUC, qsInit, a(func(x *verbs.QPAttr) { x.DestQPNum = 1 << 24 })),
			rxeModifyQPUnchecked, "accepts a dest_qp_num above 24 bits and stores it"),
		qpRangeCase("ah_attr-without-grh", `ibv_modify_qp(3): ah_attr is the "primary path address vector"; on a RoCE port (link_layer Ethernet) the address is the GID, so is_global must be set (IBTA annex A16/A17: RoCE packets always carry a GRH; the kernel rejects a RoCE AV without IB_AH_GRH); `+qpNothingModified,
			Spec, verbs.QPTypeRC, qsInit, func(t *T, d Device, x *verbs.QPAttr) {
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				if p.LinkLayer != verbs.LinkLayerEthernet {
					t.Skipf("port 1 is not RoCE (link layer %d): an AV without GRH is valid on InfiniBand", p.LinkLayer)
				}
				x.AHAttr.IsGlobal = false
			}),
		rxeDeviates(qpRangeCase("ah_attr-sgid_index-without-gid", `ibv_modify_qp(3): ah_attr.grh.sgid_index names the source GID in the port's GID table (ibv_query_gid(3)); an index that holds no GID cannot source packets. The kernel fails it from the GID cache (errno varies by kernel); softhca fails with EINVAL; `+qpNothingModified,
			ImplementationDefined, verbs.QPTypeRC, qsInit, func(t *T, d Device, x *verbs.QPAttr) {
				x.AHAttr.GRH.SGIDIndex = qpEmptyGIDIndex(t, d)
			}),
			rxeSGIDWithoutGID, "fails with ENODATA (not EINVAL): the kernel's GID cache has no entry at that index"),
		rxeDeviates(qpRangeCase("qp_access_flags-unknown-bits", `ibv_modify_qp(3): qp_access_flags is a "mask of enabled remote access operations" from enum ibv_access_flags (REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC; LOCAL_WRITE is tolerated); softhca rejects bits outside them with EINVAL; `+qpNothingModified,
			ImplementationDefined, verbs.QPTypeRC, qsReset, a(func(x *verbs.QPAttr) { x.QPAccessFlags |= 1 << 30 })),
			rxeModifyQPUnchecked, "accepts qp_access_flags bits outside enum ibv_access_flags and stores them"),
		qpRangeCase("qp_state-unknown", `ibv_modify_qp(3): qp_state is an enum ibv_qp_state (RESET .. ERR); the kernel's modify_qp rejects qp_state > IB_QPS_ERR with EINVAL; `+qpNothingModified,
			Spec, verbs.QPTypeUD, qsReset, a(func(x *verbs.QPAttr) { x.QPState = verbs.NumQPStates })),

		Case{
			Name:  "modify_qp/cur_state/mismatch-rejected",
			Cite:  `ibv_modify_qp(3): cur_qp_state is "assume this is the current QP state"; IBTA 11.2.5.2 (Modify QP): a current QP state that does not match the QP's state is an "invalid current QP state" error; ` + qpNothingModified,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: `Linux 6.1.192 drivers/infiniband/sw/rxe/rxe_qp.c rxe_qp_chk_attr(): "enum ib_qp_state cur_state = (mask & IB_QP_CUR_STATE) ? attr->cur_qp_state : qp->attr.qp_state;" and then only ib_modify_qp_is_ok(cur_state, new_state, ...): the caller's cur_qp_state is never compared with the QP's state (nor in core/uverbs_cmd.c modify_qp() or core/verbs.c _ib_modify_qp())`,
				Note: "takes cur_qp_state on trust: RTS -> RTS given cur_qp_state SQD is checked as SQD -> RTS, which is legal, and succeeds",
			}},
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				before := qpQuery(t, q)
				x := verbs.QPAttr{QPState: qsRTS, CurQPState: qsSQD, MinRNRTimer: before.MinRNRTimer + 1}
				err := q.Modify(&x, verbs.AttrState|verbs.AttrCurState|verbs.AttrMinRNRTimer)
				ExpectErrno(t, err, syscall.EINVAL, "modify RTS -> RTS with cur_qp_state SQD")
				qpExpectUnchanged(t, q, before, "after the rejected modify")
			},
		},
		Case{
			Name:  "modify_qp/cur_state/matching-accepted",
			Cite:  `ibv_modify_qp(3): cur_qp_state is "assume this is the current QP state"; the kernel's qp_state_table lists IBV_QP_CUR_STATE as optional for RTR->RTS, RTS->RTS, SQD->RTS and SQE->RTS`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				x := verbs.QPAttr{QPState: qsRTS, CurQPState: qsRTS, MinRNRTimer: 20}
				ExpectOK(t, q.Modify(&x, verbs.AttrState|verbs.AttrCurState|verbs.AttrMinRNRTimer), "modify RTS -> RTS with cur_qp_state RTS")
				Expect(t, qpQuery(t, q).MinRNRTimer, uint8(20), "min_rnr_timer after the modify")
			},
		},
		qpCurStateEarlyCase(qsReset),
		qpCurStateEarlyCase(qsInit),

		Case{
			Name:  "modify_qp/no-state-bit/RC-RTS-min_rnr_timer",
			Cite:  `ibv_modify_qp(3): the QP's attributes are modified "according to the mask attr_mask"; without IBV_QP_STATE the state stays and the kernel checks the mask as a transition from the current state to itself (RTS->RTS lists IBV_QP_MIN_RNR_TIMER as optional for RC)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				x := verbs.QPAttr{QPState: qsErr, MinRNRTimer: 3} // QPState is ignored without IBV_QP_STATE
				ExpectOK(t, q.Modify(&x, verbs.AttrMinRNRTimer), "modify min_rnr_timer only")
				got := qpQuery(t, q)
				Expect(t, got.QPState, qsRTS, "state after a modify without IBV_QP_STATE")
				Expect(t, got.MinRNRTimer, uint8(3), "min_rnr_timer after the modify")
			},
		},
		Case{
			Name:  "modify_qp/no-state-bit/UD-RTS-qkey",
			Cite:  `ibv_modify_qp(3): the QP's attributes are modified "according to the mask attr_mask"; qkey is the "Q_Key for the QP (valid only for UD QPs)", optional in RTS->RTS for UD`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeUD, qsRTS)
				x := verbs.QPAttr{QKey: 0x0badcafe}
				ExpectOK(t, q.Modify(&x, verbs.AttrQKey), "modify qkey only")
				got := qpQuery(t, q)
				Expect(t, got.QPState, qsRTS, "state after a modify without IBV_QP_STATE")
				Expect(t, got.QKey, uint32(0x0badcafe), "qkey after the modify")
			},
		},
		Case{
			Name:  "modify_qp/no-state-bit/rejects-attribute-of-another-transition",
			Cite:  `ibv_modify_qp(3) and the kernel's qp_state_table: without IBV_QP_STATE the mask is checked as RTS->RTS, where IBV_QP_SQ_PSN is neither required nor optional; ` + qpNothingModified,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeUC, qsRTS)
				before := qpQuery(t, q)
				x := verbs.QPAttr{SQPSN: before.SQPSN + 1}
				ExpectErrno(t, q.Modify(&x, verbs.AttrSQPSN), syscall.EINVAL, "modify sq_psn only in RTS")
				qpExpectUnchanged(t, q, before, "after the rejected modify")
			},
		},

		Case{
			Name:  "modify_qp/to-RESET/discards-outstanding-wrs",
			Cite:  `IBTA 10.3.1 (Reset state): a QP in RESET has empty work queues; moving to RESET removes outstanding WRs without completing them (rxe's rxe_qp_reset drains both queues); ibv_modify_qp(3): any state may go to RESET`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				qpPostRecv(t, q, qpRecvList(qpRecvWR(1, f.MR.SGE(0, 64)), qpRecvWR(2, f.MR.SGE(64, 64))))
				qpPostSend(t, q, qpSendList(qpSendWR(3, f.MR.SGE(128, 64)), qpSendWR(4, f.MR.SGE(192, 64))))
				ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: qsReset}, verbs.AttrState), "modify to RESET")
				Expect(t, State(t, q), qsReset, "state after the modify")
				qpExpectNoCompletion(t, f.CQ, "after the move to RESET")
				qpToErr(t, q)
				qpExpectNoCompletion(t, f.CQ, "after RESET -> ERR: the discarded WRs must not be flushed")
			},
		},
		Case{
			Name:  "modify_qp/to-RESET/qp-is-reusable",
			Cite:  `ibv_modify_qp(3): a QP in any state may be moved to RESET and then along Reset --> Init --> RTR --> RTS again; its queues are empty and have their full capacity`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				capa := qpQuery(t, q).Cap
				for i := uint32(0); i < capa.MaxRecvWR; i++ {
					qpPostRecv(t, q, qpRecvWR(uint64(i), f.MR.SGE(0, 8)))
				}
				qpToErr(t, q)
				_ = PollN(t, f.CQ, int(capa.MaxRecvWR))
				ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: qsReset}, verbs.AttrState), "modify ERR -> RESET")
				f.Walk(t, q, verbs.QPTypeRC, qsRTS, qpPeerQPN)
				Expect(t, State(t, q), qsRTS, "state after walking the reset QP again")
				for i := uint32(0); i < capa.MaxRecvWR; i++ {
					qpPostRecv(t, q, qpRecvWR(0x100+uint64(i), f.MR.SGE(0, 8)))
				}
				qpPostSend(t, q, qpSendWR(0x200, f.MR.SGE(0, 8)))
				qpExpectNoCompletion(t, f.CQ, "after posting to the reused QP")
			},
		},
		Case{
			Name:  "modify_qp/to-ERR/flushes-each-queue-in-post-order",
			Cite:  `ibv_modify_qp(3)/IBTA 10.3.1 (Error state): on entering ERR every outstanding WR is completed with IBV_WC_WR_FLUSH_ERR; IBTA 10.8.3: completions of one work queue are returned in the order its WRs were posted; ibv_poll_cq(3): of an error completion only wr_id, status, qp_num and vendor_err are valid`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				rcq, err := d.CreateCQ(16, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				// RC: its sends wait for acknowledgements nobody sends,
				// so they are outstanding on any device (a UC send
				// completes once sent).
				q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: rcq, Cap: DefaultCap, QPType: verbs.QPTypeRC})
				ExpectOK(t, err, "create_qp")
				f.Walk(t, q, verbs.QPTypeRC, qsRTS, qpPeerQPN)
				qpPostRecv(t, q, qpRecvWR(0xa1, f.MR.SGE(0, 16)))
				qpPostSend(t, q, qpSendWR(0xb1, f.MR.SGE(16, 16)))
				qpPostRecv(t, q, qpRecvList(qpRecvWR(0xa2, f.MR.SGE(32, 16)), qpRecvWR(0xa3)))
				qpPostSend(t, q, qpSendList(qpSendWR(0xb2), qpSendWR(0xb3, f.MR.SGE(48, 16))))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "send CQ", 0xb1, 0xb2, 0xb3)
				qpExpectFlushed(t, rcq, q, "receive CQ", 0xa1, 0xa2, 0xa3)
			},
		},
		Case{
			Name:  "modify_qp/to-ERR/flushes-sends-before-receives-on-a-shared-cq",
			Cite:  `ibv_modify_qp(3): entering ERR flushes every outstanding WR; the order between the send and the receive queue on a shared CQ is not specified: softhca completes every send WR, then every receive WR (qp/modify.go setStateLocked)`,
			Label: ImplementationDefined,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeFlushRecvFirst,
				Note: "the receive queue is flushed before the send queue",
			}},
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				qpPostRecv(t, q, qpRecvWR(0xa1, f.MR.SGE(0, 16)))
				qpPostSend(t, q, qpSendWR(0xb1, f.MR.SGE(16, 16)))
				qpPostRecv(t, q, qpRecvWR(0xa2, f.MR.SGE(32, 16)))
				qpPostSend(t, q, qpSendWR(0xb2, f.MR.SGE(48, 16)))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "shared CQ", 0xb1, 0xb2, 0xa1, 0xa2)
			},
		},
		Case{
			Name:  "modify_qp/to-ERR/again-flushes-nothing-twice",
			Cite:  `ibv_modify_qp(3)/IBTA 10.3.1: ERR -> ERR is a legal transition; a WR completes exactly once, so WRs already flushed are not completed again`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeUD, qsRTS)
				qpPostRecv(t, q, qpRecvWR(7, f.MR.SGE(0, 64)))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "first move to ERR", 7)
				qpToErr(t, q)
				qpExpectNoCompletion(t, f.CQ, "second move to ERR")
			},
		},

		qpQueryCase("RC-INIT", verbs.QPTypeRC, qsInit),
		rxeDeviates(qpQueryCase("RC-RTR", verbs.QPTypeRC, qsRTR), rxeHopLimit, rxeHopLimitNote),
		rxeDeviates(qpQueryCase("RC-RTS", verbs.QPTypeRC, qsRTS), rxeHopLimit, rxeHopLimitNote),
		rxeDeviates(qpQueryCase("UC-RTR", verbs.QPTypeUC, qsRTR), rxeHopLimit, rxeHopLimitNote),
		rxeDeviates(qpQueryCase("UC-RTS", verbs.QPTypeUC, qsRTS), rxeHopLimit, rxeHopLimitNote),
		qpQueryCase("UD-INIT", verbs.QPTypeUD, qsInit),
		qpQueryCase("UD-RTS", verbs.QPTypeUD, qsRTS),

		Case{
			Name:  "modify_qp/SQD/notify-raises-SQ_DRAINED",
			Cite:  `ibv_modify_qp(3): en_sqd_async_notify "enable SQD.drained async notification"; ibv_get_async_event(3): IBV_EVENT_SQ_DRAINED "Send Queue drained" is affiliated with the QP; IBTA 11.6.3.1: raised once the SQ is drained after a transition to SQD that requested it`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				x := verbs.QPAttr{QPState: qsSQD, EnSQDAsyncNotify: true}
				ExpectOK(t, q.Modify(&x, verbs.AttrState|verbs.AttrEnSQDAsyncNotify), "modify RTS -> SQD with en_sqd_async_notify")
				e := qpAsyncEvent(t, d, verbs.EventSQDrained, q)
				d.AckAsyncEvent(e)
				Expect(t, State(t, q), qsSQD, "state after the drain")
			},
		},
		Case{
			Name:  "modify_qp/SQD/without-notify-no-event",
			Cite:  `ibv_modify_qp(3): en_sqd_async_notify "enable SQD.drained async notification"; IBTA 11.6.3.1: the SQ Drained event is generated only when the consumer asked for it on the transition to SQD (rxe raises it regardless)`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeSQDrainedAlways,
				Note: "IBV_EVENT_SQ_DRAINED is raised on every drain, whether en_sqd_async_notify was set or not",
			}},
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeUC, qsRTS)
				ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: qsSQD}, verbs.AttrState), "modify RTS -> SQD")
				qpExpectNoAsyncEvent(t, d, "RTS -> SQD without en_sqd_async_notify")
			},
		},
		Case{
			Name:  "modify_qp/SQD/notify-is-per-transition",
			Cite:  `ibv_modify_qp(3): en_sqd_async_notify "enable SQD.drained async notification (valid only if qp_state is SQD)"; IBTA 11.2.5.2/11.6.3.1: it is a modifier of the RTS -> SQD transition it is given with, so a later RTS -> SQD without it raises no IBV_EVENT_SQ_DRAINED (mlx4/mlx5 read it from each modify call)`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeSQDrainedAlways,
				Note: "IBV_EVENT_SQ_DRAINED is raised on every drain, whether en_sqd_async_notify was set or not",
			}},
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeUD, qsRTS)
				x := verbs.QPAttr{QPState: qsSQD, EnSQDAsyncNotify: true}
				ExpectOK(t, q.Modify(&x, verbs.AttrState|verbs.AttrEnSQDAsyncNotify), "modify RTS -> SQD with en_sqd_async_notify")
				d.AckAsyncEvent(qpAsyncEvent(t, d, verbs.EventSQDrained, q))
				ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: qsRTS}, verbs.AttrState), "modify SQD -> RTS")
				ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: qsSQD}, verbs.AttrState), "modify RTS -> SQD without en_sqd_async_notify")
				qpExpectNoAsyncEvent(t, d, "second RTS -> SQD, without en_sqd_async_notify")
			},
		},
		qpLastWQECase(verbs.QPTypeRC),
		qpLastWQECase(verbs.QPTypeUD),
		Case{
			Name:  "modify_qp/ERR/without-srq-no-LAST_WQE_REACHED",
			Cite:  `ibv_get_async_event(3): IBV_EVENT_QP_LAST_WQE_REACHED is "Last WQE Reached on a QP associated with an SRQ"; a QP with its own receive queue does not raise it`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				qpToErr(t, q)
				qpExpectNoAsyncEvent(t, d, "RTS -> ERR of a QP without SRQ")
			},
		},
		Case{
			Name:  "modify_qp/cap-resize-unsupported",
			Cite:  `ibv_modify_qp(3): cap is "QP capabilities (valid if HCA supports QP resizing)"; the kernel's qp_state_table accepts IBV_QP_CAP in no transition; softhca does not resize QPs and fails with EINVAL; ` + qpNothingModified,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				before := qpQuery(t, q)
				x := verbs.QPAttr{QPState: qsRTS, Cap: before.Cap}
				x.Cap.MaxSendWR++
				ExpectErrno(t, q.Modify(&x, verbs.AttrState|verbs.AttrCap), syscall.EINVAL, "modify RTS -> RTS with IBV_QP_CAP")
				qpExpectUnchanged(t, q, before, "after the rejected modify")
			},
		},
	)
}

// qpRangeCase builds "modify_qp/range/<name>": a QP of the type in state
// from is modified along the usual path (RESET -> INIT -> RTR -> RTS) with
// the required attributes, one of them set out of range by set; the modify
// must fail with EINVAL and query_qp must show nothing changed.
func qpRangeCase(name, cite string, label Label, typ verbs.QPType, from verbs.QPState, set func(*T, Device, *verbs.QPAttr)) Case {
	next := map[verbs.QPState]verbs.QPState{qsReset: qsInit, qsInit: qsRTR, qsRTR: qsRTS}[from]
	return Case{
		Name:  "modify_qp/range/" + name,
		Cite:  cite,
		Label: label,
		Run: func(t *T, d Device) {
			f, q := qpAt(t, d, typ, from)
			// Every case breaks an attribute the transition requires,
			// so the failure can only come from its value.
			x, mask := f.Transition(t, typ, next, qpPeerQPN)
			set(t, d, &x)
			before := qpQuery(t, q)
			err := q.Modify(&x, mask)
			ExpectErrno(t, err, syscall.EINVAL, fmt.Sprintf("%s QP %s -> %s with %s", typ, from, next, name))
			qpExpectUnchanged(t, q, before, "after the rejected modify")
		},
	}
}

// qpEmptyGIDIndex returns a GID index of port 1 inside the table that
// holds no GID, skipping the case if there is none.
func qpEmptyGIDIndex(t *T, d Device) uint8 {
	t.Helper()
	p, err := d.QueryPort(1)
	ExpectOK(t, err, "query_port 1")
	n := min(int(p.GIDTblLen), 256)
	for i := 0; i < n; i++ {
		g, err := d.QueryGID(1, i)
		if err != nil || g.IsZero() {
			return uint8(i)
		}
	}
	t.Skipf("every one of the first %d GID indexes holds a GID", n)
	return 0
}

// qpExpectUnchanged checks that query_qp reports the same attributes as
// before.
func qpExpectUnchanged(t *T, q QP, before verbs.QPAttr, what string) {
	t.Helper()
	after := qpQuery(t, q)
	if after != before {
		t.Fatalf("%s: query_qp changed\nbefore %+v\nafter  %+v", what, before, after)
	}
}

// qpCurStateEarlyCase checks that IBV_QP_CUR_STATE is refused from RESET
// and INIT, even when it names the current state.
func qpCurStateEarlyCase(from verbs.QPState) Case {
	return Case{
		Name:  "modify_qp/cur_state/from-" + from.String() + "-rejected",
		Cite:  `ibv_modify_qp(3) and the kernel's ib_modify_qp_is_ok: IBV_QP_CUR_STATE is accepted only from RTR, RTS, SQD and SQE (it is in no RESET or INIT transition of qp_state_table); ` + qpNothingModified,
		Label: Spec,
		Run: func(t *T, d Device) {
			f, q := qpAt(t, d, verbs.QPTypeRC, from)
			next := qsInit
			if from == qsInit {
				next = qsRTR
			}
			x, mask := f.Transition(t, verbs.QPTypeRC, next, qpPeerQPN)
			x.CurQPState = from
			before := qpQuery(t, q)
			ExpectErrno(t, q.Modify(&x, mask|verbs.AttrCurState), syscall.EINVAL,
				fmt.Sprintf("modify %s -> %s with cur_qp_state %s", from, next, from))
			qpExpectUnchanged(t, q, before, "after the rejected modify")
		},
	}
}

// qpQueryCase walks a QP to st with distinctive attribute values and
// checks that query_qp returns what was set on the way.
func qpQueryCase(name string, typ verbs.QPType, st verbs.QPState) Case {
	return Case{
		Name:  "query_qp/after-" + name,
		Cite:  `ibv_query_qp(3): "ibv_query_qp() gets the attributes specified in attr_mask for the QP qp and returns them through the pointers attr and init_attr"; the values are those the last successful ibv_modify_qp set`,
		Label: Spec,
		Run: func(t *T, d Device) {
			f := NewFixture(t, d)
			q := f.NewQP(t, typ)
			peer := f.PeerGID(t)
			rc, connected := typ == verbs.QPTypeRC, typ != verbs.QPTypeUD
			var checks []func(verbs.QPAttr)
			check := func(what string, get func(verbs.QPAttr) any, want any) {
				checks = append(checks, func(a verbs.QPAttr) {
					if got := get(a); got != want {
						t.Fatalf("query_qp in %s: %s is %v, want %v", st, what, got, want)
					}
				})
			}

			// RESET -> INIT
			x := verbs.QPAttr{QPState: qsInit, PKeyIndex: 0, PortNum: 1}
			mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
			if connected {
				x.QPAccessFlags = verbs.AccessRemoteRead
				mask |= verbs.AttrAccessFlags
				check("qp_access_flags", func(a verbs.QPAttr) any { return a.QPAccessFlags }, verbs.AccessRemoteRead)
			} else {
				x.QKey = 0x1badb002
				mask |= verbs.AttrQKey
				check("qkey", func(a verbs.QPAttr) any { return a.QKey }, uint32(0x1badb002))
			}
			check("port_num", func(a verbs.QPAttr) any { return a.PortNum }, uint8(1))
			check("pkey_index", func(a verbs.QPAttr) any { return a.PKeyIndex }, uint16(0))
			ExpectOK(t, q.Modify(&x, mask), "modify RESET -> INIT")

			if st >= qsRTR {
				x = verbs.QPAttr{QPState: qsRTR}
				mask = verbs.AttrState
				if connected {
					x.PathMTU, x.DestQPNum, x.RQPSN = verbs.MTU512, 0xabcde, 0x2468a
					x.AHAttr = verbs.AHAttr{IsGlobal: true, PortNum: 1,
						GRH: verbs.GlobalRoute{DGID: peer, SGIDIndex: 1, HopLimit: 33, TrafficClass: 0}}
					mask |= verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrAV
					check("path_mtu", func(a verbs.QPAttr) any { return a.PathMTU }, verbs.MTU512)
					check("dest_qp_num", func(a verbs.QPAttr) any { return a.DestQPNum }, uint32(0xabcde))
					check("rq_psn", func(a verbs.QPAttr) any { return a.RQPSN }, uint32(0x2468a))
					check("ah_attr.grh.dgid", func(a verbs.QPAttr) any { return a.AHAttr.GRH.DGID }, peer)
					check("ah_attr.grh.sgid_index", func(a verbs.QPAttr) any { return a.AHAttr.GRH.SGIDIndex }, uint8(1))
					check("ah_attr.grh.hop_limit", func(a verbs.QPAttr) any { return a.AHAttr.GRH.HopLimit }, uint8(33))
					check("ah_attr.is_global", func(a verbs.QPAttr) any { return a.AHAttr.IsGlobal }, true)
				}
				if rc {
					x.MaxDestRdAtomic, x.MinRNRTimer = 3, 9
					mask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
					check("max_dest_rd_atomic", func(a verbs.QPAttr) any { return a.MaxDestRdAtomic }, uint8(3))
					check("min_rnr_timer", func(a verbs.QPAttr) any { return a.MinRNRTimer }, uint8(9))
				}
				ExpectOK(t, q.Modify(&x, mask), "modify INIT -> RTR")
			}
			if st >= qsRTS {
				x = verbs.QPAttr{QPState: qsRTS, SQPSN: 0x13579}
				mask = verbs.AttrState | verbs.AttrSQPSN
				check("sq_psn", func(a verbs.QPAttr) any { return a.SQPSN }, uint32(0x13579))
				if rc {
					x.Timeout, x.RetryCnt, x.RNRRetry, x.MaxRdAtomic = 17, 5, 3, 2
					mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
					check("timeout", func(a verbs.QPAttr) any { return a.Timeout }, uint8(17))
					check("retry_cnt", func(a verbs.QPAttr) any { return a.RetryCnt }, uint8(5))
					check("rnr_retry", func(a verbs.QPAttr) any { return a.RNRRetry }, uint8(3))
					check("max_rd_atomic", func(a verbs.QPAttr) any { return a.MaxRdAtomic }, uint8(2))
				}
				ExpectOK(t, q.Modify(&x, mask), "modify RTR -> RTS")
			}
			got := qpQuery(t, q)
			Expect(t, got.QPState, st, "qp_state")
			for _, c := range checks {
				c(got)
			}
		},
	}
}

// qpLastWQECase checks IBV_EVENT_QP_LAST_WQE_REACHED for a QP of the type
// on an SRQ entering ERR.
func qpLastWQECase(typ verbs.QPType) Case {
	return Case{
		Name:  "modify_qp/ERR/with-srq-raises-LAST_WQE_REACHED/" + typ.String(),
		Cite:  `ibv_get_async_event(3): IBV_EVENT_QP_LAST_WQE_REACHED "Last WQE Reached on a QP associated with an SRQ" (affiliated with the QP); IBTA 11.6.3.3: a QP on an SRQ that enters the Error state raises it once no more WQEs of the SRQ will be consumed`,
		Label: Spec,
		Deviations: []Deviation{{
			Impl: ImplRxe,
			Cite: rxeNoLastWQE,
			Note: "rxe never raises IBV_EVENT_QP_LAST_WQE_REACHED",
		}},
		Run: func(t *T, d Device) {
			f := NewFixture(t, d)
			s := qpSRQ(t, f.PD)
			q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: typ})
			ExpectOK(t, err, "create_qp with an SRQ")
			f.Walk(t, q, typ, qsRTS, qpPeerQPN)
			qpToErr(t, q)
			e := qpAsyncEvent(t, d, verbs.EventQPLastWQEReached, q)
			d.AckAsyncEvent(e)
		},
	}
}
