package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/softhca/softhca/cmd/softhca/internal/pingpong"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

const pingpongUsage = `usage: softhca pingpong {rc|uc|ud|srq} [options] [host]

Run one side of rdma-core's ping-pong test (ibv_rc_pingpong,
ibv_uc_pingpong, ibv_ud_pingpong, ibv_srq_pingpong) on a softhca device:
without host, start a server and wait for a connection; with host,
connect to the server there. The other side may be the rdma-core tool on
a Linux rxe or RoCE device: the TCP exchange, the packets and the output
are the same. RoCE needs a GRH: give both sides -g (GID index 1 holds
the IPv4 address).

Options, as rdma-core's (long forms too: --size=4096; "-s4096" and "-ec"
work; options may follow host):
  -p, --port=<port>      listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>     use IB device <dev> (default first device found: softhca0)
  -i, --ib-port=<port>   use port <port> of IB device (default 1)
  -s, --size=<size>      size of message to exchange (default 4096; ud 1024, at
                         most the port MTU)
  -m, --mtu=<size>       path MTU (default 1024) (rc, uc, srq)
  -q, --num-qp=<num>     number of QPs to use (default 16) (srq)
  -r, --rx-depth=<dep>   number of receives to post at a time (default 500)
  -n, --iters=<iters>    number of exchanges (default 1000)
  -l, --sl=<sl>          service level value (default 0)
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=<gid index> local port gid index (1: the device's IP address;
                         0 is the link-local fe80:: GID, which no socket is
                         bound to here, and the others are empty: both fail)
  -c, --chk              validate received buffer (softhca checks every byte of
                         every message on both sides and exits 1 on bad data;
                         rdma-core checks the first byte of each page, at the
                         end, on the server, and exits 0)
  -o, --odp, -O, --iodp, -P, --prefetch, -t, --ts, -j, --dm (rc; -o for srq):
                         softhca has no on-demand paging, completion timestamps
                         or device memory, and fails as rdma-core does on rxe
  -N, --new_send         use new post send WR API (rc; softhca posts as usual)

softhca's choices (rdma-core finds them in the kernel):
  -w, --pcap=<file>      write every packet the device sends and receives to
                         <file> (pcap, one frame per packet, as Wireshark's
                         InfiniBand dissector and softhca decode read it)
  --addr=<ip>[:<port>]   the device's UDP address (default: this side's address
                         of the TCP connection, port 4791)
  --peer-port=<port>     UDP port of the peer's device (default 4791)
  --port-mtu=<size>      the port's active MTU, UD's message limit (default: the
                         interface's MTU less 80, rounded down, as rxe)
  --no-gso               one UDP datagram per packet (no GSO/GRO offloads), so
                         that tcpdump -i lo shows every packet as a frame of
                         its own (with GSO it sees several in one datagram)
  --tap=<name>           put the device on TAP interface <name> instead of a UDP
                         socket: a host of its own there, whose IP address is
                         --addr (required; port 4791 only), GID 1 as usual
  --tap-mac=<mac>        the TAP host's MAC (default 02:00 and the last four
                         bytes of --addr)

` + tapHelp + `

Exit status: 0 on success; 1 on any failure or bad usage, as rdma-core.
With SOFTHCA_STATS=<file> in the environment, the device's transport
counters are written to <file> as JSON when the run ends.
` + rateHelp + `
Examples:

  softhca pingpong rc -g 1                      # a server: waits on TCP port 18515
  softhca pingpong rc -g 1 10.0.0.1             # its client (or ibv_rc_pingpong -g 1 10.0.0.1)
  softhca pingpong ud -g 1 --addr 127.0.0.1:4800 --peer-port 4801 &          # both sides on
  softhca pingpong ud -g 1 --addr 127.0.0.1:4801 --peer-port 4800 127.0.0.1  # one host
  softhca pingpong rc -g 1 --tap tap0 --addr 10.9.0.2   # a server on TAP tap0 (ip addr add 10.9.0.1/24 dev tap0)
  softhca pingpong rc -g 1 --addr 10.9.0.1 127.0.0.1    # its client, on UDP on the kernel's side of tap0
`

// pingpongOpt is one option of a pingpong command.
type pingpongOpt struct {
	short byte   // 0: long form only
	long  string // without "--"
	arg   bool   // takes an argument
	// modes the option exists for; nil: all.
	modes []pingpong.Mode
	// softhca marks softhca's own options, which also take one dash.
	softhca bool
	set     func(c *pingpongArgs, v string) error
}

