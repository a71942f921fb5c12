package transport

import (
	"encoding/binary"
	"time"

	"github.com/softhca/softhca/internal/ring"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Params are the attributes of a QP that the protocol uses. The qp
// package sets them from the QP's attributes when it enters RTR and RTS
// and when a modify changes them.
type Params struct {
	Type    verbs.QPType
	QPN     uint32
	PD      uint32
	DestQPN uint32 // RC, UC: dest_qp_num
	// MTU is the payload of a full packet: the path MTU for RC and UC,
	// the port's active MTU for UD (a UD message is one packet).
	MTU uint32
	// Path holds, for RC and UC, the IP and UDP fields of every packet
	// to the peer: Src is the address of the GID the address vector's
	// sgid_index names, Dst the destination GID's address. A received
	// RC or UC packet must come from Path.Dst and be for Path.Src.
	Path   wire.Net
	Access verbs.AccessFlags // qp_access_flags
	QKey   uint32            // UD
	// The requester's timers and retry budgets (ibv_modify_qp(3)).
	Timeout, RetryCnt, RNRRetry, MinRNRTimer uint8
	// MaxRdAtomic bounds the READ and ATOMIC requests outstanding as
	// requester (max_rd_atomic); MaxDestRdAtomic the responder resources
	// (max_dest_rd_atomic).
	MaxRdAtomic, MaxDestRdAtomic uint8

	// RetryForever makes retry_cnt 7 retry forever, as rxe does; the
	// spec's 7 is seven retries.
	RetryForever bool
	// UDOversizeError completes a UD send longer than the MTU with
	// IBV_WC_LOC_LEN_ERR instead of dropping it silently (IBTA C10-93.1.1
	// and rxe drop it and complete it successfully).
	UDOversizeError bool
}

// Failure says which work request an error completes.
type Failure uint8

// Failures.
const (
	FailNone Failure = iota
	// FailSend: the send WQE at the head of the send queue completes
	// with Effects.Status (CompleteHead), and the QP moves to ERR (RC)
	// or SQE (UC, UD), which flushes the rest.
	FailSend
	// FailRecv: the receive in progress, if any, completes with
	// Effects.Status (CompleteRecvInProgress), and the QP moves to ERR.
	FailRecv
)

// Effects are what a call of the protocol needs done outside it, by the
// QP (Fail, SQDrained) and by the scheduler (the rest).
type Effects struct {
	// Run: the QP has packets to send or an acknowledgement owed; Run
	// should be called before the batch of packets is sent.
	Run bool
	// More: Run stopped because its budget was spent; call it again.
	More bool
	// Delivered: a receive completed (an application may answer it).
	Delivered bool
	// Held: the request cannot be handled yet (a READ response is being
	// sent; later requests wait for it, in order); hand it to Receive
	// again after the next Run.
	Held bool
	// Fail and Status: a work request completes with an error and the
	// QP leaves the normal states.
	Fail   Failure
	Status verbs.WCStatus
	// SQDrained: raise IBV_EVENT_SQ_DRAINED.
	SQDrained bool
	// DeviceWait: Run stopped at the device window (CCConfig.DeviceWindow);
	// call it again when the device has room, which acknowledgements to
	// any of its QPs make.
	DeviceWait bool
}

func (fx *Effects) fail(f Failure, status verbs.WCStatus) {
	if fx.Fail == FailNone {
		fx.Fail, fx.Status = f, status
	}
}

// QP is the transport's half of a queue pair: its requester, completer
// and responder. The qp package owns it, sets its queues and Params, and
// calls it with the QP's lock held; nothing in it blocks or starts a
// goroutine, and every call takes its time and its packet sink from Env.
type QP struct {
	P  Params
	SQ *ring.Ring[SendWQE]
	RQ RecvQueue // the QP's receive queue or its SRQ
	// TQ is RQ when it is a tag-matching SRQ, else nil: SEND messages
	// then go where their tag-matching header says (tagmatch.go).
	TQ     TagQueue
	SendCQ CQ
	RecvCQ CQ

	state verbs.QPState
	// counts are the QP's own counters, kept for its life (RESET does
	// not clear them).
	counts QPCounters
	// sqLive and rqLive: the requester (RTS) and the responder (RTR)
	// have started since the last RESET, so their PSNs are the QP's.
	sqLive, rqLive bool
	// internal counts the requests in SQ that the transport issued on
	// its own (Issue).
	internal int
	req      Requester
	comp     Completer
	resp     Responder
	rate     rateControl
	// icrc caches the ICRC state of the flow the QP's packets go out on
	// (its path, or a UD WQE's destination); the QP's lock serialises it.
	icrc wire.ICRCFlow
}

// State returns the QP state the transport was last told of.
func (q *QP) State() verbs.QPState { return q.state }

// Requester, Completer and Responder give the protocol parts' states
// (for tests and inspection).
// QPCounters are a QP's own counters: its packets and the transport
// events that concern it (the device's Stats count the same for all
// QPs).
type QPCounters struct {
	TxPackets, TxBytes, RxPackets     uint64
	Retransmits, RetransmittedPackets uint64 // go-back-N restarts; packets sent again
	RetryTimeouts                     uint64
	RNRNAKsSent, RNRNAKsReceived      uint64
	SeqNAKsSent, SeqNAKsReceived      uint64
}

// Counters returns the QP's counters.
func (q *QP) Counters() QPCounters { return q.counts }

// emit hands the packet built in env.Out's buffer to the link and
// counts it.
func (q *QP) emit(env *Env, size int, dst *wire.Net) {
	env.Out.Emit(size, dst)
	q.counted(size)
}

// emitGather queues a packet of size bytes whose headers are buf[:hl]
// and whose payload leaves from where it lies (Env.Gather): only the
// pad and the ICRC are written after the headers. The payload must stay
// valid until the turn ends (a lookup's bytes do: Quiesce waits for it).
func (q *QP) emitGather(env *Env, buf []byte, hl, size int, payload []byte, dst *wire.Net) {
	tail := size - hl - len(payload)
	pad := tail - wire.ICRCSize
	clear(buf[hl : hl+pad])
	binary.LittleEndian.PutUint32(buf[hl+pad:], q.icrc.ICRCGather(dst, buf[:hl], payload, pad))
	env.Gather.EmitGather(hl, payload, tail, dst)
	q.counted(size)
}

// counted counts a packet of size bytes the QP sent.
func (q *QP) counted(size int) {
	q.counts.TxPackets++
	q.counts.TxBytes += uint64(size)
}

// PSNs returns the PSN the requester sends next and the PSN the
// responder expects next, which is what rxe's query_qp reports as sq_psn
// and rq_psn, and whether each is live: the requester started (RTS) and
// the responder started (RTR) since the last RESET. Before that the
// values the QP was modified with stand.
func (q *QP) PSNs() (sq uint32, sqLive bool, rq uint32, rqLive bool) {
	return uint32(q.req.psn), q.sqLive, uint32(q.resp.epsn), q.rqLive
}

func (q *QP) Requester() RequesterState { return q.req.state }

// Completer returns the completer's state.
func (q *QP) Completer() CompleterState { return q.comp.state }

// Responder returns the responder's state.
func (q *QP) Responder() ResponderState { return q.resp.state }

// SetState tells the transport that the QP moved to next, and starts or
// stops the protocol parts accordingly: the responder starts on entry to
// RTR (expected PSN rq_psn), the requester and completer on RTR to RTS
// (sq_psn); RESET forgets everything; SQE stops the requester; ERR stops
// everything (the receive in progress, if any, is left for
// TakeRecvInProgress).
func (q *QP) SetState(next verbs.QPState, rqPSN, sqPSN uint32) {
	prev := q.state
	q.state = next
	switch next {
	case verbs.QPStateReset:
		// The queues are emptied without completions (IBTA 10.3.1), the
		// transport's own requests too.
		q.req.win.release()
		if q.TQ != nil {
			q.resp.resetTagged(q)
		}
		q.req, q.comp, q.resp, q.rate = Requester{}, Completer{}, Responder{}, rateControl{}
		q.internal = 0
		q.sqLive, q.rqLive = false, false
	case verbs.QPStateInit:
	case verbs.QPStateRTR:
		if prev != verbs.QPStateRTR {
			q.resp.start(q, wire.MakePSN(rqPSN))
			q.rqLive = true
		}
	case verbs.QPStateRTS:
		if prev == verbs.QPStateRTR {
			q.req.start(q, wire.MakePSN(sqPSN))
			q.comp.start(q)
			q.sqLive = true
		} else if q.req.state == RequesterInactive {
			q.req.setState(RequesterSending)
		}
		// SQD -> RTS: a drain not yet reported is no longer asked for
		// (the event belongs to SQD, IBTA 11.6.3.1).
		q.req.drainNotify = false
	case verbs.QPStateSQD:
	case verbs.QPStateSQE:
		q.req.stop()
		q.comp.setState(CompleterInactive)
	case verbs.QPStateErr:
		q.req.stop()
		q.comp.setState(CompleterInactive)
		q.resp.stop()
	}
}

// ParamsChanged resets what depends on changed parameters: retry budgets
// start afresh after a modify that sets retry_cnt or rnr_retry.
func (q *QP) ParamsChanged() { q.req.resetRetries(q) }

// Receive handles one received packet for the QP (IBTA 9.6 packet
// checks, then the responder for requests and the completer for
// responses).
func (q *QP) Receive(env *Env, p *wire.Packet) Effects {
	var fx Effects
	q.counts.RxPackets++
	switch q.state {
	case verbs.QPStateRTR, verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateSQE:
	default:
		// IBTA 10.3.1: a QP in RESET, INIT or ERR receives nothing.
		env.Stats.Drop(DropQPState)
		return fx
	}
	if p.BTH.PKey()&0x7fff != 0x7fff {
		// IBTA 9.6.1.1 (C9-42): the P_Key must match one in the
		// partition table; rxe's table holds only the default partition.
		env.Stats.Drop(DropPKey)
		return fx
	}
	op := p.BTH.OpCode()
	if op == wire.CNP {
		// RoCEv2 congestion notification: for any QP type, from the
		// peer of a connected QP.
		if q.P.Type != verbs.QPTypeUD && p.Net.Src != q.P.Path.Dst {
			env.Stats.Drop(DropAddress)
			return fx
		}
		q.receiveCNP(env)
		return fx
	}
	if op.Transport() != transportOf(q.P.Type) {
		// IBTA 9.6.1.2: the opcode's transport must be the QP's.
		env.Stats.Drop(DropTransportMismatch)
		return fx
	}
	if q.P.Type == verbs.QPTypeUD {
		q.resp.receiveUD(q, env, p, &fx)
		return fx
	}
	if p.Net.Src != q.P.Path.Dst || (p.Net.Dst.IsValid() && p.Net.Dst != q.P.Path.Src) {
		// A connected QP takes packets only from its peer and only on
		// the address of its own GID (rxe's check_addr).
		env.Stats.Drop(DropAddress)
		return fx
	}
	q.noteECN(env, p)
	if !p.Info().Request {
		if q.P.Type != verbs.QPTypeRC || q.comp.state == CompleterInactive {
			env.Stats.Drop(DropStaleResponse)
			return fx
		}
		q.comp.receive(q, env, p, &fx)
		q.flushAckOnFail(env, &fx)
		q.settle(env) // acknowledgements change what is in flight; requests do not
		return fx
	}
	if q.P.Type == verbs.QPTypeUC {
		q.resp.receiveUC(q, env, p, &fx)
		return fx
	}
	q.resp.receiveRC(q, env, p, &fx)
	return fx
}

// Run sends what the QP may send now, within env.Budget: requester
// packets, the coalesced acknowledgement it owes, the responses of a
// READ being answered. It also reports a failed send WQE that reached the
// head of the send queue.
func (q *QP) Run(env *Env) Effects {
	var fx Effects
	q.req.run(q, env, &fx)
	q.resp.flushAck(q, env)
	q.resp.runReadReply(q, env, &fx)
	q.comp.checkHead(q, &fx)
	q.settle(env)
	return fx
}

// settle makes the device window count the packets the requester has in
// flight now.
func (q *QP) settle(env *Env) {
	if n := q.inFlight(); n != q.req.win.held {
		q.req.win.settle(env, n)
	}
}

// inFlight returns the packets the RC requester has sent and not seen
// acknowledged (0 for other QPs and an inactive requester).
func (q *QP) inFlight() int {
	if q.P.Type != verbs.QPTypeRC || q.req.state == RequesterInactive {
		return 0
	}
	return int(q.req.maxPSN.Diff(q.req.ackPSN))
}

// FlushAck sends the coalesced acknowledgement the QP owes, if any: what
// a QP being destroyed still sends (the requests it executed deserve
// their ACK, as rxe's destroy lets its responder finish).
func (q *QP) FlushAck(env *Env) { q.resp.flushAck(q, env) }

// Timer handles the expiry of the QP's timer (Deadline): the transport
// timer or an RNR wait.
func (q *QP) Timer(env *Env) Effects {
	var fx Effects
	if d := q.rate.deadline(); !d.IsZero() && !env.Now.Before(d) {
		q.rate.waitUntil = time.Time{}
		fx.Run = true // the pacer lets the QP go on
	}
	q.req.timer(q, env, &fx)
	q.flushAckOnFail(env, &fx)
	q.settle(env)
	return fx
}

// flushAckOnFail sends the ACK the responder owes before a send failure
// moves the QP to an error state: the requests it executed were
// delivered, and their requester must learn it (rxe acknowledges each
// request as it executes it).
func (q *QP) flushAckOnFail(env *Env, fx *Effects) {
	if fx.Fail == FailSend {
		q.resp.flushAck(q, env)
	}
}

// Deadline returns when Timer should be called next; zero when no timer
// runs.
func (q *QP) Deadline() time.Time {
	// The common case, inlined: only the transport timer. Comparing with
	// the zero Time (cleared fields hold exactly that) keeps Deadline
	// within the inlining budget, which IsZero twice exceeds; the workers
	// call it after every packet and Run.
	if q.rate.waitUntil == (time.Time{}) { //nolint:staticcheck // QF1009: a zero-value test, not a time comparison
		return q.req.deadline
	}
	return q.earliestDeadline()
}

// earliestDeadline returns the earliest of the QP's deadlines.
func (q *QP) earliestDeadline() time.Time {
	d := q.req.deadline
	if t := q.rate.waitUntil; !t.IsZero() && (d.IsZero() || t.Before(d)) {
		d = t
	}
	return d
}

// CompleteHead completes the send WQE at the head of the send queue with
// status (used for Effects.FailSend).
func (q *QP) CompleteHead(status verbs.WCStatus) {
	if q.SQ.Len() > 0 {
		q.completeHead(status)
	}
}

// CompleteRecvInProgress completes the receive WQE a message in progress
// holds, if any, with status (used for Effects.FailRecv).
func (q *QP) CompleteRecvInProgress(status verbs.WCStatus) {
	q.resp.completeInProgress(q, status)
}

// TakeRecvInProgress removes the receive WQE a message in progress
// holds, if any, into dst: a QP entering the error state flushes it
// before its receive queue (it is the oldest).
func (q *QP) TakeRecvInProgress(dst *verbs.RecvWQE) bool {
	return q.resp.takeInProgress(q, dst)
}

// SQDrainNotify asks for Effects.SQDrained when no started send WQE is
// left (IBTA 11.6.3.1: RTS to SQD with notification); it reports true
// when none is left now.
func (q *QP) SQDrainNotify() bool {
	if q.SQ.Len() == 0 || q.SQ.At(0).state == WQEPosted {
		return true
	}
	q.req.drainNotify = true
	return false
}

// InternalSlots is how many requests of its own (Issue) the transport may
// have in a QP's send queue at once; the qp package sizes the ring for
// the application's max_send_wr plus these.
const InternalSlots = 8

// Internal returns how many requests in the send queue the transport
// issued on its own: the rest are the application's, bounded by
// max_send_wr.
func (q *QP) Internal() int { return q.internal }

// Issue queues a request the transport makes on its own behalf (the
// rendezvous READ of a tag-matching SRQ fetches the sender's data this
// way): it takes its PSNs in order with the application's requests and
// is retried like them, but its outcome goes to done (called with the
// QP's lock held, from a protocol call or a flush) instead of the send
// CQ. The scatter list is the caller's and must stay valid until done is
// called. It reports false, queueing nothing, when the requester is not
// running or InternalSlots requests are already queued.
func (q *QP) Issue(wr verbs.SendWR, sgl []verbs.SGE, done func(status verbs.WCStatus)) bool {
	w := q.issueSlot(done)
	if w == nil {
		return false
	}
	*w = SendWQE{WR: wr, SGL: sgl, done: done}
	w.WR.Next, w.WR.SGList = nil, nil
	return true
}

// IssueInline is Issue for a SEND whose payload is data (the FIN of a
// tag-matching rendezvous), copied into the request as IBV_SEND_INLINE
// data is.
func (q *QP) IssueInline(wr verbs.SendWR, data []byte, done func(status verbs.WCStatus)) bool {
	w := q.issueSlot(done)
	if w == nil {
		return false
	}
	inline := w.Inline[:0] // the slot's storage from an earlier request, if any
	*w = SendWQE{WR: wr, Inline: append(inline, data...), done: done}
	w.WR.Next, w.WR.SGList = nil, nil
	w.WR.SendFlags |= verbs.SendInline
	return true
}

// issueSlot takes a send queue slot for a request of the transport's
// own, or returns nil when Issue may not queue one.
func (q *QP) issueSlot(done func(verbs.WCStatus)) *SendWQE {
	if q.req.state == RequesterInactive || q.internal >= InternalSlots || q.SQ.Full() || done == nil {
		return nil
	}
	q.internal++
	return q.SQ.PushSlot()
}

// FlushSend completes every queued send WQE with IBV_WC_WR_FLUSH_ERR,
// oldest first, whether signaled or not (a QP entering ERR or SQE); the
// transport's own requests learn it through their done.
func (q *QP) FlushSend() {
	for q.SQ.Len() > 0 {
		w := q.SQ.At(0)
		if w.done != nil {
			q.internal--
			w.done(verbs.WCWRFlushErr)
		} else {
			wc := verbs.WC{WRID: w.WR.WRID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCOpcodeFor(w.WR.Opcode), QPNum: q.P.QPN}
			q.SendCQ.Push(wc, false)
		}
		q.SQ.Drop(1) // zeroes the slot
	}
	q.req.next, q.req.off = 0, 0
}

// completeHead completes the WQE at the head of the send queue: a
// completion if it was signaled or failed (or its done, for the
// transport's own), then it leaves the queue.
func (q *QP) completeHead(status verbs.WCStatus) {
	w := q.SQ.At(0)
	r := &q.req
	if (w.state == WQEStarted || w.state == WQEResponded) && w.readAtomic() && r.rdAtomic > 0 {
		// A READ or ATOMIC is outstanding until it completes, in order,
		// not when its response arrives: the responder keeps only
		// max_dest_rd_atomic of them to replay (IBTA 9.7.7.x). A failed
		// one stopped counting when it failed.
		r.rdAtomic--
	}
	switch {
	case w.done != nil:
		q.internal--
		w.done(status)
	case w.Signaled || status != verbs.WCSuccess:
		wc := verbs.WC{
			WRID:    w.WR.WRID,
			Status:  status,
			Opcode:  verbs.WCOpcodeFor(w.WR.Opcode),
			ByteLen: w.length,
			QPNum:   q.P.QPN,
		}
		q.SendCQ.Push(wc, false)
	}
	r.headCompleted(q, w)
	q.SQ.Drop(1) // zeroes the slot
}

// transportOf returns the opcode transport of a QP type.
func transportOf(t verbs.QPType) wire.Transport {
	switch t {
	case verbs.QPTypeUC:
		return wire.TransportUC
	case verbs.QPTypeUD:
		return wire.TransportUD
	default:
		return wire.TransportRC
	}
}
