package transport

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// The scheduler (Engine, workers, Handles) with a fake link, the fake
// clock and Endpoints that record their calls. Synchronisation is by
// channels, Engine.Sync and the link's own calls; time is only a limit
// after which a test fails.

const failAfter = 10 * time.Second

// ---------------------------------------------------------------------
// A fake link: each deliver is one Recv result.

type linkMsg struct {
	pkts    []link.Packet
	barrier chan struct{}
}

type fakeLink struct {
	in   chan linkMsg
	done chan struct{}
	once sync.Once

	mu         sync.Mutex
	sent       [][]byte
	sends      int // Send calls that sent something
	closed     bool
	sendClosed int // Send calls after Close
	stats      link.Stats
}

func newFakeLink() *fakeLink {
	return &fakeLink{in: make(chan linkMsg), done: make(chan struct{})}
}

func (l *fakeLink) Recv(pkts []link.Packet) (int, error) {
	for {
		select {
		case m := <-l.in:
			if m.barrier != nil {
				close(m.barrier)
				continue
			}
			for i, p := range m.pkts {
				pkts[i].Buf = pkts[i].Buf[:copy(pkts[i].Buf[:cap(pkts[i].Buf)], p.Buf)]
				pkts[i].Net = p.Net
			}
			return len(m.pkts), nil
		case <-l.done:
			return 0, net.ErrClosed
		}
	}
}

func (l *fakeLink) Send(pkts []link.Packet) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.sendClosed++
		return net.ErrClosed
	}
	if len(pkts) > 0 {
		l.sends++
	}
	for _, p := range pkts {
		l.sent = append(l.sent, append([]byte(nil), p.Buf...))
	}
	return nil
}

// sendCalls returns how many Send calls sent something, and how many
// packets they sent.
func (l *fakeLink) sendCalls() (calls, pkts int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sends, len(l.sent)
}

func (l *fakeLink) LocalAddr() (wire.Net, error) { return wire.Net{Src: localAddr, SrcPort: 4791}, nil }
func (l *fakeLink) Stats() link.Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

func (l *fakeLink) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.once.Do(func() { close(l.done) })
	return nil
}

// deliver hands pkts to the engine's receive goroutine as reads of the
// link, and returns once the engine has dispatched them all (its next
// Recv call takes the barrier).
func (l *fakeLink) deliver(t testing.TB, pkts ...link.Packet) {
	t.Helper()
	for len(pkts) > 0 {
		n := min(len(pkts), rxBatchLen)
		l.send(t, linkMsg{pkts: pkts[:n]})
		pkts = pkts[n:]
	}
	b := make(chan struct{})
	l.send(t, linkMsg{barrier: b})
	waitFor(t, b, "the engine to read the link")
}

func (l *fakeLink) send(t testing.TB, m linkMsg) {
	t.Helper()
	select {
	case l.in <- m:
	case <-time.After(failAfter):
		t.Fatal("the engine does not read the link")
	}
}

func (l *fakeLink) sentCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sent)
}

// waitFor waits for c to be closed or to deliver, failing after
// failAfter.
func waitFor[T any](t testing.TB, c <-chan T, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(failAfter):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// inPacket is a request from the peer for QP qpn with PSN psn, as the
// link hands it over.
func inPacket(t testing.TB, qpn, psn uint32) link.Packet {
	n := wire.Net{Src: peerAddr, Dst: localAddr, SrcPort: 50000, DstPort: wire.RoCEv2Port, DontFragment: true}
	hd := request(wire.RCSendOnly, psn)
	hd.BTH.DestQP = qpn
	hd.BTH.PKey = 0xffff
	return link.Packet{Buf: wire.AppendPacket(nil, &n, &hd, pattern(byte(psn), 16)), Net: n}
}

// ---------------------------------------------------------------------
// A recording Endpoint

// callLog is the calls of every Endpoint of a test, in order.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	l.calls = append(l.calls, s)
	l.mu.Unlock()
}

