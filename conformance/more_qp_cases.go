package conformance

import (
	"time"

	"github.com/softhca/softhca/verbs"
)

// More QP cases (issue 15): query_qp in the states the first family left
// out, optional attributes of the self-transitions and of RTR -> RTS
// taking effect, caps kept through the transitions, and the posting
// limits at exactly the granted caps.

// qpSelfTransitionCite is where the optional attributes of the
// transitions below come from.
const qpSelfTransitionCite = `ibv_modify_qp(3): the QP's attributes are modified "according to the mask attr_mask"; the kernel's qp_state_table (drivers/infiniband/core/verbs.c; IBTA 1.2.1 §10.3.1, table 91) lists the optional attributes of each transition; ibv_query_qp(3): attribute values are valid "if they have been set using ibv_modify_qp()"`

func init() {
	Register(
		qpQueryCase("UC-INIT", verbs.QPTypeUC, qsInit),
		qpQueryCase("UD-RTR", verbs.QPTypeUD, qsRTR),
		qpQuerySQDCase(verbs.QPTypeRC),
		qpQuerySQDCase(verbs.QPTypeUC),
		qpQuerySQDCase(verbs.QPTypeUD),
		qpInitToInitCase(verbs.QPTypeRC),
		qpInitToInitCase(verbs.QPTypeUC),
		qpInitToInitCase(verbs.QPTypeUD),
		qpRTRToRTSAccessCase(verbs.QPTypeRC),
		qpRTRToRTSAccessCase(verbs.QPTypeUC),
		Case{
			Name:  "modify_qp/RTS-to-RTS/RC-access-flags-and-min_rnr_timer-take-effect",
			Cite:  qpSelfTransitionCite + `: RTS -> RTS of an RC QP takes IBV_QP_ACCESS_FLAGS and IBV_QP_MIN_RNR_TIMER`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				x := verbs.QPAttr{QPState: qsRTS, QPAccessFlags: verbs.AccessRemoteRead, MinRNRTimer: 21}
				ExpectOK(t, q.Modify(&x, verbs.AttrState|verbs.AttrAccessFlags|verbs.AttrMinRNRTimer), "modify RTS -> RTS")
				a := qpQuery(t, q)
				Expect(t, a.QPState, qsRTS, "qp_state")
				Expect(t, a.QPAccessFlags, verbs.AccessRemoteRead, "qp_access_flags")
				Expect(t, a.MinRNRTimer, uint8(21), "min_rnr_timer")
			},
		},
		Case{
			Name:  "modify_qp/RTS-to-RTS/UD-qkey-takes-effect",
			Cite:  qpSelfTransitionCite + `: RTS -> RTS of a UD QP takes IBV_QP_QKEY`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeUD, qsRTS)
				x := verbs.QPAttr{QPState: qsRTS, QKey: 0x0bad0bad}
				ExpectOK(t, q.Modify(&x, verbs.AttrState|verbs.AttrQKey), "modify RTS -> RTS")
				a := qpQuery(t, q)
				Expect(t, a.QPState, qsRTS, "qp_state")
				Expect(t, a.QKey, uint32(0x0bad0bad), "qkey")
			},
		},
		Case{
			Name:  "modify_qp/SQD-to-SQD/RC-timers-take-effect",
			Cite:  qpSelfTransitionCite + `: SQD -> SQD of an RC QP takes IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_MAX_QP_RD_ATOMIC and IBV_QP_MAX_DEST_RD_ATOMIC (IBTA 10.3.1: once the send queue is drained)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeRC, qsSQD)
				qpWaitDrained(t, q)
				x := verbs.QPAttr{QPState: qsSQD, Timeout: 19, RetryCnt: 2, RNRRetry: 1, MaxRdAtomic: 1, MaxDestRdAtomic: 2}
				ExpectOK(t, q.Modify(&x, verbs.AttrState|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|
					verbs.AttrMaxQPRdAtomic|verbs.AttrMaxDestRdAtomic), "modify SQD -> SQD")
				a := qpQuery(t, q)
				Expect(t, a.QPState, qsSQD, "qp_state")
				Expect(t, a.Timeout, uint8(19), "timeout")
				Expect(t, a.RetryCnt, uint8(2), "retry_cnt")
				Expect(t, a.RNRRetry, uint8(1), "rnr_retry")
				Expect(t, a.MaxRdAtomic, uint8(1), "max_rd_atomic")
				Expect(t, a.MaxDestRdAtomic, uint8(2), "max_dest_rd_atomic")
			},
		},
		Case{
			Name:  "modify_qp/SQD-to-SQD/UD-qkey-takes-effect",
			Cite:  qpSelfTransitionCite + `: SQD -> SQD of a UD QP takes IBV_QP_QKEY`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeUD, qsSQD)
				qpWaitDrained(t, q)
				x := verbs.QPAttr{QPState: qsSQD, QKey: 0x7007}
				ExpectOK(t, q.Modify(&x, verbs.AttrState|verbs.AttrQKey), "modify SQD -> SQD")
				a := qpQuery(t, q)
				Expect(t, a.QPState, qsSQD, "qp_state")
				Expect(t, a.QKey, uint32(0x7007), "qkey")
			},
		},
		Case{
			Name:  "modify_qp/SQD-to-RTS/RC-min_rnr_timer-takes-effect",
			Cite:  qpSelfTransitionCite + `: SQD -> RTS of an RC QP takes IBV_QP_MIN_RNR_TIMER and IBV_QP_ACCESS_FLAGS`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, q := qpAt(t, d, verbs.QPTypeRC, qsSQD)
				qpWaitDrained(t, q)
				x := verbs.QPAttr{QPState: qsRTS, MinRNRTimer: 3, QPAccessFlags: verbs.AccessRemoteWrite}
				ExpectOK(t, q.Modify(&x, verbs.AttrState|verbs.AttrMinRNRTimer|verbs.AttrAccessFlags), "modify SQD -> RTS")
				a := qpQuery(t, q)
				Expect(t, a.QPState, qsRTS, "qp_state")
				Expect(t, a.MinRNRTimer, uint8(3), "min_rnr_timer")
				Expect(t, a.QPAccessFlags, verbs.AccessRemoteWrite, "qp_access_flags")
			},
		},
		Case{
			Name:  "query_qp/cap-kept-through-transitions",
			Cite:  `ibv_query_qp(3): cap is the "QP capabilities"; ibv_create_qp(3): the caps are granted at creation ("the values will be greater than or equal to the values requested"); ibv_modify_qp(3) changes cap only with IBV_QP_CAP, so the transitions leave it as granted`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				q := f.NewQP(t, verbs.QPTypeRC)
				granted := qpQuery(t, q).Cap
				for _, st := range []verbs.QPState{qsInit, qsRTR, qsRTS, qsSQD} {
					f.Walk(t, q, verbs.QPTypeRC, st, qpPeerQPN)
					if got := qpQuery(t, q).Cap; got != granted {
						t.Fatalf("cap in %s is %+v, want %+v as granted at creation", st, got, granted)
					}
					// The next Walk starts over from RESET; go back there.
					ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: qsReset}, verbs.AttrState), "modify to RESET")
				}
			},
		},
		Case{
			Name:  "post_send/inline/exactly-max_inline_data-accepted",
			Cite:  `ibv_create_qp(3): max_inline_data is the "maximum size of data that can be posted inline to the send queue" (as granted and reported by ibv_query_qp(3)); ibv_post_send(3) IBV_SEND_INLINE — the maximum itself can be posted`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsSQD) // accepted and held
				n := int(qpQuery(t, q).Cap.MaxInlineData)
				if n == 0 {
					t.Skipf("the QP was granted no inline data")
				}
				if n > f.MR.Len() {
					t.Skipf("max_inline_data %d is larger than the fixture's region", n)
				}
				qpPostSend(t, q, &verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled | verbs.SendInline,
					SGList: []verbs.SGE{f.MR.SGE(0, n)}})
			},
		},
		Case{
			Name:  "post_send/num_sge-max_send_sge-accepted",
			Cite:  `ibv_post_send(3): num_sge "can be less or equal to the number of scatter/gather entries that the Queue Pair was created to support in the Send Queue (qp_init_attr.cap.max_send_sge)"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsSQD) // accepted and held
				n := int(qpQuery(t, q).Cap.MaxSendSGE)
				if n*64 > f.MR.Len() {
					t.Skipf("max_send_sge %d is larger than the fixture's region allows", n)
				}
				qpPostSend(t, q, qpSendWR(1, qpSGEs(f, n)...))
			},
		},
		Case{
			Name:  "post_recv/num_sge-max_recv_sge-accepted",
			Cite:  `ibv_post_recv(3) (seed 000): num_sge is the number of elements of sg_list, "0 or more and within the QP's max_recv_sge capability"; ibv_query_qp(3) returns the granted cap`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsInit)
				n := int(qpQuery(t, q).Cap.MaxRecvSGE)
				if n*64 > f.MR.Len() {
					t.Skipf("max_recv_sge %d is larger than the fixture's region allows", n)
				}
				qpPostRecv(t, q, qpRecvWR(1, qpSGEs(f, n)...))
			},
		},
	)
}

