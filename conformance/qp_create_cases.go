package conformance

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softhca/softhca/verbs"
)

// Cases for ibv_create_qp(3) and ibv_destroy_qp(3) (seed 001), and the
// helpers the queue pair case files (qp_*.go, post_*.go) share. Helpers
// are prefixed "qp" so they cannot collide with other case files.
//
// Not covered yet, because nothing can observe it before the transport
// engine exists: sq_sig_all=1 making an unsignaled send WR complete
// (flushed WRs complete whether signaled or not, and successful
// completions need the wire), and qp_context (the QP interface has no
// accessor for it).

func init() {
	Register(
		Case{
			Name:  "create_qp/send_cq-required",
			Cite:  `ibv_create_qp(3) (seed 001): send_cq is "the CQ associated with the Send Queue (SQ); it must be set"`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: `rdma-core v44.0 libibverbs/cmd_qp.c ibv_icmd_create_qp() (from ibv_cmd_create_qp(), which providers/rxe/rxe.c rxe_create_qp() calls first): for an RC/UC/UD QP without an indirection table it reads "attr_ex->send_cq->handle" and "attr_ex->recv_cq->handle" unconditionally, before the kernel (sw/rxe/rxe_qp.c rxe_qp_chk_init(): "missing cq") could refuse it`,
				Note: "crashes (SIGSEGV) where the man page has create_qp fail: libibverbs dereferences the NULL send_cq",
			}},
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				_, err := f.PD.CreateQP(&QPInitAttr{RecvCQ: f.CQ, Cap: DefaultCap, QPType: verbs.QPTypeRC})
				ExpectErrno(t, err, syscall.EINVAL, "create_qp without send_cq")
			},
		},
		Case{
			Name:  "create_qp/recv_cq-required",
			Cite:  `ibv_create_qp(3) (seed 001): recv_cq is "the CQ associated with the Receive Queue (RQ); it must be set"`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: `rdma-core v44.0 libibverbs/cmd_qp.c ibv_icmd_create_qp() (from ibv_cmd_create_qp(), which providers/rxe/rxe.c rxe_create_qp() calls first): for an RC/UC/UD QP without an indirection table it reads "attr_ex->send_cq->handle" and "attr_ex->recv_cq->handle" unconditionally, before the kernel (sw/rxe/rxe_qp.c rxe_qp_chk_init(): "missing cq") could refuse it`,
				Note: "crashes (SIGSEGV) where the man page has create_qp fail: libibverbs dereferences the NULL recv_cq",
			}},
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				_, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, Cap: DefaultCap, QPType: verbs.QPTypeRC})
				ExpectErrno(t, err, syscall.EINVAL, "create_qp without recv_cq")
			},
		},
		Case{
			Name:  "create_qp/srq/UC-rejected",
			Cite:  `ibv_create_qp(3) (seed 001): "ibv_create_qp() fails when asked for a QP that uses an SRQ unless it is IBV_QPT_RC or IBV_QPT_UD"`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeCreateQPSRQ,
				Note: "creates a UC QP that uses an SRQ",
			}},
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := qpSRQ(t, f.PD)
				_, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: verbs.QPTypeUC})
				ExpectErrno(t, err, syscall.EINVAL, "create_qp UC with an SRQ")
			},
		},
		Case{
			Name:  "create_qp/srq/other-pd-rejected",
			Cite:  `ibv_create_qp(3) (seed 001): "when creating a QP that uses an SRQ, the SRQ's protection domain must be the pd the QP is created in"`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeCreateQPSRQ,
				Note: "creates a QP that uses an SRQ of another protection domain",
			}},
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				other, err := d.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				s := qpSRQ(t, other)
				for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUD} {
					_, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: typ})
					ExpectErrno(t, err, syscall.EINVAL, "create_qp "+typ.String()+" with an SRQ of another PD")
				}
			},
		},
		qpSRQAllowedCase(verbs.QPTypeRC),
		qpSRQAllowedCase(verbs.QPTypeUD),
		Case{
			Name:  "create_qp/srq/recv-caps-ignored",
			Cite:  `ibv_create_qp(3): max_recv_wr and max_recv_sge "are ignored by ibv_create_qp() if the QP is to be associated with an SRQ" (seed 001: "ただし SRQ を使う場合は無視される")`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := qpSRQ(t, f.PD)
				a := d.QueryDevice()
				c := DefaultCap
				c.MaxRecvWR, c.MaxRecvSGE = a.MaxQPWR+1, a.MaxSGE+1
				q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: c, QPType: verbs.QPTypeRC})
				ExpectOK(t, err, "create_qp RC with an SRQ and receive caps above the device limits")
				t.Cleanup(func() { _ = q.Destroy(context.Background()) })
			},
		},
		qpCapLimitCase("max_send_wr", func(c *verbs.QPCap, a verbs.DeviceAttr) { c.MaxSendWR = a.MaxQPWR + 1 }),
		qpCapLimitCase("max_recv_wr", func(c *verbs.QPCap, a verbs.DeviceAttr) { c.MaxRecvWR = a.MaxQPWR + 1 }),
		qpCapLimitCase("max_send_sge", func(c *verbs.QPCap, a verbs.DeviceAttr) { c.MaxSendSGE = a.MaxSGE + 1 }),
		qpCapLimitCase("max_recv_sge", func(c *verbs.QPCap, a verbs.DeviceAttr) { c.MaxRecvSGE = a.MaxSGE + 1 }),
		qpCapLimitCase("max_inline_data", func(c *verbs.QPCap, a verbs.DeviceAttr) { c.MaxInlineData = a.MaxInlineData + 1 }),
		Case{
			Name:  "create_qp/caps-at-limits-accepted",
			Cite:  `ibv_create_qp(3) (seed 001): max_send_wr and max_recv_wr "must be at most max_qp_wr", max_send_sge and max_recv_sge "at most max_sge" (ibv_query_device): the limits themselves are allowed`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				a := d.QueryDevice()
				// Keep the queues small: the limit is checked per field.
				for _, c := range []verbs.QPCap{
					{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: a.MaxSGE, MaxRecvSGE: a.MaxSGE},
					{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: a.MaxInlineData},
				} {
					q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, Cap: c, QPType: verbs.QPTypeRC})
					ExpectOK(t, err, "create_qp with caps at the device limits")
					ExpectOK(t, q.Destroy(context.Background()), "destroy_qp")
				}
			},
		},
		Case{
			Name:  "create_qp/starts-in-RESET",
			Cite:  `ibv_modify_qp(3)/IBTA 10.3.1: a QP is created in the RESET state and is moved to INIT by ibv_modify_qp (the "Reset --> Init --> RTR --> RTS" sequence)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				for _, typ := range qpTypes {
					q := f.NewQP(t, typ)
					Expect(t, State(t, q), verbs.QPStateReset, "state of a new "+typ.String()+" QP")
				}
			},
		},
		Case{
			Name:  "create_qp/query-returns-granted-caps",
			Cite:  `ibv_create_qp(3): "ibv_create_qp() will update the qp_init_attr->cap struct with the actual QP values of the QP that was created; the values will be greater than or equal to the values requested"; ibv_query_qp(3) returns them in init_attr.cap`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				want := verbs.QPCap{MaxSendWR: 5, MaxRecvWR: 7, MaxSendSGE: 3, MaxRecvSGE: 2, MaxInlineData: 48}
				for _, typ := range qpTypes {
					q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, Cap: want, QPType: typ})
					ExpectOK(t, err, "create_qp "+typ.String())
					a, err := q.Query(verbs.AttrCap)
					ExpectOK(t, err, "query_qp")
					got := a.Cap
					if got.MaxSendWR < want.MaxSendWR || got.MaxRecvWR < want.MaxRecvWR || got.MaxSendSGE < want.MaxSendSGE ||
						got.MaxRecvSGE < want.MaxRecvSGE || got.MaxInlineData < want.MaxInlineData {
						t.Fatalf("%s QP: query_qp caps %+v, want at least the requested %+v", typ, got, want)
					}
				}
			},
		},
		Case{
			Name:  "create_qp/qp_num-distinct-not-0-or-1",
			Cite:  `ibv_create_qp(3): "Check the QP number (qp_num) in the returned QP"; IBTA 10.2.4.2 (QP number): QP0 and QP1 are the special management QPs, other QPs get distinct 24-bit numbers`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				seen := map[uint32]bool{}
				for i := 0; i < 12; i++ {
					typ := qpTypes[i%len(qpTypes)]
					q := f.NewQP(t, typ)
					n := q.Num()
					if n == 0 || n == 1 || n > 0xffffff {
						t.Fatalf("%s QP got qp_num %#x, want a 24-bit number other than 0 and 1", typ, n)
					}
					if seen[n] {
						t.Fatalf("qp_num %#x handed out twice", n)
					}
					seen[n] = true
				}
			},
		},
		Case{
			Name:  "create_qp/RAW_PACKET-unsupported",
			Cite:  `ibv_create_qp(3) (seed 001): qp_type may be IBV_QPT_RAW_PACKET only "if supported"; softhca has no raw Ethernet access and fails with EOPNOTSUPP`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				_, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, Cap: DefaultCap, QPType: verbs.QPTypeRawPacket})
				ExpectErrno(t, err, syscall.EOPNOTSUPP, "create_qp RAW_PACKET")
			},
		},
		Case{
			Name:  "create_qp/separate-send-and-recv-cqs",
			Cite:  `ibv_create_qp(3) (seed 001): send_cq is the CQ of the Send Queue and recv_cq the CQ of the Receive Queue; ibv_poll_cq(3): completions of a QP's send WRs go to its send CQ, of its receive WRs to its receive CQ`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				rcq, err := d.CreateCQ(16, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: rcq, Cap: DefaultCap, QPType: verbs.QPTypeRC})
				ExpectOK(t, err, "create_qp")
				f.Walk(t, q, verbs.QPTypeRC, verbs.QPStateRTS, qpPeerQPN)
				qpPostRecv(t, q, qpRecvWR(0x52, f.MR.SGE(0, 64)))
				qpPostSend(t, q, qpSendWR(0x51, f.MR.SGE(64, 64)))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "send CQ", 0x51)
				qpExpectFlushed(t, rcq, q, "receive CQ", 0x52)
			},
		},
		Case{
			Name:  "destroy_qp/busy-while-attached-to-multicast",
			Cite:  `ibv_create_qp(3)/ibv_destroy_qp(3) (seed 001): "ibv_destroy_qp() fails if the QP is still attached to a multicast group"; ibv_attach_mcast(3)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				q := f.NewQP(t, verbs.QPTypeUD)
				ExpectOK(t, q.AttachMcast(qpMcastGID, 0), "attach_mcast ff0e::1")
				ExpectErrno(t, q.Destroy(Ctx(t, time.Second)), syscall.EBUSY, "destroy_qp while attached")
				Expect(t, State(t, q), verbs.QPStateReset, "state after the failed destroy")
				ExpectOK(t, q.DetachMcast(qpMcastGID, 0), "detach_mcast")
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp after detach")
			},
		},
		Case{
			Name:  "destroy_qp/waits-for-async-event-ack",
			Cite:  `ibv_destroy_qp(3) (seed 001): destroying a QP with an affiliated asynchronous event taken by ibv_get_async_event() and not yet acknowledged waits until ibv_ack_async_event() is called; ibv_get_async_event(3): "destroying an object (CQ, SRQ or QP) will wait for all affiliated events for the object to be acknowledged"`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeNoLastWQE,
				Note: "rxe raises no IBV_EVENT_QP_LAST_WQE_REACHED, the event whose acknowledgement the destroy should wait for",
			}},
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := qpSRQ(t, f.PD)
				q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: verbs.QPTypeRC})
				ExpectOK(t, err, "create_qp RC with an SRQ")
				f.Walk(t, q, verbs.QPTypeRC, verbs.QPStateRTS, qpPeerQPN)
				qpToErr(t, q)
				e := qpAsyncEvent(t, d, verbs.EventQPLastWQEReached, q)
				err = q.Destroy(Ctx(t, 50*time.Millisecond))
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("destroy_qp with an unacknowledged event: got %v, want it to wait until the context's deadline", err)
				}
				// Nothing was destroyed: the QP still answers and still
				// flushes what is posted to it in ERR.
				SkipIfDestroysFirst(t, d, "QP")
				Expect(t, State(t, q), verbs.QPStateErr, "state after the interrupted destroy")
				qpPostSend(t, q, qpSendWR(0x77, f.MR.SGE(0, 8)))
				qpExpectFlushed(t, f.CQ, q, "send CQ", 0x77)
				d.AckAsyncEvent(e)
				ExpectOK(t, q.Destroy(Ctx(t, 2*time.Second)), "destroy_qp after the ack")
			},
		},
		Case{
			Name:  "destroy_qp/busy-multicast-reported-before-waiting-for-acks",
			Cite:  `ibv_destroy_qp(3) (seed 001): destroying a QP attached to a multicast group fails; the kernel's ib_destroy_qp fails with EBUSY on qp->usecnt (raised by ibv_attach_mcast) before anything else, and libibverbs waits for event acknowledgements only after the kernel destroyed the QP, so a destroy that fails returns at once`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeNoLastWQE,
				Note: "rxe raises no IBV_EVENT_QP_LAST_WQE_REACHED, the unacknowledged event of this case",
			}},
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := qpSRQ(t, f.PD)
				q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: verbs.QPTypeUD})
				ExpectOK(t, err, "create_qp UD with an SRQ")
				ExpectOK(t, q.AttachMcast(qpMcastGID, 0), "attach_mcast ff0e::1")
				qpToErr(t, q)
				e := qpAsyncEvent(t, d, verbs.EventQPLastWQEReached, q)
				ExpectErrno(t, q.Destroy(Ctx(t, 200*time.Millisecond)), syscall.EBUSY, "destroy_qp while attached, with an unacknowledged event")
				d.AckAsyncEvent(e)
				ExpectErrno(t, q.Destroy(Ctx(t, time.Second)), syscall.EBUSY, "destroy_qp while attached, event acknowledged")
				ExpectOK(t, q.DetachMcast(qpMcastGID, 0), "detach_mcast")
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp after detach")
			},
		},
		Case{
			Name:  "destroy_qp/drops-events-not-yet-taken",
			Cite:  `ibv_get_async_event(3): the wait on destroy is for events "retrieved" and not acknowledged; an event never retrieved does not hold the destroy, and is not delivered afterwards for the destroyed QP (the kernel's uverbs release drops the object's queued events)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := qpSRQ(t, f.PD)
				q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: verbs.QPTypeRC})
				ExpectOK(t, err, "create_qp RC with an SRQ")
				qpToErr(t, q) // queues IBV_EVENT_QP_LAST_WQE_REACHED
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp with an event not yet retrieved")
				qpExpectNoAsyncEvent(t, d, "after the QP was destroyed")
				ExpectOK(t, s.Destroy(Ctx(t, time.Second)), "destroy_srq once its QP is gone")
			},
		},
		Case{
			Name:  "attach_mcast/only-UD",
			Cite:  `ibv_attach_mcast(3): "Only QPs of Transport Service Type IBV_QPT_UD may be attached to multicast groups"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				for _, typ := range []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC} {
					q := f.NewQP(t, typ)
					ExpectErrno(t, q.AttachMcast(qpMcastGID, 0), syscall.EINVAL, "attach_mcast of a "+typ.String()+" QP")
					ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp (not attached)")
				}
			},
		},
		Case{
			Name:  "destroy_qp/busy-until-every-group-detached",
			Cite:  `ibv_destroy_qp(3) (seed 001): destroying a QP still attached to a multicast group fails — to any of the groups it joined (ibv_attach_mcast(3): a QP may be attached to several groups)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				q := f.NewQP(t, verbs.QPTypeUD)
				g2 := qpMcastGID
				g2[15] = 2
				ExpectOK(t, q.AttachMcast(qpMcastGID, 0), "attach_mcast ff0e::1")
				ExpectOK(t, q.AttachMcast(g2, 0), "attach_mcast ff0e::2")
				ExpectOK(t, q.DetachMcast(qpMcastGID, 0), "detach_mcast ff0e::1")
				ExpectErrno(t, q.Destroy(Ctx(t, time.Second)), syscall.EBUSY, "destroy_qp still attached to ff0e::2")
				ExpectOK(t, q.DetachMcast(g2, 0), "detach_mcast ff0e::2")
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp after detaching from both groups")
			},
		},
		Case{
			Name:  "destroy_qp/twice-fails",
			Cite:  `ibv_destroy_qp(3): "returns 0 on success, or the value of errno on failure"; a destroyed QP no longer exists (libibverbs leaves a second call undefined; softhca fails it with EINVAL)`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				q := f.NewQP(t, verbs.QPTypeRC)
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp")
				ExpectErrno(t, q.Destroy(Ctx(t, time.Second)), syscall.EINVAL, "second destroy_qp")
			},
		},
		Case{
			Name:  "dealloc_pd/busy-while-a-qp-uses-it",
			Cite:  `ibv_alloc_pd(3): "ibv_dealloc_pd() may fail if any other resource is still associated with the PD being freed" (EBUSY, as the kernel's ib_dealloc_pd usecnt check)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				pd, err := d.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				c, err := d.CreateCQ(8, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				q, err := pd.CreateQP(&QPInitAttr{SendCQ: c, RecvCQ: c, Cap: DefaultCap, QPType: verbs.QPTypeUC})
				ExpectOK(t, err, "create_qp")
				ExpectErrno(t, pd.Dealloc(), syscall.EBUSY, "dealloc_pd with a QP")
				Expect(t, State(t, q), verbs.QPStateReset, "QP state after the failed dealloc")
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp")
				ExpectOK(t, pd.Dealloc(), "dealloc_pd after the QP is destroyed")
			},
		},
		Case{
			Name:  "destroy_cq/busy-while-a-qp-uses-it",
			Cite:  `ibv_create_cq(3): "ibv_destroy_cq() fails if any queue pair is still associated with this CQ"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				scq, err := d.CreateCQ(8, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				rcq, err := d.CreateCQ(8, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: scq, RecvCQ: rcq, Cap: DefaultCap, QPType: verbs.QPTypeRC})
				ExpectOK(t, err, "create_qp")
				ExpectErrno(t, scq.Destroy(Ctx(t, time.Second)), syscall.EBUSY, "destroy_cq of the send CQ")
				ExpectErrno(t, rcq.Destroy(Ctx(t, time.Second)), syscall.EBUSY, "destroy_cq of the receive CQ")
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp")
				ExpectOK(t, scq.Destroy(Ctx(t, time.Second)), "destroy_cq of the send CQ after the QP is gone")
				ExpectOK(t, rcq.Destroy(Ctx(t, time.Second)), "destroy_cq of the receive CQ after the QP is gone")
			},
		},
	)
}

// qpSRQAllowedCase checks that an RC or UD QP may use an SRQ of its PD.
func qpSRQAllowedCase(typ verbs.QPType) Case {
	return Case{
		Name:  "create_qp/srq/" + typ.String() + "-allowed",
		Cite:  `ibv_create_qp(3) (seed 001): srq is "the SRQ to use, or NULL"; only IBV_QPT_RC and IBV_QPT_UD QPs may use one`,
		Label: Spec,
		Run: func(t *T, d Device) {
			f := NewFixture(t, d)
			s := qpSRQ(t, f.PD)
			q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: typ})
			ExpectOK(t, err, "create_qp "+typ.String()+" with an SRQ")
			Expect(t, State(t, q), verbs.QPStateReset, "state of the new QP")
			ExpectErrno(t, s.Destroy(Ctx(t, time.Second)), syscall.EBUSY, "destroy_srq while the QP uses it")
			ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp")
			ExpectOK(t, s.Destroy(Ctx(t, time.Second)), "destroy_srq once the QP is gone")
		},
	}
}

// qpCapLimitCase checks that a cap above the device limit fails creation.
func qpCapLimitCase(field string, set func(*verbs.QPCap, verbs.DeviceAttr)) Case {
	return Case{
		Name: "create_qp/caps/" + field + "-above-device-limit",
		Cite: `ibv_create_qp(3) (seed 001): when a cap exceeds the HCA's limit, some HCAs fail ibv_create_qp() and others clamp it and write the granted value back (both exist); softhca fails with EINVAL by default`,
		// The page allows clamping; softhca's default is to fail.
		Label: ImplementationDefined,
		Run: func(t *T, d Device) {
			f := NewFixture(t, d)
			a := d.QueryDevice()
			c := DefaultCap
			set(&c, a)
			for _, typ := range qpTypes {
				_, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, Cap: c, QPType: typ})
				ExpectErrno(t, err, syscall.EINVAL, "create_qp "+typ.String()+" with "+field+" above the device limit")
			}
		},
	}
}

