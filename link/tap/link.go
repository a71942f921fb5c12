package tap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/songgao/water"
	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// LinkConfig describes a TAP link.
type LinkConfig struct {
	// Name is the TAP interface. An existing TAP interface of that name
	// is attached and left as it was found when the link closes (`ip
	// tuntap add mode tap user USER name NAME` makes one that USER may
	// open without privileges); otherwise the link creates it, which
	// needs CAP_NET_ADMIN, and it goes away when the link closes. Empty:
	// create one the kernel names (tap0, tap1, ...).
	Name string
	// Host is softhca's host on the link: its MAC, its addresses, the
	// MTU and the neighbour cache (see Config). A zero MAC is the
	// locally administered 02:00:a.b.c.d of the first address's last
	// four bytes, the MAC hca derives its default node GUID from. A zero
	// MTU is the interface's MTU when it exists already, else 1500; the
	// interface's MTU is set to it.
	Host Config
	// KernelAddrs are addresses (with their prefixes) for the kernel's
	// side of an interface the link creates, so that this machine (its
	// sockets, ping) reaches the host over it: an IPv4 address replaces
	// the interface's, IPv6 ones are added. Attaching to an existing
	// interface with KernelAddrs set is an error: its addresses are its
	// owner's.
	KernelAddrs []netip.Prefix
	// Clock drives the neighbour cache's timers; default the wall clock.
	Clock clock.Clock
	// LoopbackQueue bounds the packets sent to the host's own addresses
	// that wait for Recv (a device talking to itself: the frames would
	// never come back from the network, so the link loops them back, as
	// rxe does). Default 256; further packets are dropped and counted.
	LoopbackQueue int
}

// DefaultLoopbackQueue is LinkConfig.LoopbackQueue's default.
const DefaultLoopbackQueue = 256

// Link is a TAP device carrying RoCEv2 packets for a Host: it implements
// link.Link, link.Poller and link.Interface.
//
// # Ownership and threading
//
// The Host is not safe for concurrent use; the Link serialises it with
// one mutex, which Send, the reading goroutine (Recv, TryRecv), the
// neighbour timer (a clock.Timer, no goroutine of its own) and Stats
// take. Frames are written to the TAP device while it is held, one
// write(2) each, from the Host's buffer. Reading happens outside it,
// into a frame buffer of the Link's that only the one reader uses.
type Link struct {
	file *os.File
	rc   syscall.RawConn
	name string
	clk  clock.Clock

	mu        sync.Mutex // guards host, the timer, the announcements, txWriteErr
	host      *Host
	timer     clock.Timer
	armed     bool
	solicits  uint64 // host requests counted when the timer was last considered
	txWriteEr uint64
	// The frame Emit is writing and the write's error, for the
	// RawConn.Write callback made once (a closure would allocate).
	tx struct {
		frame []byte
		err   error
		write func(fd uintptr) bool
	}
	// The announcements still to make after Open's (announceRounds), and
	// when the next is due.
	announceLeft int
	announceAt   time.Time

	// Immutable after Open: the host's view, for Interface and Send's
	// loopback test without the mutex.
	addrs []netip.Addr
	mac   [6]byte
	mtu   int
	local wire.Net

	rx   rxFrames
	loop loopQueue

	// rxShortBuf counts packets dropped because the reader's buffer was
	// smaller than link.MaxPacketSize.
	rxShortBuf atomic.Uint64

	// gone is set when the device failed for good (the interface was
	// deleted: reads and writes fail with EBADFD): every call then
	// returns it, an error wrapping net.ErrClosed, instead of failing
	// again and again.
	gone atomic.Pointer[error]

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	waitMu sync.Mutex
}

var (
	_ link.Poller    = (*Link)(nil)
	_ link.Interface = (*Link)(nil)
)

