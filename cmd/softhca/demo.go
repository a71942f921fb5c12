package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	svgladder "github.com/softhca/softhca/cmd/softhca/internal/ladder"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/softhca/softhca/wire/pcap"
)

const demoUsage = `usage: softhca demo [-port N] [-addrs A,B] [-pcap FILE] [-svg FILE] [-loss P] [-tap [-tap-name NAME]]

Open two softhca devices, A and B, in this process, connected over UDP
loopback (A on 127.0.0.1, B on 127.0.0.2), and walk through the verbs one
step at a time: RC SEND, RDMA WRITE, RDMA READ, FETCH_AND_ADD,
CMP_AND_SWP, a UD SEND, and tag matching (an EAGER and a rendezvous
message to a tag-matching SRQ). Each step prints the packets on the wire (a
ladder: "A -> B" is sent by A, "A <- B" by B), the completions and a check
of the data that moved. -svg draws every step's ladder in one SVG
sequence diagram.

If the port is taken (by a kernel rdma_rxe, say), the demo tries other
127.x addresses, then free ports, and says so; -port 0 picks free ports.

With -tap, A is a host of its own on a TAP interface the demo creates
(-tap-name, default softhca-demo0), with its own MAC and address, and B
a UDP socket on the kernel's side of that interface: -addrs is then A's
address and the kernel's (default 10.213.0.2,10.213.0.1; IPv4, in one
/24, which the kernel's side gets). Every packet crosses the kernel as
an Ethernet frame, and the kernel finds A by ARP, as it finds any host.
A receives on UDP port 4791, B on -port (free ports if 4791 is taken
there, by rdma_rxe say, or with -port 0). Creating the interface needs
root, or CAP_NET_ADMIN and read-write access to /dev/net/tun (in a
container: --cap-add NET_ADMIN --device /dev/net/tun); it goes away
when the demo ends. An interface of that name made beforehand is used
as it is, without CAP_NET_ADMIN (ip tuntap add mode tap user $USER name
softhca-demo0; ip addr add 10.213.0.1/24 dev softhca-demo0; ip link set
softhca-demo0 up; /dev/net/tun must be readable and writable).

Examples:

  softhca demo                                  # A on 127.0.0.1, B on 127.0.0.2, UDP port 4791
  softhca demo -port 0                          # free ports, when rxe or a daemon holds 4791
  softhca demo -pcap demo.pcap -svg demo.svg    # keep the packets (softhca decode demo.pcap); draw the ladders
  softhca demo -port 0 -addrs ::1,::1 -loss 0.2 # over IPv6, with retransmissions
  sudo softhca demo -tap                        # A on TAP softhca-demo0 (10.213.0.2), B on 10.213.0.1

Exit status: 0 if every completion is successful and every data check
passes, 1 otherwise, 2 on usage errors.

Flags:
`

// Demo memory layout: each device registers one 8 KiB buffer; each step
// uses its own area of it.
const (
	demoBufSize = 8192
	offSend     = 0    // step 1: A's message, B's receive buffer
	offWrite    = 1024 // step 2: A's source, B's target
	offRead     = 2048 // step 3: B's source, A's target
	offAtomic   = 3072 // steps 4, 5: B's counter; A's results at +0 and +8
	offUD       = 3584 // step 6: A's message, B's receive buffer (GRH area first)
	grhArea     = 40   // the GRH area at the start of every UD receive buffer
	// Steps 7 and 8 (tag matching): A's messages and B's tag buffers.
	offEager    = 4096 // A's EAGER message; B's first tag buffer
	offRndvReq  = 4608 // A's rendezvous request (TMH + RVH)
	offRndvData = 5120 // A's data that B reads; B's second tag buffer
	offFIN      = 6144 // A's receive buffer for the FIN
	tagEager    = 0x700
	tagRndv     = 0x701
	rndvMsg     = "Read by B from A's memory, found by its tag"
	demoPSN     = 100 // first PSN of both RC QPs
	demoQKey    = 0x11111111
	readMsg     = "Read by A from B's memory" // step 3's data in B's memory
)

// demoTestHook, if set (by tests, which must not run in parallel then),
// is called before each step with the step's number.
var demoTestHook func(d *demo, step int)