func (l *callLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

// fakeEP is an Endpoint whose behaviour the test sets; it records its
// calls ("name recv PSN", "name run", "name timer") in log.
type fakeEP struct {
	name string
	log  *callLog
	// Optional behaviour; the zero Result otherwise.
	recv  func(t *Turn, p *wire.Packet) Result
	run   func(t *Turn) Result
	timer func(t *Turn) Result
	// after is set once the test detached the Endpoint: any call
	// after it is a violation.
	after      atomic.Bool
	violations atomic.Int32
}

func (e *fakeEP) check() {
	if e.after.Load() {
		e.violations.Add(1)
	}
}

func (e *fakeEP) Receive(t *Turn, p *wire.Packet) Result {
	e.check()
	e.log.add(fmt.Sprintf("%s recv %d", e.name, p.BTH.PSN()))
	if e.recv != nil {
		return e.recv(t, p)
	}
	return Result{}
}

func (e *fakeEP) Run(t *Turn) Result {
	e.check()
	e.log.add(e.name + " run")
	if e.run != nil {
		return e.run(t)
	}
	return Result{}
}

func (e *fakeEP) Timer(t *Turn) Result {
	e.check()
	e.log.add(e.name + " timer")
	if e.timer != nil {
		return e.timer(t)
	}
	return Result{}
}

// gate makes an Endpoint's Receive block until released, telling the
// test when it is blocked.
type gate struct {
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) recv(*Turn, *wire.Packet) Result {
	close(g.entered)
	<-g.release
	return Result{}
}

// ---------------------------------------------------------------------

type engineT struct {
	t   *testing.T
	e   *Engine
	l   *fakeLink
	clk *clock.Fake
	log *callLog
}

func newEngineT(t *testing.T, cfg Config) *engineT {
	et := &engineT{t: t, l: newFakeLink(), clk: clock.NewFake(t0), log: &callLog{}}
	cfg.Link, cfg.Clock = et.l, et.clk
	if cfg.Mem == nil {
		cfg.Mem = newFakeMem()
	}
	et.e = NewEngine(cfg)
	t.Cleanup(func() { _ = et.e.Close() })
	return et
}

func (et *engineT) ep(name string) *fakeEP { return &fakeEP{name: name, log: et.log} }

func (et *engineT) drops(d DropReason) uint64 { return et.e.Stats().Drops[d] }

// freeBuffers returns how many receive buffers are in the pool.
func (et *engineT) freeBuffers() int {
	// Free buffers are in the pool or in the receive side's stash (taken
	// from the pool a few at a time).
	stashed := int(et.e.rxStashed.Load())
	et.e.pool.mu.Lock()
	defer et.e.pool.mu.Unlock()
	return len(et.e.pool.free) + stashed
}

// waitWriterPending waits until a goroutine is blocked taking w's guard
// for writing (Quiesce, Detach): new readers are then refused.
func waitWriterPending(t testing.TB, w *worker) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	for w.guard.TryRLock() {
		w.guard.RUnlock()
		if time.Now().After(deadline) {
			t.Fatal("nobody waits for the worker's guard")
		}
		runtime.Gosched()
	}
}

// TestEngineInOrder: the packets for one QP reach its Endpoint in the
// order they arrived, whatever the other QPs and workers do (the
// per-connection queue of quic-go; gVisor's dispatcher hashing an
// endpoint to one processor; IBTA 9.5: the responder sees a QP's requests
// in order).
func TestEngineInOrder(t *testing.T) {
	et := newEngineT(t, Config{Workers: 2})
	qpns := []uint32{0x10, 0x11, 0x12, 0x13}
	eps := map[uint32]*fakeEP{}
	got := map[uint32][]uint32{}
	var mu sync.Mutex
	for _, n := range qpns {
		ep := et.ep(fmt.Sprint(n))
		ep.recv = func(_ *Turn, p *wire.Packet) Result {
			mu.Lock()
			got[n] = append(got[n], uint32(p.BTH.PSN()))
			mu.Unlock()
			return Result{}
		}
		eps[n] = ep
		et.e.Attach(n, ep)
	}
	var pkts []link.Packet
	want := map[uint32][]uint32{}
	for i := range 400 {
		n := qpns[(i*7+i/3)%len(qpns)]
		psn := uint32(i)
		pkts = append(pkts, inPacket(t, n, psn))
		want[n] = append(want[n], psn)
	}
	et.l.deliver(t, pkts...)
	et.e.Sync()
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, got)
	s := et.e.Stats()
	require.Equal(t, uint64(400), s.RxPackets)
	require.Zero(t, s.Dropped())
	require.Equal(t, et.e.cfg.Buffers, et.freeBuffers())
}

