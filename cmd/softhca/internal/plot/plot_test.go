package plot

import (
	"bytes"
	"encoding/xml"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// node is an element of a parsed SVG document.
type node struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Text     string     `xml:",chardata"`
	Children []node     `xml:",any"`
}

func (n *node) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n *node) num(t *testing.T, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(n.attr(name), 64)
	require.NoError(t, err, "%s=%q", name, n.attr(name))
	return v
}

// all returns the elements below n (n too) that match.
func (n *node) all(match func(*node) bool) []*node {
	var out []*node
	if match(n) {
		out = append(out, n)
	}
	for i := range n.Children {
		out = append(out, n.Children[i].all(match)...)
	}
	return out
}

func byClass(tag, class string) func(*node) bool {
	return func(n *node) bool { return n.XMLName.Local == tag && n.attr("class") == class }
}

func texts(ns []*node) []string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Text)
	}
	return s
}

func parseSVG(t *testing.T, c *Chart) *node {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, c.WriteSVG(&b))
	var root node
	require.NoError(t, xml.Unmarshal(b.Bytes(), &root), b.String())
	require.Equal(t, "svg", root.XMLName.Local)
	require.Equal(t, "http://www.w3.org/2000/svg", root.XMLName.Space)
	require.Equal(t, "800", root.attr("width"))
	require.Equal(t, "480", root.attr("height"))
	return &root
}

// sweep returns points at every power of two from 2 to 8 MiB, y = f(x).
func sweep(f func(x float64) float64) []Point {
	var p []Point
	for i := 1; i <= 23; i++ {
		x := math.Exp2(float64(i))
		p = append(p, Point{x, f(x)})
	}
	return p
}

func bwChart() *Chart {
	return &Chart{
		Title: "ib_write_bw <5000 iterations & more>", XLabel: "message size [B]", YLabel: "bandwidth [MB/sec]",
		Series: []Series{
			{"BW average", sweep(func(x float64) float64 { return 1100 * x / (x + 4000) })},
			{"BW peak", sweep(func(x float64) float64 { return 1400 * x / (x + 3000) })},
		},
	}
}

func TestSVGAxesAndLabels(t *testing.T) {
	root := parseSVG(t, bwChart())
	title := root.all(byClass("text", "title"))
	require.Len(t, title, 1)
	require.Equal(t, "ib_write_bw <5000 iterations & more>", title[0].Text)
	require.Equal(t, []string{"message size [B]"}, texts(root.all(byClass("text", "xlabel"))))
	require.Equal(t, []string{"bandwidth [MB/sec]"}, texts(root.all(byClass("text", "ylabel"))))

	// x: every other power of two from 16 to 1M, and the ends.
	xt := root.all(byClass("text", "xtick"))
	require.Equal(t, []string{"2", "16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M", "8M"}, texts(xt))
	require.Equal(t, 80.0, xt[0].num(t, "x"))
	require.Equal(t, 620.0, xt[len(xt)-1].num(t, "x"))
	for i := 1; i < len(xt); i++ {
		require.Greater(t, xt[i].num(t, "x"), xt[i-1].num(t, "x"))
	}
	// 1K is 2^10: 9 of the 22 powers from the left.
	require.InDelta(t, 80+540*9.0/22, xt[4].num(t, "x"), 0.01)

	// y: linear from 0 in steps of 500 to above the peak's 1400.
	yt := root.all(byClass("text", "ytick"))
	require.Equal(t, []string{"0", "500", "1000", "1500"}, texts(yt))
	for i, n := range yt {
		require.Equal(t, "end", n.attr("text-anchor"))
		require.InDelta(t, 410-360*float64(i)/3+4, n.num(t, "y"), 0.01)
	}

	// The axes: the x axis along the bottom, the y axis up the left, a
	// tick under every power of two (23) and beside every y label (4).
	axes := root.all(byClass("g", "axes"))
	require.Len(t, axes, 1)
	lines := axes[0].all(func(n *node) bool { return n.XMLName.Local == "line" })
	require.Len(t, lines, 2+23+4)
	coords := func(n *node) [4]float64 {
		return [4]float64{n.num(t, "x1"), n.num(t, "y1"), n.num(t, "x2"), n.num(t, "y2")}
	}
	require.Equal(t, [4]float64{80, 410, 620, 410}, coords(lines[0]))
	require.Equal(t, [4]float64{80, 410, 80, 50}, coords(lines[1]))
	require.Equal(t, [4]float64{80, 410, 80, 415}, coords(lines[2]))
	require.Equal(t, [4]float64{620, 410, 620, 415}, coords(lines[24]))
}

