package transport

import (
	"encoding/binary"
	"time"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// readReorderTolerance is how many later READ responses may arrive before
// a missing one is taken as lost and asked for again.
const readReorderTolerance = 16

// CompleterState is what the completer is doing (IBTA 9.7.5, the
// requester's handling of acknowledgements and responses; rxe's
// "completer").
//
//	Inactive --start (RTR->RTS)--> Ready --sequence NAK--> Retrying
//	                                 ^                        |
//	                                 +------- progress -------+
type CompleterState uint8

// Completer states.
const (
	// CompleterInactive: the QP is not in RTS or SQD; responses are
	// dropped.
	CompleterInactive CompleterState = iota
	// CompleterReady: ACKs, NAKs, READ responses and ATOMIC acknowledges
	// complete send WQEs in order.
	CompleterReady
	// CompleterRetrying: a PSN sequence error NAK started a retry and no
	// acknowledgement has made progress since; further sequence NAKs
	// start none (a packet lost again is left to the transport timer),
	// so that one loss under reordering costs one retry (as rxe_comp.c).
	CompleterRetrying
)

var completerStateNames = [...]string{"Inactive", "Ready", "Retrying"}

func (s CompleterState) String() string { return completerStateNames[s] }

// Completer turns acknowledgements and responses into completions.
type Completer struct {
	state CompleterState
	// lastSeqNAK is the PSN of the last sequence NAK handled: the
	// responder NAKs a gap once, so a NAK for it or an earlier PSN is a
	// duplicate or stale packet. It never lags ackPSN by more than one.
	lastSeqNAK wire.PSN
}

// setState is the completer's one transition point.
func (c *Completer) setState(s CompleterState) { c.state = s }

// start prepares the completer on entry to RTS.
func (c *Completer) start(q *QP) {
	c.lastSeqNAK = q.req.ackPSN.Sub(1)
	c.setState(CompleterReady)
}

// receive handles an ACK, a NAK, a READ response or an ATOMIC acknowledge
// (IBTA 9.7.5.1, 9.7.5.2).
func (c *Completer) receive(q *QP, env *Env, p *wire.Packet, fx *Effects) {
	r := &q.req
	psn := p.BTH.PSN()
	info := p.Info()
	// An ACK or NAK must be for a PSN sent and not acknowledged before;
	// a repeated ACK of the last acknowledged PSN is harmless. READ
	// responses and ATOMIC acknowledges are checked against the READ or
	// ATOMIC they answer, which stays started across a go-back.
	if info.Kind == wire.KindAck && (psn.Diff(r.maxPSN) >= 0 || psn.Diff(r.ackPSN) < -1) {
		env.Stats.Drop(DropStaleResponse)
		return
	}
	if p.AETH != nil {
		syn := p.AETH.Syndrome()
		switch syn.Kind() {
		case wire.AckKindRNRNAK, wire.AckKindNAK:
			if psn.Diff(r.ackPSN) < 0 || psn.Diff(r.maxPSN) >= 0 {
				// A NAK names a PSN sent and not received: one
				// already acknowledged makes it a late or duplicated
				// packet, one never sent a forged or misdirected one.
				env.Stats.Drop(DropStaleResponse)
				return
			}
			if syn.Kind() == wire.AckKindRNRNAK {
				c.rnrNAK(q, env, psn, syn, fx)
			} else {
				c.nak(q, env, psn, syn.NAKCode(), fx)
			}
			return
		case wire.AckKindACK, wire.AckKindReserved:
		}
	}
	switch info.Kind {
	case wire.KindAck:
		if !c.ackUpTo(q, env, psn, fx) {
			// A repeat of the last acknowledgement: nothing new.
			env.Stats.Drop(DropDuplicateAck)
			if r.maxPSN != r.ackPSN {
				r.win.duplicateAck(env, psn, r.maxPSN)
			}
		}
	case wire.KindAtomicAck:
		w := c.findReadAtomic(q, psn)
		if w == nil || !w.WR.Opcode.IsAtomic() || w.state != WQEStarted {
			env.Stats.Drop(DropStaleResponse)
			return
		}
		var orig [8]byte
		binary.NativeEndian.PutUint64(orig[:], p.AtomicAckETH.OriginalRemoteData())
		if scatter(env.Mem, q.P.PD, w.SGL, 0, orig[:]) != scatterOK {
			// The local buffer went away: the ATOMIC completes with a
			// local protection error, in order.
			r.fail(w, verbs.WCLocProtErr)
			r.rdAtomic-- // no longer outstanding: it has its answer
		} else {
			w.setState(WQEResponded)
		}
		c.ackUpTo(q, env, psn, fx)
	case wire.KindReadResponse:
		w := c.findReadAtomic(q, psn)
		if w == nil || w.WR.Opcode != verbs.WRRDMARead || w.state != WQEStarted {
			env.Stats.Drop(DropStaleResponse)
			return
		}
		if psn == w.firstPSN {
			// The first response's AETH acknowledges every earlier
			// request (IBTA 9.7.5.1.2).
			c.ackUpTo(q, env, w.firstPSN.Sub(1), fx)
			if fx.Fail != FailNone {
				return
			}
			if w = c.findReadAtomic(q, psn); w == nil || w.state != WQEStarted {
				return
			}
		}
		c.readResponse(q, env, w, p, fx)
	default:
		env.Stats.Drop(DropTransportMismatch)
	}
}

// rnrNAK handles an RNR NAK (IBTA 9.7.5.2.8): the requester waits out
// the timer the NAK names and resends from its PSN, until rnr_retry
// retries are spent.
func (c *Completer) rnrNAK(q *QP, env *Env, psn wire.PSN, syn wire.Syndrome, fx *Effects) {
	r := &q.req
	if r.state == RequesterRNRWait && psn == r.resumePSN {
		env.Stats.Drop(DropStaleResponse) // a duplicate of the NAK being waited out
		return
	}
	c.ackUpTo(q, env, psn.Sub(1), fx)
	if fx.Fail != FailNone || q.SQ.Len() == 0 {
		return
	}
	env.Stats.RNRNAKsRecv.Add(1)
	q.counts.RNRNAKsReceived++
	if !spendRetry(&r.rnrRetries, verbs.WCRNRRetryExcErr, fx) {
		return
	}
	r.rnrWait(psn, env.Now.Add(time.Duration(wire.RNRTimerMicros(syn.Value()))*time.Microsecond))
}

// nak handles a NAK (IBTA 9.7.5.2.x): a PSN sequence error resends from
// the NAKed PSN; the others fail the WQE they name.
func (c *Completer) nak(q *QP, env *Env, psn wire.PSN, code wire.NAKCode, fx *Effects) {
	r := &q.req
	c.ackUpTo(q, env, psn.Sub(1), fx)
	if fx.Fail != FailNone || q.SQ.Len() == 0 {
		return
	}
	if head := q.SQ.At(0); code != wire.NAKPSNSequenceError && head.state == WQEStarted && head.readAtomic() && !head.holdsPSN(psn) {
		// The NAK names a request after a READ or ATOMIC whose answer
		// was lost (ackUpTo asked for it again): the error is not the
		// head's. As rxe's completer (check_psn retries before
		// check_ack), the requester resends from the head; the NAK
		// comes again for the request it names.
		env.Stats.Drop(DropStaleResponse)
		return
	}
	switch code {
	case wire.NAKPSNSequenceError:
		env.Stats.SeqNAKsRecv.Add(1)
		q.counts.SeqNAKsReceived++
		if psn.Diff(c.lastSeqNAK) <= 0 {
			env.Stats.Drop(DropStaleResponse)
			return
		}
		c.lastSeqNAK = psn
		r.win.congestion(env, psn, r.maxPSN, false)
		if c.state == CompleterRetrying {
			return
		}
		c.setState(CompleterRetrying)
		if !spendRetry(&r.retries, verbs.WCRetryExcErr, fx) {
			return
		}
		r.goBack(q, env, psn)
		if r.state == RequesterRNRWait || r.state == RequesterGoBack {
			// This go-back covers the one a timer asked for: everything
			// before psn is acknowledged now.
			r.setState(RequesterSending)
		}
		fx.Run = true
	case wire.NAKInvalidRequest:
		fx.fail(FailSend, verbs.WCRemInvReqErr)
	case wire.NAKRemoteAccessError:
		fx.fail(FailSend, verbs.WCRemAccessErr)
	default:
		// Remote operational error and the reserved codes (IBTA
		// 9.7.5.2.4).
		fx.fail(FailSend, verbs.WCRemOpErr)
	}
}

// readResponse places one READ response. Responses are placed by their
// PSN as they come (each names its offset), so reordering costs nothing;
// a 128-response bitmap beyond the first missing one records what
// arrived. A missing response is asked for again once the last response
// arrived without it, or readReorderTolerance later ones did.
func (c *Completer) readResponse(q *QP, env *Env, w *SendWQE, p *wire.Packet, fx *Effects) {
	r := &q.req
	psn := p.BTH.PSN()
	d := psn.Diff(w.respNext)
	if d < 0 || d >= 128 || w.seen[d/64]&(1<<(d%64)) != 0 {
		env.Stats.Drop(DropStaleResponse) // a duplicate, or too far ahead
		// Still, the responder is alive and working through this READ:
		// rxe sends a READ's last response before it looks at a request
		// to resend part of it, so after one loss a long READ streams
		// on past the bitmap for as long as it takes. The transport
		// timer, which is for silence, starts over; the retry budget
		// does not.
		if !r.deadline.IsZero() && r.state == RequesterSending {
			r.armTransportTimer(q, env.Now)
		}
		return
	}
	mtu := q.P.MTU
	off := uint32(psn.Diff(w.firstPSN)) * mtu
	want := min(mtu, w.length-min(off, w.length))
	if uint32(len(p.Payload)) != want {
		// IBTA 9.7.5.1.x: a response of the wrong length is a bad
		// response; the READ fails.
		r.fail(w, verbs.WCBadRespErr)
		r.rdAtomic--
		c.ackUpTo(q, env, w.firstPSN.Sub(1), fx)
		return
	}
	if scatter(env.Mem, q.P.PD, w.SGL, off, p.Payload) != scatterOK {
		r.fail(w, verbs.WCLocProtErr)
		r.rdAtomic--
		c.ackUpTo(q, env, w.firstPSN.Sub(1), fx)
		return
	}
	w.seen[d/64] |= 1 << (d % 64)
	advanced := false
	from := w.respNext
	for w.seen[0]&1 != 0 {
		w.seen[0] = w.seen[0]>>1 | w.seen[1]<<63
		w.seen[1] >>= 1
		w.respNext = w.respNext.Add(1)
		advanced = true
	}
	if advanced {
		w.rerequested = false
		if w.respNext == w.reqTo || partOf(w, from) != partOf(w, w.respNext) {
			// What was asked for arrived, or a whole part of it: the
			// window has room for the next part.
			fx.Run = true
		}
		if w.firstPSN.Diff(r.ackPSN) <= 0 && w.respNext.Diff(r.ackPSN) > 0 {
			// Responses received in order acknowledge their PSNs: the
			// window slides with them (a READ may span more than it).
			r.win.onAck(env, int(w.respNext.Diff(r.ackPSN)))
			r.ackPSN = w.respNext
			r.catchUp(q)
			c.keepSeqNAK(r)
		}
		c.progress(q)
		if r.state == RequesterSending {
			r.armTransportTimer(q, env.Now)
		}
	}
	if w.respNext.Diff(w.lastPSN) > 0 {
		w.setState(WQEResponded)
		c.ackUpTo(q, env, w.lastPSN, fx)
		return
	}
	// The last response asked for came, or many after the missing one.
	lost := psn == w.lastPSN || psn.Add(1) == w.reqTo || psn.Diff(w.respNext) >= readReorderTolerance
	if lost && !w.rerequested {
		w.rerequested = true
		c.rerequest(q, env, w.respNext, fx)
	}
}

// partOf returns which readPartPSNs-long part of the READ w psn is in.
func partOf(w *SendWQE, psn wire.PSN) uint32 {
	return uint32(psn.Diff(w.firstPSN)) / readPartPSNs
}

// rerequest asks again for a READ's responses from psn (or an ATOMIC's
// acknowledge): a go-back to it.
func (c *Completer) rerequest(q *QP, env *Env, psn wire.PSN, fx *Effects) {
	r := &q.req
	if r.state == RequesterRNRWait || r.state == RequesterInactive {
		return // the RNR wait's go-back covers it
	}
	r.goBack(q, env, psn)
	fx.Run = true
}

// findReadAtomic returns the started READ or ATOMIC WQE whose PSN range
// holds psn.
func (c *Completer) findReadAtomic(q *QP, psn wire.PSN) *SendWQE {
	for i := 0; i < q.SQ.Len(); i++ {
		w := q.SQ.At(i)
		if w.state == WQEPosted || w.state == WQEFailed {
			break
		}
		if w.readAtomic() && w.holdsPSN(psn) {
			return w
		}
	}
	return nil
}

// ackUpTo completes, in order, every WQE whose last PSN is at or before
// psn. A READ or ATOMIC whose response has not arrived although a later
// PSN is acknowledged lost its response: it is asked for again (IBTA
// 9.7.5.1.2, implied NAK). A failed WQE that reaches the head is
// reported in fx. It reports whether it completed or acknowledged
// anything.
func (c *Completer) ackUpTo(q *QP, env *Env, psn wire.PSN, fx *Effects) bool {
	r := &q.req
	progress := false
	limit := psn.Add(1) // the oldest PSN this acknowledgement leaves unacknowledged
	for q.SQ.Len() > 0 {
		w := q.SQ.At(0)
		if w.state == WQEPosted {
			break
		}
		if w.state == WQEFailed {
			fx.fail(FailSend, w.status)
			break
		}
		if w.state == WQEResponded {
			// Its response acknowledged it; everything before it has
			// completed.
			next := w.lastPSN.Add(1)
			q.completeHead(verbs.WCSuccess)
			if next.Diff(limit) > 0 {
				limit = next
			}
			progress = true
			continue
		}
		if w.lastPSN.Diff(psn) > 0 {
			if w.WR.Opcode == verbs.WRRDMARead && w.firstPSN.Diff(limit) <= 0 {
				// The acknowledgement reaches a READ asked for in parts:
				// its PSNs count as acknowledged up to the responses
				// that arrived (those that came while earlier requests
				// awaited their acknowledgement count now). One that
				// covers a response that has not arrived means it was
				// lost (implied NAK, IBTA 9.7.5.1.2).
				limit = w.respNext
				if psn.Diff(w.respNext) >= 0 && !w.rerequested {
					w.rerequested = true
					c.rerequest(q, env, w.respNext, fx)
				}
			}
			break
		}
		if w.readAtomic() {
			// Its missing responses stay unacknowledged.
			limit = w.respNext
			if !w.rerequested {
				w.rerequested = true
				c.rerequest(q, env, w.respNext, fx)
			}
			break
		}
		q.completeHead(verbs.WCSuccess)
		progress = true
	}
	if limit.Diff(r.ackPSN) > 0 && limit.Diff(r.maxPSN) <= 0 {
		r.win.onAck(env, int(limit.Diff(r.ackPSN)))
		r.ackPSN = limit
		c.keepSeqNAK(r)
		progress = true
	}
	if r.state == RequesterRNRWait && r.ackPSN.Diff(r.resumePSN) > 0 {
		// The RNR NAKed packet was received after all (an earlier copy
		// got through): nothing to wait for.
		r.setState(RequesterSending)
	}
	if progress {
		r.catchUp(q)
		c.progress(q)
		fx.Run = true
		switch {
		case r.state != RequesterSending:
		case r.ackPSN == r.maxPSN:
			r.deadline = time.Time{}
		default:
			r.armTransportTimer(q, env.Now)
		}
	}
	r.checkDrained(q, fx)
	return progress
}

// keepSeqNAK keeps lastSeqNAK within a PSN of ackPSN, so that 24-bit
// PSN comparisons with it stay meaningful however far the QP gets.
func (c *Completer) keepSeqNAK(r *Requester) {
	if floor := r.ackPSN.Sub(1); c.lastSeqNAK.Diff(floor) < 0 {
		c.lastSeqNAK = floor
	}
}

// progress records that an acknowledgement or response moved the QP
// forward: the retry budgets are for silence, and a retry in progress is
// over.
func (c *Completer) progress(q *QP) {
	q.req.resetRetries(q)
	if c.state == CompleterRetrying {
		c.setState(CompleterReady)
	}
}

// checkHead reports a failed WQE at the head of the send queue: every
// WQE before it has completed, so it completes now with its error.
func (c *Completer) checkHead(q *QP, fx *Effects) {
	if q.SQ.Len() > 0 && q.SQ.At(0).state == WQEFailed {
		fx.fail(FailSend, q.SQ.At(0).status)
	}
}