// TestEngineUnknownQP: a packet for no attached QP is dropped and counted
// (IBTA 9.6.1.x: the destination QP must exist).
func TestEngineUnknownQP(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1})
	bad := inPacket(t, 0x10, 1)
	bad.Buf[len(bad.Buf)-1] ^= 1
	et.l.deliver(t, inPacket(t, 0x10, 0), bad)
	et.e.Sync()
	s := et.e.Stats()
	require.Equal(t, uint64(1), s.Drops[DropUnknownQP])
	require.Equal(t, uint64(1), s.ParseDrops[wire.DropBadICRC])
}

// TestEngineQueueFull: a worker holds QueueLen packets waiting for its
// turn; one more is dropped and counted as DropQueueFull (quic-go drops
// when a connection's queue is full), and the rest are delivered in
// order.
func TestEngineQueueFull(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1, QueueLen: 2})
	g := newGate()
	x := et.ep("x")
	first := true
	x.recv = func(t *Turn, p *wire.Packet) Result {
		if first {
			first = false
			return g.recv(t, p)
		}
		return Result{}
	}
	et.e.Attach(0x10, x)
	et.l.deliver(t, inPacket(t, 0x10, 0))
	waitFor(t, g.entered, "the first Receive")
	et.l.deliver(t, inPacket(t, 0x10, 1), inPacket(t, 0x10, 2), inPacket(t, 0x10, 3))
	require.Equal(t, uint64(1), et.drops(DropQueueFull))
	close(g.release)
	et.e.Sync()
	require.Equal(t, []string{"x recv 0", "x recv 1", "x recv 2"}, et.log.get())
	require.Equal(t, et.e.cfg.Buffers, et.freeBuffers())
}

// TestEngineNoBuffer: received packets wait in a bounded set of buffers
// (wireguard-go's WaitPool); when all are waiting, a new packet is
// dropped and counted as DropNoBuffer.
func TestEngineNoBuffer(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1, Buffers: 2})
	g := newGate()
	x := et.ep("x")
	first := true
	x.recv = func(t *Turn, p *wire.Packet) Result {
		if first {
			first = false
			return g.recv(t, p)
		}
		return Result{}
	}
	et.e.Attach(0x10, x)
	et.l.deliver(t, inPacket(t, 0x10, 0))
	waitFor(t, g.entered, "the first Receive")
	require.Equal(t, 1, et.freeBuffers())
	et.l.deliver(t, inPacket(t, 0x10, 1), inPacket(t, 0x10, 2))
	require.Equal(t, uint64(1), et.drops(DropNoBuffer))
	close(g.release)
	et.e.Sync()
	require.Equal(t, []string{"x recv 0", "x recv 1"}, et.log.get())
	require.Equal(t, 2, et.freeBuffers())
}