// rxFrames is the reader's state: one goroutine reads at a time.
type rxFrames struct {
	mu    sync.Mutex
	frame []byte
	// Set inside a RawConn.Read callback: the read's length and error.
	n   int
	err error
	// The RawConn callbacks, made once (a method value allocates).
	try  func(fd uintptr)
	wait func(fd uintptr) bool
}

// Open opens (or creates) the TAP interface, configures it (MTU, up,
// KernelAddrs) and returns the link. Errors wrap the errno: EPERM
// without CAP_NET_ADMIN, EINVAL for a bad configuration or an interface
// that is not a TAP.
func Open(cfg LinkConfig) (*Link, error) {
	if len(cfg.Name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("link/tap: interface name %q is longer than %d bytes: %w", cfg.Name, unix.IFNAMSIZ-1, syscall.EINVAL)
	}
	if cfg.LoopbackQueue < 0 {
		return nil, fmt.Errorf("link/tap: LoopbackQueue %d is negative: %w", cfg.LoopbackQueue, syscall.EINVAL)
	}
	if cfg.LoopbackQueue == 0 {
		cfg.LoopbackQueue = DefaultLoopbackQueue
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if len(cfg.Host.Addrs) == 0 {
		return nil, fmt.Errorf("link/tap: the host needs an address: %w", syscall.EINVAL)
	}
	if cfg.Host.MAC == ([6]byte{}) {
		cfg.Host.MAC = DefaultMAC(cfg.Host.Addrs[0])
	}
	for _, p := range cfg.KernelAddrs {
		if !p.IsValid() || p.Addr().Zone() != "" {
			return nil, fmt.Errorf("link/tap: kernel address %v: %w", p, syscall.EINVAL)
		}
	}

	existing := false
	if cfg.Name != "" {
		exists, isTAP, err := tunKind(cfg.Name)
		if err != nil {
			return nil, fmt.Errorf("link/tap: %w", err)
		}
		if exists && !isTAP {
			return nil, fmt.Errorf("link/tap: %s is a TUN interface, not a TAP: %w", cfg.Name, syscall.EINVAL)
		}
		existing = exists
	}
	if existing && len(cfg.KernelAddrs) > 0 {
		return nil, fmt.Errorf("link/tap: %s exists: its addresses are its owner's to set (KernelAddrs is for an interface the link creates): %w", cfg.Name, syscall.EINVAL)
	}
	// water clears the persist flag unless asked to set it: an existing
	// (persistent) interface keeps it.
	ifce, err := water.New(water.Config{DeviceType: water.TAP,
		PlatformSpecificParams: water.PlatformSpecificParams{Name: cfg.Name, Persist: existing}})
	if err != nil {
		return nil, openError(cfg.Name, existing, err)
	}
	f, ok := ifce.ReadWriteCloser.(*os.File)
	if !ok {
		ifce.Close()
		return nil, fmt.Errorf("link/tap: water returned a %T, not a file", ifce.ReadWriteCloser)
	}
	l := &Link{file: f, name: ifce.Name(), clk: cfg.Clock}
	if l.rc, err = f.SyscallConn(); err != nil {
		f.Close()
		return nil, fmt.Errorf("link/tap: %w", err)
	}
	if err := l.configure(&cfg, existing); err != nil {
		f.Close()
		return nil, err
	}
	h, err := New(cfg.Host, emitter{l})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("link/tap: %w: %w", err, syscall.EINVAL)
	}
	l.host = h
	l.addrs, l.mac, l.mtu = h.Addrs(), h.MAC(), h.MTU()
	l.local = wire.Net{Src: l.addrs[0], SrcPort: wire.RoCEv2Port, DontFragment: true}
	l.rx.frame = make([]byte, ethHdrLen+max(l.mtu, wire.IPv6HeaderSize+wire.UDPHeaderSize+link.MaxPacketSize)+64)
	l.tx.write = l.writeFrame
	l.rx.try = func(fd uintptr) { l.readFrame(fd, false) }
	l.rx.wait = func(fd uintptr) bool { return l.readFrame(fd, true) }
	l.loop.init(cfg.LoopbackQueue)
	l.timer = l.clk.AfterFunc(time.Hour, l.fire)
	l.timer.Stop()
	l.mu.Lock()
	h.Announce()
	l.announceLeft = len(announceRounds)
	now := l.clk.Now()
	l.announceAt = now.Add(announceRounds[0])
	l.arm(now)
	l.mu.Unlock()
	return l, nil
}

