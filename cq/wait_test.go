package cq

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

// waitResult runs c.Wait(ctx) in a goroutine and returns its result
// channel.
func waitResult(c *CQ, ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.Wait(ctx) }()
	return done
}

// waiting blocks until n goroutines wait in c.Wait.
func waiting(t *testing.T, c *CQ, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.waiters == n
	}, 5*time.Second, time.Millisecond)
}

func TestWaitReturnsAtOnceWhenNotEmpty(t *testing.T) {
	c := newCQ(t, Config{CQE: 4})
	require.True(t, c.Push(wc(1), false))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, c.Wait(ctx), "a queued completion wins over a done context")
	require.Equal(t, []uint64{1}, pollIDs(c), "Wait takes nothing")
}

func TestWaitWokenByPush(t *testing.T) {
	c := newCQ(t, Config{CQE: 4})
	done := waitResult(c, context.Background())
	waiting(t, c, 1)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v on an empty CQ", err)
	default:
	}
	require.True(t, c.Push(wc(2), false))
	require.NoError(t, <-done)
	require.Equal(t, []uint64{2}, pollIDs(c))
}

func TestWaitInterrupted(t *testing.T) {
	c := newCQ(t, Config{CQE: 4})
	ctx, cancel := context.WithCancel(context.Background())
	done := waitResult(c, ctx)
	waiting(t, c, 1)
	cancel()
	err := <-done
	requireErrno(t, err, "poll_cq", syscall.EINTR)
	require.ErrorIs(t, err, context.Canceled)
	var ie *InterruptedError
	require.ErrorAs(t, err, &ie)

	// A done context fails at once when the CQ is empty.
	require.ErrorIs(t, c.Wait(ctx), syscall.EINTR)
}

// TestWaitManyWaiters: one token per push is passed on, so every waiter
// returns once completions are there, whether pushed one by one or in a
// burst.
func TestWaitManyWaiters(t *testing.T) {
	c := newCQ(t, Config{CQE: 64})
	const n = 4
	var dones []<-chan error
	for range n {
		dones = append(dones, waitResult(c, context.Background()))
	}
	waiting(t, c, n)
	require.True(t, c.Push(wc(1), false))
	require.True(t, c.Push(wc(2), false))
	for _, d := range dones {
		require.NoError(t, <-d, "every waiter sees the queued completions")
	}
}

func TestWaitDestroyed(t *testing.T) {
	c, err := New(Config{CQE: 4, MaxCQE: 4})
	require.NoError(t, err)
	d1, d2 := waitResult(c, context.Background()), waitResult(c, context.Background())
	waiting(t, c, 2)
	require.NoError(t, c.Destroy(context.Background()))
	for _, d := range []<-chan error{d1, d2} {
		requireErrno(t, <-d, "poll_cq", syscall.EINVAL)
	}
	requireErrno(t, c.Wait(context.Background()), "poll_cq", syscall.EINVAL)
}

// TestWaitLeavesNotificationsAlone: a Wait neither consumes the arm nor
// queues an event, and a Push wakes both a waiter and, once, the
// armed channel.
func TestWaitLeavesNotificationsAlone(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 8, Channel: ch})
	done := waitResult(c, context.Background())
	waiting(t, c, 1)
	require.NoError(t, c.ReqNotify(false), "arming while a goroutine waits")
	require.Zero(t, ch.Pending())
	require.True(t, c.Push(wc(3), false))
	require.NoError(t, <-done)
	require.Equal(t, 1, ch.Pending(), "the arm fired once, as without a waiter")
	got, err := ch.GetEvent(context.Background())
	require.NoError(t, err)
	require.Same(t, c, got)
	c.AckEvents(1)

	// Nothing armed: a Wait woken by a push queues no event.
	done = waitResult(c, context.Background())
	require.True(t, c.Push(wc(4), false))
	require.NoError(t, <-done)
	require.Zero(t, ch.Pending())
	require.Equal(t, []uint64{3, 4}, pollIDs(c))
}

func TestPushWithWaiterNoAllocs(t *testing.T) {
	c := newCQ(t, Config{CQE: 64})
	c.mu.Lock()
	c.waiters = 1 // as if a goroutine waited: Push signals
	c.mu.Unlock()
	w := wc(7)
	buf := make([]verbs.WC, 16)
	allocs := testing.AllocsPerRun(1000, func() {
		for range 16 {
			c.Push(w, false)
		}
		c.Poll(buf)
		select {
		case <-c.ready:
		default:
		}
	})
	require.Zero(t, allocs, "Push that wakes a waiter")
	c.mu.Lock()
	c.waiters = 0
	c.mu.Unlock()
}
