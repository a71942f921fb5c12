package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Dir is the directory the daemon's control sockets are in by default:
// $XDG_RUNTIME_DIR/softhca when the variable is set (a user's own
// runtime directory), otherwise /run/softhca.
func Dir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "softhca")
	}
	return "/run/softhca"
}

// SocketPath is the default control socket of the device named name.
func SocketPath(name string) string { return filepath.Join(Dir(), name+".sock") }

// ErrNoDaemon is returned (wrapped) by Find and Dial when no daemon
// answers.
var ErrNoDaemon = errors.New("no softhca daemon is running")

// Find returns the control socket to use: path when it is set; else the
// socket of device name when that is set; else the only socket in Dir.
// It wraps ErrNoDaemon when there is none.
func Find(path, name string) (string, error) {
	if path != "" {
		return path, nil
	}
	if name != "" {
		if strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
			return "", fmt.Errorf("device name %q: a name has no slash (its socket is %s/NAME.sock; --control gives a path): %w", name, Dir(), syscall.EINVAL)
		}
		return SocketPath(name), nil
	}
	socks, _ := filepath.Glob(filepath.Join(Dir(), "*.sock"))
	switch len(socks) {
	case 0:
		return "", fmt.Errorf("%w (no control socket in %s; start one with `softhca serve`)", ErrNoDaemon, Dir())
	case 1:
		return socks[0], nil
	}
	names := make([]string, len(socks))
	for i, s := range socks {
		names[i] = strings.TrimSuffix(filepath.Base(s), ".sock")
	}
	return "", fmt.Errorf("%d daemons run (%s): name one with -d NAME", len(socks), strings.Join(names, ", "))
}

// Client is a connection to a daemon. Its methods are not safe for
// concurrent use.
type Client struct {
	path string
	c    net.Conn
	br   *bufio.Reader
	id   uint64
}

// Dial connects to the control socket at path. A socket nobody listens
// on, or no socket, wraps ErrNoDaemon; a socket the user may not open
// wraps EACCES.
func Dial(path string) (*Client, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("%w at %s (start one with `softhca serve`)", ErrNoDaemon, path)
		case errors.Is(err, fs.ErrPermission):
			return nil, fmt.Errorf("%s: permission denied: the socket is only for the user who started the daemon: %w", path, syscall.EACCES)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Client{path: path, c: c, br: bufio.NewReaderSize(c, 64<<10)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.c.Close() }

// Path returns the socket's path.
func (c *Client) Path() string { return c.path }

// Call sends r and decodes the result into result (which may be nil).
// A failed request returns its *Error.
func (c *Client) Call(ctx context.Context, r Request, result any) error {
	resp, err := c.roundTrip(ctx, r)
	if err != nil {
		return err
	}
	if resp.Error != nil {
		return resp.Error
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Result, result); err != nil {
		return fmt.Errorf("%s: the daemon's answer to %s does not decode: %w", c.path, r.Op, err)
	}
	return nil
}

// Raw sends r and returns the result as the daemon sent it.
func (c *Client) Raw(ctx context.Context, r Request) (json.RawMessage, error) {
	resp, err := c.roundTrip(ctx, r)
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	return resp.Result, nil
}

func (c *Client) roundTrip(ctx context.Context, r Request) (*Response, error) {
	c.id++
	r.ID = c.id
	if err := c.send(ctx, r); err != nil {
		return nil, err
	}
	return c.recv(ctx)
}

func (c *Client) send(ctx context.Context, r Request) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.c.SetWriteDeadline(d)
	}
	if _, err := c.c.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: %w", c.path, err)
	}
	return nil
}

func (c *Client) recv(ctx context.Context) (*Response, error) {
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	line, err := readLimited(c.br, maxResponse)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, errTooLong) {
			return nil, fmt.Errorf("%s: an answer longer than %d bytes: %w", c.path, maxResponse, syscall.E2BIG)
		}
		return nil, fmt.Errorf("%s: the daemon closed the connection: %w", c.path, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, fmt.Errorf("%s: the daemon's answer does not decode: %w", c.path, err)
	}
	return &resp, nil
}

// maxResponse bounds one answer: the largest, res of a device's every
// object, is well below it.
const maxResponse = 64 << 20

// readLimited reads a line of at most max bytes, newline included.
func readLimited(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, errTooLong
		}
		line = append(line, chunk...)
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// Trace asks for the packet stream (the recent ones first, up to recent)
// and calls f for each packet until ctx is done (then it returns nil),
// f fails, or the daemon ends the stream.
func (c *Client) Trace(ctx context.Context, recent int, f func(p *Packet, lost uint64) error) error {
	c.id++
	if err := c.send(ctx, Request{ID: c.id, Op: OpTrace, Recent: recent}); err != nil {
		return err
	}
	for {
		resp, err := c.recv(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if resp.Error != nil {
			return resp.Error
		}
		if resp.Packet == nil {
			continue
		}
		if err := f(resp.Packet, resp.Lost); err != nil {
			return err
		}
	}
}
