// Package plot draws measurements against message size as a line chart:
// the x axis is the size in bytes on a log2 scale, with a tick at every
// power of two and as many labels as fit (2, 16, 64, 256, 1K, 4K, ...
// 1M, 8M for perftest's sizes 2..8M; binary K and M); the y axis is
// linear from zero or, with Chart.YLog, log10. Each series is a line
// through its points with a marker on each point, and a legend beside
// the chart names the series. It is the plot of "softhca perf --plot".
//
// A chart is laid out once (layout) into a few primitives (lines,
// polylines, markers and text in pixel coordinates), which two renderers
// draw: WriteSVG writes them as SVG text, WritePNG rasterises them with
// the standard library's image and image/png and draws text with
// golang.org/x/image/font/basicfont's 7x13 bitmap font. Both show the
// same chart.
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Point is one measurement: X the message size in bytes, Y the value.
type Point struct{ X, Y float64 }

// Series is one curve.
type Series struct {
	Name   string
	Points []Point
}

// Chart is what to draw.
type Chart struct {
	Title  string
	XLabel string // under the x axis, e.g. "message size [B]"
	YLabel string // above the y axis, e.g. "BW average [MB/sec]"
	// YLog draws the y axis on a log10 scale; every Y must then be
	// positive. Otherwise the y axis is linear from 0.
	YLog   bool
	Series []Series
}

// Format is an output format.
type Format int

const (
	SVG Format = iota
	PNG
)

func (f Format) String() string { return [...]string{"SVG", "PNG"}[f] }

// FormatOf returns the format a file name's extension asks for: .svg or
// .png, in any case.
func FormatOf(name string) (Format, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".svg":
		return SVG, nil
	case ".png":
		return PNG, nil
	case "":
		return 0, fmt.Errorf("%q has no extension: want a name ending in .svg or .png", name)
	}
	return 0, fmt.Errorf("%q: unknown extension %q: want .svg or .png", name, filepath.Ext(name))
}

// Validate checks that the chart can be drawn: at least one series,
// every series named and with points, every X positive and finite, every
// Y finite and not negative (positive with YLog).
func (c *Chart) Validate() error {
	if len(c.Series) == 0 {
		return errors.New("plot: no series")
	}
	for _, s := range c.Series {
		if s.Name == "" {
			return errors.New("plot: a series has no name")
		}
		if len(s.Points) == 0 {
			return fmt.Errorf("plot: series %q has no points", s.Name)
		}
		for _, p := range s.Points {
			switch {
			case !(p.X > 0) || math.IsInf(p.X, 0):
				return fmt.Errorf("plot: series %q: size %v is not a positive number", s.Name, p.X)
			case math.IsNaN(p.Y) || math.IsInf(p.Y, 0):
				return fmt.Errorf("plot: series %q: value %v at size %v is not a number", s.Name, p.Y, p.X)
			case c.YLog && p.Y <= 0:
				return fmt.Errorf("plot: series %q: value %v at size %v cannot go on a log scale", s.Name, p.Y, p.X)
			case p.Y < 0:
				return fmt.Errorf("plot: series %q: value %v at size %v is negative", s.Name, p.Y, p.X)
			}
		}
	}
	return nil
}

// Write writes the chart in format f.
func (c *Chart) Write(w io.Writer, f Format) error {
	if f == PNG {
		return c.WritePNG(w)
	}
	return c.WriteSVG(w)
}

// WriteFile writes the chart to the file name, in the format its
// extension names. It writes a temporary file in the same directory and
// renames it, so that name is either the whole chart or untouched.
func (c *Chart) WriteFile(name string) error {
	f, err := FormatOf(name)
	if err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	tmp, err := CreateTemp(name)
	if err != nil {
		return err
	}
	if err := c.Write(tmp, f); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	return Commit(tmp, name)
}

// CreateTemp creates the temporary file that WriteFile writes name
// through, in name's directory, so that a caller can find out early
// whether name can be written at all (and later Commit it or remove it).
func CreateTemp(name string) (*os.File, error) {
	if fi, err := os.Stat(name); err == nil && fi.IsDir() {
		return nil, fmt.Errorf("cannot write %s: it is a directory", name)
	}
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return nil, fmt.Errorf("cannot write %s: %w", name, err)
	}
	return f, nil
}

