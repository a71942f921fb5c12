package transport

import (
	"time"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// maxUnackedPSNs is the requester's window: PSNs sent and not yet
// acknowledged (rxe's RXE_MAX_UNACKED_PSNS).
const maxUnackedPSNs = 128

// ackReqInterval: a requester sets AckReq at least this often within a
// long message, so that the responder acknowledges before the window
// fills.
const ackReqInterval = 64

// RequesterState is what the requester is doing (IBTA 9.7.4, the
// requester side of an RC, UC or UD QP).
//
//	Inactive --start (RTR->RTS)--> Sending <--> GoBack
//	                                  |   ^
//	                        RNR NAK   v   | RNR timer (via GoBack)
//	                                RNRWait
//
// Every state moves to Inactive when the QP leaves RTS and SQD for SQE,
// ERR or RESET.
type RequesterState uint8

// Requester states.
const (
	// RequesterInactive: the QP is not in RTS or SQD; nothing is sent.
	RequesterInactive RequesterState = iota
	// RequesterSending: sends what the send queue, the window, fences
	// and max_rd_atomic allow (in SQD: only WQEs already started).
	RequesterSending
	// RequesterGoBack: a timer expired; the next Run resends from
	// resumePSN (go-back-N, IBTA 9.7.6.1).
	RequesterGoBack
	// RequesterRNRWait: an RNR NAK arrived; nothing is sent until its
	// timer expires, then the requester goes back to the NAKed PSN
	// (IBTA 9.7.5.2.8).
	RequesterRNRWait
)

var requesterStateNames = [...]string{"Inactive", "Sending", "GoBack", "RNRWait"}

func (s RequesterState) String() string { return requesterStateNames[s] }

// Requester turns send WQEs into packets: it assigns PSNs, segments
// messages into path-MTU packets, keeps the window, and goes back to
// resend when the completer or a timer says so.
type Requester struct {
	state RequesterState
	psn   wire.PSN // next PSN to send
	// maxPSN is one past the highest PSN ever sent: a go-back rewinds
	// psn, not maxPSN, and an acknowledgement may name any PSN before it.
	maxPSN wire.PSN
	next   int    // SQ position (from the head) of the WQE being sent
	off    uint32 // bytes of that WQE already sent
	// ackPSN is the oldest PSN not yet acknowledged.
	ackPSN wire.PSN
	// rdAtomic counts READ and ATOMIC requests started and not completed.
	rdAtomic int
	// mayBeParted: a started WQE may be a READ asked for in parts
	// (SendWQE.parted). Set where a READ is parted, cleared by
	// readsOutstanding when it finds none, so that with no READ in
	// parts it need not walk the started WQEs.
	mayBeParted bool
	// retries and rnrRetries are what is left of retry_cnt and
	// rnr_retry (-1: forever).
	retries, rnrRetries int
	// resumePSN is where sending resumes (GoBack, RNRWait).
	resumePSN wire.PSN
	// deadline is when the timer expires (the transport timer while PSNs
	// are outstanding, the RNR timer in RNRWait); zero when none runs.
	deadline time.Time
	// drainNotify: in SQD, report SQDrained when the last started WQE
	// completes.
	drainNotify bool
	// win is the congestion window (RC).
	win window
}

// setState is the requester's one transition point.
func (r *Requester) setState(s RequesterState) {
	if r.state == RequesterRNRWait || s == RequesterInactive || s == RequesterGoBack {
		// The RNR timer ends with its wait; a requester that stops or
		// is about to go back keeps no timer (Run arms it again).
		r.deadline = time.Time{}
	}
	if s == RequesterInactive {
		r.next, r.off, r.rdAtomic, r.drainNotify = 0, 0, 0, false
		r.win.release()
	}
	r.state = s
}

// start prepares the requester on entry to RTS.
func (r *Requester) start(q *QP, psn wire.PSN) {
	r.psn, r.ackPSN, r.maxPSN = psn, psn, psn
	r.next, r.off, r.rdAtomic = 0, 0, 0
	r.win.release()
	r.win = window{}
	r.resetRetries(q)
	r.setState(RequesterSending)
}

// stop ends the requester's work (SQE, ERR).
func (r *Requester) stop() { r.setState(RequesterInactive) }

// resetRetries gives the retry budgets their full value: on start, after
// progress, and after a modify sets them.
func (r *Requester) resetRetries(q *QP) {
	r.retries = int(q.P.RetryCnt)
	if q.P.RetryCnt == 7 && q.P.RetryForever {
		r.retries = -1
	}
	r.rnrRetries = int(q.P.RNRRetry)
	if q.P.RNRRetry == 7 {
		r.rnrRetries = -1 // IBTA 9.7.5.2.8: 7 means retry forever
	}
}

// run sends what the send queue and the window allow, within the budget.
func (r *Requester) run(q *QP, env *Env, fx *Effects) {
	switch r.state {
	case RequesterInactive, RequesterRNRWait:
		return
	case RequesterGoBack:
		psn := r.resumePSN
		if r.ackPSN.Diff(psn) > 0 {
			psn = r.ackPSN // acknowledged since the timer asked
		}
		r.goBack(q, env, psn)
		r.setState(RequesterSending)
	case RequesterSending:
	}
	sqd := q.state == verbs.QPStateSQD
	built := 0 // new packets built in this call (not yet in the device window)
	// The device window's room, read once a Run, when a new packet first
	// needs it (a soft bound: the other workers' QPs may take some of it
	// meanwhile); -1 until then.
	room := -1
	pacing := q.rate.pacing(env)
	if !pacing && !q.rate.waitUntil.IsZero() {
		q.rate.waitUntil = time.Time{} // Run is running: the wait is over (allow does this when pacing)
	}
	for r.next < q.SQ.Len() {
		w := q.SQ.At(r.next)
		if w.state == WQEFailed {
			break // nothing after a failed WQE is sent
		}
		if w.state == WQEResponded {
			// A READ or ATOMIC answered while earlier requests are sent
			// again after a go-back: nothing of it is resent.
			r.next++
			r.off = 0
			continue
		}
		if w.state == WQEStarted && r.off == 0 && !w.holdsPSN(r.psn) {
			// Sent before and reached again after a go-back: it keeps
			// its PSNs (a READ asks only for what is missing).
			r.psn = w.resumePSN()
		}
		if w.state == WQEStarted && w.WR.Opcode == verbs.WRRDMARead && w.holdsPSN(r.psn) {
			// A READ asked for in parts asks from its first missing
			// response once everything it asked for arrived; while
			// responses are missing, it asks for the next part only
			// as readAsk allows.
			if w.respNext.Diff(r.psn) >= 0 {
				r.psn = w.respNext
			} else if r.psn.Diff(w.reqTo) >= 0 && r.readAsk(q, env, w, r.psn) == 0 {
				break
			}
		}
		// A WQE starts (takes its PSNs) only when a packet of it can
		// leave now: the window and the budget come first, so that
		// nothing is left started but unsent (SQD would then send it).
		if q.P.Type == verbs.QPTypeRC {
			if int(r.psn.Diff(r.ackPSN)) >= r.win.size(env) {
				break
			}
			if w.WR.Opcode == verbs.WRRDMARead && r.readWaits(q, env, w) {
				break
			}
			if r.psn == r.maxPSN && room < 0 {
				room = max(r.win.deviceRoom(env), 0)
			}
			if r.psn == r.maxPSN && built >= room {
				// The device has as many packets in flight as it
				// allows: the scheduler runs the QP again when
				// acknowledgements to any QP make room.
				fx.DeviceWait = true
				env.Stats.DeviceWaits.Add(1)
				break
			}
		}
		if !env.budgetLeft() {
			fx.More = true
			break
		}
		if pacing && !q.rate.allow(env, int(q.P.MTU)+maxHeaders) {
			break // Deadline says when the pacer lets it go on
		}
		if w.state == WQEPosted {
			if !r.mayStart(q, w, sqd) {
				break
			}
			if !r.startWQE(q, env, w) {
				if w.state == WQEFailed {
					break // checkHead reports it when it reaches the head
				}
				continue // a UD message too long for the MTU: completed unsent
			}
		}
		if r.psn == r.maxPSN {
			built++
		}
		// The packet after which the device window or the pacer stops
		// the requester asks for an ACK, as the one filling the window
		// does: the responder acknowledges only what asks (rxe), and
		// without it the requester would wait for its transport timer.
		stops := (q.P.Type == verbs.QPTypeRC && room >= 0 && built >= room) || (pacing && !q.rate.hasRoomAfter(env, q.P.MTU))
		if !r.sendPacket(q, env, w, stops) {
			break
		}
	}
	if q.P.Type == verbs.QPTypeRC && r.maxPSN != r.ackPSN && r.deadline.IsZero() {
		r.armTransportTimer(q, env.Now)
	}
	r.checkDrained(q, fx)
}

// startPSN is the first PSN of the WQE at r.next when it starts: a new
// WQE's PSNs follow the previous WQE's.
func (r *Requester) startPSN(q *QP) wire.PSN {
	if r.next > 0 {
		if prev := q.SQ.At(r.next - 1); prev.state != WQEPosted && prev.state != WQEFailed {
			return prev.lastPSN.Add(1)
		}
	}
	return r.psn
}

// readPartPSNs bounds the parts a READ longer than the window is asked
// for in: each part lies within one block of readPartPSNs responses
// counted from the READ's first, so a part asked for again after a loss
// is known without a record of every part (it ends at the next multiple,
// or where the asking ended), and the next part may be asked for while
// the last one's responses still arrive.
const readPartPSNs = 32

// readWaits reports whether the READ w, about to ask for responses from
// the next PSN on, waits (readAsk).
func (r *Requester) readWaits(q *QP, env *Env, w *SendWQE) bool {
	psn := r.psn
	switch {
	case w.state == WQEPosted:
		psn = r.startPSN(q)
	case w.holdsPSN(psn) && psn.Diff(w.reqTo) >= 0:
	default:
		return false // asks again for what it asked for before
	}
	return r.readAsk(q, env, w, psn) == 0
}

// readAsk returns how many responses the READ w asks for in a new request
// starting at psn, or 0 when that request waits. Each request is a READ
// of its own to the responder:
//   - a READ the window could take whole is asked for whole, once the
//     window has room for all of it (asking for the room's worth now would
//     leave the rest for later, and every request behind it waiting);
//   - a longer one is asked for in parts within the window's room, each
//     within one block of readPartPSNs (w.parted);
//   - while responses it asked for are missing, the next part is asked for
//     only whole (a full block, or the READ's last) and only while fewer
//     READs than max_rd_atomic are outstanding, each part counting as one:
//     the responder holds a resource for each.
func (r *Requester) readAsk(q *QP, env *Env, w *SendWQE, psn wire.PSN) int {
	first := w.state == WQEPosted || w.reqTo == w.firstPSN
	var rest int
	if w.state == WQEPosted {
		rest = int(packetsFor(w.messageLength(), q.P.MTU))
	} else {
		rest = int(w.lastPSN.Diff(psn)) + 1
	}
	size := r.win.size(env)
	room := size - int(psn.Diff(r.ackPSN))
	if room <= 0 {
		return 0
	}
	if first && rest <= size {
		if rest > room {
			return 0
		}
		return rest
	}
	off := 0
	if w.state != WQEPosted {
		off = int(psn.Diff(w.firstPSN))
	}
	part := min(rest, readPartPSNs-off%readPartPSNs)
	if w.state == WQEStarted && w.respNext != w.reqTo {
		if off%readPartPSNs != 0 || room < part || r.readsOutstanding(q)+1 > max(1, int(q.P.MaxRdAtomic)) {
			return 0
		}
	}
	return min(part, room)
}

// readsOutstanding counts the READ and ATOMIC requests outstanding, the
// parts of a READ asked for in parts each as one (a READ asked for whole
// is one request, however many blocks it spans).
func (r *Requester) readsOutstanding(q *QP) int {
	n := r.rdAtomic
	if !r.mayBeParted {
		return n
	}
	parted := false
	for i := 0; i < q.SQ.Len(); i++ {
		w := q.SQ.At(i)
		if w.state == WQEPosted || w.state == WQEFailed {
			break
		}
		if !w.parted {
			continue
		}
		parted = true
		if w.state != WQEStarted || w.respNext.Diff(w.reqTo) >= 0 {
			continue
		}
		// Parts beyond the first: each part lies within one block, so
		// the multiples of readPartPSNs strictly between the first
		// missing response and the end of the asked count them.
		from := uint32(w.respNext.Diff(w.firstPSN)) / readPartPSNs
		to := (uint32(w.reqTo.Diff(w.firstPSN)) - 1) / readPartPSNs
		n += int(to - from)
	}
	r.mayBeParted = parted
	return n
}

// mayStart reports whether a posted WQE may start now.
func (r *Requester) mayStart(q *QP, w *SendWQE, sqd bool) bool {
	switch {
	case sqd:
		return false // SQD: started WQEs finish, new ones wait (IBTA 11.6.3.1)
	case w.WR.SendFlags&verbs.SendFence != 0 && r.rdAtomic > 0:
		return false // IBV_SEND_FENCE waits for earlier READs and ATOMICs
	case w.readAtomic() && r.readsOutstanding(q) >= max(1, int(q.P.MaxRdAtomic)):
		// max_rd_atomic READs and ATOMICs are outstanding, each part of
		// a READ asked for in parts counting as one: the responder
		// remembers only that many, and one it forgot cannot be asked
		// for again.
		return false
	}
	return true
}

// startWQE checks a WQE's local memory and gives it its PSNs. It reports
// false when the WQE was not started: it failed a local check (WQEFailed),
// or it was a UD message longer than the MTU, completed without sending.
func (r *Requester) startWQE(q *QP, env *Env, w *SendWQE) bool {
	length := w.messageLength()
	w.length = length
	mtu := q.P.MTU
	if q.P.Type == verbs.QPTypeUD && length > mtu {
		// IBTA C10-93.1.1: a UD message longer than the port MTU is not
		// sent, "Further, the CI shall not generate an error due to this
		// condition" (rxe does the same).
		if q.P.UDOversizeError {
			r.fail(w, verbs.WCLocLenErr)
			return false
		}
		q.completeHead(verbs.WCSuccess) // UD completes in order: it is the head
		return false
	}
	if w.InlineBad || !r.localSGLOK(q, env, w) {
		r.fail(w, verbs.WCLocProtErr)
		return false
	}
	n := packetsFor(length, mtu) // a READ takes one PSN per response packet
	if w.WR.Opcode.IsAtomic() {
		n = 1
	}
	r.psn = r.startPSN(q)
	w.setState(WQEStarted)
	w.firstPSN, w.lastPSN, w.respNext, w.reqTo = r.psn, r.psn.Add(n-1), r.psn, r.psn
	w.parted = false
	w.seen, w.rerequested = [2]uint64{}, false
	r.off = 0
	if w.readAtomic() {
		r.rdAtomic++
	}
	return true
}

// fail marks a WQE failed with a local error: it completes with status,
// in order, when everything before it has (as rxe's completer does), and
// nothing after it is sent.
func (r *Requester) fail(w *SendWQE, status verbs.WCStatus) {
	w.setState(WQEFailed)
	w.status = status
}

// localSGLOK checks that every scatter element names memory of the QP's
// PD: readable for sends and writes, writable (LOCAL_WRITE) for the
// destination of READs and atomics.
func (r *Requester) localSGLOK(q *QP, env *Env, w *SendWQE) bool {
	if w.WR.SendFlags&verbs.SendInline != 0 {
		return true
	}
	need := verbs.AccessFlags(0)
	if w.readAtomic() {
		need = verbs.AccessLocalWrite
	}
	for _, sge := range w.SGL {
		if sge.Length == 0 {
			continue
		}
		if _, ok := env.Mem.Lookup(sge.LKey, q.P.PD, sge.Addr, sge.Length, need); !ok {
			return false
		}
	}
	return true
}

// sendPacket builds the next packet of the WQE at r.next and reports
// whether it could: a source region that went away fails the WQE
// (IBV_WC_LOC_PROT_ERR, as rxe) and nothing of the packet is sent.
func (r *Requester) sendPacket(q *QP, env *Env, w *SendWQE, stops bool) bool {
	mtu := q.P.MTU
	total := w.length
	var h wire.Headers
	h.BTH.PKey = 0xffff
	h.BTH.PSN = r.psn
	h.BTH.DestQP = q.P.DestQPN
	dst := &q.P.Path
	var payload, readPSNs uint32
	pos := wire.PosOnly
	switch {
	case w.readAtomic():
		h.BTH.OpCode = opcodeFor(q.P.Type, w, pos)
		h.BTH.AckReq = true
		if w.WR.Opcode == verbs.WRRDMARead {
			// A READ sent again asks only for what is missing: r.psn is
			// then the first missing response's PSN (IBTA 9.7.6.1.4).
			// A READ longer than the window is asked for the same way,
			// in parts within the window (readAsk), so that the
			// responses in flight follow the window as requests do:
			// each part is a READ request of its own to the responder.
			// A part's end, once asked for, never moves: whichever
			// request for it the responder executed, what is asked
			// again lies within it (rxe and softhca replay a READ only
			// within the range they remember).
			done := min(uint32(r.psn.Diff(w.firstPSN))*mtu, total)
			if r.psn.Diff(w.reqTo) < 0 {
				// Asked for before: up to the end of the request it was
				// asked in (a part ends at the next multiple of
				// readPartPSNs at the latest).
				readPSNs = uint32(w.reqTo.Diff(r.psn))
				if w.parted {
					off := uint32(r.psn.Diff(w.firstPSN))
					readPSNs = min(readPSNs, (off/readPartPSNs+1)*readPartPSNs-off)
				}
			} else {
				readPSNs = uint32(max(r.readAsk(q, env, w, r.psn), 1))
				if w.reqTo == w.firstPSN && r.psn == w.firstPSN && int(readPSNs) <= int(w.lastPSN.Diff(r.psn)) {
					w.parted = true // the first request does not ask for all of it
					r.mayBeParted = true
				}
				w.reqTo = r.psn.Add(readPSNs)
			}
			h.RETH = wire.RETHFields{VirtualAddress: w.WR.RDMA.RemoteAddr + uint64(done), RKey: w.WR.RDMA.RKey,
				DMALength: min(total-done, readPSNs*mtu)}
		} else {
			a := &w.WR.Atomic
			h.AtomicETH = wire.AtomicETHFields{VirtualAddress: a.RemoteAddr, RKey: a.RKey, SwapAddData: a.CompareAdd}
			if w.WR.Opcode == verbs.WRAtomicCmpAndSwp {
				// CmpSwap: compare with CompareAdd, swap in Swap.
				h.AtomicETH.SwapAddData, h.AtomicETH.CompareData = a.Swap, a.CompareAdd
			}
		}
	default:
		first := r.off == 0
		payload = min(total-r.off, mtu)
		last := r.off+payload == total
		switch {
		case first && last:
			pos = wire.PosOnly
		case first:
			pos = wire.PosFirst
		case last:
			pos = wire.PosLast
		default:
			pos = wire.PosMiddle
		}
		h.BTH.OpCode = opcodeFor(q.P.Type, w, pos)
		if q.P.Type == verbs.QPTypeRC {
			idx := uint32(r.psn.Diff(w.firstPSN))
			// The packet that fills the window asks for an ACK: nothing
			// more leaves until one comes.
			fills := int(r.psn.Add(1).Diff(r.ackPSN)) >= r.win.size(env)
			h.BTH.AckReq = last || fills || stops || idx%ackReqInterval == ackReqInterval-1
		}
		h.BTH.SolicitedEvent = last && w.WR.SendFlags&verbs.SendSolicited != 0
		if h.BTH.OpCode.Info().Headers&wire.HasRETH != 0 {
			h.RETH = wire.RETHFields{VirtualAddress: w.WR.RDMA.RemoteAddr, RKey: w.WR.RDMA.RKey, DMALength: total}
		}
		h.ImmDt = w.WR.ImmData
		h.IETH = w.WR.InvalidateRKey
		if q.P.Type == verbs.QPTypeUD {
			dst = &w.Dst
			h.BTH.DestQP = w.WR.UD.RemoteQPN
			qkey := w.WR.UD.RemoteQKey
			if qkey&0x80000000 != 0 {
				qkey = q.P.QKey // IBTA 10.2.5: a Q_Key with the high bit set means "use the QP's"
			}
			h.DETH = wire.DETHFields{QKey: qkey, SrcQP: q.P.QPN}
		}
	}
	if r.psn.Diff(r.maxPSN) < 0 {
		env.Stats.RetxPackets.Add(1)
		q.counts.RetransmittedPackets++
	}
	buf := env.Out.Buffer()
	hl := h.Encode(buf, int(payload))
	size := h.PacketLen(int(payload))
	var b []byte
	if env.Gather != nil && payload >= gatherMin && q.P.Type == verbs.QPTypeRC {
		// Only RC: a UC or UD send completes as its last packet is
		// built, before the batch leaves, and its application may then
		// reuse the buffer; an RC send completes on its ACK.
		b = inPlace(env.Mem, q.P.PD, w, r.off, payload)
	}
	if b != nil {
		q.emitGather(env, buf, hl, size, b, dst)
	} else {
		if !gather(env.Mem, q.P.PD, w, r.off, buf[hl:hl+int(payload)]) {
			r.fail(w, verbs.WCLocProtErr)
			return false
		}
		q.icrc.Seal(dst, buf[:size])
		q.emit(env, size, dst)
	}
	env.spend(size)
	q.rate.sent(env, size)

	switch {
	case w.WR.Opcode == verbs.WRRDMARead:
		r.psn = r.psn.Add(readPSNs)
		if r.psn.Diff(w.lastPSN) > 0 {
			r.next++
		}
	case w.WR.Opcode.IsAtomic():
		r.psn = r.psn.Add(1)
		r.next++
	default:
		r.psn = r.psn.Add(1)
		r.off += payload
		if r.off == total {
			r.off = 0
			r.next++
			if q.P.Type != verbs.QPTypeRC {
				// UC and UD complete when the last packet is sent.
				q.completeHead(verbs.WCSuccess)
			}
		}
	}
	if r.psn.Diff(r.maxPSN) > 0 {
		r.maxPSN = r.psn
	}
	return true
}

// gatherMin is the smallest payload a requester sends from where it lies
// (Env.Gather) rather than copying it: below it, the copy costs less than
// the link's extra iovec.
const gatherMin = 1024

// opcodeFor returns the opcode of a packet of a send WQE at a position
// in its message (IBTA 9.2, table 38).
func opcodeFor(t verbs.QPType, w *SendWQE, pos wire.Position) wire.OpCode {
	base := wire.OpCode(wire.TransportRC)
	if t == verbs.QPTypeUC {
		base = wire.OpCode(wire.TransportUC)
	}
	var low wire.OpCode
	switch w.WR.Opcode {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv:
		if t == verbs.QPTypeUD {
			if w.WR.Opcode == verbs.WRSendWithImm {
				return wire.UDSendOnlyWithImmediate
			}
			return wire.UDSendOnly
		}
		low = [...]wire.OpCode{wire.PosOnly: wire.RCSendOnly, wire.PosFirst: wire.RCSendFirst,
			wire.PosMiddle: wire.RCSendMiddle, wire.PosLast: wire.RCSendLast}[pos]
		if pos.Last() {
			switch w.WR.Opcode {
			case verbs.WRSendWithImm:
				low++ // Last/Only with Immediate follow Last/Only
			case verbs.WRSendWithInv:
				if pos == wire.PosOnly {
					return wire.RCSendOnlyWithInvalidate
				}
				return wire.RCSendLastWithInvalidate
			default: // SEND: Last/Only
			}
		}
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		low = [...]wire.OpCode{wire.PosOnly: wire.RCRDMAWriteOnly, wire.PosFirst: wire.RCRDMAWriteFirst,
			wire.PosMiddle: wire.RCRDMAWriteMiddle, wire.PosLast: wire.RCRDMAWriteLast}[pos]
		if pos.Last() && w.WR.Opcode == verbs.WRRDMAWriteWithImm {
			low++
		}
	case verbs.WRRDMARead:
		return wire.RCRDMAReadRequest
	case verbs.WRAtomicCmpAndSwp:
		return wire.RCCompareSwap
	case verbs.WRAtomicFetchAndAdd:
		return wire.RCFetchAdd
	default: // LOCAL_INV and BIND_MW are refused when posted
	}
	return base | low
}

// headCompleted keeps the requester's position right when the WQE at the
// head of the send queue leaves it.
func (r *Requester) headCompleted(q *QP, w *SendWQE) {
	if r.next == 0 && w.state != WQEPosted && w.state != WQEFailed {
		// The requester was about to send this WQE again (after a
		// go-back): what follows starts after its PSNs.
		if after := w.lastPSN.Add(1); after.Diff(r.psn) > 0 {
			r.psn = after
		}
		r.off = 0
	}
	if r.next > 0 {
		r.next--
	}
}

// checkDrained reports SQDrained once no started WQE is left after an
// RTS to SQD transition that asked for it.
func (r *Requester) checkDrained(q *QP, fx *Effects) {
	if !r.drainNotify {
		return
	}
	if q.SQ.Len() == 0 || q.SQ.At(0).state == WQEPosted {
		r.drainNotify = false
		fx.SQDrained = true
	}
}

// armTransportTimer starts the transport timer if the QP has one: 4.096
// us * 2^timeout (IBTA 9.7.6.1.3); timeout 0 means none.
func (r *Requester) armTransportTimer(q *QP, now time.Time) {
	if d := timeoutDuration(q.P.Timeout); d > 0 {
		r.deadline = now.Add(d)
	}
}

// timeoutDuration is the transport timer for a timeout attribute.
func timeoutDuration(timeout uint8) time.Duration {
	if timeout == 0 {
		return 0
	}
	return time.Duration(4096*(uint64(1)<<timeout)) * time.Nanosecond
}

// spendRetry takes one retry from a budget (retry_cnt or rnr_retry; -1
// is forever). With none left, the head WQE fails with status and
// spendRetry reports false.
func spendRetry(left *int, status verbs.WCStatus, fx *Effects) bool {
	if *left == 0 {
		fx.fail(FailSend, status)
		return false
	}
	if *left > 0 {
		*left--
	}
	return true
}

// rnrWait stops sending until the RNR timer expires, then resumes at psn.
func (r *Requester) rnrWait(psn wire.PSN, until time.Time) {
	r.setState(RequesterRNRWait)
	r.resumePSN = psn
	r.deadline = until
}

// timer handles the expiry of the requester's timer: the end of an RNR
// wait, or a retransmission timeout (IBTA 9.7.6.1.3): go back to the
// oldest unacknowledged PSN, or fail the head WQE once retry_cnt retries
// are spent.
func (r *Requester) timer(q *QP, env *Env, fx *Effects) {
	if r.deadline.IsZero() || env.Now.Before(r.deadline) {
		return // not yet: Deadline says when
	}
	r.deadline = time.Time{}
	switch r.state {
	case RequesterInactive, RequesterGoBack:
		return
	case RequesterRNRWait:
		r.setState(RequesterGoBack) // resumePSN is the NAKed PSN
		fx.Run = true
		return
	case RequesterSending:
	}
	// A READ or ATOMIC whose response arrived completes here if nothing
	// else completed it.
	q.comp.ackUpTo(q, env, r.ackPSN.Sub(1), fx)
	if fx.Fail != FailNone || r.maxPSN == r.ackPSN || q.SQ.Len() == 0 {
		return
	}
	env.Stats.RetryTimeouts.Add(1)
	q.counts.RetryTimeouts++
	r.win.congestion(env, r.ackPSN, r.maxPSN, true)
	if !spendRetry(&r.retries, verbs.WCRetryExcErr, fx) {
		return
	}
	// The go-back happens in the next Run, after the rest of this batch:
	// a response in the same batch must still be judged against what
	// was sent.
	r.resumePSN = r.ackPSN
	r.setState(RequesterGoBack)
	fx.Run = true
}

// goBack rewinds the requester to resend from psn (go-back-N, IBTA
// 9.7.6.1): the WQE holding psn restarts there and every later WQE is
// sent again, with the PSNs it had. A READ asks again only for the
// responses still missing (a new request whose PSN, address and length
// start at the first missing response); an ATOMIC is sent again whole
// (the responder replays its result); a READ or ATOMIC already answered
// is not sent again. An unfinished READ or ATOMIC before psn is where the
// requester goes back to; finished ones awaiting earlier
// acknowledgements are skipped. A failed WQE stays failed.
func (r *Requester) goBack(q *QP, env *Env, psn wire.PSN) {
	if psn == r.maxPSN {
		return // nothing sent at or beyond psn
	}
	for i := 0; i < q.SQ.Len(); i++ {
		w := q.SQ.At(i)
		if w.state == WQEPosted || w.state == WQEFailed {
			break
		}
		if w.readAtomic() {
			if w.state == WQEResponded {
				continue
			}
			// An unfinished READ or ATOMIC before psn restarts here
			// too: resending later requests does not bring its
			// responses.
		} else if psn.Diff(w.lastPSN) > 0 {
			continue
		}
		env.Stats.Retransmits.Add(1)
		q.counts.Retransmits++
		switch {
		case w.WR.Opcode == verbs.WRRDMARead:
			psn = w.respNext
			r.off = 0
		case w.WR.Opcode.IsAtomic():
			psn = w.firstPSN
			r.off = 0
		default:
			if psn.Diff(w.firstPSN) < 0 {
				psn = w.firstPSN
			}
			r.off = uint32(psn.Diff(w.firstPSN)) * q.P.MTU
		}
		r.next = i
		r.psn = psn
		return
	}
}

// catchUp moves the requester past what an acknowledgement covered when
// it was about to send it again (after a go-back, acknowledgements of
// packets sent before it still arrive).
func (r *Requester) catchUp(q *QP) {
	if r.ackPSN.Diff(r.psn) <= 0 {
		return
	}
	for i := r.next; i < q.SQ.Len(); i++ {
		w := q.SQ.At(i)
		if w.state == WQEPosted || w.state == WQEFailed {
			r.next, r.off, r.psn = i, 0, r.ackPSN
			return
		}
		if w.lastPSN.Diff(r.ackPSN) < 0 {
			continue // wholly acknowledged; it completes in order
		}
		r.next, r.off = i, 0
		switch {
		case w.readAtomic():
			r.psn = w.resumePSN()
		default:
			r.psn = r.ackPSN
			r.off = uint32(r.ackPSN.Diff(w.firstPSN)) * q.P.MTU
		}
		return
	}
	r.next, r.off, r.psn = q.SQ.Len(), 0, r.ackPSN
}