// qpWaitDrained waits until a QP in SQD reports sq_draining false (a
// hardware QP drains asynchronously, even with nothing outstanding).
func qpWaitDrained(t *T, q QP) {
	t.Helper()
	deadline := time.Now().Add(dpDeadline)
	for {
		a := qpQuery(t, q)
		Expect(t, a.QPState, qsSQD, "qp_state")
		if !a.SQDraining {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("QP %#x still draining after %v with nothing outstanding", q.Num(), dpDeadline)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// qpQuerySQDCase checks query_qp after RTS -> SQD: the state is SQD, the
// attributes set on the way are kept, and sq_draining (valid in SQD) ends
// false with nothing outstanding.
func qpQuerySQDCase(typ verbs.QPType) Case {
	return Case{
		Name:  "query_qp/after-" + typ.String() + "-SQD",
		Cite:  `ibv_query_qp(3): qp_state is the "Current QP state" and sq_draining "Is the QP draining? (Valid only if qp_state is SQD)"; IBTA 10.3.1 (SQ Drain): the QP leaves the draining sub-state once no message is in progress; the attributes set before are kept`,
		Label: Spec,
		Run: func(t *T, d Device) {
			_, q := qpAt(t, d, typ, qsRTS)
			before := qpQuery(t, q)
			ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: qsSQD}, verbs.AttrState), "modify RTS -> SQD")
			qpWaitDrained(t, q)
			a := qpQuery(t, q)
			Expect(t, a.SQPSN, before.SQPSN, "sq_psn")
			Expect(t, a.PortNum, before.PortNum, "port_num")
			Expect(t, a.PKeyIndex, before.PKeyIndex, "pkey_index")
			if typ == verbs.QPTypeUD {
				Expect(t, a.QKey, before.QKey, "qkey")
			} else {
				Expect(t, a.DestQPNum, before.DestQPNum, "dest_qp_num")
				Expect(t, a.PathMTU, before.PathMTU, "path_mtu")
				Expect(t, a.RQPSN, before.RQPSN, "rq_psn")
			}
			if typ == verbs.QPTypeRC {
				Expect(t, a.Timeout, before.Timeout, "timeout")
				Expect(t, a.RetryCnt, before.RetryCnt, "retry_cnt")
			}
		},
	}
}

