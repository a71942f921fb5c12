package perftest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Verb is the operation a test measures (VerbType).
type Verb uint8

const (
	Send Verb = iota
	Write
	Read
	Atomic
)

func (v Verb) String() string {
	return [...]string{"send", "write", "read", "atomic"}[v]
}

// title is the verb as perftest's banner names it (testsStr).
func (v Verb) title() string {
	return [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}[v]
}

// Test names one of the eight perftest programs: ib_<verb>_bw or
// ib_<verb>_lat.
type Test struct {
	Verb Verb
	Lat  bool
}

func (t Test) String() string {
	if t.Lat {
		return "ib_" + t.Verb.String() + "_lat"
	}
	return "ib_" + t.Verb.String() + "_bw"
}

// ParseTest parses a test name: send, write, read or atomic, with an
// optional _bw or _lat suffix (bandwidth is the default) and an optional
// ib_ prefix, so "write", "write_lat" and "ib_write_lat" all work.
func ParseTest(name string) (Test, error) {
	s := strings.TrimPrefix(name, "ib_")
	var t Test
	switch {
	case strings.HasSuffix(s, "_lat"):
		t.Lat, s = true, strings.TrimSuffix(s, "_lat")
	case strings.HasSuffix(s, "_bw"):
		s = strings.TrimSuffix(s, "_bw")
	}
	switch s {
	case "send":
		t.Verb = Send
	case "write":
		t.Verb = Write
	case "read":
		t.Verb = Read
	case "atomic":
		t.Verb = Atomic
	default:
		return t, fmt.Errorf("unknown test %q: want send, write, read or atomic, with _bw (the default) or _lat", name)
	}
	return t, nil
}

// AtomicType is the atomic operation of the atomic tests (-A).
type AtomicType uint8

const (
	CmpAndSwap AtomicType = iota
	FetchAndAdd
)

func (a AtomicType) String() string {
	return [...]string{"CMP_AND_SWAP", "FETCH_AND_ADD"}[a]
}

// Defaults and limits, as perftest_parameters.h has them.
const (
	DefaultPort  = 18515
	defSizeBW    = 65536
	defSizeLat   = 2
	defSizeAtom  = 8
	defItersBW   = 5000 // ib_write_bw
	defIters     = 1000 // every other test
	defTxBW      = 128
	defTxLat     = 1
	defRxSend    = 512
	defCQMod     = 100
	defQPTimeout = 14
	minIters     = 5
	maxIters     = 100000000
	maxTx        = 15000
	maxRx        = 16384
	maxCQMod     = 1024
	// MaxSize is the largest size -a runs (MAX_SIZE, 8 MiB).
	MaxSize = 1 << 23
	// cqModLimit: above this message size perftest signals every WR
	// unless -Q was given (MSG_SIZE_CQ_MOD_LIMIT).
	cqModLimit = 8192
	maxSize    = 1 << 31
)

// Options are a test's settings: perftest's command-line options that
// softhca implements, and softhca's own.
type Options struct {
	Test
	// Server is the server's host name; empty runs the server side.
	Server string

	Port       int        // -p: TCP port of the exchange
	Device     string     // -d: the device name (softhca's device takes it)
	IBPort     int        // -i: must be 1
	MTU        int        // -m: 0 = the port's active MTU
	Size       int        // -s
	All        bool       // -a: sizes 2 .. 2^23
	Iters      int        // -n
	GIDIndex   int        // -x: -1 = the address's GID (index 1)
	AtomicType AtomicType // -A
	TxDepth    int        // -t
	RxDepth    int        // -r
	CQMod      int        // -Q
	QPTimeout  int        // -u
	OutReads   int        // -o: 0 = the device's maximum
	NoPeak     bool       // -N
	Gbits      bool       // --report_gbits

	// softhca's own options.

	// Addr is the local address (and UDP port, 4791 if zero) of the
	// device; invalid = the local address of the exchange connection.
	Addr netip.AddrPort
	// PeerPort is the UDP port the peer's device listens on (4791).
	PeerPort uint16
	// Timeout bounds the whole run; 0 = none.
	Timeout time.Duration
	// Stats prints the transport's counters at the end.
	Stats bool
	// Plot is the file --plot writes the measured curves to (.svg or
	// .png; see Chart); empty: none.
	Plot string
	// Progress shows the measurement's progress on stderr even when it
	// is not a terminal (--progress); see ProgressReporter.
	Progress bool
	// NoGSO opens the UDP link without the segmentation offloads (UDP
	// GSO and GRO): one datagram per packet, as a capture on loopback
	// should see them.
	NoGSO bool
	// PcapFile (-w) is the file "softhca perf" writes the device's
	// packets to; Run does not open it (see Config.Trace).
	PcapFile string
	// Tap (--tap) is the TAP interface "softhca perf" puts the device on,
	// a host of its own there with the address Addr (required, port
	// 4791) and the MAC TapMAC (zero: link/tap's default); Run does not
	// open it (see Config.OpenLink). Empty: a UDP socket.
	Tap    string
	TapMAC [6]byte

	sizeSet, cqModSet, sweep bool
}

