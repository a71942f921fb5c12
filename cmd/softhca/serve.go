package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/softhca/softhca/cmd/softhca/internal/daemon"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// exitInUse is serve's exit status when its UDP address, control socket
// or HTTP port is taken.
const exitInUse = 3

const serveUsage = `usage: softhca serve [flags]

serve runs a soft HCA until it is stopped (SIGTERM or SIGINT): a softhca
device on a UDP address, which peers (rdma-core programs on Linux rxe,
RoCE NICs, other softhca devices) reach with RoCEv2, and its control
socket, which softhca devinfo, res, stat, status and trace read. On
SIGTERM it stops accepting work, moves every QP to the error state (each
outstanding work request completes with a flush error), closes its
sockets and exits 0.

Examples:

  softhca serve                                 # the host's address, port 4791; web page on 127.0.0.1:8791
  softhca serve --listen 127.0.0.1 --region buf:1M:rwa --metrics 127.0.0.1:9791
  softhca serve --pingpong "rc -g 1" --perftest "write_bw -p 18516"   # responders for peers
  softhca serve --config /etc/softhca/serve.conf --log-format json
  softhca serve --tap tap0 --listen 10.9.0.2 --tap-addr fd09::2   # a host of its own on TAP tap0

With --tap NAME the device is not on a UDP socket of this machine but a
host of its own on TAP interface NAME, with its own MAC (--tap-mac;
default 02:00 and the last four bytes of --listen's address) and IP
addresses: --listen's (required, port 4791 only), GID 1, then each
--tap-addr, GIDs 2, 3, ...; GID 0 is the link-local address made from the
MAC, and the active MTU follows the interface's unless --mtu says
otherwise. It answers ARP, neighbour discovery and ping there, and can
share the machine with a kernel rxe that owns UDP port 4791.
` + tapHelp + `

Exit status: 0 stopped cleanly; 1 failed while running, the stop took
longer than --shutdown-timeout, or the stop found work requests whose
completions were lost (a CQ too small for its QPs' flush overran); 2 usage error (a bad flag, config file or
region); 3 the UDP address, the control socket or an HTTP port is in use
(another softhca daemon, or the kernel's rdma_rxe, which owns UDP port
4791 on every address once an rxe device exists), or the --tap interface
is open in another process.

Flags (a --config file of "flag = value" lines sets the same ones; the
command line wins):
`

// serveFlags are serve's flags.
type serveFlags struct {
	name, listen, control, httpAddr, metrics string
	logFormat, logLevel, config              string
	tap, tapMAC                              string
	tapAddrs                                 addrList
	peerPort, mtu, traceRing                 int
	shutdown, runTimeout                     time.Duration
	regions                                  regionList
	services                                 []daemon.Service
	attr                                     verbs.DeviceAttr // --limit
}

// limitList is the repeatable --limit flag.
type limitList struct{ attr *verbs.DeviceAttr }

func (l limitList) String() string { return "" }

func (l limitList) Set(s string) error { return daemon.SetLimit(l.attr, s) }

// addrList is the repeatable --tap-addr flag.
type addrList []netip.Addr

func (l *addrList) String() string { return "" }

func (l *addrList) Set(s string) error {
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return fmt.Errorf("%q is not an IP address", s)
	}
	*l = append(*l, a.Unmap())
	return nil
}

// regionList is the repeatable --region flag.
type regionList []daemon.Region

func (r *regionList) String() string { return "" }

func (r *regionList) Set(s string) error {
	reg, err := daemon.ParseRegion(s)
	if err != nil {
		return err
	}
	*r = append(*r, reg)
	return nil
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "name", "softhca0", "device `name`; also names the control socket")
	fs.StringVar(&f.listen, "listen", "", "UDP `address` of the device: IP, IP:PORT or :PORT (default the host's primary address, port 4791)")
	fs.IntVar(&f.peerPort, "peer-port", 4791, "UDP `port` peers' devices listen on")
	fs.IntVar(&f.mtu, "mtu", 0, "the port's active MTU: 256 to 4096 (default from the interface, as rxe: 4096 on loopback, 1024 on a 1500-byte network)")
	fs.StringVar(&f.control, "control", "", "control socket `path` (default "+control.SocketPath("NAME")+")")
	fs.StringVar(&f.httpAddr, "http", "127.0.0.1:8791", "`address` of the web page; \"\" for none")
	fs.StringVar(&f.metrics, "metrics", "", "`address` of the Prometheus endpoint (/metrics); none by default")
	fs.Var(limitList{&f.attr}, "limit", "lower a device limit `NAME=VALUE` (ibv_devinfo's names: "+strings.Join(daemon.LimitNames(), ", ")+"); repeatable")
	fs.Var(&f.regions, "region", "a named target memory region `NAME:SIZE[:ACCESS]` (SIZE with K/M/G, ACCESS letters r, w, a; default rwa); repeatable")
	fs.Var(serviceList{"pingpong", &f.services}, "pingpong", "a responder: softhca pingpong's server `ARGS` (\"rc -p 18515\"), served one client after another; repeatable")
	fs.Var(serviceList{"perftest", &f.services}, "perftest", "a responder: softhca perf's server `ARGS` (\"write_bw -p 18516\"), served one client after another; repeatable")
	fs.IntVar(&f.traceRing, "trace-ring", daemon.DefaultTraceRing, "recent packets kept for trace and the web page (0: none)")
	fs.DurationVar(&f.runTimeout, "run-timeout", 2*time.Minute, "the longest a responder's run may take once it accepted its client, so that a client that went away (or asked for more than the responder gives) does not block the next; 0: no bound")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 5*time.Second, "the longest the stop may take")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.config, "config", "", "a configuration `file` of \"flag = value\" lines")
	fs.StringVar(&f.tap, "tap", "", "put the device on TAP interface `NAME` (created unless it exists), a host of its own there whose address is --listen's (required; port 4791)")
	fs.Var(&f.tapAddrs, "tap-addr", "another `IP` address of the --tap host (GID 2, 3, ...; an IPv6 one, say); repeatable")
	fs.StringVar(&f.tapMAC, "tap-mac", "", "the --tap host's `MAC` (default 02:00 and the last four bytes of --listen's address)")
}

