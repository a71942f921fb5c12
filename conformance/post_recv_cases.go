package conformance

import (
	"fmt"
	"math"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// Cases for ibv_post_recv(3) (seed 000). Nothing arrives yet (there is no
// transport), so receives are observed through the return value, bad_wr
// and the flush completions of a move to ERR.

const qpPostRecvCite = `ibv_post_recv(3) (seed 000): it posts the list from the head, "stops at the first failure and stores a pointer to the WR that failed in bad_wr; for example, if the first receive WR fails, *bad_wr = wr"`

func init() {
	Register(
		Case{
			Name: "post_recv/state/RESET-fails",
			Cite: `ibv_post_recv(3) (seed 000): "InfiniBand Architecture Specification Volume 1 Release 1.2.1 C10-97.2.1: posting a receive WR to a QP in the Reset state must return an immediate error", although "some HCAs return success"; ` + qpPostRecvCite,
			// The seed calls it the spec's rule; some HCAs deviate (softhca
			// can be configured to, hca.Config.AllowPostRecvInReset).
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeBadWRNull,
				Note: "post_recv in RESET fails with EINVAL but leaves *bad_wr NULL",
			}},
			Run: func(t *T, d Device) {
				for _, typ := range qpTypes {
					f, q := qpAt(t, d, typ, qsReset)
					first := qpRecvWR(0x10, f.MR.SGE(0, 64))
					qpExpectRecvRejected(t, q, qpRecvList(first, qpRecvWR(0x11, f.MR.SGE(64, 64))), first, syscall.EINVAL,
						fmt.Sprintf("post_recv to a %s QP in RESET", typ))
					Expect(t, State(t, q), qsReset, "state after the rejected post")
					qpToErr(t, q)
					qpExpectNoCompletion(t, f.CQ, typ.String()+" QP moved to ERR after the rejected post")
				}
			},
		},
		qpRecvStateCase(qsInit),
		qpRecvStateCase(qsRTR),
		qpRecvStateCase(qsRTS),
		qpRecvStateCase(qsSQD),
		Case{
			Name:  "post_recv/state/ERR-accepts-and-flushes",
			Cite:  `IBTA 10.3.1 (Error state): receive WRs posted to a QP in ERR are accepted and completed with a flush error; ibv_poll_cq(3): IBV_WC_WR_FLUSH_ERR`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeRecvInErrNotFlushed,
				Note: "a receive posted to a QP already in ERR is queued and never completed",
			}},
			Run: func(t *T, d Device) {
				for _, typ := range qpTypes {
					f, q := qpAt(t, d, typ, qsErr)
					qpPostRecv(t, q, qpRecvList(qpRecvWR(0x20, f.MR.SGE(0, 64)), qpRecvWR(0x21, f.MR.SGE(64, 64))))
					qpExpectFlushed(t, f.CQ, q, typ.String()+" QP in ERR", 0x20, 0x21)
				}
			},
		},
		Case{
			Name:  "post_recv/num_sge-above-max_recv_sge",
			Cite:  `ibv_post_recv(3) (seed 000): num_sge "must be 0 or more and within the QP's max_recv_sge capability"; rxe post_one_recv: num_sge > max_sge is EINVAL; ` + qpPostRecvCite,
			Label: Spec,
			Run: func(t *T, d Device) {
				for _, typ := range qpTypes {
					f, q := qpAt(t, d, typ, qsRTR)
					n := int(qpQuery(t, q).Cap.MaxRecvSGE)
					wr := qpRecvWR(0x30, qpSGEs(f, n+1)...)
					qpExpectRecvRejected(t, q, wr, wr, syscall.EINVAL, fmt.Sprintf("%s: num_sge %d with max_recv_sge %d", typ, n+1, n))
					qpPostRecv(t, q, qpRecvWR(0x31, qpSGEs(f, n)...))
					qpToErr(t, q)
					qpExpectFlushed(t, f.CQ, q, typ.String()+" QP after RTR -> ERR", 0x31)
				}
			},
		},
		Case{
			Name:  "post_recv/num_sge-0-allowed",
			Cite:  `ibv_post_recv(3) (seed 000): "0 means a receive buffer of size 0"; "to post a zero-size receive buffer set num_sge to 0" (sg_list may then be NULL)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				qpPostRecv(t, q, qpRecvWR(0x40))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTS -> ERR", 0x40)
			},
		},
		Case{
			Name:  "post_recv/full-receive-queue-enomem",
			Cite:  `ibv_post_recv(3) (seed 000) ERRORS: ENOMEM "tried to post more receive WRs than the QP's max_recv_wr capability"; ` + qpPostRecvCite,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				c := DefaultCap
				c.MaxRecvWR = 4
				q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, Cap: c, QPType: verbs.QPTypeUC})
				ExpectOK(t, err, "create_qp")
				f.Walk(t, q, verbs.QPTypeUC, qsRTR, qpPeerQPN)
				n := int(qpQuery(t, q).Cap.MaxRecvWR)
				if n > 60 {
					t.Skipf("the device granted max_recv_wr %d for 4; the fixture CQ holds 64", n)
				}
				ids := make([]uint64, n)
				for i := 0; i < n-1; i++ {
					ids[i] = 0x100 + uint64(i)
					qpPostRecv(t, q, qpRecvWR(ids[i], f.MR.SGE(i*8, 8)))
				}
				last := qpRecvWR(0x100+uint64(n-1), f.MR.SGE(0, 8))
				ids[n-1] = last.WRID
				over := qpRecvWR(0x1fe, f.MR.SGE(0, 8))
				qpExpectRecvRejected(t, q, qpRecvList(last, over, qpRecvWR(0x1ff)), over, syscall.ENOMEM,
					fmt.Sprintf("post_recv beyond max_recv_wr %d", n))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTR -> ERR", ids...)
			},
		},
		Case{
			Name:  "post_recv/list/stops-at-first-bad-wr",
			Cite:  qpPostRecvCite + `; the WRs before it were posted, the ones after it were not`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeUD, qsRTS)
				n := int(qpQuery(t, q).Cap.MaxRecvSGE)
				badWR := qpRecvWR(0x52, qpSGEs(f, n+1)...)
				list := qpRecvList(qpRecvWR(0x50, f.MR.SGE(0, 64)), qpRecvWR(0x51, f.MR.SGE(64, 64)), badWR, qpRecvWR(0x53, f.MR.SGE(128, 64)))
				qpExpectRecvRejected(t, q, list, badWR, syscall.EINVAL, "post_recv with a bad third WR")
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTS -> ERR", 0x50, 0x51)
			},
		},
		qpRecvBadSGECase("mr-without-local-write",
			`ibv_post_recv(3) (seed 000): "the memory region of a receive WR must be registered with IBV_ACCESS_LOCAL_WRITE"; the spec does not say when this is checked: rxe accepts the post and completes the WR in error when data arrives, softhca fails the post with EINVAL (hca.Config.DeferRecvSGEChecks selects rxe's behaviour)`,
			func(t *T, f *Fixture) verbs.SGE {
				mr, err := f.PD.RegMR(make([]byte, 256), verbs.AccessRemoteRead)
				ExpectOK(t, err, "reg_mr without LOCAL_WRITE")
				return mr.SGE(0, 64)
			}),
		qpRecvBadSGECase("bad-lkey",
			`ibv_post_recv(3) (seed 000): lkey is "the L_Key of the memory region that holds addr and length"; an lkey naming no region is detected at post time by softhca (EINVAL) and at data placement by rxe (an error completion)`,
			func(t *T, f *Fixture) verbs.SGE {
				s := f.MR.SGE(0, 64)
				s.LKey ^= 0xa5a5a5a5
				return s
			}),
		qpRecvBadSGECase("mr-of-another-pd",
			`ibv_post_recv(3) (seed 000): each SGE lies in a memory region; IBTA 10.6.3.2: the region must belong to the QP's protection domain; softhca checks this at post time (EINVAL), rxe at data placement (an error completion)`,
			func(t *T, f *Fixture) verbs.SGE {
				pd, err := f.D.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				mr, err := pd.RegMR(make([]byte, 256), verbs.AccessLocalWrite)
				ExpectOK(t, err, "reg_mr in another PD")
				return mr.SGE(0, 64)
			}),
		qpRecvBadSGECase("outside-the-mr",
			`ibv_post_recv(3) (seed 000): "each scatter/gather element must fit inside one memory region"; softhca checks the bounds at post time (EINVAL), rxe at data placement (an error completion)`,
			func(t *T, f *Fixture) verbs.SGE {
				return f.MR.SGE(f.MR.Len()-32, 64)
			}),
		Case{
			Name:  "post_recv/sges-from-two-mrs",
			Cite:  `ibv_post_recv(3) (seed 000): "the receive buffer of one WR may consist of several scatter/gather elements, each of which must fit inside one memory region" — different elements may use different regions`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTR)
				mr2, err := f.PD.RegMR(make([]byte, 512), verbs.AccessLocalWrite)
				ExpectOK(t, err, "reg_mr")
				qpPostRecv(t, q, qpRecvWR(0x60, f.MR.SGE(0, 256), mr2.SGE(0, 512)))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTR -> ERR", 0x60)
			},
		},
		Case{
			Name:  "post_recv/qp-with-srq-rejected",
			Cite:  `ibv_post_recv(3): "If the QP qp is associated with a shared receive queue, you must use the function ibv_post_srq_recv(), and not ibv_post_recv(), since the QP's own receive queue will not be used"; ` + qpPostRecvCite,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: `rdma-core v44.0 providers/rxe/rxe.c: map_queue_pair() leaves qp->rq.queue NULL for a QP created with an SRQ, and rxe_post_recv() does "*bad_wr = NULL;" and then "if (!rq || !recv_wr || !rq->queue) return EINVAL;"`,
				Note: "fails with EINVAL but leaves bad_wr NULL instead of pointing it at the refused WR",
			}},
			Run: func(t *T, d Device) {
				for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUD} {
					f := NewFixture(t, d)
					s := qpSRQ(t, f.PD)
					q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: typ})
					ExpectOK(t, err, "create_qp with an SRQ")
					f.Walk(t, q, typ, qsRTR, qpPeerQPN)
					wr := qpRecvWR(0x70, f.MR.SGE(0, 64))
					qpExpectRecvRejected(t, q, wr, wr, syscall.EINVAL, "post_recv to a "+typ.String()+" QP that uses an SRQ")
				}
			},
		},
		Case{
			Name:  "post_recv/flushed-in-post-order-with-wr_ids",
			Cite:  `ibv_post_recv(3) (seed 000): wr_id "is stored in the completion that ibv_poll_cq returns"; IBTA 10.8.3: the completions of one receive queue are returned in posting order; on entering ERR every outstanding receive WR completes with IBV_WC_WR_FLUSH_ERR`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeUD, qsInit)
				ids := []uint64{math.MaxUint64, 0, 7, 1 << 40, 3}
				qpPostRecv(t, q, qpRecvWR(ids[0], f.MR.SGE(0, 128)))
				qpPostRecv(t, q, qpRecvList(qpRecvWR(ids[1], f.MR.SGE(128, 128)), qpRecvWR(ids[2])))
				x, m := f.Transition(t, verbs.QPTypeUD, qsRTR, 0)
				ExpectOK(t, q.Modify(&x, m), "modify INIT -> RTR")
				qpPostRecv(t, q, qpRecvList(qpRecvWR(ids[3], f.MR.SGE(256, 128)), qpRecvWR(ids[4], f.MR.SGE(384, 128))))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTR -> ERR", ids...)
			},
		},
	)
}