// TestEngineHeld: a packet the Endpoint holds (a request behind a READ
// response) is kept, with every later packet of the QP, in order; they
// are offered again after the QP's Run, oldest first; at most holdLen
// (the requester's 128-PSN window) are kept, the next are dropped as
// DropHeldFull.
func TestEngineHeld(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1})
	var busy atomic.Bool
	busy.Store(true)
	var accepted []uint32
	x := et.ep("x")
	x.recv = func(_ *Turn, p *wire.Packet) Result {
		if busy.Load() {
			// As the responder: held while a READ is answered,
			// whose Run is already due.
			return Result{Held: true}
		}
		accepted = append(accepted, uint32(p.BTH.PSN()))
		return Result{}
	}
	h := et.e.Attach(0x10, x)
	var pkts []link.Packet
	for i := range holdLen + 2 {
		pkts = append(pkts, inPacket(t, 0x10, uint32(i)))
	}
	et.l.deliver(t, pkts...)
	et.e.Sync()
	require.Equal(t, uint64(2), et.drops(DropHeldFull))
	require.Empty(t, accepted)
	require.Equal(t, []string{"x recv 0"}, et.log.get(), "later packets wait behind the held one")
	require.Equal(t, et.e.cfg.Buffers-holdLen, et.freeBuffers())

	// Run, and the held packets are offered again, oldest first,
	// until one is held again.
	h.Flush()
	require.Equal(t, []string{"x recv 0", "x run", "x recv 0"}, et.log.get())
	busy.Store(false)
	h.Flush()
	calls := et.log.get()[3:]
	require.Equal(t, "x run", calls[0], "held packets are offered after Run")
	require.Len(t, calls, 1+holdLen)
	require.Equal(t, seq(0, holdLen), accepted)
	require.Equal(t, et.e.cfg.Buffers, et.freeBuffers())

	// Nothing held: a new packet goes straight in.
	et.l.deliver(t, inPacket(t, 0x10, 500))
	et.e.Sync()
	require.Equal(t, uint32(500), accepted[len(accepted)-1])
}

// TestEngineRoundRobin: a QP whose Run stopped at its budget (More) runs
// again after the other QPs of its worker had their turn (round robin;
// gVisor's processor loop), not before.
func TestEngineRoundRobin(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1})
	g := newGate()
	gq := et.ep("g")
	gq.recv = g.recv
	a, b := et.ep("a"), et.ep("b")
	more := 2
	a.run = func(*Turn) Result {
		more--
		return Result{More: more >= 0}
	}
	et.e.Attach(0x30, gq)
	ha, hb := et.e.Attach(0x10, a), et.e.Attach(0x20, b)
	et.l.deliver(t, inPacket(t, 0x30, 0))
	waitFor(t, g.entered, "g's Receive")
	ha.Kick()
	hb.Kick()
	close(g.release)
	et.e.Sync()
	require.Equal(t, []string{"g recv 0", "a run", "b run", "a run", "a run"}, et.log.get())
}

// TestEngineTimer: the Deadline a call returns arms a clock timer whose
// expiry calls Timer, with the turn's time at or after the deadline; a
// later deadline does not delay an earlier one, an earlier one moves it
// forward (IBTA 9.7.6.1.3: the transport timer; the quic-go timer
// pattern).
func TestEngineTimer(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1})
	x := et.ep("x")
	deadlines := []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 5 * time.Millisecond}
	x.run = func(*Turn) Result {
		d := deadlines[0]
		deadlines = deadlines[1:]
		return Result{Deadline: t0.Add(d)}
	}
	var timerNow time.Time
	x.timer = func(tu *Turn) Result {
		timerNow = tu.Env().Now
		return Result{}
	}
	h := et.e.Attach(0x10, x)
	h.Flush()
	require.Equal(t, 1, et.clk.Pending())
	h.Flush() // 20 ms: the 10 ms timer stays
	et.clk.Advance(9 * time.Millisecond)
	et.e.Sync()
	require.Equal(t, []string{"x run", "x run"}, et.log.get())

	h.Flush() // 5 ms (already past): the timer moves forward
	et.clk.Advance(0)
	et.e.Sync()
	require.Equal(t, []string{"x run", "x run", "x run", "x timer"}, et.log.get())
	require.Equal(t, t0.Add(9*time.Millisecond), timerNow)
	require.Zero(t, et.clk.Pending(), "Timer returned no deadline")
}

