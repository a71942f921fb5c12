package control_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/stretchr/testify/require"
)

// fake is a Handler with canned answers; its trace streams what is put
// into pkts until ctx is done.
type fake struct {
	pkts    chan *control.Packet
	mu      sync.Mutex
	traceOn int
	ended   chan struct{}
}

func newFake() *fake { return &fake{pkts: make(chan *control.Packet), ended: make(chan struct{}, 4)} }

func (f *fake) Call(_ context.Context, r control.Request) (any, error) {
	switch r.Op {
	case control.OpStatus:
		return map[string]any{"name": "softhca0"}, nil
	case control.OpRes:
		if r.Object == "srq" {
			return nil, control.Errorf(syscall.ENOENT, "no SRQs")
		}
		return []map[string]any{{"object": r.Object}}, nil
	default:
		return nil, errors.New("plain failure")
	}
}

func (f *fake) Trace(ctx context.Context, _ control.Request, sink control.TraceSink) error {
	f.mu.Lock()
	f.traceOn++
	f.mu.Unlock()
	defer func() { f.ended <- struct{}{} }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case p := <-f.pkts:
			if err := sink.Packet(p, 2); err != nil {
				return err
			}
			if err := sink.Flush(); err != nil {
				return err
			}
		}
	}
}

type served struct {
	path string
	srv  *control.Server
	h    *fake
}

func serve(t *testing.T, edit func(*control.Server)) *served {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ctl", "softhca0.sock")
	l, err := control.Listen(path)
	require.NoError(t, err)
	h := newFake()
	srv := &control.Server{Handler: h}
	if edit != nil {
		edit(srv)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, <-done)
	})
	return &served{path: path, srv: srv, h: h}
}

// raw is a connection that writes lines and reads responses.
type raw struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, path string) *raw {
	t.Helper()
	c, err := net.Dial("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &raw{c: c, br: bufio.NewReader(c)}
}

func (r *raw) send(t *testing.T, s string) {
	t.Helper()
	_, err := r.c.Write([]byte(s))
	require.NoError(t, err)
}

func (r *raw) recv(t *testing.T) control.Response {
	t.Helper()
	line, err := r.br.ReadBytes('\n')
	require.NoError(t, err)
	var resp control.Response
	require.NoError(t, json.Unmarshal(line, &resp), "%s", line)
	return resp
}

// closed asserts that the server closed the connection.
func (r *raw) closed(t *testing.T) {
	t.Helper()
	_, err := r.br.ReadByte()
	require.Error(t, err)
}

func TestCall(t *testing.T) {
	s := serve(t, nil)
	c, err := control.Dial(s.path)
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	var st map[string]string
	require.NoError(t, c.Call(ctx, control.Request{Op: control.OpStatus}, &st))
	require.Equal(t, "softhca0", st["name"])
	var qps []map[string]string
	require.NoError(t, c.Call(ctx, control.Request{Op: control.OpRes, Object: "qp"}, &qps))
	require.Equal(t, "qp", qps[0]["object"])
	// A handler's errno reaches the client; a plain error is EIO.
	err = c.Call(ctx, control.Request{Op: control.OpRes, Object: "srq"}, nil)
	require.ErrorIs(t, err, syscall.ENOENT)
	require.EqualError(t, err, "no SRQs")
	err = c.Call(ctx, control.Request{Op: control.OpStat}, nil)
	require.ErrorIs(t, err, syscall.EIO)
	// The connection is still good.
	require.NoError(t, c.Call(ctx, control.Request{Op: control.OpStatus}, nil))
}

// TestBadRequests: each malformed request gets EINVAL with a message
// that names the problem, and the connection stays usable; a line that
// is not JSON gets EINVAL and the connection is closed.
func TestBadRequests(t *testing.T) {
	s := serve(t, nil)
	r := dialRaw(t, s.path)
	for _, tc := range []struct{ req, msg string }{
		{`{"id":7,"op":"frobnicate"}`, `unknown op "frobnicate"`},
		{`{"id":8}`, `no "op"`},
		{`{"id":9,"op":"res"}`, `res: no "object"`},
		{`{"id":10,"op":"res","object":"ah"}`, `unknown object "ah"`},
		{`{"id":11,"op":"status","object":"qp"}`, `status takes no "object"`},
		{`{"id":12,"op":"status","verbose":true}`, `unknown field "verbose"`},
		{`{"id":13,"op":"trace","recent":-1}`, `"recent" is -1`},
		{`{"id":"x","op":"status"}`, `field "id": string is not a number`},
		{`[1,2]`, `a request is a JSON object`},
	} {
		r.send(t, tc.req+"\n")
		resp := r.recv(t)
		require.NotNil(t, resp.Error, tc.req)
		require.Equal(t, "EINVAL", resp.Error.Errno, tc.req)
		require.Equal(t, int(syscall.EINVAL), resp.Error.Code)
		require.Contains(t, resp.Error.Message, tc.msg, tc.req)
	}
	r.send(t, `{"id":14,"op":"status"}`+"\n")
	resp := r.recv(t)
	require.Nil(t, resp.Error)
	require.Equal(t, uint64(14), resp.ID)
}

// TestNotJSONCloses: a line that is not one JSON value is answered and
// the connection closed (its framing cannot be trusted).
func TestNotJSONCloses(t *testing.T) {
	s := serve(t, nil)
	for _, line := range []string{"GET / HTTP/1.1\r\n", `{"id":1,"op":"status"} {"id":2}` + "\n", "{\"id\":\n"} {
		r := dialRaw(t, s.path)
		r.send(t, line)
		resp := r.recv(t)
		require.Equal(t, "EINVAL", resp.Error.Errno, line)
		require.Contains(t, resp.Error.Message, "closing the connection")
		r.closed(t)
	}
	// The server still serves others.
	c, err := control.Dial(s.path)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Call(context.Background(), control.Request{Op: control.OpStatus}, nil))
}

