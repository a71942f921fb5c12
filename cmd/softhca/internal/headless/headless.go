// Package headless drives a real headless Chromium over the DevTools
// protocol on a pipe (--remote-debugging-pipe), for the tests of the
// daemon's web page: the daemon's TestWebPage and cmd/softhca's
// TestEndToEnd. It is for tests only: like a test helper, its functions
// take the test, fail it when the browser does not answer, and Find skips
// it when no Chromium is installed.
//
// A test finds the browser, launches it, opens the page and waits for
// what the page shows:
//
//	b := headless.Launch(t, headless.Find(t))
//	page := b.Open(t, "http://"+addr+"/")
//	dom := page.WaitFor(t, `document.querySelector('#conn').dataset.state === "live"`)
//	require.Empty(t, b.Problems())
//
// WaitFor waits with a MutationObserver in the page, never with sleeps in
// the test. --dump-dom is no use for a page that follows a stream: without
// --virtual-time-budget it dumps the page as soon as it has loaded, before
// the stream's first events, and with it, it never dumps, as virtual time
// stands still while a request is open and the stream stays open.
package headless

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Find returns a Chromium or Chrome binary on PATH. Without one it skips
// the test, saying so, except under CI=true, where it fails: CI installs
// chromium.
func Find(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium, chromium-browser or google-chrome in PATH (apt-get install chromium): the web page was not checked in a browser"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI installs chromium, so this is a failure there")
	}
	t.Skip(msg)
	return ""
}

// Browser is a headless Chromium driven over the DevTools protocol on a
// pipe: commands are JSON objects, each followed by a NUL byte, written
// to the browser's fd 3; answers and events come the same way on fd 4.
type Browser struct {
	cmd    *exec.Cmd
	toB    *os.File
	stderr lockedBuffer
	exited chan error

	mu      sync.Mutex
	next    int
	waiting map[int]chan message
	loaded  map[string]chan struct{} // by session: Page.loadEventFired
	errs    []string                 // exceptions, console errors, failed loads
	readErr error
}

// message is one message of the DevTools protocol: a command's answer
// (ID) or an event (Method).
type message struct {
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

// flags are the flags Chromium runs with: headless; no sandbox (CI runs
// as root, where Chromium refuses its sandbox); no GPU; /tmp rather than
// /dev/shm for shared memory (a container's /dev/shm is small; Debian's
// wrapper means to add the flag then, but its check fails when findmnt
// lists two mounts there); a fresh profile.
func flags(profile string) []string {
	return []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--remote-debugging-pipe", "--user-data-dir=" + profile, "--no-first-run", "--no-default-browser-check",
		"--disable-background-networking", "--disable-extensions", "about:blank"}
}

// Launch starts the browser bin (from Find); the test's cleanup closes
// it, and kills it and its helpers if it does not exit.
func Launch(t testing.TB, bin string) *Browser {
	t.Helper()
	dir := t.TempDir()
	cmdR, cmdW, err := os.Pipe()
	require.NoError(t, err)
	evR, evW, err := os.Pipe()
	require.NoError(t, err)
	b := &Browser{toB: cmdW, exited: make(chan error, 1), waiting: map[int]chan message{}, loaded: map[string]chan struct{}{}}
	b.cmd = exec.Command(bin, flags(dir)...)
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

// Problems returns what went wrong in the browser's pages so far: their
// JavaScript exceptions, console errors and assertions, and the errors
// the browser logged (a failed load, a refused request).
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// read dispatches the browser's messages until the pipe closes.
func (b *Browser) read(r *os.File) {
	defer r.Close()
	br := bufio.NewReader(r)
	var err error
	for {
		var line []byte
		line, err = br.ReadBytes(0)
		if err != nil {
			break
		}
		var m message
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

func (b *Browser) dispatch(m message) {
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
func (b *Browser) call(ctx context.Context, session, method string, params, result any) error {
	b.mu.Lock()
	if b.readErr != nil {
		b.mu.Unlock()
		return fmt.Errorf("%s: the browser's pipe: %w", method, b.readErr)
	}
	b.next++
	id := b.next
	ch := make(chan message, 1)
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

// lockedBuffer is a buffer the browser's output goroutine writes to
// while the test may read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
