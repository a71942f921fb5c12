package pipe_test

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
	"github.com/stretchr/testify/require"
)

// receiver counts what an endpoint receives on its own goroutine until
// the endpoint closes.
type receiver struct {
	n    atomic.Uint64
	more chan struct{} // a token after each Recv
	done chan error    // Recv's error when the loop ends
}

func startReceiver(e *pipe.Endpoint) *receiver {
	r := &receiver{more: make(chan struct{}, 1), done: make(chan error, 1)}
	go func() {
		slots := bufs(8)
		for {
			k, err := e.Recv(slots)
			if err != nil {
				r.done <- err
				return
			}
			r.n.Add(uint64(k))
			select {
			case r.more <- struct{}{}:
			default:
			}
		}
	}()
	return r
}

// waitFor waits until the receiver has counted n packets.
func (r *receiver) waitFor(n uint64) {
	for r.n.Load() < n {
		<-r.more
	}
}

// checkGoroutines fails the test if more than limit goroutines remain.
// Goroutines that have done their work may take a moment to exit (the
// receivers, the timer goroutines of clock.Real), so it yields until the
// count drops, giving up after a generous deadline, a bound on a hang and
// not a timing assertion. On failure it prints the stacks.
func checkGoroutines(t *testing.T, limit int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > limit && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if n := runtime.NumGoroutine(); n > limit {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines left behind, want at most %d:\n%s", n, limit, buf[:runtime.Stack(buf, true)])
	}
}

// TestConcurrency: several goroutines per endpoint send while each
// endpoint's receiver drains and another goroutine changes faults and
// filters and reads counters; every packet the counters say was delivered
// is received, exactly, and closing leaves no goroutine behind.
func TestConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    pipe.Faults
	}{
		{"no faults", pipe.Faults{}},
		{"faults", pipe.Faults{Loss: 0.05, Duplicate: 0.05, Corrupt: 0.05, ReorderWindow: 4}},
		{"delay", pipe.Faults{Duplicate: 0.05, ReorderWindow: 4, Delay: 20 * time.Microsecond}},
		{"bottleneck", pipe.Faults{Duplicate: 0.05, CE: 0.1, Rate: 50e6, Queue: 32, MarkCE: 8, Delay: 20 * time.Microsecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			a, b := pipe.New(pipe.Config{Seed: 1, Capacity: bigQueue, Faults: tc.f})
			eps := [2]*pipe.Endpoint{a, b}
			rxs := [2]*receiver{startReceiver(a), startReceiver(b)}

			const senders, perSender = 4, 300
			errs := make(chan error, 2*senders)
			var wg sync.WaitGroup
			for i, e := range eps {
				n := netFrom(t, e, eps[1-i])
				for s := range senders {
					wg.Go(func() {
						batch := make([]link.Packet, 0, 5)
						for j := 0; j < perSender; {
							batch = batch[:0]
							for k := 0; k < 1+(s+j)%5 && j < perSender; k++ {
								batch = append(batch, link.Packet{Buf: packet(&n, s*perSender+j)})
								j++
							}
							if err := e.Send(batch); err != nil {
								errs <- err
								return
							}
						}
					})
				}
			}
			wg.Go(func() {
				for i := range 200 {
					e := eps[i%2]
					e.SetFaults(tc.f)
					e.SetFilter(func(*link.Packet) pipe.Verdict { return pipe.Pass })
					_ = e.Stats()
					_ = e.Queued()
					e.SetFilter(nil)
				}
			})
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}

			var want [2]uint64
			for i, e := range eps {
				st := e.Stats()
				require.Equal(t, uint64(senders*perSender), st.TxPackets)
				want[1-i] = st.TxPackets - st.InjectedLoss + st.InjectedDuplicate - st.QueueDropped
				rxs[1-i].waitFor(want[1-i])
			}
			for i, e := range eps {
				require.NoError(t, e.Close())
				require.ErrorIs(t, <-rxs[i].done, net.ErrClosed)
				require.Equal(t, want[i], rxs[i].n.Load())
				require.Equal(t, want[i], e.Stats().RxPackets)
			}
			checkGoroutines(t, before)
		})
	}
}

