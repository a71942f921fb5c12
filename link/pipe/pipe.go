package pipe

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// DefaultCapacity is the number of packets queued per direction when
// Config.Capacity is 0.
const DefaultCapacity = 4096

// Config configures a pipe. The zero value is a fault-free pipe between
// 10.0.0.1:4791 (A) and 10.0.0.2:4791 (B) on the real clock.
type Config struct {
	// AddrA and AddrB are the endpoints' addresses: only Src and SrcPort
	// are used. A zero Src means 10.0.0.1 (A) or 10.0.0.2 (B); a zero
	// SrcPort means 4791. Both must be of the same IP family.
	AddrA, AddrB wire.Net
	// Faults apply to the packets of both directions until SetFaults
	// changes them.
	Faults Faults
	// Seed seeds the random faults: the same seed and the same sequence
	// of sends give the same faults.
	Seed uint64
	// Clock times Delay; nil means clock.Real{}.
	Clock clock.Clock
	// Capacity is how many packets may be on their way in one direction
	// before further sends are dropped (counted as TxDropped); 0 means
	// DefaultCapacity. A duplicate may take the queue one over. Each
	// direction allocates a ring of Capacity+1 slices at New; packet
	// copies are allocated as needed and reused.
	Capacity int
}

// Faults are the faults injected into one direction; see the package
// comment for the order they apply in. The zero value injects none.
// Probabilities outside [0, 1] act as the nearest bound.
type Faults struct {
	// Loss is the probability that a packet is dropped.
	Loss float64
	// Duplicate is the probability that a packet is delivered twice.
	Duplicate float64
	// Corrupt is the probability that one bit of a packet is flipped, a
	// bit whose flip the receiver's wire.ParseDatagram detects.
	Corrupt float64
	// CE is the probability that an ECN-capable packet (its traffic
	// class's ECN field, TrafficClass&3, is ECT(0) or ECT(1)) is marked
	// Congestion Experienced (the field set to 0b11), counted as
	// InjectedCE. Packets that are not ECN-capable, or already CE, are
	// left alone.
	CE float64
	// Rate, Queue and MarkCE model a bottleneck: a FIFO queue served at
	// Rate bytes per second, as Linux's tbf with a pfifo would. Rate 0
	// means none, and then Queue and MarkCE do nothing. The bytes are
	// the packet's, BTH through ICRC (the IP and UDP headers are not
	// counted).
	Rate int64
	// Queue is how many packets the bottleneck holds, the one being sent
	// out included: a packet that arrives when Queue packets are waiting
	// to depart is dropped, counted as QueueDropped. 0 means no limit
	// (Config.Capacity still bounds the pipe, and its drops are
	// TxDropped).
	Queue int
	// MarkCE is the queue depth at or above which an ECN-capable packet
	// arriving at the bottleneck is marked CE (InjectedCE) and queued; a
	// packet that is not ECN-capable is queued unmarked. 0 marks none.
	MarkCE int
	// ReorderWindow k > 1 lets a packet be received after up to k-1
	// packets that arrived after it (and never more); 0 and 1 keep the
	// order.
	ReorderWindow int
	// Delay is a fixed latency, timed by Config.Clock.
	Delay time.Duration
}

// normalized returns f with negative (and NaN) values zeroed.
func (f Faults) normalized() Faults {
	for _, p := range []*float64{&f.Loss, &f.Duplicate, &f.Corrupt, &f.CE} {
		if !(*p > 0) {
			*p = 0
		}
	}
	if f.ReorderWindow <= 1 {
		f.ReorderWindow = 0
	}
	f.Delay = max(f.Delay, 0)
	f.Rate = max(f.Rate, 0)
	f.Queue = max(f.Queue, 0)
	f.MarkCE = max(f.MarkCE, 0)
	return f
}

// Verdict is a filter's decision on a packet.
type Verdict uint8

const (
	// Pass lets the packet go on to the random faults.
	Pass Verdict = iota
	// Drop discards the packet, counted as InjectedLoss.
	Drop
)

// Endpoint is one end of a pipe. It implements link.Link.
type Endpoint struct {
	addr wire.Net // Src and SrcPort only
	in   *direction
	out  *direction

	closed atomic.Bool
	faults atomic.Pointer[Faults]
	filter atomic.Pointer[func(*link.Packet) Verdict]
	stats  counters
}

var _ link.Link = (*Endpoint)(nil)

// counters back link.Stats.
type counters struct {
	txPackets, txBytes, rxPackets, rxBytes, txDropped, rxTruncated atomic.Uint64
	queueDropped                                                   atomic.Uint64
	loss, duplicate, reorder, corrupt, ce                          atomic.Uint64
}