// pingpongArgs is a parsed pingpong command line: the run's configuration
// and what the command itself takes care of.
type pingpongArgs struct {
	pingpong.Config
	// pcapFile (-w) receives every packet the device sends and receives.
	pcapFile string
	// tapName (--tap) is the TAP interface the device is a host on, with
	// the address Addr and the MAC tapMAC (zero: the default); "": a UDP
	// socket.
	tapName string
	tapMAC  [6]byte
}

// pingpongOpts are the options of every mode; each mode accepts those
// its rdma-core tool has.
var pingpongOpts = []pingpongOpt{
	{short: 'p', long: "port", arg: true, set: func(c *pingpongArgs, v string) error {
		n, err := cNumber(v, false)
		if err != nil || n > 65535 {
			return badValue(v, err, "a TCP port (0..65535)")
		}
		c.Port = int(n)
		return nil
	}},
	{short: 'd', long: "ib-dev", arg: true, set: func(c *pingpongArgs, v string) error { c.IBDev = v; return nil }},
	{short: 'i', long: "ib-port", arg: true, set: func(c *pingpongArgs, v string) error {
		n, err := cNumber(v, true)
		if err != nil || n < 1 || n > 255 {
			return badValue(v, err, "a port number (1..255)")
		}
		c.IBPort = int(n)
		return nil
	}},
	{short: 's', long: "size", arg: true, set: func(c *pingpongArgs, v string) error {
		n, err := cNumber(v, false)
		if err != nil || n > 1<<31 || (c.Mode == pingpong.SRQ && n < 1) {
			least := 0
			if c.Mode == pingpong.SRQ {
				least = 1
			}
			return badValue(v, err, fmt.Sprintf("a message size in bytes (%d..2147483648, the port's max_msg_sz)", least))
		}
		c.Size = uint32(n)
		return nil
	}},
	{short: 'm', long: "mtu", arg: true, modes: []pingpong.Mode{pingpong.RC, pingpong.UC, pingpong.SRQ}, set: func(c *pingpongArgs, v string) error {
		m, err := mtuValue(v)
		if err != nil {
			return err
		}
		c.MTU = m
		return nil
	}},
	{short: 'q', long: "num-qp", arg: true, modes: []pingpong.Mode{pingpong.SRQ}, set: func(c *pingpongArgs, v string) error {
		n, err := cNumber(v, false)
		if err != nil || n > 1<<32-1 {
			return badValue(v, err, "a number of QPs")
		}
		c.NumQP = uint32(n)
		return nil
	}},
	{short: 'r', long: "rx-depth", arg: true, set: func(c *pingpongArgs, v string) error {
		n, err := cNumber(v, false)
		if err != nil || n < 1 || n > 1<<20 {
			return badValue(v, err, "a number of receives (1..1048576, the device's max_qp_wr)")
		}
		c.RxDepth = uint32(n)
		return nil
	}},
	{short: 'n', long: "iters", arg: true, set: func(c *pingpongArgs, v string) error {
		n, err := cNumber(v, false)
		if err != nil || n > 1<<31-1 {
			return badValue(v, err, "a number of iterations (0..2147483647)")
		}
		c.Iters = uint32(n)
		return nil
	}},
	{short: 'l', long: "sl", arg: true, set: func(c *pingpongArgs, v string) error {
		n, err := cNumber(v, true)
		if err != nil || n < 0 || n > 15 {
			return badValue(v, err, "a service level (0..15)")
		}
		c.SL = uint8(n)
		return nil
	}},
	{short: 'e', long: "events", set: func(c *pingpongArgs, _ string) error { c.Events = true; return nil }},
	{short: 'g', long: "gid-idx", arg: true, set: func(c *pingpongArgs, v string) error {
		n, err := cNumber(v, true)
		if err != nil || n > 1<<31-1 || n < -1<<31 {
			return badValue(v, err, "a GID index")
		}
		c.GIDIndex = int(n)
		return nil
	}},
	{short: 'c', long: "chk", set: func(c *pingpongArgs, _ string) error { c.Validate = true; return nil }},
	{short: 'o', long: "odp", modes: []pingpong.Mode{pingpong.RC, pingpong.SRQ}, set: func(c *pingpongArgs, _ string) error { c.Features.ODP = true; return nil }},
	{short: 'O', long: "iodp", modes: []pingpong.Mode{pingpong.RC}, set: func(c *pingpongArgs, _ string) error {
		c.Features.ODP, c.Features.ImplicitODP = true, true
		return nil
	}},
	{short: 'P', long: "prefetch", modes: []pingpong.Mode{pingpong.RC}, set: func(c *pingpongArgs, _ string) error { c.Features.Prefetch = true; return nil }},
	{short: 't', long: "ts", modes: []pingpong.Mode{pingpong.RC}, set: func(c *pingpongArgs, _ string) error { c.Features.Timestamps = true; return nil }},
	{short: 'j', long: "dm", modes: []pingpong.Mode{pingpong.RC}, set: func(c *pingpongArgs, _ string) error { c.Features.DM = true; return nil }},
	{short: 'N', long: "new_send", modes: []pingpong.Mode{pingpong.RC}, set: func(c *pingpongArgs, _ string) error { c.Features.NewSend = true; return nil }},

	{long: "addr", arg: true, softhca: true, set: func(c *pingpongArgs, v string) error {
		ap, err := parseAddrPort(v)
		if err != nil {
			return err
		}
		c.Addr = ap
		return nil
	}},
	{long: "peer-port", arg: true, softhca: true, set: func(c *pingpongArgs, v string) error {
		n, err := cNumber(v, false)
		if err != nil || n < 1 || n > 65535 {
			return badValue(v, err, "a UDP port (1..65535)")
		}
		c.PeerPort = uint16(n)
		return nil
	}},
	{long: "port-mtu", arg: true, softhca: true, set: func(c *pingpongArgs, v string) error {
		m, err := mtuValue(v)
		if err != nil {
			return err
		}
		c.PortMTU = m
		return nil
	}},
	{long: "no-gso", softhca: true, set: func(c *pingpongArgs, _ string) error { c.NoGSO = true; return nil }},
	{long: "tap", arg: true, softhca: true, set: func(c *pingpongArgs, v string) (err error) {
		c.tapName, err = parseTAPName(v)
		return err
	}},
	{long: "tap-mac", arg: true, softhca: true, set: func(c *pingpongArgs, v string) (err error) {
		c.tapMAC, err = parseMAC(v)
		return err
	}},
	{short: 'w', long: "pcap", arg: true, softhca: true, set: func(c *pingpongArgs, v string) error {
		if v == "" {
			return errors.New("no file name")
		}
		c.pcapFile = v
		return nil
	}},
}

