package transport

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/internal/ring"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// Handle is a QP's place in the scheduler, returned by Engine.Attach.
type Handle struct {
	e   *Engine
	w   *worker
	ep  Endpoint
	qpn uint32

	// Protected by w.mu.
	queued  bool        // on w.ready
	pending pendingBits // what the ready entry is for

	// kickQueued: a kick is on w.ready, and the turn that takes it
	// (clearing this first) runs the QP after. Written with w.mu held,
	// read without it: a Kick that finds it set has nothing to add, so
	// a poster's burst takes w.mu once.
	kickQueued atomic.Bool

	// Owned by the goroutine running w's turn, and by Detach while it
	// holds w.guard for writing.
	dirty    bool // on w.dirty: Run before the batch is sent
	devWait  bool // on w.devWaiters: stopped at the device window
	detached bool
	held     []*rxBuf // requests waiting behind a READ response, oldest first
	timer    clock.Timer
	armedAt  time.Time // when timer fires; zero when it is not armed
}

type pendingBits uint8

const (
	pendingKick  pendingBits = 1 << iota // work was posted or a state changed
	pendingTimer                         // the QP's timer fired
)

// Kick tells the scheduler that the QP may have work (a state change, a
// post to a busy send queue); the worker's goroutine runs it. It may be
// called with locks held. What the caller changed before Kick is seen by
// the QP's next Run: a kick still queued (kickQueued) is one whose Run is
// yet to come, so Kick then returns at once.
func (h *Handle) Kick() {
	if h.kickQueued.Load() {
		return
	}
	h.w.signal(h, pendingKick, turnWake)
}

// Ring is the doorbell of a post to a send queue that held nothing else:
// with busy polling, as rxe runs its requester in the caller of
// post_send, the requester runs in the caller's goroutine unless the
// worker is busy; otherwise it is Kick, except that it takes over a turn
// that yields for the answer to a receive it completed (see the package
// threading note), running it here. Once the engine is closed it is
// Kick too, which runs nothing: no turn then re-arms a timer that would
// keep the closed engine reachable. The caller must hold no lock a turn
// takes.
func (h *Handle) Ring() {
	mode := turnRing
	if h.e.closed.Load() {
		mode = turnWake
	} else if h.e.cfg.BusyPoll {
		mode = turnInline
	}
	h.w.signal(h, pendingKick, mode)
}

// Flush has the QP's worker run the QP (as Kick) and waits until
// everything queued for the worker before, this included, was handled
// and sent. The caller must hold no lock a turn takes.
func (h *Handle) Flush() {
	h.Kick()
	h.w.sync()
}

// Detach removes the QP from the scheduler: no packet is delivered to it
// from now on, its timer is stopped, and the requests it held are
// dropped. When Detach returns, no turn is running the QP's work, and
// none will call it again. The caller must hold no lock a turn takes.
func (h *Handle) Detach() {
	h.e.table.remove(h.qpn, h)
	w := h.w
	w.guard.Lock()
	defer w.guard.Unlock()
	h.detached = true
	if h.timer != nil {
		h.timer.Stop()
	}
	for i, rb := range h.held {
		h.e.c.Drop(DropDestroyed)
		h.e.pool.put(rb)
		h.held[i] = nil
	}
	h.held = h.held[:0]
}

// Turn is what an Endpoint call works with: the time of the turn and the
// worker's transmit batch (through Env).
type Turn struct {
	w   *worker
	env Env
}

// Env returns the protocol's environment for one call: the time, the
// transmit batch, the memory, the counters and the budget of a Run.
func (t *Turn) Env() *Env { return &t.env }

// pktEvent is a received packet for a QP.
type pktEvent struct {
	h  *Handle
	rx *rxBuf
}

// How a worker's turn is run: by its own goroutine, or inline by the
// goroutine that queued its events (see the package threading note).
type turnMode uint8

const (
	turnWake   turnMode = iota // wake the worker's goroutine
	turnInline                 // run the turn here if nobody is running one
	// turnPoll is turnInline for packets a busy poller read: the ACKs
	// of receives the turn delivered are left for the application's next
	// post or poll (see Engine.Progress).
	turnPoll
	// turnRing is turnWake for a doorbell, which also takes over a turn
	// that yields for the answer to a receive it delivered (see
	// runTurn): the doorbell's goroutine sends that answer with the
	// ACKs that waited for it.
	turnRing
	// turnTaken is the turn a doorbell took over.
	turnTaken
)

