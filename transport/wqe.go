package transport

import (
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// SendWQE is a send work queue element: the work request as posted, and
// the transport's progress on it. The qp package fills the exported
// fields when the request is posted and never changes them afterwards;
// the requester and the completer own the rest.
type SendWQE struct {
	// WR is the work request; its Next and SGList are nil.
	WR verbs.SendWR
	// SGL is the scatter list (storage the QP owns).
	SGL []verbs.SGE
	// Inline holds the data of an IBV_SEND_INLINE request, copied when
	// it was posted.
	Inline []byte
	// InlineBad: the inline data could not be read when the request was
	// posted; it completes with IBV_WC_LOC_PROT_ERR when processed.
	InlineBad bool
	// Signaled: the request completes with a work completion even when
	// it succeeds.
	Signaled bool
	// Dst is where a UD request goes (from its address handle).
	Dst wire.Net

	// done, for a request the transport issued on its own (QP.Issue),
	// receives its outcome instead of the send CQ.
	done func(status verbs.WCStatus)

	state    WQEState
	status   verbs.WCStatus // WQEFailed: how it completes
	length   uint32         // message length
	firstPSN wire.PSN
	lastPSN  wire.PSN
	// READ: the next response PSN expected; seen records responses
	// received beyond it (bit k: respNext+k).
	respNext wire.PSN
	seen     [2]uint64
	// reqTo: READ, one past the last response PSN asked for so far (a
	// READ longer than the window is asked for in parts).
	reqTo wire.PSN
	// parted: READ, asked for in parts (readAsk), each within one block
	// of readPartPSNs responses; otherwise in one request.
	parted bool
	// rerequested: a READ or ATOMIC was asked for again after a missing
	// response, and no response has arrived since.
	rerequested bool
}

// WQEState is where a send WQE is in its life.
type WQEState uint8

// Send WQE states.
const (
	// WQEPosted: not started by the requester.
	WQEPosted WQEState = iota
	// WQEStarted: PSNs assigned; packets are being sent, or are sent and
	// await their acknowledgement or responses.
	WQEStarted
	// WQEResponded: a READ whose responses all arrived, or an ATOMIC
	// whose acknowledge arrived; it completes when everything before it
	// has.
	WQEResponded
	// WQEFailed: a local check failed (memory, length); it completes with
	// its status when everything before it has, and the QP then moves to
	// an error state.
	WQEFailed
)

var wqeStateNames = [...]string{"Posted", "Started", "Responded", "Failed"}

func (s WQEState) String() string { return wqeStateNames[s] }

// setState is the WQE's one transition point:
//
//	Posted --start--> Started --responses--> Responded (READ, ATOMIC)
//
//	Posted, Started --local error--> Failed
//
// A go-back sends started WQEs again with the PSNs they were given.
func (w *SendWQE) setState(s WQEState) { w.state = s }

// readAtomic reports whether the request expects responses (READ,
// ATOMIC) rather than acknowledgements.
func (w *SendWQE) readAtomic() bool {
	return w.WR.Opcode == verbs.WRRDMARead || w.WR.Opcode.IsAtomic()
}

// holdsPSN reports whether psn is one of the started WQE's PSNs.
func (w *SendWQE) holdsPSN(psn wire.PSN) bool {
	return psn.Diff(w.firstPSN) >= 0 && psn.Diff(w.lastPSN) <= 0
}

// resumePSN is where sending a started WQE again begins: its first PSN,
// or for a READ its first missing response.
func (w *SendWQE) resumePSN() wire.PSN {
	if w.WR.Opcode == verbs.WRRDMARead {
		return w.respNext
	}
	return w.firstPSN
}

// messageLength is the length of the WQE's message: its inline data or
// the sum of its scatter/gather elements.
func (w *SendWQE) messageLength() uint32 {
	if w.WR.SendFlags&verbs.SendInline != 0 {
		return uint32(len(w.Inline))
	}
	length := uint32(0)
	for _, sge := range w.SGL {
		length += sge.Length
	}
	return length
}

// State returns the WQE's state.
func (w *SendWQE) State() WQEState { return w.state }

// packetsFor returns how many PSNs a message of n bytes takes.
func packetsFor(n, mtu uint32) uint32 {
	if n == 0 {
		return 1
	}
	return (n + mtu - 1) / mtu
}
