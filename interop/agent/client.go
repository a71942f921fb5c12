package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Client runs commands through the agent at Addr ("10.77.0.2:17070").
type Client struct {
	Addr string
	// DialTimeout bounds connecting; default 5 s.
	DialTimeout time.Duration
}

// Result is a finished command.
type Result struct {
	Argv   []string
	Stdout []byte
	Stderr []byte
	Exit   Exit
}

// Output returns stdout and stderr for a failure message, each labelled
// and trimmed to its last limit bytes.
func (r *Result) Output(limit int) string {
	return fmt.Sprintf("stdout:\n%s\nstderr:\n%s", tail(r.Stdout, limit), tail(r.Stderr, limit))
}

func tail(b []byte, limit int) string {
	if limit > 0 && len(b) > limit {
		return "[... " + fmt.Sprint(len(b)-limit) + " bytes cut ...]" + string(b[len(b)-limit:])
	}
	return string(b)
}

// Proc is a command started with Start.
type Proc struct {
	req  Request
	conn net.Conn
	done chan struct{}
	res  Result
	err  error

	stdout, stderr lockedBuffer
	once           sync.Once
}

// Start sends req and returns at once; the command runs until it exits,
// its Timeout expires, ctx is done, or the Proc is closed. Output goes to
// the Result and, when not nil, to the tee writers as it arrives.
func (c *Client) Start(ctx context.Context, req Request, teeOut, teeErr io.Writer) (*Proc, error) {
	dt := c.DialTimeout
	if dt == 0 {
		dt = 5 * time.Second
	}
	d := net.Dialer{Timeout: dt}
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("agent %s: %w", c.Addr, err)
	}
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent %s: sending request: %w", c.Addr, err)
	}
	p := &Proc{req: req, conn: conn, done: make(chan struct{})}
	p.res.Argv = req.Argv
	go p.read(teeOut, teeErr)
	go func() {
		select {
		case <-ctx.Done():
			p.Close()
		case <-p.done:
		}
	}()
	return p, nil
}

func (p *Proc) read(teeOut, teeErr io.Writer) {
	defer close(p.done)
	defer p.conn.Close()
	dec := json.NewDecoder(p.conn)
	for {
		var f Frame
		if err := dec.Decode(&f); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				err = errors.New("connection closed before the command's exit status arrived")
			}
			p.err = fmt.Errorf("agent: %v: %w", p.req.Argv, err)
			break
		}
		if f.Exit != nil {
			p.res.Exit = *f.Exit
			break
		}
		switch f.Stream {
		case "out":
			p.stdout.Write(f.Data)
			if teeOut != nil {
				teeOut.Write(f.Data)
			}
		case "err":
			p.stderr.Write(f.Data)
			if teeErr != nil {
				teeErr.Write(f.Data)
			}
		}
	}
	p.res.Stdout = p.stdout.Bytes()
	p.res.Stderr = p.stderr.Bytes()
}

// Close abandons the command: the agent kills it. Wait then returns.
func (p *Proc) Close() { p.once.Do(func() { p.conn.Close() }) }

// Wait waits for the command to end and returns its result. The error is
// not nil when the exit status never arrived (the connection broke or the
// Proc was closed); the Result then holds the output received so far.
func (p *Proc) Wait() (Result, error) {
	<-p.done
	return p.res, p.err
}

// Done is closed when the command's result (or failure) is in.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stdout returns the standard output received so far.
func (p *Proc) Stdout() []byte { return p.stdout.Bytes() }

// Run runs req to completion.
func (c *Client) Run(ctx context.Context, req Request) (Result, error) {
	p, err := c.Start(ctx, req, nil, nil)
	if err != nil {
		return Result{Argv: req.Argv}, err
	}
	return p.Wait()
}

// WaitListen waits until a socket in the guest listens on TCP port port,
// for at most timeout.
func (c *Client) WaitListen(ctx context.Context, port int, timeout time.Duration) error {
	r, err := c.Run(ctx, Request{WaitListen: port, Timeout: timeout})
	if err != nil {
		return err
	}
	if !r.Exit.OK() {
		return fmt.Errorf("nothing listens on guest TCP port %d after %v (%s)", port, timeout, r.Exit)
	}
	return nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}
