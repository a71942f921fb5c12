package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/daemon"
	"github.com/softhca/softhca/cmd/softhca/internal/headless"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// TestWebPage loads the daemon's web page in a real headless Chromium
// while two of the daemon's QPs exchange messages with a peer device, and
// checks what the page rendered: a row per QP with its QPN and state,
// the ladder's lines for the SENDs received and the ACKs sent, the
// counters that moved, the PSNs updating live, the pause button holding
// the ladder still, and data shown as text, never as markup.
//
// Chromium is driven over the DevTools protocol on a pipe (package
// headless), and the test waits for what the page shows with a
// MutationObserver in it.
func TestWebPage(t *testing.T) {
	bin := headless.Find(t)
	pl, pport := peerLink(t)
	d := start(t, func(c *daemon.Config) {
		c.PeerPort = pport
		c.HTTP = "127.0.0.1:0"
		c.TraceRing = 256
		c.Summarize = func(p *wire.Packet) string { // decode's format, enough of it
			return fmt.Sprintf("%s  qp=%#x psn=%d", p.BTH.OpCode(), p.BTH.DestQP(), p.BTH.PSN())
		}
		c.Regions = []daemon.Region{
			{Name: "buf", Size: 4096, Access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
			{Name: `<b id="injected">x</b>`, Size: 8, Access: verbs.AccessLocalWrite}, // not ParseRegion's: markup must stay text
		}
	})
	peerDev := openPeerDevice(t, pl, d.Listen().Port())

	// Two of the daemon's QPs connected to the peer's, one left in RESET.
	type pair struct{ srv, cli *peer }
	pairs := []pair{
		{newPeer(t, d.Device()), newPeer(t, peerDev)},
		{newPeer(t, d.Device()), newPeer(t, peerDev)},
	}
	idle := newPeer(t, d.Device())
	for _, p := range pairs {
		connectRC(t, p.srv, p.cli)
	}
	// The PSN of the first message (of a SEND Only: one packet each).
	first := wire.PSN(pairs[0].srv.qp.Query().RQPSN)
	require.Equal(t, first, wire.PSN(pairs[1].srv.qp.Query().RQPSN))
	// send has a peer's QP SEND a message to the daemon's, and waits for
	// both completions.
	send := func(p pair) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := p.srv.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{p.srv.mr.SGE(0, 64)}})
		require.NoError(t, err)
		_, err = p.cli.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{p.cli.mr.SGE(0, 32)}})
		require.NoError(t, err)
		for _, side := range []*peer{p.cli, p.srv} {
			wcs := make([]verbs.WC, 1)
			_, err := side.cq.PollWait(ctx, wcs)
			require.NoError(t, err)
			require.Equal(t, verbs.WCSuccess, wcs[0].Status)
		}
	}
	for _, p := range pairs {
		send(p)
	}

	began := time.Now()
	b := headless.Launch(t, bin)
	page := b.Open(t, "http://"+d.HTTPAddr()+"/")

	// The QPs and the ladder of the messages sent before the page opened
	// (the stream begins with the ring's recent packets).
	hexn := func(n uint32) string { return fmt.Sprintf("%#x", n) }
	var conds []string
	for _, p := range pairs {
		row := fmt.Sprintf(`#qps tr[data-qpn="%s"][data-state="RTS"]`, hexn(p.srv.qp.Num()))
		conds = append(conds,
			`document.querySelector('`+row+` td[data-field="psn-in"]').textContent !== ""`,
			`document.querySelector('`+row+` td[data-field="psn-out"]').textContent !== ""`)
	}
	conds = append(conds,
		fmt.Sprintf(`document.querySelector('#qps tr[data-qpn="%s"][data-state="RESET"]')`, hexn(idle.qp.Num())),
		`document.querySelectorAll('#ladder .packet').length >= 4`,
		`document.querySelector('#conn').dataset.state === "live"`)
	dom := page.WaitFor(t, strings.Join(conds, " && "))

	qps := qpRows(dom)
	require.Len(t, qps, 3, "one row per QP")
	for _, p := range pairs {
		row := qps[hexn(p.srv.qp.Num())]
		require.NotNil(t, row, "QP %#x's row", p.srv.qp.Num())
		a := p.srv.qp.Query()
		require.Equal(t, "RTS", row["data-state"])
		require.Equal(t, hexn(p.srv.qp.Num()), row["qpn"])
		require.Equal(t, "RC", row["type"])
		require.Equal(t, "RTS", row["state"])
		require.Equal(t, hexn(p.cli.qp.Num()), row["rqpn"])
		require.Equal(t, "127.0.0.2", row["peer"])
		require.Equal(t, strconv.Itoa(int(a.SQPSN)), row["sq-psn"])
		require.Equal(t, strconv.Itoa(int(a.RQPSN)), row["rq-psn"])
		require.Equal(t, "1024", row["path-mtu"])
		// The PSNs on the wire: the SEND's in, its ACK's out.
		require.Equal(t, strconv.Itoa(int(first)), row["psn-in"])
		require.Equal(t, strconv.Itoa(int(first)), row["psn-out"])
	}
	require.Equal(t, "RESET", qps[hexn(idle.qp.Num())]["state"])
	require.Empty(t, qps[hexn(idle.qp.Num())]["rqpn"])

	// The ladder: this device's address on the left, the peer's on the
	// right, the arrow saying which way the packet went.
	local := regexp.QuoteMeta(d.Listen().String())
	remote := `127\.0\.0\.2:\d+` // the peer device
	lines := ladderLines(dom)
	for _, p := range pairs {
		recv := regexp.MustCompile(fmt.Sprintf(`^ +\d+\.\d{3} ms  %s <- %s +RC Send Only  qp=%#x psn=%d$`,
			local, remote, p.srv.qp.Num(), first))
		ack := regexp.MustCompile(fmt.Sprintf(`^ +\d+\.\d{3} ms  %s -> %s +RC Acknowledge  qp=%#x psn=%d$`,
			local, remote, p.cli.qp.Num(), first))
		require.True(t, hasLine(lines, "received", recv), "no line for QP %#x's SEND matching %s in\n%s", p.srv.qp.Num(), recv, lines)
		require.True(t, hasLine(lines, "sent", ack), "no line for QP %#x's ACK matching %s in\n%s", p.srv.qp.Num(), ack, lines)
	}

	// GIDs and addresses in every form the daemon writes them (the GIDs'
	// as ibv_devinfo -v writes them, or as eight groups) compare as one.
	for in, want := range map[string]string{
		`gidAddr("::ffff:127.0.0.2")`:                            "127.0.0.2",
		`gidAddr("0000:0000:0000:0000:0000:ffff:7f00:0002")`:     "127.0.0.2",
		`gidAddr("fe80::1")`:                                     "fe80::1",
		`ipText("fe80:0000:0000:0000:0000:0000:0000:0001")`:      "fe80:0:0:0:0:0:0:1",
		`ipText("fe80::1")`:                                      "fe80:0:0:0:0:0:0:1",
		`hostOf("[fe80::1%eth0]:4791")`:                          "fe80:0:0:0:0:0:0:1",
		`hostOf("[::ffff:10.0.0.1]:4791")`:                       "10.0.0.1",
		`hostOf("10.0.0.1:4791")`:                                "10.0.0.1",
		`ipText("::")`:                                           "0:0:0:0:0:0:0:0",
		`ipText("1::2::3")`:                                      "1::2::3",
		`ipText("not an address")`:                               "not an address",
		`ipText("0000:0000:0000:0000:0000:0000:0000:0000:0000")`: "0000:0000:0000:0000:0000:0000:0000:0000:0000",
	} {
		var got string
		require.NoError(t, json.Unmarshal(page.Eval(t, in), &got), in)
		require.Equal(t, want, got, in)
	}

	// The device: its address, its regions with their keys, markup in a
	// name shown as text.
	require.Contains(t, dom, `<td data-field="listen" class="mono">`+d.Listen().String()+`</td>`)
	require.Contains(t, dom, `<td data-field="services">none</td>`)
	st := d.Status()
	require.Contains(t, dom, fmt.Sprintf(`<td data-field="rkey" class="mono">%#x</td>`, st.Regions[0].RKey))
	require.Contains(t, dom, fmt.Sprintf(`<td data-field="addr" class="mono">%#x</td>`, st.Regions[0].Addr))
	require.NotContains(t, dom, `<b id="injected">`)
	require.Contains(t, dom, `<td data-field="name">&lt;b id="injected"&gt;x&lt;/b&gt;</td>`)

	// Live: with the ladder paused, two more messages on the first QP.
	// Their packets wait (the button counts them) while the ladder stays
	// as it was; the counters that moved are highlighted, the PSNs on the
	// wire follow.
	before := len(lines)
	watch(t, page, "counter", `document.querySelector('#counters tr[data-counter="rcvd_pkts"].changed')`)
	page.Eval(t, `document.querySelector('#pause').click(); ""`)
	send(pairs[0])
	send(pairs[0])
	dom = page.WaitFor(t, fmt.Sprintf(`window.testSaw.counter &&
		+(/Resume \((\d+) new\)/.exec(document.querySelector('#pause').textContent) || [0, 0])[1] >= 4 &&
		document.querySelector('#qps tr[data-qpn="%[1]s"] td[data-field="psn-in"]').textContent === "%[2]d" &&
		document.querySelector('#qps tr[data-qpn="%[1]s"] td[data-field="psn-out"]').textContent === "%[2]d"`,
		hexn(pairs[0].srv.qp.Num()), first+2))
	require.Len(t, ladderLines(dom), before, "the paused ladder grew")
	require.Equal(t, strconv.Itoa(int(first)), qpRows(dom)[hexn(pairs[1].srv.qp.Num())]["psn-in"])
	held := regexp.MustCompile(`Resume \((\d+) new\)`).FindStringSubmatch(dom)
	require.NotNil(t, held)
	n, _ := strconv.Atoi(held[1])
	require.Equal(t, 4, n, "two SENDs received and two ACKs sent")

	// A receive posted on the second QP: its queue grows, highlighted.
	rq := fmt.Sprintf(`#qps tr[data-qpn="%s"] td[data-field="rq-posted"]`, hexn(pairs[1].srv.qp.Num()))
	watch(t, page, "posted", `document.querySelector('`+rq+`.changed') && document.querySelector('`+rq+`').textContent === "1"`)
	_, err := pairs[1].srv.qp.PostRecv(&verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{pairs[1].srv.mr.SGE(0, 64)}})
	require.NoError(t, err)
	page.WaitFor(t, `window.testSaw.posted`)

	// Resumed, the ladder shows the packets it held.
	page.Eval(t, `document.querySelector('#pause').click(); ""`)
	dom = page.WaitFor(t, fmt.Sprintf(`document.querySelectorAll('#ladder .packet').length === %d`, before+n))
	lines = ladderLines(dom)
	recv := regexp.MustCompile(fmt.Sprintf(`^ +\d+\.\d{3} ms  %s <- %s +RC Send Only  qp=%#x psn=%d$`,
		local, remote, pairs[0].srv.qp.Num(), first+2))
	require.True(t, hasLine(lines[before:], "received", recv), "the last SEND is not among the lines shown on resume:\n%s", lines[before:])
	require.Contains(t, dom, `<button id="pause" type="button" aria-pressed="false">Pause</button>`)

	// A daemon that keeps no packets, and has no QP: the page says so.
	bare := start(t, func(c *daemon.Config) { c.HTTP = "127.0.0.1:0"; c.TraceRing = 0 })
	dom = b.Open(t, "http://"+bare.HTTPAddr()+"/").WaitFor(t,
		`document.querySelector('#ladder .notice') && document.querySelector('#conn').dataset.state === "live"`)
	require.Contains(t, dom, `<div class="notice">    packet trace: the daemon keeps no packets (it was started with --trace-ring 0)</div>`)
	require.Contains(t, dom, `<p id="no-qps" class="empty">No queue pairs.</p>`)
	require.Empty(t, qpRows(dom))

	require.Empty(t, b.Problems(), "the page's errors")
	t.Logf("the browser part took %v", time.Since(began).Round(time.Millisecond))
}

