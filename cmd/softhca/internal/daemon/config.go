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
	// 127.0.0.1 without one) on port 4791.
	Listen netip.AddrPort
	// PeerPort is the UDP port peers' devices listen on; 0 means 4791.
	PeerPort uint16
	// MTU is the port's active MTU; 0 derives it from the interface that
	// holds the address, as rxe does.
	MTU verbs.MTU
	// Control is the control socket's path; empty: control.SocketPath(Name).
	Control string
	// HTTP is the web page's address (empty: none); Metrics the
	// Prometheus endpoint's (empty: none).
	HTTP, Metrics string
	// Regions are the named target memory regions to register.
	Regions []Region
	// Services are the responders to run for peers.
	Services []Service
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
