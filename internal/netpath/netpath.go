package netpath

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Directions says which directions of a Path go through the bottleneck.
type Directions int

const (
	// BothWays shapes what each side sends (the default).
	BothWays Directions = iota
	// From0 shapes only what side 0 sends to side 1.
	From0
	// From1 shapes only what side 1 sends to side 0.
	From1
)

// Options describes a Path.
type Options struct {
	// Rate is the bottleneck's rate in bits per second (tbf rate).
	// Required.
	Rate uint64
	// Burst is how many bytes tbf may send back to back at line rate.
	// Default: 1 ms at Rate, at least two frames, at most 60000 bytes.
	// Keep it below 64 KiB: tbf then splits GSO super-packets into
	// wire-sized packets before they enter the queue, so that
	// QueuePackets counts wire packets.
	Burst int
	// QueuePackets is the bottleneck queue's length (pfifo limit): default
	// 1000, a default txqueuelen.
	QueuePackets int
	// MTU is the veth pair's MTU: default 1500 (RoCE's 4096-byte path
	// MTU needs 9000).
	MTU int
	// IPv6 also gives each side an IPv6 address (fd77:0:0:N::1 and ::2,
	// without duplicate address detection). Without it IPv6 is disabled
	// on the veth pair, so that nothing but the test's packets crosses
	// the bottleneck (with it, a few neighbour discovery and MLD packets
	// do).
	IPv6 bool
	// Directions says which directions are shaped.
	Directions Directions
	// Unshaped builds the path without a bottleneck: no qdiscs, and Rate,
	// Burst, QueuePackets and Directions are ignored.
	Unshaped bool
	// Bridge puts a bridge on side 0 (Bridge, the name inside the
	// namespace), with side 0's veth as its port and side 0's addresses
	// and MAC, so that more interfaces can join side 0's link: a TAP
	// device opened in side 0's namespace joins with Join.
	Bridge bool
}

// Bridge is the name of side 0's bridge (Options.Bridge).
const Bridge = "br0"

// Path is a veth pair between two fresh network namespaces, side 0 and
// side 1, with a bottleneck on the egress of the shaped sides. Its
// methods may be called from several goroutines.
type Path struct {
	opts   Options
	ns     [2]string    // names under /run/netns
	nsMu   sync.RWMutex // guards nsFD: Close closes them
	nsFD   [2]int       // open /run/netns files, for setns (-1 once closed)
	dev    [2]string    // veth names, inside the namespaces
	addr4  [2]netip.Addr
	addr6  [2]netip.Addr
	shaped [2]bool

	mu     sync.Mutex // guards marks and closed; taken before nsMu
	marks  [2]*marker
	closed bool
}

// Interface names and MAC addresses inside the namespaces (each
// namespace is fresh, so they never clash).
var (
	devNames = [2]string{"np0", "np1"}
	macs     = [2]string{"02:00:00:77:00:01", "02:00:00:77:00:02"}
)

// ethLen is the Ethernet header's length, which a frame adds to an IP
// packet.
const ethLen = 14

// paths numbers the paths of this process: namespace names and subnets.
var paths atomic.Uint32

// namePrefix starts the namespace names of this process.
func namePrefix() string { return fmt.Sprintf("softhca-netpath-%d-", os.Getpid()) }

