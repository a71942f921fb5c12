package udp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// Config describes a UDP link.
type Config struct {
	// Addr is the local address and port to bind; port 0 picks any free
	// port (tests use that), RoCEv2 interop uses 4791. IPv4 or IPv6; the
	// unspecified IPv6 address makes a dual-stack socket.
	Addr netip.AddrPort
	// RemotePort is the UDP destination port for sends whose Net.DstPort
	// is 0: default 4791.
	RemotePort uint16
	// GSO and GRO ask for UDP_SEGMENT and UDP_GRO when the kernel offers
	// them (probed at Open; Info says which are active).
	GSO, GRO bool
	// ECN makes every packet leave ECN-capable: ECT(0), 0b10, in the ECN
	// field (the low two bits) of the IPv4 TOS / IPv6 traffic class, set
	// on the socket (IP_TOS and IPV6_TCLASS). Net.TrafficClass of sent
	// packets is not consulted either way. Receiving does not depend on
	// it: Recv always reports the traffic class a datagram arrived with
	// (CE marks included) in Net.TrafficClass.
	ECN bool
	// BatchSize is the largest number of datagrams per recvmmsg/sendmmsg:
	// default 64, at most 1024.
	BatchSize int
}

// Info describes an open link's socket.
type Info struct {
	// GSO and GRO report whether UDP_SEGMENT and UDP_GRO are in use. GSO
	// can be switched off later, when the kernel refuses a super-packet.
	GSO, GRO bool
	// GSOMaxSegments and GSOMaxBytes bound one super-packet.
	GSOMaxSegments, GSOMaxBytes int
	// BatchSize is the recvmmsg/sendmmsg batch.
	BatchSize int
	// RecvBuffer and SendBuffer are SO_RCVBUF and SO_SNDBUF as the kernel
	// reports them (twice the requested size: it counts overhead).
	RecvBuffer, SendBuffer int
	// NoUDPChecksum reports SO_NO_CHECK: IPv4 datagrams leave with UDP
	// checksum 0. It is never set together with GSO, which Linux refuses
	// on such sockets.
	NoUDPChecksum bool
	// DualStack reports an IPv6 socket that also carries IPv4.
	DualStack bool
	// PacketInfo reports a wildcard bind: the destination address of
	// received datagrams comes from IP_PKTINFO/IPV6_PKTINFO, and sends
	// with Net.Src set use it as their source address.
	PacketInfo bool
	// ECN reports that packets leave with ECT(0) (Config.ECN).
	ECN bool
}

const (
	defaultBatch  = 64
	maxBatch      = 1024 // UIO_MAXIOV, the kernel's limit on vlen
	sockBufSize   = 4 << 20
	gsoMaxSegs    = 64
	gsoMaxBytes   = 65000
	groBufSize    = 65536
	maxUDPPayload = 65507

	// ctrlSize is the control-message space per message, for the most
	// the kernel sends with one datagram, UDP_GRO (an int), IPV6_PKTINFO
	// (in6_pktinfo, 20 bytes, larger than IP_PKTINFO's), IPV6_TCLASS
	// (an int, larger than IP_TOS's byte) and IPV6_HOPLIMIT or IP_TTL (an
	// int), and for what Send passes, UDP_SEGMENT and a PKTINFO. Each
	// takes a header and its data rounded up to the word size, at most 8
	// (TestCtrlSize checks it against unix.CmsgSpace).
	ctrlSize = 4*unix.SizeofCmsghdr + 8 + 24 + 8 + 8

	// ect0 is the ECN codepoint ECT(0), in the low two bits of the IPv4
	// TOS and the IPv6 traffic class (RFC 3168).
	ect0 = 0b10
)

// Link is a UDP socket carrying RoCEv2 packets. It implements link.Link.
type Link struct {
	conn *net.UDPConn
	rc   syscall.RawConn

	local      netip.AddrPort // unmapped
	v6         bool           // the socket is AF_INET6
	dual       bool
	pktinfo    bool
	scope      uint32 // the bound IPv6 address's scope, for zoneless link-local peers
	remotePort uint16
	batch      int

	gso     atomic.Bool
	gro     bool
	ecn     bool
	noCheck bool
	rcvBuf  int
	sndBuf  int

	closed atomic.Bool

	txPackets, txBytes, txDropped  atomic.Uint64
	rxPackets, rxBytes, rxTruncate atomic.Uint64
	// sockDrops is the socket's drop count when Stats or Close last read
	// it (the kernel counts; closing the socket loses the count).
	sockDrops atomic.Uint64

	tx txState
	rx rxState

	// Method values made once, so that passing them to RawConn does not
	// allocate.
	writeFn, readFn, readableFn func(fd uintptr) bool
	tryReadFn                   func(fd uintptr)

	// WaitReadable's state; one goroutine waits at a time.
	waitMu sync.Mutex
	ready  func() bool
}