// Shared helpers of the QP case files.

// qpTypes are the QP types the verbs cover.
var qpTypes = []verbs.QPType{verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD}

// qpPeerQPN is the remote QP number connected QPs are pointed at. Nothing
// is transmitted yet, so it needs no QP behind it.
const qpPeerQPN = 0x5a5a

// qpMcastGID is ff0e::1, a global-scope multicast GID.
var qpMcastGID = verbs.GID{0: 0xff, 1: 0x0e, 15: 0x01}

// qpSRQ creates a small SRQ in pd.
func qpSRQ(t *T, pd PD) SRQ {
	t.Helper()
	s, err := pd.CreateSRQ(verbs.SRQAttr{MaxWR: 16, MaxSGE: 2}, nil)
	ExpectOK(t, err, "create_srq")
	return s
}

// qpAt returns a fixture and a QP of the type (DefaultCap, the fixture's
// CQ for both queues) walked to state st.
func qpAt(t *T, d Device, typ verbs.QPType, st verbs.QPState) (*Fixture, QP) {
	t.Helper()
	f := NewFixture(t, d)
	q := f.NewQP(t, typ)
	f.Walk(t, q, typ, st, qpPeerQPN)
	Expect(t, State(t, q), st, "state after walking the QP")
	return f, q
}

