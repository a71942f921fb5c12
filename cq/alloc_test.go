package cq

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

func TestPushPollNoAllocs(t *testing.T) {
	c := newCQ(t, Config{CQE: 64})
	w := wc(7)
	buf := make([]verbs.WC, 16)
	allocs := testing.AllocsPerRun(1000, func() {
		for range 16 {
			c.Push(w, false)
		}
		c.Poll(buf)
	})
	require.Zero(t, allocs, "Push/Poll")
}

// TestEventPathNoAllocs covers the notification round trip once the
// channel's FIFO has grown: arm, push, take the event, poll, acknowledge.
func TestEventPathNoAllocs(t *testing.T) {
	ch := newChannel(t)
	c := newCQ(t, Config{CQE: 64, Channel: ch})
	w := wc(7)
	buf := make([]verbs.WC, 4)
	ctx := context.Background()
	round := func() {
		_ = c.ReqNotify(false)
		c.Push(w, false)
		if _, err := ch.GetEvent(ctx); err != nil {
			panic(err)
		}
		c.Poll(buf)
		c.AckEvents(1)
	}
	round() // grow the FIFO
	require.Zero(t, testing.AllocsPerRun(1000, round), "ReqNotify/Push/GetEvent/Poll/AckEvents")
}

// TestEventFIFOModel drives an eventFIFO and a plain slice with the same
// random operations and requires them to agree.
func TestEventFIFOModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cqs := []*CQ{{}, {}, {}, {}}
	var f eventFIFO
	var model []*CQ
	for step := range 50000 {
		switch op := rng.IntN(10); {
		case op < 5:
			c := cqs[rng.IntN(len(cqs))]
			f.push(c)
			model = append(model, c)
		case op < 9:
			got := f.pop()
			if len(model) == 0 {
				require.Nil(t, got, "step %d", step)
				continue
			}
			require.Same(t, model[0], got, "step %d", step)
			model = model[1:]
		default:
			c := cqs[rng.IntN(len(cqs))]
			var kept []*CQ
			for _, m := range model {
				if m != c {
					kept = append(kept, m)
				}
			}
			require.Equal(t, len(model)-len(kept), f.remove(c), "step %d", step)
			model = kept
		}
		require.Equal(t, len(model), f.len(), "step %d", step)
	}
	// Slots outside the live range hold no stale pointers.
	live := make(map[int]bool)
	for i := range f.n {
		live[f.idx(i)] = true
	}
	for i, c := range f.buf {
		if !live[i] {
			require.Nil(t, c, "slot %d", i)
		}
	}
}

func BenchmarkPushPoll(b *testing.B) {
	c, err := New(Config{CQE: 256, MaxCQE: 256})
	require.NoError(b, err)
	w := wc(1)
	buf := make([]verbs.WC, 16)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Push(w, false)
		if i%16 == 15 {
			c.Poll(buf)
		}
	}
}

func BenchmarkEventRoundTrip(b *testing.B) {
	ch, err := NewChannel()
	require.NoError(b, err)
	c, err := New(Config{CQE: 256, MaxCQE: 256, Channel: ch})
	require.NoError(b, err)
	w := wc(1)
	buf := make([]verbs.WC, 1)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = c.ReqNotify(false)
		c.Push(w, false)
		_, _ = ch.GetEvent(ctx)
		c.Poll(buf)
		c.AckEvents(1)
	}
	b.StopTimer()
	require.NoError(b, c.Destroy(ctx))
	require.NoError(b, ch.Close())
}
