package hca_test

import (
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// udpPair opens two devices over real UDP loopback sockets on free ports,
// with 4 MiB of registered memory each.
func udpPair(tb testing.TB, gso bool) (*side, *side) {
	return udpPairConfig(tb, gso, 4<<20, hca.Config{})
}

// udpPairConfig opens two devices over real UDP loopback sockets on free
// ports (GSO and GRO as gso says), with memSize bytes of registered memory
// each and the devices' other settings in cfg.
func udpPairConfig(tb testing.TB, gso bool, memSize int, cfg hca.Config) (*side, *side) {
	tb.Helper()
	open := func() *udp.Link {
		l, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), GSO: gso, GRO: gso})
		if err != nil {
			tb.Fatal(err)
		}
		return l
	}
	la, lb := open(), open()
	na, _ := la.LocalAddr()
	nb, _ := lb.LocalAddr()
	// Both devices share 127.0.0.1: each sends to the other's port.
	ca, cb := cfg, cfg
	ca.Link, ca.PeerPort = la, nb.SrcPort
	cb.Link, cb.PeerPort = lb, na.SrcPort
	return openSideConfig(tb, ca, memSize), openSideConfig(tb, cb, memSize)
}

// BenchmarkRCWrite64K: RC RDMA WRITE of 64 KiB messages at MTU 4096 over
// UDP loopback, 16 in flight; reports payload Gbit/s.
func BenchmarkRCWrite64K(b *testing.B) {
	for _, gso := range []bool{false, true} {
		name := "plain"
		if gso {
			name = "gso+gro"
		}
		b.Run(name, func(b *testing.B) {
			x, y := udpPair(b, gso)
			connect(b, x, y, verbs.QPTypeRC, verbs.MTU4096)
			benchWrite64K(b, x, y)
		})
	}
}

// BenchmarkRCRead64K: RC RDMA READ of 64 KiB messages at MTU 4096 over
// UDP loopback with GSO and GRO, 64 in flight and max_rd_atomic 64, as
// ib_read_bw keeps many more READs posted than its window holds; reports
// payload Gbit/s.
func BenchmarkRCRead64K(b *testing.B) {
	x, y := udpPair(b, true)
	connectWith(b, x, y, verbs.QPTypeRC, verbs.MTU4096, func(o *hca.ConnectOptions) {
		o.MaxRdAtomic, o.MaxDestRdAtomic = 64, 64
	})
	benchRDMA64K(b, x, y, verbs.WRRDMARead, 64)
	if tx := x.dev.TransportStats().TxPackets; tx > uint64(b.N) {
		b.Logf("%d READ requests for %d READs", tx, b.N)
	}
}

// BenchmarkRCRead64Pipe: RC RDMA READs of 64 bytes over link/pipe, 128
// in flight with max_rd_atomic 128 (ib_read_bw's small sizes): the
// requester's cost per READ with a full queue, without system calls;
// reports READs/s.
func BenchmarkRCRead64Pipe(b *testing.B) {
	la, lb := pipe.New(pipe.Config{})
	x, y := openSide(b, la, 4<<20), openSide(b, lb, 4<<20)
	connectWith(b, x, y, verbs.QPTypeRC, verbs.MTU4096, func(o *hca.ConnectOptions) {
		o.MaxRdAtomic, o.MaxDestRdAtomic = 128, 128
	})
	el := rdmaStream(b, x, y, verbs.WRRDMARead, 64, 128)
	b.ReportMetric(float64(b.N)/el, "msgs/s")
}

// benchWrite64K runs b.N RC RDMA WRITEs of 64 KiB from x to y on their
// connected QPs, 16 in flight, and reports payload Gbit/s.
func benchWrite64K(b *testing.B, x, y *side) { benchRDMA64K(b, x, y, verbs.WRRDMAWrite, 16) }

