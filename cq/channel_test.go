package cq

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

func TestEventFDReadiness(t *testing.T) {
	ch := newChannel(t)
	fd := ch.FD()
	require.GreaterOrEqual(t, fd, 0)
	c := newCQ(t, Config{CQE: 8, Channel: ch})

	require.False(t, readable(t, fd), "new channel")
	require.True(t, c.Push(wc(1), false))
	require.False(t, readable(t, fd), "completion without an arm")
	require.NoError(t, c.ReqNotify(false))
	require.False(t, readable(t, fd), "arming alone")
	require.True(t, c.Push(wc(2), false))
	require.True(t, readable(t, fd), "event queued")
	require.True(t, readable(t, fd), "polling does not consume")

	// A second event: readable until both are taken.
	require.NoError(t, c.ReqNotify(false))
	require.True(t, c.Push(wc(3), false))
	require.Equal(t, 2, ch.Pending())
	for i := range 2 {
		require.True(t, readable(t, fd), "before GetEvent %d", i)
		got, err := ch.GetEvent(context.Background())
		require.NoError(t, err)
		require.Same(t, c, got)
	}
	require.False(t, readable(t, fd), "all events taken")
	c.AckEvents(2)
	require.Equal(t, 0, ch.fdErrs)
}

func TestEventsFIFOAcrossCQs(t *testing.T) {
	ch := newChannel(t)
	a := newCQ(t, Config{CQE: 8, Channel: ch})
	b := newCQ(t, Config{CQE: 8, Channel: ch})
	d := newCQ(t, Config{CQE: 8, Channel: ch})
	for _, c := range []*CQ{a, b, d} {
		require.NoError(t, c.ReqNotify(false))
	}
	order := []*CQ{b, a, d}
	for _, c := range order {
		require.True(t, c.Push(wc(1), false))
	}
	require.NoError(t, a.ReqNotify(false))
	require.True(t, a.Push(wc(2), false))
	order = append(order, a)

	for i, want := range order {
		got, err := ch.GetEvent(context.Background())
		require.NoError(t, err)
		require.Same(t, want, got, "event %d", i)
	}
	require.Equal(t, 2, a.UnackedEvents())
	require.Equal(t, 1, b.UnackedEvents())
	require.Equal(t, 1, d.UnackedEvents())
	a.AckEvents(2)
	b.AckEvents(1)
	d.AckEvents(1)
	for _, c := range []*CQ{a, b, d} {
		require.Equal(t, 0, c.UnackedEvents())
	}
}

func TestGetEventNonBlocking(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 8, Channel: ch})
	ch.SetNonBlocking(true)

	_, err := ch.GetEvent(context.Background())
	requireErrno(t, err, "get_cq_event", syscall.EAGAIN)

	require.NoError(t, c.ReqNotify(false))
	require.True(t, c.Push(wc(1), false))
	got, err := ch.GetEvent(context.Background())
	require.NoError(t, err)
	require.Same(t, c, got)
	c.AckEvents(1)

	_, err = ch.GetEvent(context.Background())
	requireErrno(t, err, "get_cq_event", syscall.EAGAIN)
}

// TestGetEventBlocksUntilPush starts GetEvent on an empty channel, waits
// until it is about to block, then pushes: GetEvent must return that event.
func TestGetEventBlocksUntilPush(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 8, Channel: ch})
	waiting := make(chan struct{}, 1)
	ch.waitHook = func() { waiting <- struct{}{} }

	type result struct {
		cq  *CQ
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := ch.GetEvent(context.Background())
		done <- result{got, err}
	}()
	<-waiting
	select {
	case r := <-done:
		t.Fatalf("GetEvent returned %v, %v with no event queued", r.cq, r.err)
	default:
	}
	require.NoError(t, c.ReqNotify(false))
	require.True(t, c.Push(wc(1), false))
	r := <-done
	require.NoError(t, r.err)
	require.Same(t, c, r.cq)
	require.Equal(t, 1, c.UnackedEvents())
	c.AckEvents(1)
}

