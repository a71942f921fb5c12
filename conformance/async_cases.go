package conformance

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/softhca/softhca/verbs"
)

// Asynchronous event cases: ibv_get_async_event, ibv_ack_async_event and
// the wait of ibv_destroy_* for acknowledgements. The events a device
// raises without traffic are IBV_EVENT_QP_LAST_WQE_REACHED (a QP on an SRQ
// entering ERR; rxe never raises it) and IBV_EVENT_CQ_ERR (a CQ overrun
// by flushes). The cases about ibv_get_async_event itself (blocking,
// non-blocking, interrupted, several waiters) wait for a CQ_ERR from an
// overrun by one completion, which every implementation raises once
// (nqCQErr); the cases about LAST_WQE_REACHED use that event.

func init() {
	Register(
		Case{
			Name:  "get_async_event/nonblocking-eagain",
			Cite:  `ibv_get_async_event(3) EXAMPLES: with O_NONBLOCK set on ctx->async_fd the queue is polled "until it has an async event"; a non-blocking read of an empty queue fails with EAGAIN`,
			Label: Spec,
			Run: func(t *T, d Device) {
				d.SetAsyncNonBlocking(true)
				_, err := d.GetAsyncEvent(nqNB(t))
				ExpectErrno(t, err, syscall.EAGAIN, "non-blocking get_async_event with nothing queued")
				f := NewFixture(t, d)
				c := nqCQErr(t, f)
				// softhca raises the event within modify_qp; poll briefly for
				// a target that raises it later.
				deadline := time.Now().Add(2 * time.Second)
				for {
					e, err := d.GetAsyncEvent(nqNB(t))
					if err == nil {
						nqExpectCQErr(t, e, c)
						d.AckAsyncEvent(e)
						break
					}
					ExpectErrno(t, err, syscall.EAGAIN, "non-blocking get_async_event")
					if time.Now().After(deadline) {
						t.Fatalf("no event arrived in non-blocking mode")
					}
					time.Sleep(time.Millisecond)
				}
				_, err = d.GetAsyncEvent(nqNB(t))
				ExpectErrno(t, err, syscall.EAGAIN, "non-blocking get_async_event after taking the only event")
			},
		},
		Case{
			Name:  "get_async_event/interrupted-wait-consumes-nothing",
			Cite:  `ibv_get_async_event(3): "waits for the next async event" and returns -1 on error; an interrupted wait takes no event (here a done context plays the signal)`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				_, err := d.GetAsyncEvent(Ctx(t, 10*time.Millisecond))
				if err == nil || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("get_async_event with an expiring context: %v, want an error matching context.DeadlineExceeded", err)
				}
				cctx, cancel := context.WithCancel(context.Background())
				cancel()
				_, err = d.GetAsyncEvent(cctx)
				if err == nil || !errors.Is(err, context.Canceled) {
					t.Fatalf("get_async_event with a cancelled context: %v, want an error matching context.Canceled", err)
				}
				f := NewFixture(t, d)
				c := nqCQErr(t, f)
				e := nqGetAsync(t, d)
				nqExpectCQErr(t, e, c)
				d.AckAsyncEvent(e)
			},
		},
		Case{
			Name:  "async_event/last-wqe-reached-delivered-once",
			Cite:  `ibv_get_async_event(3): "IBV_EVENT_QP_LAST_WQE_REACHED Last WQE Reached on a QP associated with an SRQ"; "One member of the element union will be valid, depending on the event_type"; IBTA 11.6.3.3: raised when a QP on an SRQ enters the error state`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeNoLastWQE,
				Note: "rxe never raises IBV_EVENT_QP_LAST_WQE_REACHED",
			}},
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				q := nqSRQQPInErr(t, f)
				e := nqGetAsync(t, d)
				Expect(t, e.Type, verbs.EventQPLastWQEReached, "event type")
				if e.QP != q {
					t.Fatalf("event names QP %v, want the QP moved to ERR", e.QP)
				}
				if e.CQ != nil || e.SRQ != nil {
					t.Fatalf("a QP event also names CQ %v / SRQ %v", e.CQ, e.SRQ)
				}
				nqNoAsync(t, d, "a second event for one transition to ERR")
				d.AckAsyncEvent(e)
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp after the ack")
			},
		},
		Case{
			Name:  "async_event/destroy-qp-drops-untaken-event",
			Cite:  `ibv_get_async_event(3) NOTES: destroying an object waits for its acknowledged events, which "avoids an application retrieving an affiliated event after the corresponding object has already been destroyed"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				q := nqSRQQPInErr(t, f)
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp with its event never taken")
				nqNoAsync(t, d, "event of a destroyed QP")
			},
		},
		Case{
			Name:  "async_event/destroy-cq-waits-for-cq-err-ack",
			Cite:  `ibv_get_async_event(3): "To avoid races, destroying an object (CQ, SRQ or QP) will wait for all affiliated events for the object to be acknowledged"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				c, q := nqOverrun(t, f)
				e := nqGetAsync(t, d)
				Expect(t, e.Type, verbs.EventCQErr, "event type")
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp")
				err := c.Destroy(Ctx(t, 30*time.Millisecond))
				if err == nil {
					t.Fatalf("destroy_cq with an unacknowledged IBV_EVENT_CQ_ERR did not wait")
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("destroy_cq gave up with %v, want an error matching context.DeadlineExceeded", err)
				}
				d.AckAsyncEvent(e)
				ExpectOK(t, c.Destroy(Ctx(t, time.Second)), "destroy_cq after ibv_ack_async_event")
			},
		},
		Case{
			Name:  "async_event/one-waiter-gets-each-event",
			Cite:  `ibv_get_async_event(3): "If multiple threads call this function simultaneously, then when an async event occurs, only one thread will receive it"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				type res struct {
					e   AsyncEvent
					err error
				}
				// The fixture first, so that the waiters' time is the
				// event's alone: on a device in a slow emulated guest,
				// making the objects and overrunning the CQ took more than
				// the 300 ms the waiters once had for all of it.
				f := NewFixture(t, d)
				ctx, cancel := context.WithCancel(Ctx(t, 10*time.Second))
				defer cancel()
				out := make(chan res, 2)
				for range 2 {
					go func() {
						e, err := d.GetAsyncEvent(ctx)
						out <- res{e, err}
					}()
				}
				time.Sleep(10 * time.Millisecond)
				c := nqCQErr(t, f)
				got := 0
				check := func(r res) {
					if r.err != nil {
						return
					}
					got++
					if r.e.Type != verbs.EventCQErr || r.e.CQ != c {
						t.Errorf("event %v names CQ %v, want IBV_EVENT_CQ_ERR of the overrun CQ", r.e.Type, r.e.CQ)
					}
					d.AckAsyncEvent(r.e)
				}
				check(<-out) // the one that gets the event (or the deadline)
				// The other must not get it too: give it time to, then
				// end its wait.
				select {
				case r := <-out:
					check(r)
				case <-time.After(200 * time.Millisecond):
					cancel()
					check(<-out)
				}
				Expect(t, got, 1, "waiters that received the single event")
			},
		},
		Case{
			Name:  "async_event/blocked-get-wakes-on-event",
			Cite:  `ibv_get_async_event(3): "waits for the next async event of the RDMA device context context and returns it"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				type res struct {
					e   AsyncEvent
					err error
				}
				out := make(chan res, 1)
				ctx := Ctx(t, 2*time.Second)
				go func() {
					e, err := d.GetAsyncEvent(ctx)
					out <- res{e, err}
				}()
				select {
				case r := <-out:
					t.Fatalf("get_async_event returned with no event: %v, %v", r.e.Type, r.err)
				case <-time.After(20 * time.Millisecond):
				}
				f := NewFixture(t, d)
				c := nqCQErr(t, f)
				r := <-out
				ExpectOK(t, r.err, "blocked get_async_event")
				nqExpectCQErr(t, r.e, c)
				d.AckAsyncEvent(r.e)
			},
		},
	)
}

