// Package daemon is `softhca serve`: a soft HCA that outlives the
// commands that use it. It owns one hca.Device on a UDP address (or, with
// Config.Tap, on a TAP interface, a host of its own there), the
// named target memory regions peers use, a ring of recently traced
// packets, and the servers that show them: the control API on a Unix
// socket (package control), and optionally a Prometheus endpoint and a
// web page.
//
// # Goroutines
//
// Start opens everything on the caller's goroutine and starts one
// goroutine per server (control, HTTP, metrics) and per service (the
// pingpong and perftest responders), the servers one per connection. The
// device's own goroutines (the transport) call the tracer's hook for
// every packet; it only copies the packet into a fixed ring. Stop, from
// any goroutine, runs the shutdown once: the device closes, which moves
// every QP to the error state (each outstanding work request completes
// with a flush error, which the services' runs see) and closes its link;
// the services stop taking clients; then the runs, the streams and the
// servers end, and the control socket is removed.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// ErrAddrInUse is wrapped by Start when the device's UDP address or the
// control socket is taken.
var ErrAddrInUse = errors.New("address in use")

// Daemon is a running soft HCA.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	now     func() time.Time
	started time.Time
	listen  netip.AddrPort
	control string
	// tap and mac are the TAP interface and the device's MAC there
	// (Config.Tap); tap is "" for a device on UDP.
	tap string
	mac [6]byte

	dev     *hca.Device
	pd      *hca.PD
	regions []region
	tr      *tracer

	ctl      *control.Server
	ctlLn    net.Listener
	httpSrv  *http.Server
	httpAddr string
	metSrv   *http.Server
	metAddr  string
	// sseStreams counts the web page's packet streams open (http.go).
	sseStreams atomic.Int32

	// stopCtx ends when the shutdown begins: streams (web, trace) that
	// would keep a server's Shutdown waiting end with it.
	stopCtx    context.Context
	stopCancel context.CancelFunc

	services []*service
	svcWG    sync.WaitGroup
	stopping atomic.Bool // the shutdown began: service loops end

	wg       sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
	flushErr error // checkFlushed's finding
}

// region is a registered named region.
type region struct {
	Region
	buf []byte
	mr  *hca.MR
}

// Start opens the device and its servers. On error nothing stays open.
func Start(cfg Config) (_ *Daemon, err error) {
	if cfg.Name == "" {
		cfg.Name = "softhca0"
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	d := &Daemon{cfg: cfg, log: cfg.Log, now: cfg.Now}
	d.stopCtx, d.stopCancel = context.WithCancel(context.Background())
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.now == nil {
		d.now = time.Now
	}
	d.started = d.now()
	defer func() {
		if err != nil {
			d.closeAll()
		}
	}()
	d.listen = cfg.Listen
	if cfg.Tap.Name != "" && !d.listen.IsValid() {
		// A TAP host has none of this machine's addresses to default to.
		return nil, fmt.Errorf("TAP %s: the device needs an address of its own (Listen): %w", cfg.Tap.Name, syscall.EINVAL)
	}
	if !d.listen.IsValid() {
		a, err := primaryAddr()
		if err != nil {
			return nil, err
		}
		d.listen = netip.AddrPortFrom(a, wire.RoCEv2Port)
	}
	if err := d.openDevice(); err != nil {
		return nil, err
	}
	if err := d.registerRegions(); err != nil {
		return nil, err
	}
	if err := d.startServices(); err != nil {
		return nil, err
	}
	d.control = cfg.Control
	if d.control == "" {
		d.control = control.SocketPath(cfg.Name)
	}
	ln, err := control.Listen(d.control)
	if err != nil {
		if errors.Is(err, control.ErrInUse) {
			return nil, fmt.Errorf("control socket %s: another softhca daemon answers there (stop it, or give this one --control PATH and another --name): %w", d.control, ErrAddrInUse)
		}
		return nil, err
	}
	d.ctlLn = ln
	d.ctl = &control.Server{Handler: &api{d: d}, Log: d.log}
	d.goServe("control", func() error { return d.ctl.Serve(ln) })
	if cfg.Metrics != "" {
		if err := d.startMetrics(cfg.Metrics); err != nil {
			return nil, err
		}
	}
	if cfg.HTTP != "" {
		if err := d.startHTTP(cfg.HTTP); err != nil {
			return nil, err
		}
	}
	d.log.Info("serving", "device", cfg.Name, "listen", d.listen.String(), "control", d.control,
		"http", d.httpAddr, "metrics", d.metAddr, "regions", len(d.regions))
	for _, r := range d.regions {
		d.log.Info("region", "name", r.Name, "addr", fmt.Sprintf("%#x", r.mr.Addr()), "length", r.Size,
			"rkey", fmt.Sprintf("%#x", r.mr.RKey()), "access", AccessNames(r.Access))
	}
	return d, nil
}

// openDevice binds the UDP address, or opens the TAP interface, and
// opens the device on it.
func (d *Daemon) openDevice() error {
	if d.cfg.Tap.Name != "" {
		return d.openTapDevice()
	}
	var l link.Link
	var err error
	if d.cfg.OpenLink != nil {
		l, err = d.cfg.OpenLink(d.listen)
	} else {
		l, err = udp.Open(udp.Config{Addr: d.listen, GSO: true, GRO: true, ECN: true})
	}
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			who := "another softhca daemon or program"
			if d.listen.Port() == wire.RoCEv2Port {
				who = "another softhca daemon, or the kernel's rdma_rxe (which owns UDP port 4791 on every address once an rxe device exists; `rdma link show` lists them)"
			}
			return fmt.Errorf("UDP %s is in use: %s already has it; choose another with --listen ADDR:PORT: %w", d.listen, who, ErrAddrInUse)
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return fmt.Errorf("UDP %s: no interface of this host has the address %s: %w", d.listen, d.listen.Addr(), err)
		}
		return fmt.Errorf("UDP %s: %w", d.listen, err)
	}
	if a, err := l.LocalAddr(); err == nil {
		d.listen = netip.AddrPortFrom(a.Src, a.SrcPort)
	}
	mtu := d.cfg.MTU
	if mtu == 0 {
		mtu = hca.ActiveMTUFor(d.listen.Addr())
	}
	if err := d.openHCA(l, mtu); err != nil {
		return fmt.Errorf("device %s on UDP %s: %w", d.cfg.Name, d.listen, err)
	}
	return nil
}