// Commit closes tmp (from CreateTemp) and renames it to name, removing
// it if that fails. The file gets mode 0644, not CreateTemp's 0600.
func Commit(tmp *os.File, name string) error {
	err := tmp.Chmod(0o644)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), name)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("cannot write %s: %w", name, err)
	}
	return nil
}

// The canvas and the plot area within it, in pixels.
const (
	width, height = 800, 480
	plotLeft      = 80
	plotRight     = 620
	plotTop       = 50
	plotBottom    = 410
	tickLen       = 5
	// charWidth is the width of a character of the PNG's font (and
	// about that of the SVG's 12 px sans-serif), for spacing labels.
	charWidth = 7
)

// palette colours the series in turn.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
}

var (
	black = color.RGBA{0, 0, 0, 0xff}
	grey  = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	white = color.RGBA{0xff, 0xff, 0xff, 0xff}
)

// anchor is where a text's position lies along it.
type anchor int

const (
	start anchor = iota
	middle
	end
)

// The primitives a chart is laid out into.
type (
	pt   struct{ x, y float64 }
	line struct {
		a, b  pt
		color color.RGBA
		width float64
	}
	polyline struct {
		pts   []pt
		color color.RGBA
	}
	marker struct {
		at    pt
		color color.RGBA
		label string // what the point is, for the SVG's tooltip
	}
	text struct {
		at     pt // the start, middle or end of the baseline
		anchor anchor
		s      string
		class  string
	}
	curve struct {
		name    string
		line    polyline
		markers []marker
	}
	// scene is a laid-out chart; each renderer draws its parts in this
	// order: grid, axes and ticks, texts, curves, legend.
	scene struct {
		grid   []line
		axes   []line
		texts  []text
		curves []curve
		legend []legendEntry
	}
	legendEntry struct {
		swatch line
		text   text
	}
)

// axis maps values to pixels along one axis.
type axis struct {
	lo, hi      float64 // in axis units: log2(size), log10(y) or y
	p0, p1      float64 // the pixels of lo and hi
	log2, log10 bool
}

func (a axis) pos(v float64) float64 {
	switch {
	case a.log2:
		v = math.Log2(v)
	case a.log10:
		v = math.Log10(v)
	}
	return a.p0 + (v-a.lo)/(a.hi-a.lo)*(a.p1-a.p0)
}

// SizeLabel formats a size in bytes as the x axis labels it: 512, 1K,
// 64K, 8M (binary multiples, as perftest's sizes are).
func SizeLabel(n float64) string {
	switch v := int64(n); {
	case float64(v) != n:
		return strconv.FormatFloat(n, 'g', 4, 64)
	case v >= 1<<20 && v%(1<<20) == 0:
		return strconv.FormatInt(v>>20, 10) + "M"
	case v >= 1<<10 && v%(1<<10) == 0:
		return strconv.FormatInt(v>>10, 10) + "K"
	default:
		return strconv.FormatInt(v, 10)
	}
}

// FormatValue formats a measured value for the SVG's tooltips: two
// decimals, as perftest prints its figures.
func FormatValue(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// xAxis returns the x axis: whole powers of two around the sizes, at
// least one power on each side of a single size.
func (c *Chart) xAxis() (axis, int, int) {
	minX, maxX := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, p := range s.Points {
			minX, maxX = math.Min(minX, p.X), math.Max(maxX, p.X)
		}
	}
	lo, hi := int(math.Floor(math.Log2(minX))), int(math.Ceil(math.Log2(maxX)))
	if lo == hi {
		lo, hi = lo-1, hi+1
	}
	return axis{lo: float64(lo), hi: float64(hi), p0: plotLeft, p1: plotRight, log2: true}, lo, hi
}

// xLabels returns the exponents of the x ticks that get a label: every
// step-th power of two (multiples of step), with step the smallest of 1,
// 2, 3, ... that leaves room for the widest label, and the two ends;
// an inner label too close to an end's gives way.
func xLabels(lo, hi int) []int {
	span := float64(plotRight-plotLeft) / float64(hi-lo) // pixels per power
	widest := 0
	for e := lo; e <= hi; e++ {
		widest = max(widest, len(SizeLabel(math.Exp2(float64(e)))))
	}
	room := float64(charWidth*(widest+2)) + 4
	step := max(1, int(math.Ceil(room/span)))
	labels := []int{lo}
	for e := lo + 1; e < hi; e++ {
		if e%step == 0 && float64(e-lo)*span >= room && float64(hi-e)*span >= room {
			labels = append(labels, e)
		}
	}
	return append(labels, hi)
}

