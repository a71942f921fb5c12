package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Config is what `softhca serve` runs.
type Config struct {
	// Name is the device name; default "softhca0".
	Name string
	// Listen is the UDP address of the device. The zero value takes the
	// host's primary address (the source of its default route, or
	// 127.0.0.1 without one) on port 4791. With Tap, it is the TAP host's
	// first address (GID 1), and its port must be 4791.
	Listen netip.AddrPort
	// Tap, if its Name is set, puts the device on a TAP interface
	// (link/tap) instead of a UDP socket.
	Tap Tap
	// PeerPort is the UDP port peers' devices listen on; 0 means 4791.
	PeerPort uint16
	// MTU is the port's active MTU; 0 derives it from the interface that
	// holds the address, as rxe does.
	MTU verbs.MTU
	// Attr lowers device limits (SetLimit); zero fields keep hca's
	// defaults.
	Attr verbs.DeviceAttr
	// Control is the control socket's path; empty: control.SocketPath(Name).
	Control string
	// HTTP is the web page's address (empty: none); Metrics the
	// Prometheus endpoint's (empty: none).
	HTTP, Metrics string
	// Regions are the named target memory regions to register.
	Regions []Region
	// Services are the responders to run for peers.
	Services []Service
	// RunTimeout bounds a service's run from the moment it accepts its
	// client, so that a client that went away, or asked for more than
	// the server's options give (a larger -n), does not keep the
	// responder from the next client for ever; 0: no bound.
	RunTimeout time.Duration
	// Workers is the device's transport workers (hca.Config.Workers);
	// 0: the default. A service whose QPs share one buffer
	// (srq_pingpong's) needs 1.
	Workers int
	// TraceRing is how many recent packets the daemon keeps for `softhca
	// trace` and the web page (0: none are kept or streamed).
	TraceRing int
	// ShutdownTimeout bounds the stop: moving QPs to the error state,
	// flushing and closing; 0: 5 s.
	ShutdownTimeout time.Duration
	// Log receives the daemon's structured log (nil: discarded).
	Log *slog.Logger
	// Summarize formats a packet for the trace stream (decode's line
	// format); nil leaves the summary empty.
	Summarize func(*wire.Packet) string
	// Version is reported by status.
	Version string

	// Test hooks: OpenLink opens the device's link instead of a UDP
	// socket; Now is the clock (time.Now).
	OpenLink func(addr netip.AddrPort) (link.Link, error)
	Now      func() time.Time
}

// Tap is a device's TAP interface: the device is a host of its own on the
// interface's Ethernet link (link/tap), with its own MAC and addresses,
// and takes its GIDs, node GUID and (unless Config.MTU) active MTU from
// it, as rxe takes them from its netdev.
type Tap struct {
	// Name is the TAP interface, created unless it exists (see
	// tap.LinkConfig.Name).
	Name string
	// Addrs are the host's addresses after Config.Listen's (GID 2
	// onwards).
	Addrs []netip.Addr
	// MAC is the host's MAC; zero: tap.DefaultMAC of Listen's address.
	MAC [6]byte
}

// TapError is a failure to open the device's TAP interface (Config.Tap).
type TapError struct {
	Name string
	Err  error
}

func (e *TapError) Error() string { return "TAP interface " + e.Name + ": " + e.Err.Error() }
func (e *TapError) Unwrap() error { return e.Err }

// DefaultTraceRing is how many packets the daemon keeps by default.
const DefaultTraceRing = 1024

// Region is a named target memory region (--region NAME:SIZE:ACCESS).
type Region struct {
	Name   string
	Size   int
	Access verbs.AccessFlags
}

// MaxRegionSize bounds one region (1 GiB): the memory is allocated and
// registered at start.
const MaxRegionSize = 1 << 30

// ParseRegion parses NAME:SIZE[:ACCESS]: SIZE in bytes with an optional
// K, M or G suffix (powers of 1024), ACCESS letters r (remote read), w
// (remote write) and a (remote atomic), default "rwa". Local write is
// always granted (the verbs require it with remote write and atomic).
func ParseRegion(s string) (Region, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return Region{}, fmt.Errorf("region %q: want NAME:SIZE[:ACCESS], like buf:1M:rw", s)
	}
	r := Region{Name: parts[0], Access: verbs.AccessLocalWrite}
	if r.Name == "" || strings.ContainsAny(r.Name, " \t/") {
		return Region{}, fmt.Errorf("region %q: the name must be non-empty, without spaces or slashes", s)
	}
	size, err := parseSize(parts[1])
	if err != nil {
		return Region{}, fmt.Errorf("region %q: %w", s, err)
	}
	if size < 1 || size > MaxRegionSize {
		return Region{}, fmt.Errorf("region %q: size %d is not within 1..1G", s, size)
	}
	r.Size = size
	acc := "rwa"
	if len(parts) == 3 {
		acc = parts[2]
	}
	if acc == "" {
		return Region{}, fmt.Errorf("region %q: empty access (want letters of r, w, a)", s)
	}
	for _, c := range acc {
		switch c {
		case 'r':
			r.Access |= verbs.AccessRemoteRead
		case 'w':
			r.Access |= verbs.AccessRemoteWrite
		case 'a':
			r.Access |= verbs.AccessRemoteAtomic
		default:
			return Region{}, fmt.Errorf("region %q: access %q: want letters of r (remote read), w (remote write), a (remote atomic)", s, string(c))
		}
	}
	return r, nil
}

