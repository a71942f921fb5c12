package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/verbs"
)

// Completion channel cases: ibv_req_notify_cq, ibv_get_cq_event,
// ibv_ack_cq_events, the channel's file descriptor and
// ibv_destroy_comp_channel.

func init() {
	Register(
		Case{
			Name:  "req_notify_cq/one-shot",
			Cite:  `ibv_req_notify_cq(3): "The request for notification is "one shot." Only one completion event will be generated for each call to ibv_req_notify_cq()."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
				g.Complete(2)
				nqExpectEvent(t, ch, c)
				c.AckEvents(1)
				nqNoEvent(t, ch, "second completion after one arm")
				g.Complete(1)
				nqNoEvent(t, ch, "third completion after one arm")
			},
		},
		Case{
			Name:  "req_notify_cq/arm-twice-one-event",
			Cite:  `ibv_req_notify_cq(3): the request arms the CQ for the next new CQE; rxe keeps one arm ("cq->notify = flags"), so arming twice before a completion still yields one event`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq again")
				g.Complete(1)
				nqExpectEvent(t, ch, c)
				c.AckEvents(1)
				g.Complete(1)
				nqNoEvent(t, ch, "second completion after two arms")
			},
		},
		Case{
			Name:  "req_notify_cq/queued-completions-do-not-fire",
			Cite:  `ibv_req_notify_cq(3): "Upon the addition of a new CQ entry (CQE) to cq, a completion event will be added to the completion channel" — entries already in the CQ are not new`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				g.Complete(2)
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq with 2 completions queued")
				nqNoEvent(t, ch, "arming a CQ that already holds completions")
				g.Complete(1)
				nqExpectEvent(t, ch, c)
				c.AckEvents(1)
				Expect(t, len(PollN(t, c, 3)), 3, "completions polled")
			},
		},
		Case{
			Name:  "req_notify_cq/solicited-only-fires-on-error-completion",
			Cite:  `ibv_req_notify_cq(3): "If solicited_only is non-zero, an event is only generated for a new CQE with that is considered "solicited." A CQE is solicited if it is a receive completion for a message with the Solicited Event header bit set, or if the status is not successful."`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeSolicitedErr,
				Note: "an error completion of a send WR does not trigger a solicited-only notification",
			}},
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				ExpectOK(t, c.ReqNotify(true), "req_notify_cq solicited_only")
				g.Complete(1) // IBV_WC_WR_FLUSH_ERR: not successful
				nqExpectEvent(t, ch, c)
				c.AckEvents(1)
				wcs := PollN(t, c, 1)
				Expect(t, len(wcs), 1, "completions")
				Expect(t, wcs[0].Status, verbs.WCWRFlushErr, "status")
			},
		},
		Case{
			Name:  "req_notify_cq/rearm-fires-again",
			Cite:  `ibv_get_cq_event(3) EXAMPLES: "3. Wait for the completion event and ack it 4. Request for notification upon the next completion event 5. Empty the CQ"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				for round := range 3 {
					ExpectOK(t, c.ReqNotify(false), "req_notify_cq round "+strconv.Itoa(round))
					g.Complete(1)
					nqExpectEvent(t, ch, c)
					c.AckEvents(1)
					Expect(t, len(PollN(t, c, 1)), 1, "completions polled in round "+strconv.Itoa(round))
				}
			},
		},
		Case{
			Name:  "req_notify_cq/only-the-armed-cq-fires",
			Cite:  `ibv_req_notify_cq(3): "requests a completion notification on the completion queue (CQ) cq" — a CQ sharing the channel but not armed adds no event`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, a := nqChannelCQ(t, d, "a")
				b, err := d.CreateCQ(16, ch, "b", 0)
				ExpectOK(t, err, "create_cq b")
				ga, gb := nqNewGen(t, f, a), nqNewGen(t, f, b)
				ExpectOK(t, a.ReqNotify(false), "req_notify_cq a")
				gb.Complete(1)
				nqNoEvent(t, ch, "completion on the unarmed CQ b")
				ga.Complete(1)
				nqExpectEvent(t, ch, a)
				a.AckEvents(1)
			},
		},
		Case{
			Name:  "get_cq_event/returns-cq-and-context",
			Cite:  `ibv_get_cq_event(3): "Fills the arguments cq with the CQ that got the event and cq_context with the CQ's context."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				ctx := &struct{ name string }{"mine"}
				f, ch, c := nqChannelCQ(t, d, ctx)
				g := nqNewGen(t, f, c)
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
				g.Complete(1)
				got := nqExpectEvent(t, ch, c)
				if got.Context() != any(ctx) {
					t.Fatalf("cq_context %v, want the pointer given to create_cq", got.Context())
				}
				got.AckEvents(1)
			},
		},
		Case{
			Name:  "get_cq_event/nonblocking-eagain",
			Cite:  `ibv_get_cq_event(3) (seed 002, ERRORS): "EAGAIN (when channel->fd is set to non-blocking mode) there is no event to take"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				ch.SetNonBlocking(true)
				_, err := ch.GetEvent(nqNB(t))
				ExpectErrno(t, err, syscall.EAGAIN, "get_cq_event on an empty non-blocking channel")
				// Armed but no completion yet: still nothing.
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
				_, err = ch.GetEvent(nqNB(t))
				ExpectErrno(t, err, syscall.EAGAIN, "get_cq_event with the CQ armed and empty")
				g := nqNewGen(t, f, c)
				g.Complete(1)
				nqWaitReadable(t, ch)
				got, err := ch.GetEvent(nqNB(t))
				ExpectOK(t, err, "non-blocking get_cq_event with an event pending")
				if got != c {
					t.Fatalf("event for %v, want the armed CQ", got)
				}
				c.AckEvents(1)
			},
		},
		Case{
			Name:  "get_cq_event/interrupted-wait-keeps-channel-usable",
			Cite:  `ibv_get_cq_event(3) (seed 002): "EINTR interrupted by a signal"; on failure it returns "without taking a completion event". Here a done context plays the signal`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				_, err := ch.GetEvent(Ctx(t, 10*time.Millisecond))
				if err == nil || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("get_cq_event with an expiring context: %v, want an error matching context.DeadlineExceeded", err)
				}
				cctx, cancel := context.WithCancel(context.Background())
				cancel()
				_, err = ch.GetEvent(cctx)
				if err == nil || !errors.Is(err, context.Canceled) {
					t.Fatalf("get_cq_event with a cancelled context: %v, want an error matching context.Canceled", err)
				}
				g := nqNewGen(t, f, c)
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
				g.Complete(1)
				nqExpectEvent(t, ch, c)
				c.AckEvents(1)
			},
		},
		Case{
			Name:  "get_cq_event/blocks-until-an-event",
			Cite:  `ibv_get_cq_event(3): "waits for the next completion event in the completion event channel channel"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
				type res struct {
					cq  CQ
					err error
				}
				done := make(chan res, 1)
				ctx := Ctx(t, 2*time.Second)
				go func() {
					q, err := ch.GetEvent(ctx)
					done <- res{q, err}
				}()
				select {
				case r := <-done:
					t.Fatalf("get_cq_event returned before any completion: %v, %v", r.cq, r.err)
				case <-time.After(20 * time.Millisecond):
				}
				g.Complete(1)
				r := <-done
				ExpectOK(t, r.err, "blocked get_cq_event")
				if r.cq != c {
					t.Fatalf("event for %v, want the armed CQ", r.cq)
				}
				c.AckEvents(1)
			},
		},
		Case{
			Name:  "comp_channel/fd-readable-iff-event-pending",
			Cite:  `ibv_get_cq_event(3) (seed 002): the arrival of a completion event can be awaited with select() or epoll() on channel->fd; once it is ready, ibv_get_cq_event() takes at least one event`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				if nqReadable(t, ch.FD(), 0) {
					t.Fatalf("fd readable on a new channel")
				}
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
				if nqReadable(t, ch.FD(), 0) {
					t.Fatalf("fd readable after arming, before any completion")
				}
				g.Complete(1)
				nqWaitReadable(t, ch)
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq again")
				g.Complete(1)
				// Both completions polled means both events were queued.
				Expect(t, len(PollN(t, c, 2)), 2, "completions polled")
				// Two events pending: taking one leaves the fd readable.
				nqTakeTwoEvents(t, ch, c, "with a second event pending")
			},
		},
		Case{
			Name:  "comp_channel/fd-counts-events-queued-before-it-was-first-polled",
			Cite:  `ibv_get_cq_event(3) (seed 002): the arrival of a completion event can be awaited with select() or epoll() on channel->fd; once it is ready, ibv_get_cq_event() takes at least one event (whenever the program starts looking at the fd)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				for i := range 2 {
					ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
					g.Complete(1)
					// The completion polled means its event was queued.
					Expect(t, len(PollN(t, c, 1)), 1, fmt.Sprintf("completion %d polled", i+1))
				}
				// Take one event before the fd is ever looked at.
				nqTakeTwoEvents(t, ch, c, "with an event pending that was queued before the fd was first polled")
			},
		},
		Case{
			Name:  "ack_cq_events/batched-ack-lets-destroy",
			Cite:  `ibv_get_cq_event(3): "it may be better to amortize this cost by keeping a count of the number of events needing acknowledgement and acking several completion events in one call to ibv_ack_cq_events()"; "destroying a CQ will wait for all completion events to be acknowledged"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				for range 2 {
					ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
					g.Complete(1)
					nqExpectEvent(t, ch, c)
				}
				c.AckEvents(2)
				g.Destroy()
				ExpectOK(t, c.Destroy(Ctx(t, time.Second)), "destroy_cq after acking both events in one call")
				ExpectOK(t, ch.Close(), "destroy_comp_channel")
			},
		},
		Case{
			Name:  "destroy_cq/waits-for-event-ack",
			Cite:  `ibv_get_cq_event(3): "All completion events that ibv_get_cq_event() returns must be acknowledged using ibv_ack_cq_events(). To avoid races, destroying a CQ will wait for all completion events to be acknowledged"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
				ids := g.Complete(1)
				nqExpectEvent(t, ch, c)
				g.Destroy()
				err := c.Destroy(Ctx(t, 30*time.Millisecond))
				if err == nil {
					t.Fatalf("destroy_cq with an unacknowledged event did not wait")
				}
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("destroy_cq gave up with %v, want an error matching context.DeadlineExceeded", err)
				}
				// The CQ survived the interrupted destroy.
				SkipIfDestroysFirst(t, d, "CQ")
				nqExpectIDs(t, PollN(t, c, 1), ids, "poll after the interrupted destroy")
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq after the interrupted destroy")
				c.AckEvents(1)
				ExpectOK(t, c.Destroy(Ctx(t, time.Second)), "destroy_cq after the ack")
			},
		},
		Case{
			Name:  "destroy_cq/ack-releases-a-waiting-destroy",
			Cite:  `ibv_get_cq_event(3): "destroying a CQ will wait for all completion events to be acknowledged; this guarantees a one-to-one correspondence between acks and successful gets"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
				g.Complete(1)
				nqExpectEvent(t, ch, c)
				g.Destroy()
				done := make(chan error, 1)
				ctx := Ctx(t, 2*time.Second)
				go func() { done <- c.Destroy(ctx) }()
				select {
				case err := <-done:
					t.Fatalf("destroy_cq returned before the ack: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
				c.AckEvents(1)
				ExpectOK(t, <-done, "destroy_cq released by ibv_ack_cq_events")
			},
		},
		Case{
			Name:  "destroy_comp_channel/busy-while-a-cq-uses-it",
			Cite:  `ibv_create_comp_channel(3): "ibv_destroy_comp_channel() fails if any CQs are still associated with the completion event channel being destroyed."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, ch, c := nqChannelCQ(t, d, nil)
				ExpectErrno(t, ch.Close(), syscall.EBUSY, "destroy_comp_channel with a CQ on it")
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq after the failed channel destroy")
				ExpectOK(t, c.Destroy(Ctx(t, time.Second)), "destroy_cq")
				ExpectOK(t, ch.Close(), "destroy_comp_channel once its CQ is gone")
			},
		},
		Case{
			Name:  "comp_channel/events-in-order-across-cqs",
			Cite:  `ibv_create_comp_channel(3): "When a completion event is generated for a completion queue (CQ), the event is delivered via the completion channel attached to that CQ"; the kernel queues a channel's events in one list, oldest first`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f, ch, a := nqChannelCQ(t, d, "a")
				b, err := d.CreateCQ(16, ch, "b", 0)
				ExpectOK(t, err, "create_cq b")
				ga, gb := nqNewGen(t, f, a), nqNewGen(t, f, b)
				ExpectOK(t, a.ReqNotify(false), "req_notify_cq a")
				ExpectOK(t, b.ReqNotify(false), "req_notify_cq b")
				gb.Complete(1)
				nqWaitReadable(t, ch)
				ga.Complete(1)
				Expect(t, len(PollN(t, a, 1)), 1, "completions polled from a")
				nqExpectEvent(t, ch, b)
				nqExpectEvent(t, ch, a)
				a.AckEvents(1)
				b.AckEvents(1)
			},
		},
		Case{
			Name:  "destroy_cq/drops-its-pending-events",
			Cite:  `ibv_get_async_event(3) NOTES: destroying waits so that the application never retrieves an event "after the corresponding object has already been destroyed"; the kernel drops a destroyed CQ's queued completion events (ib_uverbs_release_ucq)`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f, ch, c := nqChannelCQ(t, d, nil)
				g := nqNewGen(t, f, c)
				ExpectOK(t, c.ReqNotify(false), "req_notify_cq")
				g.Complete(1)
				nqWaitReadable(t, ch)
				g.Destroy()
				ExpectOK(t, c.Destroy(Ctx(t, time.Second)), "destroy_cq with an event not yet taken")
				nqNoEvent(t, ch, "after the CQ was destroyed")
				if nqReadable(t, ch.FD(), 0) {
					t.Fatalf("fd still readable after the CQ and its event are gone")
				}
				ExpectOK(t, ch.Close(), "destroy_comp_channel")
			},
		},
	)
}

