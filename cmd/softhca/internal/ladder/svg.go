// Package ladder renders a packet ladder as a sequence diagram in SVG:
// one vertical lifeline per endpoint, one horizontal arrow per packet in
// the order given, each labelled with its summary, and the time of each
// packet in a column on the left. `softhca trace --svg` and `softhca demo
// --svg` write it.
//
// The SVG is self-contained (an inline style sheet, no scripts, fonts or
// links) and every text from the caller is escaped, so any label is safe
// to render. A diagram shows at most [MaxArrows] packets: the first ones,
// with a note that says how many were left out, so that a long trace
// stays readable (the ladder lines and the pcap file have them all).
package ladder

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxArrows is the most packets one diagram shows.
const MaxArrows = 200

// Event is one packet on the ladder.
type Event struct {
	// Time is when the packet was seen, from the start of the trace; it
	// is printed in the time column, in milliseconds.
	Time time.Duration
	// From and To are the endpoints (any text, say "10.0.0.1:4791"). Each
	// distinct endpoint gets a lifeline, in the order they first appear.
	// From == To draws a loop.
	From, To string
	// Label is written above the arrow (the packet's summary).
	Label string
	// Dropped marks a packet that did not arrive (dropped on the way or
	// by its receiver): its arrow is dashed and ends in a cross.
	Dropped bool
	// Lost counts packets the record misses just before this one (a
	// trace that fell behind): a gap row says so.
	Lost uint64
}

// Layout, in SVG user units (pixels at 100%).
const (
	fontSize   = 12
	charWidth  = 7.3 // of the monospace font at fontSize, a little generous
	rowHeight  = 28
	timeColumn = 120 // the time column's width, left of the lifelines
	headTop    = 34  // the endpoint boxes
	headHeight = 24
	firstRow   = headTop + headHeight + 26

	minSpacing = 240
	maxSpacing = 1000
	loopWidth  = 36 // of a self-addressed packet's loop
)

// Options are a diagram's title and notes.
type Options struct {
	// Title is written at the top.
	Title string
	// Endpoints, when set, are the first lifelines, from the left, in
	// this order (say, the local address first); other endpoints follow
	// in the order they first appear.
	Endpoints []string
	// More counts packets that came after the events given, which the
	// caller did not keep (a long trace needs to keep only the first
	// MaxArrows); the note says how many packets there were in all.
	More int
}

// WriteSVG writes the diagram of evs to w.
func WriteSVG(w io.Writer, evs []Event, o Options) error {
	var b bytes.Buffer
	render(&b, evs, o)
	_, err := w.Write(b.Bytes())
	return err
}

// diagram is the layout of one rendering.
type diagram struct {
	b         *bytes.Buffer
	endpoints []string
	x         map[string]float64
	spacing   float64
	width     float64
}