// qpRecvStateCase checks that a state after RESET accepts receive WRs,
// which stay queued until a move to ERR flushes them.
func qpRecvStateCase(st verbs.QPState) Case {
	return Case{
		Name:  "post_recv/state/" + st.String() + "-accepts",
		Cite:  `ibv_post_recv(3) (seed 000) and IBTA 10.3.1: receive WRs may be posted once the QP has left RESET (INIT, RTR, RTS, and SQD, where only the send queue is drained); they stay queued until consumed or flushed`,
		Label: Spec,
		Run: func(t *T, d Device) {
			for _, typ := range qpTypes {
				f, q := qpAt(t, d, typ, st)
				qpPostRecv(t, q, qpRecvList(qpRecvWR(0x80, f.MR.SGE(0, 64)), qpRecvWR(0x81, f.MR.SGE(64, 64))))
				qpExpectNoCompletion(t, f.CQ, fmt.Sprintf("receives posted to a %s QP in %s", typ, st))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, fmt.Sprintf("%s QP after %s -> ERR", typ, st), 0x80, 0x81)
			}
		},
	}
}

// qpRecvBadSGECase checks that a receive WR whose scatter element is not
// writable local memory of the QP's PD fails at post time.
func qpRecvBadSGECase(name, cite string, sge func(*T, *Fixture) verbs.SGE) Case {
	return Case{
		Name:  "post_recv/sge/" + name,
		Cite:  cite + `; ` + qpPostRecvCite,
		Label: ImplementationDefined,
		Deviations: []Deviation{{
			Impl: ImplRxe,
			Cite: rxePostRecvChecks,
			Note: "accepts the receive WR; the SGE is checked only when a message is placed in it, which completes the WR with IBV_WC_LOC_QP_OP_ERR",
		}},
		Run: func(t *T, d Device) {
			f, q := qpAt(t, d, verbs.QPTypeRC, qsRTR)
			good := qpRecvWR(0x90, f.MR.SGE(0, 64))
			bad := qpRecvWR(0x91, f.MR.SGE(64, 64), sge(t, f))
			qpExpectRecvRejected(t, q, qpRecvList(good, bad), bad, syscall.EINVAL, "post_recv with an SGE "+name)
			qpToErr(t, q)
			qpExpectFlushed(t, f.CQ, q, "after RTR -> ERR", 0x90)
		},
	}
}