// Help and version requests are returned by ParseArgs as these errors.
var (
	ErrHelp    = errors.New("help requested")
	ErrVersion = errors.New("version requested")
)

// UnsupportedError lists perftest options softhca perf does not
// implement.
type UnsupportedError struct{ Options []string }

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("perftest option(s) not supported by softhca perf: %s", strings.Join(e.Options, ", "))
}

// optSpec is one option perftest (or softhca) knows.
type optSpec struct {
	short       byte
	long        string
	arg         bool
	unsupported bool
	set         func(o *Options, v string) error
}

func intArg(dst *int, name string, min, max int) func(*Options, string) error {
	return func(_ *Options, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64)
		if err != nil || n < int64(min) || n > int64(max) {
			return fmt.Errorf("%s %q: want an integer in %d..%d", name, v, min, max)
		}
		*dst = int(n)
		return nil
	}
}

// optTable returns the options, bound to o.
func optTable(o *Options) []optSpec {
	flag := func(dst *bool) func(*Options, string) error {
		return func(*Options, string) error { *dst = true; return nil }
	}
	no := func(short byte, long string, arg bool) optSpec {
		return optSpec{short: short, long: long, arg: arg, unsupported: true}
	}
	return []optSpec{
		{'p', "port", true, false, intArg(&o.Port, "-p", 0, 65535)},
		{'d', "ib-dev", true, false, func(o *Options, v string) error { o.Device = v; return nil }},
		{'i', "ib-port", true, false, intArg(&o.IBPort, "-i", 1, 1)},
		{'m', "mtu", true, false, func(o *Options, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || verbs.MTUFromBytes(n) == 0 || verbs.MTUFromBytes(n).Bytes() != n {
				return fmt.Errorf("-m %q: want 256, 512, 1024, 2048 or 4096", v)
			}
			o.MTU = n
			return nil
		}},
		{'s', "size", true, false, func(o *Options, v string) error {
			o.sizeSet = true
			return intArg(&o.Size, "-s", 1, maxSize)(o, v)
		}},
		{'a', "all", false, false, flag(&o.All)},
		{'n', "iters", true, false, intArg(&o.Iters, "-n", minIters, maxIters)},
		{'x', "gid-index", true, false, intArg(&o.GIDIndex, "-x", 0, 1023)},
		{'A', "atomic_type", true, false, func(o *Options, v string) error {
			switch v {
			case "CMP_AND_SWAP":
				o.AtomicType = CmpAndSwap
			case "FETCH_AND_ADD":
				o.AtomicType = FetchAndAdd
			default:
				return fmt.Errorf("-A %q: want CMP_AND_SWAP or FETCH_AND_ADD", v)
			}
			if o.Verb != Atomic {
				return errors.New("-A is for the atomic tests only")
			}
			return nil
		}},
		{'t', "tx-depth", true, false, intArg(&o.TxDepth, "-t", 1, maxTx)},
		{'r', "rx-depth", true, false, intArg(&o.RxDepth, "-r", 1, maxRx)},
		{'Q', "cq-mod", true, false, func(o *Options, v string) error {
			o.cqModSet = true
			return intArg(&o.CQMod, "-Q", 1, maxCQMod)(o, v)
		}},
		{'u', "qp-timeout", true, false, intArg(&o.QPTimeout, "-u", 0, 31)},
		{'o', "outs", true, false, func(o *Options, v string) error {
			if o.Verb != Read && o.Verb != Atomic {
				return errors.New("-o (outstanding reads) is for the read and atomic tests only")
			}
			return intArg(&o.OutReads, "-o", 1, 65535)(o, v)
		}},
		{'c', "connection", true, false, func(o *Options, v string) error {
			if v != "RC" {
				return fmt.Errorf("-c %s: softhca perf runs RC only", v)
			}
			return nil
		}},
		{'q', "qp", true, false, func(o *Options, v string) error {
			var n int
			if err := intArg(&n, "-q", 1, 16384)(o, v); err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("-q %d: softhca perf runs one QP", n)
			}
			return nil
		}},
		// -F silences perftest's warning about CPU frequency scaling,
		// which its cycle counter suffers from; softhca measures with
		// the monotonic clock, so there is nothing to silence.
		{'F', "CPU-freq", false, false, func(*Options, string) error { return nil }},
		{'N', "noPeak", false, false, flag(&o.NoPeak)},
		{0, "report_gbits", false, false, flag(&o.Gbits)},
		{'h', "help", false, false, func(*Options, string) error { return ErrHelp }},
		{'V', "version", false, false, func(*Options, string) error { return ErrVersion }},

		// softhca's own.
		{0, "addr", true, false, func(o *Options, v string) error {
			if ap, err := netip.ParseAddrPort(v); err == nil {
				o.Addr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
				return nil
			}
			a, err := netip.ParseAddr(v)
			if err != nil {
				return fmt.Errorf("--addr %q: want IP or IP:PORT", v)
			}
			o.Addr = netip.AddrPortFrom(a.Unmap(), 0)
			return nil
		}},
		{0, "peer-port", true, false, func(o *Options, v string) error {
			var n int
			if err := intArg(&n, "--peer-port", 1, 65535)(o, v); err != nil {
				return err
			}
			o.PeerPort = uint16(n)
			return nil
		}},
		{0, "timeout", true, false, func(o *Options, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				s, err2 := strconv.ParseFloat(v, 64)
				if err2 != nil {
					return fmt.Errorf("--timeout %q: want a duration such as 30s", v)
				}
				d = time.Duration(s * float64(time.Second))
			}
			if d < 0 {
				return fmt.Errorf("--timeout %q is negative", v)
			}
			o.Timeout = d
			return nil
		}},

		{0, "tap", true, false, func(o *Options, v string) error {
			switch {
			case v == "":
				return errors.New("--tap: no interface name")
			case len(v) > maxIfName:
				return fmt.Errorf("--tap %q: an interface name has at most %d bytes", v, maxIfName)
			}
			o.Tap = v
			return nil
		}},
		{0, "tap-mac", true, false, func(o *Options, v string) error {
			hw, err := net.ParseMAC(v)
			if err != nil || len(hw) != 6 {
				return fmt.Errorf("--tap-mac %q: want an Ethernet MAC address (six bytes, like 02:00:0a:00:00:02)", v)
			}
			if mac := [6]byte(hw); mac == ([6]byte{}) || mac[0]&1 != 0 {
				return fmt.Errorf("--tap-mac %s: not a unicast MAC address", hw)
			}
			o.TapMAC = [6]byte(hw)
			return nil
		}},

		{0, "stats", false, false, flag(&o.Stats)},
		{0, "sweep", false, false, setSweep},
		{0, "plot", true, false, setPlot},
		{0, "progress", false, false, flag(&o.Progress)},
		{0, "no-gso", false, false, flag(&o.NoGSO)},
		// perftest's -w is --limit_bw, a bandwidth in Gb/s, which softhca
		// perf does not implement; softhca's -w is tcpdump's, a capture
		// file. A number is taken for the former, and refused.
		{'w', "pcap", true, false, func(o *Options, v string) error {
			if v == "" {
				return errors.New("-w: no file name")
			}
			if _, err := strconv.ParseFloat(v, 64); err == nil {
				return fmt.Errorf("-w %s: softhca perf's -w writes the packets to a pcap file, and %q looks like a bandwidth for perftest's -w (--limit_bw), which softhca perf does not implement; name the file ./%s to write it", v, v, v)
			}
			o.PcapFile = v
			return nil
		}},

		// Options of perftest 4.5-0.17 that softhca perf does not
		// implement: refused by name rather than ignored.
		no('b', "bidirectional", false),
		no('C', "report-cycles", false),
		no('D', "duration", true),
		no('e', "events", false),
		no('f', "margin", true),
		no('g', "mcg", false),
		no('H', "report-histogram", false),
		no('I', "inline_size", true),
		no('l', "post_list", true),
		no('L', "hop_limit", true),
		no('M', "MGID", true),
		no('O', "dualport", false),
		no('R', "rdma_cm", false),
		no('S', "sl", true),
		no('T', "tos", true),
		no('U', "report-unsorted", false),
		no(0, "limit_bw", true),
		no('W', "report-counters", true),
		no('X', "vector", true),
		no('y', "limit_msgrate", true),
		no('z', "com_rdma_cm", false),
		no(0, "burst_size", true),
		no(0, "cpu_util", false),
		no(0, "disable_pcie_relaxed", false),
		no(0, "dlid", true),
		no(0, "dont_xchg_versions", false),
		no(0, "force-link", true),
		no(0, "inline_recv", true),
		no(0, "ipv6", false),
		no(0, "latency_gap", true),
		no(0, "mmap", true),
		no(0, "mmap-offset", true),
		no(0, "mr_per_qp", false),
		no(0, "odp", false),
		no(0, "out_json", false),
		no(0, "out_json_file", true),
		no(0, "output", true),
		no(0, "perform_warm_up", false),
		no(0, "pkey_index", true),
		no(0, "rate_limit", true),
		no(0, "rate_limit_type", true),
		no(0, "rate_units", true),
		no(0, "recv_post_list", true),
		no(0, "report-both", false),
		no(0, "report-per-port", false),
		no(0, "retry_count", true),
		no(0, "reversed", false),
		no(0, "run_infinitely", false),
		no(0, "source_ip", true),
		no(0, "tclass", true),
		no(0, "typical_pkt_size", true),
		no(0, "use-srq", false),
		no(0, "use_old_post_send", false),
		no(0, "use_hugepages", false),
		no(0, "use_cuda", true),
		no(0, "wait_destroy", true),
	}
}