var _ link.Poller = (*Link)(nil)

// Open creates the socket, binds it and probes the offloads.
func Open(cfg Config) (*Link, error) {
	if !cfg.Addr.IsValid() {
		return nil, fmt.Errorf("link/udp: invalid address %v: %w", cfg.Addr, syscall.EINVAL)
	}
	if cfg.BatchSize < 0 || cfg.BatchSize > maxBatch {
		return nil, fmt.Errorf("link/udp: batch size %d out of range 0..%d: %w", cfg.BatchSize, maxBatch, syscall.EINVAL)
	}
	l := &Link{batch: cfg.BatchSize, remotePort: cfg.RemotePort}
	if l.batch == 0 {
		l.batch = defaultBatch
	}
	if l.remotePort == 0 {
		l.remotePort = wire.RoCEv2Port
	}
	addr := cfg.Addr.Addr().Unmap()
	if addr.IsMulticast() || addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		// The net package would bind a multicast address as the
		// wildcard, and a socket on the broadcast address sends from
		// whatever address the kernel picks: neither is a device's GID.
		return nil, fmt.Errorf("link/udp: %v is not a unicast address, which a device binds: %w", addr, syscall.EINVAL)
	}
	l.v6 = addr.Is6()
	l.dual = l.v6 && addr.IsUnspecified()
	l.pktinfo = addr.IsUnspecified()
	network := "udp4"
	if l.v6 {
		network = "udp6"
	}

	var setupErr error
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		if err := c.Control(func(fd uintptr) { setupErr = l.setup(int(fd), cfg) }); err != nil {
			return err
		}
		return setupErr
	}}
	bind := netip.AddrPortFrom(addr, cfg.Addr.Port()).String()
	pc, err := lc.ListenPacket(context.Background(), network, bind)
	if err != nil {
		return nil, fmt.Errorf("link/udp: %w", err)
	}
	l.conn = pc.(*net.UDPConn)
	if l.rc, err = l.conn.SyscallConn(); err != nil {
		l.conn.Close()
		return nil, fmt.Errorf("link/udp: %w", err)
	}
	la := l.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	l.local = netip.AddrPortFrom(la.Addr().Unmap().WithZone(""), la.Port())
	if z := la.Addr().Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			l.scope = uint32(ifi.Index)
		}
	}
	l.tx.init(l.batch)
	l.rx.init(l.batch, l.gro)
	l.writeFn = l.write
	l.readFn = l.read
	l.tryReadFn = l.tryRead
	l.readableFn = l.readable
	return l, nil
}

// setup sets the socket options before bind. It runs inside
// RawConn.Control, on the fresh socket.
func (l *Link) setup(fd int, cfg Config) error {
	if l.dual {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return fmt.Errorf("IPV6_V6ONLY: %w", err)
		}
	}
	if !l.v6 || l.dual {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
			return fmt.Errorf("IP_MTU_DISCOVER: %w", err)
		}
	}
	if l.v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO); err != nil {
			return fmt.Errorf("IPV6_MTU_DISCOVER: %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1); err != nil {
			return fmt.Errorf("IPV6_DONTFRAG: %w", err)
		}
	}
	if l.pktinfo {
		var err error
		if l.v6 {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		} else {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		}
		if err != nil {
			return fmt.Errorf("packet info: %w", err)
		}
	}
	// The traffic class: received always (IPv4 datagrams on a dual-stack
	// socket report it as IP_TOS, IPv6 ones as IPV6_TCLASS), sent as
	// ECT(0) with ECN (a dual-stack socket sends IPv4 with IP_TOS).
	// The hop limit (TTL) each datagram arrived with, too: a UD receive's
	// 40-byte header area carries it, as rxe's does.
	if !l.v6 || l.dual {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1); err != nil {
			return fmt.Errorf("IP_RECVTOS: %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTTL, 1); err != nil {
			return fmt.Errorf("IP_RECVTTL: %w", err)
		}
		if cfg.ECN {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, ect0); err != nil {
				return fmt.Errorf("IP_TOS: %w", err)
			}
		}
	}
	if l.v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1); err != nil {
			return fmt.Errorf("IPV6_RECVTCLASS: %w", err)
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1); err != nil {
			return fmt.Errorf("IPV6_RECVHOPLIMIT: %w", err)
		}
		// RoCEv2 senders send IPv6 with UDP checksum 0 (IBTA A17.2.3;
		// rxe and link/tap do), which Linux drops on an ordinary socket
		// (RFC 8200 requires a checksum): accept them, as rxe's own
		// tunnel socket does (udp_sock_create6 sets no_check6_rx).
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1); err != nil {
			return fmt.Errorf("UDP_NO_CHECK6_RX: %w", err)
		}
		if cfg.ECN {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, ect0); err != nil {
				return fmt.Errorf("IPV6_TCLASS: %w", err)
			}
		}
	}
	l.ecn = cfg.ECN
	// Buffers: best effort.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sockBufSize) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, sockBufSize)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sockBufSize) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sockBufSize)
	}
	l.rcvBuf, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	l.sndBuf, _ = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF)
	// Offloads: a kernel without them answers ENOPROTOOPT.
	if cfg.GSO {
		if _, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT); err == nil {
			l.gso.Store(true)
		}
	}
	if cfg.GRO {
		if unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil {
			l.gro = true
		}
	}
	// Checksum 0 as RoCEv2 senders send it, unless GSO needs one.
	if (!l.v6 || l.dual) && !l.gso.Load() {
		l.noCheck = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) == nil
	}
	return nil
}