// nqChannelCQ returns a fixture, a completion channel and a 16-entry CQ on
// it with the given cq_context.
func nqChannelCQ(t *T, d Device, ctx any) (*Fixture, CompChannel, CQ) {
	t.Helper()
	f := NewFixture(t, d)
	ch, err := d.CreateCompChannel()
	ExpectOK(t, err, "create_comp_channel")
	c, err := d.CreateCQ(16, ch, ctx, 0)
	ExpectOK(t, err, "create_cq on the channel")
	return f, ch, c
}

// nqExpectEvent waits up to two seconds for a completion event and fails
// unless it is for want. It does not acknowledge it.
func nqExpectEvent(t *T, ch CompChannel, want CQ) CQ {
	t.Helper()
	got, err := ch.GetEvent(Ctx(t, 2*time.Second))
	ExpectOK(t, err, "get_cq_event")
	if got != want {
		t.Fatalf("get_cq_event returned CQ %v (context %v), want %v (context %v)", got, nqCtxOf(got), want, nqCtxOf(want))
	}
	return got
}

func nqCtxOf(c CQ) any {
	if c == nil {
		return nil
	}
	return c.Context()
}

// nqNoEvent fails if the channel yields an event: it gives an asynchronous
// target 20 ms to make the fd readable, then asks without blocking.
func nqNoEvent(t *T, ch CompChannel, what string) {
	t.Helper()
	_ = nqReadable(t, ch.FD(), 20)
	ch.SetNonBlocking(true)
	defer ch.SetNonBlocking(false)
	c, err := ch.GetEvent(nqNB(t))
	if err == nil {
		t.Fatalf("%s: got a completion event for CQ %v", what, nqCtxOf(c))
	}
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("%s: non-blocking get_cq_event: %v, want EAGAIN", what, err)
	}
}

