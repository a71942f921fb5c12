package cq

import (
	"context"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

func TestNewValidation(t *testing.T) {
	closed, err := NewChannel()
	require.NoError(t, err)
	require.NoError(t, closed.Close())

	tests := []struct {
		name  string
		cfg   Config
		errno syscall.Errno // 0: success
	}{
		{"cqe 1", Config{CQE: 1, MaxCQE: 8}, 0},
		{"cqe max_cqe", Config{CQE: 8, MaxCQE: 8}, 0},
		{"cqe 0", Config{CQE: 0, MaxCQE: 8}, syscall.EINVAL},
		{"cqe negative", Config{CQE: -1, MaxCQE: 8}, syscall.EINVAL},
		{"cqe above max_cqe", Config{CQE: 9, MaxCQE: 8}, syscall.EINVAL},
		{"max_cqe unset", Config{CQE: 1}, syscall.EINVAL},
		{"comp_vector negative", Config{CQE: 1, MaxCQE: 8, CompVector: -1}, syscall.EINVAL},
		{"comp_vector in range", Config{CQE: 1, MaxCQE: 8, CompVector: 3, NumCompVectors: 4}, 0},
		{"comp_vector out of range", Config{CQE: 1, MaxCQE: 8, CompVector: 4, NumCompVectors: 4}, syscall.EINVAL},
		{"comp_vector unchecked", Config{CQE: 1, MaxCQE: 8, CompVector: 100}, 0},
		{"closed channel", Config{CQE: 1, MaxCQE: 8, Channel: closed}, syscall.EBADF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if tt.errno != 0 {
				requireErrno(t, err, "create_cq", tt.errno)
				require.Nil(t, c)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.cfg.CQE, c.CQE(), "capacity is exactly cqe")
			require.NoError(t, c.Destroy(context.Background()))
		})
	}
}

func TestCapacityRoundUp(t *testing.T) {
	tests := []struct{ cqe, exact, rxe int }{
		{1, 1, 1}, {2, 2, 3}, {3, 3, 3}, {4, 4, 7}, {10, 10, 15}, {15, 15, 15}, {16, 16, 31}, {65535, 65535, 65535},
	}
	for _, tt := range tests {
		exact := newCQ(t, Config{CQE: tt.cqe})
		require.Equal(t, tt.exact, exact.CQE(), "exact cqe=%d", tt.cqe)
		rxe := newCQ(t, Config{CQE: tt.cqe, RoundUp: true})
		require.Equal(t, tt.rxe, rxe.CQE(), "rounded cqe=%d", tt.cqe)
		// The reported capacity is the real one: it fills exactly.
		for i := range rxe.CQE() {
			require.True(t, rxe.Push(wc(uint64(i)), false))
		}
		require.False(t, rxe.Push(wc(0), false), "cqe=%d overruns at %d", tt.cqe, rxe.CQE()+1)
	}
}

func TestAccessors(t *testing.T) {
	ch := newChannel(t)
	ctx := &struct{ name string }{"mine"}
	owner := &struct{ name string }{"wrapper"}
	c := newCQ(t, Config{CQE: 4, Channel: ch, Context: ctx, Owner: owner, CompVector: 2})
	require.Same(t, ctx, c.Context())
	require.Same(t, owner, c.Owner())
	require.Same(t, ch, c.Channel())
	require.Equal(t, 2, c.CompVector())
	require.Equal(t, 0, c.Len())
	require.False(t, c.InError())

	bare := newCQ(t, Config{CQE: 4})
	require.Nil(t, bare.Channel())
	require.Nil(t, bare.Context())
	require.Nil(t, bare.Owner())
}

func TestPoll(t *testing.T) {
	c := newCQ(t, Config{CQE: 4})

	require.Equal(t, 0, c.Poll(make([]verbs.WC, 4)), "empty CQ")
	require.Equal(t, 0, c.Poll(nil), "nil slice")

	for i := uint64(1); i <= 3; i++ {
		require.True(t, c.Push(wc(i), false))
	}
	require.Equal(t, 0, c.Poll([]verbs.WC{}), "len(wcs) == 0 takes nothing")
	require.Equal(t, 3, c.Len())

	buf := make([]verbs.WC, 2)
	require.Equal(t, 2, c.Poll(buf), "at most len(wcs)")
	require.Equal(t, []verbs.WC{*wc(1), *wc(2)}, buf, "oldest first, whole WC copied")
	require.Equal(t, 1, c.Len())

	// Wrap the ring: 3 then 4, 5, 6 (capacity 4).
	for i := uint64(4); i <= 6; i++ {
		require.True(t, c.Push(wc(i), false))
	}
	buf = make([]verbs.WC, 10)
	require.Equal(t, 4, c.Poll(buf), "fewer than len(wcs) queued")
	for i, w := range buf[:4] {
		require.Equal(t, uint64(3+i), w.WRID)
	}
	require.Equal(t, verbs.WC{}, buf[4], "entries past n untouched")
	require.Equal(t, 0, c.Poll(buf))
}