// openError explains why the TAP device could not be opened.
func openError(name string, existing bool, err error) error {
	what := "creating a TAP interface"
	if existing {
		what = "attaching to TAP interface " + name
	} else if name != "" {
		what = "creating TAP interface " + name
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EPERM, syscall.EACCES:
			hint := "needs root or CAP_NET_ADMIN"
			if existing {
				hint = "the interface belongs to another user (ip tuntap add mode tap user USER name NAME), or needs CAP_NET_ADMIN"
			} else {
				hint += ", or an interface made beforehand: ip tuntap add mode tap user $USER name NAME"
			}
			return fmt.Errorf("link/tap: %s: %w (%s)", what, errno, hint)
		case syscall.ENOENT, syscall.ENODEV:
			return fmt.Errorf("link/tap: %s: /dev/net/tun: %w (no TUN/TAP driver: modprobe tun, or in a container pass --device /dev/net/tun)", what, errno)
		case syscall.EBUSY:
			return fmt.Errorf("link/tap: %s: %w (another process has it open)", what, errno)
		}
	}
	return fmt.Errorf("link/tap: %s: %w", what, err)
}

// configure sets the interface's MTU and addresses and brings it up. If
// it fails, an existing interface gets its MTU back (one the link
// created goes away with the file).
func (l *Link) configure(cfg *LinkConfig, existing bool) (err error) {
	c, err := openIfconfig(l.name, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("link/tap: %w", err)
	}
	defer c.close()
	cur, err := c.mtu()
	if err != nil {
		return fmt.Errorf("link/tap: %s: %w", l.name, err)
	}
	defer func() {
		if err != nil && existing {
			_ = c.setMTU(cur)
		}
	}()
	if cfg.Host.MTU == 0 {
		cfg.Host.MTU = DefaultMTU
		if existing {
			cfg.Host.MTU = cur
		}
	}
	if cfg.Host.MTU < 1280 || cfg.Host.MTU > 65535 {
		return fmt.Errorf("link/tap: MTU %d is outside 1280..65535: %w", cfg.Host.MTU, syscall.EINVAL)
	}
	if cur != cfg.Host.MTU {
		if err := c.setMTU(cfg.Host.MTU); err != nil {
			return fmt.Errorf("link/tap: %s: %w", l.name, err)
		}
	}
	for _, p := range cfg.KernelAddrs {
		if !p.Addr().Unmap().Is4() {
			continue
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		if err := c.addIPv4(p); err != nil {
			return fmt.Errorf("link/tap: %s: %w", l.name, err)
		}
	}
	if err := c.up(); err != nil {
		return fmt.Errorf("link/tap: %s is down and cannot be brought up: %w", l.name, err)
	}
	var c6 *ifconfig
	for _, p := range cfg.KernelAddrs {
		if p.Addr().Unmap().Is4() {
			continue
		}
		if c6 == nil {
			if c6, err = openIfconfig(l.name, unix.AF_INET6); err != nil {
				return fmt.Errorf("link/tap: %w", err)
			}
			defer c6.close()
		}
		ifi, err := net.InterfaceByName(l.name)
		if err != nil {
			return fmt.Errorf("link/tap: %w", err)
		}
		if err := c6.addIPv6(p, ifi.Index); err != nil {
			return fmt.Errorf("link/tap: %s: %w", l.name, err)
		}
	}
	return nil
}

// DefaultMAC is the MAC of a host whose LinkConfig.Host.MAC is zero and
// whose first address is addr: wire.MACFromAddr (02:00 and addr's last
// four bytes, locally administered), which hca's default node GUID
// supposes.
func DefaultMAC(addr netip.Addr) [6]byte { return wire.MACFromAddr(addr) }

// Name returns the TAP interface's name.
func (l *Link) Name() string { return l.name }

// Addrs returns the host's addresses (link.Interface): the configured
// ones, then the link-local address derived from the MAC.
func (l *Link) Addrs() []netip.Addr { return append([]netip.Addr(nil), l.addrs...) }

// MAC returns the host's MAC address.
func (l *Link) MAC() [6]byte { return l.mac }

// MTU returns the interface's MTU.
func (l *Link) MTU() int { return l.mtu }

// LocalAddr returns the host's first address and port 4791.
func (l *Link) LocalAddr() (wire.Net, error) {
	if l.closed.Load() {
		return wire.Net{}, net.ErrClosed
	}
	return l.local, nil
}

// HostStats returns the host's counters: frames by outcome and drop
// reason, neighbour resolution.
func (l *Link) HostStats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.host.Stats()
}

