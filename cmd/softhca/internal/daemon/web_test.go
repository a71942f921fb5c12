package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/daemon"
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
// Chromium is driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe), and the test waits for what the page shows
// with a MutationObserver in it. --dump-dom is no use here: without
// --virtual-time-budget it dumps the page as soon as it has loaded,
// before the packet stream's first events, and with it, it never dumps,
// as virtual time stands still while a request is open and the packet
// stream stays open.
func TestWebPage(t *testing.T) {
	bin := findChromium(t)
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
	b := launchChromium(t, bin)
	page := b.open(t, "http://"+d.HTTPAddr()+"/")

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
	dom := page.waitFor(t, strings.Join(conds, " && "))

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
		require.NoError(t, json.Unmarshal(page.eval(t, in), &got), in)
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
	page.watch(t, "counter", `document.querySelector('#counters tr[data-counter="rcvd_pkts"].changed')`)
	page.eval(t, `document.querySelector('#pause').click(); ""`)
	send(pairs[0])
	send(pairs[0])
	dom = page.waitFor(t, fmt.Sprintf(`window.testSaw.counter &&
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
	page.watch(t, "posted", `document.querySelector('`+rq+`.changed') && document.querySelector('`+rq+`').textContent === "1"`)
	_, err := pairs[1].srv.qp.PostRecv(&verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{pairs[1].srv.mr.SGE(0, 64)}})
	require.NoError(t, err)
	page.waitFor(t, `window.testSaw.posted`)

	// Resumed, the ladder shows the packets it held.
	page.eval(t, `document.querySelector('#pause').click(); ""`)
	dom = page.waitFor(t, fmt.Sprintf(`document.querySelectorAll('#ladder .packet').length === %d`, before+n))
	lines = ladderLines(dom)
	recv := regexp.MustCompile(fmt.Sprintf(`^ +\d+\.\d{3} ms  %s <- %s +RC Send Only  qp=%#x psn=%d$`,
		local, remote, pairs[0].srv.qp.Num(), first+2))
	require.True(t, hasLine(lines[before:], "received", recv), "the last SEND is not among the lines shown on resume:\n%s", lines[before:])
	require.Contains(t, dom, `<button id="pause" type="button" aria-pressed="false">Pause</button>`)

	// A daemon that keeps no packets, and has no QP: the page says so.
	bare := start(t, func(c *daemon.Config) { c.HTTP = "127.0.0.1:0"; c.TraceRing = 0 })
	dom = b.open(t, "http://"+bare.HTTPAddr()+"/").waitFor(t,
		`document.querySelector('#ladder .notice') && document.querySelector('#conn').dataset.state === "live"`)
	require.Contains(t, dom, `<div class="notice">    packet trace: the daemon keeps no packets (it was started with --trace-ring 0)</div>`)
	require.Contains(t, dom, `<p id="no-qps" class="empty">No queue pairs.</p>`)
	require.Empty(t, qpRows(dom))

	require.Empty(t, b.problems(), "the page's errors")
	t.Logf("the browser part took %v", time.Since(began).Round(time.Millisecond))
}

// findChromium returns a Chromium or Chrome binary, or skips the test.
func findChromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium, chromium-browser or google-chrome in PATH (apt-get install chromium): the web page was not checked in a browser")
	return ""
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

// chromium is a headless Chromium driven over the DevTools protocol on
// a pipe: commands are JSON objects, each followed by a NUL byte, written
// to the browser's fd 3; answers and events come the same way on fd 4.
type chromium struct {
	cmd    *exec.Cmd
	toB    *os.File
	stderr syncBuffer
	exited chan error

	mu      sync.Mutex
	next    int
	waiting map[int]chan cdpMessage
	loaded  map[string]chan struct{} // by session: Page.loadEventFired
	errs    []string                 // exceptions, console errors, failed loads
	readErr error
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// chromiumFlags are the flags the test runs Chromium with: headless;
// no sandbox (CI runs as root, where Chromium refuses its sandbox); no
// GPU; /tmp rather than /dev/shm for shared memory (a container's
// /dev/shm is small; Debian's wrapper means to add the flag then, but
// its check fails when findmnt lists two mounts there); a fresh profile.
func chromiumFlags(profile string) []string {
	return []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--remote-debugging-pipe", "--user-data-dir=" + profile, "--no-first-run", "--no-default-browser-check",
		"--disable-background-networking", "--disable-extensions", "about:blank"}
}