func TestOverrun(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 2, Channel: ch})
	var calls int
	var lenInHandler int
	c.SetOverrunHandler(func(got *CQ) {
		calls++
		require.Same(t, c, got)
		// The handler runs with no lock held: calling back in works.
		lenInHandler = got.Len()
		require.True(t, got.InError())
	})

	require.True(t, c.Push(wc(1), false))
	require.True(t, c.Push(wc(2), false))
	require.NoError(t, c.ReqNotify(false))
	require.False(t, c.Push(wc(3), false), "full: the completion is lost")
	require.Equal(t, 1, calls)
	require.Equal(t, 2, lenInHandler)
	require.True(t, c.InError())
	require.Equal(t, 0, ch.Pending(), "a lost completion fires no event")

	require.Equal(t, []uint64{1, 2}, pollIDs(c), "completions before the overrun stay pollable")
	require.False(t, c.Push(wc(4), false), "error state is permanent, even with room")
	require.False(t, c.Push(wc(5), true))
	require.Equal(t, 1, calls, "handler is called once")
	require.Equal(t, 0, c.Len())
	require.Equal(t, 0, ch.Pending())

	// No handler set: overrun still enters the error state.
	d := newCQ(t, Config{CQE: 1})
	require.True(t, d.Push(wc(1), false))
	require.False(t, d.Push(wc(2), false))
	require.True(t, d.InError())
}

func TestResize(t *testing.T) {
	tests := []struct {
		name   string
		queued int
		cqe    int
		errno  syscall.Errno
		want   int // CQE() afterwards
	}{
		{"grow", 3, 10, 0, 10},
		{"shrink to queued", 3, 3, 0, 3},
		{"shrink below queued", 3, 2, syscall.EINVAL, 4},
		{"zero", 0, 0, syscall.EINVAL, 4},
		{"negative", 0, -5, syscall.EINVAL, 4},
		{"above max_cqe", 0, 65, syscall.EINVAL, 4},
		{"to max_cqe", 0, 64, 0, 64},
		{"same", 4, 4, 0, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCQ(t, Config{CQE: 4, MaxCQE: 64})
			// Wrap the ring first so the copy must unwrap it.
			require.True(t, c.Push(wc(100), false))
			require.True(t, c.Push(wc(101), false))
			require.Equal(t, 2, c.Poll(make([]verbs.WC, 2)))
			var want []uint64
			for i := range tt.queued {
				require.True(t, c.Push(wc(uint64(i)), false))
				want = append(want, uint64(i))
			}
			err := c.Resize(tt.cqe)
			if tt.errno != 0 {
				requireErrno(t, err, "resize_cq", tt.errno)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.want, c.CQE())
			require.Equal(t, tt.queued, c.Len())
			require.Equal(t, want, pollIDs(c), "queued completions kept in order")
			for i := range tt.want {
				require.True(t, c.Push(wc(uint64(i)), false), "room for %d", tt.want)
			}
			require.False(t, c.Push(wc(0), false), "and no more")
		})
	}
}

func TestResizeKeepsArm(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 2, Channel: ch, RoundUp: true})
	require.Equal(t, 3, c.CQE())
	require.NoError(t, c.ReqNotify(false))
	require.NoError(t, c.Resize(5))
	require.Equal(t, 7, c.CQE(), "rxe sizing applies to resize too")
	require.True(t, c.Push(wc(1), false))
	require.Equal(t, 1, ch.Pending())
}