// qpSendWR is a signaled SEND of the elements.
func qpSendWR(id uint64, sges ...verbs.SGE) *verbs.SendWR {
	return &verbs.SendWR{WRID: id, SGList: sges, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled}
}

// qpRecvWR is a receive WR of the elements.
func qpRecvWR(id uint64, sges ...verbs.SGE) *verbs.RecvWR {
	return &verbs.RecvWR{WRID: id, SGList: sges}
}

// qpSendList links the WRs into a list and returns its head.
func qpSendList(wrs ...*verbs.SendWR) *verbs.SendWR {
	for i := 0; i+1 < len(wrs); i++ {
		wrs[i].Next = wrs[i+1]
	}
	return wrs[0]
}

// qpRecvList links the WRs into a list and returns its head.
func qpRecvList(wrs ...*verbs.RecvWR) *verbs.RecvWR {
	for i := 0; i+1 < len(wrs); i++ {
		wrs[i].Next = wrs[i+1]
	}
	return wrs[0]
}

// qpAH creates an address handle for the fixture's peer GID, for UD sends.
func qpAH(t *T, f *Fixture) AH {
	t.Helper()
	ah, err := f.PD.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: f.PeerGID(t), SGIDIndex: 1, HopLimit: 64}})
	ExpectOK(t, err, "create_ah")
	return ah
}

