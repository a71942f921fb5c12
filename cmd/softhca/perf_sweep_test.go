package main

import (
	"bytes"
	"encoding/xml"
	"image"
	"image/png"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/cmd/softhca/internal/perftest"
	"github.com/softhca/softhca/cmd/softhca/internal/plot"
)

// svgSeries reads the series of a plot's SVG: name -> the titles of its
// points ("64K B: 1009.87").
func svgSeries(t *testing.T, file string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var doc struct {
		XMLName xml.Name `xml:"svg"`
		Groups  []struct {
			Class   string `xml:"class,attr"`
			Name    string `xml:"data-name,attr"`
			Circles []struct {
				Title string `xml:"title"`
			} `xml:"circle"`
		} `xml:"g"`
	}
	require.NoError(t, xml.Unmarshal(b, &doc))
	out := map[string][]string{}
	for _, g := range doc.Groups {
		if g.Class != "series" {
			continue
		}
		for _, c := range g.Circles {
			out[g.Name] = append(out[g.Name], c.Title)
		}
	}
	return out
}

func TestPerfSweepPlot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "bw.svg")
	_, cli := runPerfPairSides(t, "write", nil, []string{"--plot", file}, "--sweep", "-n", "5")
	// The table is -a's: every power of two from 2 to 8M.
	rows := tableLines(t, cli.out, perftest.BWHeader)
	require.Len(t, rows, 23)
	// Each row's average and peak are a point of the plot.
	series := svgSeries(t, file)
	require.Len(t, series["BW average"], 23)
	require.Len(t, series["BW peak"], 23)
	for i, row := range rows {
		m := bwLine.FindStringSubmatch(row)
		require.NotNil(t, m, "%q", row)
		size, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		require.Equal(t, 2<<i, int(size))
		require.Equal(t, plot.SizeLabel(size)+" B: "+m[4], series["BW average"][i], "row %q", row)
		require.Equal(t, plot.SizeLabel(size)+" B: "+m[3], series["BW peak"][i], "row %q", row)
	}
	// Nothing else is left in the directory (the temporary file was
	// renamed), and stderr has no progress: it is not a terminal.
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.NotContains(t, cli.err, "progress")
}

func TestPerfPlotLatencyPNG(t *testing.T) {
	// Both sides of write_lat measure, and both may plot.
	dir := t.TempDir()
	sf, cf := filepath.Join(dir, "server.png"), filepath.Join(dir, "client.PNG")
	runPerfPairSides(t, "write_lat", []string{"--plot", sf}, []string{"--plot=" + cf}, "-n", "20", "-s", "64")
	for _, f := range []string{sf, cf} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		img, err := png.Decode(bytes.NewReader(b))
		require.NoError(t, err, f)
		require.Equal(t, image.Rect(0, 0, 800, 480), img.Bounds())
	}
}

func TestPerfSweepUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"write", "--plot", "bw.gif", "h"}, exitUsage, `--plot "bw.gif": unknown extension ".gif": want .svg or .png`},
		{[]string{"write", "--plot", filepath.Join(dir, "no", "bw.svg"), "h"}, exitUsage, "--plot: cannot write " + filepath.Join(dir, "no", "bw.svg")},
		{[]string{"write", "--plot", "bw.svg"}, exitUsage, "the server of ib_write_bw measures nothing"},
		{[]string{"atomic", "--sweep", "h"}, exitUsage, "--sweep: the atomic tests have one message size"},
		{[]string{"read", "--sweep=1"}, exitUsage, "option --sweep takes no value"},
		// A run that fails writes no plot.
		{[]string{"write", "--plot", filepath.Join(dir, "bw.svg"), "-p", "1", "--timeout", "5s", "127.0.0.1"}, exitFailure, "cannot connect"},
	} {
		var out, errb bytes.Buffer
		code := runPerf(c.args, &out, &errb)
		require.Equal(t, c.code, code, "%v: %s", c.args, errb.String())
		require.Contains(t, errb.String(), c.stderr, "%v", c.args)
		require.Empty(t, out.String(), "%v", c.args)
	}
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents, "no plot, no temporary file")
	var out bytes.Buffer
	require.Equal(t, exitOK, runPerf([]string{"write", "-h"}, &out, &out))
	require.Contains(t, out.String(), "--plot=FILE")
	require.Contains(t, out.String(), "softhca perf write --sweep --plot bw.svg 10.0.0.1")
}