// ParseArgs parses a test's arguments the way perftest's getopt_long
// does: short options with their value attached (-s64) or next (-s 64),
// clusters of short flags (-aF), long options as --name=value or --name
// value, the server name anywhere, and -- to end the options. It returns
// ErrHelp or ErrVersion for -h and -V, an *UnsupportedError naming every
// perftest option softhca does not implement, or the first other error.
func ParseArgs(t Test, args []string) (*Options, error) {
	o := &Options{Test: t, Port: DefaultPort, IBPort: 1, GIDIndex: -1, AtomicType: FetchAndAdd, QPTimeout: defQPTimeout}
	table := optTable(o)
	byShort := map[byte]*optSpec{}
	byLong := map[string]*optSpec{}
	for i := range table {
		if table[i].short != 0 {
			byShort[table[i].short] = &table[i]
		}
		byLong[table[i].long] = &table[i]
	}
	var unsupported, positional []string
	apply := func(s *optSpec, name, v string) error {
		if s.unsupported {
			unsupported = append(unsupported, name)
			return nil
		}
		return s.set(o, v)
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, v, hasV := strings.Cut(a[2:], "=")
			s := byLong[name]
			if s == nil {
				return nil, fmt.Errorf("unknown option --%s", name)
			}
			if s.arg && !hasV {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("option --%s needs a value", name)
				}
				i++
				v = args[i]
			} else if !s.arg && hasV {
				return nil, fmt.Errorf("option --%s takes no value", name)
			}
			if err := apply(s, "--"+name, v); err != nil {
				return nil, err
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				s := byShort[a[j]]
				if s == nil {
					return nil, fmt.Errorf("unknown option -%c", a[j])
				}
				name := fmt.Sprintf("-%c", a[j])
				if s.long != "" {
					name += " (--" + s.long + ")"
				}
				if !s.arg {
					if err := apply(s, name, ""); err != nil {
						return nil, err
					}
					continue
				}
				v := a[j+1:]
				if v == "" {
					if i+1 >= len(args) {
						return nil, fmt.Errorf("option -%c needs a value", a[j])
					}
					i++
					v = args[i]
				}
				if err := apply(s, name, v); err != nil {
					return nil, err
				}
				break
			}
		default:
			positional = append(positional, a)
		}
	}
	if len(unsupported) > 0 {
		return nil, &UnsupportedError{Options: unsupported}
	}
	switch len(positional) {
	case 0:
	case 1:
		if positional[0] == "" {
			// Not the server: perftest's client fails to resolve "".
			return nil, errors.New(`the server name is "": name the server, or give none to be the server`)
		}
		o.Server = positional[0]
	default:
		return nil, fmt.Errorf("more than one server name: %s", strings.Join(positional, " "))
	}
	if err := o.finish(); err != nil {
		return nil, err
	}
	return o, nil
}

