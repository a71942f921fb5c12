// Package hcaenv configures a softhca device from the environment: the
// variables `softhca run` and `softhca env` set, which the drop-in
// libibverbs.so.1 (libibverbs/) reads when a program asks for its device
// list, so that an unmodified libibverbs program gets a device without a
// line of code.
//
// Every variable is optional but SOFTHCA_ADDR: without it the process has
// no softhca device (ibv_get_device_list returns an empty list, as
// libibverbs does on a machine without RDMA devices). SOFTHCA_CONFIG names
// a file of KEY=VALUE lines with the same keys; the environment overrides
// the file.
//
// The package only parses and opens; it holds no state and starts no
// goroutine.
package hcaenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// The variables, with what each sets.
const (
	VarAddr     = "SOFTHCA_ADDR"      // the IP address the device binds and publishes as GID 1
	VarPort     = "SOFTHCA_PORT"      // the UDP port it binds (default 4791)
	VarPeerPort = "SOFTHCA_PEER_PORT" // the UDP port it sends to (default 4791)
	VarDevice   = "SOFTHCA_DEVICE"    // the device name (default softhca0)
	VarMTU      = "SOFTHCA_MTU"       // the port's active MTU: 256, 512, 1024, 2048 or 4096
	VarBusyPoll = "SOFTHCA_BUSY_POLL" // 1 (default): polling an empty CQ drives the transport (hca.Config.BusyPoll); 0: workers only
	VarRate     = "SOFTHCA_RATE"      // pace everything sent at this rate (bits/s, k/M/G)
	VarLog      = "SOFTHCA_LOG"       // 0 errors only (default), 1 also set-up, 2 also every failed verb
	VarConfig   = "SOFTHCA_CONFIG"    // a file of KEY=VALUE lines with the keys above
)

// Vars lists the variables in the order `softhca env` prints them.
var Vars = []string{VarAddr, VarPort, VarPeerPort, VarDevice, VarMTU, VarBusyPoll, VarRate, VarLog}

// Settings is a parsed configuration. The zero value is "no device".
type Settings struct {
	Addr     netip.Addr // invalid: no device
	Port     uint16
	PeerPort uint16
	Device   string
	MTU      verbs.MTU // 0: from the address (hca.ActiveMTUFor)
	BusyPoll bool
	Rate     float64 // bits per second; 0: unpaced
	Log      int
	// InlineFromAnyAddress is hca.Config's: not a variable, but set by
	// the drop-in library, whose C programs send inline from any memory.
	InlineFromAnyAddress bool
}

// defaults are the settings of an empty environment. BusyPoll is on: C
// verbs programs poll their CQs in a loop (perftest, the pingpongs
// without -e), and with busy polling that loop runs the transport in the
// polling thread instead of competing with the transport's goroutines
// for the CPU (ib_send_lat on loopback: about 20 us instead of 120-170).
func defaults() Settings {
	return Settings{Port: wire.RoCEv2Port, PeerPort: wire.RoCEv2Port, Device: "softhca0", BusyPoll: true}
}

// maxConfigSize bounds the configuration file: it holds a few lines.
const maxConfigSize = 64 << 10

// FromEnv reads the settings from the process environment and the file
// SOFTHCA_CONFIG names. An error names the variable (or the file and
// line) and matches syscall.EINVAL, or the file's open error.
func FromEnv() (Settings, error) {
	vals := map[string]string{}
	if f := os.Getenv(VarConfig); f != "" {
		b, err := readBounded(f)
		if err != nil {
			return Settings{}, fmt.Errorf("%s: %w", VarConfig, err)
		}
		if vals, err = ParseFile(f, b); err != nil {
			return Settings{}, err
		}
	}
	for _, k := range Vars {
		if v, ok := os.LookupEnv(k); ok {
			vals[k] = v
		}
	}
	return Parse(vals)
}

func readBounded(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfigSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", syscall.EINVAL, name, maxConfigSize)
	}
	return b, nil
}

// ParseFile parses a configuration file: KEY=VALUE lines with the keys of
// Vars (the SOFTHCA_ prefix may be left out), blank lines and lines
// starting with #. name is for messages.
func ParseFile(name string, b []byte) (map[string]string, error) {
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxConfigSize)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || t[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(t, "=")
		k = strings.ToUpper(strings.TrimSpace(k))
		if !strings.HasPrefix(k, "SOFTHCA_") {
			k = "SOFTHCA_" + k
		}
		if !ok || !known(k) {
			return nil, fmt.Errorf("%w: %s:%d: expected KEY=VALUE with a key among %s", syscall.EINVAL, name, line, strings.Join(Vars, ", "))
		}
		vals[k] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", syscall.EINVAL, name, err)
	}
	return vals, nil
}

func known(k string) bool {
	for _, v := range Vars {
		if v == k {
			return true
		}
	}
	return false
}

