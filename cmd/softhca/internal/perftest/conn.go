package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"
)

// conn is the out-of-band TCP connection of a test. Every exchange is
// symmetric and in lock step, as ctx_xchg_data and ctx_hand_shake do it:
// the client writes its message, then reads the server's; the server reads
// first, then writes. Each message goes out in one write, because perftest
// reads each with a single read(2) and fails on a short one.
type conn struct {
	c      net.Conn
	client bool
	stop   func() bool // stops the context watcher

	mu      sync.Mutex
	ctxDone bool // the context ended: errors say so

	// sizes records the size of every exchange made, in order: the
	// transcript the tests compare with perftest's.
	sizes []int
}

func newConn(ctx context.Context, c net.Conn, client bool) *conn {
	x := &conn{c: c, client: client}
	// A cancelled context unblocks any read or write in progress.
	x.stop = context.AfterFunc(ctx, func() {
		x.mu.Lock()
		x.ctxDone = true
		x.mu.Unlock()
		_ = c.SetDeadline(time.Unix(1, 0))
	})
	return x
}

// dial connects to a perftest server (ethernet_client_connect). Like
// perftest it tries once: the server must be listening.
func dial(ctx context.Context, server string, port int) (*conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(server, fmt.Sprint(port)))
	if err != nil {
		return nil, fmt.Errorf("cannot connect to %s port %d: %w", server, port, err)
	}
	return newConn(ctx, c, true), nil
}

// accept waits for one client on l (ethernet_server_connect), then closes
// l, as perftest does.
func accept(ctx context.Context, l net.Listener) (*conn, error) {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	c, err := l.Accept()
	l.Close()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("waiting for a client: %w", ctx.Err())
		}
		return nil, fmt.Errorf("waiting for a client: %w", err)
	}
	return newConn(ctx, c, false), nil
}

// local returns the connection's local IP address (IPv4-mapped addresses
// unmapped): the address the device binds unless told otherwise.
func (x *conn) local() netip.Addr {
	if a, ok := x.c.LocalAddr().(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip.Unmap()
	}
	return netip.Addr{}
}

// remote returns the peer's address for messages.
func (x *conn) remote() string { return x.c.RemoteAddr().String() }

func (x *conn) close() {
	x.stop()
	x.c.Close()
}

// exchange sends mine and returns the peer's message of n bytes, in the
// order the side's role requires. what names the exchange in errors.
func (x *conn) exchange(what string, mine []byte, n int) ([]byte, error) {
	theirs := make([]byte, n)
	var err error
	if x.client {
		if err = x.write(mine); err == nil {
			err = x.read(theirs)
		}
	} else {
		if err = x.read(theirs); err == nil {
			err = x.write(mine)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, x.explain(err))
	}
	x.sizes = append(x.sizes, n)
	return theirs, nil
}

func (x *conn) write(b []byte) error {
	_, err := x.c.Write(b)
	return err
}

func (x *conn) read(b []byte) error {
	_, err := io.ReadFull(x.c, b)
	return err
}

// explain turns I/O errors into what happened.
func (x *conn) explain(err error) error {
	x.mu.Lock()
	done := x.ctxDone
	x.mu.Unlock()
	switch {
	case done:
		return errors.New("interrupted (timeout or signal)")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the peer %s closed the connection (it may have failed, or run a different test or different options)", x.remote())
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errors.New("timed out")
	}
	return err
}