func (o *pingpongOpt) in(m pingpong.Mode) bool {
	if o.modes == nil {
		return true
	}
	for _, x := range o.modes {
		if x == m {
			return true
		}
	}
	return false
}

// name is how messages name the option.
func (o *pingpongOpt) name() string {
	if o.short != 0 {
		return fmt.Sprintf("-%c/--%s", o.short, o.long)
	}
	return "--" + o.long
}

// usageError is a command line the command refuses.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

func badValue(v string, err error, want string) error {
	if err != nil {
		return fmt.Errorf("%q is not %s: %w", v, want, err)
	}
	return fmt.Errorf("%q is not %s", v, want)
}

// cNumber parses a number as strtol/strtoul with base 0 read it: a 0x
// prefix for hexadecimal, a leading 0 for octal, else decimal; a sign
// only when signed. Unlike strtol it refuses trailing garbage, and
// numbers that do not fit in 64 bits.
func cNumber(s string, signed bool) (int64, error) {
	t := s
	neg := false
	if signed && (strings.HasPrefix(t, "-") || strings.HasPrefix(t, "+")) {
		neg, t = t[0] == '-', t[1:]
	}
	base := 10
	switch {
	case len(t) > 2 && (t[:2] == "0x" || t[:2] == "0X"):
		base, t = 16, t[2:]
	case len(t) > 1 && t[0] == '0':
		base, t = 8, t[1:]
	}
	if t == "" || strings.ContainsAny(t, "+-_") {
		return 0, errors.New("not a number")
	}
	n, err := strconv.ParseUint(t, base, 63)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			return 0, errors.New("out of range")
		}
		return 0, errors.New("not a number")
	}
	if neg {
		return -int64(n), nil
	}
	return int64(n), nil
}

