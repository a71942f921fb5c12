package headless

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tab is a page open in the browser.
type Tab struct {
	b       *Browser
	session string
}

// Open opens url in a new tab and waits for its load event.
func (b *Browser) Open(t testing.TB, url string) *Tab {
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
	return &Tab{b: b, session: att.SessionID}
}

// Eval evaluates a JavaScript expression in the page and returns its
// value as JSON, awaited when it is a promise. An exception fails the
// test.
func (p *Tab) Eval(t testing.TB, expr string) json.RawMessage {
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

// WaitFor waits until the JavaScript condition holds in the page, as a
// MutationObserver sees the document change (a condition that throws
// does not hold yet), and returns the serialized DOM then, without the
// page's own script and style. After 20 s it fails the test, showing the
// DOM it has and the browser's problems.
func (p *Tab) WaitFor(t testing.TB, cond string) string {
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
	require.NoError(t, json.Unmarshal(p.Eval(t, expr), &r))
	r.DOM = scriptStyle.ReplaceAllString(r.DOM, "")
	if !r.OK {
		t.Fatalf("the page did not come to show %s; it shows:\n%s\nits errors: %q", cond, r.DOM, p.b.Problems())
	}
	return r.DOM
}

// scriptStyle matches the page's own script and style, no part of what
// it shows.
var scriptStyle = regexp.MustCompile(`(?s)<(script|style)>.*?</(script|style)>`)