// yAxis returns the y axis and its ticks.
func (c *Chart) yAxis() (axis, []float64) {
	minY, maxY := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, p := range s.Points {
			minY, maxY = math.Min(minY, p.Y), math.Max(maxY, p.Y)
		}
	}
	if c.YLog {
		lo, hi := math.Floor(math.Log10(minY)), math.Ceil(math.Log10(maxY))
		if lo == hi {
			hi++
		}
		var ticks []float64
		for e := lo; e <= hi; e++ {
			ticks = append(ticks, math.Pow(10, e))
		}
		return axis{lo: lo, hi: hi, p0: plotBottom, p1: plotTop, log10: true}, ticks
	}
	if maxY <= 0 {
		maxY = 1
	}
	step := niceStep(maxY / 5)
	top := math.Ceil(maxY/step-1e-9) * step
	var ticks []float64
	for i := 0; float64(i)*step <= top+step/2; i++ {
		ticks = append(ticks, float64(i)*step)
	}
	return axis{lo: 0, hi: top, p0: plotBottom, p1: plotTop}, ticks
}

// niceStep returns the smallest 1, 2 or 5 times a power of ten not below
// v.
func niceStep(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// yTickLabel formats a y tick: the decimals the step needs on a linear
// axis, the shortest form on a log axis.
func yTickLabel(v float64, ticks []float64, log bool) string {
	if log || len(ticks) < 2 {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	step := ticks[1] - ticks[0]
	dec := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// layout lays the chart out.
func (c *Chart) layout() *scene {
	sc := &scene{}
	x, lo, hi := c.xAxis()
	y, yticks := c.yAxis()

	// The axes and ticks.
	bl := pt{plotLeft, plotBottom}
	sc.axes = append(sc.axes,
		line{bl, pt{plotRight, plotBottom}, black, 1},
		line{bl, pt{plotLeft, plotTop}, black, 1})
	labelled := map[int]bool{}
	for _, e := range xLabels(lo, hi) {
		labelled[e] = true
	}
	for e := lo; e <= hi; e++ {
		px := x.pos(math.Exp2(float64(e)))
		sc.axes = append(sc.axes, line{pt{px, plotBottom}, pt{px, plotBottom + tickLen}, black, 1})
		if labelled[e] {
			if e != lo {
				sc.grid = append(sc.grid, line{pt{px, plotTop}, pt{px, plotBottom}, grey, 1})
			}
			sc.texts = append(sc.texts, text{pt{px, plotBottom + tickLen + 14}, middle, SizeLabel(math.Exp2(float64(e))), "xtick"})
		}
	}
	for _, v := range yticks {
		py := y.pos(v)
		sc.axes = append(sc.axes, line{pt{plotLeft - tickLen, py}, pt{plotLeft, py}, black, 1})
		if py != plotBottom {
			sc.grid = append(sc.grid, line{pt{plotLeft, py}, pt{plotRight, py}, grey, 1})
		}
		sc.texts = append(sc.texts, text{pt{plotLeft - tickLen - 3, py + 4}, end, yTickLabel(v, yticks, c.YLog), "ytick"})
	}
	sc.texts = append(sc.texts,
		text{pt{(plotLeft + plotRight) / 2, 25}, middle, c.Title, "title"},
		text{pt{(plotLeft + plotRight) / 2, plotBottom + 45}, middle, c.XLabel, "xlabel"},
		text{pt{plotLeft - 60, plotTop - 12}, start, c.YLabel, "ylabel"})

	// The curves and the legend.
	for i, s := range c.Series {
		col := palette[i%len(palette)]
		cv := curve{name: s.Name, line: polyline{color: col}}
		for _, p := range s.Points {
			at := pt{x.pos(p.X), y.pos(p.Y)}
			cv.line.pts = append(cv.line.pts, at)
			cv.markers = append(cv.markers, marker{at, col, SizeLabel(p.X) + " B: " + FormatValue(p.Y)})
		}
		sc.curves = append(sc.curves, cv)
		ly := float64(plotTop + 10 + 20*i)
		sc.legend = append(sc.legend, legendEntry{
			swatch: line{pt{plotRight + 15, ly}, pt{plotRight + 40, ly}, col, 2},
			text:   text{pt{plotRight + 46, ly + 4}, start, s.Name, "legend"},
		})
	}
	return sc
}
