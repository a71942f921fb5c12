package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/softhca/softhca/hca"
)

// Service is a responder the daemon runs for peers on the network: the
// server side of a pingpong or perftest test, served again and again,
// one client at a time, as the tool's own server serves one.
type Service struct {
	// Name says what it serves ("pingpong rc", "perf write_bw").
	Name string
	// Addr is the TCP address its clients connect to for the exchange
	// (":18515").
	Addr string
	// Run serves one client: it accepts one connection on ln, runs the
	// test on dev and returns. It must return when ctx is done. out
	// receives what the tool prints.
	Run func(ctx context.Context, dev *hca.Device, ln net.Listener, out io.Writer) error
}

// service is a running Service.
type service struct {
	Service
	ln     *net.TCPListener
	served atomic.Uint64 // clients accepted
}

// startServices listens on every service's address; the loops start
// once the device is up.
func (d *Daemon) startServices() error {
	for _, s := range d.cfg.Services {
		l, err := net.Listen("tcp", s.Addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("service %s: TCP %s is in use (another daemon's service, or the tool's own server): %w", s.Name, s.Addr, ErrAddrInUse)
			}
			return fmt.Errorf("service %s: %w", s.Name, err)
		}
		sv := &service{Service: s, ln: l.(*net.TCPListener)}
		d.services = append(d.services, sv)
	}
	for _, sv := range d.services {
		d.svcWG.Add(1)
		go d.serveLoop(sv)
	}
	return nil
}

// serveLoop runs a service until the daemon stops.
func (d *Daemon) serveLoop(sv *service) {
	defer d.svcWG.Done()
	log := d.log.With("service", sv.Name)
	out := &logWriter{log: log}
	for !d.stopping.Load() {
		_ = sv.ln.SetDeadline(time.Time{})
		ctx, cancel := context.WithCancel(d.stopCtx)
		var timer *time.Timer
		accepted := func() {
			if t := d.cfg.RunTimeout; t > 0 {
				timer = time.AfterFunc(t, cancel)
			}
		}
		err := sv.Run(ctx, d.dev, runListener{sv.ln, &sv.served, accepted}, out)
		timedOut := timer != nil && !timer.Stop()
		cancel()
		out.flush()
		if d.stopping.Load() {
			return
		}
		if timedOut {
			log.Warn("client ended: the run took longer than the run timeout", "timeout", d.cfg.RunTimeout, "err", err)
			continue
		}
		if err != nil {
			log.Warn("client failed", "err", err)
		} else {
			log.Info("client served")
		}
	}
}

// closeServiceListeners ends the runs waiting for a client; runs in
// progress end when the device closes (their QPs flush) or with the
// daemon's context.
func (d *Daemon) closeServiceListeners() {
	for _, sv := range d.services {
		sv.ln.Close()
	}
}

func (d *Daemon) serviceList() []control.Service {
	out := []control.Service{}
	for _, sv := range d.services {
		out = append(out, control.Service{Name: sv.Name, Listen: sv.ln.Addr().String(), Served: sv.served.Load()})
	}
	return out
}

// runListener is a service's listener as one run sees it: closing it
// (a tool closes its listener after accepting its one client, or to end
// an accept when its context ends) only ends the run's accept, so that
// the next run accepts on the same socket.
// It counts the clients it accepts (a client's exchange cannot end
// before its server accepted it, so a client that finished is counted).
type runListener struct {
	*net.TCPListener
	accepted *atomic.Uint64
	onAccept func() // starts the run's timeout
}

func (l runListener) Accept() (net.Conn, error) {
	c, err := l.TCPListener.Accept()
	if err == nil {
		l.accepted.Add(1)
		l.onAccept()
	}
	return c, err
}

func (l runListener) Close() error { return l.SetDeadline(time.Unix(1, 0)) }

// logWriter turns a tool's printed lines into log records (debug).
type logWriter struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.log.Debug("output", "line", string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) >= maxLogLine {
		// A line without its end yet: logged in pieces, not held whole.
		w.log.Debug("output", "line", string(w.buf))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

// maxLogLine bounds the part of a tool's line the log writer holds.
const maxLogLine = 4096

func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.log.Debug("output", "line", string(w.buf))
		w.buf = w.buf[:0]
	}
}