// TestReqNotifySemantics runs sequences of arms and pushes and checks how
// many events are pending on the channel after each step.
func TestReqNotifySemantics(t *testing.T) {
	type step struct {
		arm       bool // arm (true) or push (false)
		solicited bool // arm: solicited only; push: solicited completion
		status    verbs.WCStatus
		pending   int // events on the channel after the step
	}
	arm := func(pending int) step { return step{arm: true, pending: pending} }
	armSol := func(pending int) step { return step{arm: true, solicited: true, pending: pending} }
	push := func(pending int) step { return step{pending: pending} }
	pushSol := func(pending int) step { return step{solicited: true, pending: pending} }
	pushErr := func(st verbs.WCStatus, pending int) step { return step{status: st, pending: pending} }

	tests := []struct {
		name  string
		steps []step
	}{
		{"not armed: no event", []step{push(0), pushSol(0), pushErr(verbs.WCRemAccessErr, 0)}},
		{"arm then completion", []step{arm(0), push(1)}},
		{"one-shot", []step{arm(0), push(1), push(1), pushSol(1)}},
		{"arming twice gives one event", []step{arm(0), arm(0), push(1), push(1)}},
		{"re-arm after the event", []step{arm(0), push(1), arm(1), push(2)}},
		{"queued completions do not fire a new arm", []step{push(0), push(0), arm(0), push(1)}},
		{"solicited-only ignores unsolicited success", []step{armSol(0), push(0), push(0), pushSol(1)}},
		{"solicited-only fires on a solicited completion", []step{armSol(0), pushSol(1), pushSol(1)}},
		{"solicited-only fires on an error status", []step{armSol(0), pushErr(verbs.WCRemAccessErr, 1)}},
		{"solicited-only fires on a flush", []step{armSol(0), push(0), pushErr(verbs.WCWRFlushErr, 1)}},
		{"broader later arm wins", []step{armSol(0), arm(0), push(1)}},
		{"next-completion arm is not narrowed", []step{arm(0), armSol(0), push(1)}},
		{"solicited arm consumed then any arm", []step{armSol(0), pushSol(1), arm(1), push(2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := newChannel(t)
			c := newCQ(t, Config{CQE: 16, Channel: ch})
			for i, s := range tt.steps {
				if s.arm {
					require.NoError(t, c.ReqNotify(s.solicited))
				} else {
					w := wc(uint64(i))
					w.Status = s.status
					require.True(t, c.Push(w, s.solicited))
				}
				require.Equal(t, s.pending, ch.Pending(), "after step %d", i)
				require.Equal(t, s.pending > 0, readable(t, ch.FD()), "fd readiness after step %d", i)
			}
		})
	}
}

func TestReqNotifyWithoutChannel(t *testing.T) {
	c := newCQ(t, Config{CQE: 4})
	requireErrno(t, c.ReqNotify(false), "req_notify_cq", syscall.EINVAL)
	requireErrno(t, c.ReqNotify(true), "req_notify_cq", syscall.EINVAL)

	// rxe: the arm succeeds and the event is discarded.
	r := newCQ(t, Config{CQE: 4, ArmWithoutChannel: true})
	require.NoError(t, r.ReqNotify(false))
	require.True(t, r.Push(wc(1), false))
	require.NoError(t, r.ReqNotify(true))
	require.True(t, r.Push(wc(2), true))
	require.Equal(t, []uint64{1, 2}, pollIDs(r))
	r.AckEvents(3) // nothing to acknowledge: a no-op
	require.Equal(t, 0, r.UnackedEvents())
}

func TestUsers(t *testing.T) {
	c := newCQ(t, Config{CQE: 4})
	c.AddUser()
	require.NoError(t, c.Acquire())
	require.Equal(t, 2, c.Users())

	requireErrno(t, c.Destroy(context.Background()), "destroy_cq", syscall.EBUSY)
	c.RemoveUser()
	requireErrno(t, c.Destroy(context.Background()), "destroy_cq", syscall.EBUSY)
	c.RemoveUser()
	require.Equal(t, 0, c.Users())
	require.Panics(t, c.RemoveUser)

	require.NoError(t, c.Destroy(context.Background()))
	requireErrno(t, c.Acquire(), "create_qp", syscall.EINVAL)
	require.Equal(t, 0, c.Users())
}

func TestDestroyed(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 4, Channel: ch})
	var overruns int
	c.SetOverrunHandler(func(*CQ) { overruns++ })
	require.True(t, c.Push(wc(1), false))
	require.NoError(t, c.ReqNotify(false))
	require.NoError(t, c.Destroy(context.Background()))

	require.Equal(t, 0, c.Len())
	require.Equal(t, 0, c.Poll(make([]verbs.WC, 4)), "queued completions are gone")
	for range 10 {
		require.False(t, c.Push(wc(2), true))
	}
	require.Equal(t, 0, overruns)
	require.Equal(t, 0, ch.Pending(), "the arm died with the CQ")
	requireErrno(t, c.ReqNotify(false), "req_notify_cq", syscall.EINVAL)
	requireErrno(t, c.Resize(8), "resize_cq", syscall.EINVAL)
	requireErrno(t, c.Destroy(context.Background()), "destroy_cq", syscall.EINVAL)
	c.AckEvents(5)
	require.Equal(t, 0, c.UnackedEvents())
	require.NoError(t, ch.Close(), "the channel is released")
}