func TestSVGPoints(t *testing.T) {
	c := bwChart()
	root := parseSVG(t, c)
	groups := root.all(byClass("g", "series"))
	require.Len(t, groups, 2)
	for i, g := range groups {
		s := c.Series[i]
		require.Equal(t, s.Name, g.attr("data-name"))
		require.Equal(t, hex(palette[i]), g.attr("stroke"))
		circles := g.all(func(n *node) bool { return n.XMLName.Local == "circle" })
		require.Len(t, circles, len(s.Points))
		poly := g.all(func(n *node) bool { return n.XMLName.Local == "polyline" })
		require.Len(t, poly, 1)
		vertices := strings.Fields(poly[0].attr("points"))
		require.Len(t, vertices, len(s.Points))
		for j, p := range s.Points {
			// Each point appears as a circle titled with its size and
			// value, where the axes put it, and as a vertex of the line.
			cn := circles[j]
			require.Len(t, cn.Children, 1)
			require.Equal(t, SizeLabel(p.X)+" B: "+strconv.FormatFloat(p.Y, 'f', 2, 64), cn.Children[0].Text)
			x, y := cn.num(t, "cx"), cn.num(t, "cy")
			require.InDelta(t, 80+540*(math.Log2(p.X)-1)/22, x, 0.006)
			require.InDelta(t, 410-360*p.Y/1500, y, 0.006)
			require.Equal(t, cn.attr("cx")+","+cn.attr("cy"), vertices[j])
		}
	}
	require.Equal(t, "64K B: 1036.72", groups[0].all(func(n *node) bool { return n.XMLName.Local == "title" })[15].Text)
	// The legend names the series in order, each beside a swatch of its
	// colour.
	legend := root.all(byClass("g", "legend"))
	require.Len(t, legend, 1)
	require.Equal(t, []string{"BW average", "BW peak"}, texts(legend[0].all(byClass("text", "legend"))))
	swatches := legend[0].all(func(n *node) bool { return n.XMLName.Local == "line" })
	require.Len(t, swatches, 2)
	require.Equal(t, hex(palette[1]), swatches[1].attr("stroke"))
}

func TestSVGLogY(t *testing.T) {
	c := &Chart{Title: "ib_write_lat", XLabel: "message size [B]", YLabel: "latency [usec]", YLog: true,
		Series: []Series{
			{"t_typical", sweep(func(x float64) float64 { return 3 + x/1000 })},
			{"99% percentile", sweep(func(x float64) float64 { return 5 + x/900 })},
		}}
	root := parseSVG(t, c)
	// 3 usec .. 9325 usec: decades 1 to 10000.
	yt := root.all(byClass("text", "ytick"))
	require.Equal(t, []string{"1", "10", "100", "1000", "10000"}, texts(yt))
	circles := root.all(func(n *node) bool { return n.XMLName.Local == "circle" })
	require.Len(t, circles, 46)
	for i, p := range append(append([]Point{}, c.Series[0].Points...), c.Series[1].Points...) {
		require.InDelta(t, 410-360*math.Log10(p.Y)/4, circles[i].num(t, "cy"), 0.006, "point %d", i)
	}
}

func TestSVGOnePoint(t *testing.T) {
	// One size (an atomic test): a power of two each side of it.
	c := &Chart{Title: "ib_atomic_bw", YLabel: "bandwidth [MB/sec]",
		Series: []Series{{"BW average", []Point{{8, 0.53}}}}}
	root := parseSVG(t, c)
	require.Equal(t, []string{"4", "8", "16"}, texts(root.all(byClass("text", "xtick"))))
	require.Equal(t, []string{"0.0", "0.2", "0.4", "0.6"}, texts(root.all(byClass("text", "ytick"))))
	circles := root.all(func(n *node) bool { return n.XMLName.Local == "circle" })
	require.Len(t, circles, 1)
	require.Equal(t, 350.0, circles[0].num(t, "cx"))
	require.Empty(t, root.all(byClass("text", "xlabel")), "no XLabel, no text")
}

func TestXLabels(t *testing.T) {
	for _, c := range []struct {
		lo, hi int
		want   []int
	}{
		{1, 23, []int{1, 4, 6, 8, 10, 12, 14, 16, 18, 20, 23}},
		{1, 6, []int{1, 2, 3, 4, 5, 6}},
		{10, 13, []int{10, 11, 12, 13}},
	} {
		require.Equal(t, c.want, xLabels(c.lo, c.hi), "%d..%d", c.lo, c.hi)
	}
}

func TestLabels(t *testing.T) {
	for x, want := range map[float64]string{2: "2", 1000: "1000", 1024: "1K", 3072: "3K", 65536: "64K", 1 << 20: "1M", 8 << 20: "8M", 1536 << 10: "1536K", 2.5: "2.5"} {
		require.Equal(t, want, SizeLabel(x), "%v", x)
	}
	for v, want := range map[float64]float64{0.9: 1, 1: 1, 1.1: 2, 3: 5, 7: 10, 240: 500, 0.03: 0.05} {
		require.InDelta(t, want, niceStep(v), 1e-12, "%v", v)
	}
}

