package qp

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/mr"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// The transport engine moves the bytes of every QP of a device over one
// link: the requester segments send work requests into packets, the
// responder executes incoming requests and answers them, and the completer
// turns acknowledgements and responses into completions (IBTA chapter 9).
//
// Threading: one receive goroutine reads batches from the link, parses
// them (ICRC included) and hands each packet to the worker that owns the
// destination QP. Workers are a fixed pool; a QP is owned by worker
// QPN % N, and a worker's events are handled by one goroutine at a time,
// in the order they were queued, however many QPs there are. A worker
// handles an event under the QP's mutex, and sends what the batch
// produced after releasing it.
//
// Which goroutine runs a worker's turn (worker.running, under worker.mu,
// is the one place that says who owns the worker; events that arrive
// while a turn runs are handled by that turn before it ends):
//   - With busy polling (EngineConfig.BusyPoll), the application's
//     goroutine drives the transport. A poller (Progress) reads the link
//     and runs the turns of what it read, and PostSend on a send queue
//     that held nothing else runs the turn in the caller's goroutine, as
//     rxe runs its requester in the caller of post_send: a request is
//     answered from the goroutine that polled for it, and reaches the
//     wire without a goroutine switch.
//   - Everything else wakes the worker's goroutine: the receive
//     goroutine's packets (on two cores, receiving while a worker
//     transmits is what carries a stream), timers and state changes
//     (whose callers may hold locks).
//
// A turn not run by the worker's goroutine builds at most txBatchBytes
// of requester packets and hands the rest to it, so neither a poster nor
// a poller is held by a long transfer.

// EngineConfig describes the transport of a device.
type EngineConfig struct {
	Link  link.Link
	Clock clock.Clock // default clock.Real{}
	MRs   *mr.Table
	// Local is the link's address: Src and SrcPort of every packet sent.
	Local wire.Net
	// PeerPort is the UDP destination port of every packet: 4791 on a real
	// network; tests with several devices on one address use their own.
	PeerPort uint16
	// Workers is the size of the worker pool; default 2.
	Workers int
	// ActiveMTU is the port's MTU, the limit of a UD message.
	ActiveMTU verbs.MTU
	// Lookup returns the QP with a number, or nil.
	Lookup func(qpn uint32) *QP
	// RxeRetryCompat makes retry_cnt 7 retry forever, as rxe does; the
	// spec's 7 is seven retries.
	RxeRetryCompat bool
	// UDOversizeError completes a UD send longer than the port MTU with
	// IBV_WC_LOC_LEN_ERR (moving the QP to SQE). By default it completes
	// successfully without sending anything, as IBTA C10-93.1.1 requires
	// and rxe does.
	UDOversizeError bool
	// BusyPoll: the application's polls drive the transport (Progress),
	// and a lone request is sent from the goroutine that posts it.
	BusyPoll bool
	// Trace, if set, is called for every packet sent and received (for the
	// demo's packet ladder and pcap writing). It runs on engine goroutines.
	Trace func(dir Direction, p *link.Packet)
}

// Direction says whether a traced packet was sent or received.
type Direction uint8

// Directions.
const (
	Sent Direction = iota
	Received
)

// DropCounter names why the engine dropped a received packet. Every
// dropped packet increments exactly one counter.
type DropCounter uint8

// Engine drop reasons (wire's parse reasons are counted separately, by
// wire.DropReason).
const (
	DropUnknownQP DropCounter = iota
	DropQPState
	DropAddress
	DropPKey
	DropQKey
	DropTransportMismatch
	DropUDNoReceive
	DropUDTooLong
	DropUCOutOfSequence
	DropUCNoReceive
	DropStaleResponse
	DropDuplicate
	DropOutOfSequence
	DropRNR
	numDropCounters
)

var dropCounterNames = [...]string{
	"unknown destination QP", "QP state does not accept the packet", "source address is not the QP's peer",
	"P_Key mismatch", "Q_Key mismatch", "opcode of another transport", "UD: no receive WQE",
	"UD: message longer than the receive buffer", "UC: out of sequence", "UC: no receive WQE",
	"stale or unexpected response", "duplicate request", "out-of-sequence request (NAKed)",
	"no receive WQE (RNR NAKed)",
}

