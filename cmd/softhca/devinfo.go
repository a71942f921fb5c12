package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"

	"github.com/softhca/softhca/cmd/softhca/internal/devinfo"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/hcaenv"
	"github.com/softhca/softhca/verbs"
)

const devinfoUsage = `usage: softhca devinfo [-v] [-d DEVICE] [-i PORT] [-l] [-j] [--addr IP]

Print the attributes of softhca's RDMA device as rdma-core's ibv_devinfo
prints a device's (rdma-core 44): the same fields, in the same order,
with the same labels and tabs, so that what reads ibv_devinfo's output
reads this too. With -v, every attribute, as ibv_devinfo -v.

Which device: those of a running softhca daemon, when one answers;
otherwise the device "softhca run" would give a program, described in
this process without binding a socket (a kernel rxe or a daemon may own
UDP port 4791): named SOFTHCA_DEVICE (default softhca0), on the address
--addr or SOFTHCA_ADDR, or else this host's primary address (the source
address of its default route; 127.0.0.1 without one), which is its GID
1, with the active MTU SOFTHCA_MTU or the one its interface allows.

Options, as ibv_devinfo's (long forms too: --ib-dev=softhca0; "-vi1"
and "-d softhca0" work):
  -d, --ib-dev=<dev>     use IB device <dev> (default all devices)
  -i, --ib-port=<port>   use port <port> of IB device (default all ports)
  -l, --list             print only the IB devices names
  -v, --verbose          print all the attributes of the IB device(s)
softhca's:
  -j, --json             print the devices as a JSON array, every attribute
                         (-v or not); with -l, the names
  --addr=<ip>            the address of the device described in this process
                         (default: SOFTHCA_ADDR, else the primary address)
  -h, --help             print this help

Examples:
  softhca devinfo                        the device, briefly
  softhca devinfo -v -i 1                every attribute, port 1 only
  softhca devinfo -l                     the device names
  softhca devinfo --addr 10.0.0.5 -v     the device "softhca run --addr 10.0.0.5" gives
  softhca devinfo -j | jq -r '.[0].ports[0].gids[].gid'
  softhca run --addr 127.0.0.1 -- ibv_devinfo -v
                                         rdma-core's ibv_devinfo on the drop-in
                                         libibverbs.so.1: the same text

Exit status, as ibv_devinfo's: 0 on success; 1 when -i is not a port
number or a device cannot be opened; 2 when it cannot be queried; 4 when
-i names a port the device does not have; 255 on other usage errors,
when -d names no device, and when there is no device (or the daemon
failed).
`

// Exit statuses of devinfo: ibv_devinfo's.
const (
	devinfoExitBadPortArg = 1   // -i is not a positive number (usage; return 1)
	devinfoExitOpen       = 1   // "Failed to open device"
	devinfoExitQuery      = 2   // "Failed to query device props"
	devinfoExitNoSuchPort = 4   // "Invalid port requested for device"
	devinfoExitFailed     = 255 // return -1: bad option, no such device, no device list
)

// queryDaemon asks a running softhca daemon for the devices it serves,
// in its order. It is set by the daemon client; nil (until there is one)
// means no daemon. ok is false when no daemon answered: devinfo then
// describes the in-process device. An error is a daemon that answered
// but failed; devinfo reports it and exits 255.
var queryDaemon func(ctx context.Context) (devs []devinfo.Device, ok bool, err error)

// devinfoOptions is a parsed devinfo command line.
type devinfoOptions struct {
	device  string // -d, when deviceSet
	port    int    // -i; 0 all ports
	list    bool
	verbose bool
	json    bool
	addr    netip.Addr // --addr
	help    bool
	// deviceSet says -d was given: ibv_devinfo -d '' looks for a
	// device named "" (and finds none); it does not show them all.
	deviceSet bool
}

// devinfoOpt is an option of devinfo, for the getopt_long-style parser.
type devinfoOpt struct {
	short   byte // 0: long form only
	long    string
	arg     bool
	softhca bool // softhca's own long option: one dash works too
	set     func(o *devinfoOptions, v string) error
}

var devinfoOpts = []devinfoOpt{
	{short: 'd', long: "ib-dev", arg: true, set: func(o *devinfoOptions, v string) error {
		o.device, o.deviceSet = v, true
		return nil
	}},
	{short: 'i', long: "ib-port", arg: true, set: func(o *devinfoOptions, v string) error {
		n, err := cNumber(v, true)
		if err != nil || n < 1 || n > 255 {
			return &devinfoPortError{badValue(v, err, "a port number (1..255)")}
		}
		o.port = int(n)
		return nil
	}},
	{short: 'l', long: "list", set: func(o *devinfoOptions, _ string) error { o.list = true; return nil }},
	{short: 'v', long: "verbose", set: func(o *devinfoOptions, _ string) error { o.verbose = true; return nil }},
	{short: 'j', long: "json", set: func(o *devinfoOptions, _ string) error { o.json = true; return nil }},
	{short: 'h', long: "help", set: func(o *devinfoOptions, _ string) error { o.help = true; return nil }},
	{long: "addr", arg: true, softhca: true, set: func(o *devinfoOptions, v string) error {
		a, err := netip.ParseAddr(v)
		if err != nil || a.IsUnspecified() || a.Zone() != "" {
			return fmt.Errorf("%q is not an IP address of this machine, such as 127.0.0.1", v)
		}
		o.addr = a.Unmap()
		return nil
	}},
}