// qpPostSend posts a send list that must be accepted whole.
func qpPostSend(t *T, q QP, wr *verbs.SendWR) {
	t.Helper()
	bad, err := q.PostSend(wr)
	if err != nil || bad != nil {
		t.Fatalf("post_send wr_id %#x: %v (bad_wr %v)", wr.WRID, err, qpSendID(bad))
	}
}

// qpPostRecv posts a receive list that must be accepted whole.
func qpPostRecv(t *T, q QP, wr *verbs.RecvWR) {
	t.Helper()
	bad, err := q.PostRecv(wr)
	if err != nil || bad != nil {
		t.Fatalf("post_recv wr_id %#x: %v (bad_wr %v)", wr.WRID, err, qpRecvID(bad))
	}
}

// qpSendID names a bad send WR for messages.
func qpSendID(wr *verbs.SendWR) any {
	if wr == nil {
		return "nil"
	}
	return wr.WRID
}

// qpRecvID names a bad receive WR for messages.
func qpRecvID(wr *verbs.RecvWR) any {
	if wr == nil {
		return "nil"
	}
	return wr.WRID
}

// qpExpectSendRejected checks that posting list fails with errno and
// returns exactly want (the WR itself, not a copy) as bad_wr.
func qpExpectSendRejected(t *T, q QP, list, want *verbs.SendWR, errno syscall.Errno, what string) {
	t.Helper()
	bad, err := q.PostSend(list)
	ExpectErrno(t, err, errno, what)
	if bad != want {
		t.Fatalf("%s: bad_wr is wr_id %v, want wr_id %#x", what, qpSendID(bad), want.WRID)
	}
}

