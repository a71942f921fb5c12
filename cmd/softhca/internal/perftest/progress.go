package perftest

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// Progress is where a measurement stands. The measuring loops pass it to
// Config.Progress at the start of each message size (Done 0), after each
// batch of completions (bandwidth tests) or each iteration (latency
// tests), and when the size is done (Done == Iters).
type Progress struct {
	Test
	Size int // the message size being measured
	// Index is the size's place among the run's sizes (from 0), Sizes
	// their number: 1 without -a.
	Index, Sizes int
	// Done of Iters iterations have completed.
	Done, Iters int
}

// sizeProgress reports one size's progress; nil when Config.Progress is
// unset, so that the loops' calls cost a nil check.
type sizeProgress struct {
	f func(time.Time, Progress)
	p Progress
}

// progress returns the reporter of size's loop.
func (s *session) progress(size int) *sizeProgress {
	if s.cfg.Progress == nil {
		return nil
	}
	sizes := s.o.sizes()
	return &sizeProgress{f: s.cfg.Progress, p: Progress{Test: s.o.Test, Size: size,
		Index: slices.Index(sizes, size), Sizes: len(sizes), Iters: s.o.Iters}}
}

func (sp *sizeProgress) report(now time.Time, done int) {
	if sp == nil {
		return
	}
	sp.p.Done = done
	sp.f(now, sp.p)
}

// Progress display timing.
const (
	// ProgressDelay is how long a measurement runs before its progress
	// shows.
	ProgressDelay = time.Second
	// progressLineEvery is the interval between progress lines on a
	// stream that is not a terminal; progressTTYEvery between updates of
	// a terminal's line.
	progressLineEvery = time.Second
	progressTTYEvery  = 250 * time.Millisecond
	// progressMinWindow is the shortest interval a rate is computed over
	// (after a new size starts, the first update waits for it).
	progressMinWindow = 100 * time.Millisecond
)

// ProgressReporter shows the progress of a measurement on a stream
// (stderr), fed by Config.Progress: nothing during the first
// ProgressDelay, then the message size, the iterations done and the
// rate since the previous report: bandwidth in perftest's MB/sec (or
// Gb/sec), or for latency tests the average latency in usec as perftest
// computes it (a ping-pong's round trip halved). On a terminal it keeps
// one line up to date, rewritten with a carriage return four times a
// second; elsewhere it prints a line a second.
//
// Output on the terminal between two updates would land after the
// progress line: Writer wraps the streams the run prints on so that the
// line is erased first (and drawn again at the next update). All times
// come from Update's callers, so that tests need no clock.
type ProgressReporter struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	gbits bool

	started bool
	next    time.Time // the earliest next report
	// The window the next rate is computed over: since winT, when winDone
	// iterations of size winIndex had completed.
	winT     time.Time
	winDone  int
	winIndex int
	shown    int // the width of the line on the terminal; 0: none
}

// NewProgressReporter returns a reporter that writes to w, keeping one
// line up to date if tty (w is a terminal), else printing lines. gbits
// reports bandwidth in Gb/sec instead of MB/sec (--report_gbits).
func NewProgressReporter(w io.Writer, tty, gbits bool) *ProgressReporter {
	return &ProgressReporter{w: w, tty: tty, gbits: gbits}
}

// Update takes the progress p as of now, and reports it if it is time.
func (r *ProgressReporter) Update(now time.Time, p Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		r.started, r.next = true, now.Add(ProgressDelay)
		r.winT, r.winDone, r.winIndex = now, p.Done, p.Index
		return
	}
	if p.Index != r.winIndex || p.Done < r.winDone {
		// A new size: its rate starts now.
		r.winT, r.winDone, r.winIndex = now, p.Done, p.Index
	}
	dt := now.Sub(r.winT)
	if now.Before(r.next) || dt < progressMinWindow {
		return
	}
	line := r.format(p, dt, p.Done-r.winDone)
	r.winT, r.winDone = now, p.Done
	if r.tty {
		r.next = now.Add(progressTTYEvery)
		pad := max(r.shown-len(line), 0)
		fmt.Fprintf(r.w, "\r%s%s", line, strings.Repeat(" ", pad))
		if pad > 0 {
			fmt.Fprintf(r.w, "\r%s", line)
		}
		r.shown = len(line)
		return
	}
	r.next = now.Add(progressLineEvery)
	fmt.Fprintf(r.w, "%s\n", line)
}

// format returns the progress line: "progress: ib_write_bw 65536 B
// (16/23): 1234/5000 iterations, 1009.87 MB/sec" (the size's place only
// with several sizes), over the last dt, in which done iterations
// completed.
func (r *ProgressReporter) format(p Progress, dt time.Duration, done int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "progress: %s %d B", p.Test, p.Size)
	if p.Sizes > 1 {
		fmt.Fprintf(&b, " (%d/%d)", p.Index+1, p.Sizes)
	}
	fmt.Fprintf(&b, ": %d/%d iterations, ", p.Done, p.Iters)
	sec := dt.Seconds()
	switch {
	case !p.Lat && r.gbits:
		fmt.Fprintf(&b, "%.2f Gb/sec", float64(done)*float64(p.Size)*8/1e9/sec)
	case !p.Lat:
		fmt.Fprintf(&b, "%.2f MB/sec", float64(done)*float64(p.Size)/1048576/sec)
	case done == 0:
		fmt.Fprintf(&b, "none completed in %.1f s", sec)
	default:
		factor := 2.0 // a ping-pong's iteration is a round trip
		if p.Verb == Read || p.Verb == Atomic {
			factor = 1
		}
		fmt.Fprintf(&b, "%.2f usec", sec*1e6/float64(done)/factor)
	}
	return b.String()
}

// Clear erases the terminal's progress line, if one is shown; the next
// update draws it again.
func (r *ProgressReporter) Clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clear()
}

func (r *ProgressReporter) clear() {
	if r.shown > 0 {
		fmt.Fprintf(r.w, "\r%s\r", strings.Repeat(" ", r.shown))
		r.shown = 0
	}
}

// Writer returns w wrapped so that every write first erases the
// terminal's progress line: the streams a run prints its results and
// notes on, when they may share the terminal with the progress.
func (r *ProgressReporter) Writer(w io.Writer) io.Writer { return progressWriter{r, w} }

type progressWriter struct {
	r *ProgressReporter
	w io.Writer
}

func (pw progressWriter) Write(b []byte) (int, error) {
	pw.r.mu.Lock()
	defer pw.r.mu.Unlock()
	pw.r.clear()
	return pw.w.Write(b)
}