// runDemo is the demo command.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", wire.RoCEv2Port, "UDP `port` of both devices (0: free ports)")
	addrs := fs.String("addrs", "127.0.0.1,127.0.0.2", "the IP addresses of A and B, comma-separated (`A,B`)")
	pcapFile := fs.String("pcap", "", "write every packet that crossed the wire to `FILE` (pcap)")
	svgFile := fs.String("svg", "", "write the ladders to `FILE` as an SVG sequence diagram")
	loss := fs.Float64("loss", 0, "drop each RC packet with `probability` P (0 <= P <= 0.5) to show retransmission (UD is not affected)")
	useTap := fs.Bool("tap", false, "put A on a TAP interface as a host of its own, B on UDP on the kernel's side of it (-addrs default "+demoTapAddrs+")")
	tapName := fs.String("tap-name", demoTapName, "the -tap interface's `NAME`")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), demoUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "softhca demo: unexpected argument %q (demo takes flags only)\n", fs.Arg(0))
		fs.Usage()
		return exitUsage
	case *port < 0 || *port > 65535:
		fmt.Fprintf(stderr, "softhca demo: -port %d is not a UDP port (0..65535)\n", *port)
		return exitUsage
	case !(*loss >= 0 && *loss <= 0.5):
		fmt.Fprintf(stderr, "softhca demo: -loss %v is out of range 0..0.5\n", *loss)
		return exitUsage
	case *pcapFile != "" && filepath.Clean(*pcapFile) == filepath.Clean(*svgFile):
		// Two writers at once would leave a file that is neither.
		fmt.Fprintf(stderr, "softhca demo: -pcap and -svg name the same file %s\n", *pcapFile)
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["tap-name"] && !*useTap {
		fmt.Fprintf(stderr, "softhca demo: -tap-name names the -tap interface: give -tap too\n")
		return exitUsage
	}
	if *useTap {
		if _, err := parseTAPName(*tapName); err != nil {
			fmt.Fprintf(stderr, "softhca demo: -tap-name: %v\n", err)
			return exitUsage
		}
		if !set["addrs"] {
			*addrs = demoTapAddrs
		}
	}
	addrA, addrB, err := parseDemoAddrs(*addrs)
	if err == nil && addrA == addrB && (*port != 0 || *useTap) {
		err = errors.New("devices A and B need different addresses to share a port")
	}
	if err == nil && *useTap {
		err = checkDemoTapAddrs(addrA, addrB)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softhca demo: -addrs %s: %v\n", *addrs, err)
		return exitUsage
	}

	var pw *pcap.Writer
	var pcapOut *bufio.Writer
	if *pcapFile != "" {
		f, err := os.Create(*pcapFile)
		if err != nil {
			fmt.Fprintf(stderr, "softhca demo: %v\n", err)
			return exitUsage
		}
		defer f.Close()
		pcapOut = bufio.NewWriter(f)
		if pw, err = pcap.NewWriter(pcapOut); err != nil {
			fmt.Fprintf(stderr, "softhca demo: %s: %v\n", *pcapFile, err)
			return exitFailure
		}
	}

	var svgF *os.File
	if *svgFile != "" {
		if svgF, err = os.Create(*svgFile); err != nil {
			fmt.Fprintf(stderr, "softhca demo: %v\n", err)
			return exitUsage
		}
		defer svgF.Close()
	}

	d := &demo{out: stdout, lad: newLadder(pw, *loss), loss: *loss, svg: svgF != nil}
	if *useTap {
		d.tapName = *tapName
	}
	err = d.run(addrA, addrB, uint16(*port))
	if svgF != nil {
		// The steps run so far, also when one failed.
		serr := svgladder.WriteSVG(svgF, d.svgEvents, svgladder.Options{
			Title: fmt.Sprintf("softhca demo: %d packets", len(d.svgEvents))})
		if serr == nil {
			serr = svgF.Close()
		}
		if serr != nil && err == nil {
			err = fmt.Errorf("writing %s: %w", *svgFile, serr)
		}
	}
	if pcapOut != nil {
		d.lad.mu.Lock()
		perr := d.lad.pcapErr
		d.lad.mu.Unlock()
		if perr == nil {
			perr = pcapOut.Flush()
		}
		if perr != nil && err == nil {
			err = fmt.Errorf("writing %s: %w", *pcapFile, perr)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "softhca demo: FAILED: %v\n", err)
		if hint := tapHint(err); hint != "" {
			fmt.Fprintf(stderr, "softhca demo: -tap: %s\n", hint)
		}
		return exitFailure
	}
	if *pcapFile != "" {
		fmt.Fprintf(stdout, "\nWrote %d packets to %s. Decode them with Wireshark's InfiniBand dissector:\n", d.lad.pcapPkts, *pcapFile)
		fmt.Fprintf(stdout, "  %s\n", tsharkCommand(*pcapFile, d.ports()))
		if ports := d.ports(); len(ports) == 1 && ports[0] == wire.RoCEv2Port {
			fmt.Fprintf(stdout, "or check every ICRC with: softhca decode %s\n", *pcapFile)
		}
	}
	if *svgFile != "" {
		fmt.Fprintf(stdout, "\nWrote the ladders of %d packets to %s (an SVG sequence diagram).\n", len(d.svgEvents), *svgFile)
	}
	return exitOK
}

// tsharkCommand is the command line that shows a demo capture as
// InfiniBand: tshark decodes UDP port 4791 as RoCEv2 only when told to.
func tsharkCommand(file string, ports []uint16) string {
	cmd := "tshark -r " + file
	for _, p := range ports {
		cmd += fmt.Sprintf(" -d udp.port==%d,infiniband", p)
	}
	return cmd
}

// demo is one run of the demo command.
type demo struct {
	out  io.Writer
	lad  *ladder
	loss float64
	a, b *demoSide
	// tapName, with -tap, is the TAP interface A is a host on; tap is
	// A's link there once open.
	tapName string
	tap     *tap.Link

	// With -svg: every step's ladder, times from the run's first packet.
	svg       bool
	svgEvents []svgladder.Event
	svgStart  time.Time
}

// addSVG adds a step's ladder to the diagram.
func (d *demo) addSVG(evs []ladderEvent) {
	if !d.svg {
		return
	}
	name := func(s *demoSide) string {
		return s.name + " " + netip.AddrPortFrom(s.local.Src, s.local.SrcPort).String()
	}
	var p wire.Packet
	for i := range evs {
		ev := &evs[i]
		if d.svgStart.IsZero() {
			d.svgStart = ev.at
		}
		from, to := d.a, d.b
		if ev.from == 'B' {
			from, to = d.b, d.a
		}
		d.svgEvents = append(d.svgEvents, svgladder.Event{Time: ev.at.Sub(d.svgStart), From: name(from), To: name(to),
			Label: ev.describe(&p), Dropped: ev.lost})
	}
}

// demoSide is one of the two devices and its objects.
type demoSide struct {
	name   string
	local  wire.Net
	dev    *hca.Device
	pd     *hca.PD
	cq     *hca.CQ
	mr     *hca.MR
	buf    []byte
	rc, ud *hca.QP
	// Tag matching: B's tag-matching SRQ (nil on A) and an RC QP on
	// each side (B's on the SRQ).
	tmSRQ *hca.SRQ
	tm    *hca.QP
}

// ports returns the UDP ports the devices used, without repeats.
func (d *demo) ports() []uint16 {
	if d.a == nil || d.b == nil {
		return []uint16{wire.RoCEv2Port}
	}
	pa, pb := d.a.local.SrcPort, d.b.local.SrcPort
	if pa == pb {
		return []uint16{pa}
	}
	return []uint16{pa, pb}
}

func (d *demo) printf(format string, args ...any) { fmt.Fprintf(d.out, format, args...) }