// benchRDMA64K runs b.N RC RDMA WRITEs or READs (op) of 64 KiB from x
// to or from y's region on their connected QPs, depth in flight, and
// reports payload Gbit/s.
func benchRDMA64K(b *testing.B, x, y *side, op verbs.WROpcode, depth int) {
	const size = 64 << 10
	b.SetBytes(size)
	el := rdmaStream(b, x, y, op, size, depth)
	b.ReportMetric(float64(b.N)*size*8/el/1e9, "Gbit/s")
}

// rdmaStream runs b.N signaled RC RDMA WRITEs or READs (op) of size
// bytes between x's region and y's on their connected QPs, depth in
// flight, fails the benchmark on a completion in error, and returns the
// seconds they took.
func rdmaStream(b *testing.B, x, y *side, op verbs.WROpcode, size, depth int) float64 {
	wr := &verbs.SendWR{Opcode: op, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{x.mr.SGE(0, size)}, RDMA: verbs.RDMAInfo{RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	wcs := make([]verbs.WC, 64)
	b.ReportAllocs()
	start := time.Now()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			wr.WRID = uint64(posted)
			if _, err := x.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		n := x.pollWait(wcs)
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				b.Fatalf("wr %d: %s", wc.WRID, wc.Status)
			}
		}
		done += n
	}
	return time.Since(start).Seconds()
}

// BenchmarkRCSend64: RC SEND of 64-byte messages, 64 in flight; reports
// messages/s.
func BenchmarkRCSend64(b *testing.B) {
	x, y := udpPair(b, true)
	rcSend64(b, x, y)
}

// BenchmarkRCSend64Pipe is BenchmarkRCSend64 over link/pipe: no system
// call, so the transport's own cost per message shows with less of the
// kernel's noise.
func BenchmarkRCSend64Pipe(b *testing.B) {
	la, lb := pipe.New(pipe.Config{})
	rcSend64(b, openSide(b, la, 4<<20), openSide(b, lb, 4<<20))
}

// rcSend64 streams 64-byte RC SENDs from x to y, 64 in flight.
func rcSend64(b *testing.B, x, y *side) {
	connect(b, x, y, verbs.QPTypeRC, verbs.MTU4096)
	const depth = 64
	rwr := &verbs.RecvWR{SGList: []verbs.SGE{y.mr.SGE(0, 64)}}
	for range 200 {
		if _, err := y.qp.PostRecv(rwr); err != nil {
			b.Fatal(err)
		}
	}
	wr := &verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.mr.SGE(0, 64)}}
	wcs := make([]verbs.WC, 64)
	b.ReportAllocs()
	start := time.Now()
	posted, done, recvd := 0, 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			if _, err := x.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		done += x.pollWait(wcs)
		n := y.cq.Poll(wcs)
		recvd += n
		for range n {
			if _, err := y.qp.PostRecv(rwr); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	sx, sy := x.dev.TransportStats(), y.dev.TransportStats()
	b.Logf("N=%d requester: tx %d rx %d rnr %d timeouts %d retransmits %d window cuts %d device waits %d drops %v; responder: tx %d acks %d drops %v", b.N,
		sx.TxPackets, sx.RxPackets, sx.RNRNAKsReceived, sx.RetryTimeouts, sx.Retransmits, sx.WindowCuts, sx.DeviceWaits, sx.DropNames(),
		sy.TxPackets, sy.AcksSent, sy.DropNames())
}

// BenchmarkRCPingPong64: one 64-byte RC SEND each way per iteration, both
// sides waiting on their completion channels (ibv_rc_pingpong -e); reports
// the round-trip time. The links have GSO and GRO on, as a device opened
// for real use does: an answer and the ACK of the question it answers
// then cross the kernel as one super-packet. Its raw baseline is
// BenchmarkUDPPingPong64.
func BenchmarkRCPingPong64(b *testing.B) {
	x, y := udpPair(b, true)
	rcPingPong(b, x, y, (*side).pollWait)
}