// yieldTurn lets the goroutines a turn's completions woke run before
// the turn goes on (see runTurn); tests replace it to order the two.
var yieldTurn = runtime.Gosched

// worker owns a share of the QPs and runs their protocol work: it alone
// handles their events and uses its transmit batch, so each QP's packets
// leave in the order they were built.
type worker struct {
	e *Engine
	// guard is held for reading while a turn runs protocol work, and for
	// writing by Quiesce and Detach, which so wait for the turn to end.
	guard sync.RWMutex

	mu sync.Mutex
	// The packets waiting for the next turn: a fixed ring. Protected by
	// mu.
	rxq        []pktEvent
	rxHead     int
	rxLen      int
	ready      []*Handle       // QPs with pending kicks or timers; protected by mu
	syncs      []chan struct{} // closed when everything queued before them was sent; protected by mu
	running    bool            // a goroutine runs the turn; protected by mu
	notify     chan struct{}
	readySpare []*Handle
	// devKick: the device window may have room for the QPs waiting for
	// it (devWaiters); a turn should try them. Protected by mu.
	devKick bool
	// devWaiting is len(devWaiters) as other workers see it: a worker
	// whose turn leaves the device room kicks the workers with waiters.
	devWaiting atomic.Int32
	// yielding: the running turn's goroutine yields so that an
	// application woken by a completion can answer it; a doorbell that
	// swaps it to false takes the turn over (turnRing), and the
	// yielding goroutine, finding it false, leaves the turn to it.
	yielding atomic.Bool
	// owed: work was left for the worker's goroutine since the last turn
	// started (events queued while no turn ran, or a turn that handed
	// off). A busy poller's runOwed looks at it before it takes mu:
	// polls that find nothing to do cost no lock.
	owed atomic.Bool

	// The rest belongs to the goroutine running the turn.
	turn      Turn
	batch     []pktEvent // packets taken for this round
	readyBits []pendingBits
	tx        []link.Packet
	txBytes   int
	txBufs    [][]byte
	dirty     []*Handle // QPs to Run before the batch is sent
	dirtyNext []*Handle
	freed     []*rxBuf // buffers done with, returned to the pool a few at a time
	// delivered: this round completed a receive, so an application may
	// be about to answer it (see turn).
	delivered bool
	// inline: the turn is run by the goroutine that queued its events;
	// inlineBytes counts the bytes it built.
	inline      bool
	inlineBytes int
	// traceBuf assembles packets sent in parts for Config.Trace.
	traceBuf []byte
	// devWaiters are the QPs the device window stopped, in the order
	// they stopped (FIFO: each gets its turn at the room; a ring that
	// grows when full, a QP at most once); devTimer is a backstop that
	// has the worker look at them again after devWaitBackstop, armed
	// while there are any (devTimerAt).
	devWaiters ring.Ring[*Handle]
	devTimer   clock.Timer
	devTimerAt time.Time
}

// devWaitBackstop is how long QPs stopped at the device window wait at
// most before their worker looks at the room again, should no
// acknowledgement's turn have kicked it (it always should: the backstop
// keeps a missed kick from stopping them for ever).
const devWaitBackstop = time.Millisecond

func newWorker(e *Engine, index, queueLen int) *worker {
	w := &worker{e: e, notify: make(chan struct{}, 1), rxq: make([]pktEvent, queueLen),
		batch: make([]pktEvent, 0, queueLen), freed: make([]*rxBuf, 0, rxBatchLen)}
	w.turn = Turn{w: w, env: Env{Out: w, Mem: e.cfg.Mem, Stats: &e.c, CC: e.cc, CCShard: index}}
	if g, ok := e.cfg.Link.(link.Gatherer); ok && g.Gathers() {
		w.turn.env.Gather = w
	}
	w.txBufs = make([][]byte, txBatch)
	for i := range w.txBufs {
		w.txBufs[i] = make([]byte, link.MaxPacketSize)
	}
	return w
}

// sync waits until everything queued for the worker was handled and
// sent, or the engine is closed: its goroutines are gone, and nothing
// will be sent again (Engine.Close syncs every worker before that).
func (w *worker) sync() {
	done := make(chan struct{})
	w.mu.Lock()
	w.syncs = append(w.syncs, done)
	w.mu.Unlock()
	w.wake()
	select {
	case <-done:
	case <-w.e.done:
	}
}

