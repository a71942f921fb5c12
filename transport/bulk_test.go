package transport

import (
	"bytes"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// bulkLink is a link.BulkReceiver whose datagrams the test queues: each
// datagram is a list of packets that TryRecvBulk writes back to back into
// one of the engine's chunks, as link/udp does with a GRO datagram.
type bulkLink struct {
	*fakeLink // Send, LocalAddr, Stats, Close
	mu        sync.Mutex
	queued    [][]link.Packet
	notify    chan struct{}
}

func newBulkLink() *bulkLink {
	return &bulkLink{fakeLink: newFakeLink(), notify: make(chan struct{}, 1)}
}

func (l *bulkLink) Coalesces() bool { return true }

func (l *bulkLink) Recv([]link.Packet) (int, error) {
	panic("a Poller's reader does not call Recv")
}

func (l *bulkLink) TryRecv([]link.Packet) (int, error) {
	panic("a BulkReceiver's reader does not call TryRecv")
}

func (l *bulkLink) WaitReadable(ready func() bool) error {
	for {
		if ready() {
			return nil
		}
		select {
		case <-l.notify:
		case <-l.done:
			return net.ErrClosed
		}
	}
}

func (l *bulkLink) TryRecvBulk(bufs [][]byte, pkts []link.Packet, in []int) (int, int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.done:
		return 0, 0, net.ErrClosed
	default:
	}
	nb, np := 0, 0
	for nb < len(bufs) && len(l.queued) > 0 && len(pkts)-np >= link.MaxBulkSegments {
		off := 0
		for _, p := range l.queued[0] {
			b := bufs[nb][off : off+len(p.Buf)]
			copy(b, p.Buf)
			pkts[np], in[np] = link.Packet{Buf: b, Net: p.Net}, nb
			np++
			off += len(p.Buf)
		}
		l.queued[0] = nil
		l.queued = l.queued[1:]
		nb++
	}
	return nb, np, nil
}

// deliver queues the datagrams and returns once the engine has read and
// dispatched them all: the queue is empty, and the read that emptied it
// has released the engine's receive lock.
func (l *bulkLink) deliver(t testing.TB, e *Engine, datagrams ...[]link.Packet) {
	t.Helper()
	l.mu.Lock()
	l.queued = append(l.queued, datagrams...)
	l.mu.Unlock()
	select {
	case l.notify <- struct{}{}:
	default:
	}
	deadline := time.Now().Add(failAfter)
	for {
		l.mu.Lock()
		empty := len(l.queued) == 0
		l.mu.Unlock()
		if empty {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the engine did not read the queued datagrams")
		}
		runtime.Gosched()
	}
	e.rxMu.Lock()
	//nolint:staticcheck // an empty critical section: waiting for the read to end is the point
	e.rxMu.Unlock()
}

// bulkPacket is a request for qpn with psn and a payload of size bytes.
func bulkPacket(t testing.TB, qpn, psn uint32, size int) link.Packet {
	t.Helper()
	n := wire.Net{Src: peerAddr, Dst: localAddr, SrcPort: 50000, DstPort: wire.RoCEv2Port, DontFragment: true}
	hd := request(wire.RCSendOnly, psn)
	hd.BTH.DestQP = qpn
	hd.BTH.PKey = 0xffff
	return link.Packet{Buf: wire.AppendPacket(nil, &n, &hd, pattern(byte(psn), size)), Net: n}
}

// freeChunks returns how many chunks no packet points into: those in the
// pool and those in the receive batch (which never holds one with views).
func freeChunks(t testing.TB, e *Engine) int {
	t.Helper()
	e.rxMu.Lock()
	for _, c := range e.rx.chunks {
		require.Zero(t, c.refs.Load(), "a chunk in the receive batch has packets pointing into it")
	}
	batch := len(e.rx.chunks)
	e.rxMu.Unlock()
	e.pool.mu.Lock()
	defer e.pool.mu.Unlock()
	return batch + len(e.pool.chunks)
}

// holdingEP is an Endpoint that holds every packet while busy, and
// records the payloads it accepts once not.
type holdingEP struct {
	busy     atomic.Bool
	mu       sync.Mutex
	accepted map[uint32][]byte // payload by PSN
}

func newHoldingEP() *holdingEP {
	ep := &holdingEP{accepted: map[uint32][]byte{}}
	ep.busy.Store(true)
	return ep
}

func (ep *holdingEP) Receive(_ *Turn, p *wire.Packet) Result {
	if ep.busy.Load() {
		return Result{Held: true}
	}
	ep.mu.Lock()
	ep.accepted[uint32(p.BTH.PSN())] = bytes.Clone(p.Payload)
	ep.mu.Unlock()
	return Result{}
}
func (ep *holdingEP) Run(*Turn) Result   { return Result{} }
func (ep *holdingEP) Timer(*Turn) Result { return Result{} }