// BenchmarkRCPingPong64Pipe is BenchmarkRCPingPong64 over link/pipe: the
// round trip without system calls (goroutine wake-ups remain).
func BenchmarkRCPingPong64Pipe(b *testing.B) {
	la, lb := pipe.New(pipe.Config{})
	rcPingPong(b, openSide(b, la, 4<<20), openSide(b, lb, 4<<20), (*side).pollWait)
}

// BenchmarkRCPingPong64BusyPoll is BenchmarkRCPingPong64 with both sides
// polling their CQs (ibv_rc_pingpong without -e) on devices opened with
// Config.BusyPoll, so that each poll drives the transport. Its raw
// baseline is BenchmarkUDPPingPong64BusyPoll.
func BenchmarkRCPingPong64BusyPoll(b *testing.B) {
	x, y := udpPairConfig(b, true, 4<<20, hca.Config{BusyPoll: true})
	rcPingPong(b, x, y, func(s *side, wcs []verbs.WC) int {
		for {
			if n := s.cq.Poll(wcs); n > 0 {
				return n
			}
		}
	})
}

// rcPingPong bounces a 64-byte RC SEND between x and y b.N times; poll
// returns at least one completion of a side's CQ.
func rcPingPong(b *testing.B, x, y *side, poll func(*side, []verbs.WC) int) {
	connect(b, x, y, verbs.QPTypeRC, verbs.MTU1024)
	for _, s := range []*side{x, y} {
		for range 64 {
			if _, err := s.qp.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{s.mr.SGE(0, 64)}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	recvWR := map[*side]*verbs.RecvWR{
		x: {SGList: []verbs.SGE{x.mr.SGE(0, 64)}},
		y: {SGList: []verbs.SGE{y.mr.SGE(0, 64)}},
	}
	sendWR := map[*side]*verbs.SendWR{
		x: {Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.mr.SGE(1024, 64)}},
		y: {Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{y.mr.SGE(1024, 64)}},
	}
	// wait takes completions until a receive arrived, reposting it.
	wait := func(s *side, wcs []verbs.WC) {
		for {
			n := poll(s, wcs)
			got := false
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess {
					panic(wc.Status.String())
				}
				if wc.Opcode == verbs.WCRecv {
					got = true
					if _, err := s.qp.PostRecv(recvWR[s]); err != nil {
						panic(err)
					}
				}
			}
			if got {
				return
			}
		}
	}
	send := func(s *side) {
		if _, err := s.qp.PostSend(sendWR[s]); err != nil {
			panic(err)
		}
	}
	ywcs, xwcs := make([]verbs.WC, 16), make([]verbs.WC, 16)
	b.ReportAllocs()
	pingPong(b, func() { wait(y, ywcs); send(y) }, func() { send(x); wait(x, xwcs) })
}

// BenchmarkRCPingPong64Direct is BenchmarkRCPingPong64's round trip with
// one goroutine driving both devices, each opened with Config.BusyPoll:
// it posts on one side, polls the other until the SEND arrived, answers,
// and polls the first, so nothing waits for a wake-up and nothing runs in
// parallel. Over link/pipe ("pipe") the figure is softhca's own work per
// round trip: the protocol, the CQs and the verbs calls, with no system
// call and no goroutine hand-off. Over UDP loopback ("udp") it adds the
// system calls the same round trip makes. Run it with -test.cpu 1, so
// that the device's own goroutines (its receive goroutine, woken by every
// UDP datagram, and the workers) do not run beside it; then the two
// figures and BenchmarkLinkPingPongAck64 take BenchmarkRCPingPong64 apart
// (docs/performance.md).
func BenchmarkRCPingPong64Direct(b *testing.B) {
	b.Run("pipe", func(b *testing.B) {
		la, lb := pipe.New(pipe.Config{})
		x := openSideConfig(b, hca.Config{Link: newPolledPipe(la), BusyPoll: true}, 4<<20)
		y := openSideConfig(b, hca.Config{Link: newPolledPipe(lb), BusyPoll: true}, 4<<20)
		rcPingPongDirect(b, x, y)
	})
	b.Run("udp", func(b *testing.B) {
		x, y := udpPairConfig(b, true, 4<<20, hca.Config{BusyPoll: true})
		rcPingPongDirect(b, x, y)
	})
}