// New returns the two endpoints of a new pipe. It panics if AddrA and
// AddrB are of different IP families.
func New(cfg Config) (a, b *Endpoint) {
	addrA := endpointAddr(cfg.AddrA, netip.AddrFrom4([4]byte{10, 0, 0, 1}))
	addrB := endpointAddr(cfg.AddrB, netip.AddrFrom4([4]byte{10, 0, 0, 2}))
	if addrA.Src.Is4() != addrB.Src.Is4() {
		panic("pipe: AddrA and AddrB are of different IP families")
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	capacity := cfg.Capacity
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	a = &Endpoint{addr: addrA}
	b = &Endpoint{addr: addrB}
	f := cfg.Faults.normalized()
	a.faults.Store(&f)
	b.faults.Store(&f) // Faults values are never modified once stored
	ab := newDirection(a, b, clk, capacity, rand.NewPCG(mix(cfg.Seed^0xa0b), mix(cfg.Seed^0xa0b0)))
	ba := newDirection(b, a, clk, capacity, rand.NewPCG(mix(cfg.Seed^0xb0a), mix(cfg.Seed^0xb0a0)))
	a.out, b.in = ab, ab
	b.out, a.in = ba, ba
	return a, b
}

func endpointAddr(n wire.Net, def netip.Addr) wire.Net {
	src := n.Src.Unmap()
	if !src.IsValid() {
		src = def
	}
	port := n.SrcPort
	if port == 0 {
		port = wire.RoCEv2Port
	}
	return wire.Net{Src: src, SrcPort: port}
}

// mix is the SplitMix64 finalizer: it spreads a seed over the PCG state,
// so that nearby seeds give unrelated streams.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Send passes copies of the packets into the pipe, in order, through the
// faults of this endpoint. Packets the pipe cannot take are dropped and
// counted (TxDropped), not reported. Send returns net.ErrClosed once the
// endpoint is closed.
func (e *Endpoint) Send(pkts []link.Packet) error {
	if e.closed.Load() {
		return net.ErrClosed
	}
	var filter func(*link.Packet) Verdict
	if p := e.filter.Load(); p != nil {
		filter = *p
	}
	e.out.send(pkts, e.faults.Load(), filter)
	return nil
}

// Recv blocks until packets can be received, copies up to len(pkts) of
// them into the buffers (reslicing each Buf to the packet's length; a
// packet longer than cap(Buf) is dropped and counted as RxTruncated) and
// returns how many. It returns net.ErrClosed once the endpoint is closed.
// With len(pkts) == 0 it returns at once.
func (e *Endpoint) Recv(pkts []link.Packet) (int, error) {
	d := e.in
	for {
		n, err := d.take(pkts)
		if n > 0 || err != nil || len(pkts) == 0 {
			return n, err
		}
		select {
		case <-d.notify:
		case <-d.done:
		}
	}
}

// TryRecv is Recv without blocking: it returns 0, nil when no packet can
// be received now. Like Recv, it releases the packets held for reordering
// when none is ready.
func (e *Endpoint) TryRecv(pkts []link.Packet) (int, error) {
	return e.in.take(pkts)
}

// Queued returns how many packets are on their way to e: delayed, held
// for reordering or ready to be received.
func (e *Endpoint) Queued() int {
	d := e.in
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queued
}

// LocalAddr returns the endpoint's address and port in Src and SrcPort.
func (e *Endpoint) LocalAddr() (wire.Net, error) { return e.addr, nil }

// Stats returns the endpoint's counters. The Tx and Injected counters are
// about the packets e sent: TxPackets and TxBytes count the packets
// admitted into the pipe, TxDropped those refused (peer closed, too long,
// Capacity reached), InjectedLoss those the filter or Loss dropped,
// QueueDropped those the bottleneck's full Queue dropped. The Rx counters
// are about the packets e received. Packets discarded because e closed are
// not counted. Once everything sent from e has been received, the peer's
// RxPackets + RxTruncated equals
// TxPackets - InjectedLoss + InjectedDuplicate - QueueDropped.
func (e *Endpoint) Stats() link.Stats {
	c := &e.stats
	return link.Stats{
		TxPackets:         c.txPackets.Load(),
		TxBytes:           c.txBytes.Load(),
		RxPackets:         c.rxPackets.Load(),
		RxBytes:           c.rxBytes.Load(),
		TxDropped:         c.txDropped.Load(),
		RxTruncated:       c.rxTruncated.Load(),
		InjectedLoss:      c.loss.Load(),
		InjectedDuplicate: c.duplicate.Load(),
		InjectedReorder:   c.reorder.Load(),
		InjectedCorrupt:   c.corrupt.Load(),
		QueueDropped:      c.queueDropped.Load(),
		InjectedCE:        c.ce.Load(),
	}
}

// SetFaults sets the faults for the packets e sends from now on. Packets
// already in the pipe keep the faults they were sent with.
func (e *Endpoint) SetFaults(f Faults) {
	f = f.normalized()
	e.faults.Store(&f)
}

// Faults returns the faults in force for the packets e sends.
func (e *Endpoint) Faults() Faults { return *e.faults.Load() }

// SetFilter installs f to judge every packet e sends from now on, after
// admission and before the random faults; nil removes it. f sees the
// pipe's copy of the packet with Net as the receiver will see it, and may
// change the bytes of p.Buf (not its length) and p.Net.TrafficClass (to
// mark the packet CE, say: changing an ECN-capable packet to CE counts as
// InjectedCE; the other fields of p.Net are ignored), but must not keep
// p. It runs
// with the direction's lock held, so it must not call Send, Recv,
// TryRecv, Queued or Close of either endpoint; Stats, SetFaults and
// SetFilter are fine.
func (e *Endpoint) SetFilter(f func(p *link.Packet) Verdict) {
	if f == nil {
		e.filter.Store(nil)
		return
	}
	e.filter.Store(&f)
}

// Close closes the endpoint: see the package comment. It wakes a blocked
// Recv, discards the packets on their way to e, stops their timer and
// waits for a timer callback that is running. Close is idempotent.
func (e *Endpoint) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	e.in.close()
	return nil
}