// run sets up both devices, runs the steps and closes the devices.
func (d *demo) run(addrA, addrB netip.Addr, port uint16) error {
	var la, lb link.Link
	var note string
	var err error
	if d.tapName != "" {
		d.tap, lb, note, err = openDemoTapLinks(d.tapName, addrA, addrB, port)
		la = d.tap
	} else {
		la, lb, note, err = openDemoLinks(addrA, addrB, port)
	}
	if err != nil {
		return err
	}
	if note != "" {
		d.printf("note: %s\n\n", note)
	}
	// The devices own the links from here: closing a device closes its
	// link and stops its goroutines.
	d.a, err = d.openSide("A", la, lb)
	if err != nil {
		la.Close()
		lb.Close()
		return err
	}
	defer d.a.dev.Close()
	d.b, err = d.openSide("B", lb, la)
	if err != nil {
		lb.Close()
		return err
	}
	defer d.b.dev.Close()
	// B's memory that A reads or updates remotely is filled in before the
	// QPs are connected. B's responder touches it under B's QP lock, which
	// connect takes after these writes, so the writes happen before (in
	// the Go memory model's sense). Written later, they would be ordered
	// only through the UDP socket, which the race detector cannot see.
	copy(d.b.buf[offRead:], readMsg)
	binary.NativeEndian.PutUint64(d.counter(), 100)
	if err := d.connect(); err != nil {
		return err
	}

	d.printf("softhca demo: two RDMA devices in this process, A and B, speaking RoCEv2\n")
	if d.tap != nil {
		mac := d.tap.MAC()
		d.printf("(InfiniBand transport headers in UDP) to each other through the kernel:\n")
		d.printf("A is a host of its own on TAP interface %s, MAC %s;\n", d.tap.Name(), net.HardwareAddr(mac[:]))
		d.printf("B is a UDP socket on the kernel's side of it. Every packet crosses the kernel\n")
		d.printf("as an Ethernet frame; A asks for B's MAC by ARP, and answers the kernel's ARP\n")
		d.printf("requests for its own address.\n\n")
	} else {
		d.printf("(InfiniBand transport headers in UDP) to each other over loopback.\n\n")
	}
	d.printf("  A: %s port %d    B: %s port %d\n", d.a.local.Src, d.a.local.SrcPort, d.b.local.Src, d.b.local.SrcPort)
	d.printf("  RC (reliable connected) QPs:  A %#x <-> B %#x, first PSN %d\n", d.a.rc.Num(), d.b.rc.Num(), demoPSN)
	d.printf("  UD (unreliable datagram) QPs: A %#x,  B %#x, Q_Key %#x\n", d.a.ud.Num(), d.b.ud.Num(), demoQKey)
	d.printf("  RC QPs for tag matching:      A %#x <-> B %#x (B's on a tag-matching SRQ)\n", d.a.tm.Num(), d.b.tm.Num())
	d.printf("Ladders show each packet once, when its sender sends it (\"A -> B\": A sent it,\n")
	d.printf("\"A <- B\": B sent it), with times from the step's first packet; qp= is the\n")
	d.printf("destination QP, psn= the packet sequence number, ackreq asks for an ACK.\n")
	if d.loss > 0 {
		d.printf("-loss %g: each RC packet is dropped with that probability; watch A retransmit.\n", d.loss)
	}

	steps := []struct {
		title string
		run   func() error
	}{
		{"RC SEND", d.stepSend},
		{"RDMA WRITE", d.stepWrite},
		{"RDMA READ", d.stepRead},
		{"ATOMIC FETCH_AND_ADD", d.stepFetchAdd},
		{"ATOMIC CMP_AND_SWP", d.stepCmpSwap},
		{"UD SEND", d.stepUDSend},
		{"TAG MATCHING, EAGER", d.stepTMEager},
		{"TAG MATCHING, RENDEZVOUS", d.stepTMRndv},
	}
	for i, s := range steps {
		d.printf("\nStep %d: %s\n", i+1, s.title)
		d.lad.take() // nothing should be pending; start the step afresh
		if demoTestHook != nil {
			demoTestHook(d, i+1)
		}
		if err := s.run(); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, s.title, err)
		}
	}
	st := d.a.dev.TransportStats()
	sb := d.b.dev.TransportStats()
	d.printf("\nAll %d steps passed: every completion successful, every data check good.\n", len(steps))
	d.lad.mu.Lock()
	total, lost := d.lad.total, d.lad.lost
	d.lad.mu.Unlock()
	d.printf("%d packets sent", total)
	if d.loss > 0 {
		d.printf(", %d lost, %d retransmitted by A's timer", lost, st.Retransmits+sb.Retransmits)
	}
	d.printf(".\n")
	if d.tap != nil {
		hs := d.tap.HostStats()
		d.printf("A's TAP host: frames in %d (RoCEv2 %d, ARP requests answered %d, ARP replies\n",
			hs.RxFrames, hs.RxDelivered, hs.ARPReplies)
		d.printf("learned %d, dropped %d); RoCEv2 packets out %d; ARP requests sent %d;\n",
			hs.RxLearned, hs.Dropped(), hs.TxPackets, hs.ARPRequests)
		d.printf("neighbours resolved %d.\n", hs.Resolved)
	}
	return nil
}

// parseDemoAddrs parses -addrs: two IP addresses of one family.
func parseDemoAddrs(s string) (a, b netip.Addr, err error) {
	as, bs, ok := strings.Cut(s, ",")
	if !ok {
		return a, b, errors.New("want two addresses separated by a comma")
	}
	if a, err = netip.ParseAddr(strings.TrimSpace(as)); err != nil {
		return a, b, err
	}
	if b, err = netip.ParseAddr(strings.TrimSpace(bs)); err != nil {
		return a, b, err
	}
	a, b = a.Unmap(), b.Unmap()
	if a.Is4() != b.Is4() {
		return a, b, errors.New("one address is IPv4 and the other IPv6")
	}
	return a, b, nil
}

