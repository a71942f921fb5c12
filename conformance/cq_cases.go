package conformance

import (
	"strconv"
	"syscall"
	"time"

	"github.com/softhca/softhca/verbs"
)

// Completion queue cases: creation limits, polling, resizing, overrun and
// destruction. Completions come from flushes (see nqGen) until there is a
// transport engine.

func init() {
	Register(
		Case{
			Name:  "create_cq/cqe-below-one-einval",
			Cite:  `ibv_create_cq(3): creates a CQ "with at least cqe entries"; rxe_cq_chk_attr rejects cqe <= 0 with EINVAL (a CQ must hold at least one completion)`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				for _, n := range []int{0, -1, -1 << 20} {
					_, err := d.CreateCQ(n, nil, nil, 0)
					ExpectErrno(t, err, syscall.EINVAL, "create_cq cqe "+strconv.Itoa(n))
				}
			},
		},
		Case{
			Name:  "create_cq/cqe-above-max_cqe-einval",
			Cite:  `ibv_query_device(3): max_cqe is the "maximum number of entries in each CQ supported by this device"; rxe_cq_chk_attr: cqe > max_cqe is EINVAL`,
			Label: Spec,
			Run: func(t *T, d Device) {
				max := int(d.QueryDevice().MaxCQE)
				_, err := d.CreateCQ(max+1, nil, nil, 0)
				ExpectErrno(t, err, syscall.EINVAL, "create_cq cqe max_cqe+1")
				c, err := d.CreateCQ(max, nil, nil, 0)
				ExpectOK(t, err, "create_cq cqe max_cqe")
				if c.CQE() < max {
					t.Fatalf("cqe %d below the %d requested", c.CQE(), max)
				}
			},
		},
		Case{
			Name:  "create_cq/cqe-at-least-requested",
			Cite:  `ibv_create_cq(3): "ibv_create_cq() may create a CQ with size greater than or equal to the requested size. Check the cqe attribute in the returned CQ for the actual size."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				for _, n := range []int{1, 2, 7, 100, 1000} {
					c, err := d.CreateCQ(n, nil, nil, 0)
					ExpectOK(t, err, "create_cq cqe "+strconv.Itoa(n))
					if c.CQE() < n {
						t.Errorf("create_cq cqe %d: cq->cqe is %d", n, c.CQE())
					}
				}
			},
		},
		Case{
			Name:  "create_cq/comp_vector-out-of-range-einval",
			Cite:  `ibv_create_cq(3): comp_vector "must be at least zero and less than context->num_comp_vectors" (rxe has one vector)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, err := d.CreateCQ(4, nil, nil, 0)
				ExpectOK(t, err, "create_cq comp_vector 0")
				_, err = d.CreateCQ(4, nil, nil, -1)
				ExpectErrno(t, err, syscall.EINVAL, "create_cq comp_vector -1")
				_, err = d.CreateCQ(4, nil, nil, 1<<20)
				ExpectErrno(t, err, syscall.EINVAL, "create_cq comp_vector 2^20")
			},
		},
		Case{
			Name:  "create_cq/context-is-kept",
			Cite:  `ibv_create_cq(3): "The pointer cq_context will be used to set user context pointer of the CQ structure."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				ctx := &struct{ tag int }{42}
				c, err := d.CreateCQ(4, nil, ctx, 0)
				ExpectOK(t, err, "create_cq")
				if got, ok := c.Context().(*struct{ tag int }); !ok || got != ctx {
					t.Fatalf("cq_context is %v, want the pointer given (%p)", c.Context(), ctx)
				}
			},
		},
		Case{
			Name:  "poll_cq/empty-returns-zero",
			Cite:  `ibv_poll_cq(3): returns "a non-negative value equal to the number of completions found" — 0 on an empty CQ`,
			Label: Spec,
			Run: func(t *T, d Device) {
				c, err := d.CreateCQ(8, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				wcs := make([]verbs.WC, 8)
				Expect(t, c.Poll(wcs), 0, "poll on a new CQ")
				Expect(t, c.Poll(wcs[:0]), 0, "poll with num_entries 0")
			},
		},
		Case{
			Name:  "poll_cq/oldest-first-at-most-num_entries",
			Cite:  `ibv_poll_cq(3): "returns the first num_entries (or all available completions if the CQ contains fewer than this number)"; "Each polled completion is removed from the CQ and cannot be returned to it."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				g := nqNewGen(t, f, f.CQ)
				ids := g.Complete(5)
				wcs := make([]verbs.WC, 8)
				Expect(t, f.CQ.Poll(wcs[:0]), 0, "poll with num_entries 0")
				got := nqPollExactly(t, f.CQ, 2)
				got = append(got, nqPollExactly(t, f.CQ, 2)...)
				// Ask for more than remain: only the one left comes back.
				rest := PollN(t, f.CQ, 1)
				got = append(got, rest...)
				if len(got) != 5 {
					t.Fatalf("polled %d completions in all, want 5", len(got))
				}
				for i, wc := range got {
					if wc.WRID != ids[i] {
						t.Fatalf("completion %d has wr_id %d, want %d (oldest first)", i, wc.WRID, ids[i])
					}
					nqExpectFlush(t, wc, g.QP.Num())
				}
				Expect(t, f.CQ.Poll(wcs), 0, "poll after draining")
			},
		},
		Case{
			Name:  "resize_cq/below-queued-einval-nothing-lost",
			Cite:  `ibv_resize_cq(3): "cqe must be at least the number of unpolled entries in the CQ cq."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				c, err := d.CreateCQ(8, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				g := nqNewGen(t, f, c)
				ids := g.Complete(4)
				before := c.CQE()
				ExpectErrno(t, c.Resize(3), syscall.EINVAL, "resize_cq to 3 with 4 queued")
				Expect(t, c.CQE(), before, "cq->cqe after a failed resize")
				nqExpectIDs(t, PollN(t, c, 4), ids, "after the failed resize")
			},
		},
		Case{
			Name:  "resize_cq/grow-keeps-completions-in-order",
			Cite:  `ibv_resize_cq(3): resizes the CQ "to have at least cqe entries"; "The cqe member of cq will be updated to the actual size."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				c, err := d.CreateCQ(4, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				g := nqNewGen(t, f, c)
				ids := g.Complete(3)
				ExpectOK(t, c.Resize(40), "resize_cq to 40")
				if c.CQE() < 40 {
					t.Fatalf("cq->cqe %d after resizing to 40", c.CQE())
				}
				// The grown CQ holds more than the old size.
				ids = append(ids, g.Complete(20)...)
				nqExpectIDs(t, PollN(t, c, 23), ids, "after growing")
			},
		},
		Case{
			Name:  "resize_cq/shrink-to-queued-ok",
			Cite:  `ibv_resize_cq(3): "cqe must be at least the number of unpolled entries"; a smaller valid cqe "may not do anything", but must not lose the queued completions`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				c, err := d.CreateCQ(32, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				g := nqNewGen(t, f, c)
				ids := g.Complete(3)
				ExpectOK(t, c.Resize(3), "resize_cq to exactly the 3 queued")
				if c.CQE() < 3 {
					t.Fatalf("cq->cqe %d after resizing to 3", c.CQE())
				}
				nqExpectIDs(t, PollN(t, c, 3), ids, "after shrinking")
			},
		},
		Case{
			Name:  "resize_cq/out-of-range-einval",
			Cite:  `ibv_resize_cq(3) takes the same cqe as ibv_create_cq(3); rxe_cq_chk_attr rejects cqe <= 0 and cqe > max_cqe with EINVAL`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				c, err := d.CreateCQ(8, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				before := c.CQE()
				ExpectErrno(t, c.Resize(0), syscall.EINVAL, "resize_cq to 0")
				ExpectErrno(t, c.Resize(int(d.QueryDevice().MaxCQE)+1), syscall.EINVAL, "resize_cq to max_cqe+1")
				Expect(t, c.CQE(), before, "cq->cqe after failed resizes")
			},
		},
		Case{
			Name:  "destroy_cq/busy-keeps-pending-async-events",
			Cite:  `ibv_create_cq(3): "ibv_destroy_cq() fails if any queue pair is still associated with this CQ"; ibv_poll_cq(3): "In case of a CQ overrun, the async event IBV_EVENT_CQ_ERR will be triggered" — a destroy that failed leaves the CQ, and its triggered event, in place`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				c, q := nqOverrun(t, f)
				ExpectErrno(t, c.Destroy(Ctx(t, time.Second)), syscall.EBUSY, "destroy_cq while the QP uses it")
				e, err := d.GetAsyncEvent(Ctx(t, 500*time.Millisecond))
				ExpectOK(t, err, "get_async_event after the failed destroy_cq (the CQ_ERR event was lost)")
				Expect(t, e.Type, verbs.EventCQErr, "event type")
				if e.CQ != c {
					t.Fatalf("event names CQ %v, want the overrun CQ", e.CQ)
				}
				d.AckAsyncEvent(e)
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp")
				ExpectOK(t, c.Destroy(Ctx(t, time.Second)), "destroy_cq once the QP is gone")
			},
		},
		Case{
			Name:  "destroy_cq/busy-reported-before-waiting-for-acks",
			Cite:  `ibv_create_cq(3): "ibv_destroy_cq() fails if any queue pair is still associated with this CQ"; libibverbs' ibv_cmd_destroy_cq waits for the event acknowledgements only after the kernel destroyed the CQ, so a busy CQ fails at once even with an event unacknowledged`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				c, q := nqOverrun(t, f)
				e := nqGetAsync(t, d)
				Expect(t, e.Type, verbs.EventCQErr, "event type")
				ExpectErrno(t, c.Destroy(Ctx(t, 200*time.Millisecond)), syscall.EBUSY, "destroy_cq used by a QP, with IBV_EVENT_CQ_ERR unacknowledged")
				d.AckAsyncEvent(e)
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp")
				ExpectOK(t, c.Destroy(Ctx(t, time.Second)), "destroy_cq")
			},
		},
		Case{
			Name:  "cq/overrun-raises-cq-err",
			Cite:  `ibv_poll_cq(3): "In case of a CQ overrun, the async event IBV_EVENT_CQ_ERR will be triggered, and the CQ cannot be used."; ibv_get_async_event(3): "IBV_EVENT_CQ_ERR CQ is in error (CQ overrun)"`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: `Linux 6.1.192 drivers/infiniband/sw/rxe/rxe_cq.c rxe_cq_post(): when "queue_full(cq->queue, QUEUE_TYPE_TO_CLIENT)" it raises IB_EVENT_CQ_ERR through cq->ibcq.event_handler and returns -EBUSY, dropping that completion without putting the CQ in an error state; rxe_resp.c check_resource() goes on flushing the next receive WR of a QP in ERR, each one posted again`,
				Note: "raises IBV_EVENT_CQ_ERR once per completion that finds the CQ full (here two), not once per overrun",
			}},
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				c, _ := nqOverrun(t, f)
				e := nqGetAsync(t, d)
				Expect(t, e.Type, verbs.EventCQErr, "event type")
				if e.CQ != c {
					t.Fatalf("IBV_EVENT_CQ_ERR names CQ %v, want the overrun CQ", e.CQ)
				}
				if e.QP != nil || e.SRQ != nil {
					t.Fatalf("IBV_EVENT_CQ_ERR also names QP %v / SRQ %v", e.QP, e.SRQ)
				}
				d.AckAsyncEvent(e)
				// What the CQ holds after an overrun is undefined beyond
				// the event; it cannot hold more than its size.
				wcs := make([]verbs.WC, 64)
				if n := c.Poll(wcs); n > c.CQE() {
					t.Fatalf("polled %d completions from a CQ of %d entries", n, c.CQE())
				}
				nqNoAsync(t, d, "a second event for one overrun")
			},
		},
		Case{
			Name:  "destroy_cq/twice-fails",
			Cite:  `ibv_create_cq(3): ibv_destroy_cq "returns 0 on success, or the value of errno on failure"; the CQ no longer exists after the first call`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				c, err := d.CreateCQ(4, nil, nil, 0)
				ExpectOK(t, err, "create_cq")
				ExpectOK(t, c.Destroy(Ctx(t, time.Second)), "destroy_cq")
				if err := c.Destroy(Ctx(t, time.Second)); err == nil {
					t.Fatalf("second destroy_cq succeeded")
				}
			},
		},
	)
}