func render(b *bytes.Buffer, all []Event, o Options) {
	evs := all
	if len(evs) > MaxArrows {
		evs = evs[:MaxArrows]
	}
	total := len(all) + max(o.More, 0)
	d := &diagram{b: b, x: map[string]float64{}}
	add := func(e string) {
		if _, ok := d.x[e]; !ok {
			d.x[e] = 0
			d.endpoints = append(d.endpoints, e)
		}
	}
	for _, e := range o.Endpoints {
		add(e)
	}
	longest := 0     // the longest label between two lifelines
	longestName := 0 // the longest endpoint
	longestLoop := 0 // the longest label of a loop, right of its lifeline
	for _, ev := range evs {
		add(ev.From)
		add(ev.To)
		n := utf8.RuneCountInString(ev.Label)
		if ev.From == ev.To {
			longestLoop = max(longestLoop, n)
		} else {
			longest = max(longest, n)
		}
	}
	for _, e := range d.endpoints {
		longestName = max(longestName, utf8.RuneCountInString(e))
	}
	d.spacing = min(max(float64(max(longest, longestName+2))*charWidth+24, minSpacing), maxSpacing)
	// Left of the first lifeline only half its box; right of the last,
	// half its box or a loop and its label.
	half := min(float64(longestName)*charWidth+16, d.spacing-16)/2 + 8
	for i, e := range d.endpoints {
		d.x[e] = timeColumn + half + float64(i)*d.spacing
	}
	right := half
	if longestLoop > 0 {
		right = max(right, min(loopWidth+14+float64(longestLoop)*charWidth, maxSpacing))
	}
	d.width = timeColumn + half + float64(max(len(d.endpoints)-1, 0))*d.spacing + right

	rows := len(evs)
	for _, ev := range evs {
		if ev.Lost > 0 {
			rows++
		}
	}
	var notes []string
	if total > len(evs) {
		notes = append(notes, fmt.Sprintf("Showing the first %d of %d packets: a diagram shows at most %d, to stay readable.", len(evs), total, MaxArrows))
	}
	if len(evs) == 0 {
		notes = append(notes, "No packets.")
	}
	for _, t := range append(notes, o.Title) {
		d.width = max(d.width, float64(utf8.RuneCountInString(t))*charWidth+16)
	}
	bottom := float64(firstRow + rows*rowHeight)
	height := bottom + 12 + float64(len(notes))*20

	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="monospace" font-size="%d">`+"\n",
		num(d.width), num(height), num(d.width), num(height), fontSize)
	b.WriteString(`<style>
.lifeline{stroke:#888;stroke-dasharray:4 3}
.endpoint rect{fill:#eef3fb;stroke:#456}
.arrow{stroke:#1f4e8c;stroke-width:1.3;fill:none}
.arrow.dropped{stroke:#b22;stroke-dasharray:5 3}
.label{fill:#111;white-space:pre}
.dropped .label{fill:#b22}
.time{fill:#555}
.gap line{stroke:#c80;stroke-dasharray:2 3}
.gap text{fill:#c80}
.note{fill:#555}
</style>
<defs>
<marker id="head" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#1f4e8c"/></marker>
<marker id="cross" viewBox="0 0 10 10" refX="5" refY="5" markerWidth="10" markerHeight="10"><path d="M1,1 L9,9 M9,1 L1,9" stroke="#b22" stroke-width="2"/></marker>
</defs>
`)
	fmt.Fprintf(b, `<text class="title" x="8" y="18" font-weight="bold">%s</text>`+"\n", esc(o.Title))
	fmt.Fprintf(b, `<text class="time" x="%s" y="%d" text-anchor="end">time</text>`+"\n", num(timeColumn-12), headTop+16)

	for _, e := range d.endpoints {
		x := d.x[e]
		fmt.Fprintf(b, `<line class="lifeline" x1="%s" y1="%d" x2="%s" y2="%s"/>`+"\n", num(x), headTop+headHeight, num(x), num(bottom))
		text := fit(e, d.spacing-16)
		bw := float64(utf8.RuneCountInString(text))*charWidth + 16
		fmt.Fprintf(b, `<g class="endpoint"><title>%s</title><rect x="%s" y="%d" width="%s" height="%d" rx="3"/>`+
			`<text x="%s" y="%d" text-anchor="middle">%s</text></g>`+"\n",
			esc(e), num(x-bw/2), headTop, num(bw), headHeight, num(x), headTop+16, esc(text))
	}

	y := float64(firstRow)
	for _, ev := range evs {
		if ev.Lost > 0 {
			d.gap(y, ev.Lost)
			y += rowHeight
		}
		d.arrow(y, &ev)
		y += rowHeight
	}
	for _, n := range notes {
		y += 20
		fmt.Fprintf(b, `<text class="note" x="8" y="%s">%s</text>`+"\n", num(y-6), esc(n))
	}
	b.WriteString("</svg>\n")
}

// arrow draws one packet at height y: its time, its arrow (or loop)
// and its label.
func (d *diagram) arrow(y float64, ev *Event) {
	b := d.b
	x1, x2 := d.x[ev.From], d.x[ev.To]
	class := "packet"
	if ev.Dropped {
		class += " dropped"
	}
	fmt.Fprintf(b, `<g class="%s"><title>%s</title>`, class, esc(ev.Label))
	fmt.Fprintf(b, `<text class="time" x="%s" y="%s" text-anchor="end">%s</text>`,
		num(timeColumn-12), num(y+4), esc(fmt.Sprintf("%.3f ms", float64(ev.Time.Microseconds())/1000)))
	marker := "url(#head)"
	arrowClass := "arrow"
	if ev.Dropped {
		marker = "url(#cross)"
		arrowClass += " dropped"
	}
	var lx, room float64
	anchor := "middle"
	if ev.From == ev.To {
		fmt.Fprintf(b, `<path class="%s" d="M%s,%s h%d v%d h-%d" marker-end="%s"/>`,
			arrowClass, num(x1), num(y-6), loopWidth, 12, loopWidth, marker)
		lx, anchor = x1+loopWidth+6, "start"
		room = d.width - lx - 8
	} else {
		fmt.Fprintf(b, `<line class="%s" x1="%s" y1="%s" x2="%s" y2="%s" marker-end="%s"/>`,
			arrowClass, num(x1), num(y), num(x2), num(y), marker)
		lx = (x1 + x2) / 2
		span := x2 - x1
		if span < 0 {
			span = -span
		}
		room = span - 16
	}
	fmt.Fprintf(b, `<text class="label" x="%s" y="%s" text-anchor="%s">%s</text></g>`+"\n",
		num(lx), num(y-5), anchor, esc(fit(ev.Label, room)))
}

// gap draws the row that says n packets are missing.
func (d *diagram) gap(y float64, n uint64) {
	what := "packets"
	if n == 1 {
		what = "packet"
	}
	fmt.Fprintf(d.b, `<g class="gap"><line x1="%d" y1="%s" x2="%s" y2="%s"/>`+
		`<text x="%s" y="%s" text-anchor="middle">%s</text></g>`+"\n",
		8, num(y), num(d.width-8), num(y), num(d.width/2), num(y-5),
		esc(fmt.Sprintf("%d %s missing here: the trace fell behind", n, what)))
}

// fit shortens s with an ellipsis to fit width (its full text is in the
// element's title).
func fit(s string, width float64) string {
	n := max(int(width/charWidth), 4)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// esc escapes s for XML text and attribute values; characters XML does
// not allow become U+FFFD.
func esc(s string) string {
	var sb strings.Builder
	_ = xml.EscapeText(&sb, []byte(s)) // a strings.Builder does not fail
	return sb.String()
}

// num formats a coordinate.
func num(f float64) string {
	s := fmt.Sprintf("%.1f", f)
	return strings.TrimSuffix(s, ".0")
}