func (w *worker) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// signal records a kick or a timer for h and has the turn run: the
// worker's goroutine, or (turnInline) the caller if nobody runs it.
func (w *worker) signal(h *Handle, bits pendingBits, mode turnMode) {
	w.mu.Lock()
	h.pending |= bits
	if bits&pendingKick != 0 {
		h.kickQueued.Store(true)
	}
	if !h.queued {
		h.queued = true
		w.ready = append(w.ready, h)
	}
	w.startLocked(mode)
}

// submitPackets queues received packets for w's turn; those that do not
// fit the queue are dropped.
func (w *worker) submitPackets(evs []pktEvent, mode turnMode) {
	w.mu.Lock()
	for _, ev := range evs {
		if w.rxLen == len(w.rxq) {
			w.e.c.Drop(DropQueueFull)
			w.e.pool.put(ev.rx)
			continue
		}
		w.rxq[(w.rxHead+w.rxLen)%len(w.rxq)] = ev
		w.rxLen++
	}
	w.startLocked(mode)
}

// startLocked has the turn run after events were queued: if one is
// running it handles them; otherwise mode says who runs it.
//
// Preconditions: w.mu is held; startLocked releases it.
func (w *worker) startLocked(mode turnMode) {
	if mode == turnRing && w.running && w.yielding.CompareAndSwap(true, false) {
		w.mu.Unlock()
		w.runTurn(turnTaken)
		return
	}
	if mode == turnWake || mode == turnRing {
		running := w.running
		if !running {
			w.owed.Store(true)
		}
		w.mu.Unlock()
		if !running {
			w.wake()
		}
		return
	}
	w.takeTurnLocked(mode)
}

// runOwed runs a turn here if nobody is running one and the last turn
// left work (a busy poller's deferred ACKs).
func (w *worker) runOwed() bool {
	if !w.owed.Load() {
		return false
	}
	w.mu.Lock()
	if !w.running && w.rxLen == 0 && len(w.ready) == 0 && len(w.dirty) == 0 {
		w.mu.Unlock()
		return false
	}
	return w.takeTurnLocked(turnInline)
}

// takeTurnLocked runs a turn in the calling goroutine unless one is
// running, and reports whether it did. It is the one place a turn starts
// (w.running set); turn and handOff end it.
//
// Preconditions: w.mu is held; takeTurnLocked releases it.
func (w *worker) takeTurnLocked(mode turnMode) bool {
	if w.running {
		w.mu.Unlock() // the running turn handles what was queued
		return false
	}
	w.running = true
	w.owed.Store(false) // this turn takes everything queued
	w.mu.Unlock()
	w.runTurn(mode)
	return true
}

// run is the worker's goroutine: it runs a turn when woken and nobody
// else is running one.
func (w *worker) run() {
	defer w.e.wg.Done()
	for {
		select {
		case <-w.notify:
		case <-w.e.done:
			return
		}
		w.mu.Lock()
		w.takeTurnLocked(turnWake)
	}
}

// runTurn handles the worker's events until none are left, then ends the
// turn (w.running = false). A turn not run by the worker's goroutine
// hands the rest to it once it has built txBatchBytes; a busy poller's
// turn also hands over the ACKs of the receives it delivered (see
// Progress), unless an earlier one already left some.
//
// Preconditions: the caller set w.running.
func (w *worker) runTurn(mode turnMode) {
	inline := mode != turnWake
	w.inline, w.inlineBytes = inline, 0
	yielded := mode == turnPoll || mode == turnTaken // the application is this goroutine
	deferAcks := mode == turnPoll && len(w.dirty) == 0
	for {
		if !w.take() {
			return
		}
		w.guard.RLock()
		w.turn.env.Now = w.e.cfg.Clock.Now()
		w.handleBatch()
		w.guard.RUnlock()
		if len(w.freed) > 0 {
			w.freed = w.e.pool.putN(w.freed)
		}
		if w.delivered && !yielded && len(w.dirty) > 0 {
			// A receive just completed and ACKs are about to leave.
			// The application woken by the completion runs next on
			// this P; if it answers (a send on the same QP, as
			// request-response traffic does), its doorbell joins this
			// turn and its packets join the ACKs in one transmit
			// batch: one system call instead of two, on both sides.
			// The ACKs wait for at most one scheduling round.
			yielded = true
			w.delivered = false
			w.yielding.Store(true)
			yieldTurn()
			if !w.yielding.CompareAndSwap(true, false) {
				return // a doorbell took the turn over
			}
			continue
		}
		if deferAcks && w.delivered && len(w.dirty) > 0 {
			w.delivered = false // before the hand-off: then the turn is another's
			if w.handOffUnlessSync() {
				return
			}
		}
		w.delivered = false
		w.guard.RLock()
		w.finishBatch()
		w.guard.RUnlock()
		w.kickOthers()
		if len(w.freed) > 0 {
			// Held requests that Run released: their buffers (and the
			// chunks they point into) must not wait for the next turn.
			w.freed = w.e.pool.putN(w.freed)
		}
		if inline && w.inlineBytes >= txBatchBytes && len(w.dirty) > 0 {
			// Enough for a goroutine that has work of its own: the
			// worker's goroutine sends the rest.
			w.handOff()
			return
		}
	}
}