func runServe(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveMain(ctx, args, stdout, stderr, nil)
}

// serveMain is serve with its context (the signals) and, for tests, a
// hook called once the daemon serves.
func serveMain(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(*daemon.Daemon)) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f serveFlags
	f.register(fs)
	fs.Usage = func() {} // printed once, below, where it belongs
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs, serveUsage)
			return exitOK
		}
		printUsage(stderr, fs, serveUsage)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softhca serve: unexpected argument %q (serve takes flags only)\n", fs.Arg(0))
		return exitUsage
	}
	if f.config != "" {
		if err := applyConfigFile(fs, f.config); err != nil {
			fmt.Fprintf(stderr, "softhca serve: %v\n", err)
			return exitUsage
		}
	}
	cfg, log, err := f.daemonConfig(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "softhca serve: %v\n", err)
		return exitUsage
	}
	d, err := daemon.Start(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "softhca serve: %v\n", err)
		if hint := tapHint(err); hint != "" {
			fmt.Fprintf(stderr, "softhca serve: --tap %s: %s\n", f.tap, hint)
		}
		var te *daemon.TapError
		if errors.Is(err, daemon.ErrAddrInUse) || errors.Is(err, syscall.EADDRINUSE) ||
			(errors.As(err, &te) && errors.Is(err, syscall.EBUSY)) {
			return exitInUse
		}
		return exitFailure
	}
	if name, mac := d.Tap(); name != "" {
		fmt.Fprintf(stdout, "softhca serve: %s on TAP %s as %s (MAC %s); control %s", cfg.Name, name, d.Listen(), mac, d.ControlPath())
	} else {
		fmt.Fprintf(stdout, "softhca serve: %s on UDP %s; control %s", cfg.Name, d.Listen(), d.ControlPath())
	}
	if a := d.HTTPAddr(); a != "" {
		fmt.Fprintf(stdout, "; web page http://%s/", a)
	}
	if a := d.MetricsAddr(); a != "" {
		fmt.Fprintf(stdout, "; metrics http://%s/metrics", a)
	}
	fmt.Fprintln(stdout)
	if ready != nil {
		ready(d)
	}
	<-ctx.Done()
	if err := d.Stop(); err != nil {
		log.Error("stop", "err", err)
		return exitFailure
	}
	return exitOK
}

// applyConfigFile sets the flags the file names and the command line did
// not set.
func applyConfigFile(fs *flag.FlagSet, path string) error {
	b, err := readConfigFile(path)
	if err != nil {
		return err
	}
	settings, err := daemon.ParseConfigFile(path, b)
	if err != nil {
		return err
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { onCommandLine[fl.Name] = true })
	for _, s := range settings {
		if s.Key == "config" {
			return fmt.Errorf("%s:%d: a configuration file cannot name another", path, s.Line)
		}
		if fs.Lookup(s.Key) == nil {
			return fmt.Errorf("%s:%d: unknown key %q (the keys are serve's flag names: softhca serve -h)", path, s.Line, s.Key)
		}
		if onCommandLine[s.Key] {
			continue
		}
		if err := fs.Set(s.Key, s.Value); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", path, s.Line, s.Key, err)
		}
	}
	return nil
}

func readConfigFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, daemon.MaxConfigFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// daemonConfig checks the flags and makes the daemon's configuration.
func (f *serveFlags) daemonConfig(stderr io.Writer) (daemon.Config, *slog.Logger, error) {
	cfg := daemon.Config{
		Name: f.name, Control: f.control, HTTP: f.httpAddr, Metrics: f.metrics, Regions: f.regions, Services: f.services,
		TraceRing: f.traceRing, ShutdownTimeout: f.shutdown, Version: softhcaVersion(), Attr: f.attr,
		RunTimeout: f.runTimeout,
		Summarize:  packetSummary,
	}
	if needsOneWorker(f.services) {
		cfg.Workers = 1 // srq_pingpong's QPs share one buffer
	}
	if f.name == "" || strings.ContainsAny(f.name, "/ \t") {
		return cfg, nil, fmt.Errorf("--name %q: a device name is non-empty, without slashes or spaces", f.name)
	}
	if f.listen != "" {
		ap, err := daemon.ParseListen(f.listen)
		if err != nil {
			return cfg, nil, err
		}
		cfg.Listen = ap
	} else {
		cfg.Listen = netip.AddrPort{} // the daemon takes the primary address
	}
	if err := f.tapConfig(&cfg); err != nil {
		return cfg, nil, err
	}
	if f.peerPort < 1 || f.peerPort > 65535 {
		return cfg, nil, fmt.Errorf("--peer-port %d: want 1..65535", f.peerPort)
	}
	cfg.PeerPort = uint16(f.peerPort)
	if f.mtu != 0 {
		m := verbs.MTUFromBytes(f.mtu)
		if !m.Valid() || m.Bytes() != f.mtu {
			return cfg, nil, fmt.Errorf("--mtu %d: want 256, 512, 1024, 2048 or 4096", f.mtu)
		}
		cfg.MTU = m
	}
	if f.traceRing < 0 || f.traceRing > 1<<20 {
		return cfg, nil, fmt.Errorf("--trace-ring %d: want 0..1048576", f.traceRing)
	}
	if f.runTimeout < 0 {
		return cfg, nil, fmt.Errorf("--run-timeout %v: want 0 (no bound) or a positive duration", f.runTimeout)
	}
	for _, a := range []struct{ flag, addr string }{{"--http", f.httpAddr}, {"--metrics", f.metrics}} {
		if a.addr == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a.addr); err != nil || port == "" {
			return cfg, nil, fmt.Errorf("%s %q: want HOST:PORT, like 127.0.0.1:8791", a.flag, a.addr)
		}
	}
	seen := map[string]bool{}
	for _, r := range f.regions {
		if seen[r.Name] {
			return cfg, nil, fmt.Errorf("--region %s: the name is given twice", r.Name)
		}
		seen[r.Name] = true
	}
	if f.shutdown <= 0 {
		return cfg, nil, fmt.Errorf("--shutdown-timeout %v: want a positive duration", f.shutdown)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return cfg, nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		cfg.Log = slog.New(slog.NewTextHandler(stderr, opts))
	case "json":
		cfg.Log = slog.New(slog.NewJSONHandler(stderr, opts))
	default:
		return cfg, nil, fmt.Errorf("--log-format %q: want text or json", f.logFormat)
	}
	return cfg, cfg.Log, nil
}

// tapConfig checks --tap, --tap-addr and --tap-mac against --listen and
// fills in cfg.Tap.
func (f *serveFlags) tapConfig(cfg *daemon.Config) error {
	if f.tap == "" {
		if len(f.tapAddrs) > 0 || f.tapMAC != "" {
			return errors.New("--tap-addr and --tap-mac describe the --tap device: give --tap NAME too")
		}
		return nil
	}
	name, err := parseTAPName(f.tap)
	if err != nil {
		return fmt.Errorf("--tap: %w", err)
	}
	cfg.Tap.Name = name
	if f.tapMAC != "" {
		if cfg.Tap.MAC, err = parseMAC(f.tapMAC); err != nil {
			return fmt.Errorf("--tap-mac: %w", err)
		}
	}
	switch {
	case f.listen == "" || strings.HasPrefix(f.listen, ":"):
		// :PORT would take this machine's primary address.
		return fmt.Errorf("--tap %s needs --listen IP: the device's own address on the TAP interface's network (a host of its own there, it has none of this machine's)", name)
	case cfg.Listen.Port() != wire.RoCEv2Port:
		return fmt.Errorf("--tap %s: --listen %s: a TAP host receives RoCEv2 on UDP port %d only; give the address without a port", name, f.listen, wire.RoCEv2Port)
	}
	seen := map[netip.Addr]bool{cfg.Listen.Addr().Unmap(): true}
	for _, a := range f.tapAddrs {
		if !a.IsGlobalUnicast() {
			return fmt.Errorf("--tap-addr %s: not a global unicast address (the host's link-local one, GID 0, comes from its MAC)", a)
		}
		if seen[a] {
			return fmt.Errorf("--tap-addr %s: the address is given twice", a)
		}
		seen[a] = true
		cfg.Tap.Addrs = append(cfg.Tap.Addrs, a)
	}
	return nil
}