// TestEngineTimerFires: a timer armed by Receive's Result fires after the
// fake clock passes its deadline, and not before.
func TestEngineTimerFires(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1})
	x := et.ep("x")
	x.recv = func(*Turn, *wire.Packet) Result { return Result{Deadline: t0.Add(time.Second)} }
	fired := make(chan time.Time, 1)
	x.timer = func(tu *Turn) Result {
		fired <- tu.Env().Now
		return Result{}
	}
	et.e.Attach(0x10, x)
	et.l.deliver(t, inPacket(t, 0x10, 0))
	et.e.Sync()
	et.clk.Advance(time.Second - time.Nanosecond)
	et.e.Sync()
	require.Empty(t, fired)
	et.clk.Advance(time.Nanosecond)
	waitFor(t, fired, "Timer")
	require.Equal(t, []string{"x recv 0", "x timer"}, et.log.get())
}

// TestEngineKick: Kick has the worker call Run; Flush also waits for it.
func TestEngineKick(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1})
	ran := make(chan struct{}, 10)
	x := et.ep("x")
	x.run = func(*Turn) Result { ran <- struct{}{}; return Result{} }
	h := et.e.Attach(0x10, x)
	h.Kick()
	waitFor(t, ran, "Run")
	h.Flush()
	require.Equal(t, []string{"x run", "x run"}, et.log.get())
}

// TestEngineKickWhileQueued: kicks made while one is queued for the QP
// merge into its Run, which sees what their callers changed; a kick made
// during that Run (the queued one was taken) brings another Run, which
// sees what its caller changed. The second would be lost if a turn let
// go of the queued kick only after running the QP.
func TestEngineKickWhileQueued(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1})
	g := newGate()
	y := et.ep("y") // holds the worker's turn while x is kicked
	y.recv = g.recv
	et.e.Attach(0x11, y)
	var posted atomic.Int32 // what a poster changed before its Kick
	var seen []int32        // posted, as each Run of x found it
	var hx *Handle
	x := et.ep("x")
	x.run = func(*Turn) Result {
		seen = append(seen, posted.Load())
		if len(seen) == 1 {
			posted.Store(3)
			hx.Kick() // during the Run: the queued kick was taken
		}
		return Result{}
	}
	hx = et.e.Attach(0x10, x)
	et.l.deliver(t, inPacket(t, 0x11, 0))
	waitFor(t, g.entered, "y's Receive")
	posted.Store(1)
	hx.Kick()
	posted.Store(2)
	hx.Kick()
	close(g.release)
	et.e.Sync()
	hx.Flush()
	require.Equal(t, []int32{2, 3, 3}, seen, "each Run of x, what it saw (the last is Flush's)")
	require.Equal(t, []string{"y recv 0", "x run", "x run", "x run"}, et.log.get())
}

// TestEngineDetach: once Detach returns, the Endpoint is never called
// again: packets queued for it before are dropped as DropDestroyed, the
// packets it held too (their buffers return to the pool), its timer is
// stopped, and new packets find no QP.
func TestEngineDetach(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1})
	g := newGate()
	gq := et.ep("g")
	gq.recv = g.recv
	x := et.ep("x")
	x.recv = func(*Turn, *wire.Packet) Result { return Result{Held: true, Deadline: t0.Add(time.Second)} }
	et.e.Attach(0x20, gq)
	hx := et.e.Attach(0x10, x)
	et.l.deliver(t, inPacket(t, 0x10, 0))
	et.e.Sync()
	require.Equal(t, et.e.cfg.Buffers-1, et.freeBuffers(), "one packet held")
	require.Equal(t, 1, et.clk.Pending())

	et.l.deliver(t, inPacket(t, 0x20, 0))
	waitFor(t, g.entered, "g's Receive")
	et.l.deliver(t, inPacket(t, 0x10, 1), inPacket(t, 0x10, 2))
	detached := make(chan struct{})
	go func() {
		hx.Detach()
		x.after.Store(true)
		close(detached)
	}()
	waitWriterPending(t, et.e.workers[0])
	select {
	case <-detached:
		t.Fatal("Detach returned while a turn was running")
	default:
	}
	close(g.release)
	waitFor(t, detached, "Detach")
	et.e.Sync()
	require.Equal(t, uint64(3), et.drops(DropDestroyed), "one held, two queued")
	require.Equal(t, et.e.cfg.Buffers, et.freeBuffers())

	et.l.deliver(t, inPacket(t, 0x10, 3))
	hx.Kick()
	et.clk.Advance(time.Hour)
	et.e.Sync()
	require.Equal(t, uint64(1), et.drops(DropUnknownQP))
	require.Zero(t, x.violations.Load(), "an Endpoint was called after Detach")
}

