package pipe

import (
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/internal/ring"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// maxCorruptDraws bounds the redraws of an undetectable bit flip. A draw
// is undetectable with probability at most 8/128 (the masked BTH byte of
// the shortest packet) plus about 2^-16 (the IPv4 ID solve), so the bound
// is never reached in practice; past it, a transport version bit is
// flipped, which ParseTransport always rejects.
const maxCorruptDraws = 64

// minBuf is the smallest capacity of a packet copy, so that small buffers
// are reused for most control packets.
const minBuf = 256

// direction carries the packets from src to dst.
//
// A packet (its copy in buf) moves through delayed (sorted by delivery
// time), then held (the reordering window) and ready (received in order).
// Lock order: mu before the clock's own lock (Send reads the clock and
// arms the timer with mu held; clock.Fake runs callbacks without its
// lock).
type direction struct {
	src, dst *Endpoint
	clk      clock.Clock
	capacity int
	// rxNet is the Net a packet shows at dst.
	rxNet wire.Net
	// notify holds a token when dst may have something to receive.
	notify chan struct{}
	// done is closed when dst closes.
	done chan struct{}
	// fireFn is d.fire, made once so that arming the timer does not
	// allocate.
	fireFn func()
	// timerWG counts the timer's callbacks that are due (scheduled or
	// running) and have not returned.
	timerWG sync.WaitGroup

	mu sync.Mutex
	// closed is set when dst closes. Protected by mu.
	closed bool
	// rng draws the faults. Protected by mu.
	rng *rand.Rand
	// queued counts the packets in delayed, held and ready. Protected by
	// mu.
	queued int
	// delayed[dHead:] are the packets not yet arrived, by delivery time
	// (stable). Protected by mu.
	delayed []entry
	dHead   int
	// held is the reordering window, sorted by slot, then by seq
	// descending. Protected by mu.
	held []entry
	// arrivals counts the packets that arrived at dst's end. Protected by
	// mu.
	arrivals uint64
	// ready holds the packets to receive, in order; its capacity,
	// Capacity+1, bounds queued. Protected by mu.
	ready ring.Ring[pkt]
	// free holds packet buffers for reuse. Protected by mu.
	free [][]byte
	// timer delivers the delayed packets: while delayed is not empty it
	// is armed (timerOn) for timerAt, no later than the first one's
	// arrival. It is created on first use and reused. Protected by mu.
	timer   clock.Timer
	timerOn bool
	timerAt time.Time
	// scratch is ParseDatagram's output for corruption. Protected by mu.
	scratch wire.Packet
	// bn is the bottleneck (Faults.Rate). Protected by mu.
	bn bottleneck
}

// pkt is one packet copy in the pipe: its bytes (owned by the direction:
// from getBufLocked, back to putBufLocked) and the traffic class the
// receiver will see.
type pkt struct {
	buf []byte
	tc  uint8
}

// entry is a packet on its way, before it is ready.
type entry struct {
	pkt
	// at is when the packet arrives (the bottleneck's departure, then
	// Delay).
	at time.Time
	// reorder says the packet was sent with ReorderWindow > 1, and hold
	// is its hold then.
	reorder bool
	hold    uint64
	// seq numbers the packet's arrival; slot = seq + hold is when it is
	// released.
	seq, slot uint64
}

func newDirection(src, dst *Endpoint, clk clock.Clock, capacity int, seed rand.Source) *direction {
	d := &direction{
		src:      src,
		dst:      dst,
		clk:      clk,
		capacity: capacity,
		rxNet: wire.Net{
			Src:          src.addr.Src,
			SrcPort:      src.addr.SrcPort,
			Dst:          dst.addr.Src,
			DstPort:      dst.addr.SrcPort,
			DontFragment: true,
		},
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		rng:    rand.New(seed),
		ready:  ring.New[pkt](capacity + 1),
	}
	d.fireFn = d.fire
	return d
}

// signal wakes dst's Recv.
func (d *direction) signal() {
	select {
	case d.notify <- struct{}{}:
	default:
	}
}

// send runs pkts through admission and the faults f (see the package
// comment) and queues what survives.
func (d *direction) send(pkts []link.Packet, f *Faults, filter func(*link.Packet) Verdict) {
	st := &d.src.stats
	d.mu.Lock()
	var now time.Time
	if f.Delay > 0 || f.Rate > 0 {
		now = d.clk.Now()
	}
	delayed := false
	for i := range pkts {
		b, tc := pkts[i].Buf, pkts[i].Net.TrafficClass
		if d.closed || len(b) > link.MaxPacketSize || d.queued >= d.capacity {
			st.txDropped.Add(1)
			continue
		}
		st.txPackets.Add(1)
		st.txBytes.Add(uint64(len(b)))
		buf := d.getBufLocked(len(b))
		copy(buf, b)
		if filter != nil {
			p := link.Packet{Buf: buf, Net: d.rxNet}
			p.Net.TrafficClass = tc
			if filter(&p) == Drop {
				st.loss.Add(1)
				d.putBufLocked(buf)
				continue
			}
			if ect(tc) && p.Net.TrafficClass&ecnMask == ecnCE {
				st.ce.Add(1)
			}
			tc = p.Net.TrafficClass
		}
		if f.Loss > 0 && d.rng.Float64() < f.Loss {
			st.loss.Add(1)
			d.putBufLocked(buf)
			continue
		}
		if f.Corrupt > 0 && d.rng.Float64() < f.Corrupt && d.corruptLocked(buf) {
			st.corrupt.Add(1)
		}
		if f.CE > 0 && d.rng.Float64() < f.CE && markCE(&tc) {
			st.ce.Add(1)
		}
		copies, n := [2][]byte{buf}, 1
		if f.Duplicate > 0 && d.rng.Float64() < f.Duplicate {
			st.duplicate.Add(1)
			copies[1] = d.getBufLocked(len(buf))
			copy(copies[1], buf)
			n = 2
		}
		for _, buf := range copies[:n] {
			e := entry{pkt: pkt{buf: buf, tc: tc}, at: now.Add(f.Delay)}
			if f.Rate > 0 {
				depth := d.bn.depth(now)
				if f.Queue > 0 && depth >= f.Queue {
					st.queueDropped.Add(1)
					d.putBufLocked(buf)
					continue
				}
				if f.MarkCE > 0 && depth >= f.MarkCE && markCE(&e.tc) {
					st.ce.Add(1)
				}
				e.at = d.bn.admit(now, len(buf), f.Rate, d.capacity+1).Add(f.Delay)
			}
			e.reorder = f.ReorderWindow > 1
			if e.reorder {
				e.hold = uint64(d.rng.IntN(f.ReorderWindow))
			}
			d.queued++
			if e.at.After(now) {
				d.insertDelayedLocked(e)
				delayed = true
			} else {
				d.arriveLocked(e)
			}
		}
	}
	if delayed {
		d.armLocked(now)
	}
	wake := d.ready.Len() > 0 || len(d.held) > 0
	d.mu.Unlock()
	if wake {
		d.signal()
	}
}

// armLocked arms the delivery timer for the first delayed packet, unless
// it is already armed for that time or earlier.
//
// Preconditions: d.mu is held; d is not closed.
func (d *direction) armLocked(now time.Time) {
	if d.dHead == len(d.delayed) {
		return
	}
	at := d.delayed[d.dHead].at
	if d.timerOn && !at.Before(d.timerAt) {
		return
	}
	wait := at.Sub(now)
	if d.timer == nil {
		d.timerWG.Add(1)
		d.timer = d.clk.AfterFunc(wait, d.fireFn)
	} else if !d.timer.Reset(wait) {
		// The timer had fired (its callback has run or will run, and
		// counts itself): this is a new callback.
		d.timerWG.Add(1)
	}
	d.timerOn, d.timerAt = true, at
}

// fire is the delivery timer's callback: the packets whose time has come
// arrive, and the timer is armed for the next one.
func (d *direction) fire() {
	defer d.timerWG.Done()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	// This callback may be an older one than the timer's last arming: the
	// timer may be pending or not, and Reset below sorts that out.
	d.timerOn = false
	now := d.clk.Now()
	for d.dHead < len(d.delayed) && !d.delayed[d.dHead].at.After(now) {
		e := d.delayed[d.dHead]
		d.delayed[d.dHead] = entry{}
		d.dHead++
		d.arriveLocked(e)
	}
	if d.dHead == len(d.delayed) {
		d.delayed, d.dHead = d.delayed[:0], 0
	}
	d.armLocked(now)
	wake := d.ready.Len() > 0 || len(d.held) > 0
	d.mu.Unlock()
	if wake {
		d.signal()
	}
}

// insertDelayedLocked adds e to delayed after every packet due no later.
//
// Preconditions: d.mu is held.
func (d *direction) insertDelayedLocked(e entry) {
	if d.dHead > 0 && 2*d.dHead >= len(d.delayed) {
		n := copy(d.delayed, d.delayed[d.dHead:])
		clear(d.delayed[n:])
		d.delayed, d.dHead = d.delayed[:n], 0
	}
	i := len(d.delayed)
	for i > d.dHead && d.delayed[i-1].at.After(e.at) {
		i--
	}
	d.delayed = slices.Insert(d.delayed, i, e)
}

// arriveLocked takes a packet at dst's end into the reordering window and
// releases what the window lets go.
//
// Preconditions: d.mu is held.
func (d *direction) arriveLocked(e entry) {
	e.seq = d.arrivals
	d.arrivals++
	if !e.reorder {
		d.releaseLocked(len(d.held))
		d.pushReadyLocked(e.pkt)
		return
	}
	e.slot = e.seq + e.hold
	i := sort.Search(len(d.held), func(i int) bool { return d.held[i].slot >= e.slot })
	d.held = slices.Insert(d.held, i, e)
	m := sort.Search(len(d.held), func(i int) bool { return d.held[i].slot > e.seq })
	d.releaseLocked(m)
}

// releaseLocked moves the first m held packets to ready, counting those
// that overtake a packet that arrived before them (one still held after
// them).
//
// Preconditions: d.mu is held.
func (d *direction) releaseLocked(m int) {
	if m == 0 {
		return
	}
	low := uint64(math.MaxUint64)
	for _, e := range d.held[m:] {
		low = min(low, e.seq)
	}
	var overtakes uint64
	for i := m - 1; i >= 0; i-- {
		if low < d.held[i].seq {
			overtakes++
		}
		low = min(low, d.held[i].seq)
	}
	for _, e := range d.held[:m] {
		d.pushReadyLocked(e.pkt)
	}
	d.held = slices.Delete(d.held, 0, m)
	if overtakes > 0 {
		d.src.stats.reorder.Add(overtakes)
	}
}

// Preconditions: d.mu is held.
func (d *direction) pushReadyLocked(p pkt) {
	if !d.ready.Push(p) {
		panic("pipe: ready queue overflow") // queued <= Capacity+1
	}
}

// take copies up to len(pkts) ready packets into pkts, releasing the held
// packets when none is ready.
func (d *direction) take(pkts []link.Packet) (int, error) {
	st := &d.dst.stats
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, net.ErrClosed
	}
	n := 0
	for n < len(pkts) {
		if d.ready.Len() == 0 {
			if len(d.held) == 0 {
				break
			}
			d.releaseLocked(len(d.held))
		}
		r, _ := d.ready.Pop()
		d.queued--
		p := &pkts[n]
		if cap(p.Buf) < len(r.buf) {
			st.rxTruncated.Add(1)
			d.putBufLocked(r.buf)
			continue
		}
		p.Buf = append(p.Buf[:0], r.buf...)
		p.Net = d.rxNet
		p.Net.TrafficClass = r.tc
		st.rxPackets.Add(1)
		st.rxBytes.Add(uint64(len(r.buf)))
		d.putBufLocked(r.buf)
		n++
	}
	return n, nil
}