// The default addresses of A and B, and the loopback pairs tried after
// them when the port is taken there.
var (
	demoAddrA    = netip.MustParseAddr("127.0.0.1")
	demoAddrB    = netip.MustParseAddr("127.0.0.2")
	demoAltAddrs = [][2]netip.Addr{
		{netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.4")},
		{netip.MustParseAddr("127.0.0.5"), netip.MustParseAddr("127.0.0.6")},
	}
)

// openDemoLinks binds A's and B's UDP sockets at x and y on port. If the
// port is taken there, it tries other 127.x pairs on the same port (for
// the default addresses), then free ports. note, if not empty, says what
// was chosen instead and why.
func openDemoLinks(x, y netip.Addr, port uint16) (a, b *udp.Link, note string, err error) {
	pair := func(x, y netip.Addr, port uint16) (*udp.Link, *udp.Link, error) {
		a, err := udp.Open(udp.Config{Addr: netip.AddrPortFrom(x, port), ECN: true})
		if err != nil {
			return nil, nil, err
		}
		b, err := udp.Open(udp.Config{Addr: netip.AddrPortFrom(y, port), ECN: true})
		if err != nil {
			a.Close()
			return nil, nil, err
		}
		return a, b, nil
	}
	if port != 0 {
		cands := [][2]netip.Addr{{x, y}}
		if x == demoAddrA && y == demoAddrB {
			cands = append(cands, demoAltAddrs...)
		}
		var first error
		for _, c := range cands {
			a, b, err := pair(c[0], c[1], port)
			if err == nil {
				if first != nil {
					note = fmt.Sprintf("UDP port %d on %s/%s: %s; using %s and %s instead", port, x, y, bindProblem(first), c[0], c[1])
				}
				return a, b, note, nil
			}
			if first == nil {
				first = err
			}
			if !errors.Is(err, syscall.EADDRINUSE) {
				break // other addresses will not help
			}
		}
		where := fmt.Sprintf("%s/%s", x, y)
		if len(cands) > 1 {
			where = "loopback"
		}
		note = fmt.Sprintf("UDP port %d on %s: %s; using free ports instead", port, where, bindProblem(first))
	}
	a, b, err = pair(x, y, 0)
	if err != nil && y == demoAddrB {
		// 127.0.0.2 may not be routed to loopback here: share 127.0.0.1.
		a, b, err = pair(x, x, 0)
	}
	if err != nil {
		return nil, nil, "", fmt.Errorf("cannot open UDP sockets for A and B: %w", err)
	}
	return a, b, note, nil
}

// The -tap defaults: the interface's name, and A's and B's addresses (A
// the TAP host, B the kernel's side of the interface; a /24 from
// 10.0.0.0/8 that home and office networks rarely use).
const (
	demoTapName  = "softhca-demo0"
	demoTapAddrs = "10.213.0.2,10.213.0.1"
)

// checkDemoTapAddrs checks -addrs for -tap: IPv4 (the kernel's side of
// an IPv6 address would first wait out duplicate address detection),
// unicast, in one /24, which the kernel's side gets.
func checkDemoTapAddrs(a, b netip.Addr) error {
	if !a.Is4() || !b.Is4() {
		return errors.New("-tap runs over IPv4 (the kernel would hold an IPv6 address back for duplicate address detection)")
	}
	for _, x := range []netip.Addr{a, b} {
		if !x.IsGlobalUnicast() {
			return fmt.Errorf("%s is not a unicast address for a host on the TAP link", x)
		}
	}
	if p := netip.PrefixFrom(b, 24).Masked(); !p.Contains(a) {
		return fmt.Errorf("-tap: A's %s is not in %s, the kernel side's network", a, p)
	}
	if x := a.As4(); x[3] == 0 || x[3] == 255 {
		return fmt.Errorf("-tap: %s is %s's network or broadcast address", a, netip.PrefixFrom(b, 24).Masked())
	}
	if x := b.As4(); x[3] == 0 || x[3] == 255 {
		return fmt.Errorf("-tap: %s is %s's network or broadcast address", b, netip.PrefixFrom(b, 24).Masked())
	}
	return nil
}

// openDemoTapLinks opens A's TAP link on the interface name, A a host
// with address x, and B's UDP socket on the kernel's side of the
// interface at y, port. A created interface's kernel side gets y/24; an
// existing one (made beforehand, by another user perhaps) is used as it
// is, and must have y. If port is taken at y, B takes a free port.
func openDemoTapLinks(name string, x, y netip.Addr, port uint16) (a *tap.Link, b *udp.Link, note string, err error) {
	var kernel []netip.Prefix
	if _, err := os.Stat("/sys/class/net/" + name); err == nil {
		note = fmt.Sprintf("%s exists: using it as it is (its kernel side must have %s)", name, y)
	} else {
		kernel = []netip.Prefix{netip.PrefixFrom(y, 24)}
	}
	if a, err = openTAP(name, [6]byte{}, []netip.Addr{x}, kernel); err != nil {
		return nil, nil, "", fmt.Errorf("device A: %w", err)
	}
	b, err = udp.Open(udp.Config{Addr: netip.AddrPortFrom(y, port), ECN: true})
	if errors.Is(err, syscall.EADDRINUSE) && port != 0 {
		if note != "" {
			note += "; "
		}
		note += fmt.Sprintf("UDP port %d on %s: %s; B uses a free port instead", port, y, bindProblem(err))
		b, err = udp.Open(udp.Config{Addr: netip.AddrPortFrom(y, 0), ECN: true})
	}
	if err != nil {
		a.Close()
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, nil, "", fmt.Errorf("device B: %s is not an address of the kernel's side of %s (ip addr add %s/24 dev %s): %w", y, name, y, name, err)
		}
		return nil, nil, "", fmt.Errorf("device B: cannot open a UDP socket on %s: %w", y, err)
	}
	return a, b, note, nil
}

// bindProblem says briefly why a bind failed.
func bindProblem(err error) string {
	if errors.Is(err, syscall.EADDRINUSE) {
		return "in use (by another RoCEv2 stack such as rdma_rxe, or another demo)"
	}
	return err.Error()
}

// openSide opens a device on l whose packets go to peer's port, with a
// PD, a CQ and a registered buffer.
func (d *demo) openSide(name string, l, peer link.Link) (*demoSide, error) {
	local, err := l.LocalAddr()
	if err != nil {
		return nil, err
	}
	remote, err := peer.LocalAddr()
	if err != nil {
		return nil, err
	}
	lk := l
	if d.loss > 0 {
		ll := &lossyLink{Link: l, lad: d.lad}
		lk = ll
		if ifc, ok := l.(link.Interface); ok {
			// The device must still see an interface of its own, to
			// take its GIDs, GUID and MTU from it.
			lk = &lossyInterface{lossyLink: ll, ifc: ifc}
		}
	}
	dev, err := hca.Open(hca.Config{
		Name:     "demo" + name,
		Link:     lk,
		PeerPort: remote.SrcPort,
		Trace:    d.lad.trace(name[0]),
	})
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", name, err)
	}
	s := &demoSide{name: name, local: local, dev: dev, buf: make([]byte, demoBufSize)}
	if err := s.setup(); err != nil {
		dev.Close()
		return nil, fmt.Errorf("device %s: %w", name, err)
	}
	return s, nil
}

