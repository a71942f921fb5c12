package udp_test

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/wire"
)

// Throughput over IPv4 loopback: one goroutine sends, another receives.
// The sender keeps at most benchWindow packets in flight (the receiver's
// count is the ACK clock), so a full socket buffer rarely drops a packet;
// the figure is delivered throughput, and what loopback did drop is
// reported as "lost" (more than 1% fails the benchmark). One op is one packet of
// benchPayload bytes of payload (4112 bytes of InfiniBand packet).
const (
	benchPayload = 4096
	benchBatch   = 64
	benchWindow  = 512
)

// BenchmarkSendRecv4096 measures the link with every offload combination.
func BenchmarkSendRecv4096(b *testing.B) { sendRecv(b, benchPayload) }

// BenchmarkSendRecv64 is BenchmarkSendRecv4096 with the 80-byte packets of
// 64-byte SENDs: what the link costs per packet rather than per byte.
func BenchmarkSendRecv64(b *testing.B) { sendRecv(b, 64) }

// sendRecv runs the throughput benchmark with packets of payload bytes.
func sendRecv(b *testing.B, payload int) {
	for _, o := range offloads {
		b.Run(o.name, func(b *testing.B) {
			tx := open(b, udp.Config{Addr: lo4, GSO: o.gso})
			rx := open(b, udp.Config{Addr: lo4, GRO: o.gro})
			n := netFor(b, tx, rx)
			pkt := packet(&n, 1, 0, payload)
			pkts := make([]link.Packet, benchBatch)
			for i := range pkts {
				pkts[i] = pkt // the link never writes to a packet it sends
			}
			bufs := recvBufs(benchBatch)
			run(b, len(pkt.Buf),
				func(k int) {
					if err := tx.Send(pkts[:k]); err != nil {
						b.Error(err)
					}
				},
				func() int {
					k, err := rx.Recv(bufs)
					if err != nil {
						return -1
					}
					return k
				},
				func() { rx.Close() })
			if s := tx.Stats(); s.TxDropped != 0 {
				b.Fatalf("%d packets dropped", s.TxDropped)
			}
		})
	}
}

// run drives a sender (send(k) sends k packets) against a receiver (recv
// returns how many packets arrived, or -1 after stop), with a window of
// benchWindow packets, and reports packets/s and Gbit/s.
func run(b *testing.B, size int, send func(k int), recv func() int, stop func()) {
	b.Helper()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	// A window that makes no progress for stallTime has lost its packets
	// (loopback drops when a socket buffer overflows on a loaded
	// machine): they are counted as lost instead of stalling the window.
	const stallTime = 100 * time.Millisecond
	var received, lost atomic.Int64
	progress := make(chan struct{}, 1)
	done := make(chan struct{})
	total := int64(b.N)
	go func() {
		defer close(done)
		for received.Load()+lost.Load() < total {
			k := recv()
			if k < 0 {
				return
			}
			received.Add(int64(k))
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}()
	guard := time.AfterFunc(2*watchdog, stop) // a wedged receiver fails instead of hanging
	defer guard.Stop()
	b.ResetTimer()
	sent := int64(0)
	for sent < total {
		for sent-received.Load()-lost.Load() >= benchWindow {
			select {
			case <-progress:
			case <-done:
				b.Fatalf("receiver stopped after %d of %d packets", received.Load(), total)
			case <-time.After(stallTime):
				lost.Store(sent - received.Load())
			}
		}
		k := min(benchBatch, total-sent, benchWindow-(sent-received.Load()-lost.Load()))
		send(int(k))
		sent += k
	}
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-progress:
		case <-time.After(stallTime):
			lost.Store(total - received.Load())
			stop() // wake the receiver: what is missing is lost
			<-done
			waiting = false
		}
	}
	b.StopTimer()
	got := received.Load()
	if l := total - got; l > total/100 {
		b.Fatalf("lost %d of %d packets", l, total)
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(got)/sec, "pkts/s")
	b.ReportMetric(float64(got)*float64(size)*8/sec/1e9, "Gbit/s")
	b.ReportMetric(float64(total-got), "lost")
}