// qpInitToInitCase checks that INIT -> INIT changes the attributes the
// table allows there (qp_access_flags for RC and UC, qkey for UD).
func qpInitToInitCase(typ verbs.QPType) Case {
	what := "qp_access_flags"
	if typ == verbs.QPTypeUD {
		what = "qkey"
	}
	return Case{
		Name:  "modify_qp/INIT-to-INIT/" + typ.String() + "-" + what + "-takes-effect",
		Cite:  qpSelfTransitionCite + `: INIT -> INIT takes IBV_QP_PKEY_INDEX, IBV_QP_PORT and IBV_QP_ACCESS_FLAGS (RC, UC) or IBV_QP_QKEY (UD)`,
		Label: Spec,
		Run: func(t *T, d Device) {
			_, q := qpAt(t, d, typ, qsInit)
			x := verbs.QPAttr{QPState: qsInit, PKeyIndex: 0, PortNum: 1}
			mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
			if typ == verbs.QPTypeUD {
				x.QKey = 0x600d
				mask |= verbs.AttrQKey
			} else {
				x.QPAccessFlags = verbs.AccessRemoteWrite
				mask |= verbs.AttrAccessFlags
			}
			ExpectOK(t, q.Modify(&x, mask), "modify INIT -> INIT")
			a := qpQuery(t, q)
			Expect(t, a.QPState, qsInit, "qp_state")
			Expect(t, a.PortNum, uint8(1), "port_num")
			if typ == verbs.QPTypeUD {
				Expect(t, a.QKey, uint32(0x600d), "qkey")
			} else {
				Expect(t, a.QPAccessFlags, verbs.AccessRemoteWrite, "qp_access_flags")
			}
		},
	}
}

// qpRTRToRTSAccessCase checks that the optional IBV_QP_ACCESS_FLAGS of
// RTR -> RTS takes effect on a connected QP.
func qpRTRToRTSAccessCase(typ verbs.QPType) Case {
	return Case{
		Name:  "modify_qp/RTR-to-RTS/" + typ.String() + "-optional-access-flags-take-effect",
		Cite:  qpSelfTransitionCite + `: RTR -> RTS takes IBV_QP_ACCESS_FLAGS as an optional attribute (RC and UC)`,
		Label: Spec,
		Run: func(t *T, d Device) {
			f, q := qpAt(t, d, typ, qsRTR)
			x, mask := f.Transition(t, typ, qsRTS, qpPeerQPN)
			x.QPAccessFlags = verbs.AccessRemoteWrite
			mask |= verbs.AttrAccessFlags
			ExpectOK(t, q.Modify(&x, mask), "modify RTR -> RTS with qp_access_flags")
			a := qpQuery(t, q)
			Expect(t, a.QPState, qsRTS, "qp_state")
			Expect(t, a.QPAccessFlags, verbs.AccessRemoteWrite, "qp_access_flags")
		},
	}
}
