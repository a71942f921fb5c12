package ladder_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/ladder"
	"github.com/stretchr/testify/require"
)

// node is an element of the parsed SVG.
type node struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []node     `xml:",any"`
	Text    string     `xml:",chardata"`
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
	f, err := strconv.ParseFloat(n.attr(name), 64)
	require.NoError(t, err, "<%s %s=%q>", n.XMLName.Local, name, n.attr(name))
	return f
}

func (n *node) hasClass(c string) bool {
	for _, f := range strings.Fields(n.attr("class")) {
		if f == c {
			return true
		}
	}
	return false
}

// all returns the elements below n (n included) for which keep holds,
// in document order.
func (n *node) all(keep func(*node) bool) []*node {
	var out []*node
	var walk func(*node)
	walk = func(m *node) {
		if keep(m) {
			out = append(out, m)
		}
		for i := range m.Nodes {
			walk(&m.Nodes[i])
		}
	}
	walk(n)
	return out
}

func (n *node) class(c string) []*node {
	return n.all(func(m *node) bool { return m.hasClass(c) })
}

// child returns n's first child element named name, or nil.
func (n *node) child(name string) *node {
	for i := range n.Nodes {
		if n.Nodes[i].XMLName.Local == name {
			return &n.Nodes[i]
		}
	}
	return nil
}

// render writes evs and parses the result as XML, strictly.
func render(t *testing.T, title string, evs []ladder.Event) *node {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, ladder.WriteSVG(&b, evs, ladder.Options{Title: title}))
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	dec.Strict = true
	var root node
	require.NoError(t, dec.Decode(&root), "%s", b.String())
	require.Equal(t, "svg", root.XMLName.Local)
	require.Equal(t, "http://www.w3.org/2000/svg", root.XMLName.Space)
	for _, m := range root.all(func(*node) bool { return true }) {
		require.NotContains(t, []string{"script", "image", "a", "foreignObject", "use"}, m.XMLName.Local, "self-contained")
		for _, a := range m.Attrs {
			require.NotEqual(t, "href", a.Name.Local, "self-contained")
		}
	}
	return &root
}

// lifelines returns the lifelines' x by endpoint name, and the names in
// order.
func lifelines(t *testing.T, root *node) (map[string]float64, []string) {
	t.Helper()
	eps := root.class("endpoint")
	lines := root.class("lifeline")
	require.Len(t, lines, len(eps))
	x := map[string]float64{}
	var names []string
	for i, e := range eps {
		name := e.child("title").Text
		names = append(names, name)
		x[name] = lines[i].num(t, "x1")
		require.Equal(t, lines[i].num(t, "x1"), lines[i].num(t, "x2"), "a lifeline is vertical")
		require.InDelta(t, x[name], e.child("text").num(t, "x"), 0.01, "the endpoint box is over its lifeline")
	}
	return x, names
}

func TestLadder(t *testing.T) {
	a, b := "127.0.0.1:4791", "127.0.0.2:4791"
	evs := []ladder.Event{
		{Time: 0, From: b, To: a, Label: "RC Send Only  qp=0x11 psn=100 ackreq len=17"},
		{Time: 77 * time.Microsecond, From: a, To: b, Label: "RC Acknowledge  qp=0x11 psn=100 aeth{ACK syn=0x1f msn=1} len=0"},
		{Time: 1500 * time.Microsecond, From: b, To: a, Label: `<script>alert("x & 'y'")</script>`},
	}
	root := render(t, "softhca trace <test> & more", evs)

	title := root.class("title")
	require.Len(t, title, 1)
	require.Equal(t, "softhca trace <test> & more", title[0].Text)

	x, names := lifelines(t, root)
	require.Equal(t, []string{b, a}, names, "lifelines in the order the endpoints first appear")
	require.Less(t, x[b], x[a])

	pkts := root.class("packet")
	require.Len(t, pkts, len(evs))
	lastY := 0.0
	for i, p := range pkts {
		ev := evs[i]
		line := p.child("line")
		require.NotNil(t, line, "packet %d has an arrow", i)
		require.True(t, line.hasClass("arrow"))
		require.Equal(t, x[ev.From], line.num(t, "x1"), "packet %d starts at its sender's lifeline", i)
		require.Equal(t, x[ev.To], line.num(t, "x2"), "packet %d ends at its receiver's lifeline", i)
		require.Equal(t, line.num(t, "y1"), line.num(t, "y2"), "an arrow is horizontal")
		require.Greater(t, line.num(t, "y1"), lastY, "packets go down in order")
		lastY = line.num(t, "y1")
		require.Equal(t, "url(#head)", line.attr("marker-end"))
		require.Equal(t, ev.Label, p.child("title").Text)
		labels := p.class("label")
		require.Len(t, labels, 1)
		require.Equal(t, ev.Label, labels[0].Text)
		times := p.class("time")
		require.Len(t, times, 1)
		require.Equal(t, []string{"0.000 ms", "0.077 ms", "1.500 ms"}[i], times[0].Text)
	}
	require.Empty(t, root.all(func(n *node) bool { return n.XMLName.Local == "script" }))
	require.Empty(t, root.class("note"))
}