// Stats returns the link's counters (link.Stats): the host's RoCEv2
// packets, TxDropped for every packet not sent (Send's reasons, failed
// writes, a full loopback queue), and every frame drop by reason in
// Drops.
func (l *Link) Stats() link.Stats {
	l.mu.Lock()
	hs := l.host.Stats()
	writeErr := l.txWriteEr
	l.mu.Unlock()
	s := hs.Link()
	lo := l.loop.stats()
	s.TxPackets += lo.packets
	s.TxBytes += lo.bytes
	s.RxPackets += lo.delivered
	s.RxBytes += lo.deliveredBytes
	s.TxDropped += writeErr + lo.full + lo.invalid
	s.RxTruncated += l.rxShortBuf.Load()
	s.Drops = make(map[string]uint64, NumDropReasons+NumTxDropReasons+2)
	for r := DropReason(1); r < numDropReasons; r++ {
		s.Drops["rx frame: "+r.String()] = hs.RxDropped[r]
	}
	for r := TxDropReason(1); r < numTxDropReasons; r++ {
		if r != TxLoopback { // the link is a Looper: never counted
			s.Drops["tx: "+r.String()] = hs.TxDropped[r]
		}
	}
	s.Drops["tx: write to the TAP device failed"] = writeErr
	s.Drops["tx: loopback queue full"] = lo.full
	s.Drops["tx: loopback packet invalid"] = lo.invalid
	return s
}

// Close closes the TAP device: a blocked Recv or WaitReadable returns
// net.ErrClosed. An interface the link created goes away. Closing twice
// is not an error.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.mu.Lock()
		l.timer.Stop()
		l.armed = false
		l.mu.Unlock()
		if err := l.file.Close(); err != nil {
			l.closeErr = fmt.Errorf("link/tap: %w", err)
		}
	})
	return l.closeErr
}

// Send frames the packets and writes them to the TAP device, or loops
// them back when they are for the host's own addresses. It never blocks
// on the network: packets that wait for their neighbour's MAC are held
// by the Host (bounded), and a write the device refuses is counted.
func (l *Link) Send(pkts []link.Packet) error {
	if l.closed.Load() {
		return net.ErrClosed
	}
	if g := l.gone.Load(); g != nil {
		return *g
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Now()
	l.host.Send(now, pkts)
	l.rearm(now)
	return nil
}

// Loop queues a packet Send was given for one of the host's own
// addresses (Looper), with the IP and UDP fields it would have arrived
// with, for Recv. The host has checked the addresses, the size and
// filled the defaults; what its Receive would refuse on top (another
// port, a bad ICRC: every packet Recv returns has had its ICRC checked)
// is refused here. Preconditions: l.mu is held (the Host calls it from
// within Send).
func (e emitter) Loop(n wire.Net, ib []byte) {
	l := e.l
	switch {
	case n.DstPort != wire.RoCEv2Port, len(ib) < wire.BTHSize+wire.ICRCSize, !wire.CheckICRC(&n, ib):
		l.loop.reject()
	default:
		if l.loop.push(n, ib) {
			l.wake()
		}
	}
}

// wake interrupts a blocked read (Recv, WaitReadable), which then looks
// at the loopback queue: a read deadline in the past.
func (l *Link) wake() { _ = l.file.SetReadDeadline(time.Unix(1, 0)) }

// rearm arms the neighbour timer when the host started a resolution and
// the timer is idle. Preconditions: l.mu is held.
func (l *Link) rearm(now time.Time) {
	st := &l.host.stats
	if n := st.ARPRequests + st.NeighbourSolicits; n != l.solicits {
		l.solicits = n
		if !l.armed {
			l.arm(now)
		}
	}
}

// announceRounds are the delays between the host's announcements after
// the one Open makes: a TAP device the link creates is usually put on a
// bridge just after (`ip link set tapN master br0`), and frames sent
// before that reach no one. QEMU announces a guest the same way, in
// rounds 50 ms apart and growing.
var announceRounds = [...]time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond}