// qpExpectRecvRejected is qpExpectSendRejected for receive lists.
func qpExpectRecvRejected(t *T, q QP, list, want *verbs.RecvWR, errno syscall.Errno, what string) {
	t.Helper()
	bad, err := q.PostRecv(list)
	ExpectErrno(t, err, errno, what)
	if bad != want {
		t.Fatalf("%s: bad_wr is wr_id %v, want wr_id %#x", what, qpRecvID(bad), want.WRID)
	}
}

// qpToErr moves a QP to ERR. A QP in RESET is first moved to INIT: the
// kernel's qp_state_table (drivers/infiniband/core/verbs.c,
// ib_modify_qp_is_ok) has no RESET -> ERR, so a kernel device rejects
// it (see Walk). The QP's type is not known here: the RC/UC attributes
// of RESET -> INIT are tried first, then UD's (for which ACCESS_FLAGS
// is neither required nor optional, so the first modify fails and
// changes nothing).
func qpToErr(t *T, q QP) {
	t.Helper()
	if State(t, q) == verbs.QPStateReset {
		a := verbs.QPAttr{QPState: verbs.QPStateInit, PKeyIndex: 0, PortNum: 1,
			QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic, QKey: 0x11111111}
		base := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		if err := q.Modify(&a, base|verbs.AttrAccessFlags); err != nil {
			ExpectOK(t, q.Modify(&a, base|verbs.AttrQKey), "modify RESET -> INIT (on the way to ERR)")
		}
	}
	ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState), "modify to ERR")
}