func (s *demoSide) setup() error {
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	if s.cq, err = s.dev.CreateCQ(64, nil, nil, 0); err != nil {
		return err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if s.mr, err = s.pd.RegMR(s.buf, access); err != nil {
		return err
	}
	create := func(typ verbs.QPType) (*hca.QP, error) {
		return s.pd.CreateQP(&hca.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, QPType: typ,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	}
	if s.rc, err = create(verbs.QPTypeRC); err != nil {
		return err
	}
	if s.ud, err = create(verbs.QPTypeUD); err != nil {
		return err
	}
	if s.name == "A" {
		s.tm, err = create(verbs.QPTypeRC)
		return err
	}
	// B's tag-matching SRQ: tags on its list, ordinary buffers for what
	// matches none, every completion on B's CQ.
	if s.tmSRQ, err = s.pd.CreateSRQ(&hca.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 1},
		TM: &hca.TMCap{MaxNumTags: 4, MaxOps: 4}, CQ: s.cq}); err != nil {
		return err
	}
	s.tm, err = s.pd.CreateQP(&hca.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, SRQ: s.tmSRQ, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	return err
}

// connect brings the RC QPs to RTS, each pointed at the other, and the UD
// QPs to RTS.
func (d *demo) connect() error {
	for _, p := range [][2]*demoSide{{d.a, d.b}, {d.b, d.a}} {
		me, peer := p[0], p[1]
		gid, err := peer.dev.QueryGID(1, 1) // GID 1: the peer's IP address
		if err != nil {
			return err
		}
		// RC: RESET -> INIT -> RTR -> RTS (ibv_modify_qp(3)), pointed at
		// the peer's RC QP, with full remote access and 4 READ/atomic
		// resources each way.
		rc := &hca.ConnectOptions{
			PathMTU:     verbs.MTU1024,
			PSN:         demoPSN,
			Access:      verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
			MinRNRTimer: 1,
			Timeout:     d.timeout(),
			MaxRdAtomic: 4, MaxDestRdAtomic: 4,
		}
		if err := me.rc.Connect(hca.Remote{QPN: peer.rc.Num(), PSN: demoPSN, GID: gid}, rc); err != nil {
			return fmt.Errorf("%s: RC QP: %w", me.name, err)
		}
		if err := me.tm.Connect(hca.Remote{QPN: peer.tm.Num(), PSN: demoPSN, GID: gid}, rc); err != nil {
			return fmt.Errorf("%s: tag-matching RC QP: %w", me.name, err)
		}
		// UD: no peer; each send names its destination.
		if err := me.ud.Connect(hca.Remote{}, &hca.ConnectOptions{PSN: demoPSN, QKey: demoQKey}); err != nil {
			return fmt.Errorf("%s: UD QP: %w", me.name, err)
		}
	}
	return nil
}

// timeout is the RC QPs' local ACK timeout: 4.096 us * 2^timeout before A
// retransmits. With -loss it is 14 (about 67 ms), to show retransmission
// quickly; otherwise 18 (about 1 s), so that a busy machine does not
// cause spurious retransmissions.
func (d *demo) timeout() uint8 {
	if d.loss > 0 {
		return 14
	}
	return 18
}

// wantWC is a completion a step waits for.
type wantWC struct {
	side    *demoSide
	wrID    uint64
	opcode  verbs.WCOpcode
	byteLen int // checked if >= 0
}

// gotWC is a completion as polled.
type gotWC struct {
	side *demoSide
	wc   verbs.WC
}

// step runs the common part of a step: it prints the intro, posts the
// work (post), waits for the completions, prints the ladder, the notes,
// the completions, and checks them.
func (d *demo) step(intro []string, post func() error, want []wantWC, notes []string) error {
	for _, l := range intro {
		d.printf("  %s\n", l)
	}
	if err := post(); err != nil {
		return err
	}
	got, err := d.wait(want)
	if err == nil {
		err = checkWCs(want, got)
	}
	d.lad.settle(5*time.Millisecond, 200*time.Millisecond)
	d.printf("\n")
	evs := d.lad.take()
	printLadder(d.out, evs)
	d.addSVG(evs)
	d.printf("\n")
	if err == nil {
		// The notes explain a step that went as planned.
		for _, l := range notes {
			d.printf("  %s\n", l)
		}
	}
	for _, ev := range evs {
		if ev.lost {
			d.printf("  Loss: A heard nothing back in time (about 67 ms) and sent the request again;\n")
			d.printf("  if B had seen it already, B answers the duplicate without executing it twice.\n")
			break
		}
	}
	d.printf("  Completions:\n")
	for _, g := range got {
		wc := &g.wc
		imm := "none"
		if wc.WCFlags&(verbs.WCFlagWithImm|verbs.WCFlagWithInv) != 0 {
			imm = fmt.Sprintf("%#x", wc.ImmData)
		}
		d.printf("    %s  wr_id=%d  status=%s  opcode=%s  byte_len=%d  imm=%s%s\n",
			g.side.name, wc.WRID, wc.Status, wc.Opcode, wc.ByteLen, imm, tmSummary(wc))
	}
	return err
}

// checkWCs checks that every completion want lists arrived successfully,
// with the right opcode and length.
func checkWCs(want []wantWC, got []gotWC) error {
	for _, w := range want {
		var wc *verbs.WC
		for i := range got {
			if got[i].side == w.side && got[i].wc.WRID == w.wrID {
				wc = &got[i].wc
			}
		}
		switch {
		case wc == nil:
			return fmt.Errorf("%s: no completion for wr_id %d", w.side.name, w.wrID)
		case wc.Status != verbs.WCSuccess:
			return fmt.Errorf("%s: wr_id %d completed with %q", w.side.name, w.wrID, wc.Status)
		case wc.Opcode != w.opcode:
			return fmt.Errorf("%s: wr_id %d completed as %s, want %s", w.side.name, w.wrID, wc.Opcode, w.opcode)
		case w.byteLen >= 0 && int(wc.ByteLen) != w.byteLen:
			return fmt.Errorf("%s: wr_id %d: byte_len %d, want %d", w.side.name, w.wrID, wc.ByteLen, w.byteLen)
		}
	}
	return nil
}

// wait polls both CQs until each side has as many completions as want
// lists for it.
func (d *demo) wait(want []wantWC) ([]gotWC, error) {
	need := map[*demoSide]int{}
	for _, w := range want {
		need[w.side]++
	}
	timeout := 5 * time.Second
	if d.loss > 0 {
		timeout = 30 * time.Second // retry_cnt 7 of about 67 ms each, several times over
	}
	deadline := time.Now().Add(timeout)
	var got []gotWC
	wcs := make([]verbs.WC, 8)
	for {
		done := true
		for _, s := range []*demoSide{d.a, d.b} {
			have := 0
			for _, g := range got {
				if g.side == s {
					have++
				}
			}
			if have < need[s] {
				done = false
				n := s.cq.Poll(wcs)
				for _, wc := range wcs[:n] {
					got = append(got, gotWC{s, wc})
				}
			}
		}
		if done {
			return got, nil
		}
		if time.Now().After(deadline) {
			return got, fmt.Errorf("no completion within %v (got %d of %d); drops: A %v, B %v",
				timeout, len(got), len(want), d.a.dev.TransportStats().DropNames(), d.b.dev.TransportStats().DropNames())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// checkBytes prints what a buffer holds and fails if it is not want.
func (d *demo) checkBytes(who string, got []byte, want string) error {
	d.printf("  %s buffer now holds: %q\n", who, got)
	if string(got) != want {
		return fmt.Errorf("%s buffer holds %q, want %q", who, got, want)
	}
	return nil
}

func (d *demo) stepSend() error {
	a, b := d.a, d.b
	// At least 16 bytes: Wireshark 4.0's RPC-over-RDMA heuristic reports
	// shorter RC SEND payloads as malformed.
	msg := "Hello from A to B"
	copy(a.buf[offSend:], msg)
	err := d.step([]string{
		fmt.Sprintf("B posts a receive (a buffer for the next message); A SENDs %d bytes into it.", len(msg)),
	}, func() error {
		if _, err := b.rc.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(offSend, 64)}}); err != nil {
			return err
		}
		_, err := a.rc.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(offSend, len(msg))}})
		return err
	}, []wantWC{{a, 1, verbs.WCSend, -1}, {b, 1, verbs.WCRecv, len(msg)}}, []string{
		"Why an ACK: RC is reliable. A keeps the message until B acknowledges its PSN,",
		"and would send it again after a timeout. msn, the message sequence number,",
		"counts the messages B has completed on this connection.",
	})
	if err != nil {
		return err
	}
	return d.checkBytes("B's", b.buf[offSend:offSend+len(msg)], msg)
}