// take moves the queued packets and ready QPs into the turn's arrays. It
// reports false, ending the turn, when there is nothing to do; then it
// releases the Close waiters, since everything queued before them was
// sent.
func (w *worker) take() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.rxLen == 0 && len(w.ready) == 0 && len(w.dirty) == 0 && !w.devKick {
		w.running = false
		for i, c := range w.syncs {
			close(c)
			w.syncs[i] = nil
		}
		w.syncs = w.syncs[:0]
		return false
	}
	w.devKick = false // this round's finishBatch tries the waiters
	w.batch = w.batch[:0]
	for ; w.rxLen > 0; w.rxLen-- {
		w.batch = append(w.batch, w.rxq[w.rxHead])
		w.rxq[w.rxHead] = pktEvent{}
		w.rxHead = (w.rxHead + 1) % len(w.rxq)
	}
	ready := w.ready
	w.ready = w.readySpare[:0]
	w.readySpare = ready
	w.readyBits = w.readyBits[:0]
	for _, h := range ready {
		w.readyBits = append(w.readyBits, h.pending)
		h.queued, h.pending = false, 0
		h.kickQueued.Store(false) // before this turn's Run of h
	}
	return true
}

// handOffUnlessSync is handOff for a busy poller's deferred ACKs, unless
// a Sync waits for everything queued to be sent: then the turn goes on
// and it reports false.
func (w *worker) handOffUnlessSync() bool {
	w.mu.Lock()
	if len(w.syncs) > 0 {
		w.mu.Unlock()
		return false
	}
	w.handOffLocked()
	return true
}

// handleBatch hands the round's packets to their QPs and runs the timers
// that fired; kicks mark their QPs for Run.
func (w *worker) handleBatch() {
	t := &w.turn
	for i := range w.batch {
		ev := &w.batch[i]
		w.deliver(ev.h, ev.rx)
		*ev = pktEvent{}
	}
	for i, h := range w.readySpare {
		bits := w.readyBits[i]
		w.readySpare[i] = nil
		if h.detached {
			continue
		}
		if bits&pendingTimer != 0 {
			h.armedAt = time.Time{}
			t.env.Budget = Unlimited
			w.apply(h, h.ep.Timer(t))
		}
		if bits&pendingKick != 0 {
			w.markDirty(h)
		}
	}
}

// deliver hands one packet to its QP; a request goes behind the requests
// the QP holds. Responses (ACKs, READ responses) belong to the QP's other
// stream and pass.
func (w *worker) deliver(h *Handle, rb *rxBuf) {
	if h.detached {
		w.e.c.Drop(DropDestroyed)
		w.release(rb)
		return
	}
	if len(h.held) > 0 && rb.p.Info().Request {
		w.hold(h, rb)
		return
	}
	t := &w.turn
	t.env.Budget = Unlimited
	res := h.ep.Receive(t, &rb.p)
	if res.Held {
		w.hold(h, rb)
	} else {
		w.release(rb)
	}
	w.apply(h, res)
}

// release gives a buffer back to the pool: the worker collects them and
// returns them in groups.
func (w *worker) release(rb *rxBuf) {
	w.freed = append(w.freed, rb)
	if len(w.freed) == cap(w.freed) {
		w.freed = w.e.pool.putN(w.freed)
	}
}

// hold keeps a packet the QP cannot take yet, in order; beyond holdLen it
// is dropped (the requester sends it again).
func (w *worker) hold(h *Handle, rb *rxBuf) {
	if len(h.held) >= holdLen {
		w.e.c.Drop(DropHeldFull)
		w.release(rb)
		return
	}
	h.held = append(h.held, rb)
}