// devinfoPortError is a bad -i, which ibv_devinfo answers with status 1
// (other usage errors: 255).
type devinfoPortError struct{ err error }

func (e *devinfoPortError) Error() string { return e.err.Error() }
func (e *devinfoPortError) Unwrap() error { return e.err }

func (o *devinfoOpt) name() string {
	if o.short != 0 {
		return fmt.Sprintf("-%c/--%s", o.short, o.long)
	}
	return "--" + o.long
}

// parseDevinfoArgs parses devinfo's command line as getopt_long parses
// ibv_devinfo's: clusters of short options ("-vl", "-i1", "-d dev"),
// long options and their unambiguous prefixes ("--ib-dev=dev", "--ib-d
// dev", "--verb"), "--" ending the options. ibv_devinfo ignores other
// arguments; devinfo refuses them.
func parseDevinfoArgs(args []string) (devinfoOptions, error) {
	var o devinfoOptions
	set := func(opt *devinfoOpt, v string) error {
		if err := opt.set(&o, v); err != nil {
			return fmt.Errorf("%s: %w", opt.name(), err)
		}
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return o, fmt.Errorf("unexpected argument %q", args[i+1])
			}
			return o, nil
		case strings.HasPrefix(a, "--") || (strings.HasPrefix(a, "-") && len(a) > 2 && isSofthcaLong(a[1:])):
			name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
			opt, err := lookupDevinfoLong(name)
			if err != nil {
				return o, err
			}
			switch {
			case !opt.arg && hasVal:
				return o, fmt.Errorf("option '--%s' doesn't allow an argument", opt.long)
			case opt.arg && !hasVal:
				if i+1 >= len(args) {
					return o, fmt.Errorf("option '--%s' requires an argument", opt.long)
				}
				i++
				val = args[i]
			}
			if err := set(opt, val); err != nil {
				return o, err
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			body := a[1:]
			for j := 0; j < len(body); j++ {
				opt := lookupDevinfoShort(body[j])
				if opt == nil {
					return o, fmt.Errorf("invalid option -- '%c'", body[j])
				}
				if !opt.arg {
					if err := set(opt, ""); err != nil {
						return o, err
					}
					continue
				}
				val := body[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return o, fmt.Errorf("option requires an argument -- '%c'", opt.short)
					}
					i++
					val = args[i]
				}
				if err := set(opt, val); err != nil {
					return o, err
				}
				break
			}
		default:
			return o, fmt.Errorf("unexpected argument %q", a)
		}
	}
	return o, nil
}

func isSofthcaLong(name string) bool {
	name, _, _ = strings.Cut(name, "=")
	for i := range devinfoOpts {
		if devinfoOpts[i].softhca && devinfoOpts[i].long == name {
			return true
		}
	}
	return false
}

func lookupDevinfoShort(c byte) *devinfoOpt {
	for i := range devinfoOpts {
		if devinfoOpts[i].short == c {
			return &devinfoOpts[i]
		}
	}
	return nil
}