// qpExpectFlushed polls c for exactly len(ids) completions and checks
// that they are flushes of q's WRs with those wr_ids, in that order. Only
// wr_id, status and qp_num are checked: ibv_poll_cq(3) says the other
// fields of an error completion are undefined.
func qpExpectFlushed(t *T, c CQ, q QP, where string, ids ...uint64) {
	t.Helper()
	qpExpectCompletions(t, c, q, where, []verbs.WCStatus{verbs.WCWRFlushErr}, ids)
}

// qpExpectSentOrFlushed checks that each of ids completed once, in
// order, on q: successfully (a UC send completes once sent) or flushed.
func qpExpectSentOrFlushed(t *T, c CQ, q QP, where string, ids ...uint64) {
	t.Helper()
	qpExpectCompletions(t, c, q, where, []verbs.WCStatus{verbs.WCSuccess, verbs.WCWRFlushErr}, ids)
}

// qpExpectCompletions polls c for exactly len(ids) completions and checks
// that they are q's WRs with those wr_ids, in that order, each with one
// of the statuses in ok.
func qpExpectCompletions(t *T, c CQ, q QP, where string, ok []verbs.WCStatus, ids []uint64) {
	t.Helper()
	wcs := PollN(t, c, len(ids))
	got := make([]uint64, len(wcs))
	for i, wc := range wcs {
		got[i] = wc.WRID
	}
	if len(wcs) != len(ids) {
		t.Fatalf("%s: %d completions with wr_ids %#x, want %d with %#x", where, len(wcs), got, len(ids), ids)
	}
	for i, wc := range wcs {
		if wc.WRID != ids[i] {
			t.Fatalf("%s: completion %d has wr_id %#x, want %#x (all: %#x, want %#x)", where, i, wc.WRID, ids[i], got, ids)
		}
		if !slices.Contains(ok, wc.Status) {
			t.Fatalf("%s: wr_id %#x completed with status %q, want %s", where, wc.WRID, wc.Status, qpStatusList(ok))
		}
		if wc.QPNum != q.Num() {
			t.Fatalf("%s: wr_id %#x completed with qp_num %#x, want %#x", where, wc.WRID, wc.QPNum, q.Num())
		}
	}
}