// Announce tells the link the host's MAC for each of its addresses again
// (Host.Announce): after the TAP interface joined a bridge, say. Open
// announces it at once and in three rounds over the next half second.
func (l *Link) Announce() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed.Load() {
		l.host.Announce()
	}
}

// arm sets the timer to the host's next deadline, or the next
// announcement's. Preconditions: l.mu is held.
func (l *Link) arm(now time.Time) {
	at, ok := l.host.NextDeadline()
	if l.announceLeft > 0 && (!ok || l.announceAt.Before(at)) {
		at, ok = l.announceAt, true
	}
	if !ok || l.closed.Load() {
		l.armed = false
		return
	}
	l.armed = true
	l.timer.Reset(max(at.Sub(now), 0))
}

// fire is the neighbour timer.
func (l *Link) fire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return
	}
	now := l.clk.Now()
	l.host.Timer(now)
	if l.announceLeft > 0 && !now.Before(l.announceAt) {
		l.host.Announce()
		l.announceLeft--
		if l.announceLeft > 0 {
			l.announceAt = now.Add(announceRounds[len(announceRounds)-l.announceLeft])
		}
	}
	st := &l.host.stats
	l.solicits = st.ARPRequests + st.NeighbourSolicits
	l.arm(now)
}

// emitter writes the host's frames to the TAP device.
type emitter struct{ l *Link }

// Emit writes one frame. Preconditions: l.mu is held (the Host calls it
// from within Send, Receive or Timer).
func (e emitter) Emit(frame []byte) {
	l := e.l
	l.tx.frame, l.tx.err = frame, nil
	err := l.rc.Write(l.tx.write)
	if err != nil || l.tx.err != nil {
		l.txWriteEr++
		if errors.Is(l.tx.err, unix.EBADFD) {
			l.fail(l.tx.err)
		}
	}
	l.tx.frame = nil
}

// fail marks the device gone (see Link.gone) and returns the error every
// call returns from then on.
func (l *Link) fail(err error) error {
	e := fmt.Errorf("link/tap: %s is gone (%w; was the interface deleted?): %w", l.name, err, net.ErrClosed)
	l.gone.CompareAndSwap(nil, &e)
	return *l.gone.Load()
}

// writeFrame writes l.tx.frame: the RawConn.Write callback. A full device
// queue (EAGAIN) drops the frame instead of waiting: the Host holds the
// mutex every sender needs.
func (l *Link) writeFrame(fd uintptr) bool {
	for {
		_, l.tx.err = unix.Write(int(fd), l.tx.frame)
		if !errors.Is(l.tx.err, unix.EINTR) {
			return true
		}
	}
}

// Recv blocks until at least one RoCEv2 packet for the host arrives (or
// was looped back), returns up to len(pkts) of those queued, and handles
// every other frame on the way (answers ARP, neighbour discovery and
// echo; counts drops).
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	l.rx.mu.Lock()
	defer l.rx.mu.Unlock()
	return l.recv(pkts, true)
}

