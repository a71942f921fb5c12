package transport

import (
	"time"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Emitter takes the packets a protocol call builds. The scheduler's
// transmit batch implements it; unit tests collect the packets.
type Emitter interface {
	// Buffer returns the buffer for the next packet, with room for
	// link.MaxPacketSize bytes.
	Buffer() []byte
	// Emit queues the first n bytes of the buffer the last Buffer call
	// returned, for the IP and UDP fields dst (which the packet's ICRC
	// was computed with).
	Emit(n int, dst *wire.Net)
}

// GatherEmitter is an Emitter that also takes packets whose payload is
// sent from where it lies (a registered region) instead of being copied
// into the packet's buffer: the link gathers it (sendmsg iovecs).
type GatherEmitter interface {
	Emitter
	// EmitGather queues a packet made of the first hdr bytes of the
	// buffer the last Buffer call returned (BTH and extension headers),
	// then payload, then the next tail bytes of that buffer (pad and
	// ICRC), for the IP and UDP fields dst. payload must stay as it is
	// until the scheduler's turn ends: the batch is sent within it.
	EmitGather(hdr int, payload []byte, tail int, dst *wire.Net)
}

// Memory is registered memory as the transport reaches it: Lookup returns
// the n bytes at virtual address va of the region whose key is key,
// provided the region belongs to protection domain pd, holds the whole
// range and grants every right in need (0 for a local read); otherwise
// false. The slice may be used until the protocol call returns, or, given
// to a GatherEmitter, until the scheduler's turn ends (the packets it
// went into are sent within the turn); the scheduler's Quiesce is what
// makes a deregistration wait for it.
type Memory interface {
	Lookup(key, pd uint32, va uint64, n uint32, need verbs.AccessFlags) ([]byte, bool)
}

// CQ is where completions go. The completion is passed by value, so that
// pushing one through the interface allocates nothing.
type CQ interface {
	// Push appends a completion; solicited marks a completion of a
	// message whose last packet had the Solicited Event bit. It reports
	// false when the CQ overflowed (the CQ raises its own error).
	Push(wc verbs.WC, solicited bool) bool
}

// RecvQueue is where the responder takes the receive WQEs that SEND
// messages (and RDMA WRITE with immediate) consume: a QP's receive queue
// or a shared receive queue.
type RecvQueue interface {
	// Take removes the oldest receive WQE into dst and reports whether
	// there was one.
	Take(dst *verbs.RecvWQE) bool
	// TakeIfFits takes the oldest receive WQE if its scatter list holds
	// need bytes; present reports whether there was one at all.
	TakeIfFits(dst *verbs.RecvWQE, need uint64) (taken, present bool)
}

// Env is what one call of the protocol works with besides the QP's own
// state: the time, where packets go, registered memory, the counters,
// and how much Run may build.
type Env struct {
	Now time.Time
	Out Emitter
	// Gather is Out when the link sends payloads from where they lie
	// (link.Gatherer); nil otherwise, and then every packet is built
	// whole in Out's buffer.
	Gather GatherEmitter
	Mem    Memory
	Stats  *Counters
	// CC is the device's congestion state (its configuration and device
	// window); nil takes the defaults with no device window.
	CC *Congestion
	// CCShard is the device window counter this call's QPs count in (the
	// worker's index: each worker writes only its own).
	CCShard int
	// Budget is how many bytes of packets Run may still build for this
	// QP in this call (requester packets and READ responses together):
	// Run stops once it is spent and reports More. Unlimited for no
	// limit.
	Budget int
}

// Unlimited is the Budget of a call that may build as much as the
// protocol allows.
const Unlimited = int(^uint(0) >> 1)

// spend records n bytes built.
func (e *Env) spend(n int) {
	if e.Budget != Unlimited {
		e.Budget -= n
	}
}

// budgetLeft reports whether another packet may be built.
func (e *Env) budgetLeft() bool { return e.Budget > 0 }