// TestEngineQuiesce: Quiesce waits for a turn that is running when it is
// called (a deregistration waits until no turn can still touch the
// region), and returns once it ended.
func TestEngineQuiesce(t *testing.T) {
	et := newEngineT(t, Config{Workers: 2})
	g := newGate()
	gq := et.ep("g")
	gq.recv = g.recv
	et.e.Attach(0x11, gq) // worker 1
	et.e.Quiesce()        // nothing running: returns at once
	et.l.deliver(t, inPacket(t, 0x11, 0))
	waitFor(t, g.entered, "g's Receive")
	done := make(chan struct{})
	go func() {
		et.e.Quiesce()
		close(done)
	}()
	waitWriterPending(t, et.e.workers[1])
	select {
	case <-done:
		t.Fatal("Quiesce returned while a turn was running")
	default:
	}
	close(g.release)
	waitFor(t, done, "Quiesce")
}

// TestEngineCloseFlushes: Close sends what the workers owe before it
// closes the link (rxe's destroy lets its responder finish), and stops
// its goroutines.
func TestEngineCloseFlushes(t *testing.T) {
	l := newFakeLink()
	before := runtime.NumGoroutine()
	e := NewEngine(Config{Link: l, Clock: clock.NewFake(t0), Mem: newFakeMem(), Workers: 2})
	x := &fakeEP{name: "x", log: &callLog{}}
	x.run = func(tu *Turn) Result {
		env := tu.Env()
		for i := range 3 {
			n := wire.Net{Src: localAddr, Dst: peerAddr, SrcPort: 49152, DstPort: wire.RoCEv2Port, DontFragment: true}
			hd := ack(uint32(i), 0)
			b := env.Out.Buffer()
			pkt := wire.AppendPacket(b[:0], &n, &hd, nil)
			env.Out.Emit(len(pkt), &n)
		}
		return Result{}
	}
	h := e.Attach(0x10, x)
	h.Kick()
	require.NoError(t, e.Close())
	require.Equal(t, 3, l.sentCount())
	require.Zero(t, l.sendClosed)
	require.Equal(t, uint64(3), e.Stats().TxPackets)
	require.NoError(t, e.Close(), "a second Close does nothing")
	// The engine's goroutines have ended (wg.Wait in Close); allow for
	// goroutines of the runtime and of other tests finishing.
	require.LessOrEqual(t, runtime.NumGoroutine(), before+1)
}

// TestEngineHeldLetsResponsesPass: while a QP holds requests (behind a
// READ it answers), the ACKs and responses to its own requests are
// another stream and reach it at once, not behind the held requests.
func TestEngineHeldLetsResponsesPass(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1})
	var got []string
	x := et.ep("x")
	x.recv = func(_ *Turn, p *wire.Packet) Result {
		if p.Info().Request {
			return Result{Held: true}
		}
		got = append(got, p.BTH.OpCode().String())
		return Result{}
	}
	et.e.Attach(0x10, x)
	n := wire.Net{Src: peerAddr, Dst: localAddr, SrcPort: 50000, DstPort: wire.RoCEv2Port, DontFragment: true}
	hd := ack(7, 1)
	hd.BTH.DestQP, hd.BTH.PKey = 0x10, 0xffff
	resp := link.Packet{Buf: wire.AppendPacket(nil, &n, &hd, nil), Net: n}
	et.l.deliver(t, inPacket(t, 0x10, 0), inPacket(t, 0x10, 1), resp)
	et.e.Sync()
	require.Equal(t, []string{wire.RCAcknowledge.String()}, got, "the ACK passed the held requests")
	require.Equal(t, []string{"x recv 0", "x recv 7"}, et.log.get(), "the second request waits behind the first; the ACK does not")
}