// String names the counter.
func (d DropCounter) String() string { return dropCounterNames[d] }

// Stats are the engine's counters.
type Stats struct {
	RxPackets, TxPackets uint64
	// ParseDrops counts packets the codec rejected, by wire.DropReason.
	ParseDrops [wire.NumDropReasons]uint64
	// Drops counts packets the transport dropped, by DropCounter.
	Drops [numDropCounters]uint64
	// Transport events.
	Retransmits, RetryTimeouts, RNRNAKsSent, RNRNAKsReceived   uint64
	SeqNAKsSent, SeqNAKsReceived, AcksSent, DuplicatesAnswered uint64
}

// DropNames returns the non-zero drop counters by name.
func (s Stats) DropNames() map[string]uint64 {
	m := map[string]uint64{}
	for i, v := range s.ParseDrops {
		if v != 0 && i != int(wire.DropNone) {
			m["parse: "+wire.DropReason(i).String()] = v
		}
	}
	for i, v := range s.Drops {
		if v != 0 {
			m[DropCounter(i).String()] = v
		}
	}
	return m
}

type counters struct {
	rx, tx                                  atomic.Uint64
	parse                                   [wire.NumDropReasons]atomic.Uint64
	drops                                   [numDropCounters]atomic.Uint64
	retransmits, retryTimeouts, rnrSent     atomic.Uint64
	rnrRecv, seqSent, seqRecv, acks, dupAns atomic.Uint64
}

// Engine is a device's transport.
type Engine struct {
	cfg     EngineConfig
	workers []*worker
	c       counters
	pool    sync.Pool // *rxBuf
	// poller is the link when it can be read without waiting (busy
	// polling, Progress); nil otherwise.
	poller link.Poller
	// rxMu serialises reading the link and handing the packets to the
	// workers (the receive goroutine, busy pollers), so that each QP's
	// packets reach its worker in arrival order. It guards rx.
	rxMu    sync.Mutex
	rx      rxBatch
	rxErr   error       // the link error that ended a WaitReadable
	readyFn func() bool // e.ready, made once
	done    chan struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool
}

// rxBuf is a received packet: its buffer and its parsed views.
type rxBuf struct {
	b [link.MaxPacketSize]byte
	p wire.Packet
}

type eventKind uint8

const (
	evPacket eventKind = iota
	evKick             // work was posted or a window opened
	evTimer            // a QP timer fired
	evSync             // close done once everything queued before was sent
)

type event struct {
	kind eventKind
	q    *QP
	rx   *rxBuf
	done chan struct{} // evSync
}

// How a worker's turn is run: by its own goroutine, or inline by the
// goroutine that queued the events (see the package threading note).
type turnMode uint8

const (
	turnWake   turnMode = iota // wake the worker's goroutine
	turnInline                 // run the turn here if nobody is running one
	// turnPoll is turnInline for packets a busy poller read: the ACKs
	// of receives the turn delivered are left for the application's next
	// post or poll (see Progress).
	turnPoll
)

// worker owns a share of the QPs and runs their protocol work: it alone
// handles their events and uses its transmit batch, so each QP's packets
// leave in the order they were built.
type worker struct {
	e      *Engine
	mu     sync.Mutex
	queue  []event // protected by mu
	notify chan struct{}
	// running: a goroutine is running this worker's turn; it handles
	// everything queued before it ends. Protected by mu.
	running bool

	// The rest belongs to the goroutine running the turn.
	spare      []event
	tx         []link.Packet
	txBytes    int // bytes queued in tx
	txBufs     [][]byte
	dirty      []*QP // QPs with a pending ACK or requester work after the batch
	dirtySpare []*QP
	// delivered: this batch completed a receive, so an application may
	// be about to answer it (see turn).
	delivered bool
	syncs     []chan struct{} // evSync events to close after the next flush
	// inline: the turn is run by the goroutine that queued its events;
	// inlineBytes counts the requester bytes it built.
	inline      bool
	inlineBytes int
}