// finish fills in the defaults that depend on the test and checks the
// combinations, as perftest's init_perftest_params and force_dependecies
// do.
func (o *Options) finish() error {
	if err := o.checkSweep(); err != nil {
		return err
	}
	if err := o.checkTap(); err != nil {
		return err
	}
	if o.Verb == Atomic {
		if o.sizeSet && o.Size != defSizeAtom || o.All {
			return errors.New("message size cannot be changed for atomic tests (8 bytes)")
		}
		o.Size = defSizeAtom
	} else if !o.sizeSet {
		o.Size = defSizeBW
		if o.Lat {
			o.Size = defSizeLat
		}
	}
	if o.Iters == 0 {
		o.Iters = defIters
		if o.Verb == Write && !o.Lat {
			o.Iters = defItersBW
		}
	}
	if o.TxDepth == 0 {
		o.TxDepth = defTxBW
		if o.Lat {
			o.TxDepth = defTxLat
		}
	}
	if o.TxDepth > o.Iters {
		o.TxDepth = o.Iters
	}
	if o.RxDepth == 0 {
		o.RxDepth = 1
		if o.Verb == Send {
			o.RxDepth = defRxSend
		}
	}
	if o.Verb == Send && o.RxDepth > o.Iters {
		o.RxDepth = o.Iters
	}
	if o.CQMod == 0 {
		o.CQMod = defCQMod
	}
	if o.Size > cqModLimit && !o.All && !o.cqModSet {
		o.CQMod = 1
	}
	if o.CQMod > o.TxDepth {
		o.CQMod = o.TxDepth
	}
	if o.Verb == Send && !o.Lat && o.Server == "" {
		o.NoPeak = true // the receiver of ib_send_bw reports no peak
	}
	return nil
}