// New builds a path: two network namespaces, a veth pair between them,
// addresses, static neighbour entries (no ARP or neighbour discovery
// delays or drops) and the bottleneck: on the egress of each shaped side,
//
//	tbf rate Rate burst Burst, with a child pfifo limit QueuePackets
//
// It returns once both ends are up and the qdiscs active. The error wraps
// errors.ErrUnsupported when the machine cannot build one (not root, no ip
// or tc, no network namespaces); ForTest skips then.
func New(opts Options) (*Path, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("netpath: needs root to create network namespaces: %w", errors.ErrUnsupported)
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("netpath: %s (iproute2) is not installed: %w", tool, errors.ErrUnsupported)
		}
	}
	n := paths.Add(1)
	subnet := byte(100 + n%150)
	p := &Path{opts: o, nsFD: [2]int{-1, -1}, dev: devNames}
	for side := range 2 {
		p.ns[side] = fmt.Sprintf("%s%d-%d", namePrefix(), n, side)
		p.addr4[side] = netip.AddrFrom4([4]byte{10, 77, subnet, byte(side + 1)})
		if o.IPv6 {
			p.addr6[side] = netip.AddrFrom16([16]byte{0: 0xfd, 1: 0x77, 7: subnet, 15: byte(side + 1)})
		}
	}
	p.shaped = [2]bool{o.Directions != From1 && !o.Unshaped, o.Directions != From0 && !o.Unshaped}
	if err := p.build(); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Unshaped {
		o.Rate, o.Burst, o.QueuePackets, o.Directions = 1, 0, 1, BothWays
	}
	if o.Rate == 0 {
		return o, fmt.Errorf("netpath: Options.Rate (bits per second) is required")
	}
	if o.MTU == 0 {
		o.MTU = 1500
	}
	if o.MTU < 1280 || o.MTU > 65535 {
		return o, fmt.Errorf("netpath: MTU %d out of range 1280..65535", o.MTU)
	}
	if o.QueuePackets == 0 {
		o.QueuePackets = 1000
	}
	if o.QueuePackets < 0 {
		return o, fmt.Errorf("netpath: QueuePackets %d is negative", o.QueuePackets)
	}
	frame := o.MTU + ethLen
	if o.Burst == 0 {
		o.Burst = min(max(int(o.Rate/8/1000), 2*frame), 60000)
	}
	if o.Burst < frame {
		return o, fmt.Errorf("netpath: Burst %d is smaller than a frame (%d bytes): tbf would drop full-sized packets", o.Burst, frame)
	}
	switch o.Directions {
	case BothWays, From0, From1:
	default:
		return o, fmt.Errorf("netpath: unknown Directions %d", o.Directions)
	}
	return o, nil
}