// BenchmarkRawUDPBaseline is the bar the link is measured against: the
// same packets over IPv4 loopback with plain blocking sockets, GSO
// super-packets of as many 4112-byte segments as fit in 65000 bytes on
// the sending side and GRO on the receiving side, and no link around them:
// no batching logic, no copying segments out, no ICRC rewriting.
func BenchmarkRawUDPBaseline(b *testing.B) {
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	rfd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	must(err)
	defer unix.Close(rfd)
	must(unix.SetsockoptInt(rfd, unix.IPPROTO_UDP, unix.UDP_GRO, 1))
	must(unix.SetsockoptInt(rfd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20))
	// A receive timeout as a guard: a lost packet ends the benchmark.
	must(unix.SetsockoptTimeval(rfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: int64(2 * watchdog / time.Second)}))
	must(unix.Bind(rfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	rsa, err := unix.Getsockname(rfd)
	must(err)
	rport := rsa.(*unix.SockaddrInet4).Port

	sfd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	must(err)
	defer unix.Close(sfd)
	must(unix.SetsockoptInt(sfd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20))
	must(unix.SetsockoptInt(sfd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO))
	must(unix.Bind(sfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	ssa, err := unix.Getsockname(sfd)
	must(err)

	n := wire.Net{
		Src: lo4.Addr(), SrcPort: uint16(ssa.(*unix.SockaddrInet4).Port),
		Dst: lo4.Addr(), DstPort: uint16(rport), DontFragment: true,
	}
	pkt := packet(&n, 1, 0, benchPayload).Buf
	seg := len(pkt)
	maxSegs := 65000 / seg
	super := make([]byte, 0, maxSegs*seg)
	for range maxSegs {
		super = append(super, pkt...)
	}

	// Sender: one sendmsg per super-packet, with a UDP_SEGMENT cmsg.
	var to unix.RawSockaddrInet4
	to.Family = unix.AF_INET
	to.Addr = [4]byte{127, 0, 0, 1}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&to.Port))[:], uint16(rport))
	sctl := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&sctl[0]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(sctl[unix.CmsgLen(0):], uint16(seg))
	var siov unix.Iovec
	siov.Base = &super[0]
	smsg := unix.Msghdr{Name: (*byte)(unsafe.Pointer(&to)), Namelen: unix.SizeofSockaddrInet4, Iov: &siov, Iovlen: 1, Control: &sctl[0]}
	smsg.SetControllen(len(sctl))

	// Receiver: one recvmsg per (coalesced) datagram into a 64 KiB buffer.
	rbuf := make([]byte, 65536)
	rctl := make([]byte, 64)
	var riov unix.Iovec
	riov.Base = &rbuf[0]
	riov.SetLen(len(rbuf))
	var rmsg unix.Msghdr
	rmsg.Iov, rmsg.Iovlen = &riov, 1
	rmsg.Control = &rctl[0]

	run(b, seg,
		func(k int) {
			for k > 0 {
				m := min(k, maxSegs)
				siov.SetLen(m * seg)
				_, _, e := unix.Syscall(unix.SYS_SENDMSG, uintptr(sfd), uintptr(unsafe.Pointer(&smsg)), 0)
				for e == unix.EINTR {
					_, _, e = unix.Syscall(unix.SYS_SENDMSG, uintptr(sfd), uintptr(unsafe.Pointer(&smsg)), 0)
				}
				if e != 0 {
					b.Error(e)
					return
				}
				k -= m
			}
		},
		func() int {
			rmsg.SetControllen(len(rctl))
			r, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(rfd), uintptr(unsafe.Pointer(&rmsg)), 0)
			for e == unix.EINTR { // Go's preemption signal interrupts blocking syscalls
				rmsg.SetControllen(len(rctl))
				r, _, e = unix.Syscall(unix.SYS_RECVMSG, uintptr(rfd), uintptr(unsafe.Pointer(&rmsg)), 0)
			}
			if e != 0 {
				return -1
			}
			return (int(r) + seg - 1) / seg
		},
		func() { _ = unix.Shutdown(rfd, unix.SHUT_RD) })
}