func (d *demo) stepWrite() error {
	a, b := d.a, d.b
	msg := "Written by A into B's memory"
	copy(a.buf[offWrite:], msg)
	err := d.step([]string{
		fmt.Sprintf("A writes %d bytes straight into B's memory: the RETH carries B's address", len(msg)),
		"and R_Key (remote key). B posts no receive and gets no completion.",
	}, func() error {
		_, err := a.rc.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(offWrite, len(msg))},
			RDMA:   verbs.RDMAInfo{RemoteAddr: b.mr.Addr() + offWrite, RKey: b.mr.RKey()}})
		return err
	}, []wantWC{{a, 2, verbs.WCRDMAWrite, -1}}, []string{
		"Acknowledged like a SEND: msn has grown by one message.",
	})
	if err != nil {
		return err
	}
	return d.checkBytes("B's", b.buf[offWrite:offWrite+len(msg)], msg)
}

func (d *demo) stepRead() error {
	a, b := d.a, d.b
	msg := readMsg // in B's memory since the start
	err := d.step([]string{
		fmt.Sprintf("B's memory holds %q; A reads those %d bytes into its own buffer.", msg, len(msg)),
	}, func() error {
		_, err := a.rc.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(offRead, len(msg))},
			RDMA:   verbs.RDMAInfo{RemoteAddr: b.mr.Addr() + offRead, RKey: b.mr.RKey()}})
		return err
	}, []wantWC{{a, 3, verbs.WCRDMARead, len(msg)}}, []string{
		"The request carries no data (dlen says how much); the response carries the",
		"data and an AETH: it is itself the acknowledgement, no separate ACK.",
	})
	if err != nil {
		return err
	}
	return d.checkBytes("A's", a.buf[offRead:offRead+len(msg)], msg)
}

// counter is B's 64-bit atomic target, in host byte order as the HCA
// sees memory.
func (d *demo) counter() []byte { return d.b.buf[offAtomic : offAtomic+8] }

// loadCounter reads B's counter with an atomic load, as B's responder
// updates it with atomic operations: the next step's update is ordered
// after this read only through the UDP socket, which the race detector
// cannot see. (offAtomic keeps the word 8-byte aligned.)
func (d *demo) loadCounter() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&d.b.buf[offAtomic])))
}

func (d *demo) stepFetchAdd() error {
	a, b := d.a, d.b
	err := d.step([]string{
		"B's 64-bit counter holds 100. A atomically adds 5 to it (no other access",
		"to that word can come in between) and fetches the value it had before.",
	}, func() error {
		_, err := a.rc.PostSend(&verbs.SendWR{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(offAtomic, 8)},
			Atomic: verbs.AtomicInfo{RemoteAddr: b.mr.Addr() + offAtomic, RKey: b.mr.RKey(), CompareAdd: 5}})
		return err
	}, []wantWC{{a, 4, verbs.WCFetchAdd, 8}}, []string{
		"The Atomic Acknowledge returns the original value: orig=0x64 is 100.",
	})
	if err != nil {
		return err
	}
	return d.checkAtomic(offAtomic, 100, 105)
}

func (d *demo) stepCmpSwap() error {
	a, b := d.a, d.b
	err := d.step([]string{
		"A compares B's counter with 105 and, as they are equal, swaps in 7.",
	}, func() error {
		_, err := a.rc.PostSend(&verbs.SendWR{WRID: 5, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(offAtomic+8, 8)},
			Atomic: verbs.AtomicInfo{RemoteAddr: b.mr.Addr() + offAtomic, RKey: b.mr.RKey(), CompareAdd: 105, Swap: 7}})
		return err
	}, []wantWC{{a, 5, verbs.WCCompSwap, 8}}, []string{
		"cmp=0x69 (105) is the value expected, swap=0x7 the new one. The acknowledgement",
		"again returns the original value, which tells A whether the swap happened.",
	})
	if err != nil {
		return err
	}
	return d.checkAtomic(offAtomic+8, 105, 7)
}