// TestEngineStatsLinkDrops: the engine's counters include the packets its
// link dropped, each under a named reason, so that a program reading
// Stats.DropNames sees every drop and not only the transport's.
func TestEngineStatsLinkDrops(t *testing.T) {
	et := newEngineT(t, Config{Workers: 1})
	et.l.mu.Lock()
	et.l.stats = link.Stats{TxPackets: 9, TxDropped: 1, RxTruncated: 2, RxSocketDropped: 3}
	et.l.mu.Unlock()
	s := et.e.Stats()
	require.Equal(t, uint64(9), s.Link.TxPackets)
	require.Equal(t, map[string]uint64{
		"link: send failed":                             1,
		"link: datagram larger than the receive buffer": 2,
		"link: socket receive buffer full":              3,
	}, s.DropNames())
	require.Equal(t, uint64(6), s.Dropped())
	all := s.DropCounts()
	require.Len(t, all, NumDropReasons+wire.NumDropReasons-1+3)
	require.Equal(t, uint64(3), all["link: socket receive buffer full"])
	require.Equal(t, uint64(0), all[DropUnknownQP.String()])
}

// TestEngineDeviceWait: a QP the device window stopped (Result.DeviceWait)
// keeps no timer of its own; the scheduler runs it again when a turn
// leaves the device room, its own worker's or another's, the waiters of a
// worker oldest first and only while room lasts; a backstop timer per
// worker tries them again should no turn come.
func TestEngineDeviceWait(t *testing.T) {
	et := newEngineT(t, Config{Workers: 2, CC: CCConfig{DeviceWindow: 10}})
	cc := et.e.cc
	cc.inflight[0].n.Store(10) // the device window is full
	// Each QP sends 5 packets when there is room.
	wants := func(name string) *fakeEP {
		ep := et.ep(name)
		ep.run = func(*Turn) Result {
			if cc.room() <= 0 {
				return Result{DeviceWait: true}
			}
			cc.inflight[0].n.Add(5)
			et.log.add(name + " sent")
			return Result{}
		}
		return ep
	}
	a, c := et.e.Attach(0x10, wants("a")), et.e.Attach(0x12, wants("c")) // worker 0
	b := et.e.Attach(0x11, wants("b"))                                   // worker 1
	ack := et.e.Attach(0x13, et.ep("ack"))                               // worker 1
	a.Flush()
	c.Flush()
	b.Flush()
	et.e.Sync()
	require.Equal(t, []string{"a run", "c run", "b run"}, et.log.get())
	require.Equal(t, 2, et.clk.PendingWithin(time.Hour), "one backstop timer per worker with waiters, none per QP")
	require.EqualValues(t, 2, et.e.workers[0].devWaiting.Load())
	require.EqualValues(t, 1, et.e.workers[1].devWaiting.Load())

	// Room for one QP, made in a turn of worker 1: its own waiter goes.
	cc.inflight[0].n.Add(-5)
	ack.Flush()
	et.e.Sync()
	require.Equal(t, []string{"ack run", "b run", "b sent"}, et.log.get()[3:])
	require.EqualValues(t, 0, et.e.workers[1].devWaiting.Load())

	// Room for two, made in a turn of worker 1, which has no waiters
	// left: it kicks worker 0, whose waiters go oldest first.
	cc.inflight[0].n.Add(-10)
	ack.Flush()
	et.e.Sync()
	require.Equal(t, []string{"ack run", "a run", "a sent", "c run", "c sent"}, et.log.get()[6:])
	require.EqualValues(t, 0, et.e.workers[0].devWaiting.Load())

	// A waiter whose room comes back with no turn anywhere: the backstop.
	cc.inflight[0].n.Store(10)
	a.Flush()
	et.e.Sync()
	require.Equal(t, "a run", et.log.get()[11])
	cc.inflight[0].n.Add(-5)
	et.clk.Advance(devWaitBackstop)
	et.e.Sync()
	require.Equal(t, []string{"a run", "a sent"}, et.log.get()[12:])
}