// parseSize parses a byte count with an optional K, M or G suffix.
func parseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult = 1 << 10
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult = 1 << 20
	case strings.HasSuffix(s, "G"), strings.HasSuffix(s, "g"):
		mult = 1 << 30
	}
	if mult != 1 {
		s = s[:len(s)-1]
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes, with K, M or G", s)
	}
	if n > MaxRegionSize/mult {
		return 0, fmt.Errorf("size %s: larger than 1G", s)
	}
	return n * mult, nil
}

// AccessNames lists the access flags by name.
func AccessNames(a verbs.AccessFlags) []string {
	names := []string{}
	for _, f := range []struct {
		f    verbs.AccessFlags
		name string
	}{
		{verbs.AccessLocalWrite, "local_write"}, {verbs.AccessRemoteWrite, "remote_write"},
		{verbs.AccessRemoteRead, "remote_read"}, {verbs.AccessRemoteAtomic, "remote_atomic"},
		{verbs.AccessMWBind, "mw_bind"}, {verbs.AccessRelaxedOrder, "relaxed_ordering"},
	} {
		if a&f.f != 0 {
			names = append(names, f.name)
		}
	}
	return names
}

// ParseListen parses --listen: an address, an address and port, or a
// port alone (":4791", the host's primary address).
func ParseListen(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return netip.AddrPortFrom(a, wire.RoCEv2Port), nil
	}
	if p, ok := strings.CutPrefix(s, ":"); ok {
		n, err := strconv.ParseUint(p, 10, 16)
		if err == nil {
			a, err := primaryAddr()
			if err != nil {
				return netip.AddrPort{}, err
			}
			return netip.AddrPortFrom(a, uint16(n)), nil
		}
	}
	return netip.AddrPort{}, fmt.Errorf("listen address %q: want IP, IP:PORT, [IPv6]:PORT or :PORT", s)
}

// primaryAddr is the source address of the host's default route (no
// packet is sent), or 127.0.0.1 when there is none.
func primaryAddr() (netip.Addr, error) {
	c, err := net.Dial("udp4", "192.0.2.1:9") // TEST-NET-1: routed as any address, never reached
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			return netip.MustParseAddr("127.0.0.1"), nil
		}
		return netip.Addr{}, err
	}
	defer c.Close()
	ap := c.LocalAddr().(*net.UDPAddr).AddrPort()
	return ap.Addr().Unmap(), nil
}

// limitFields are the device limits --limit may lower, by the names
// ibv_devinfo -v prints them with.
var limitFields = []struct {
	name string
	get  func(a *verbs.DeviceAttr) uint64
	set  func(a *verbs.DeviceAttr, v uint64)
}{
	{"max_mr_size", func(a *verbs.DeviceAttr) uint64 { return a.MaxMRSize }, func(a *verbs.DeviceAttr, v uint64) { a.MaxMRSize = v }},
	{"max_qp", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxQP) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxQP = uint32(v) }},
	{"max_qp_wr", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxQPWR) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxQPWR = uint32(v) }},
	{"max_sge", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxSGE) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxSGE = uint32(v) }},
	{"max_cq", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxCQ) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxCQ = uint32(v) }},
	{"max_cqe", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxCQE) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxCQE = uint32(v) }},
	{"max_mr", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxMR) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxMR = uint32(v) }},
	{"max_pd", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxPD) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxPD = uint32(v) }},
	{"max_qp_rd_atom", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxQPRdAtom) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxQPRdAtom = uint32(v) }},
	{"max_qp_init_rd_atom", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxQPInitRdAtom) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxQPInitRdAtom = uint32(v) }},
	{"max_ah", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxAH) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxAH = uint32(v) }},
	{"max_srq", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxSRQ) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxSRQ = uint32(v) }},
	{"max_srq_wr", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxSRQWR) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxSRQWR = uint32(v) }},
	{"max_srq_sge", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxSRQSGE) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxSRQSGE = uint32(v) }},
	{"max_inline_data", func(a *verbs.DeviceAttr) uint64 { return uint64(a.MaxInlineData) }, func(a *verbs.DeviceAttr, v uint64) { a.MaxInlineData = uint32(v) }},
}

// LimitNames lists the limits SetLimit knows.
func LimitNames() []string {
	names := make([]string, len(limitFields))
	for i, f := range limitFields {
		names[i] = f.name
	}
	return names
}

// SetLimit parses NAME=VALUE (--limit max_qp=256) and lowers that device
// limit in attr, whose zero fields stand for hca's defaults (rxe's
// values). A limit can be lowered, not raised above the default: the
// defaults are what softhca is built and tested for.
func SetLimit(attr *verbs.DeviceAttr, s string) error {
	name, val, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("limit %q: want NAME=VALUE, like max_qp=256", s)
	}
	def := hca.DefaultDeviceAttr()
	for _, f := range limitFields {
		if f.name != name {
			continue
		}
		v, err := strconv.ParseUint(val, 0, 64)
		if err != nil {
			return fmt.Errorf("limit %s=%q: want a number", name, val)
		}
		if max := f.get(&def); v < 1 || v > max {
			return fmt.Errorf("limit %s=%d: want 1..%d (a limit may be lowered, not raised above the default)", name, v, max)
		}
		f.set(attr, v)
		return nil
	}
	return fmt.Errorf("limit %q: unknown; the limits are %s", name, strings.Join(LimitNames(), ", "))
}