// checkAtomic checks the original value A fetched into its buffer at off
// and B's counter.
func (d *demo) checkAtomic(off int, orig, now uint64) error {
	gotOrig := binary.NativeEndian.Uint64(d.a.buf[off:])
	gotNow := d.loadCounter()
	d.printf("  A's buffer now holds the original value %d; B's counter now holds %d\n", gotOrig, gotNow)
	if gotOrig != orig || gotNow != now {
		return fmt.Errorf("original value %d and counter %d, want %d and %d", gotOrig, gotNow, orig, now)
	}
	return nil
}

func (d *demo) stepUDSend() error {
	a, b := d.a, d.b
	msg := "Hello over UD"
	copy(a.buf[offUD:], msg)
	gid, err := b.dev.QueryGID(1, 1)
	if err != nil {
		return err
	}
	ah, err := a.pd.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}})
	if err != nil {
		return err
	}
	defer ah.Destroy()
	recvLen := grhArea + 64
	err = d.step([]string{
		"UD: no connection. A's QP sends to B's QP through an address handle; the",
		"DETH carries the Q_Key (a password B's QP checks) and A's QP number.",
	}, func() error {
		if _, err := b.ud.PostRecv(&verbs.RecvWR{WRID: 6, SGList: []verbs.SGE{b.mr.SGE(offUD, recvLen)}}); err != nil {
			return err
		}
		_, err := a.ud.PostSend(&verbs.SendWR{WRID: 6, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(offUD, len(msg))},
			UD:     verbs.UDInfo{AH: ah, RemoteQPN: b.ud.Num(), RemoteQKey: demoQKey}})
		return err
	}, []wantWC{{a, 6, verbs.WCSend, -1}, {b, 6, verbs.WCRecv, grhArea + len(msg)}}, []string{
		"No ACK: UD is unreliable; a lost datagram is simply gone, and A's completion",
		"only means the packet was sent.",
		fmt.Sprintf("GRH: B's buffer starts with %d bytes for the Global Route Header, so byte_len = %d + %d.", grhArea, grhArea, len(msg)),
		grhAreaNote(a.local.Src),
	})
	if err != nil {
		return err
	}
	src, hops, err := checkGRHArea(b.buf[offUD:offUD+grhArea], a.local.Src, b.local.Src)
	if err != nil {
		return err
	}
	hop := "hop limit"
	if src.Is4() {
		hop = "TTL"
	}
	d.printf("  B's GRH area names the sender %s; the packet arrived with %s %d\n", src, hop, hops)
	return d.checkBytes("B's", b.buf[offUD+grhArea:offUD+grhArea+len(msg)], msg)
}

// grhAreaNote says what RoCEv2 puts in a UD receive's GRH area for
// packets from src, as rxe does: RoCEv2 has no GRH on the wire, the IP
// header takes its place.
func grhAreaNote(src netip.Addr) string {
	if src.Is4() {
		return "RoCEv2 over IPv4 has no GRH: the area holds 20 zero bytes and then the packet's IPv4 header."
	}
	return "RoCEv2 over IPv6 has no GRH: the area holds the packet's IPv6 header, which has the GRH's layout."
}

// checkGRHArea checks the GRH area of a UD receive of a packet from src
// to dst: for IPv4, 20 zero bytes and the IPv4 header; for IPv6, the
// IPv6 header (rxe's layout). The header must say UDP, name the two
// addresses and carry the TTL or hop limit the packet arrived with, which
// is never 0 (ibv_init_ah_from_wc copies it into a reply's address). It
// returns the source address and the hop limit found there.
func checkGRHArea(grh []byte, src, dst netip.Addr) (netip.Addr, uint8, error) {
	var gotSrc, gotDst netip.Addr
	var proto, hops uint8
	if src.Is4() {
		if !bytes.Equal(grh[:20], make([]byte, 20)) || grh[20] != 0x45 {
			return netip.Addr{}, 0, fmt.Errorf("GRH area % x does not hold 20 zero bytes and an IPv4 header", grh)
		}
		ip := grh[20:]
		hops, proto = ip[8], ip[9]
		gotSrc, gotDst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	} else {
		if grh[0]>>4 != 6 {
			return netip.Addr{}, 0, fmt.Errorf("GRH area % x does not hold an IPv6 header", grh)
		}
		proto, hops = grh[6], grh[7]
		gotSrc, gotDst = netip.AddrFrom16([16]byte(grh[8:24])), netip.AddrFrom16([16]byte(grh[24:40]))
	}
	switch {
	case proto != 17:
		return gotSrc, hops, fmt.Errorf("GRH area % x: the IP header's protocol is %d, not UDP (17)", grh, proto)
	case gotSrc != src || gotDst != dst:
		return gotSrc, hops, fmt.Errorf("GRH area % x names %s -> %s, not A's packet %s -> %s", grh, gotSrc, gotDst, src, dst)
	case hops == 0:
		return gotSrc, hops, fmt.Errorf("GRH area % x: hop limit 0, not the one the packet arrived with", grh)
	}
	return gotSrc, hops, nil
}

// lossyLink drops the packets the ladder's trace hook chose to lose
// (-loss), so that the ladder can show which ones.
type lossyLink struct {
	link.Link
	lad *ladder
	mu  sync.Mutex
	out []link.Packet
}

func (l *lossyLink) Send(pkts []link.Packet) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out = l.out[:0]
	for i := range pkts {
		if !l.lad.dropped(&pkts[i]) {
			l.out = append(l.out, pkts[i])
		}
	}
	if len(l.out) == 0 {
		return nil
	}
	return l.Link.Send(l.out)
}

// lossyInterface is a lossyLink on a link.Interface (A's TAP link), and
// one itself.
type lossyInterface struct {
	*lossyLink
	ifc link.Interface
}