// sizes returns the message sizes the run measures: -s, or with -a every
// power of two from 2 to 2^23.
func (o *Options) sizes() []int {
	if !o.All {
		return []int{o.Size}
	}
	var s []int
	for i := 1; i < 24; i++ {
		s = append(s, 1<<i)
	}
	return s
}

// bufSize is the largest message size the buffers must hold (with -a,
// MAX_SIZE, as perftest sizes them).
func (o *Options) bufSize() int {
	if o.All {
		return MaxSize
	}
	return o.Size
}

// maxIfName is the longest network interface name Linux takes (IFNAMSIZ
// less the terminating NUL).
const maxIfName = 15

// checkTap checks --tap and --tap-mac against --addr: a TAP device is a
// host of its own, with no address of this machine's to default to, and
// receives RoCEv2 on UDP port 4791 only.
func (o *Options) checkTap() error {
	switch {
	case o.Tap == "" && o.TapMAC != [6]byte{}:
		return errors.New("--tap-mac is the MAC of a --tap device: give --tap too")
	case o.Tap == "":
		return nil
	case !o.Addr.IsValid():
		return fmt.Errorf("--tap %s needs --addr: the device's own IP address on the TAP interface's network (a host of its own there, it has none of this machine's)", o.Tap)
	case o.Addr.Port() != 0 && o.Addr.Port() != wire.RoCEv2Port:
		return fmt.Errorf("--tap %s: --addr %s: a TAP host receives RoCEv2 on UDP port %d only; give the address without a port", o.Tap, o.Addr, wire.RoCEv2Port)
	}
	return nil
}
