package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/cmd/softhca/internal/perftest"
	"github.com/softhca/softhca/cmd/softhca/internal/plot"
)

// perfSweepHelp documents perf's progress, --sweep and --plot in its
// usage text.
const perfSweepHelp = `Progress, sweeps and plots (softhca's own):
  --sweep          every size from 2 to 2^23 bytes: -a under another name,
                   so the peer runs -a or --sweep too (perftest's -a works);
                   not for the atomic tests, whose size is 8 bytes
  --plot=FILE      when the test ran, write its curves to FILE.svg or
                   FILE.png, a point per size: for _bw tests BW average and
                   BW peak (MB/sec, or Gb/sec with --report_gbits), for _lat
                   tests t_typical and the 99% percentile (usec), against
                   the size on a log2 axis. Only a side that measures plots:
                   the client, or either side of send_bw, write_lat and
                   send_lat
  --progress       show progress on stderr even when it is not a terminal:
                   from the first second on, a line a second with the size,
                   the iterations done and the rate since the last line.
                   A terminal always gets it, as one line kept up to date.
                   stdout is perftest's output alone, either way.

Example: the curves of RDMA WRITE's bandwidth, then of its latency:
  server:  softhca perf write --sweep
  client:  softhca perf write --sweep --plot bw.svg 10.0.0.1
  server:  softhca perf write_lat --sweep
  client:  softhca perf write_lat --sweep --plot lat.png 10.0.0.1
`

// Test hooks: perfIsTerminal says whether perf's stderr is a terminal;
// perfClock, if set, replaces the time the measuring loops read for the
// progress display.
var (
	perfIsTerminal = isTerminal
	perfClock      func(time.Time) time.Time
)

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// perfExtras is what perf adds around perftest.Run: the progress display
// and the plot file.
type perfExtras struct {
	o        *perftest.Options
	progress *perftest.ProgressReporter
	plotTmp  *os.File // the plot's temporary file, renamed at the end
}

// startPerfExtras sets up the progress display in cfg, and makes sure
// that the plot file can be written before the test runs (a usage error
// if not).
func startPerfExtras(o *perftest.Options, cfg *perftest.Config, stderr io.Writer) (*perfExtras, error) {
	x := &perfExtras{o: o}
	if o.Plot != "" {
		f, err := plot.CreateTemp(o.Plot)
		if err != nil {
			return nil, fmt.Errorf("--plot: %w", err)
		}
		x.plotTmp = f
	}
	tty := perfIsTerminal(stderr)
	if !tty && !o.Progress {
		return x, nil
	}
	r := perftest.NewProgressReporter(stderr, tty, o.Gbits)
	x.progress = r
	cfg.Progress = func(now time.Time, p perftest.Progress) {
		if perfClock != nil {
			now = perfClock(now)
		}
		r.Update(now, p)
	}
	cfg.Stdout, cfg.Stderr = r.Writer(cfg.Stdout), r.Writer(cfg.Stderr)
	return x, nil
}

// finish erases the progress line and writes the plot of a run that
// succeeded; after a failed run (runErr) it removes the plot's temporary
// file and leaves FILE alone.
func (x *perfExtras) finish(res *perftest.Result, runErr error) error {
	if x.progress != nil {
		x.progress.Clear()
	}
	if x.plotTmp == nil {
		return nil
	}
	tmp := x.plotTmp
	x.plotTmp = nil
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if runErr != nil || res == nil {
		return fail(nil)
	}
	c, err := res.Chart(x.o)
	if err != nil {
		return fail(fmt.Errorf("--plot %s: %w", x.o.Plot, err))
	}
	f, _ := plot.FormatOf(x.o.Plot) // checked by ParseArgs
	if err := c.Write(tmp, f); err != nil {
		return fail(fmt.Errorf("--plot %s: %w", x.o.Plot, err))
	}
	if err := plot.Commit(tmp, x.o.Plot); err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return nil
}
