package perftest

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// t0 is the clock the reporter tests feed: no sleeping, no real time.
var t0 = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const ms = time.Millisecond

func TestProgressLines(t *testing.T) {
	var b bytes.Buffer
	r := NewProgressReporter(&b, false, false)
	p := Progress{Test: Test{Write, false}, Size: 1 << 20, Sizes: 1, Iters: 5000}
	// Nothing during the first second.
	for _, u := range []struct {
		t    time.Duration
		done int
	}{{0, 0}, {300 * ms, 30}, {999 * ms, 99}} {
		p.Done = u.done
		r.Update(at(u.t), p)
	}
	require.Empty(t, b.String())
	// At 1 s: 100 MiB in 1 s.
	p.Done = 100
	r.Update(at(time.Second), p)
	require.Equal(t, "progress: ib_write_bw 1048576 B: 100/5000 iterations, 100.00 MB/sec\n", b.String())
	// Then a line a second, each with the rate since the last: 300 MiB
	// in the next second.
	b.Reset()
	p.Done = 250
	r.Update(at(1500*ms), p)
	require.Empty(t, b.String())
	p.Done = 400
	r.Update(at(2*time.Second), p)
	require.Equal(t, "progress: ib_write_bw 1048576 B: 400/5000 iterations, 300.00 MB/sec\n", b.String())
	// Clear and Writer do nothing to lines already printed.
	b.Reset()
	r.Clear()
	fmt.Fprint(r.Writer(&b), "table\n")
	require.Equal(t, "table\n", b.String())
}

func TestProgressTerminal(t *testing.T) {
	var b bytes.Buffer
	r := NewProgressReporter(&b, true, true)
	p := Progress{Test: Test{Read, false}, Size: 65536, Index: 15, Sizes: 23, Iters: 1000}
	r.Update(at(0), p)
	p.Done = 500
	r.Update(at(time.Second), p)
	// 500 * 64 KiB in 1 s = 0.26 Gb/s; the line is drawn after a
	// carriage return, without a newline.
	line1 := "progress: ib_read_bw 65536 B (16/23): 500/1000 iterations, 0.26 Gb/sec"
	require.Equal(t, "\r"+line1, b.String())
	// The terminal's line is updated four times a second.
	b.Reset()
	p.Done = 600
	r.Update(at(1200*ms), p)
	require.Empty(t, b.String())
	p.Done = 999
	r.Update(at(1250*ms), p)
	line2 := "progress: ib_read_bw 65536 B (16/23): 999/1000 iterations, 1.05 Gb/sec"
	require.Equal(t, "\r"+line2, b.String())
	// Output through Writer erases the line first, and once only.
	b.Reset()
	out := r.Writer(&b)
	fmt.Fprint(out, "row 1\n")
	fmt.Fprint(out, "row 2\n")
	blank := "\r" + strings.Repeat(" ", len(line2)) + "\r"
	require.Equal(t, blank+"row 1\nrow 2\n", b.String())

	// The next size: its rate starts with it, so the first update after
	// it waits for a tenth of a second of it.
	b.Reset()
	p = Progress{Test: Test{Read, false}, Size: 131072, Index: 16, Sizes: 23, Iters: 1000}
	r.Update(at(1600*ms), p)
	p.Done = 10
	r.Update(at(1650*ms), p)
	require.Empty(t, b.String())
	p.Done = 30
	r.Update(at(1700*ms), p)
	line3 := "progress: ib_read_bw 131072 B (17/23): 30/1000 iterations, 0.31 Gb/sec"
	require.Equal(t, "\r"+line3, b.String())
	// A shorter line overwrites the longer one's tail with spaces and
	// leaves the cursor after its own text.
	b.Reset()
	p = Progress{Test: Test{Read, false}, Size: 2, Index: 0, Sizes: 23, Iters: 1000}
	r.Update(at(1800*ms), p)
	p.Done = 5
	r.Update(at(2*time.Second), p)
	line4 := "progress: ib_read_bw 2 B (1/23): 5/1000 iterations, 0.00 Gb/sec"
	require.Equal(t, "\r"+line4+strings.Repeat(" ", len(line3)-len(line4))+"\r"+line4, b.String())
	// Clear erases it; a second Clear has nothing to erase.
	b.Reset()
	r.Clear()
	r.Clear()
	require.Equal(t, "\r"+strings.Repeat(" ", len(line4))+"\r", b.String())
}

