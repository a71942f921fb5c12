package transport

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// Config describes the transport of a device.
type Config struct {
	Link  link.Link
	Clock clock.Clock // default clock.Real{}
	// Mem is the device's registered memory.
	Mem Memory
	// Workers is the size of the worker pool; default 2.
	Workers int
	// QueueLen is how many received packets each worker holds waiting
	// for its turn; more are dropped (DropQueueFull). Default 1024.
	QueueLen int
	// Buffers is how many receive buffers the engine has; when all are
	// waiting in queues, new packets are dropped (DropNoBuffer).
	// Default Workers*QueueLen plus one receive batch.
	Buffers int
	// BusyPoll: the application's polls drive the transport (Progress),
	// and a lone request is sent from the goroutine that posts it.
	BusyPoll bool
	// CC configures congestion control (windows, DCQCN rates, the
	// device window); the zero value takes the defaults.
	CC CCConfig
	// Trace, if set, is called for every packet sent and received (for
	// the demo's packet ladder and pcap writing). It runs on engine
	// goroutines and must not call back into the device.
	Trace func(dir Direction, p *link.Packet)
}

// Direction says whether a traced packet was sent or received.
type Direction uint8

// Directions.
const (
	Sent Direction = iota
	Received
)

// Endpoint is one QP as the scheduler drives it. The qp package's QP
// implements it: each method takes the QP's lock, calls the protocol
// (QP.Receive, Run, Timer) with t.Env(), applies what the protocol asks
// of the QP, and returns what the scheduler needs to know.
type Endpoint interface {
	Receive(t *Turn, p *wire.Packet) Result
	Run(t *Turn) Result
	Timer(t *Turn) Result
}

// Result is what an Endpoint call tells the scheduler.
type Result struct {
	// Run: call Run before the batch is sent. More: Run stopped at its
	// budget; call it again after the others.
	Run, More bool
	// Delivered: a receive completed.
	Delivered bool
	// Held: Receive could not take the packet yet; the scheduler keeps
	// it, in order with the QP's later requests, and offers it again
	// after Run. A Result that holds a packet must not ask for Run only
	// to hold it again (the worker would offer it forever): Run's own
	// progress (More) is what releases it.
	Held bool
	// DeviceWait: Run stopped at the device window; the scheduler runs
	// the QP again when the device has room (Effects.DeviceWait).
	DeviceWait bool
	// Deadline: when Timer should be called; zero for never.
	Deadline time.Time
}

// FromEffects turns what the protocol reported into a Result.
func FromEffects(fx Effects, deadline time.Time) Result {
	return Result{Run: fx.Run, More: fx.More, Delivered: fx.Delivered, Held: fx.Held, DeviceWait: fx.DeviceWait, Deadline: deadline}
}

// Engine is a device's transport scheduler: it reads the link, hands
// each packet to the worker that owns its QP, runs the QPs' protocol on
// the workers, and sends what they build.
type Engine struct {
	cfg     Config
	workers []*worker
	c       Counters
	cc      *Congestion
	table   qpTable
	pool    bufPool
	// poller is the link when it can be read without waiting (busy
	// polling, Progress); nil otherwise.
	poller link.Poller
	// bulk is the link when it coalesces datagrams (UDP GRO): it is read
	// into chunks, and the packets in them are handed to the workers as
	// views, not copied (see readBulkLocked); nil otherwise.
	bulk link.BulkReceiver
	// checked is set when the link checks every packet's ICRC over the
	// headers it arrived with (a link.Interface): dispatch then takes the
	// IP fields as they came and checks only the InfiniBand headers,
	// instead of recovering the IPv4 ID (wire.ParseDatagram).
	checked bool
	// rxMu serialises reading the link and handing the packets to the
	// workers (the receive goroutine, busy pollers), so that each QP's
	// packets reach its worker in arrival order. It guards rx and
	// rxErr.
	rxMu  sync.Mutex
	rx    rxBatch
	rxErr error
	// rxMissed: with busy polling, the receive goroutine found rxMu held
	// when the link said packets arrived, and left them to the holder
	// (a busy poller), which reads again when it lets go (Progress).
	rxMissed atomic.Bool
	// rxStashed is len(rx.stash), for Stats-like reads from other
	// goroutines (tests account for every buffer).
	rxStashed atomic.Int32
	readyFn   func() bool // e.ready, made once
	done      chan struct{}
	wg        sync.WaitGroup
	closed    atomic.Bool
}