// nqGen is a source of completions on demand: an RC QP in the error state,
// whose every posted send completes with IBV_WC_WR_FLUSH_ERR
// (ibv_post_send(3)/ibv_modify_qp(3): work requests posted to a QP in
// ERR are completed with a flush error; IBTA 10.3.1).
//
// Sends, not receives: a receive posted to a QP already in ERR reaches no
// kernel code on a kernel device whose receive queue is mapped to user
// space (rdma-core's providers/rxe/rxe.c: rxe_post_recv only writes the
// WQE to the mapped queue; the rxe responder flushes receives only when
// its task runs, as on the transition to ERR), so it may never complete.
// A send is followed by a doorbell (rxe_post_send -> post_send_db) that
// runs the requester, which flushes it.
type nqGen struct {
	t    *T
	QP   QP
	next uint64
}

// nqGenSendWR bounds the sends of one Complete call.
const nqGenSendWR = 64

// nqNewGen creates the QP on PD f.PD with c as its send and receive CQ, and
// moves it through INIT to ERR.
func nqNewGen(t *T, f *Fixture, c CQ) *nqGen {
	t.Helper()
	caps := DefaultCap
	caps.MaxSendWR = nqGenSendWR
	q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: c, RecvCQ: c, Cap: caps, QPType: verbs.QPTypeRC})
	ExpectOK(t, err, "create_qp for completions")
	f.Walk(t, q, verbs.QPTypeRC, verbs.QPStateErr, 0)
	return &nqGen{t: t, QP: q, next: 0x1000}
}