// rxBatch is the receive side's reused state: the packets of one read
// and their per-worker events.
type rxBatch struct {
	pkts      []link.Packet
	bufs      []*rxBuf
	perWorker [][]event
	// used: pkts[:used] were resliced or handed on by the last read;
	// the others still hold their whole buffers.
	used int
}

// A transmit batch is flushed when it holds txBatch packets or
// txBatchBytes bytes, whichever comes first. Small packets want large
// batches (one system call for many); large ones want the receiver to
// start early: 64 packets of 4 KiB are half the 128-PSN window, which the
// peer would see only after the whole quarter megabyte went through the
// kernel, while the requester, its window soon full, waits for ACKs.
const (
	txBatch      = 64
	txBatchBytes = 64 << 10
)

// NewEngine starts the engine's workers and receive goroutine.
func NewEngine(cfg EngineConfig) *Engine {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.PeerPort == 0 {
		cfg.PeerPort = wire.RoCEv2Port
	}
	if !cfg.ActiveMTU.Valid() {
		cfg.ActiveMTU = verbs.MTU1024
	}
	e := &Engine{cfg: cfg, done: make(chan struct{})}
	e.poller, _ = cfg.Link.(link.Poller)
	e.readyFn = e.ready
	e.pool.New = func() any { return new(rxBuf) }
	for range cfg.Workers {
		w := &worker{e: e, notify: make(chan struct{}, 1)}
		w.txBufs = make([][]byte, txBatch)
		for i := range w.txBufs {
			w.txBufs[i] = make([]byte, link.MaxPacketSize)
		}
		e.workers = append(e.workers, w)
		e.wg.Add(1)
		go w.run()
	}
	const batch = 32
	e.rx = rxBatch{pkts: make([]link.Packet, batch), bufs: make([]*rxBuf, batch), perWorker: make([][]event, len(e.workers)), used: batch}
	for i := range e.rx.perWorker {
		e.rx.perWorker[i] = make([]event, 0, batch)
	}
	e.wg.Add(1)
	go e.receive()
	return e
}

// Close stops the engine's goroutines. It closes the link, after the
// workers have sent what they owe: the ACK of a message whose completion
// the application already polled must not die with the device (rxe's
// destroy waits for its responder in the same way).
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	for _, w := range e.workers {
		done := make(chan struct{})
		w.submit([]event{{kind: evSync, done: done}}, turnWake)
		<-done
	}
	err := e.cfg.Link.Close()
	close(e.done)
	e.wg.Wait()
	return err
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	var s Stats
	s.RxPackets, s.TxPackets = e.c.rx.Load(), e.c.tx.Load()
	for i := range s.ParseDrops {
		s.ParseDrops[i] = e.c.parse[i].Load()
	}
	for i := range s.Drops {
		s.Drops[i] = e.c.drops[i].Load()
	}
	s.Retransmits, s.RetryTimeouts = e.c.retransmits.Load(), e.c.retryTimeouts.Load()
	s.RNRNAKsSent, s.RNRNAKsReceived = e.c.rnrSent.Load(), e.c.rnrRecv.Load()
	s.SeqNAKsSent, s.SeqNAKsReceived = e.c.seqSent.Load(), e.c.seqRecv.Load()
	s.AcksSent, s.DuplicatesAnswered = e.c.acks.Load(), e.c.dupAns.Load()
	return s
}

func (e *Engine) drop(d DropCounter) { e.c.drops[d].Add(1) }

func (e *Engine) workerOf(q *QP) *worker { return e.workers[int(q.num)%len(e.workers)] }

// post queues an event for the QP's worker and wakes the worker's
// goroutine.
func (e *Engine) post(ev event) { e.workerOf(ev.q).submit([]event{ev}, turnWake) }