func TestGetEventManyWaiters(t *testing.T) {
	const n = 8
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 64, Channel: ch})
	waiting := make(chan struct{}, n)
	ch.waitHook = func() { waiting <- struct{}{} }
	done := make(chan *CQ, n)
	for range n {
		go func() {
			got, err := ch.GetEvent(context.Background())
			if err != nil {
				got = nil
			}
			done <- got
		}()
	}
	// With nothing queued, each waiter reaches the hook exactly once.
	for range n {
		<-waiting
	}
	for i := range n {
		require.NoError(t, c.ReqNotify(false))
		require.True(t, c.Push(wc(uint64(i)), false))
	}
	for range n {
		require.Same(t, c, <-done)
	}
	require.Equal(t, n, c.UnackedEvents())
	require.Equal(t, 0, ch.Pending())
	c.AckEvents(n)
}

func TestGetEventContext(t *testing.T) {
	errCause := errors.New("shutting down")
	tests := []struct {
		name  string
		ctx   func() context.Context
		match []error
	}{
		{
			"canceled",
			func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			[]error{context.Canceled},
		},
		{
			"deadline exceeded",
			func() context.Context {
				ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
				t.Cleanup(cancel)
				return ctx
			},
			[]error{context.DeadlineExceeded},
		},
		{
			"canceled with cause",
			func() context.Context {
				ctx, cancel := context.WithCancelCause(context.Background())
				cancel(errCause)
				return ctx
			},
			[]error{context.Canceled, errCause},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := newChannel(t)
			ctx := tt.ctx()
			got, err := ch.GetEvent(ctx)
			require.Nil(t, got)
			require.ErrorIs(t, err, ctx.Err())
			require.ErrorIs(t, err, syscall.EINTR)
			for _, m := range tt.match {
				require.ErrorIs(t, err, m)
			}
			var ie *InterruptedError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, "get_cq_event", ie.Op)
			var ve *verbs.Error
			require.ErrorAs(t, err, &ve)
			require.Equal(t, syscall.EINTR, ve.Errno)
			require.Contains(t, err.Error(), "get_cq_event: interrupted")
		})
	}
}

func TestGetEventCancelWhileWaiting(t *testing.T) {
	ch := newChannel(t)
	waiting := make(chan struct{}, 1)
	ch.waitHook = func() { waiting <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := ch.GetEvent(ctx)
		done <- err
	}()
	<-waiting
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, syscall.EINTR)
}

func TestGetEventPrefersPendingEvent(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 8, Channel: ch})
	require.NoError(t, c.ReqNotify(false))
	require.True(t, c.Push(wc(1), false))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := ch.GetEvent(ctx)
	require.NoError(t, err, "a pending event is returned even with ctx done")
	require.Same(t, c, got)
	c.AckEvents(1)
}

func TestChannelClose(t *testing.T) {
	ch, err := NewChannel()
	require.NoError(t, err)
	c, err := New(Config{CQE: 4, MaxCQE: 4, Channel: ch})
	require.NoError(t, err)

	requireErrno(t, ch.Close(), "destroy_comp_channel", syscall.EBUSY)
	require.GreaterOrEqual(t, ch.FD(), 0, "still open")

	// A waiter blocked in GetEvent when the channel closes gets EBADF.
	waiting := make(chan struct{}, 1)
	ch.waitHook = func() { waiting <- struct{}{} }
	done := make(chan error, 1)
	go func() {
		_, err := ch.GetEvent(context.Background())
		done <- err
	}()
	<-waiting

	require.NoError(t, c.Destroy(context.Background()))
	require.NoError(t, ch.Close())
	requireErrno(t, <-done, "get_cq_event", syscall.EBADF)

	require.Equal(t, -1, ch.FD())
	requireErrno(t, ch.Close(), "destroy_comp_channel", syscall.EBADF)
	_, err = ch.GetEvent(context.Background())
	requireErrno(t, err, "get_cq_event", syscall.EBADF)
	_, err = New(Config{CQE: 4, MaxCQE: 4, Channel: ch})
	requireErrno(t, err, "create_cq", syscall.EBADF)
}