// TestCloseReleasesEverything: closing both endpoints wakes their
// receivers, stops every delivery timer and leaves no goroutine.
func TestCloseReleasesEverything(t *testing.T) {
	before := runtime.NumGoroutine()
	clk := clock.NewFake(time0)
	a, b := pipe.New(pipe.Config{Clock: clk, Faults: pipe.Faults{Delay: time.Hour, ReorderWindow: 3}})
	rxa, rxb := startReceiver(a), startReceiver(b)
	nab, nba := netFrom(t, a, b), netFrom(t, b, a)
	sendN(t, a, &nab, 0, 20)
	sendN(t, b, &nba, 0, 20)
	require.Positive(t, clk.Pending())
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.ErrorIs(t, <-rxa.done, net.ErrClosed)
	require.ErrorIs(t, <-rxb.done, net.ErrClosed)
	require.Zero(t, clk.Pending())
	require.Zero(t, rxa.n.Load()+rxb.n.Load())
	checkGoroutines(t, before)

	// With the real clock, timers armed for an hour are stopped too: the
	// test would otherwise still pass, but Close must not wait for them.
	a, b = pipe.New(pipe.Config{Faults: pipe.Faults{Delay: time.Hour}})
	sendN(t, a, &nab, 0, 20)
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	checkGoroutines(t, before)
}

// stepClock is a clock.Clock for allocation tests: time moves only when
// the test sets now, and the test runs the one timer's callback itself
// (clock.Fake allocates as it sorts its timers).
type stepClock struct {
	now     time.Time
	f       func()
	pending bool
}

func (c *stepClock) Now() time.Time { return c.now }

func (c *stepClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	if c.f != nil {
		panic("stepClock: a second timer")
	}
	c.f, c.pending = f, true
	return c
}

func (c *stepClock) Stop() bool {
	was := c.pending
	c.pending = false
	return was
}

func (c *stepClock) Reset(time.Duration) bool {
	was := c.pending
	c.pending = true
	return was
}

// step moves the time on by d and runs the timer if it is armed.
func (c *stepClock) step(d time.Duration) {
	c.now = c.now.Add(d)
	if c.pending {
		c.pending = false
		c.f()
	}
}

// TestZeroAllocs: once warm, sending and receiving allocate nothing, with
// or without the random faults and the bottleneck (style §3.6).
func TestZeroAllocs(t *testing.T) {
	for _, f := range []pipe.Faults{
		{},
		{Loss: 0.1, Duplicate: 0.1, Corrupt: 0.1, ReorderWindow: 4},
		{Duplicate: 0.1, CE: 0.1, Rate: 1e6, Queue: 6, MarkCE: 3, Delay: ms},
	} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			clk := &stepClock{now: time0}
			a, b := pair(t, pipe.Config{Faults: f, Clock: clk})
			n := netFrom(t, a, b)
			pkts := make([]link.Packet, 8)
			for i := range pkts {
				pkts[i].Buf = packet(&n, i)
				pkts[i].Net.TrafficClass = 2
			}
			slots := bufs(8)
			run := func() {
				if err := a.Send(pkts); err != nil {
					panic(err)
				}
				clk.step(time.Second)
				for {
					k, err := b.TryRecv(slots)
					if err != nil {
						panic(err)
					}
					if k == 0 {
						return
					}
				}
			}
			for range 200 {
				run()
			}
			require.Zero(t, testing.AllocsPerRun(200, run))
		})
	}
}

func BenchmarkSendRecv(b *testing.B) {
	for _, f := range []pipe.Faults{
		{},
		{Loss: 0.01, Duplicate: 0.01, Corrupt: 0.01, ReorderWindow: 4},
	} {
		b.Run(fmt.Sprintf("%+v", f), func(b *testing.B) {
			x, y := pipe.New(pipe.Config{Faults: f})
			defer x.Close()
			defer y.Close()
			pkts := make([]link.Packet, 32)
			for i := range pkts {
				pkts[i].Buf = make([]byte, 1024)
			}
			slots := bufs(32)
			b.SetBytes(int64(len(pkts) * 1024))
			b.ReportAllocs()
			for b.Loop() {
				if err := x.Send(pkts); err != nil {
					b.Fatal(err)
				}
				for {
					k, err := y.TryRecv(slots)
					if err != nil {
						b.Fatal(err)
					}
					if k == 0 {
						break
					}
				}
			}
		})
	}
}
