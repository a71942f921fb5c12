package perftest

import (
	"errors"
	"fmt"

	"github.com/softhca/softhca/cmd/softhca/internal/plot"
)

// setSweep is --sweep: -a (every power of two from 2 to 8 MiB), under a
// name that says what it is for.
func setSweep(o *Options, _ string) error {
	o.All, o.sweep = true, true
	return nil
}

// setPlot is --plot FILE: the extension must name a format plot writes.
func setPlot(o *Options, v string) error {
	if _, err := plot.FormatOf(v); err != nil {
		return fmt.Errorf("--plot %w", err)
	}
	o.Plot = v
	return nil
}

// checkSweep checks --sweep and --plot against the test and the side.
func (o *Options) checkSweep() error {
	if o.sweep && o.Verb == Atomic {
		return errors.New("--sweep: the atomic tests have one message size, 8 bytes (perftest refuses -a for them too)")
	}
	if o.Plot != "" && !o.Measures() {
		return fmt.Errorf("--plot: the server of %s measures nothing (the client measures and sends the server its last line only); give --plot to the client", o.Test)
	}
	return nil
}

// Measures reports whether this side of the test measures anything: the
// client always; the server of send_bw (the receiver's average), and of
// write_lat and send_lat (both sides time the ping-pong). The server of
// write_bw, read_bw, atomic_bw, read_lat and atomic_lat only responds.
func (o *Options) Measures() bool {
	if o.Server != "" {
		return true
	}
	if o.Lat {
		return o.Verb == Write || o.Verb == Send
	}
	return o.Verb == Send
}

// Chart returns the curves of the results r holds: for a bandwidth test
// the average bandwidth per message size and, when it was measured, the
// peak, in MB/sec (Gb/sec with --report_gbits), as the table has them;
// for a latency test the typical latency and the 99% percentile per
// size, in usec, on a log scale when they span two decades or more. It
// returns an error when r holds no measurement.
func (r *Result) Chart(o *Options) (*plot.Chart, error) {
	side := "client"
	if o.Server == "" {
		side = "server"
	}
	c := &plot.Chart{
		Title:  fmt.Sprintf("softhca perf %s (%s): %d iterations per size, MTU %d", o.Test, side, o.Iters, r.MTU.Bytes()),
		XLabel: "message size [B]",
	}
	if !o.Lat {
		if len(r.Reports) == 0 {
			return nil, errors.New("no bandwidth was measured")
		}
		c.YLabel = "bandwidth [MB/sec]"
		if o.Gbits {
			c.YLabel = "bandwidth [Gb/sec]"
		}
		avg := plot.Series{Name: "BW average"}
		peak := plot.Series{Name: "BW peak"}
		hasPeak := false
		for _, rep := range r.Reports {
			avg.Points = append(avg.Points, plot.Point{X: float64(rep.Size), Y: rep.Avg})
			peak.Points = append(peak.Points, plot.Point{X: float64(rep.Size), Y: rep.Peak})
			hasPeak = hasPeak || rep.Peak > 0
		}
		c.Series = []plot.Series{avg}
		if hasPeak {
			c.Series = append(c.Series, peak)
		}
		return c, nil
	}
	if len(r.LatReports) == 0 {
		return nil, errors.New("no latency was measured")
	}
	c.YLabel = "latency [usec]"
	typ := plot.Series{Name: "t_typical"}
	p99 := plot.Series{Name: "99% percentile"}
	lo, hi := r.LatReports[0].Typical, r.LatReports[0].Typical
	for _, rep := range r.LatReports {
		typ.Points = append(typ.Points, plot.Point{X: float64(rep.Size), Y: rep.Typical})
		p99.Points = append(p99.Points, plot.Point{X: float64(rep.Size), Y: rep.Percentile99})
		lo, hi = min(lo, rep.Typical, rep.Percentile99), max(hi, rep.Typical, rep.Percentile99)
	}
	c.Series = []plot.Series{typ, p99}
	c.YLog = lo > 0 && hi >= 100*lo
	return c, nil
}