// TestLadderCap: a long trace shows MaxArrows packets and says so.
func TestLadderCap(t *testing.T) {
	var evs []ladder.Event
	for i := range 250 {
		evs = append(evs, ladder.Event{Time: time.Duration(i) * time.Millisecond, From: "a", To: "b", Label: fmt.Sprintf("packet %d", i)})
	}
	root := render(t, "long", evs)
	pkts := root.class("packet")
	require.Len(t, pkts, ladder.MaxArrows)
	require.Equal(t, "packet 0", pkts[0].child("title").Text)
	require.Equal(t, "packet 199", pkts[199].child("title").Text)
	notes := root.class("note")
	require.Len(t, notes, 1)
	require.Equal(t, "Showing the first 200 of 250 packets: a diagram shows at most 200, to stay readable.", notes[0].Text)
	// The note is inside the picture, below the last arrow.
	require.Greater(t, notes[0].num(t, "y"), pkts[199].child("line").num(t, "y1"))
	require.LessOrEqual(t, notes[0].num(t, "y"), root.num(t, "height"))

	// A caller that kept only the first packets says how many it left out.
	var b bytes.Buffer
	require.NoError(t, ladder.WriteSVG(&b, evs[:3], ladder.Options{More: 997}))
	require.Contains(t, b.String(), "Showing the first 3 of 1000 packets")
	require.Equal(t, 3, strings.Count(b.String(), `<g class="packet"`))
}

// TestLadderDroppedLostLoop: a dropped packet is dashed and ends in a
// cross, a gap row counts the packets a trace lost, a packet to its own
// sender is a loop, and three endpoints get three lifelines.
func TestLadderDroppedLostLoop(t *testing.T) {
	evs := []ladder.Event{
		{From: "a", To: "b", Label: "one"},
		{Time: time.Millisecond, From: "b", To: "c", Label: "two", Dropped: true},
		{Time: 2 * time.Millisecond, From: "c", To: "c", Label: "three", Lost: 3},
		{Time: 3 * time.Millisecond, From: "c", To: "a", Label: "four", Lost: 1},
	}
	root := render(t, "t", evs)
	x, names := lifelines(t, root)
	require.Equal(t, []string{"a", "b", "c"}, names)

	pkts := root.class("packet")
	require.Len(t, pkts, 4)
	require.False(t, pkts[0].hasClass("dropped"))
	require.True(t, pkts[1].hasClass("dropped"))
	arrow := pkts[1].child("line")
	require.True(t, arrow.hasClass("dropped"))
	require.Equal(t, "url(#cross)", arrow.attr("marker-end"))

	loop := pkts[2].child("path")
	require.NotNil(t, loop, "a self-addressed packet is a loop")
	require.True(t, strings.HasPrefix(loop.attr("d"), fmt.Sprintf("M%g,", x["c"])), loop.attr("d"))
	require.Equal(t, "three", pkts[2].class("label")[0].Text)

	gaps := root.class("gap")
	require.Len(t, gaps, 2)
	require.Equal(t, "3 packets missing here: the trace fell behind", gaps[0].child("text").Text)
	require.Equal(t, "1 packet missing here: the trace fell behind", gaps[1].child("text").Text)
	// Each gap row sits between the packets around it.
	require.Greater(t, gaps[0].child("line").num(t, "y1"), pkts[1].child("line").num(t, "y1"))
	require.Less(t, gaps[1].child("line").num(t, "y1"), pkts[3].child("line").num(t, "y1"))
}