// mtuValue parses an MTU in bytes (pp_mtu_to_enum).
func mtuValue(v string) (verbs.MTU, error) {
	n, err := cNumber(v, true)
	m := verbs.MTUFromBytes(int(n))
	if err != nil || m == 0 || m.Bytes() != int(n) {
		return 0, badValue(v, err, "an MTU (256, 512, 1024, 2048 or 4096)")
	}
	return m, nil
}

// parseAddrPort parses --addr: an IP address, or address and port
// ("192.0.2.1", "192.0.2.1:5000", "[2001:db8::1]:5000"); the port
// defaults to 4791.
func parseAddrPort(v string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(v); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]"))
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not an IP address or address:port", v)
	}
	return netip.AddrPortFrom(a.Unmap(), wire.RoCEv2Port), nil
}

// parsePingpongArgs parses the command line after "pingpong": the mode,
// then getopt_long-style options and at most one host, in any order.
// help reports -h/--help.
func parsePingpongArgs(args []string) (cfg pingpongArgs, help bool, err error) {
	if len(args) == 0 {
		return cfg, false, usagef("which pingpong? want rc, uc, ud or srq")
	}
	switch args[0] {
	case "-h", "-help", "--help":
		return cfg, true, nil
	}
	mode, ok := pingpong.ParseMode(args[0])
	if !ok {
		return cfg, false, usagef("unknown pingpong %q: want rc, uc, ud or srq", args[0])
	}
	cfg.Config = pingpong.NewConfig(mode)
	var hosts []string
	lookupLong := func(name string, oneDash bool) (*pingpongOpt, error) {
		var found, rdma []*pingpongOpt
		for i := range pingpongOpts {
			o := &pingpongOpts[i]
			if !o.in(mode) || (oneDash && !o.softhca) {
				continue
			}
			if o.long == name {
				return o, nil
			}
			if !oneDash && strings.HasPrefix(o.long, name) {
				found = append(found, o) // getopt_long takes unambiguous prefixes
				if !o.softhca {
					rdma = append(rdma, o)
				}
			}
		}
		switch {
		case len(found) == 1:
			return found[0], nil
		case len(found) == 0:
			return nil, usagef("unrecognized option '--%s' for %s", name, mode)
		case len(rdma) == 1:
			// A prefix that is unambiguous among rdma-core's options
			// means what it means to rdma-core ("--n" is --new_send, not
			// --no-gso; "--po" is --port, not --port-mtu): softhca's
			// own options need more letters.
			return rdma[0], nil
		}
		return nil, usagef("option '--%s' is ambiguous", name)
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			hosts = append(hosts, args[i+1:]...)
			i = len(args)
		case a == "-h" || a == "-help" || a == "--help":
			return cfg, true, nil
		case strings.HasPrefix(a, "-") && len(a) > 1:
			body := strings.TrimPrefix(a, "-")
			oneDash := !strings.HasPrefix(body, "-")
			name, val, hasVal := strings.Cut(strings.TrimPrefix(body, "-"), "=")
			var o *pingpongOpt
			if !oneDash {
				var err error
				if o, err = lookupLong(name, false); err != nil {
					return cfg, false, err
				}
			} else if x, err := lookupLong(name, true); err == nil && len(name) > 1 {
				o = x // -addr, -peer-port, -port-mtu
			}
			if o != nil {
				if !o.arg && hasVal {
					return cfg, false, usagef("option '--%s' doesn't allow an argument", o.long)
				}
				if o.arg && !hasVal {
					if i+1 >= len(args) {
						return cfg, false, usagef("option '--%s' requires an argument", o.long)
					}
					i++
					val = args[i]
				}
				if err := o.set(&cfg, val); err != nil {
					return cfg, false, usagef("%s: %v", o.name(), err)
				}
				continue
			}
			// A cluster of short options: "-ec", "-s4096", "-s", "4096".
			for j := 0; j < len(body); j++ {
				var o *pingpongOpt
				for k := range pingpongOpts {
					if p := &pingpongOpts[k]; p.short == body[j] && p.in(mode) {
						o = p
					}
				}
				if o == nil {
					return cfg, false, usagef("invalid option -- '%c' for %s", body[j], mode)
				}
				if !o.arg {
					o.set(&cfg, "")
					continue
				}
				val := body[j+1:]
				if val == "" {
					if i+1 >= len(args) {
						return cfg, false, usagef("option requires an argument -- '%c'", o.short)
					}
					i++
					val = args[i]
				}
				if err := o.set(&cfg, val); err != nil {
					return cfg, false, usagef("%s: %v", o.name(), err)
				}
				break
			}
		default:
			hosts = append(hosts, a)
		}
	}
	switch len(hosts) {
	case 0:
	case 1:
		if hosts[0] == "" {
			// Not the server: rdma-core's client fails to resolve "".
			return cfg, false, usagef(`the host is "": name the server, or give no host to be the server`)
		}
		cfg.ServerName = hosts[0]
	default:
		return cfg, false, usagef("one host at most, got %q", hosts)
	}
	if err := cfg.checkTAP(); err != nil {
		return cfg, false, err
	}
	return cfg, false, nil
}