// qpStatusList names statuses for a message: "a", "a" or "b".
func qpStatusList(ss []verbs.WCStatus) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s.String())
	}
	return strings.Join(q, " or ")
}

// qpExpectNoCompletion checks that c stays empty for a short while (a
// hardware target completes asynchronously).
func qpExpectNoCompletion(t *T, c CQ, what string) {
	t.Helper()
	wcs := make([]verbs.WC, 4)
	deadline := time.Now().Add(20 * time.Millisecond)
	for {
		if n := c.Poll(wcs); n > 0 {
			t.Fatalf("%s: %d completion(s), the first wr_id %#x status %q; want none", what, n, wcs[0].WRID, wcs[0].Status)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// qpQuery returns every attribute of the QP.
func qpQuery(t *T, q QP) verbs.QPAttr {
	t.Helper()
	a, err := q.Query(qpAllAttrs)
	ExpectOK(t, err, "query_qp")
	return a
}

// qpAllAttrs asks query_qp for every attribute.
const qpAllAttrs = verbs.AttrState | verbs.AttrCurState | verbs.AttrEnSQDAsyncNotify | verbs.AttrAccessFlags |
	verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrTimeout |
	verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrRQPSN | verbs.AttrMaxQPRdAtomic | verbs.AttrAltPath |
	verbs.AttrMinRNRTimer | verbs.AttrSQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrPathMigState | verbs.AttrCap |
	verbs.AttrDestQPN

// qpAsyncEvent waits for the next asynchronous event and checks that it
// has the type and is affiliated with q. The caller acknowledges it.
func qpAsyncEvent(t *T, d Device, typ verbs.EventType, q QP) AsyncEvent {
	t.Helper()
	e, err := d.GetAsyncEvent(Ctx(t, 2*time.Second))
	ExpectOK(t, err, "get_async_event (waiting for "+typ.String()+")")
	if e.Type != typ {
		d.AckAsyncEvent(e)
		t.Fatalf("async event %q, want %q", e.Type, typ)
	}
	if e.QP != q {
		d.AckAsyncEvent(e)
		t.Fatalf("%q event names QP %v, want the QP %#x", typ, e.QP, q.Num())
	}
	return e
}

// qpExpectNoAsyncEvent checks that no asynchronous event arrives for a
// short while.
func qpExpectNoAsyncEvent(t *T, d Device, what string) {
	t.Helper()
	e, err := d.GetAsyncEvent(Ctx(t, 30*time.Millisecond))
	if err == nil {
		d.AckAsyncEvent(e)
		t.Fatalf("%s: got async event %q, want none", what, e.Type)
	}
}