func TestOversized(t *testing.T) {
	s := serve(t, nil)
	r := dialRaw(t, s.path)
	big := `{"id":1,"op":"status","object":"` + strings.Repeat("x", control.MaxRequest) + `"}` + "\n"
	go func() { _, _ = r.c.Write([]byte(big)) }() // the server stops reading part way
	resp := r.recv(t)
	require.Equal(t, "E2BIG", resp.Error.Errno)
	r.closed(t)
}

// TestSilentClient: a client that connects and never speaks is told so
// and disconnected; it holds no slot the next client needs.
func TestSilentClient(t *testing.T) {
	s := serve(t, func(s *control.Server) { s.IdleTimeout = 50 * time.Millisecond; s.MaxConns = 1 })
	r := dialRaw(t, s.path)
	resp := r.recv(t)
	require.Equal(t, "ETIMEDOUT", resp.Error.Errno)
	r.closed(t)
	c, err := control.Dial(s.path)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Call(context.Background(), control.Request{Op: control.OpStatus}, nil))
}

// TestMaxConns: a connection beyond the limit is refused with EBUSY at
// once; the ones being served are not disturbed.
func TestMaxConns(t *testing.T) {
	s := serve(t, func(s *control.Server) { s.MaxConns = 1 })
	c, err := control.Dial(s.path)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Call(context.Background(), control.Request{Op: control.OpStatus}, nil))
	r := dialRaw(t, s.path)
	resp := r.recv(t)
	require.Equal(t, "EBUSY", resp.Error.Errno)
	r.closed(t)
	require.NoError(t, c.Call(context.Background(), control.Request{Op: control.OpStatus}, nil))
}