// rxBuf is a received packet: its buffer and its parsed views. The
// packet's bytes are in b, or, when chunk is set, in the chunk.
type rxBuf struct {
	b     [link.MaxPacketSize]byte
	p     wire.Packet
	chunk *rxChunk
}

// rxChunk is a buffer a coalesced datagram is read into (Engine.bulk); the
// rxBufs of its packets point into it, each holding a reference.
type rxChunk struct {
	b [link.BulkBufSize]byte
	// refs counts the rxBufs that point into b; the chunk returns to the
	// pool when the last of them does.
	refs atomic.Int32
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
	// runBudget is what one Run may build before the other QPs of the
	// worker get their turn (round robin).
	runBudget = 64 << 10
	// holdLen bounds the requests one QP keeps waiting behind a READ
	// response: a requester's window is 128 PSNs.
	holdLen = 128
	// rxBatchLen is how many packets one read of the link takes.
	rxBatchLen = 32
	// rxBulkLen is how many datagrams one read of a BulkReceiver takes,
	// and bulkChunks how many more chunks the engine has for the
	// packets that wait in the workers' queues.
	rxBulkLen  = 16
	bulkChunks = 64
	// bulkCopyMax: the packets of a datagram whose first packet (its
	// segment size) has at most this many bytes are copied out of the
	// chunk (ACKs, small SENDs): a copy that small costs less than a
	// chunk's bookkeeping, and the chunk does not wait with them.
	bulkCopyMax = 1024
)

// NewEngine starts the engine's workers and receive goroutine.
func NewEngine(cfg Config) *Engine {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 1024
	}
	if cfg.Buffers <= 0 {
		cfg.Buffers = cfg.Workers*cfg.QueueLen + rxBatchLen
	}
	e := &Engine{cfg: cfg, done: make(chan struct{}), cc: newCongestion(cfg.CC, cfg.Workers)}
	e.poller, _ = cfg.Link.(link.Poller)
	if b, ok := cfg.Link.(link.BulkReceiver); ok && b.Coalesces() {
		e.bulk = b
	}
	_, e.checked = cfg.Link.(link.Interface)
	e.readyFn = e.ready
	e.pool.init(cfg.Buffers)
	for range cfg.Workers {
		w := newWorker(e, len(e.workers), cfg.QueueLen)
		e.workers = append(e.workers, w)
		e.wg.Add(1)
		go w.run()
	}
	e.rx = rxBatch{pkts: make([]link.Packet, rxBatchLen), bufs: make([]*rxBuf, rxBatchLen),
		perWorker: make([][]pktEvent, len(e.workers)), used: rxBatchLen, stash: make([]*rxBuf, 0, rxBatchLen)}
	for i := range e.rx.perWorker {
		e.rx.perWorker[i] = make([]pktEvent, 0, rxBatchLen)
	}
	for i := range e.rx.bufs {
		e.rx.bufs[i] = new(rxBuf) // the batch's own buffers, outside the pool
	}
	if e.bulk != nil {
		e.pool.initChunks(bulkChunks)
		b := &e.rx
		b.chunks = make([]*rxChunk, rxBulkLen)
		b.chunkBufs = make([][]byte, rxBulkLen)
		for i := range b.chunks {
			b.chunks[i] = new(rxChunk) // the batch's own, outside the pool
			b.chunkBufs[i] = b.chunks[i].b[:]
		}
		b.bpkts = make([]link.Packet, rxBulkLen*link.MaxBulkSegments)
		b.in = make([]int, len(b.bpkts))
		for i := range b.perWorker {
			b.perWorker[i] = make([]pktEvent, 0, len(b.bpkts))
		}
	}
	e.wg.Add(1)
	go e.receive()
	return e
}

// Attach makes the scheduler deliver the packets for QP number qpn to ep,
// and returns the handle through which the QP rings its doorbell and
// leaves. A number may be attached once at a time.
func (e *Engine) Attach(qpn uint32, ep Endpoint) *Handle {
	h := &Handle{e: e, w: e.workers[int(qpn)%len(e.workers)], ep: ep, qpn: qpn}
	e.table.store(qpn, h)
	return h
}