// lookupDevinfoLong finds a long option by its name or an unambiguous
// prefix of it, as getopt_long does.
func lookupDevinfoLong(name string) (*devinfoOpt, error) {
	var found []*devinfoOpt
	for i := range devinfoOpts {
		o := &devinfoOpts[i]
		if o.long == name {
			return o, nil
		}
		if name != "" && strings.HasPrefix(o.long, name) {
			found = append(found, o)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("unrecognized option '--%s'", name)
	case 1:
		return found[0], nil
	}
	var names []string
	for _, o := range found {
		names = append(names, "'--"+o.long+"'")
	}
	return nil, fmt.Errorf("option '--%s' is ambiguous; possibilities: %s", name, strings.Join(names, " "))
}

// runDevinfo is the devinfo command.
func runDevinfo(args []string, stdout, stderr io.Writer) int {
	o, err := parseDevinfoArgs(args)
	if o.help && err == nil {
		fmt.Fprint(stdout, devinfoUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "softhca devinfo: %v\n\n%s", err, devinfoUsage)
		var pe *devinfoPortError
		if errors.As(err, &pe) {
			return devinfoExitBadPortArg
		}
		return devinfoExitFailed
	}

	devs, err := devinfoDevices(context.Background(), o)
	if err != nil {
		fmt.Fprintln(stderr, err)
		var f *devinfoFailure
		if errors.As(err, &f) {
			return f.status
		}
		return devinfoExitFailed
	}

	if o.list {
		names := make([]string, len(devs))
		for i, d := range devs {
			names[i] = d.Name
		}
		if o.json {
			return writeJSON(stdout, stderr, names)
		}
		return written(stderr, devinfo.WriteList(stdout, names))
	}

	if o.deviceSet {
		var sel []devinfo.Device
		for _, d := range devs {
			if d.Name == o.device {
				sel = append(sel, d)
				break
			}
		}
		if sel == nil {
			fmt.Fprintf(stderr, "IB device '%s' wasn't found\n", o.device)
			return devinfoExitFailed
		}
		devs = sel
	} else if len(devs) == 0 {
		fmt.Fprintln(stderr, "No IB devices found")
		return devinfoExitFailed
	}

	// print_hca_cap per device; the statuses OR together.
	status := exitOK
	var out []devinfo.Device
	for _, d := range devs {
		if o.port != 0 {
			if o.port > int(d.Attr.PhysPortCnt) {
				fmt.Fprintln(stderr, "Invalid port requested for device")
				status |= devinfoExitNoSuchPort
				continue
			}
			p, ok := d.Port(uint8(o.port))
			if !ok {
				fmt.Fprintf(stderr, "Failed to query port %d props\n", o.port)
				status |= devinfoExitFailed
				continue
			}
			d.Ports = []devinfo.Port{p}
		}
		if o.json {
			out = append(out, d)
			continue
		}
		if s := written(stderr, devinfo.Write(stdout, d, o.verbose)); s != exitOK {
			return s
		}
	}
	if o.json {
		if out == nil {
			out = []devinfo.Device{}
		}
		if s := writeJSON(stdout, stderr, out); s != exitOK {
			return s
		}
	}
	return status
}

// devinfoFailure is a failure ibv_devinfo reports with a message of its
// own (what) and an exit status; err is softhca's reason.
type devinfoFailure struct {
	what   string
	status int
	err    error
}

func (f *devinfoFailure) Error() string { return f.what + ": " + f.err.Error() }
func (f *devinfoFailure) Unwrap() error { return f.err }

// devinfoDevices returns the devices to describe: the daemon's, or the
// in-process one.
func devinfoDevices(ctx context.Context, o devinfoOptions) ([]devinfo.Device, error) {
	if queryDaemon != nil {
		devs, ok, err := queryDaemon(ctx)
		if err != nil {
			return nil, &devinfoFailure{"Failed to get IB devices list", devinfoExitFailed, fmt.Errorf("the softhca daemon: %w", err)}
		}
		if ok {
			return devs, nil
		}
	}
	d, err := inProcessDevice(o.addr)
	if err != nil {
		return nil, err
	}
	return []devinfo.Device{d}, nil
}

// inProcessDevice describes the device the drop-in library would open
// with the SOFTHCA_* settings of this environment (addr, when valid,
// overriding SOFTHCA_ADDR; without either, the primary address): the
// same name, address and MTU, opened without a link, so that no socket
// is bound.
func inProcessDevice(addr netip.Addr) (devinfo.Device, error) {
	s, err := hcaenv.FromEnv()
	if err != nil {
		return devinfo.Device{}, &devinfoFailure{"Failed to get IB devices list", devinfoExitFailed, err}
	}
	if !addr.IsValid() {
		addr = s.Addr
	}
	if !addr.IsValid() {
		addr = primaryAddr()
	}
	mtu := s.MTU
	if mtu == 0 {
		mtu = hca.ActiveMTUFor(addr)
	}
	d, err := hca.Open(hca.Config{
		Name:     s.Device,
		Addrs:    []netip.Addr{addr},
		PortAttr: verbs.PortAttr{ActiveMTU: mtu},
	})
	if err != nil {
		return devinfo.Device{}, &devinfoFailure{"Failed to open device", devinfoExitOpen, fmt.Errorf("%s: %w", s.Device, err)}
	}
	defer d.Close()
	dev, err := devinfo.FromDevice(d)
	if err != nil {
		return devinfo.Device{}, &devinfoFailure{"Failed to query device props", devinfoExitQuery, err}
	}
	return dev, nil
}

// primaryAddr returns this host's primary address: the source address
// the kernel picks for a packet to the Internet (the default route's),
// IPv4 first, then IPv6; 127.0.0.1 without a route. A connected UDP
// socket sends nothing: the kernel only chooses the route.
var primaryAddr = func() netip.Addr {
	for _, probe := range []string{"192.0.2.1:4791", "[2001:db8::1]:4791"} { // documentation addresses (RFC 5737, 3849)
		c, err := net.Dial("udp", probe)
		if err != nil {
			continue
		}
		a := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
		c.Close()
		if a.IsValid() && !a.IsUnspecified() && a.Zone() == "" {
			return a
		}
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// writeJSON prints v as indented JSON and a newline.
func writeJSON(stdout, stderr io.Writer, v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "softhca devinfo: %v\n", err)
		return exitFailure
	}
	_, err = stdout.Write(append(b, '\n'))
	return written(stderr, err)
}

// written turns an error writing the output into a message and status 1.
func written(stderr io.Writer, err error) int {
	if err != nil {
		fmt.Fprintf(stderr, "softhca devinfo: writing the output: %v\n", err)
		return exitFailure
	}
	return exitOK
}