// polledPipe is a link/pipe endpoint that only busy pollers read: its
// WaitReadable never calls ready and returns when the link is closed, so
// the device's receive goroutine stays out of the way. It is a
// link.Poller only for BenchmarkRCPingPong64Direct, whose goroutine polls
// every device it sends to.
type polledPipe struct {
	*pipe.Endpoint
	done chan struct{}
	once sync.Once
}

func newPolledPipe(e *pipe.Endpoint) *polledPipe {
	return &polledPipe{Endpoint: e, done: make(chan struct{})}
}

func (p *polledPipe) WaitReadable(func() bool) error {
	<-p.done
	return net.ErrClosed
}

func (p *polledPipe) Close() error {
	p.once.Do(func() { close(p.done) })
	return p.Endpoint.Close()
}

// rcPingPongDirect bounces a 64-byte RC SEND between x and y b.N times
// from the calling goroutine alone.
func rcPingPongDirect(b *testing.B, x, y *side) {
	connect(b, x, y, verbs.QPTypeRC, verbs.MTU1024)
	recvWR := map[*side]*verbs.RecvWR{}
	sendWR := map[*side]*verbs.SendWR{}
	for _, s := range []*side{x, y} {
		recvWR[s] = &verbs.RecvWR{SGList: []verbs.SGE{s.mr.SGE(0, 64)}}
		sendWR[s] = &verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{s.mr.SGE(1024, 64)}}
		for range 64 {
			if _, err := s.qp.PostRecv(recvWR[s]); err != nil {
				b.Fatal(err)
			}
		}
	}
	wcs := make([]verbs.WC, 16)
	// leg posts a SEND on from and polls to until it arrived, reposting
	// the receive it took.
	leg := func(from, to *side) {
		if _, err := from.qp.PostSend(sendWR[from]); err != nil {
			b.Fatal(err)
		}
		for {
			n := to.cq.Poll(wcs)
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess {
					b.Fatalf("%s: %s", wc.Opcode, wc.Status)
				}
				if wc.Opcode == verbs.WCRecv {
					if _, err := to.qp.PostRecv(recvWR[to]); err != nil {
						b.Fatal(err)
					}
					return
				}
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		leg(x, y)
		leg(y, x)
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "us/roundtrip")
}

// pingPong runs echo b.N times on another goroutine and ping b.N times on
// the benchmark's, and reports the mean time of a ping.
func pingPong(b *testing.B, echo, ping func()) {
	done := make(chan struct{})
	go func() {
		for range b.N {
			echo()
		}
		close(done)
	}()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ping()
	}
	el := time.Since(start)
	<-done
	b.ReportMetric(float64(el.Microseconds())/float64(b.N), "us/roundtrip")
}

// BenchmarkUDPPingPong64 is the raw baseline for BenchmarkRCPingPong64:
// two blocking UDP sockets on loopback bouncing 64 bytes (plus the 28
// bytes of RoCEv2 headers an RC SEND carries, so the datagrams are the
// same size).
func BenchmarkUDPPingPong64(b *testing.B) {
	ca, cb, aAddr, bAddr := rawSocketPair(b)
	bbuf, abuf := make([]byte, 2048), make([]byte, 2048)
	msg := make([]byte, 64+28)
	pingPong(b, func() {
		n, _, err := cb.ReadFromUDPAddrPort(bbuf)
		if err != nil {
			panic(err)
		}
		if _, err := cb.WriteToUDPAddrPort(bbuf[:n], aAddr); err != nil {
			panic(err)
		}
	}, func() {
		if _, err := ca.WriteToUDPAddrPort(msg, bAddr); err != nil {
			panic(err)
		}
		if _, _, err := ca.ReadFromUDPAddrPort(abuf); err != nil {
			panic(err)
		}
	})
}

