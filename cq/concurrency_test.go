package cq

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

// TestConcurrencySafety hammers one CQ: producers Push, pollers Poll,
// notifiers arm and take and acknowledge events, a resizer resizes. Every
// completion must be polled exactly once and every event acknowledged.
//
// Producers take a credit per completion and pollers return one per
// completion polled, so no more than the minimum capacity is ever
// outstanding: the ring wraps many times and never overruns.
func TestConcurrencySafety(t *testing.T) {
	const (
		producers   = 4
		perProducer = 3000
		total       = producers * perProducer
		cqe         = 32
		pollers     = 2
		notifiers   = 2
	)
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: cqe, MaxCQE: 4 * cqe, Channel: ch})
	c.SetOverrunHandler(func(*CQ) { t.Error("overrun") })

	credits := make(chan struct{}, cqe)
	for range cqe {
		credits <- struct{}{}
	}
	var seen [total]atomic.Int32
	var polled atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var work sync.WaitGroup // producers, pollers, resizer
	for p := range producers {
		work.Go(func() {
			for i := range perProducer {
				id := uint64(p*perProducer + i)
				<-credits
				w := wc(id)
				if id%7 == 0 {
					w.Status = verbs.WCRemOpErr
				}
				assert.True(t, c.Push(w, id%5 == 0))
			}
		})
	}
	for range pollers {
		work.Go(func() {
			buf := make([]verbs.WC, 5)
			for polled.Load() < total {
				n := c.Poll(buf)
				for _, w := range buf[:n] {
					seen[w.WRID].Add(1)
					credits <- struct{}{}
				}
				polled.Add(int64(n))
				if n == 0 {
					runtime.Gosched()
				}
			}
		})
	}
	work.Go(func() {
		for i := 0; polled.Load() < total; i++ {
			// Never below the credits outstanding.
			assert.NoError(t, c.Resize(cqe+(i%3)*cqe))
			runtime.Gosched()
		}
	})

	var events, acks atomic.Int64
	var notify sync.WaitGroup
	for n := range notifiers {
		notify.Go(func() {
			unacked := 0
			defer func() {
				c.AckEvents(unacked)
				acks.Add(int64(unacked))
			}()
			for i := 0; ; i++ {
				if !assert.NoError(t, c.ReqNotify((n+i)%2 == 0)) {
					return
				}
				got, err := ch.GetEvent(ctx)
				if err != nil {
					assert.ErrorIs(t, err, context.Canceled)
					return
				}
				assert.Same(t, c, got)
				events.Add(1)
				unacked++
				if unacked == 1+i%3 { // batch acks of 1..3
					c.AckEvents(unacked)
					acks.Add(int64(unacked))
					unacked = 0
				}
			}
		})
	}

	work.Wait()
	cancel()
	notify.Wait()

	for id := range seen {
		require.Equal(t, int32(1), seen[id].Load(), "wr_id %d", id)
	}
	require.Equal(t, 0, c.Len())
	require.False(t, c.InError())
	require.Equal(t, events.Load(), acks.Load(), "every event acknowledged")
	require.Equal(t, 0, c.UnackedEvents())
	t.Logf("%d completions, %d events", total, events.Load())

	// Events fired but never taken go with the CQ.
	require.NoError(t, c.Destroy(context.Background()))
	require.Equal(t, 0, ch.Pending())
	require.False(t, readable(t, ch.FD()))
	require.Equal(t, 0, ch.fdErrs)
}

// TestSharedChannelConcurrent runs several CQs on one channel, each with a
// producer and an owner that arms, polls and acknowledges, while a single
// dispatcher takes events and hands them to the owners.
func TestSharedChannelConcurrent(t *testing.T) {
	const (
		ncq    = 4
		perCQ  = 2000
		cqe    = 16
		maxCQE = 16
	)
	ch := newChannel(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cqs := make([]*CQ, ncq)
	inbox := make(map[*CQ]chan struct{}, ncq)
	for i := range cqs {
		cqs[i] = newCQ(t, Config{CQE: cqe, MaxCQE: maxCQE, Channel: ch, Context: i})
		inbox[cqs[i]] = make(chan struct{}, 1<<16)
	}

	var dispatched atomic.Int64
	var dispatcher sync.WaitGroup
	dispatcher.Go(func() {
		for {
			got, err := ch.GetEvent(ctx)
			if err != nil {
				assert.ErrorIs(t, err, context.Canceled)
				return
			}
			dispatched.Add(1)
			inbox[got] <- struct{}{}
		}
	})

	var wg sync.WaitGroup
	for i, c := range cqs {
		credits := make(chan struct{}, cqe)
		for range cqe {
			credits <- struct{}{}
		}
		wg.Go(func() { // producer
			for j := range perCQ {
				<-credits
				assert.True(t, c.Push(wc(uint64(i*perCQ+j)), j%2 == 0))
			}
		})
		wg.Go(func() { // owner: the classic arm / poll / wait loop
			next := uint64(i * perCQ)
			buf := make([]verbs.WC, 4)
			for next < uint64((i+1)*perCQ) {
				assert.NoError(t, c.ReqNotify(false))
				for {
					n := c.Poll(buf)
					if n == 0 {
						break
					}
					for _, w := range buf[:n] {
						assert.Equal(t, next, w.WRID, "in order per CQ")
						next++
						credits <- struct{}{}
					}
				}
				if next == uint64((i+1)*perCQ) {
					break
				}
				select {
				case <-inbox[c]:
					c.AckEvents(1)
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	cancel()
	dispatcher.Wait()

	// Events dispatched after an owner finished are still in its inbox.
	for _, c := range cqs {
		for len(inbox[c]) > 0 {
			<-inbox[c]
			c.AckEvents(1)
		}
		require.Equal(t, 0, c.UnackedEvents())
		require.NoError(t, c.Destroy(context.Background()))
	}
	require.Equal(t, 0, ch.Pending())
	require.False(t, readable(t, ch.FD()))
	require.NoError(t, ch.Close())
	t.Logf("%d events dispatched", dispatched.Load())
}

// TestDestroyRacesWithAcks takes events, then races Destroy against the
// acknowledgements and against a goroutine that keeps producing, taking
// and acknowledging events. Destroy must return only once every event
// taken has been acknowledged, and nothing may be taken after it.
func TestDestroyRacesWithAcks(t *testing.T) {
	const k = 50
	for round := range 20 {
		ch := newChannel(t)
		c := newCQ(t, Config{CQE: 8, Channel: ch})
		for i := range k {
			fire(t, c, uint64(i))
			require.Equal(t, 1, c.Poll(make([]verbs.WC, 1)))
		}
		require.Equal(t, k, c.UnackedEvents())

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		destroyed := make(chan error, 1)
		wg.Go(func() { destroyed <- c.Destroy(context.Background()) })
		for range k {
			wg.Go(func() { c.AckEvents(1) })
		}
		wg.Go(func() { // churn
			buf := make([]verbs.WC, 8)
			for c.ReqNotify(round%2 == 0) == nil {
				c.Poll(buf)
				if !c.Push(wc(1), true) {
					return
				}
				if _, err := ch.GetEvent(ctx); err != nil {
					return
				}
				c.AckEvents(1)
			}
		})

		err := <-destroyed
		cancel()
		wg.Wait()
		require.NoError(t, err)
		require.Equal(t, 0, c.UnackedEvents(), "round %d: Destroy returned before the last ack", round)
		require.Equal(t, 0, ch.Pending())
		require.False(t, readable(t, ch.FD()))
		require.NoError(t, ch.Close())
	}
}