// checkTAP checks the combination of --tap, --tap-mac and --addr.
func (c *pingpongArgs) checkTAP() error {
	switch {
	case c.tapName == "" && c.tapMAC != [6]byte{}:
		return usagef("--tap-mac is the MAC of a --tap device: give --tap too")
	case c.tapName == "":
		return nil
	case !c.Addr.IsValid():
		return usagef("--tap %s needs --addr: the device's own IP address on the TAP interface's network (a host of its own there, it has none of this machine's)", c.tapName)
	case c.Addr.Port() != wire.RoCEv2Port:
		return usagef("--tap %s: --addr %s: a TAP host receives RoCEv2 on UDP port %d only; give the address without a port", c.tapName, c.Addr, wire.RoCEv2Port)
	}
	return nil
}

// runPingpong is the pingpong command.
func runPingpong(args []string, stdout, stderr io.Writer) int {
	return pingpongMain(context.Background(), args, stdout, stderr, nil)
}

// pingpongMain runs the command; adjust, if set, changes the parsed
// configuration (tests give listeners and links).
func pingpongMain(ctx context.Context, args []string, stdout, stderr io.Writer, adjust func(*pingpong.Config)) int {
	cfg, help, err := parsePingpongArgs(args)
	if help {
		fmt.Fprint(stdout, pingpongUsage)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "softhca pingpong: %v\n\n%s", err, pingpongUsage)
		return exitFailure
	}
	// The interop harness reads the device's counters from here.
	cfg.StatsFile = os.Getenv("SOFTHCA_STATS")
	if cfg.DeviceRate, err = rateFromEnv(); err != nil {
		fmt.Fprintf(stderr, "softhca pingpong: %v\n", err)
		return exitFailure
	}
	var pf *pcapFile
	if cfg.pcapFile != "" {
		if pf, err = createPcapFile(cfg.pcapFile); err != nil {
			fmt.Fprintf(stderr, "softhca pingpong: %v\n", err)
			return exitFailure
		}
		cfg.Trace = pf.trace
	}
	if cfg.tapName != "" {
		cfg.OpenLink = func(addr netip.AddrPort) (link.Link, error) {
			return openTAP(cfg.tapName, cfg.tapMAC, []netip.Addr{addr.Addr()}, nil)
		}
	}
	if adjust != nil {
		adjust(&cfg.Config)
	}
	status := exitOK
	if err := pingpong.Run(ctx, cfg.Config, stdout); err != nil {
		if errors.Is(err, pingpong.ErrInvalidData) {
			fmt.Fprintf(stderr, "softhca pingpong %s: -c: the received data differs from what the peer sends\n", cfg.Mode)
		} else {
			fmt.Fprintln(stderr, err)
		}
		if hint := tapHint(err); hint != "" {
			fmt.Fprintf(stderr, "softhca pingpong: --tap %s: %s\n", cfg.tapName, hint)
		}
		status = exitFailure
	}
	if pf != nil {
		// Run has closed the device: no packet is traced any more.
		n, err := pf.close()
		if err != nil {
			fmt.Fprintf(stderr, "softhca pingpong: %v\n", err)
			return exitFailure
		}
		local, peer := cfg.Addr.Port(), cfg.PeerPort
		if local == 0 {
			local = wire.RoCEv2Port
		}
		if peer == 0 {
			peer = wire.RoCEv2Port
		}
		fmt.Fprintf(stderr, "softhca pingpong: %s\n", pf.note(n, local, peer))
	}
	return status
}