// openTapDevice opens the TAP interface Config.Tap names and the device
// on it: a host whose addresses are Listen's and Tap.Addrs, and whose
// active MTU is Config.MTU or follows the interface's.
func (d *Daemon) openTapDevice() error {
	t := d.cfg.Tap
	if d.listen.Port() != wire.RoCEv2Port {
		return fmt.Errorf("TAP %s: the device's address %s: a TAP host receives RoCEv2 on UDP port %d only: %w", t.Name, d.listen, wire.RoCEv2Port, syscall.EINVAL)
	}
	addrs := append([]netip.Addr{d.listen.Addr()}, t.Addrs...)
	l, err := tap.Open(tap.LinkConfig{Name: t.Name, Host: tap.Config{Addrs: addrs, MAC: t.MAC}})
	if err != nil {
		return &TapError{Name: t.Name, Err: err}
	}
	d.tap, d.mac = l.Name(), l.MAC()
	if err := d.openHCA(l, d.cfg.MTU); err != nil {
		return fmt.Errorf("device %s on TAP %s: %w", d.cfg.Name, d.tap, err)
	}
	return nil
}

// openHCA opens the device on l with the active MTU mtu (0: the
// interface's, for a link.Interface). It closes l when it fails.
func (d *Daemon) openHCA(l link.Link, mtu verbs.MTU) error {
	var err error
	ring := d.cfg.TraceRing
	d.tr = newTracer(ring, d.now)
	hc := hca.Config{
		Name:     d.cfg.Name,
		Link:     l,
		PeerPort: d.cfg.PeerPort,
		PortAttr: verbs.PortAttr{ActiveMTU: mtu},
		Attr:     d.cfg.Attr,
		Workers:  d.cfg.Workers,
	}
	if ring > 0 {
		hc.Trace = d.tr.record
	}
	d.dev, err = hca.Open(hc)
	if err != nil {
		l.Close()
		return err
	}
	return nil
}

func (d *Daemon) registerRegions() error {
	if len(d.cfg.Regions) == 0 {
		return nil
	}
	var err error
	if d.pd, err = d.dev.AllocPD(); err != nil {
		return fmt.Errorf("regions: %w", err)
	}
	seen := map[string]bool{}
	for _, r := range d.cfg.Regions {
		if seen[r.Name] {
			return fmt.Errorf("region %q is named twice: %w", r.Name, syscall.EINVAL)
		}
		seen[r.Name] = true
		buf := make([]byte, r.Size)
		m, err := d.pd.RegMR(buf, r.Access)
		if err != nil {
			return fmt.Errorf("region %q (%d bytes): %w", r.Name, r.Size, err)
		}
		d.regions = append(d.regions, region{Region: r, buf: buf, mr: m})
	}
	return nil
}