func (l *lossyInterface) Addrs() []netip.Addr { return l.ifc.Addrs() }
func (l *lossyInterface) MAC() [6]byte        { return l.ifc.MAC() }
func (l *lossyInterface) MTU() int            { return l.ifc.MTU() }

// tmSummary describes a tag-matching completion's flags and tag.
func tmSummary(wc *verbs.WC) string {
	switch wc.Opcode {
	case verbs.WCTMAdd, verbs.WCTMDel, verbs.WCTMSync, verbs.WCTMRecv, verbs.WCTMNoTag:
	default:
		return ""
	}
	var flags []string
	for _, f := range []struct {
		bit  verbs.WCFlags
		name string
	}{{verbs.WCFlagTMMatch, "MATCH"}, {verbs.WCFlagTMDataValid, "DATA_VALID"}, {verbs.WCFlagTMSyncReq, "SYNC_REQ"}} {
		if wc.WCFlags&f.bit != 0 {
			flags = append(flags, f.name)
		}
	}
	s := ""
	if len(flags) > 0 {
		s = "  flags=" + strings.Join(flags, "|")
	}
	if wc.WCFlags&verbs.WCFlagTMMatch != 0 || wc.WCFlags&verbs.WCFlagTMDataValid != 0 {
		s += fmt.Sprintf("  tag=%#x", wc.TMInfo.Tag)
	}
	return s
}

// addTag puts a tag on B's tag-matching SRQ's list, signaled: the
// TAG_ADD completes with wr_id 10*recvWRID, the tag's messages with
// recvWRID.
func (d *demo) addTag(recvWRID, tag uint64, off, n int) error {
	b := d.b
	_, err := b.tmSRQ.PostOps(&verbs.OpsWR{WRID: 10 * recvWRID, Opcode: verbs.WRTagAdd, Flags: verbs.OpsSignaled,
		TM: verbs.TMOp{Add: verbs.TagAdd{RecvWRID: recvWRID, Tag: tag, Mask: ^uint64(0), SGList: []verbs.SGE{b.mr.SGE(off, n)}}}})
	return err
}

func (d *demo) stepTMEager() error {
	a, b := d.a, d.b
	msg := "Eager: the data rides in the SEND"
	wire.TMH(a.buf[offEager:]).Encode(&wire.TMHFields{Opcode: wire.TMEager, AppCtx: 1, Tag: tagEager})
	copy(a.buf[offEager+wire.TMHSize:], msg)
	n := wire.TMHSize + len(msg)
	err := d.step([]string{
		fmt.Sprintf("B puts tag %#x on its tag-matching SRQ's list (ibv_post_srq_ops TAG_ADD) with a", tagEager),
		"buffer. A SENDs a message that starts with a 16-byte tag-matching header",
		fmt.Sprintf("(TMH: opcode EAGER, tag %#x); B's device matches the tag and puts the data", tagEager),
		"after the TMH into that tag's buffer, not into an ordinary receive.",
	}, func() error {
		if err := d.addTag(7, tagEager, offEager, 256); err != nil {
			return err
		}
		_, err := a.tm.PostSend(&verbs.SendWR{WRID: 7, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(offEager, n)}})
		return err
	}, []wantWC{{a, 7, verbs.WCSend, -1}, {b, 70, verbs.WCTMAdd, -1}, {b, 7, verbs.WCTMRecv, len(msg)}}, []string{
		"On the wire it is an ordinary SEND: tag matching needs nothing of the sender.",
		"TM_RECV with MATCH and DATA_VALID: the tag's buffer holds the data; byte_len",
		"counts it without the TMH.",
	})
	if err != nil {
		return err
	}
	return d.checkBytes("B's tag", b.buf[offEager:offEager+len(msg)], msg)
}

func (d *demo) stepTMRndv() error {
	a, b := d.a, d.b
	copy(a.buf[offRndvData:], rndvMsg)
	wire.TMH(a.buf[offRndvReq:]).Encode(&wire.TMHFields{Opcode: wire.TMRendezvous, AppCtx: 2, Tag: tagRndv})
	wire.RVH(a.buf[offRndvReq+wire.TMHSize:]).Encode(&wire.RVHFields{
		VirtualAddress: a.mr.Addr() + offRndvData, RKey: a.mr.RKey(), Length: uint32(len(rndvMsg))})
	err := d.step([]string{
		fmt.Sprintf("Rendezvous, for large messages: A SENDs only a TMH (opcode RNDV, tag %#x) and an", tagRndv),
		"RVH naming its buffer (address, R_Key, length). B's device matches the tag,",
		"READs A's buffer straight into the tag's buffer, then SENDs A a FIN (a TMH",
		"with opcode FIN) so that A may reuse its buffer.",
	}, func() error {
		if _, err := a.tm.PostRecv(&verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{a.mr.SGE(offFIN, 64)}}); err != nil {
			return err
		}
		if err := d.addTag(8, tagRndv, offRndvData, 256); err != nil {
			return err
		}
		_, err := a.tm.PostSend(&verbs.SendWR{WRID: 8, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(offRndvReq, wire.TMHSize+wire.RVHSize)}})
		return err
	}, []wantWC{{a, 8, verbs.WCSend, -1}, {a, 9, verbs.WCRecv, wire.TMHSize}, {b, 80, verbs.WCTMAdd, -1},
		{b, 8, verbs.WCTMRecv, len(rndvMsg)}, {b, 8, verbs.WCTMRecv, len(rndvMsg)}}, []string{
		"The READ is a request of B's own QP (B's PSNs, B's retries), sent as soon as",
		"the tag matched; A answers it as it answers any READ.",
		"Two TM_RECVs: MATCH when the tag is found, DATA_VALID once the READ has",
		"brought the data; A's RECV is the FIN.",
	})
	if err != nil {
		return err
	}
	if fin := wire.TMH(a.buf[offFIN : offFIN+wire.TMHSize]); fin.Opcode() != wire.TMFin || fin.Tag() != tagRndv {
		return fmt.Errorf("the FIN A received holds % x, want a TMH with opcode FIN and tag %#x", []byte(fin), tagRndv)
	}
	d.printf("  A's FIN: a TMH with opcode FIN and tag %#x\n", tagRndv)
	return d.checkBytes("B's tag", b.buf[offRndvData:offRndvData+len(rndvMsg)], rndvMsg)
}