// TestTrace: packets stream with the lost count; the client leaving ends
// the handler's stream; closing the server ends a stream too.
func TestTrace(t *testing.T) {
	s := serve(t, nil)
	c, err := control.Dial(s.path)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		done <- c.Trace(ctx, 0, func(p *control.Packet, lost uint64) error {
			got <- p.Summary
			if lost != 2 {
				return errors.New("lost count not passed")
			}
			return nil
		})
	}()
	s.h.pkts <- &control.Packet{Summary: "RC Send Only", Data: []byte{1, 2}}
	require.Equal(t, "RC Send Only", <-got)
	cancel()
	require.NoError(t, <-done)
	c.Close()
	<-s.h.ended // the handler saw the client go

	c2, err := control.Dial(s.path)
	require.NoError(t, err)
	defer c2.Close()
	done2 := make(chan error, 1)
	go func() {
		done2 <- c2.Trace(context.Background(), 0, func(*control.Packet, uint64) error { return nil })
	}()
	s.h.pkts <- &control.Packet{}
	s.srv.Close()
	<-s.h.ended
	require.Error(t, <-done2) // the daemon closed the stream
}

// TestListen: the socket is its owner's only; a live daemon's socket is
// not taken over; a stale one is; a path that is not a socket is left
// alone; closing removes the socket.
func TestListen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run", "d.sock")
	l, err := control.Listen(path)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), di.Mode().Perm())

	go func(l net.Listener) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}(l)
	_, err = control.Listen(path)
	require.ErrorIs(t, err, control.ErrInUse)
	require.NoError(t, l.Close())
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist)

	// A stale socket (its listener gone without removing it).
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	require.NoError(t, err)
	ul.SetUnlinkOnClose(false)
	ul.Close()
	l, err = control.Listen(path)
	require.NoError(t, err)
	l.Close()

	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("keep"), 0o644))
	_, err = control.Listen(file)
	require.ErrorIs(t, err, syscall.EEXIST)
	b, _ := os.ReadFile(file)
	require.Equal(t, "keep", string(b))
}

func TestDialNoDaemon(t *testing.T) {
	_, err := control.Dial(filepath.Join(t.TempDir(), "none.sock"))
	require.ErrorIs(t, err, control.ErrNoDaemon)
	require.ErrorContains(t, err, "softhca serve")
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	_, err := control.Find("", "")
	require.ErrorIs(t, err, control.ErrNoDaemon)
	p, err := control.Find("/x.sock", "a")
	require.NoError(t, err)
	require.Equal(t, "/x.sock", p)
	for _, bad := range []string{"a/../../b", "..", ".", "x/y"} {
		_, err = control.Find("", bad)
		require.ErrorIs(t, err, syscall.EINVAL, bad)
		require.ErrorContains(t, err, "a name has no slash")
	}
	p, err = control.Find("", "softhca1")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "softhca", "softhca1.sock"), p)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "softhca"), 0o700))
	for _, n := range []string{"a", "b"} {
		l, err := control.Listen(filepath.Join(dir, "softhca", n+".sock"))
		require.NoError(t, err)
		defer l.Close()
		p, err = control.Find("", "")
		if n == "a" {
			require.NoError(t, err)
			require.Equal(t, filepath.Join(dir, "softhca", "a.sock"), p)
		} else {
			require.ErrorContains(t, err, "2 daemons run (a, b): name one with -d NAME")
		}
	}
}

// FuzzParseRequest: no input panics; what parses is a request every
// check holds for, and encodes back to a line that parses the same.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{`{"id":1,"op":"status"}`, `{"op":"res","object":"qp"}`, `{"op":"trace","recent":100}`,
		`{"op":"res","object":"x"}`, `{`, `[]`, `{"id":-1}`, `{"op":"stat","extra":1}`, "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := control.ParseRequest(line)
		if err != nil {
			var ce *control.Error
			if !errors.As(err, &ce) || !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("error %v is not an EINVAL control.Error", err)
			}
			return
		}
		b, err := json.Marshal(r)
		require.NoError(t, err)
		r2, err := control.ParseRequest(b)
		require.NoError(t, err, "%s", b)
		require.Equal(t, r, r2)
	})
}