// goServe runs a server's loop; its unexpected end is logged.
func (d *Daemon) goServe(what string, serve func() error) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			d.log.Error("server stopped", "server", what, "err", err)
		}
	}()
}

// Device returns the daemon's device.
func (d *Daemon) Device() *hca.Device { return d.dev }

// Listen returns the device's UDP address (on a TAP interface, its
// first address and port 4791).
func (d *Daemon) Listen() netip.AddrPort { return d.listen }

// Tap returns the TAP interface the device is on and its MAC there; ""
// for a device on UDP.
func (d *Daemon) Tap() (name string, mac net.HardwareAddr) {
	if d.tap == "" {
		return "", nil
	}
	return d.tap, net.HardwareAddr(d.mac[:])
}

// ControlPath returns the control socket's path.
func (d *Daemon) ControlPath() string { return d.control }

// HTTPAddr and MetricsAddr return the servers' bound addresses ("" when
// not serving).
func (d *Daemon) HTTPAddr() string    { return d.httpAddr }
func (d *Daemon) MetricsAddr() string { return d.metAddr }

// Stop shuts the daemon down (see the package documentation for the
// order), once; later calls return the first one's result. It returns an error wrapping context.DeadlineExceeded when
// that took longer than Config.ShutdownTimeout.
func (d *Daemon) Stop() error {
	d.stopOnce.Do(func() {
		d.log.Info("stopping")
		done := make(chan struct{})
		go func() {
			d.closeAll()
			close(done)
		}()
		t := time.NewTimer(d.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-done:
			d.stopErr = d.flushErr
			d.log.Info("stopped")
		case <-t.C:
			d.stopErr = fmt.Errorf("the shutdown took longer than %v: %w", d.cfg.ShutdownTimeout, context.DeadlineExceeded)
		}
	})
	return d.stopErr
}

// closeAll closes whatever is open, in the order that delivers every
// completion: the device closes first (every QP moves to the error state
// and each outstanding work request completes with a flush error, which
// the services' runs see; a run waiting for its client holds posted
// receives too); then no new service client, the runs and the streams
// end and the servers close.
func (d *Daemon) closeAll() {
	d.stopping.Store(true)
	if d.dev != nil {
		// The QPs alive now, all of which the close flushes (a service's
		// run may destroy its own once it sees the flush).
		qps := len(d.dev.Resources().QPs)
		if err := d.dev.Close(); err != nil {
			d.log.Warn("closing the device", "err", err)
		}
		d.flushErr = d.checkFlushed(qps)
	}
	d.closeServiceListeners()
	d.stopCancel()
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ShutdownTimeout)
	defer cancel()
	if d.ctl != nil {
		d.ctl.Close()
	} else if d.ctlLn != nil {
		d.ctlLn.Close()
	}
	for _, s := range []*http.Server{d.httpSrv, d.metSrv} {
		if s != nil {
			_ = s.Shutdown(ctx)
		}
	}
	d.svcWG.Wait()
	d.wg.Wait()
}

// checkFlushed checks, once the device is closed, that every work
// request of the qps QPs alive before the close was completed: no QP
// holds an outstanding one (the flush completed each, signaled or not,
// with an error) and no CQ overran (which would have lost completions).
// It logs what it found.
func (d *Daemon) checkFlushed(qps int) error {
	r := d.dev.Resources()
	var outstanding, unpolled, overruns int
	for _, q := range r.QPs {
		outstanding += q.SendQueued + q.RecvQueued
	}
	for _, c := range r.CQs {
		unpolled += c.Queued
		if c.InError {
			overruns++
		}
	}
	d.log.Info("flushed", "qps", qps, "outstanding_wrs", outstanding, "cq_overruns", overruns, "completions_unpolled", unpolled)
	if outstanding > 0 || overruns > 0 {
		return fmt.Errorf("after the flush %d work requests were outstanding and %d CQs had overrun: completions were lost", outstanding, overruns)
	}
	return nil
}

// Run starts the daemon, serves until ctx is done, and stops it.
func Run(ctx context.Context, cfg Config) error {
	d, err := Start(cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return d.Stop()
}

// pid is the daemon's process ID (res lists it as the owner of every
// object, as rdma resource show lists the process that made it).
var pid = os.Getpid()