// build runs the ip and tc commands.
func (p *Path) build() error {
	o := p.opts
	for side := range 2 {
		if err := run("ip", "netns", "add", p.ns[side]); err != nil {
			if side == 0 {
				return fmt.Errorf("netpath: cannot create a network namespace: %w (%w)", err, errors.ErrUnsupported)
			}
			return err
		}
		fd, err := unix.Open(filepath.Join("/run/netns", p.ns[side]), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("netpath: opening namespace %s: %w", p.ns[side], err)
		}
		p.nsFD[side] = fd
	}
	mtu := strconv.Itoa(o.MTU)
	// Different interface indexes: the link watch handles a carrier
	// change at once only for a device whose peer's index differs from
	// its own (dev_get_iflink), else up to a second later.
	if err := run("ip", "link", "add", p.dev[0], "netns", p.ns[0], "index", "10", "address", macs[0], "mtu", mtu,
		"type", "veth", "peer", "name", p.dev[1], "netns", p.ns[1], "index", "11", "address", macs[1], "mtu", mtu); err != nil {
		return err
	}
	if o.Bridge {
		// No multicast snooping: the bridge floods neighbour
		// solicitations to every port, whether or not its host sent MLD
		// reports.
		if err := run("ip", "-n", p.ns[0], "link", "add", Bridge, "address", macs[0], "mtu", mtu,
			"type", "bridge", "mcast_snooping", "0"); err != nil {
			return err
		}
		if err := run("ip", "-n", p.ns[0], "link", "set", p.dev[0], "master", Bridge); err != nil {
			return err
		}
	}
	for side := range 2 {
		dev := p.dev[side] // where the side's addresses go
		if side == 0 && o.Bridge {
			dev = Bridge
		}
		if !o.IPv6 {
			if err := p.sysctl(side, "net/ipv6/conf/"+dev+"/disable_ipv6", "1"); err != nil {
				return err
			}
		}
		peer := 1 - side
		steps := [][]string{
			{"addr", "add", p.addr4[side].String() + "/24", "dev", dev},
			{"neigh", "add", p.addr4[peer].String(), "lladdr", macs[peer], "dev", dev, "nud", "permanent"},
		}
		if o.IPv6 {
			steps = append(steps,
				[]string{"addr", "add", p.addr6[side].String() + "/64", "dev", dev, "nodad"},
				[]string{"neigh", "add", p.addr6[peer].String(), "lladdr", macs[peer], "dev", dev, "nud", "permanent"})
		}
		steps = append(steps,
			[]string{"link", "set", "lo", "up"},
			[]string{"link", "set", p.dev[side], "up"})
		if dev != p.dev[side] {
			steps = append(steps, []string{"link", "set", dev, "up"})
		}
		for _, s := range steps {
			if err := run("ip", append([]string{"-n", p.ns[side]}, s...)...); err != nil {
				return err
			}
		}
	}
	// A veth hands each packet to the receive backlog of the CPU that
	// sends it, and the tbf releases packets both from the sender's CPU
	// and from its watchdog timer on another: the receiving side would
	// see packets overtake each other, which a NIC's receive queue never
	// does. RPS steers each flow to one CPU, keeping its order.
	mask := strconv.FormatUint(1<<runtime.NumCPU()-1, 16)
	for side := range 2 {
		file := "/sys/class/net/" + p.dev[side] + "/queues/rx-0/rps_cpus"
		if err := run("ip", "netns", "exec", p.ns[side], "sh", "-c", "echo "+mask+" > "+file); err != nil {
			return err
		}
	}
	// The qdiscs come after the carrier: tc's graft activates them at
	// once on a running device (a device whose carrier is still on its
	// way would get them only when the link watch runs).
	for side := range 2 {
		if err := p.waitRunning(side); err != nil {
			return err
		}
	}
	for side := range 2 {
		if !p.shaped[side] {
			continue
		}
		tc := func(args ...string) error {
			return run("tc", append([]string{"-n", p.ns[side], "qdisc", "add", "dev", p.dev[side]}, args...)...)
		}
		limit := strconv.Itoa(o.QueuePackets * (o.MTU + ethLen)) // tbf's own queue: unused, replaced by the pfifo
		if err := tc("root", "handle", "1:", "tbf", "rate", strconv.FormatUint(o.Rate, 10)+"bit",
			"burst", strconv.Itoa(o.Burst), "limit", limit); err != nil {
			return err
		}
		if err := tc("parent", "1:1", "handle", "10:", "pfifo", "limit", strconv.Itoa(o.QueuePackets)); err != nil {
			return err
		}
	}
	return nil
}