// fakeClock makes every progress update a second later than the one
// before, so that each shows.
func fakeClock(t *testing.T) {
	var mu sync.Mutex
	n := 0
	perfClock = func(time.Time) time.Time {
		mu.Lock()
		defer mu.Unlock()
		n++
		return time.Unix(1e9, 0).Add(time.Duration(n) * time.Second)
	}
	t.Cleanup(func() { perfClock = nil })
}

var progressLine = regexp.MustCompile(`^progress: ib_write_bw 3000 B: (\d+)/20 iterations, \d+\.\d\d MB/sec$`)

func TestPerfProgressLines(t *testing.T) {
	fakeClock(t)
	srv, cli := runPerfPairSides(t, "write", nil, []string{"--progress"}, "-n", "20", "-s", "3000")
	// The client's stderr has progress lines, the last at 20 of 20;
	// its stdout has none of them, and the same table as the server's.
	lines := strings.Split(strings.TrimSuffix(cli.err, "\n"), "\n")
	require.NotEmpty(t, lines)
	for _, l := range lines {
		require.Regexp(t, progressLine, l)
	}
	require.Equal(t, "20", progressLine.FindStringSubmatch(lines[len(lines)-1])[1])
	require.NotContains(t, cli.out, "progress")
	require.Equal(t, tableLines(t, srv.out, perftest.BWHeader), tableLines(t, cli.out, perftest.BWHeader))
	// The server measures nothing, and shows nothing.
	require.NotContains(t, srv.err, "progress")

	// Without --progress, a stderr that is not a terminal shows none.
	_, cli = runPerfPair(t, "write", "-n", "20", "-s", "3000")
	require.Empty(t, cli.err)
}

// screen returns the lines a terminal shows for out: a carriage return
// moves back to the start of the line, and what follows overwrites it.
func screen(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		var buf []rune
		col := 0
		for _, r := range l {
			if r == '\r' {
				col = 0
				continue
			}
			if col < len(buf) {
				buf[col] = r
			} else {
				buf = append(buf, r)
			}
			col++
		}
		lines = append(lines, strings.TrimRight(string(buf), " "))
	}
	return lines
}

func TestPerfProgressTerminal(t *testing.T) {
	fakeClock(t)
	perfIsTerminal = func(w io.Writer) bool { return true }
	defer func() { perfIsTerminal = isTerminal }()
	// stdout and stderr on one terminal: the client's progress line is
	// erased before the table is printed, so that the table's lines
	// show as perftest prints them.
	ip, sa, ca := perfAddrs(t)
	listening := make(chan net.Addr, 1)
	perfListening = func(a net.Addr) { listening <- a }
	defer func() { perfListening = nil }()
	var wg sync.WaitGroup
	var scode int
	var sout bytes.Buffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		scode = runPerf(slices.Concat([]string{"write", "--timeout", "20s", "-n", "20", "-s", "3000", "-p", "0"}, sa), &sout, &sout)
		if scode != exitOK {
			listening <- nil
		}
	}()
	a := <-listening
	require.NotNil(t, a, "server: %s", sout.String())
	var term bytes.Buffer
	code := runPerf(slices.Concat([]string{"write", "--timeout", "20s", "-n", "20", "-s", "3000", "-p", strconv.Itoa(a.(*net.TCPAddr).Port), ip.String()}, ca), &term, &term)
	wg.Wait()
	require.Equal(t, exitOK, code, term.String())
	require.Equal(t, exitOK, scode, sout.String())

	require.Contains(t, term.String(), "\rprogress: ib_write_bw 3000 B: ")
	shown := strings.Join(screen(term.String()), "\n")
	rows := tableLines(t, shown, perftest.BWHeader)
	require.Len(t, rows, 1)
	require.Regexp(t, bwLine, rows[0])
	// The last progress line was erased: the terminal ends with the
	// closing exchange's output, not with progress.
	require.NotContains(t, shown, "progress:")
}