// Complete posts n signaled zero-length sends and returns their wr_ids, in
// order; each completes with IBV_WC_WR_FLUSH_ERR.
func (g *nqGen) Complete(n int) []uint64 {
	g.t.Helper()
	if n > nqGenSendWR {
		g.t.Fatalf("nqGen.Complete(%d): at most %d at once", n, nqGenSendWR)
	}
	ids := make([]uint64, 0, n)
	for range n {
		id := g.next
		g.next++
		wr := &verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled}
		bad, err := g.QP.PostSend(wr)
		if err != nil || bad != nil {
			g.t.Fatalf("post_send wr_id %#x on a QP in ERR: %v", id, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// Destroy destroys the QP, so that its CQ can be destroyed.
func (g *nqGen) Destroy() {
	g.t.Helper()
	ExpectOK(g.t, g.QP.Destroy(Ctx(g.t, 2*time.Second)), "destroy_qp of the completion source")
}

// nqOverrun creates a CQ of one entry used by an RC QP and makes the QP
// flush cqe+2 receives into it. It returns the CQ and the QP (still
// attached).
func nqOverrun(t *T, f *Fixture) (CQ, QP) {
	t.Helper()
	return nqOverrunBy(t, f, 2)
}

// nqOverrunBy is nqOverrun with extra more flushed receives than the CQ
// holds: with 1, exactly one completion is lost, and an implementation
// that raises IBV_EVENT_CQ_ERR per lost completion (rxe) raises one
// event too.
func nqOverrunBy(t *T, f *Fixture, extra int) (CQ, QP) {
	t.Helper()
	c, err := f.D.CreateCQ(1, nil, nil, 0)
	ExpectOK(t, err, "create_cq 1")
	n := c.CQE() + extra
	caps := DefaultCap
	if caps.MaxRecvWR < uint32(n) {
		caps.MaxRecvWR = uint32(n)
	}
	q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: c, RecvCQ: c, Cap: caps, QPType: verbs.QPTypeRC})
	ExpectOK(t, err, "create_qp on the small CQ")
	f.Walk(t, q, verbs.QPTypeRC, verbs.QPStateInit, 0)
	for i := range n {
		bad, err := q.PostRecv(&verbs.RecvWR{WRID: uint64(i + 1)})
		if err != nil || bad != nil {
			t.Fatalf("post_recv %d in INIT: %v", i+1, err)
		}
	}
	f.Walk(t, q, verbs.QPTypeRC, verbs.QPStateErr, 0)
	return c, q
}

// nqPollExactly polls with room for exactly n completions and fails unless
// n come back (waiting up to two seconds for them to arrive).
func nqPollExactly(t *T, c CQ, n int) []verbs.WC {
	t.Helper()
	wcs := make([]verbs.WC, n)
	deadline := time.Now().Add(2 * time.Second)
	got := 0
	for {
		k := c.Poll(wcs[got:])
		if k > n-got {
			t.Fatalf("poll_cq returned %d with room for %d", k, n-got)
		}
		got += k
		if got == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if got != n {
		t.Fatalf("polled %d completions, want %d", got, n)
	}
	return wcs
}

// nqExpectIDs fails unless the completions carry exactly the wr_ids, in
// order.
func nqExpectIDs(t *T, wcs []verbs.WC, ids []uint64, what string) {
	t.Helper()
	if len(wcs) != len(ids) {
		t.Fatalf("%s: polled %d completions, want %d", what, len(wcs), len(ids))
	}
	for i := range wcs {
		if wcs[i].WRID != ids[i] {
			t.Fatalf("%s: completion %d has wr_id %#x, want %#x", what, i, wcs[i].WRID, ids[i])
		}
	}
}

// nqExpectFlush checks the fields ibv_poll_cq(3) says are valid in an
// error completion: wr_id (checked by the caller), status and qp_num.
func nqExpectFlush(t *T, wc verbs.WC, qpn uint32) {
	t.Helper()
	if wc.Status != verbs.WCWRFlushErr {
		t.Fatalf("wr_id %#x: status %q, want %q", wc.WRID, wc.Status, verbs.WCWRFlushErr)
	}
	if wc.QPNum != qpn {
		t.Fatalf("wr_id %#x: qp_num %#x, want %#x", wc.WRID, wc.QPNum, qpn)
	}
}

// nqGetAsync waits up to two seconds for an asynchronous event.
func nqGetAsync(t *T, d Device) AsyncEvent {
	t.Helper()
	e, err := d.GetAsyncEvent(Ctx(t, 2*time.Second))
	ExpectOK(t, err, "get_async_event")
	return e
}

// nqNoAsync fails if an asynchronous event arrives within 20 ms.
func nqNoAsync(t *T, d Device, what string) {
	t.Helper()
	e, err := d.GetAsyncEvent(Ctx(t, 20*time.Millisecond))
	if err == nil {
		t.Fatalf("%s: got asynchronous event %q", what, e.Type)
	}
}