// Quiesce waits until every worker turn that was running when it was
// called has ended. Memory the transport may touch only during turns
// (registered regions, a QP's queues) is no longer touched once a change
// made before Quiesce is visible and Quiesce returns: a deregistered
// region's lookups fail from the change on, and lookups made before it
// have finished with their bytes. The caller must not hold a lock a turn
// takes (a QP's, a CQ's).
func (e *Engine) Quiesce() {
	for _, w := range e.workers {
		w.guard.Lock()
		//nolint:staticcheck // an empty critical section: waiting is the point
		w.guard.Unlock()
	}
}

// Sync waits until every worker has handled and sent what was queued for
// it when Sync was called: the packets received, the work posted, the
// acknowledgements owed.
func (e *Engine) Sync() {
	for _, w := range e.workers {
		w.sync()
	}
}

// Close stops the engine's goroutines. It closes the link after the
// workers have sent what they owe (Sync): the ACK of a message whose
// completion the application already polled must not die with the
// device (rxe's destroy waits for its responder in the same way).
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	e.Sync()
	err := e.cfg.Link.Close()
	close(e.done)
	e.wg.Wait()
	e.stopTimers()
	return err
}

// Closed reports whether Close was called.
func (e *Engine) Closed() bool { return e.closed.Load() }

// stopTimers stops the timers of the QPs still attached and the workers'
// device-window backstops: a pending timer keeps its callback, and with
// it the engine's buffers and chunks (megabytes), reachable until it
// fires, and a QP's transport timer may be hours away. Each worker's
// guard is taken for writing, as Detach takes it, since the timers belong
// to the turns.
func (e *Engine) stopTimers() {
	for _, w := range e.workers {
		w.guard.Lock()
		if w.devTimer != nil {
			w.devTimer.Stop()
		}
		w.guard.Unlock()
	}
	e.table.each(func(h *Handle) {
		h.w.guard.Lock()
		if h.timer != nil {
			h.timer.Stop()
		}
		h.w.guard.Unlock()
	})
}

// Stats returns a snapshot of the counters, the link's included.
func (e *Engine) Stats() Stats {
	s := e.c.Snapshot()
	s.Link = e.cfg.Link.Stats()
	return s
}

// Congestion returns the device's congestion state (its configuration
// and the packets in flight in the device window).
func (e *Engine) Congestion() *Congestion { return e.cc }