// BenchmarkUDPPingPong64BusyPoll is the raw baseline for
// BenchmarkRCPingPong64BusyPoll: BenchmarkUDPPingPong64 with each side
// spinning on non-blocking receives (MSG_DONTWAIT) instead of waiting in
// Go's poller.
func BenchmarkUDPPingPong64BusyPoll(b *testing.B) {
	ca, cb, aAddr, bAddr := rawSocketPair(b)
	// spin receives one datagram on c, retrying while none is queued.
	spin := func(c *net.UDPConn, buf []byte) {
		rc, err := c.SyscallConn()
		if err != nil {
			panic(err)
		}
		for {
			var n int
			var rerr error
			if err := rc.Control(func(fd uintptr) {
				n, _, rerr = syscall.Recvfrom(int(fd), buf, syscall.MSG_DONTWAIT)
			}); err != nil {
				panic(err)
			}
			if rerr == nil && n > 0 {
				return
			}
			if rerr != nil && rerr != syscall.EAGAIN {
				panic(rerr)
			}
		}
	}
	bbuf, abuf := make([]byte, 2048), make([]byte, 2048)
	msg := make([]byte, 64+28)
	pingPong(b, func() {
		spin(cb, bbuf)
		if _, err := cb.WriteToUDPAddrPort(bbuf[:64+28], aAddr); err != nil {
			panic(err)
		}
	}, func() {
		if _, err := ca.WriteToUDPAddrPort(msg, bAddr); err != nil {
			panic(err)
		}
		spin(ca, abuf)
	})
}

// BenchmarkUDPPingPong64ThreadWait is BenchmarkUDPPingPong64 with each
// side waiting for its datagram as a C program's thread does: a
// non-blocking recvfrom, and ppoll(2) on the socket while nothing is
// queued, so that each goroutine's thread blocks in the kernel and the
// datagram wakes that thread, instead of Go's poller handing the
// goroutine to whichever thread polls next. It measures what a design
// that waits for the link in the application's own thread would pay per
// wake-up on this machine (docs/performance.md: on a VM whose idle
// virtual CPUs halt, a wake-up that crosses to the other CPU costs
// several microseconds).
func BenchmarkUDPPingPong64ThreadWait(b *testing.B) {
	ca, cb, aAddr, bAddr := rawSocketPair(b)
	// wait receives one datagram on c, blocking in ppoll while none is
	// queued.
	wait := func(c *net.UDPConn, buf []byte) {
		rc, err := c.SyscallConn()
		if err != nil {
			panic(err)
		}
		var rerr error
		if err := rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			for {
				_, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
				if rerr != unix.EAGAIN {
					return
				}
				if _, perr := unix.Ppoll(fds, nil, nil); perr != nil && perr != unix.EINTR {
					rerr = perr
					return
				}
			}
		}); err != nil {
			panic(err)
		}
		if rerr != nil {
			panic(rerr)
		}
	}
	bbuf, abuf := make([]byte, 2048), make([]byte, 2048)
	msg := make([]byte, 64+28)
	pingPong(b, func() {
		wait(cb, bbuf)
		if _, err := cb.WriteToUDPAddrPort(bbuf[:64+28], aAddr); err != nil {
			panic(err)
		}
	}, func() {
		if _, err := ca.WriteToUDPAddrPort(msg, bAddr); err != nil {
			panic(err)
		}
		wait(ca, abuf)
	})
}