// LocalAddr returns the address and port the link is bound to, as the
// source fields of a wire.Net (Src, SrcPort, DontFragment). After a
// wildcard bind Src is the unspecified address: the sender must then set
// Net.Src per packet to the address its ICRC was computed with.
func (l *Link) LocalAddr() (wire.Net, error) {
	if l.closed.Load() {
		return wire.Net{}, net.ErrClosed
	}
	return wire.Net{Src: l.local.Addr(), SrcPort: l.local.Port(), DontFragment: true}, nil
}

// Stats returns the link's counters.
func (l *Link) Stats() link.Stats {
	return link.Stats{
		TxPackets:   l.txPackets.Load(),
		TxBytes:     l.txBytes.Load(),
		TxDropped:   l.txDropped.Load(),
		RxPackets:   l.rxPackets.Load(),
		RxBytes:     l.rxBytes.Load(),
		RxTruncated: l.rxTruncate.Load(),

		RxSocketDropped: l.socketDrops(),
	}
}

// Info describes the socket: active offloads, batch and buffer sizes.
func (l *Link) Info() Info {
	return Info{
		GSO:            l.gso.Load(),
		GRO:            l.gro,
		GSOMaxSegments: gsoMaxSegs,
		GSOMaxBytes:    gsoMaxBytes,
		BatchSize:      l.batch,
		RecvBuffer:     l.rcvBuf,
		SendBuffer:     l.sndBuf,
		NoUDPChecksum:  l.noCheck,
		DualStack:      l.dual,
		PacketInfo:     l.pktinfo,
		ECN:            l.ecn,
	}
}

// Close closes the socket; a blocked Recv or Send returns net.ErrClosed.
// Closing twice is not an error.
func (l *Link) Close() error {
	l.socketDrops() // the last count, before the socket goes
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	if err := l.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("link/udp: %w", err)
	}
	return nil
}

// socketDrops reads how many datagrams the kernel dropped at the socket
// (SO_MEMINFO, Linux 3.9 and later) and returns it; once the socket is
// closed, or if the kernel cannot say, it returns the last count read.
func (l *Link) socketDrops() uint64 {
	if !l.closed.Load() {
		var mem [16]uint32 // SK_MEMINFO_VARS, and room for more in later kernels
		n := uint32(unsafe.Sizeof(mem))
		_ = l.rc.Control(func(fd uintptr) {
			_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_MEMINFO,
				uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&n)), 0)
			if e == 0 && n >= 4*(unix.SK_MEMINFO_DROPS+1) {
				l.sockDrops.Store(uint64(mem[unix.SK_MEMINFO_DROPS]))
			}
		})
	}
	return l.sockDrops.Load()
}

// closedErr turns an error from RawConn into net.ErrClosed when the link
// is closed.
func (l *Link) closedErr(err error) error {
	if l.closed.Load() || errors.Is(err, net.ErrClosed) {
		return net.ErrClosed
	}
	return fmt.Errorf("link/udp: %w", err)
}