func TestFormatOf(t *testing.T) {
	for name, want := range map[string]Format{"a.svg": SVG, "dir.x/B.SVG": SVG, "c.png": PNG, "d.PnG": PNG} {
		f, err := FormatOf(name)
		require.NoError(t, err, name)
		require.Equal(t, want, f, name)
	}
	_, err := FormatOf("plot.jpg")
	require.ErrorContains(t, err, `unknown extension ".jpg": want .svg or .png`)
	_, err = FormatOf("plot")
	require.ErrorContains(t, err, "has no extension")
}

func TestValidate(t *testing.T) {
	one := func(p Point) []Series { return []Series{{"s", []Point{p}}} }
	for _, c := range []struct {
		c    Chart
		want string
	}{
		{Chart{}, "no series"},
		{Chart{Series: []Series{{"", []Point{{2, 1}}}}}, "has no name"},
		{Chart{Series: []Series{{"s", nil}}}, `"s" has no points`},
		{Chart{Series: one(Point{0, 1})}, "size 0 is not a positive number"},
		{Chart{Series: one(Point{math.Inf(1), 1})}, "is not a positive number"},
		{Chart{Series: one(Point{2, math.NaN()})}, "is not a number"},
		{Chart{Series: one(Point{2, -1})}, "is negative"},
		{Chart{YLog: true, Series: one(Point{2, 0})}, "cannot go on a log scale"},
	} {
		err := c.c.Validate()
		require.ErrorContains(t, err, c.want)
		require.ErrorContains(t, c.c.WriteSVG(&bytes.Buffer{}), c.want)
		require.ErrorContains(t, c.c.WritePNG(&bytes.Buffer{}), c.want)
	}
	require.NoError(t, (&Chart{Series: one(Point{2, 0})}).Validate())
}

func TestPNG(t *testing.T) {
	// Two curves far apart, so that neither's line crosses the other's
	// points.
	c := bwChart()
	c.Series[1].Points = sweep(func(x float64) float64 { return 400 + 1100*x/(x+4000) })
	var b bytes.Buffer
	require.NoError(t, c.WritePNG(&b))
	img, err := png.Decode(&b)
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, 800, 480), img.Bounds())
	rgba := func(x, y int) color.RGBA {
		r, g, bl, a := img.At(x, y).RGBA()
		return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}
	}
	// Every point is a disc of its series' colour.
	sc := c.layout()
	for i, cv := range sc.curves {
		for j, m := range cv.markers {
			require.Equal(t, palette[i], rgba(int(m.at.x), int(m.at.y)), "series %d point %d", i, j)
		}
	}
	// The axes are black, the grid grey, the background white.
	require.Equal(t, black, rgba(300, 410))
	require.Equal(t, black, rgba(80, 200))
	require.Equal(t, black, rgba(620, 413), "the last tick")
	require.Equal(t, grey, rgba(300, 290), "the grid line at 500")
	require.Equal(t, white, rgba(700, 300))
	// Text is drawn: the title's box and the x labels' have black pixels.
	dark := func(r image.Rectangle) int {
		n := 0
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				if rgba(x, y) == black {
					n++
				}
			}
		}
		return n
	}
	require.Positive(t, dark(image.Rect(200, 12, 500, 28)), "title")
	require.Positive(t, dark(image.Rect(600, 420, 640, 432)), "8M")
	require.Positive(t, dark(image.Rect(640, 50, 720, 70)), "legend")
	require.Zero(t, dark(image.Rect(640, 100, 800, 400)), "nothing right of the legend")
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	c := bwChart()
	for _, name := range []string{"bw.svg", "bw.png"} {
		p := filepath.Join(dir, name)
		require.NoError(t, c.WriteFile(p))
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		var want bytes.Buffer
		f, _ := FormatOf(name)
		require.NoError(t, c.Write(&want, f))
		require.Equal(t, want.Bytes(), b, name)
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o644), fi.Mode().Perm())
	}
	require.ErrorContains(t, c.WriteFile(filepath.Join(dir, "bw.gif")), "unknown extension")
	require.ErrorContains(t, c.WriteFile(filepath.Join(dir, "no", "such", "dir.svg")), "cannot write")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d.svg"), 0o755))
	require.ErrorContains(t, c.WriteFile(filepath.Join(dir, "d.svg")), "d.svg: it is a directory")
	require.NoError(t, os.Remove(filepath.Join(dir, "d.svg")))
	require.ErrorContains(t, (&Chart{}).WriteFile(filepath.Join(dir, "empty.svg")), "no series")
	// Nothing is left behind: only the two plots.
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 2)
}
