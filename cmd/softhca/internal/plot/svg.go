package plot

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"
)

// WriteSVG writes the chart as a standalone SVG document. Its parts are
// groups with a class (grid, axes, title, xlabel, ylabel, xtick, ytick,
// series, legend); each series is a group with the series' name in
// data-name, a polyline and a circle per point whose title is the point
// ("64K B: 1009.87"), which viewers show as a tooltip.
func (c *Chart) WriteSVG(w io.Writer) error {
	if err := c.Validate(); err != nil {
		return err
	}
	sc := c.layout()
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")
	fmt.Fprintf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
		width, height, width, height)
	fmt.Fprintf(b, "<rect class=\"background\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", width, height, hex(white))
	svgLines(b, "grid", sc.grid)
	svgLines(b, "axes", sc.axes)
	for _, t := range sc.texts {
		svgText(b, t)
	}
	for _, cv := range sc.curves {
		col := hex(cv.line.color)
		fmt.Fprintf(b, "<g class=\"series\" data-name=\"%s\" stroke=\"%s\" fill=\"%s\">\n", esc(cv.name), col, col)
		var pts []string
		for _, p := range cv.line.pts {
			pts = append(pts, num(p.x)+","+num(p.y))
		}
		fmt.Fprintf(b, "<polyline points=\"%s\" fill=\"none\" stroke-width=\"2\"/>\n", strings.Join(pts, " "))
		for _, m := range cv.markers {
			fmt.Fprintf(b, "<circle cx=\"%s\" cy=\"%s\" r=\"3\"><title>%s</title></circle>\n", num(m.at.x), num(m.at.y), esc(m.label))
		}
		fmt.Fprintf(b, "</g>\n")
	}
	fmt.Fprintf(b, "<g class=\"legend\">\n")
	for _, e := range sc.legend {
		svgLine(b, e.swatch)
		svgText(b, e.text)
	}
	fmt.Fprintf(b, "</g>\n</svg>\n")
	return b.Flush()
}

func svgLines(b *bufio.Writer, class string, ls []line) {
	fmt.Fprintf(b, "<g class=\"%s\">\n", class)
	for _, l := range ls {
		svgLine(b, l)
	}
	fmt.Fprintf(b, "</g>\n")
}

func svgLine(b *bufio.Writer, l line) {
	fmt.Fprintf(b, "<line x1=\"%s\" y1=\"%s\" x2=\"%s\" y2=\"%s\" stroke=\"%s\" stroke-width=\"%s\"/>\n",
		num(l.a.x), num(l.a.y), num(l.b.x), num(l.b.y), hex(l.color), num(l.width))
}

func svgText(b *bufio.Writer, t text) {
	if t.s == "" {
		return
	}
	a := [...]string{"start", "middle", "end"}[t.anchor]
	size := ""
	if t.class == "title" {
		size = " font-size=\"14\" font-weight=\"bold\""
	}
	fmt.Fprintf(b, "<text class=\"%s\" x=\"%s\" y=\"%s\" text-anchor=\"%s\"%s>%s</text>\n",
		t.class, num(t.at.x), num(t.at.y), a, size, esc(t.s))
}

// num formats a coordinate: at most two decimals, no trailing zeros.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

func esc(s string) string {
	var sb strings.Builder
	_ = xml.EscapeText(&sb, []byte(s))
	return sb.String()
}
