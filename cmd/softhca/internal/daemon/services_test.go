package daemon_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/softhca/softhca/cmd/softhca/internal/daemon"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

// echoRun is a service run: it accepts one client, makes a QP on the
// daemon's device with a receive posted, answers "ready", and waits for
// the client to hang up, for the QP's receive to flush, or for ctx.
type echoRun struct {
	mu      sync.Mutex
	flushed []verbs.WC // completions the runs saw
	ready   chan struct{}
}

func (e *echoRun) run(ctx context.Context, dev *hca.Device, ln net.Listener, _ io.Writer) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	c, err := ln.Accept()
	stop()
	if err != nil {
		return err
	}
	defer c.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Dealloc()
	ch, err := dev.CreateCompChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	cq, err := dev.CreateCQ(4, ch, nil, 0)
	if err != nil {
		return err
	}
	defer cq.Destroy(context.Background())
	buf := make([]byte, 64)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	qp, err := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	defer qp.Destroy(context.Background())
	if err := qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return err
	}
	if _, err := qp.PostRecv(&verbs.RecvWR{WRID: 42, SGList: []verbs.SGE{mr.SGE(0, 64)}}); err != nil {
		return err
	}
	if err := cq.ReqNotify(false); err != nil {
		return err
	}
	if _, err := c.Write([]byte("ready\n")); err != nil {
		return err
	}
	e.ready <- struct{}{}
	hangup := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, c); close(hangup) }()
	events := make(chan struct{})
	go func() {
		if _, err := ch.GetEvent(context.Background()); err == nil {
			close(events)
		}
	}()
	select {
	case <-hangup:
		return nil
	case <-events:
		wcs := make([]verbs.WC, 4)
		n := cq.Poll(wcs)
		e.mu.Lock()
		e.flushed = append(e.flushed, wcs[:n]...)
		e.mu.Unlock()
		cq.AckEvents(1)
		return errors.New("the QP flushed")
	}
}

// TestServices: a service serves one client after another; status counts
// them; stopping the daemon while a run holds a QP delivers the QP's
// flush completion to the run before it ends.
func TestServices(t *testing.T) {
	e := &echoRun{ready: make(chan struct{}, 4)}
	cfg := daemon.Config{Listen: lo, Control: filepath.Join(t.TempDir(), "d.sock"),
		Services: []daemon.Service{{Name: "echo", Addr: "127.0.0.1:0", Run: e.run}}}
	d, err := daemon.Start(cfg)
	require.NoError(t, err)
	var st control.Status
	c := dial(t, d)
	require.NoError(t, c.Call(context.Background(), control.Request{Op: control.OpStatus}, &st))
	require.Len(t, st.Services, 1)
	addr := st.Services[0].Listen
	client := func() net.Conn {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		line, err := bufio.NewReader(conn).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "ready\n", line)
		<-e.ready
		return conn
	}
	for range 2 {
		conn := client()
		conn.Close()
	}
	// The third client holds its run while the daemon stops.
	conn := client()
	defer conn.Close()
	require.NoError(t, d.Stop())
	e.mu.Lock()
	defer e.mu.Unlock()
	require.Len(t, e.flushed, 1)
	require.Equal(t, uint64(42), e.flushed[0].WRID)
	require.Equal(t, verbs.WCWRFlushErr, e.flushed[0].Status)
	_, err = net.Dial("tcp", addr)
	require.Error(t, err, "the service's port is closed")
}

// TestServiceAddrInUse: a service whose port is taken fails the start
// with ErrAddrInUse, and nothing stays open.
func TestServiceAddrInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	e := &echoRun{ready: make(chan struct{}, 1)}
	path := filepath.Join(t.TempDir(), "d.sock")
	_, err = daemon.Start(daemon.Config{Listen: lo, Control: path,
		Services: []daemon.Service{{Name: "echo", Addr: l.Addr().String(), Run: e.run}}})
	require.ErrorIs(t, err, daemon.ErrAddrInUse)
	require.ErrorContains(t, err, "service echo: TCP "+l.Addr().String()+" is in use")
	_, err = control.Dial(path)
	require.ErrorIs(t, err, control.ErrNoDaemon)
}

// TestServiceRunTimeout: a run whose client never finishes ends after
// the run timeout, counted from the accept (not from the wait for a
// client), and the responder serves the next client.
func TestServiceRunTimeout(t *testing.T) {
	runs := make(chan struct{}, 4)
	hold := func(ctx context.Context, _ *hca.Device, ln net.Listener, _ io.Writer) error {
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		c, err := ln.Accept()
		stop()
		if err != nil {
			return err
		}
		defer c.Close()
		runs <- struct{}{}
		<-ctx.Done() // a client that never finishes
		return ctx.Err()
	}
	var logs syncBuffer
	d, err := daemon.Start(daemon.Config{Listen: lo, Control: filepath.Join(t.TempDir(), "d.sock"),
		RunTimeout: 50 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Services: []daemon.Service{{Name: "hold", Addr: "127.0.0.1:0", Run: hold}}})
	require.NoError(t, err)
	defer d.Stop()
	var st control.Status
	require.NoError(t, dial(t, d).Call(context.Background(), control.Request{Op: control.OpStatus}, &st))
	for range 2 {
		c, err := net.Dial("tcp", st.Services[0].Listen)
		require.NoError(t, err)
		defer c.Close()
		<-runs // accepted; the second only once the first run timed out
	}
	require.Contains(t, logs.String(), "the run took longer than the run timeout")
}