func newBulkEngine(t *testing.T) (*Engine, *bulkLink) {
	l := newBulkLink()
	e := NewEngine(Config{Link: l, Clock: clock.NewFake(t0), Mem: newFakeMem(), Workers: 1})
	t.Cleanup(func() { _ = e.Close() })
	require.NotNil(t, e.bulk, "the engine reads a coalescing link in bulk")
	return e, l
}

// TestEngineBulkViews: the packets of a coalesced datagram of large
// packets reach their QP as views of the chunk it was read into, which
// stays out of use (its bytes intact) until the last of them is released;
// a datagram of small packets is copied out, and its chunk stays free.
func TestEngineBulkViews(t *testing.T) {
	e, l := newBulkEngine(t)
	ep := newHoldingEP()
	h := e.Attach(0x10, ep)
	total := rxBulkLen + bulkChunks

	big := []link.Packet{bulkPacket(t, 0x10, 0, 2000), bulkPacket(t, 0x10, 1, 2000), bulkPacket(t, 0x10, 2, 1500)}
	small := []link.Packet{bulkPacket(t, 0x10, 3, 16), bulkPacket(t, 0x10, 4, 16)}
	single := []link.Packet{bulkPacket(t, 0x10, 5, 4096)}
	l.deliver(t, e, big, small, single)
	e.Sync()
	require.Equal(t, total-2, freeChunks(t, e), "the big datagrams' chunks wait with their held packets")
	require.Equal(t, uint64(6), e.Stats().RxPackets)
	require.Zero(t, e.Stats().Dropped())

	// More reads reuse the batch's chunks; the held views keep their
	// bytes.
	for i := range 20 {
		l.deliver(t, e, []link.Packet{bulkPacket(t, 0x11, uint32(i), 3000), bulkPacket(t, 0x11, uint32(i), 3000)})
	}
	e.Sync()
	require.Equal(t, uint64(20*2), e.Stats().Drops[DropUnknownQP])

	ep.busy.Store(false)
	h.Flush()
	for psn, p := range append(append(big, small...), single...) {
		var want wire.Packet
		n := p.Net
		require.Equal(t, wire.DropNone, wire.ParseDatagram(p.Buf, &n, &want))
		require.Equal(t, want.Payload, ep.accepted[uint32(psn)], "PSN %d", psn)
	}
	require.Equal(t, total, freeChunks(t, e), "every chunk is free once its packets are")
	require.Equal(t, e.cfg.Buffers, int(e.rxStashed.Load())+poolFree(e))
}

// TestEngineBulkChunksExhausted: when every chunk waits with held packets,
// later datagrams are copied out packet by packet instead of being
// dropped, and every chunk comes back once the packets are released.
func TestEngineBulkChunksExhausted(t *testing.T) {
	e, l := newBulkEngine(t)
	eps := []*holdingEP{newHoldingEP(), newHoldingEP()}
	hs := []*Handle{e.Attach(0x20, eps[0]), e.Attach(0x21, eps[1])}
	total := rxBulkLen + bulkChunks
	n := bulkChunks + 16 // datagrams of two packets, more than there are chunks to spare
	var sent []link.Packet
	for i := range n {
		qpn := uint32(0x20 + i%2)
		d := []link.Packet{bulkPacket(t, qpn, uint32(i), 1200), bulkPacket(t, qpn, uint32(i+1000), 1200)}
		sent = append(sent, d...)
		l.deliver(t, e, d)
	}
	e.Sync()
	require.Equal(t, rxBulkLen, freeChunks(t, e), "only the batch's own chunks are free")
	require.Zero(t, e.Stats().Dropped())
	require.Equal(t, uint64(2*n), e.Stats().RxPackets)

	for i, ep := range eps {
		ep.busy.Store(false)
		hs[i].Flush()
	}
	for _, p := range sent {
		var want wire.Packet
		nt := p.Net
		require.Equal(t, wire.DropNone, wire.ParseDatagram(p.Buf, &nt, &want))
		ep := eps[want.BTH.DestQP()-0x20]
		require.Equal(t, want.Payload, ep.accepted[uint32(want.BTH.PSN())])
	}
	require.Equal(t, total, freeChunks(t, e))
	require.Equal(t, e.cfg.Buffers, int(e.rxStashed.Load())+poolFree(e))
}

func poolFree(e *Engine) int {
	e.pool.mu.Lock()
	defer e.pool.mu.Unlock()
	return len(e.pool.free)
}