// BenchmarkLinkPingPongAck64 is the floor of BenchmarkRCPingPong64 on
// this kernel: the same datagrams with no protocol work. Two link/udp
// links (GSO and GRO on) bounce a 64-byte message, and each answer
// travels with a 16-byte acknowledgement of the message it answers, as
// RC's answer and ACK do: one GSO send of two segments per direction,
// received as one GRO datagram. With busy, each side spins on TryRecv
// (the floor of BenchmarkRCPingPong64BusyPoll).
func BenchmarkLinkPingPongAck64(b *testing.B) {
	for _, busy := range []bool{false, true} {
		name := "wait"
		if busy {
			name = "busypoll"
		}
		b.Run(name, func(b *testing.B) { linkPingPongAck(b, busy) })
	}
}

func linkPingPongAck(b *testing.B, busy bool) {
	open := func() *udp.Link {
		l, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), GSO: true, GRO: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		return l
	}
	la, lb := open(), open()
	na, _ := la.LocalAddr()
	nb, _ := lb.LocalAddr()
	// pkts is a side's answer and acknowledgement, sent together.
	pkts := func(to wire.Net) []link.Packet {
		to.Dst, to.DstPort = to.Src, to.SrcPort
		to.Src, to.SrcPort = netip.Addr{}, 0
		return []link.Packet{{Buf: make([]byte, 64+28), Net: to}, {Buf: make([]byte, 16+28), Net: to}}
	}
	toB, toA := pkts(nb), pkts(na)
	// recvMsg receives until the 64-byte message arrived.
	recvMsg := func(l *udp.Link, in []link.Packet) {
		for {
			for i := range in {
				in[i].Buf = in[i].Buf[:cap(in[i].Buf)]
			}
			var n int
			var err error
			if busy {
				n, err = l.TryRecv(in)
			} else {
				n, err = l.Recv(in)
			}
			if err != nil {
				panic(err)
			}
			for _, p := range in[:n] {
				if len(p.Buf) == 64+28 {
					return
				}
			}
		}
	}
	newIn := func() []link.Packet {
		in := make([]link.Packet, 4)
		for i := range in {
			in[i].Buf = make([]byte, link.MaxPacketSize)
		}
		return in
	}
	inB, inA := newIn(), newIn()
	pingPong(b, func() {
		recvMsg(lb, inB)
		if err := lb.Send(toA); err != nil {
			panic(err)
		}
	}, func() {
		if err := la.Send(toB); err != nil {
			panic(err)
		}
		recvMsg(la, inA)
	})
}

// BenchmarkUDPPingPongAck64 is BenchmarkUDPPingPong64 with what RC adds on
// the wire: each side also sends a 16-byte acknowledgement datagram for
// every message it receives, four datagrams per round trip instead of two.
func BenchmarkUDPPingPongAck64(b *testing.B) {
	ca, cb, aAddr, bAddr := rawSocketPair(b)
	ack := make([]byte, 16+28)
	msg := make([]byte, 64+28)
	// recvMsg reads until a message (not an acknowledgement) arrived.
	recvMsg := func(c *net.UDPConn, buf []byte) {
		for {
			n, _, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				panic(err)
			}
			if n == len(msg) {
				return
			}
		}
	}
	bbuf, abuf := make([]byte, 2048), make([]byte, 2048)
	pingPong(b, func() {
		recvMsg(cb, bbuf)
		_, _ = cb.WriteToUDPAddrPort(ack, aAddr)
		_, _ = cb.WriteToUDPAddrPort(msg, aAddr)
	}, func() {
		_, _ = ca.WriteToUDPAddrPort(msg, bAddr)
		recvMsg(ca, abuf)
		_, _ = ca.WriteToUDPAddrPort(ack, bAddr)
	})
}

// rawSocketPair opens two plain blocking UDP sockets on loopback, closed
// when the benchmark ends.
func rawSocketPair(b *testing.B) (ca, cb *net.UDPConn, aAddr, bAddr netip.AddrPort) {
	b.Helper()
	open := func() *net.UDPConn {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	ca, cb = open(), open()
	return ca, cb, ca.LocalAddr().(*net.UDPAddr).AddrPort(), cb.LocalAddr().(*net.UDPAddr).AddrPort()
}