// nqSRQQPInErr creates an SRQ and an RC QP on it, and moves the QP through
// INIT to ERR, which raises IBV_EVENT_QP_LAST_WQE_REACHED.
func nqSRQQPInErr(t *T, f *Fixture) QP {
	t.Helper()
	s := nqSRQ(t, f, 4, 1)
	q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: verbs.QPTypeRC})
	ExpectOK(t, err, "create_qp with an SRQ")
	f.Walk(t, q, verbs.QPTypeRC, verbs.QPStateInit, 0)
	f.Walk(t, q, verbs.QPTypeRC, verbs.QPStateErr, 0)
	return q
}

// nqCQErr overruns a fresh CQ by one flushed completion, which raises
// IBV_EVENT_CQ_ERR for it (once, on every implementation), and returns
// the CQ. Its QP is in ERR and destroyed when the case ends, before the
// CQ, which the case's acknowledgement of the event lets go.
func nqCQErr(t *T, f *Fixture) CQ {
	t.Helper()
	c, q := nqOverrunBy(t, f, 1)
	t.Cleanup(func() {
		_ = q.Destroy(Ctx(t, time.Second))
		_ = c.Destroy(Ctx(t, time.Second))
	})
	return c
}

// nqExpectCQErr checks that e is IBV_EVENT_CQ_ERR of c, naming only c.
func nqExpectCQErr(t *T, e AsyncEvent, c CQ) {
	t.Helper()
	Expect(t, e.Type, verbs.EventCQErr, "event type")
	if e.CQ != c {
		t.Fatalf("event names CQ %v, want the overrun CQ", e.CQ)
	}
	if e.QP != nil || e.SRQ != nil {
		t.Fatalf("a CQ event also names QP %v / SRQ %v", e.QP, e.SRQ)
	}
}
