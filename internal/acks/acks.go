// Package acks counts events handed to an application and the
// acknowledgements it returns, so that destroying an object can wait until
// every event about it was acknowledged (as ibv_destroy_qp, ibv_destroy_cq
// and ibv_destroy_srq wait in libibverbs: "events_completed ==
// events_reported").
package acks

import (
	"context"
	"sync"
)

// Counter is safe for concurrent use; its zero value is ready.
type Counter struct {
	mu       sync.Mutex
	reported uint64
	acked    uint64
	waiters  []chan struct{}
}

// Reported records that one event was handed to the application.
func (c *Counter) Reported() {
	c.mu.Lock()
	c.reported++
	c.mu.Unlock()
}

// Acked records n acknowledgements. Acknowledgements beyond the events
// reported are ignored.
func (c *Counter) Acked(n uint64) {
	c.mu.Lock()
	c.acked = min(c.acked+n, c.reported)
	var wake []chan struct{}
	if c.acked == c.reported {
		wake, c.waiters = c.waiters, nil
	}
	c.mu.Unlock()
	for _, w := range wake {
		close(w)
	}
}

// Outstanding returns how many reported events are not acknowledged.
func (c *Counter) Outstanding() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reported - c.acked
}

// Wait blocks until every reported event is acknowledged or ctx is done,
// and returns ctx's error in the second case.
func (c *Counter) Wait(ctx context.Context) error {
	c.mu.Lock()
	if c.acked == c.reported {
		c.mu.Unlock()
		return nil
	}
	w := make(chan struct{})
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