// Parse turns variable values into Settings; unknown keys are refused.
func Parse(vals map[string]string) (Settings, error) {
	s := defaults()
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := strings.TrimSpace(vals[k])
		bad := func(want string) error {
			return fmt.Errorf("%w: %s=%q: %s", syscall.EINVAL, k, vals[k], want)
		}
		switch k {
		case VarAddr:
			if v == "" {
				continue
			}
			a, err := netip.ParseAddr(v)
			if err != nil || a.IsUnspecified() || a.Zone() != "" {
				return Settings{}, bad("want one IPv4 or IPv6 address of this machine, such as 127.0.0.1")
			}
			s.Addr = a.Unmap()
		case VarPort, VarPeerPort:
			n, err := strconv.ParseUint(v, 10, 16)
			if err != nil || n == 0 {
				return Settings{}, bad("want a UDP port, 1 to 65535")
			}
			if k == VarPort {
				s.Port = uint16(n)
			} else {
				s.PeerPort = uint16(n)
			}
		case VarDevice:
			if v == "" || len(v) >= 64 || strings.ContainsAny(v, "/ \t") {
				return Settings{}, bad("want a name of 1 to 63 characters without '/' or blanks")
			}
			s.Device = v
		case VarMTU:
			m, ok := mtuOf(v)
			if !ok {
				return Settings{}, bad("want 256, 512, 1024, 2048 or 4096")
			}
			s.MTU = m
		case VarBusyPoll:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Settings{}, bad("want 0 or 1")
			}
			s.BusyPoll = b
		case VarRate:
			r, err := ParseRate(v)
			if err != nil {
				return Settings{}, fmt.Errorf("%s: %w", k, err)
			}
			s.Rate = r
		case VarLog:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 2 {
				return Settings{}, bad("want 0, 1 or 2")
			}
			s.Log = n
		default:
			return Settings{}, fmt.Errorf("%w: unknown setting %s", syscall.EINVAL, k)
		}
	}
	return s, nil
}

func mtuOf(v string) (verbs.MTU, bool) {
	for m := verbs.MTU256; m <= verbs.MTU4096; m++ {
		if strconv.Itoa(m.Bytes()) == v {
			return m, true
		}
	}
	return 0, false
}

// Env returns the variables that configure s, as `softhca env` prints
// them: only those that differ from the defaults, and SOFTHCA_ADDR when
// s has an address (without one there is no device, as Parse of no
// SOFTHCA_ADDR says).
func (s Settings) Env() []string {
	def := defaults()
	var out []string
	if s.Addr.IsValid() {
		out = append(out, VarAddr+"="+s.Addr.String())
	}
	if s.Port != def.Port {
		out = append(out, VarPort+"="+strconv.Itoa(int(s.Port)))
	}
	if s.PeerPort != def.PeerPort {
		out = append(out, VarPeerPort+"="+strconv.Itoa(int(s.PeerPort)))
	}
	if s.Device != def.Device {
		out = append(out, VarDevice+"="+s.Device)
	}
	if s.MTU != 0 {
		out = append(out, VarMTU+"="+strconv.Itoa(s.MTU.Bytes()))
	}
	if !s.BusyPoll {
		out = append(out, VarBusyPoll+"=0")
	}
	if s.Rate != 0 {
		out = append(out, VarRate+"="+strconv.FormatFloat(s.Rate, 'f', -1, 64))
	}
	if s.Log != 0 {
		out = append(out, VarLog+"="+strconv.Itoa(s.Log))
	}
	return out
}

// ErrNoDevice is returned by Open when no address is configured.
var ErrNoDevice = fmt.Errorf("%w: no softhca device: %s is not set", syscall.ENODEV, VarAddr)

// Open opens the device s describes on a UDP link: bound to Addr:Port,
// with the segmentation offloads the kernel has and ECN-capable packets.
func Open(s Settings) (*hca.Device, error) {
	if !s.Addr.IsValid() {
		return nil, ErrNoDevice
	}
	ap := netip.AddrPortFrom(s.Addr, s.Port)
	l, err := udp.Open(udp.Config{Addr: ap, RemotePort: s.PeerPort, GSO: true, GRO: true, ECN: true})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("UDP %s: %w (another RoCEv2 stack such as rdma_rxe, or another softhca, has the port; %s chooses another address)", ap, err, VarAddr)
		}
		return nil, fmt.Errorf("UDP %s: %w", ap, err)
	}
	mtu := s.MTU
	if mtu == 0 {
		mtu = hca.ActiveMTUFor(s.Addr)
	}
	d, err := hca.Open(hca.Config{
		Name:       s.Device,
		Link:       l,
		PeerPort:   s.PeerPort,
		PortAttr:   verbs.PortAttr{ActiveMTU: mtu},
		BusyPoll:   s.BusyPoll,
		Congestion: hca.Congestion{DeviceRate: s.Rate},

		InlineFromAnyAddress: s.InlineFromAnyAddress,
	})
	if err != nil {
		l.Close()
		return nil, err
	}
	return d, nil
}

// ParseRate parses a rate in bits per second: a decimal number with an
// optional k, M or G (powers of 1000) and an optional "bit/s", "bps" or
// "bit". The empty string is 0 (no rate).
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	for _, unit := range []string{"bit/s", "bps", "bit"} {
		if strings.HasSuffix(t, unit) {
			t = strings.TrimSpace(strings.TrimSuffix(t, unit))
			break
		}
	}
	mult := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult = 1e3
		case 'M':
			mult = 1e6
		case 'G':
			mult = 1e9
		}
		if mult != 1 {
			t = strings.TrimSpace(t[:n-1])
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	v *= mult
	// From 1 kbit/s to 10 Tbit/s: beyond, the pacer's arithmetic in
	// nanoseconds per byte loses its meaning.
	if err != nil || math.IsNaN(v) || v < 1e3 || v > 1e13 {
		return 0, fmt.Errorf("%w: %q is not a rate in bits per second from 1k to 10000G (e.g. 200M)", syscall.EINVAL, s)
	}
	return v, nil
}
