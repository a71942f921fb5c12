// Package clock is the time source of the transport's timers (ACK,
// retransmission, RNR), injected so that tests drive time by hand.
//
// Real is the wall clock. Fake is a manual clock for tests: time moves
// only when Advance is called, and timers whose deadline has passed fire
// during Advance, in deadline order, on the caller's goroutine.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock gives the current time and timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on its own goroutine (Real) or inside Advance
	// (Fake) once d has passed. Stop cancels it.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call.
type Timer interface {
	// Stop cancels the call; it reports whether the call was still
	// pending.
	Stop() bool
	// Reset makes the call happen once d from now (again, if it already
	// ran or was stopped); it reports whether it was still pending.
	Reset(d time.Duration) bool
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a manual clock. Its zero value starts at the zero time; use
// NewFake for a readable start.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	seq    uint64
}

// NewFake returns a fake clock at start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

type fakeTimer struct {
	c       *Fake
	at      time.Time
	seq     uint64
	f       func()
	pending bool
}

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run during the Advance that passes now+d.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, at: c.now.Add(d), seq: c.seq, f: f, pending: true}
	c.timers = append(c.timers, t)
	return t
}

// Stop cancels the timer.
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.pending
	t.pending = false
	return was
}

// Reset reschedules the timer d after the fake now.
func (t *fakeTimer) Reset(d time.Duration) bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	was := t.pending
	if !was {
		c.timers = append(c.timers, t)
	}
	c.seq++
	t.at, t.seq, t.pending = c.now.Add(d), c.seq, true
	return was
}

// Advance moves the clock forward by d, running every timer that falls due,
// earliest first (timers scheduled by those calls run too if they fall
// due within the advance).
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		live := c.timers[:0]
		for _, t := range c.timers {
			if t.pending {
				live = append(live, t)
			}
		}
		c.timers = live
		sort.Slice(live, func(i, j int) bool {
			if !live[i].at.Equal(live[j].at) {
				return live[i].at.Before(live[j].at)
			}
			return live[i].seq < live[j].seq
		})
		if len(live) == 0 || live[0].at.After(end) {
			c.now = end
			c.mu.Unlock()
			return
		}
		t := live[0]
		t.pending = false
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
}

// Pending returns how many timers are scheduled and not stopped.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if t.pending {
			n++
		}
	}
	return n
}

// PendingWithin returns how many timers are scheduled to fire within d
// of the fake now: a test that must not advance the clock before a timer
// is armed waits for it.
func (c *Fake) PendingWithin(d time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.now.Add(d)
	n := 0
	for _, t := range c.timers {
		if t.pending && !t.at.After(end) {
			n++
		}
	}
	return n
}