// TestEngineBusyPollMissed: with busy polling, packets that arrive while
// a poller holds the link are left to that poller: the receive goroutine
// notes them (rxMissed) instead of waiting for the lock and reading them
// onto the workers' goroutines, and the poller reads them on its own
// goroutine when it lets go (pollMissed), so an application that polls
// gets them where it polls.
func TestEngineBusyPollMissed(t *testing.T) {
	l := newBulkLink()
	e := NewEngine(Config{Link: l, Clock: clock.NewFake(t0), Mem: newFakeMem(), Workers: 1, BusyPoll: true})
	t.Cleanup(func() { _ = e.Close() })
	var polling atomic.Bool // the test goroutine is polling
	onPoller := make(chan bool, 4)
	x := &fakeEP{name: "x", log: &callLog{}}
	x.recv = func(*Turn, *wire.Packet) Result {
		onPoller <- polling.Load()
		return Result{}
	}
	e.Attach(0x10, x)
	// The receive goroutine reads what arrives while nobody polls; once
	// this returns it waits for the next arrival.
	l.deliver(t, e, []link.Packet{bulkPacket(t, 0x10, 0, 64)})
	require.False(t, waitValue(t, onPoller))

	e.rxMu.Lock() // a poller is in the middle of a read
	e.rxMissed.Store(false)
	l.mu.Lock()
	l.queued = append(l.queued, []link.Packet{bulkPacket(t, 0x10, 1, 64)})
	l.mu.Unlock()
	l.notify <- struct{}{}
	deadline := time.Now().Add(failAfter)
	for !e.rxMissed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the receive goroutine did not note the arrival")
		}
		runtime.Gosched()
	}
	e.rxMu.Unlock()

	polling.Store(true)
	require.True(t, e.pollMissed(), "the poller reads what arrived while it held the link")
	polling.Store(false)
	require.True(t, waitValue(t, onPoller), "the packet was handled on the polling goroutine")
	require.False(t, e.rxMissed.Load())
	l.mu.Lock()
	require.Empty(t, l.queued)
	l.mu.Unlock()
	require.False(t, e.pollMissed(), "nothing is left")
}

// waitValue returns the next value from c.
func waitValue[T any](t testing.TB, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(failAfter):
		t.Fatal("timed out")
		panic("unreachable")
	}
}

// TestEngineRingAfterClose: with busy polling, a doorbell rung after
// Close (a QP of a closed device taken back to RTS and posted to) runs no
// turn in the caller: no Endpoint call, so no timer re-armed to keep the
// closed engine reachable, and nothing built for a closed link.
func TestEngineRingAfterClose(t *testing.T) {
	h, clk, runs := closedBusyPollEngine(t, Config{}, Result{})
	h.Ring()
	require.Zero(t, runs.Load(), "a turn ran after Close")
	require.Zero(t, clk.Pending(), "a timer was armed after Close")
}

// TestEngineTurnAfterCloseArmsNoTimer: a turn that runs after Close
// stopped the timers (a doorbell or a busy poll that found the engine
// open just before it closed, and so runs the turn in its goroutine)
// arms no timer for a QP, nor the worker's device-window backstop: no
// goroutine would run their turns, and a pending timer kept the closed
// engine reachable until it fired.
func TestEngineTurnAfterCloseArmsNoTimer(t *testing.T) {
	// The device window is full, so a QP it stops waits (and the worker
	// would arm its backstop).
	h, clk, runs := closedBusyPollEngine(t, Config{CC: CCConfig{DeviceWindow: 1}}, Result{DeviceWait: true})
	h.w.signal(h, pendingKick, turnInline) // what Ring does when it found the engine open
	require.Equal(t, int32(1), runs.Load(), "the turn did not run")
	require.Zero(t, clk.Pending(), "a timer was armed after Close")
}

// closedBusyPollEngine makes a busy-polling engine of one worker with cfg
// (its link, clock and memory fakes), whose device window, if it has one,
// is full; attaches a QP whose Run counts its calls in runs and returns
// res with a deadline an hour ahead; closes the engine; and checks that
// no timer is pending.
func closedBusyPollEngine(t *testing.T, cfg Config, res Result) (h *Handle, clk *clock.Fake, runs *atomic.Int32) {
	t.Helper()
	clk = clock.NewFake(t0)
	cfg.Link, cfg.Clock, cfg.Mem, cfg.Workers, cfg.BusyPoll = newBulkLink(), clk, newFakeMem(), 1, true
	e := NewEngine(cfg)
	if cfg.CC.DeviceWindow > 0 {
		e.cc.inflight[0].n.Add(int64(cfg.CC.DeviceWindow))
	}
	runs = new(atomic.Int32)
	x := &fakeEP{name: "x", log: &callLog{}}
	x.run = func(tt *Turn) Result {
		runs.Add(1)
		r := res
		r.Deadline = tt.Env().Now.Add(time.Hour)
		return r
	}
	h = e.Attach(0x10, x)
	require.NoError(t, e.Close())
	require.Zero(t, clk.Pending())
	return h, clk, runs
}
