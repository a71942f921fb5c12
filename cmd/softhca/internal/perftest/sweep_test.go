package perftest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/cmd/softhca/internal/plot"
)

func TestParseSweepOptions(t *testing.T) {
	o, err := ParseArgs(Test{Write, false}, []string{"--sweep", "--plot", "bw.svg", "--progress", "host"})
	require.NoError(t, err)
	require.True(t, o.All, "--sweep is -a")
	require.Len(t, o.sizes(), 23)
	require.Equal(t, MaxSize, o.bufSize())
	require.Equal(t, "bw.svg", o.Plot)
	require.True(t, o.Progress)
	// The same as -a in every other respect: CQ moderation stays on.
	a, err := ParseArgs(Test{Write, false}, []string{"-a", "host"})
	require.NoError(t, err)
	require.Equal(t, a.CQMod, o.CQMod)

	o, err = ParseArgs(Test{Read, true}, []string{"--plot=LAT.PNG", "host"})
	require.NoError(t, err)
	require.Equal(t, "LAT.PNG", o.Plot)
	require.False(t, o.All, "--plot alone plots the one size")

	for _, c := range []struct {
		test Test
		args []string
		want string
	}{
		{Test{Write, false}, []string{"--plot", "bw.jpg", "h"}, `--plot "bw.jpg": unknown extension ".jpg": want .svg or .png`},
		{Test{Write, false}, []string{"--plot", "bw", "h"}, `--plot "bw" has no extension`},
		{Test{Write, false}, []string{"--plot"}, "option --plot needs a value"},
		{Test{Write, false}, []string{"--sweep=yes"}, "option --sweep takes no value"},
		{Test{Write, false}, []string{"--progress=1"}, "option --progress takes no value"},
		{Test{Atomic, false}, []string{"--sweep", "h"}, "--sweep: the atomic tests have one message size, 8 bytes"},
		{Test{Atomic, true}, []string{"--sweep", "h"}, "--sweep: the atomic tests have one message size"},
		{Test{Atomic, false}, []string{"-a", "h"}, "message size cannot be changed for atomic tests"},
		// The sides that only respond have nothing to plot.
		{Test{Write, false}, []string{"--plot", "x.svg"}, "--plot: the server of ib_write_bw measures nothing"},
		{Test{Read, false}, []string{"--plot", "x.svg"}, "the server of ib_read_bw measures nothing"},
		{Test{Atomic, false}, []string{"--plot", "x.svg"}, "the server of ib_atomic_bw measures nothing"},
		{Test{Read, true}, []string{"--plot", "x.svg"}, "the server of ib_read_lat measures nothing"},
		{Test{Atomic, true}, []string{"--plot", "x.svg"}, "the server of ib_atomic_lat measures nothing"},
	} {
		_, err := ParseArgs(c.test, c.args)
		require.ErrorContains(t, err, c.want, "%s %v", c.test, c.args)
	}
	// The servers that measure may plot.
	for _, tst := range []Test{{Send, false}, {Write, true}, {Send, true}} {
		o, err := ParseArgs(tst, []string{"--plot", "x.png"})
		require.NoError(t, err, tst)
		require.True(t, o.Measures())
	}
}

func TestChart(t *testing.T) {
	o, err := ParseArgs(Test{Write, false}, []string{"--sweep", "--report_gbits", "h"})
	require.NoError(t, err)
	r := &Result{MTU: 3, Reports: []Report{{Size: 2, Iters: 5000, Peak: 0.01, Avg: 0.005}, {Size: 4, Iters: 5000, Peak: 0.03, Avg: 0.02}}}
	c, err := r.Chart(o)
	require.NoError(t, err)
	require.Equal(t, "softhca perf ib_write_bw (client): 5000 iterations per size, MTU 1024", c.Title)
	require.Equal(t, "message size [B]", c.XLabel)
	require.Equal(t, "bandwidth [Gb/sec]", c.YLabel)
	require.False(t, c.YLog)
	require.Equal(t, []plot.Series{
		{Name: "BW average", Points: []plot.Point{{X: 2, Y: 0.005}, {X: 4, Y: 0.02}}},
		{Name: "BW peak", Points: []plot.Point{{X: 2, Y: 0.01}, {X: 4, Y: 0.03}}},
	}, c.Series)

	// Without a peak (-N, or the receiver of send_bw): the average only.
	o, err = ParseArgs(Test{Send, false}, nil)
	require.NoError(t, err)
	r.Reports[0].Peak, r.Reports[1].Peak = 0, 0
	c, err = r.Chart(o)
	require.NoError(t, err)
	require.Equal(t, "bandwidth [MB/sec]", c.YLabel)
	require.Contains(t, c.Title, "ib_send_bw (server)")
	require.Len(t, c.Series, 1)

	// Latency: typical and 99%, linear while they stay within two
	// decades, log beyond.
	o, err = ParseArgs(Test{Write, true}, []string{"-a"})
	require.NoError(t, err)
	r = &Result{MTU: 5, LatReports: []LatReport{{Size: 2, Typical: 3, Percentile99: 5}, {Size: 4, Typical: 4, Percentile99: 299}}}
	c, err = r.Chart(o)
	require.NoError(t, err)
	require.Equal(t, "latency [usec]", c.YLabel)
	require.False(t, c.YLog)
	require.Equal(t, []plot.Series{
		{Name: "t_typical", Points: []plot.Point{{X: 2, Y: 3}, {X: 4, Y: 4}}},
		{Name: "99% percentile", Points: []plot.Point{{X: 2, Y: 5}, {X: 4, Y: 299}}},
	}, c.Series)
	r.LatReports[1].Percentile99 = 300
	c, err = r.Chart(o)
	require.NoError(t, err)
	require.True(t, c.YLog)
	require.NoError(t, c.Validate())

	// Nothing measured: an error, not an empty plot.
	_, err = (&Result{}).Chart(o)
	require.ErrorContains(t, err, "no latency was measured")
	o.Lat = false
	_, err = (&Result{}).Chart(o)
	require.ErrorContains(t, err, "no bandwidth was measured")
}
