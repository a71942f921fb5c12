package pipe

import (
	"time"

	"github.com/softhca/softhca/internal/ring"
)

// The ECN field, the low two bits of the traffic class (RFC 3168): 0b00
// Not-ECT, 0b01 ECT(1), 0b10 ECT(0), 0b11 CE.
const (
	ecnMask = 0b11
	ecnCE   = 0b11
)

// ect reports whether the traffic class tc marks an ECN-capable packet
// that is not marked CE yet: ECT(0) or ECT(1).
func ect(tc uint8) bool { return tc&ecnMask == 0b01 || tc&ecnMask == 0b10 }

// markCE marks *tc Congestion Experienced if it is ECT(0) or ECT(1) and
// reports whether it did.
func markCE(tc *uint8) bool {
	if !ect(*tc) {
		return false
	}
	*tc |= ecnCE
	return true
}

// busyPeriodBytes bounds the bytes counted in one busy period, so that
// bytes*1e9 cannot overflow; past it a new period starts at the last
// departure (rounded up to the nanosecond, once per 2^30 bytes).
const busyPeriodBytes = 1 << 30

// bottleneck is the FIFO queue of Faults.Rate: a packet departs len/Rate
// after the packet before it has departed, or after it arrives when the
// queue is empty. Its owner, a direction, guards it with its mu.
type bottleneck struct {
	// deps holds the departure times of the admitted packets, oldest
	// first; depth removes those not after now, leaving the queue. Each
	// packet in it is still on its way to the receiver (it arrives at its
	// departure plus Delay), so the direction's Capacity+1 bounds it.
	// Allocated at the first admit.
	deps ring.Ring[time.Time]
	// The busy period (the queue not empty since start): bytes admitted
	// in it, served at rate. Departures are counted from start, so that
	// the rounding to nanoseconds does not add up over many packets.
	start time.Time
	rate  int64
	bytes int64
	// last is the last admitted packet's departure.
	last time.Time
}

// depth returns the queue depth at now: the admitted packets that have
// not departed, the one being sent out included.
func (b *bottleneck) depth(now time.Time) int {
	for b.deps.Len() > 0 && !b.deps.At(0).After(now) {
		b.deps.Pop()
	}
	return b.deps.Len()
}

// admit queues a packet of n bytes arriving at now, to be served at rate
// (> 0), and returns its departure. depth(now) must have been called
// first. capacity is the most packets the queue can hold (the direction's
// Capacity+1).
func (b *bottleneck) admit(now time.Time, n int, rate int64, capacity int) time.Time {
	if b.deps.Cap() == 0 {
		b.deps = ring.New[time.Time](capacity)
	}
	if !b.last.After(now) || rate != b.rate || b.bytes >= busyPeriodBytes {
		// A new busy period: the queue is empty, the rate changed (the
		// queued packets keep their departures), or the period is long.
		b.start, b.rate, b.bytes = now, rate, 0
		if b.last.After(now) {
			b.start = b.last
		}
	}
	b.bytes += int64(n)
	total := b.bytes * int64(time.Second)
	ns := total / rate
	if ns*rate < total {
		ns++ // round up: never faster than Rate
	}
	b.last = b.start.Add(time.Duration(ns))
	if !b.deps.Push(b.last) {
		panic("pipe: bottleneck queue overflow") // bounded by Capacity+1
	}
	return b.last
}
