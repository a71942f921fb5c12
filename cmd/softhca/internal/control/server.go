package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"
)

// Handler answers requests. Its methods run on the connections'
// goroutines, concurrently.
type Handler interface {
	// Call answers a request of any operation but OpTrace; the result is
	// marshalled to JSON.
	Call(ctx context.Context, r Request) (any, error)
	// Trace streams packets into sink until ctx is done (the client left
	// or the server closes) or the sink fails. It calls sink.Flush
	// before it waits for more packets.
	Trace(ctx context.Context, r Request, sink TraceSink) error
}

// TraceSink receives a trace stream. Packet may buffer (a stream under
// load writes many packets with one system call); Flush delivers what is
// buffered, and is called whenever the stream is about to wait.
type TraceSink interface {
	// Packet takes one packet; lost counts those the stream left out
	// just before it.
	Packet(p *Packet, lost uint64) error
	Flush() error
}

// connSink writes a trace stream's responses to a connection through a
// buffer.
type connSink struct {
	s  *Server
	c  net.Conn
	id uint64
	bw *bufio.Writer
}

func (k *connSink) Packet(p *Packet, lost uint64) error {
	if k.bw.Buffered() == 0 {
		k.s.setWriteDeadline(k.c) // the deadline covers the whole batch
	}
	return writeResponse(k.bw, &Response{ID: k.id, Packet: p, Lost: lost})
}

func (k *connSink) Flush() error { return k.bw.Flush() }

// Defaults of Server's limits.
const (
	DefaultIdleTimeout  = 30 * time.Second
	DefaultWriteTimeout = 10 * time.Second
	DefaultMaxConns     = 64
)

// Server serves the control protocol.
type Server struct {
	Handler Handler
	// Log receives a line per connection problem (nil: discarded).
	Log *slog.Logger
	// IdleTimeout is how long a connection may go without a complete
	// request (not while a trace streams).
	IdleTimeout time.Duration
	// WriteTimeout bounds each response's write: a client that does not
	// read is disconnected.
	WriteTimeout time.Duration
	// MaxConns is how many connections are served at once.
	MaxConns int

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	ls     []net.Listener
	closed bool
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

func (s *Server) init() {
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
		s.ctx, s.cancel = context.WithCancel(context.Background())
	}
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}

// Serve accepts connections on l until l or the server is closed; it
// then returns nil (after Close) or the listener's error.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	s.init()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.ls = append(s.ls, l)
	s.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if !s.track(c) {
			continue
		}
		go s.serve(c)
	}
}

// track registers a new connection, or refuses it (EBUSY) when
// MaxConns are open or the server is closing.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	max := s.MaxConns
	if max <= 0 {
		max = DefaultMaxConns
	}
	if s.closed || len(s.conns) >= max {
		e := Errorf(syscall.EBUSY, "the daemon serves %d control connections at once; try again when one closes", max)
		if s.closed {
			e = Errorf(syscall.ESHUTDOWN, "the daemon is stopping")
		}
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_ = writeResponse(c, &Response{Error: e})
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

// Close stops accepting, ends every connection (a trace stream's
// context is cancelled) and waits for their goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	s.init()
	s.closed = true
	for _, l := range s.ls {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

func (s *Server) serve(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
		s.wg.Done()
	}()
	idle := s.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	br := bufio.NewReaderSize(c, 4096)
	for {
		_ = c.SetReadDeadline(time.Now().Add(idle))
		line, err := readLine(br)
		switch {
		case errors.Is(err, errTooLong):
			s.reply(c, &Response{Error: Errorf(syscall.E2BIG, "request longer than %d bytes: closing the connection", MaxRequest)})
			return
		case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			return
		case err != nil:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				s.reply(c, &Response{Error: Errorf(syscall.ETIMEDOUT, "no request for %v: closing the connection", idle)})
			}
			return
		}
		r, err := ParseRequest(line)
		if err != nil {
			resp := &Response{ID: r.ID, Error: toError(err)}
			if !json.Valid(line) {
				// Not JSON at all: nothing more on this connection can be
				// trusted to be framed.
				resp.Error.Message += ": closing the connection"
				s.reply(c, resp)
				return
			}
			if !s.reply(c, resp) {
				return
			}
			continue
		}
		if r.Op == OpTrace {
			s.trace(c, br, r)
			return
		}
		res, err := s.Handler.Call(s.ctx, r)
		resp := &Response{ID: r.ID}
		if err == nil {
			resp.Result, err = json.Marshal(res)
		}
		if err != nil {
			resp.Result, resp.Error = nil, toError(err)
		}
		if !s.reply(c, resp) {
			return
		}
	}
}

// trace streams until the client closes its end (anything it sends is
// ignored), the server closes, or a write fails.
func (s *Server) trace(c net.Conn, br *bufio.Reader, r Request) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	_ = c.SetReadDeadline(time.Time{})
	go func() {
		_, _ = io.Copy(io.Discard, br)
		cancel()
	}()
	sink := &connSink{s: s, c: c, id: r.ID, bw: bufio.NewWriterSize(c, 64<<10)}
	err := s.Handler.Trace(ctx, r, sink)
	if err == nil {
		err = sink.Flush()
	}
	if err != nil {
		s.log().Debug("trace stream ended", "err", err)
	}
	if err != nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) && !isNetError(err) {
		s.reply(c, &Response{ID: r.ID, Error: toError(err)})
	}
}

// isNetError reports a failed write to the connection (the client went
// away or does not read): nothing more can be said on it.
func isNetError(err error) bool {
	var oe *net.OpError // not net.Error: a syscall.Errno is one too
	return errors.As(err, &oe)
}

// setWriteDeadline gives the next writes WriteTimeout.
func (s *Server) setWriteDeadline(c net.Conn) {
	wt := s.WriteTimeout
	if wt <= 0 {
		wt = DefaultWriteTimeout
	}
	_ = c.SetWriteDeadline(time.Now().Add(wt))
}

// reply writes one response; false when the connection is gone.
func (s *Server) reply(c net.Conn, r *Response) bool {
	s.setWriteDeadline(c)
	if err := writeResponse(c, r); err != nil {
		s.log().Debug("control connection dropped", "err", err)
		return false
	}
	return true
}

func writeResponse(w io.Writer, r *Response) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

var errTooLong = errors.New("line too long")

// readLine reads one line of at most MaxRequest bytes, newline included,
// and returns it without the newline.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxRequest {
			return nil, errTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, nil // a last request without its newline
		default:
			return nil, err
		}
	}
}