// TestDestroyRemovesQueuedEvents destroys a CQ with events still queued
// in a shared channel: they leave the channel, the other CQ's stay in
// order, and the eventfd count follows.
func TestDestroyRemovesQueuedEvents(t *testing.T) {
	ch := newChannel(t)
	a := newCQ(t, Config{CQE: 8, Channel: ch})
	b := newCQ(t, Config{CQE: 8, Channel: ch})
	for _, c := range []*CQ{a, b, a, b, a} {
		require.NoError(t, c.ReqNotify(false))
		require.True(t, c.Push(wc(1), false))
	}
	require.Equal(t, 5, ch.Pending())

	require.NoError(t, a.Destroy(context.Background()), "queued, not taken: nothing to wait for")
	require.Equal(t, 2, ch.Pending())
	ch.SetNonBlocking(true)
	for range 2 {
		require.True(t, readable(t, ch.FD()))
		got, err := ch.GetEvent(context.Background())
		require.NoError(t, err)
		require.Same(t, b, got)
	}
	require.False(t, readable(t, ch.FD()), "eventfd count matches the queue")
	_, err := ch.GetEvent(context.Background())
	requireErrno(t, err, "get_cq_event", syscall.EAGAIN)
	b.AckEvents(2)
	require.NoError(t, b.Destroy(context.Background()))
	require.Equal(t, 0, ch.fdErrs)
}

// TestDestroyWaitsForAcks takes three events, starts Destroy and acks
// them one by one; Destroy returns only after the last.
func TestDestroyWaitsForAcks(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 8, Channel: ch})
	for i := range 3 {
		fire(t, c, uint64(i))
	}
	require.Equal(t, 3, c.UnackedEvents())

	waiting := make(chan struct{}, 1)
	c.waitHook = func() { waiting <- struct{}{} }
	done := make(chan error, 1)
	go func() { done <- c.Destroy(context.Background()) }()

	for i := range 3 {
		<-waiting // Destroy checked: not all acknowledged, waits
		select {
		case err := <-done:
			t.Fatalf("Destroy returned %v with %d of 3 events acknowledged", err, i)
		default:
		}
		require.Equal(t, 3, c.Len(), "not destroyed yet")
		c.AckEvents(1)
	}
	require.NoError(t, <-done)
	require.Equal(t, 0, c.Len())
	require.Equal(t, 0, c.UnackedEvents())
}

func TestDestroyContextDone(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 8, Channel: ch})
	fire(t, c, 1)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.Destroy(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, syscall.EINTR)
	var ie *InterruptedError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "destroy_cq", ie.Op)

	// Nothing was destroyed.
	require.Equal(t, []uint64{1}, pollIDs(c))
	fire(t, c, 2)
	require.Equal(t, 2, c.UnackedEvents())
	requireErrno(t, ch.Close(), "destroy_comp_channel", syscall.EBUSY)

	// Cancel while waiting.
	waiting := make(chan struct{}, 1)
	c.waitHook = func() { waiting <- struct{}{} }
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Destroy(ctx) }()
	<-waiting
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	c.AckEvents(2)
	require.NoError(t, c.Destroy(context.Background()))
}

func TestAckEventsClampAndBatch(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 8, Channel: ch})

	c.AckEvents(5) // before any event: nothing to acknowledge
	require.Equal(t, 0, c.UnackedEvents())
	c.AckEvents(0)
	c.AckEvents(-3)

	for i := range 3 {
		fire(t, c, uint64(i))
	}
	require.Equal(t, 3, c.UnackedEvents(), "early acks do not count")
	c.AckEvents(2)
	require.Equal(t, 1, c.UnackedEvents())
	c.AckEvents(100)
	require.Equal(t, 0, c.UnackedEvents(), "clamped to the events taken")

	fire(t, c, 3)
	require.Equal(t, 1, c.UnackedEvents(), "surplus acks are not banked")
	c.AckEvents(1)
	require.NoError(t, c.Destroy(context.Background()))
}

// TestFDCountsEventsQueuedBeforeFirstUse: the eventfd is kept in step only
// from the first FD call, which brings it up to the events already
// pending, so a program that polls the fd late still sees each of them.
func TestFDCountsEventsQueuedBeforeFirstUse(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 8, Channel: ch})
	for range 3 {
		require.NoError(t, c.ReqNotify(false))
		require.True(t, c.Push(wc(1), false))
	}
	_, err := ch.GetEvent(context.Background())
	require.NoError(t, err, "taken before the fd was ever asked for")
	fd := ch.FD()
	for i := range 2 {
		require.True(t, readable(t, fd), "event %d of the 2 still pending", i)
		_, err := ch.GetEvent(context.Background())
		require.NoError(t, err)
	}
	require.False(t, readable(t, fd), "the eventfd counts exactly the pending events")
	c.AckEvents(3)
	require.NoError(t, c.Destroy(context.Background()))
	require.Equal(t, 0, ch.fdErrs)
}