// launchChromium starts the browser; the test's cleanup closes it.
func launchChromium(t *testing.T, bin string) *chromium {
	t.Helper()
	dir := t.TempDir()
	cmdR, cmdW, err := os.Pipe()
	require.NoError(t, err)
	evR, evW, err := os.Pipe()
	require.NoError(t, err)
	b := &chromium{toB: cmdW, exited: make(chan error, 1), waiting: map[int]chan cdpMessage{}, loaded: map[string]chan struct{}{}}
	b.cmd = exec.Command(bin, chromiumFlags(dir)...)
	b.cmd.ExtraFiles = []*os.File{cmdR, evW} // fds 3 and 4
	b.cmd.Stderr = &b.stderr
	b.cmd.Env = append(os.Environ(), "HOME="+dir) // its caches and crash reports stay in the test's directory
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, b.cmd.Start())
	cmdR.Close()
	evW.Close()
	go func() { b.exited <- b.cmd.Wait() }()
	go b.read(evR)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.call(ctx, "", "Browser.close", nil, nil)
		cmdW.Close()
		select {
		case <-b.exited:
		case <-ctx.Done():
			t.Logf("chromium did not exit after Browser.close; killing it")
			_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
			<-b.exited
		}
		// Its helpers (zygote, GPU, network) are in its process group.
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		evR.Close()
	})
	var v struct {
		Product string `json:"product"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, b.call(ctx, "", "Browser.getVersion", nil, &v), "chromium's stderr:\n%s", b.stderr.String())
	t.Logf("browser: %s", v.Product)
	return b
}

// read dispatches the browser's messages until the pipe closes.
func (b *chromium) read(r *os.File) {
	defer r.Close()
	br := bufio.NewReader(r)
	var err error
	for {
		var line []byte
		line, err = br.ReadBytes(0)
		if err != nil {
			break
		}
		var m cdpMessage
		if err = json.Unmarshal(line[:len(line)-1], &m); err != nil {
			break
		}
		b.dispatch(m)
	}
	b.mu.Lock()
	b.readErr = err
	for id, ch := range b.waiting {
		close(ch)
		delete(b.waiting, id)
	}
	b.mu.Unlock()
}

func (b *chromium) dispatch(m cdpMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.ID != 0 {
		if ch, ok := b.waiting[m.ID]; ok {
			ch <- m
			delete(b.waiting, m.ID)
		}
		return
	}
	switch m.Method {
	case "Page.loadEventFired":
		if ch, ok := b.loaded[m.SessionID]; ok {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	case "Runtime.exceptionThrown":
		b.errs = append(b.errs, "exception: "+string(m.Params))
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Params, &p) == nil && (p.Type == "error" || p.Type == "assert") {
			b.errs = append(b.errs, "console: "+string(m.Params))
		}
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Level string `json:"level"`
			} `json:"entry"`
		}
		if json.Unmarshal(m.Params, &p) == nil && p.Entry.Level == "error" {
			b.errs = append(b.errs, "log: "+string(m.Params))
		}
	}
}

// call sends a command and decodes its result into result (when not nil).
func (b *chromium) call(ctx context.Context, session, method string, params, result any) error {
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return fmt.Errorf("%s: the browser's pipe: %w", method, b.readErr)
	}
	b.next++
	id := b.next
	ch := make(chan cdpMessage, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	buf, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.toB.Write(append(buf, 0)); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: the browser closed its pipe", method)
		}
		if m.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		if result != nil {
			return json.Unmarshal(m.Result, result)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

func (b *chromium) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// tab is a page open in the browser.
type tab struct {
	b       *chromium
	session string
}

// open opens url in a new tab and waits for its load event.
func (b *chromium) open(t *testing.T, url string) *tab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var target struct {
		TargetID string `json:"targetId"`
	}
	require.NoError(t, b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target))
	var att struct {
		SessionID string `json:"sessionId"`
	}
	require.NoError(t, b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att))
	loaded := make(chan struct{}, 1)
	b.mu.Lock()
	b.loaded[att.SessionID] = loaded
	b.mu.Unlock()
	for _, m := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		require.NoError(t, b.call(ctx, att.SessionID, m, nil, nil))
	}
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	require.NoError(t, b.call(ctx, att.SessionID, "Page.navigate", map[string]any{"url": url}, &nav))
	require.Empty(t, nav.ErrorText, "navigating to %s", url)
	select {
	case <-loaded:
	case <-ctx.Done():
		t.Fatalf("%s did not load: %v", url, ctx.Err())
	}
	return &tab{b: b, session: att.SessionID}
}

// eval evaluates a JavaScript expression in the page and returns its
// value, awaited when it is a promise.
func (p *tab) eval(t *testing.T, expr string) json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails json.RawMessage `json:"exceptionDetails"`
	}
	require.NoError(t, p.b.call(ctx, p.session, "Runtime.evaluate",
		map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true}, &r))
	require.Empty(t, r.ExceptionDetails, "evaluating %s", expr)
	return r.Result.Value
}

// watch has the page set window.testSaw[name] once the JavaScript
// condition holds, as a MutationObserver sees the document change: for
// states that last only until the next poll.
func (p *tab) watch(t *testing.T, name, cond string) {
	t.Helper()
	p.eval(t, `window.testSaw = window.testSaw || {};
		window.testSaw.`+name+` = false;
		new MutationObserver((_, obs) => {
			try { if (`+cond+`) { window.testSaw.`+name+` = true; obs.disconnect(); } } catch (e) { /* not yet */ }
		}).observe(document.documentElement, {subtree: true, childList: true, characterData: true, attributes: true});
		""`)
}

// waitFor waits until the JavaScript condition holds in the page, as
// a MutationObserver sees the document change, and returns the
// serialized DOM then. After 20 s it fails, showing the DOM it has.
func (p *tab) waitFor(t *testing.T, cond string) string {
	t.Helper()
	expr := `new Promise((resolve) => {
		const holds = () => { try { return !!(` + cond + `); } catch (e) { return false; } };
		let obs, timer;
		const finish = (ok) => {
			obs.disconnect();
			clearTimeout(timer);
			resolve({ok: ok, dom: document.documentElement.outerHTML});
		};
		obs = new MutationObserver(() => { if (holds()) finish(true); });
		obs.observe(document.documentElement, {subtree: true, childList: true, characterData: true, attributes: true});
		timer = setTimeout(() => finish(holds()), 20000);
		if (holds()) finish(true);
	})`
	var r struct {
		OK  bool   `json:"ok"`
		DOM string `json:"dom"`
	}
	require.NoError(t, json.Unmarshal(p.eval(t, expr), &r))
	// The page's own script and style are no part of what it shows.
	r.DOM = regexp.MustCompile(`(?s)<(script|style)>.*?</(script|style)>`).ReplaceAllString(r.DOM, "")
	if !r.OK {
		t.Fatalf("the page did not come to show %s; it shows:\n%s\nits errors: %q", cond, r.DOM, p.b.problems())
	}
	return r.DOM
}