// waitRunning waits until side's veth is operationally up (IFF_RUNNING:
// both ends up, carrier seen by the link watch).
func (p *Path) waitRunning(side int) error {
	return p.Do(side, func() error {
		deadline := time.Now().Add(10 * time.Second)
		for {
			ifc, err := net.InterfaceByName(p.dev[side])
			if err != nil {
				return fmt.Errorf("netpath: %s in %s: %w", p.dev[side], p.ns[side], err)
			}
			if ifc.Flags&net.FlagRunning != 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("netpath: %s in %s is not running after 10 s (flags %v)", p.dev[side], p.ns[side], ifc.Flags)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// sysctl writes a /proc/sys/net setting of side's namespace (the kernel
// resolves /proc/sys/net in the writing thread's namespace). A setting
// the kernel does not have (IPv6 compiled out) is skipped.
func (p *Path) sysctl(side int, key, value string) error {
	return p.Do(side, func() error {
		err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("netpath: sysctl %s=%s in %s: %w", key, value, p.ns[side], err)
		}
		return nil
	})
}

// run runs a command; its error holds the command line and its output.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func checkSide(side int) {
	if side != 0 && side != 1 {
		panic(fmt.Sprintf("netpath: side %d: a path has sides 0 and 1", side))
	}
}

// Addr returns side's IPv4 address, 10.77.N.1 or 10.77.N.2 (/24), N
// different for each path of the process.
func (p *Path) Addr(side int) netip.Addr {
	checkSide(side)
	return p.addr4[side]
}

// Addr6 returns side's IPv6 address, fd77:0:0:N::1 or ::2 (/64; N, the
// third byte of the IPv4 addresses, in hexadecimal), or the zero Addr when
// Options.IPv6 is off.
func (p *Path) Addr6(side int) netip.Addr {
	checkSide(side)
	return p.addr6[side]
}

// Join makes the interface dev of side 0's namespace a port of its
// bridge (Options.Bridge) and brings it up: a TAP device opened there
// then shares the link with side 0's veth, and reaches side 1.
func (p *Path) Join(dev string) error {
	if !p.opts.Bridge {
		return fmt.Errorf("netpath: Join on a path without Options.Bridge")
	}
	if err := run("ip", "-n", p.ns[0], "link", "set", dev, "master", Bridge); err != nil {
		return err
	}
	return run("ip", "-n", p.ns[0], "link", "set", dev, "up")
}

// Exec runs a command in side's namespace (ip netns exec) and returns
// its combined output; the error holds the command line and the output.
func (p *Path) Exec(side int, name string, args ...string) (string, error) {
	checkSide(side)
	out, err := exec.Command("ip", append([]string{"netns", "exec", p.ns[side], name}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), p.ns[side], err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Namespace returns the name of side's network namespace (for ip netns
// exec, ip -n, tc -n).
func (p *Path) Namespace(side int) string {
	checkSide(side)
	return p.ns[side]
}

// Device returns the name of side's veth, inside its namespace.
func (p *Path) Device(side int) string {
	checkSide(side)
	return p.dev[side]
}

// Do runs fn on an OS thread that is inside side's network namespace:
// sockets fn creates belong to that namespace, and keep it after fn
// returns; to open a link/udp.Link on side 1:
//
//	err := p.Do(1, func() (err error) {
//		l, err = udp.Open(udp.Config{Addr: netip.AddrPortFrom(p.Addr(1), 4791), GSO: true, GRO: true})
//		return err
//	})
//
// Only fn's own goroutine is in the namespace: goroutines it starts run
// on other threads, in the process's namespace. If the thread cannot be
// moved back (it always can, short of a kernel bug), Do returns with the
// goroutine still locked to it, so that the thread dies with the
// goroutine instead of serving others from the wrong namespace.
func (p *Path) Do(side int, fn func() error) (err error) {
	checkSide(side)
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netpath: opening this thread's network namespace: %w", err)
	}
	defer unix.Close(orig)
	if err := p.enter(side); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	// Back to the original namespace even if fn panics.
	defer func() {
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			err = errors.Join(err, fmt.Errorf("netpath: setns back from %s: %w (this goroutine stays on the thread, which ends with it)", p.ns[side], serr))
			return
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// enter moves the calling thread into side's namespace.
func (p *Path) enter(side int) error {
	p.nsMu.RLock()
	defer p.nsMu.RUnlock()
	if p.nsFD[side] < 0 {
		return fmt.Errorf("netpath: Do on a closed path")
	}
	if err := unix.Setns(p.nsFD[side], unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("netpath: setns into %s: %w", p.ns[side], err)
	}
	return nil
}

// Close detaches the CE markers and deletes the namespaces, which removes
// the veth pair and its qdiscs. A namespace lives on, unnamed, while a
// socket made in it is open: close those first. Close may be called more
// than once.
func (p *Path) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for side, m := range p.marks {
		if m != nil {
			errs = append(errs, m.close())
			p.marks[side] = nil
		}
	}
	p.nsMu.Lock()
	for side := range 2 {
		if p.nsFD[side] >= 0 {
			errs = append(errs, unix.Close(p.nsFD[side]))
			p.nsFD[side] = -1
		}
	}
	p.nsMu.Unlock()
	for side := range 2 {
		if p.ns[side] == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join("/run/netns", p.ns[side])); errors.Is(err, fs.ErrNotExist) {
			continue // never created
		}
		errs = append(errs, run("ip", "netns", "del", p.ns[side]))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netpath: close: %w", err)
	}
	return nil
}

// Leftovers returns the network namespaces this process created and has
// not deleted: empty once every Path is closed.
func Leftovers() ([]string, error) {
	ents, err := os.ReadDir("/run/netns")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netpath: %w", err)
	}
	var left []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), namePrefix()) {
			left = append(left, e.Name())
		}
	}
	return left, nil
}