func TestProgressLatency(t *testing.T) {
	for _, c := range []struct {
		test Test
		usec string
	}{
		// A ping-pong's iteration is a round trip: 2000 in 1 s is
		// 250 usec one way.
		{Test{Write, true}, "250.00"},
		{Test{Send, true}, "250.00"},
		// READ and atomic wait for each response: 500 usec.
		{Test{Read, true}, "500.00"},
		{Test{Atomic, true}, "500.00"},
	} {
		var b bytes.Buffer
		r := NewProgressReporter(&b, false, false)
		p := Progress{Test: c.test, Size: 2, Sizes: 1, Iters: 5000}
		r.Update(at(0), p)
		p.Done = 2000
		r.Update(at(time.Second), p)
		prefix := "progress: " + c.test.String() + " 2 B: 2000/5000 iterations, "
		require.Equal(t, prefix+c.usec+" usec\n", b.String(), c.test)
		// A second with nothing done says so.
		b.Reset()
		r.Update(at(2*time.Second), p)
		require.Equal(t, prefix+"none completed in 1.0 s\n", b.String(), c.test)
	}
}

func TestProgressStalledBandwidth(t *testing.T) {
	// A bandwidth test that stalls (retransmitting, say) shows 0.
	var b bytes.Buffer
	r := NewProgressReporter(&b, false, false)
	p := Progress{Test: Test{Write, false}, Size: 4096, Sizes: 1, Done: 7, Iters: 100}
	r.Update(at(0), p)
	r.Update(at(time.Second), p)
	require.Equal(t, "progress: ib_write_bw 4096 B: 7/100 iterations, 0.00 MB/sec\n", b.String())
}

// progressLog records the Progress calls of one side.
type progressLog struct {
	mu    sync.Mutex
	calls []Progress
	times []time.Time
}

func (l *progressLog) add(now time.Time, p Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, p)
	l.times = append(l.times, now)
}

// check checks that the calls cover sizes in order: each size from 0
// done to all iterations, never going back, and the clock never going
// back either.
func (l *progressLog) check(t *testing.T, test Test, sizes []int, iters int) {
	t.Helper()
	require.NotEmpty(t, l.calls)
	i := -1
	for k, p := range l.calls {
		if k > 0 {
			require.False(t, l.times[k].Before(l.times[k-1]), "call %d: the clock went back", k)
		}
		if i < 0 || p.Size != sizes[i] {
			if i >= 0 {
				require.Equal(t, iters, l.calls[k-1].Done, "size %d ended early", sizes[i])
			}
			i++
			require.Less(t, i, len(sizes), "call %d: %+v", k, p)
			require.Zero(t, p.Done, "size %d starts at 0", p.Size)
		} else {
			require.GreaterOrEqual(t, p.Done, l.calls[k-1].Done, "call %d went back", k)
		}
		require.Equal(t, Progress{Test: test, Size: sizes[i], Index: i, Sizes: len(sizes), Done: p.Done, Iters: iters}, p)
	}
	require.Equal(t, len(sizes)-1, i, "every size reported")
	require.Equal(t, iters, l.calls[len(l.calls)-1].Done)
}

func TestRunProgress(t *testing.T) {
	all := (&Options{All: true}).sizes()
	for _, c := range []struct {
		test     string
		args     []string
		sizes    []int
		iters    int
		measures bool // whether the server measures, and so reports progress
	}{
		{"write", []string{"-a", "-n", "5"}, all, 5, false},
		{"read", []string{"-s", "3000", "-n", "20"}, []int{3000}, 20, false},
		{"atomic", []string{"-n", "20"}, []int{8}, 20, false},
		{"send", []string{"-a", "-n", "5"}, all, 5, true},
		{"write_lat", []string{"-n", "20", "-s", "64"}, []int{64}, 20, true},
		{"send_lat", []string{"-n", "20"}, []int{2}, 20, true},
		{"read_lat", []string{"-n", "10", "-a"}, all, 10, false},
		{"atomic_lat", []string{"-n", "10"}, []int{8}, 10, false},
	} {
		t.Run(c.test, func(t *testing.T) {
			var logs [2]progressLog // server, client
			runPairWith(t, func(server bool, cfg *Config) {
				l := &logs[1]
				if server {
					l = &logs[0]
				}
				cfg.Progress = l.add
			}, c.test, c.args...)
			tst, err := ParseTest(c.test)
			require.NoError(t, err)
			logs[1].check(t, tst, c.sizes, c.iters)
			if c.measures {
				logs[0].check(t, tst, c.sizes, c.iters)
			} else {
				require.Empty(t, logs[0].calls, "the server only responds")
			}
		})
	}
}