// nqWaitReadable waits up to two seconds for the channel's fd to become
// readable.
func nqWaitReadable(t *T, ch CompChannel) {
	t.Helper()
	if !nqReadable(t, ch.FD(), 2000) {
		t.Fatalf("channel fd not readable: no completion event arrived")
	}
}

// nqTakeTwoEvents takes the two events pending on ch for c: the fd must
// stay readable after the first (pending says why) and not after the
// second. It acknowledges both.
func nqTakeTwoEvents(t *T, ch CompChannel, c CQ, pending string) {
	t.Helper()
	nqExpectEvent(t, ch, c)
	if !nqReadable(t, ch.FD(), 0) {
		t.Fatalf("fd not readable %s", pending)
	}
	nqExpectEvent(t, ch, c)
	if nqReadable(t, ch.FD(), 0) {
		t.Fatalf("fd still readable after get_cq_event took the last event")
	}
	c.AckEvents(2)
}

// nqReadable polls fd for input for up to timeoutMs milliseconds.
func nqReadable(t *T, fd int, timeoutMs int) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, timeoutMs)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			t.Fatalf("poll(channel fd %d): %v", fd, err)
		}
		return n > 0 && fds[0].Revents&unix.POLLIN != 0
	}
}

// nqNB is the context for a call in non-blocking mode: it must return at
// once, and the deadline keeps a target that blocks anyway from hanging
// the suite (the call then fails with a context error instead of EAGAIN).
func nqNB(t *T) context.Context { return Ctx(t, time.Second) }