// close discards everything on its way to dst and stops the timers, then
// waits for a running timer callback.
func (d *direction) close() {
	d.mu.Lock()
	d.closed = true
	if d.timer != nil && d.timer.Stop() {
		d.timerWG.Done()
	}
	d.timerOn = false
	d.delayed, d.dHead, d.held, d.free = nil, 0, nil, nil
	d.bn = bottleneck{}
	d.ready.Reset()
	d.queued = 0
	d.mu.Unlock()
	close(d.done)
	d.timerWG.Wait()
}

// Preconditions: d.mu is held.
func (d *direction) getBufLocked(n int) []byte {
	if k := len(d.free); k > 0 {
		b := d.free[k-1]
		d.free[k-1] = nil
		d.free = d.free[:k-1]
		if cap(b) >= n {
			return b[:n]
		}
	}
	return make([]byte, n, max(n, minBuf))
}

// Preconditions: d.mu is held.
func (d *direction) putBufLocked(b []byte) {
	if !d.closed && len(d.free) <= d.capacity {
		d.free = append(d.free, b)
	}
}

// corruptLocked flips one bit of b that the receiver's ParseDatagram
// detects (any bit if b does not parse anyway) and reports whether it
// flipped one (not for an empty b).
//
// Preconditions: d.mu is held.
func (d *direction) corruptLocked(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	valid := wire.ParseDatagram(b, &d.rxNet, &d.scratch) == wire.DropNone
	for range maxCorruptDraws {
		i := d.rng.IntN(8 * len(b))
		b[i/8] ^= 1 << (i % 8)
		if !valid || wire.ParseDatagram(b, &d.rxNet, &d.scratch) != wire.DropNone {
			return true
		}
		b[i/8] ^= 1 << (i % 8)
	}
	b[1] ^= 1 // BTH TVer: a valid packet is at least a BTH and ICRC long
	return true
}