// TryRecv is Recv without the wait (link.Poller): 0 when nothing is
// queued or another goroutine is reading.
func (l *Link) TryRecv(pkts []link.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	if !l.rx.mu.TryLock() {
		return 0, nil
	}
	defer l.rx.mu.Unlock()
	return l.recv(pkts, false)
}

// recv fills pkts from the loopback queue and the device; with block it
// waits for the first packet. Preconditions: l.rx.mu is held.
func (l *Link) recv(pkts []link.Packet, block bool) (int, error) {
	n := 0
	for {
		if l.closed.Load() {
			return 0, net.ErrClosed
		}
		if g := l.gone.Load(); g != nil {
			return n, *g
		}
		n += l.loop.take(pkts[n:])
		wait := block && n == 0
		woken := false
		for n < len(pkts) {
			l.rx.n, l.rx.err = 0, nil
			var err error
			if wait {
				err = l.rc.Read(l.rx.wait)
			} else {
				// Control, not Read: TryRecv runs inside WaitReadable's
				// Read callback, which holds the file's read lock.
				err = l.rc.Control(l.rx.try)
			}
			if err == nil {
				err = l.rx.err
			}
			if errors.Is(err, unix.EAGAIN) {
				break
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// wake: the loopback queue has packets.
				_ = l.file.SetReadDeadline(time.Time{})
				woken = true
				break
			}
			if err != nil {
				if l.closed.Load() || errors.Is(err, os.ErrClosed) {
					return 0, net.ErrClosed
				}
				return n, l.fail(err)
			}
			if l.deliver(l.rx.frame[:l.rx.n], &pkts[n]) {
				n++
				wait = false
			}
		}
		if n == len(pkts) || (n > 0 && !woken) || (!block && !woken) {
			return n, nil
		}
	}
}

// readFrame reads one frame into the reader's buffer: the RawConn.Read
// callback. With wait, EAGAIN makes RawConn wait for the device to be
// readable and call it again; without, the caller sees EAGAIN.
func (l *Link) readFrame(fd uintptr, wait bool) bool {
	for {
		l.rx.n, l.rx.err = unix.Read(int(fd), l.rx.frame)
		if errors.Is(l.rx.err, unix.EINTR) {
			continue
		}
		return !wait || !errors.Is(l.rx.err, unix.EAGAIN)
	}
}

// deliver hands one frame to the host and, if it is a RoCEv2 packet,
// copies it into p.
func (l *Link) deliver(frame []byte, p *link.Packet) bool {
	var got link.Packet
	l.mu.Lock()
	now := l.clk.Now()
	o, _ := l.host.Receive(now, frame, &got)
	l.rearm(now)
	l.mu.Unlock()
	if o != Delivered {
		return false
	}
	if cap(p.Buf) < len(got.Buf) {
		l.rxShortBuf.Add(1)
		return false
	}
	p.Buf = p.Buf[:copy(p.Buf[:cap(p.Buf)], got.Buf)]
	p.Net = got.Net
	return true
}

// WaitReadable calls ready when packets may be queued (link.Poller): at
// once, then whenever a frame arrives or a packet is looped back.
func (l *Link) WaitReadable(ready func() bool) error {
	l.waitMu.Lock()
	defer l.waitMu.Unlock()
	for {
		if l.closed.Load() {
			return net.ErrClosed
		}
		if g := l.gone.Load(); g != nil {
			return *g
		}
		// RawConn.Read calls ready before it waits, and again after
		// each wake; a past read deadline (wake) ends the wait.
		err := l.rc.Read(func(uintptr) bool { return ready() })
		switch {
		case err == nil:
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			_ = l.file.SetReadDeadline(time.Time{})
		case l.closed.Load() || errors.Is(err, os.ErrClosed):
			return net.ErrClosed
		default:
			return l.fail(err)
		}
	}
}