// receive reads packets from the link and dispatches them.
func (e *Engine) receive() {
	defer e.wg.Done()
	for {
		var err error
		if e.poller != nil {
			if err = e.poller.WaitReadable(e.readyFn); err == nil {
				e.rxMu.Lock()
				err, e.rxErr = e.rxErr, nil
				e.rxMu.Unlock()
			}
		} else {
			// A link that cannot be polled is read only here, so the
			// lock is never contended while Recv waits.
			e.rxMu.Lock()
			_, _, err = e.readLocked(false, turnWake)
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
//
// With busy polling, a receive goroutine that finds the lock held does
// not wait for it: the holder is a poller in the middle of a read, and
// reading after it would take from it, onto the workers' goroutines, the
// packets it is about to read on its own (an application that polls gets
// its completions on the polling goroutine). It notes rxMissed, which
// the poller looks at once it lets go of the lock (pollMissed); the note
// is made before the lock is tried, so a poller that lets go after a
// failed try always sees it.
func (e *Engine) ready() bool {
	if e.cfg.BusyPoll {
		e.rxMissed.Store(true)
		if !e.rxMu.TryLock() {
			return false
		}
		e.rxMissed.Store(false)
	} else {
		e.rxMu.Lock()
	}
	defer e.rxMu.Unlock()
	if _, err := e.drainLocked(turnWake); err != nil {
		e.rxErr = err
		return true
	}
	return false // drained: the next datagram calls again
}

// drainLocked reads the link until a read finds it no longer full (or
// fails), and reports whether it read anything.
//
// Preconditions: e.rxMu is held.
func (e *Engine) drainLocked(mode turnMode) (bool, error) {
	read := false
	for {
		n, full, err := e.readLocked(true, mode)
		read = read || n > 0
		if err != nil || !full {
			return read, err
		}
	}
}

// rxBatch is the receive side's reused state: the packets of one read,
// their buffers, and their per-worker events.
type rxBatch struct {
	pkts      []link.Packet
	bufs      []*rxBuf
	perWorker [][]pktEvent
	// used: pkts[:used] were resliced or handed on by the last read;
	// the others still hold their whole buffers.
	used int
	// stash holds free buffers taken from the pool for the next
	// hand-offs.
	stash []*rxBuf
	// A BulkReceiver's read: its chunks (chunkBufs their bytes), the
	// packets in them, and which chunk each packet is in.
	chunks    []*rxChunk
	chunkBufs [][]byte
	bpkts     []link.Packet
	in        []int
	// icrc caches the ICRC state of the flows IPv4 arrivals came on
	// lately, for checking the next (rxMu serialises it).
	icrc wire.ICRCFlows
}

// readLocked reads a batch from the link (try: without waiting), parses
// it and hands each worker its share at once. It returns how many
// packets it read, and whether the read was full (more may be queued).
// The receive goroutine does not run protocol work itself (turnWake): on
// two cores, receiving while a worker transmits is what carries a
// stream. A busy poller does (turnPoll).
//
// Preconditions: e.rxMu is held.
func (e *Engine) readLocked(try bool, mode turnMode) (int, bool, error) {
	if try && e.bulk != nil {
		return e.readBulkLocked(mode)
	}
	b := &e.rx
	for i := range b.pkts[:b.used] {
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
		return 0, false, err
	}
	b.used = n
	for i := range n {
		h := e.dispatch(&b.pkts[i], b.bufs[i])
		if h == nil {
			continue
		}
		// The packet's buffer goes to the worker; the batch takes a
		// fresh one from the pool, and without one the packet is
		// dropped.
		fresh := e.takeStashed()
		if fresh == nil {
			e.c.Drop(DropNoBuffer)
			continue
		}
		e.queue(h, b.bufs[i])
		b.bufs[i] = fresh
	}
	e.submit(mode)
	return n, n == len(b.pkts), nil
}

// readBulkLocked is readLocked on a link that coalesces datagrams: each
// datagram lands in one of the batch's chunks, and its packets go to the
// workers as views of the chunk, which the batch then replaces with a
// free one from the pool. A datagram of small packets (bulkCopyMax), or
// any datagram when the pool has no free chunk, is copied out packet by
// packet instead, and its chunk stays in the batch.
//
// Preconditions: e.rxMu is held.
func (e *Engine) readBulkLocked(mode turnMode) (int, bool, error) {
	b := &e.rx
	nb, np, err := e.bulk.TryRecvBulk(b.chunkBufs, b.bpkts, b.in)
	if err != nil || np == 0 {
		return 0, false, err
	}
	queued := 0
	for i := 0; i < np; {
		j := b.in[i]
		k := i + 1
		for k < np && b.in[k] == j {
			k++
		}
		// Packets [i, k) are in chunk j.
		c := b.chunks[j]
		var fresh *rxChunk
		if len(b.bpkts[i].Buf) > bulkCopyMax {
			fresh = e.pool.getChunk()
		}
		if fresh != nil {
			c.refs.Store(1) // the batch's, until its packets are queued
		}
		for ; i < k; i++ {
			lp := &b.bpkts[i]
			rb := e.takeStashed()
			if rb == nil {
				e.c.Rx.Add(1)
				e.c.Drop(DropNoBuffer)
				continue
			}
			if fresh == nil {
				lp.Buf = rb.b[:copy(rb.b[:], lp.Buf)]
			}
			h := e.dispatch(lp, rb)
			if h == nil {
				b.stash = append(b.stash, rb) // within its capacity: it came from there
				e.rxStashed.Store(int32(len(b.stash)))
				continue
			}
			if fresh != nil {
				rb.chunk = c
				c.refs.Add(1)
			}
			e.queue(h, rb)
			if queued++; queued == rxBatchLen {
				// The workers start on these while the rest is parsed,
				// as they would after a read of rxBatchLen packets.
				e.submit(mode)
				queued = 0
			}
		}
		if fresh != nil {
			if c.refs.Add(-1) == 0 {
				e.pool.putChunk(fresh) // nothing points into c: it stays
			} else {
				b.chunks[j], b.chunkBufs[j] = fresh, fresh.b[:]
			}
		}
	}
	e.submit(mode)
	return np, nb == len(b.chunks) || np == len(b.bpkts), nil
}

// takeStashed returns a free buffer from the batch's stash, which it
// refills from the pool a few at a time, or nil when there is none.
//
// Preconditions: e.rxMu is held.
func (e *Engine) takeStashed() *rxBuf {
	b := &e.rx
	if len(b.stash) == 0 {
		b.stash = e.pool.getN(b.stash)
		if len(b.stash) == 0 {
			return nil
		}
	}
	rb := b.stash[len(b.stash)-1]
	b.stash[len(b.stash)-1] = nil
	b.stash = b.stash[:len(b.stash)-1]
	e.rxStashed.Store(int32(len(b.stash)))
	return rb
}

// queue adds a parsed packet to its worker's share of the batch.
//
// Preconditions: e.rxMu is held.
func (e *Engine) queue(h *Handle, rb *rxBuf) {
	wi := int(h.qpn) % len(e.workers)
	e.rx.perWorker[wi] = append(e.rx.perWorker[wi], pktEvent{h: h, rx: rb})
}

// submit hands each worker its share of the batch.
//
// Preconditions: e.rxMu is held.
func (e *Engine) submit(mode turnMode) {
	b := &e.rx
	for wi, evs := range b.perWorker {
		if len(evs) > 0 {
			e.workers[wi].submitPackets(evs, mode)
			clear(evs)
			b.perWorker[wi] = evs[:0]
		}
	}
}

// Progress drives the transport from the calling goroutine, for an
// application that polls its completion queues (Config.BusyPoll;
// otherwise it does nothing): it reads what the link has queued and
// handles it here, without waking a goroutine, and when nothing arrived
// it sends what earlier calls left owed. It reports whether it did
// anything. It does nothing when the link cannot be polled, or another
// goroutine is reading it.
//
// The ACKs of receives it delivers are left for the application's next
// call, at most one: an answer posted at once leaves with them in one
// datagram, and otherwise the next poll (or the worker's goroutine,
// woken as a backstop) sends them.
func (e *Engine) Progress() bool {
	if !e.cfg.BusyPoll || e.poller == nil || e.closed.Load() || !e.rxMu.TryLock() {
		return false
	}
	n, _, _ := e.readLocked(true, turnPoll)
	e.rxMu.Unlock()
	if e.pollMissed() {
		n++
	}
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

// pollMissed reads, for a busy poller that just let go of rxMu, what the
// receive goroutine left to it meanwhile (rxMissed), until the link has
// nothing more queued; it reports whether it read anything. When the lock
// is taken again by someone else, that holder sees the note in turn.
func (e *Engine) pollMissed() bool {
	read := false
	for e.rxMissed.Load() && e.rxMu.TryLock() {
		e.rxMissed.Store(false)
		if got, _ := e.drainLocked(turnPoll); got {
			read = true
		}
		e.rxMu.Unlock()
	}
	return read
}

// dispatch parses one packet and returns the handle of the QP it is for,
// or nil when it was dropped (and counted).
//
// Preconditions: e.rxMu is held (for e.rx.icrc).
func (e *Engine) dispatch(lp *link.Packet, rb *rxBuf) *Handle {
	e.c.Rx.Add(1)
	if e.checked {
		rb.p.Net = lp.Net
		if r := wire.ParseTransport(lp.Buf, &rb.p); r != wire.DropNone {
			e.c.Parse[r].Add(1)
			return nil
		}
	} else {
		n := lp.Net
		n.DontFragment = true
		if r := wire.ParseDatagramFlow(lp.Buf, &n, &rb.p, e.rx.icrc.For(&n)); r != wire.DropNone {
			e.c.Parse[r].Add(1)
			return nil
		}
	}
	if e.cfg.Trace != nil {
		lp.Net.ID = rb.p.Net.ID // as recovered by the ICRC check, so a pcap verifies
		e.cfg.Trace(Received, lp)
	}
	h := e.table.load(rb.p.BTH.DestQP())
	if h == nil {
		e.c.Drop(DropUnknownQP)
	}
	return h
}

// bufPool is the fixed set of receive buffers that packets wait in, and
// of the chunks that coalesced datagrams wait in (Engine.bulk). A buffer
// returned to the pool gives back its reference to its chunk.
type bufPool struct {
	mu     sync.Mutex
	free   []*rxBuf   // protected by mu
	chunks []*rxChunk // free chunks; protected by mu
}

func (p *bufPool) init(n int) {
	p.free = make([]*rxBuf, n)
	for i := range p.free {
		p.free[i] = new(rxBuf)
	}
}

func (p *bufPool) initChunks(n int) {
	p.chunks = make([]*rxChunk, n)
	for i := range p.chunks {
		p.chunks[i] = new(rxChunk)
	}
}

// getChunk takes a free chunk, or returns nil.
func (p *bufPool) getChunk() *rxChunk {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.chunks)
	if n == 0 {
		return nil
	}
	c := p.chunks[n-1]
	p.chunks[n-1] = nil
	p.chunks = p.chunks[:n-1]
	return c
}

// putChunk returns a chunk nothing points into.
func (p *bufPool) putChunk(c *rxChunk) {
	p.mu.Lock()
	p.chunks = append(p.chunks, c) // never beyond its capacity: only its own chunks return
	p.mu.Unlock()
}

// unrefLocked drops b's reference to its chunk, if it has one, and
// returns the chunk to the pool when it was the last.
//
// Preconditions: p.mu is held.
func (p *bufPool) unrefLocked(b *rxBuf) {
	c := b.chunk
	if c == nil {
		return
	}
	b.chunk = nil
	if c.refs.Add(-1) == 0 {
		p.chunks = append(p.chunks, c)
	}
}

// getN moves up to cap(dst)-len(dst) free buffers to dst (one lock for
// many: the receive goroutine and the workers run on different cores).
func (p *bufPool) getN(dst []*rxBuf) []*rxBuf {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := min(cap(dst)-len(dst), len(p.free))
	from := len(p.free) - k
	dst = append(dst, p.free[from:]...)
	clear(p.free[from:])
	p.free = p.free[:from]
	return dst
}

// put returns a buffer to the pool.
func (p *bufPool) put(b *rxBuf) {
	p.mu.Lock()
	p.unrefLocked(b)
	p.free = append(p.free, b) // never beyond its capacity: only its own buffers return
	p.mu.Unlock()
}

// putN returns buffers to the pool and empties bs.
func (p *bufPool) putN(bs []*rxBuf) []*rxBuf {
	p.mu.Lock()
	for _, b := range bs {
		p.unrefLocked(b)
	}
	p.free = append(p.free, bs...)
	p.mu.Unlock()
	clear(bs)
	return bs[:0]
}

// qpTable maps QP numbers to handles: a two-level radix table over the
// 24-bit number, read without locking on every received packet; adding
// and removing a QP cost O(1).
type qpTable struct {
	mu  sync.Mutex // serialises writers
	top [1 << 12]atomic.Pointer[qpLeaf]
}

type qpLeaf [1 << 12]atomic.Pointer[Handle]

func (t *qpTable) load(qpn uint32) *Handle {
	leaf := t.top[(qpn>>12)&0xfff].Load()
	if leaf == nil {
		return nil
	}
	return leaf[qpn&0xfff].Load()
}

// each calls f for every handle in the table.
func (t *qpTable) each(f func(*Handle)) {
	for i := range t.top {
		leaf := t.top[i].Load()
		if leaf == nil {
			continue
		}
		for j := range leaf {
			if h := leaf[j].Load(); h != nil {
				f(h)
			}
		}
	}
}

func (t *qpTable) store(qpn uint32, h *Handle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	slot := &t.top[(qpn>>12)&0xfff]
	leaf := slot.Load()
	if leaf == nil {
		leaf = new(qpLeaf)
		slot.Store(leaf)
	}
	leaf[qpn&0xfff].Store(h)
}

func (t *qpTable) remove(qpn uint32, h *Handle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if leaf := t.top[(qpn>>12)&0xfff].Load(); leaf != nil {
		leaf[qpn&0xfff].CompareAndSwap(h, nil)
	}
}