// TestEngineCloseStopsTimers: Close stops the timers of the QPs still
// attached, so that none keeps the closed engine (its buffers and chunks)
// reachable until it fires: a QP's transport timer may be hours away.
func TestEngineCloseStopsTimers(t *testing.T) {
	et := newEngineT(t, Config{Workers: 2})
	for qpn := uint32(0x10); qpn < 0x14; qpn++ {
		x := et.ep(fmt.Sprint(qpn))
		x.run = func(tt *Turn) Result { return Result{Deadline: tt.Env().Now.Add(time.Hour)} }
		et.e.Attach(qpn, x).Flush() // Run arms the QP's timer
	}
	require.Equal(t, 4, et.clk.Pending())
	require.NoError(t, et.e.Close())
	require.Zero(t, et.clk.Pending(), "a timer outlived Close")
}

// TestEngineDoorbellTakesYieldedTurn: a turn that delivered a receive
// yields before it sends the ACK it owes, so that the application the
// completion woke can answer first. The answer's doorbell takes the turn
// over: the answer and the ACK leave in one Send before Ring returns,
// without a switch back to the worker's goroutine, which finds the turn
// taken and leaves it.
func TestEngineDoorbellTakesYieldedTurn(t *testing.T) {
	yielded, rung := make(chan struct{}), make(chan struct{})
	var once, unblock sync.Once
	old := yieldTurn
	yieldTurn = func() {
		// The first yield waits for the test's doorbell: the scheduler
		// ran the woken application first.
		once.Do(func() { close(yielded); <-rung })
	}
	t.Cleanup(func() { yieldTurn = old })
	et := newEngineT(t, Config{Workers: 1})
	t.Cleanup(func() { unblock.Do(func() { close(rung) }) }) // before Close
	var owedACK, answer atomic.Bool
	x := et.ep("x")
	x.recv = func(*Turn, *wire.Packet) Result {
		owedACK.Store(true)
		return Result{Delivered: true, Run: true}
	}
	x.run = func(tu *Turn) Result {
		env := tu.Env()
		emit := func(h wire.Headers) {
			n := wire.Net{Src: localAddr, Dst: peerAddr, SrcPort: 49152, DstPort: wire.RoCEv2Port, DontFragment: true}
			pkt := wire.AppendPacket(env.Out.Buffer()[:0], &n, &h, nil)
			env.Out.Emit(len(pkt), &n)
		}
		if answer.Swap(false) {
			emit(request(wire.RCSendOnly, 100))
		}
		if owedACK.Swap(false) {
			emit(ack(5, 1))
		}
		return Result{}
	}
	h := et.e.Attach(0x10, x)
	et.l.deliver(t, inPacket(t, 0x10, 5))
	waitFor(t, yielded, "the turn to yield after the receive")
	_, pkts := et.l.sendCalls()
	require.Zero(t, pkts, "the ACK waits for the answer")

	answer.Store(true)
	h.Ring()
	calls, pkts := et.l.sendCalls()
	require.Equal(t, 1, calls, "the answer and the ACK in one Send, made by the doorbell")
	require.Equal(t, 2, pkts)

	unblock.Do(func() { close(rung) })
	h.Flush()
	calls, pkts = et.l.sendCalls()
	require.Equal(t, 1, calls, "the yielding goroutine found the turn taken: nothing more sent")
	require.Equal(t, 2, pkts)
	require.Equal(t, []string{"x recv 5", "x run", "x run"}, et.log.get())
}