// TestLadderEndpoints: Options.Endpoints come first, from the left.
func TestLadderEndpoints(t *testing.T) {
	evs := []ladder.Event{{From: "peer", To: "local", Label: "in"}, {From: "local", To: "other", Label: "out"}}
	var b bytes.Buffer
	require.NoError(t, ladder.WriteSVG(&b, evs, ladder.Options{Endpoints: []string{"local"}}))
	var root node
	require.NoError(t, xml.Unmarshal(b.Bytes(), &root))
	x, names := lifelines(t, &root)
	require.Equal(t, []string{"local", "peer", "other"}, names)
	require.Less(t, x["local"], x["peer"])
	arrow := root.class("packet")[0].child("line")
	require.Equal(t, x["peer"], arrow.num(t, "x1"))
	require.Equal(t, x["local"], arrow.num(t, "x2"))
}

// TestLadderFits: every label, box and note lies within the picture.
func TestLadderFits(t *testing.T) {
	evs := []ladder.Event{
		{From: "[2001:db8:1234:5678:9abc:def0:1234:5678]:4791", To: "b", Label: "x"},
		{From: "b", To: "b", Label: "a loop with a long label that must stay in the picture"},
	}
	root := render(t, "a title that is rather longer than the diagram itself would be, to see it fit", evs)
	width := root.num(t, "width")
	for _, txt := range root.all(func(n *node) bool { return n.XMLName.Local == "text" }) {
		n := float64(len([]rune(txt.Text))) * 7.3
		x := txt.num(t, "x")
		var left, right float64
		switch txt.attr("text-anchor") {
		case "middle":
			left, right = x-n/2, x+n/2
		case "end":
			left, right = x-n, x
		default:
			left, right = x, x+n
		}
		require.GreaterOrEqual(t, left, 0.0, "%q", txt.Text)
		require.LessOrEqual(t, right, width, "%q", txt.Text)
	}
	require.Equal(t, evs[1].Label, root.class("packet")[1].class("label")[0].Text, "not cut")
}

// TestLadderLongLabel: a label too long for the space between two
// lifelines is cut with an ellipsis; the tooltip has all of it.
func TestLadderLongLabel(t *testing.T) {
	long := strings.Repeat("reth{va=0x7f0000001000 rkey=0x1234} ", 10)
	root := render(t, "t", []ladder.Event{{From: "a", To: "b", Label: long}})
	p := root.class("packet")[0]
	require.Equal(t, long, p.child("title").Text)
	shown := p.class("label")[0].Text
	require.True(t, strings.HasSuffix(shown, "…"), shown)
	require.True(t, strings.HasPrefix(long, strings.TrimSuffix(shown, "…")))
	require.Less(t, len(shown), len(long))
}

// TestLadderOddText: text XML does not allow is replaced, not written.
func TestLadderOddText(t *testing.T) {
	root := render(t, "\x00title\x1b", []ladder.Event{{From: "a\x01", To: "b]]>", Label: "x\x00y\uFFFE"}})
	_, names := lifelines(t, root)
	require.Equal(t, []string{"a\uFFFD", "b]]>"}, names)
	require.Equal(t, "x\uFFFDy\uFFFD", root.class("label")[0].Text)
	require.Equal(t, "\uFFFDtitle\uFFFD", root.class("title")[0].Text)
}

func TestLadderEmpty(t *testing.T) {
	root := render(t, "nothing", nil)
	require.Empty(t, root.class("packet"))
	require.Empty(t, root.class("lifeline"))
	notes := root.class("note")
	require.Len(t, notes, 1)
	require.Equal(t, "No packets.", notes[0].Text)
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestLadderWriteError(t *testing.T) {
	require.EqualError(t, ladder.WriteSVG(failWriter{}, nil, ladder.Options{}), "disk full")
}