// qpRows parses the QP table's rows of a serialized DOM: by QPN, each
// cell's text by its data-field, and the row's data-state.
func qpRows(dom string) map[string]map[string]string {
	rows := map[string]map[string]string{}
	rowRE := regexp.MustCompile(`<tr data-qpn="([^"]*)"([^>]*)>(.*?)</tr>`)
	stateRE := regexp.MustCompile(`data-state="([^"]*)"`)
	cellRE := regexp.MustCompile(`<td data-field="([^"]*)"[^>]*>(.*?)</td>`)
	for _, m := range rowRE.FindAllStringSubmatch(dom, -1) {
		row := map[string]string{}
		if s := stateRE.FindStringSubmatch(m[2]); s != nil {
			row["data-state"] = s[1]
		}
		for _, c := range cellRE.FindAllStringSubmatch(m[3], -1) {
			row[c[1]] = textOf(c[2])
		}
		rows[m[1]] = row
	}
	return rows
}

// ladderLine is a line of the packet ladder.
type ladderLine struct{ dir, text string }

func (l ladderLine) String() string { return l.dir + ": " + l.text + "\n" }

// ladderLines parses the ladder's packet lines of a serialized DOM.
func ladderLines(dom string) []ladderLine {
	var out []ladderLine
	re := regexp.MustCompile(`<div class="packet (sent|received)" data-dir="(?:sent|received)">([^<]*)</div>`)
	for _, m := range re.FindAllStringSubmatch(dom, -1) {
		out = append(out, ladderLine{m[1], html.UnescapeString(m[2])})
	}
	return out
}

func hasLine(lines []ladderLine, dir string, re *regexp.Regexp) bool {
	for _, l := range lines {
		if l.dir == dir && re.MatchString(l.text) {
			return true
		}
	}
	return false
}

// textOf is the text of serialized HTML: its tags removed, its
// entities decoded.
func textOf(s string) string {
	return html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(s, ""))
}

// watch has the page set window.testSaw[name] once the JavaScript
// condition holds, as a MutationObserver sees the document change: for
// states that last only until the next poll.
func watch(t *testing.T, p *headless.Tab, name, cond string) {
	t.Helper()
	p.Eval(t, `window.testSaw = window.testSaw || {};
		window.testSaw.`+name+` = false;
		new MutationObserver((_, obs) => {
			try { if (`+cond+`) { window.testSaw.`+name+` = true; obs.disconnect(); } } catch (e) { /* not yet */ }
		}).observe(document.documentElement, {subtree: true, childList: true, characterData: true, attributes: true});
		""`)
}
