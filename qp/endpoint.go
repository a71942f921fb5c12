package qp

import (
	"github.com/softhca/softhca/cq"
	"github.com/softhca/softhca/transport"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// The QP as the transport's scheduler drives it (transport.Endpoint):
// each call takes the QP's lock, runs the protocol (q.tp) with the turn's
// environment, and applies what the protocol asks of the QP object: a
// state change when a work request failed, an asynchronous event. A
// destroyed QP does nothing.

// Receive handles a packet for the QP.
func (q *QP) Receive(t *transport.Turn, p *wire.Packet) transport.Result {
	q.mu.Lock()
	defer q.mu.Unlock()
	env := t.Env()
	if q.life != alive {
		env.Stats.Drop(transport.DropDestroyed)
		return transport.Result{}
	}
	fx := q.tp.Receive(env, p)
	q.applyLocked(&fx)
	return transport.FromEffects(fx, q.tp.Deadline())
}

// Run sends what the QP may send.
func (q *QP) Run(t *transport.Turn) transport.Result {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch q.life {
	case destroyed:
		return transport.Result{}
	case destroying:
		q.tp.FlushAck(t.Env())
		return transport.Result{}
	case alive:
	}
	fx := q.tp.Run(t.Env())
	q.applyLocked(&fx)
	return transport.FromEffects(fx, q.tp.Deadline())
}

// Timer handles the QP's timer.
func (q *QP) Timer(t *transport.Turn) transport.Result {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.life != alive {
		return transport.Result{}
	}
	fx := q.tp.Timer(t.Env())
	q.applyLocked(&fx)
	return transport.FromEffects(fx, q.tp.Deadline())
}

// applyLocked applies the effects of a protocol call on the QP object.
// A failed work request completes with its error after the QP's new
// state is published, so that whoever polls the completion and then asks
// the state sees the error state; the state change then flushes the rest
// (IBTA 10.8.3.3 and 9.9.3.1; rxe moves an RC QP straight to ERR, and UC
// and UD to SQE on a send error).
//
// Preconditions: q.mu is held.
func (q *QP) applyLocked(fx *transport.Effects) {
	switch fx.Fail {
	case transport.FailSend:
		next := verbs.QPStateErr
		if q.typ != verbs.QPTypeRC {
			next = verbs.QPStateSQE
		}
		q.stateRO.Store(uint32(next))
		q.tp.CompleteHead(fx.Status)
		q.setStateLocked(next, false)
	case transport.FailRecv:
		q.stateRO.Store(uint32(verbs.QPStateErr))
		q.tp.CompleteRecvInProgress(fx.Status)
		q.setStateLocked(verbs.QPStateErr, false)
	case transport.FailNone:
	}
	if fx.SQDrained {
		q.raiseLocked(verbs.EventSQDrained)
	}
}

// syncParamsLocked gives the transport the attributes it uses.
//
// Preconditions: q.mu is held (or the QP is being created).
func (q *QP) syncParamsLocked() {
	a := &q.attr
	p := &q.tp.P
	*p = transport.Params{
		Type:            q.typ,
		QPN:             q.num,
		PD:              q.pd,
		DestQPN:         a.DestQPNum,
		MTU:             uint32(a.PathMTU.Bytes()),
		Path:            p.Path,
		Access:          a.QPAccessFlags,
		QKey:            a.QKey,
		Timeout:         a.Timeout,
		RetryCnt:        a.RetryCnt,
		RNRRetry:        a.RNRRetry,
		MinRNRTimer:     a.MinRNRTimer,
		MaxRdAtomic:     a.MaxRdAtomic,
		MaxDestRdAtomic: a.MaxDestRdAtomic,
		RetryForever:    q.cfg.RxeRetryCompat,
		UDOversizeError: q.cfg.UDOversizeError,
	}
	if q.typ == verbs.QPTypeUD {
		mtu := q.cfg.ActiveMTU
		if !mtu.Valid() {
			mtu = verbs.MTU1024
		}
		p.MTU = uint32(mtu.Bytes())
	}
}

// cqSink is a CQ as the transport pushes to it: by value, so that a
// completion pushed through the interface does not escape to the heap.
type cqSink struct{ c *cq.CQ }

func (s cqSink) Push(wc verbs.WC, solicited bool) bool { return s.c.Push(&wc, solicited) }