// redeliver offers the QP's held packets again, oldest first, until one
// is held again.
func (w *worker) redeliver(h *Handle) {
	t := &w.turn
	for len(h.held) > 0 && !h.detached {
		rb := h.held[0]
		t.env.Budget = Unlimited
		res := h.ep.Receive(t, &rb.p)
		if res.Held {
			w.apply(h, res)
			return
		}
		copy(h.held, h.held[1:])
		h.held[len(h.held)-1] = nil
		h.held = h.held[:len(h.held)-1]
		w.release(rb)
		w.apply(h, res)
	}
}

// apply records what an Endpoint call asked of the scheduler.
func (w *worker) apply(h *Handle, res Result) {
	if res.Run || res.More {
		w.markDirty(h)
	}
	if res.Delivered {
		w.delivered = true
	}
	if res.DeviceWait && !h.devWait && !h.detached {
		h.devWait = true
		if w.devWaiters.Full() {
			w.devWaiters.Resize(max(16, 2*w.devWaiters.Cap()))
		}
		w.devWaiters.Push(h)
		w.devWaiting.Store(int32(w.devWaiters.Len()))
	}
	w.setDeadline(h, res.Deadline)
}

// setDeadline arms the QP's clock timer for d, lazily: a timer that fires
// before d is harmless (Timer finds it early and returns d again), so it
// is reset only when d comes before it, or none is armed.
//
// Once the engine is closed nothing is armed: no goroutine would run
// the timer's turn, and a pending timer keeps the engine reachable until
// it fires. A turn may still run after Close stopped the timers (a
// doorbell or a busy poll that found the engine open just before), and
// Close's stopTimers waits for the turns that armed one before it
// looked (the timers belong to the turns, under w.guard).
func (w *worker) setDeadline(h *Handle, d time.Time) {
	if d.IsZero() || (!h.armedAt.IsZero() && !d.Before(h.armedAt)) || w.e.closed.Load() {
		return
	}
	h.armedAt = d
	delay := d.Sub(w.turn.env.Now)
	if h.timer == nil {
		h.timer = w.e.cfg.Clock.AfterFunc(delay, func() { w.signal(h, pendingTimer, turnWake) })
		return
	}
	h.timer.Reset(delay)
}

func (w *worker) markDirty(h *Handle) {
	if !h.dirty && !h.detached {
		h.dirty = true
		w.dirty = append(w.dirty, h)
	}
}

// finishBatch runs the QPs marked for it (each within its budget; one
// that stops at the budget goes round again after the others), offers
// held requests again, and sends the transmit batch.
//
// A QP's requester packets go before its ACK: the two belong to
// independent streams (the ACK answers the peer's requests), and with
// UDP GSO a run of equal-length packets may end with a shorter one, so a
// request followed by the ACK leaves as one super-packet that crosses the
// kernel once (request-response traffic: the answer and the ACK of the
// question it answers).
func (w *worker) finishBatch() {
	list := w.dirty
	w.dirty = w.dirtyNext[:0]
	for i, h := range list {
		list[i] = nil
		h.dirty = false
		if h.detached {
			continue
		}
		w.runQP(h)
	}
	w.dirtyNext = list[:0]
	w.runDeviceWaiters()
	w.flush()
}

// runQP runs one QP within its budget and offers its held requests
// again.
func (w *worker) runQP(h *Handle) {
	t := &w.turn
	t.env.Budget = runBudget
	if w.inline {
		t.env.Budget = max(txBatchBytes-w.inlineBytes, 1)
	}
	w.apply(h, h.ep.Run(t))
	if len(h.held) > 0 {
		w.redeliver(h)
	}
}

// runDeviceWaiters runs the QPs the device window stopped, oldest first,
// while it has room: each takes what it can, and one that finds none
// left goes to the back. Each waiter is tried at most once a round; if
// room is left for those still waiting (freed meanwhile by another
// worker), the worker kicks itself for another round, and while any wait
// the backstop timer is armed.
func (w *worker) runDeviceWaiters() {
	if w.devWaiters.Len() == 0 {
		return
	}
	for tries := w.devWaiters.Len(); tries > 0 && w.e.cc.room() > 0; tries-- {
		h, ok := w.devWaiters.Pop()
		if !ok {
			break
		}
		h.devWait = false
		if h.detached {
			continue
		}
		if h.dirty {
			continue // already due to run: the next round runs it
		}
		w.runQP(h) // a QP stopped again goes to the back (apply)
	}
	w.devWaiting.Store(int32(w.devWaiters.Len()))
	if w.devWaiters.Len() == 0 {
		return
	}
	if w.e.cc.room() > 0 {
		w.mu.Lock()
		w.devKick = true
		w.mu.Unlock()
	}
	w.armBackstop()
}