func (w *worker) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// submit queues events for w. If a turn is running, it will handle
// them. Otherwise mode says who runs the turn: w's goroutine, woken, or
// (turnInline) the caller, before submit returns.
func (w *worker) submit(evs []event, mode turnMode) {
	w.mu.Lock()
	w.queue = append(w.queue, evs...)
	if mode == turnWake {
		running := w.running
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
	w.mu.Lock()
	if !w.running && len(w.queue) == 0 && len(w.dirty) == 0 {
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
	w.mu.Unlock()
	w.turn(mode)
	return true
}

// kick tells the QP's worker that the requester may have work; the
// worker's goroutine runs it. Used where the caller may hold locks.
func (e *Engine) kick(q *QP) { e.post(event{kind: evKick, q: q}) }

// ring is the doorbell of PostSend for a request the send queue held
// alone: with busy polling, the requester runs in the caller's goroutine
// unless the worker is busy (see the threading note). The caller holds
// no lock.
func (e *Engine) ring(q *QP) {
	mode := turnWake
	if e.cfg.BusyPoll {
		mode = turnInline
	}
	var ev [1]event
	ev[0] = event{kind: evKick, q: q}
	e.workerOf(q).submit(ev[:], mode)
}

// receive reads packets from the link and dispatches them.
func (e *Engine) receive() {
	defer e.wg.Done()
	for {
		var err error
		if e.poller != nil {
			if err = e.poller.WaitReadable(e.readyFn); err == nil {
				err, e.rxErr = e.rxErr, nil
			}
		} else {
			// A link that cannot be polled is read only here, so the
			// lock is never contended while Recv waits.
			e.rxMu.Lock()
			_, err = e.readLocked(false, turnWake)
			e.rxMu.Unlock()
		}
		if err != nil && (errors.Is(err, net.ErrClosed) || e.closed.Load()) {
			return
		}
	}
}

// ready is the receive goroutine's WaitReadable callback: it reads and
// dispatches what is queued, and asks to wait again (false) unless the
// link failed. Busy pollers read the same link under the same lock.
func (e *Engine) ready() bool {
	e.rxMu.Lock()
	defer e.rxMu.Unlock()
	for {
		n, err := e.readLocked(true, turnWake)
		if err != nil {
			e.rxErr = err
			return true
		}
		if n < len(e.rx.pkts) {
			return false // drained: the next datagram calls again
		}
	}
}

// readLocked reads a batch from the link (try: without waiting), parses
// it and hands each worker its share at once. The receive goroutine
// does not run protocol work itself (turnWake): on two cores, receiving
// while a worker transmits is what carries a stream (measured: running
// it inline cost a quarter of RC WRITE throughput). A busy poller does
// (turnPoll).
//
// Preconditions: e.rxMu is held.
func (e *Engine) readLocked(try bool, mode turnMode) (int, error) {
	b := &e.rx
	for i := range b.pkts[:b.used] {
		if b.bufs[i] == nil {
			b.bufs[i] = e.pool.Get().(*rxBuf)
		}
		b.pkts[i].Buf = b.bufs[i].b[:]
	}
	b.used = len(b.pkts) // until the read says how many it filled
	var n int
	var err error
	if try {
		n, err = e.poller.TryRecv(b.pkts)
	} else {
		n, err = e.cfg.Link.Recv(b.pkts)
	}
	if err != nil || n == 0 {
		if err == nil {
			b.used = 0
		}
		return 0, err
	}
	b.used = n
	for i := range n {
		if q := e.dispatch(&b.pkts[i], b.bufs[i]); q != nil {
			wi := int(q.num) % len(e.workers)
			b.perWorker[wi] = append(b.perWorker[wi], event{kind: evPacket, q: q, rx: b.bufs[i]})
			b.bufs[i] = nil // handed to a worker
		}
	}
	for wi, evs := range b.perWorker {
		if len(evs) > 0 {
			e.workers[wi].submit(evs, mode)
			clear(evs)
			b.perWorker[wi] = evs[:0]
		}
	}
	return n, nil
}

// Progress drives the transport from the calling goroutine, for an
// application that polls its completion queues (EngineConfig.BusyPoll;
// otherwise it does nothing): it reads
// what the link has queued and handles it here, without waking a
// goroutine, and when nothing arrived it sends what earlier calls left
// owed. It reports whether it did anything. It does nothing when the
// link cannot be polled, or another goroutine is reading it.
//
// The ACKs of receives it delivers are left for the application's next
// call, at most one: an answer posted at once leaves with them in one
// datagram, and otherwise the next poll (or the worker's goroutine,
// woken as a backstop) sends them.
func (e *Engine) Progress() bool {
	if !e.cfg.BusyPoll || e.poller == nil || e.closed.Load() || !e.rxMu.TryLock() {
		return false
	}
	n, _ := e.readLocked(true, turnPoll)
	e.rxMu.Unlock()
	if n > 0 {
		return true
	}
	did := false
	for _, w := range e.workers {
		if w.runOwed() {
			did = true
		}
	}
	return did
}

// dispatch parses one packet and returns the QP it is for, or nil when
// it was dropped (and counted).
func (e *Engine) dispatch(lp *link.Packet, rb *rxBuf) *QP {
	e.c.rx.Add(1)
	n := lp.Net
	n.DontFragment = true
	if r := wire.ParseDatagram(lp.Buf, &n, &rb.p); r != wire.DropNone {
		e.c.parse[r].Add(1)
		return nil
	}
	if e.cfg.Trace != nil {
		lp.Net.ID = rb.p.Net.ID // as recovered by the ICRC check, so a pcap verifies
		e.cfg.Trace(Received, lp)
	}
	q := e.cfg.Lookup(rb.p.BTH.DestQP())
	if q == nil {
		e.drop(DropUnknownQP)
	}
	return q
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

// turn handles the worker's events until none are left, then ends the
// turn (w.running = false). A turn not run by the worker's goroutine
// hands the rest to it once it has built txBatchBytes of requester
// packets; a busy poller's turn also hands over the ACKs of the receives
// it delivered (see Progress), unless an earlier one already left some.
//
// Preconditions: the caller set w.running.
func (w *worker) turn(mode turnMode) {
	inline := mode != turnWake
	w.inline, w.inlineBytes = inline, 0
	yielded := mode == turnPoll // the application is this goroutine
	deferAcks := mode == turnPoll && len(w.dirty) == 0
	for {
		// Swap the queue with the spare array: posters append to one
		// while the turn handles the other, and neither is ever
		// dropped, so steady state allocates nothing.
		w.mu.Lock()
		batch := w.queue
		if len(batch) == 0 && len(w.dirty) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.queue = w.spare[:0]
		w.mu.Unlock()
		for i := range batch {
			w.handle(&batch[i])
			batch[i] = event{}
		}
		w.spare = batch[:0]
		if w.delivered && !yielded && len(w.dirty) > 0 {
			// A receive just completed and ACKs are about to leave.
			// The application woken by the completion runs next on
			// this P; if it answers (a send on the same QP, as
			// request-response traffic does), its doorbell joins
			// this turn and its packets join the ACKs in one
			// transmit batch: one system call instead of two, on
			// both sides. The ACKs wait for at most one scheduling
			// round.
			yielded = true
			w.delivered = false
			runtime.Gosched()
			continue
		}
		if deferAcks && w.delivered && len(w.dirty) > 0 && len(w.syncs) == 0 {
			w.delivered = false
			w.handOff()
			return
		}
		w.delivered = false
		w.finishBatch()
		w.closeSyncs()
		if inline && w.inlineBytes >= txBatchBytes && len(w.dirty) > 0 {
			// Enough for a goroutine that has work of its own: the
			// worker's goroutine sends the rest.
			w.handOff()
			return
		}
	}
}

// handOff ends the turn with work left (w.dirty) for whoever runs the
// next one, and wakes the worker's goroutine so that somebody does.
func (w *worker) handOff() {
	w.mu.Lock()
	w.running = false
	w.mu.Unlock()
	w.wake()
}

// closeSyncs releases the evSync waiters: what was queued before them has
// been handled and sent.
func (w *worker) closeSyncs() {
	for i, c := range w.syncs {
		close(c)
		w.syncs[i] = nil
	}
	w.syncs = w.syncs[:0]
}

func (w *worker) handle(ev *event) {
	q := ev.q
	if ev.kind == evSync {
		w.syncs = append(w.syncs, ev.done)
		return
	}
	q.mu.Lock()
	switch ev.kind {
	case evPacket:
		q.handlePacketLocked(w, &ev.rx.p)
		w.e.pool.Put(ev.rx)
	case evKick:
		w.markDirty(q)
	case evTimer:
		q.handleTimerLocked(w)
	}
	q.mu.Unlock()
}

func (w *worker) markDirty(q *QP) {
	if !q.eng.dirty {
		q.eng.dirty = true
		w.dirty = append(w.dirty, q)
	}
}

// finishBatch runs the requesters of the QPs that may send, sends the
// coalesced ACKs, and flushes the transmit batch.
//
// A QP's requester packets go before its ACK: the two belong to
// independent streams (the ACK answers the peer's requests), and with
// UDP GSO a run of equal-length packets may end with a shorter one, so a
// request followed by the ACK leaves as one super-packet that crosses the
// kernel once (request-response traffic: the answer and the ACK of the
// question it answers, see run).
//
// A requester stopped by an inline turn's budget marks its QP dirty
// again, so it is on w.dirty when finishBatch returns.
func (w *worker) finishBatch() {
	list := w.dirty
	w.dirty = w.dirtySpare[:0]
	for i, q := range list {
		q.mu.Lock()
		q.eng.dirty = false
		q.runRequesterLocked(w)
		q.flushAckLocked(w)
		q.mu.Unlock()
		list[i] = nil
	}
	w.dirtySpare = list[:0]
	w.flush()
}

// requesterBudgetLeft reports whether the requester may build another
// packet in this turn: always in the worker's goroutine, up to
// txBatchBytes in an inline turn.
func (w *worker) requesterBudgetLeft() bool {
	return !w.inline || w.inlineBytes < txBatchBytes
}

// txSlot returns a buffer for the next packet, flushing a full batch.
func (w *worker) txSlot() []byte {
	if len(w.tx) == txBatch || w.txBytes >= txBatchBytes {
		w.flush()
	}
	return w.txBufs[len(w.tx)]
}

// queueTx queues the packet built in txSlot's buffer (n bytes) for net.
func (w *worker) queueTx(n int, dst *wire.Net) {
	b := w.txBufs[len(w.tx)][:n]
	w.tx = append(w.tx, link.Packet{Buf: b, Net: *dst})
	w.txBytes += n
}

// flush sends the queued packets.
func (w *worker) flush() {
	if len(w.tx) == 0 {
		return
	}
	if w.e.cfg.Trace != nil {
		for i := range w.tx {
			w.e.cfg.Trace(Sent, &w.tx[i])
		}
	}
	w.e.c.tx.Add(uint64(len(w.tx)))
	_ = w.e.cfg.Link.Send(w.tx)
	w.tx = w.tx[:0]
	w.txBytes = 0
}

// netFor returns the IP/UDP fields for packets to a peer address.
func (e *Engine) netFor(dst netip.Addr) wire.Net {
	n := e.cfg.Local
	n.Dst = dst
	n.DstPort = e.cfg.PeerPort
	n.DontFragment = true
	n.ID = 0
	if n.HopLimit == 0 {
		n.HopLimit = 64
	}
	return n
}

// timeoutDuration is the transport timer: 4.096 us * 2^timeout (IBTA
// 9.7.6.1.3); 0 means no timer.
func timeoutDuration(timeout uint8) time.Duration {
	if timeout == 0 {
		return 0
	}
	return time.Duration(4096*(uint64(1)<<timeout)) * time.Nanosecond
}