// armBackstop arms the worker's device-window backstop timer, unless it
// is armed already.
func (w *worker) armBackstop() {
	now := w.turn.env.Now
	if (!w.devTimerAt.IsZero() && now.Before(w.devTimerAt)) || w.e.closed.Load() {
		return // armed, or the engine is closed (see setDeadline)
	}
	w.devTimerAt = now.Add(devWaitBackstop)
	if w.devTimer == nil {
		w.devTimer = w.e.cfg.Clock.AfterFunc(devWaitBackstop, w.kickDevice)
		return
	}
	w.devTimer.Reset(devWaitBackstop)
}

// kickDevice has the worker's turn try the QPs waiting for the device
// window.
func (w *worker) kickDevice() {
	w.mu.Lock()
	w.devKick = true
	w.startLocked(turnWake)
}

// kickOthers kicks the other workers whose QPs wait for the device
// window, when this turn leaves it room: acknowledgements handled here
// may have made it.
func (w *worker) kickOthers() {
	for _, o := range w.e.workers {
		if o != w && o.devWaiting.Load() > 0 && w.e.cc.room() > 0 {
			o.kickDevice()
		}
	}
}

// handOff ends the turn with work left (w.dirty) for whoever runs the
// next one, and wakes the worker's goroutine so that somebody does.
func (w *worker) handOff() {
	w.mu.Lock()
	w.handOffLocked()
}

// handOffLocked is handOff with w.mu held; it releases it.
func (w *worker) handOffLocked() {
	w.running = false
	w.owed.Store(true)
	w.mu.Unlock()
	w.wake()
}

// Buffer returns the buffer for the next packet, sending a full batch
// first (Emitter).
func (w *worker) Buffer() []byte {
	if len(w.tx) == txBatch || w.txBytes >= txBatchBytes {
		w.flush()
	}
	return w.txBufs[len(w.tx)]
}

// Emit queues the packet built in Buffer's buffer (Emitter).
func (w *worker) Emit(n int, dst *wire.Net) {
	b := w.txBufs[len(w.tx)][:n]
	w.tx = append(w.tx, link.Packet{Buf: b, Net: *dst})
	w.txBytes += n
	w.inlineBytes += n
}

// trace hands a sent packet to Config.Trace whole: one whose payload lies
// apart (EmitGather) is assembled in a scratch buffer first.
func (w *worker) trace(p *link.Packet) {
	if len(p.Payload) == 0 {
		w.e.cfg.Trace(Sent, p)
		return
	}
	if w.traceBuf == nil {
		w.traceBuf = make([]byte, 0, link.MaxPacketSize)
	}
	b := append(append(append(w.traceBuf[:0], p.Buf[:p.PayloadAt]...), p.Payload...), p.Buf[p.PayloadAt:]...)
	whole := link.Packet{Buf: b, Net: p.Net}
	w.e.cfg.Trace(Sent, &whole)
}

// EmitGather queues a packet whose payload is sent from where it lies
// (GatherEmitter): the headers and the tail are in Buffer's buffer. Only
// a requester builds such packets, in Run, which runs within finishBatch;
// finishBatch ends with flush, so a region's bytes never wait in the batch
// beyond the turn that Quiesce and Detach wait for.
func (w *worker) EmitGather(hdr int, payload []byte, tail int, dst *wire.Net) {
	b := w.txBufs[len(w.tx)][:hdr+tail]
	w.tx = append(w.tx, link.Packet{Buf: b, Net: *dst, Payload: payload, PayloadAt: hdr})
	n := hdr + len(payload) + tail
	w.txBytes += n
	w.inlineBytes += n
}

// flush sends the queued packets.
func (w *worker) flush() {
	if len(w.tx) == 0 {
		return
	}
	if w.e.cfg.Trace != nil {
		for i := range w.tx {
			w.trace(&w.tx[i])
		}
	}
	w.e.c.Tx.Add(uint64(len(w.tx)))
	_ = w.e.cfg.Link.Send(w.tx)
	clear(w.tx) // no reference to a region's bytes outlives the batch
	w.tx = w.tx[:0]
	w.txBytes = 0
}
