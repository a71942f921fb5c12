package qp

import (
	"encoding/binary"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/mr"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// maxUnackedPSNs is the requester's window: PSNs sent and not yet
// acknowledged (rxe's RXE_MAX_UNACKED_PSNS).
const maxUnackedPSNs = 128

// ackReqInterval: a requester sets AckReq at least this often within a
// long message.
const ackReqInterval = 64

// engState is a QP's transport state. It is protected by the QP's mutex
// and touched only by the QP's worker and by state changes.
type engState struct {
	e      *Engine
	dirty  bool     // queued in its worker's dirty list
	remote wire.Net // RC/UC peer, set on entry to RTR

	// Requester.
	psn        wire.PSN // next PSN to send
	next       int      // SQ position (from the head) of the WQE being sent
	off        uint32   // bytes of that WQE already sent
	ackPSN     wire.PSN // oldest PSN not yet acknowledged
	rdAtomic   int      // READ and ATOMIC requests started and not completed
	retries    int      // retransmissions left (-1: forever)
	rnrRetries int      // RNR retries left (-1: forever)
	rnrWait    bool     // waiting out an RNR NAK's timer
	rnrPSN     wire.PSN
	nakValid   bool // nakPSN holds the last sequence NAK handled
	nakPSN     wire.PSN
	// goBackPending: a retransmission timeout wants a go-back to ackPSN
	// once the current batch is handled.
	goBackPending bool
	// retrying: a sequence NAK started a retry and no progress was made
	// since.
	retrying   bool
	timer      clock.Timer
	timerArmed bool
	deadline   time.Time
	// drainNotify: in SQD, raise IBV_EVENT_SQ_DRAINED when the last
	// started WQE completes.
	drainNotify bool

	// Responder.
	resp respState
}

// wqeState is the transport's progress on one send WQE.
type wqeState struct {
	started  bool
	done     bool // READ/ATOMIC: response received
	firstPSN wire.PSN
	lastPSN  wire.PSN
	respNext wire.PSN // READ: next response PSN expected
	length   uint32
	// rerequested: a READ or ATOMIC was asked for again after a missing
	// response, and no response has arrived since.
	rerequested bool
	// seen: READ responses received beyond respNext (bit k: respNext+k).
	seen [2]uint64
}

func (w *sendWQE) isReadAtomic() bool {
	return w.wr.Opcode == verbs.WRRDMARead || w.wr.Opcode.IsAtomic()
}

// packetsFor returns how many PSNs a message of n bytes takes.
func packetsFor(n, mtu uint32) uint32 {
	if n == 0 {
		return 1
	}
	return (n + mtu - 1) / mtu
}

// startRequesterLocked prepares the requester on entry to RTS.
//
// Preconditions: q.mu is held.
func (q *QP) startRequesterLocked() {
	s := &q.eng
	s.psn = wire.MakePSN(q.attr.SQPSN)
	s.ackPSN = s.psn
	s.next, s.off, s.rdAtomic = 0, 0, 0
	s.resetRetriesLocked(q)
	s.rnrWait = false
}

func (s *engState) resetRetriesLocked(q *QP) {
	s.retrying = false
	s.retries = int(q.attr.RetryCnt)
	if q.attr.RetryCnt == 7 && s.e != nil && s.e.cfg.RxeRetryCompat {
		s.retries = -1
	}
	s.rnrRetries = int(q.attr.RNRRetry)
	if q.attr.RNRRetry == 7 {
		s.rnrRetries = -1 // IBTA: 7 means retry forever
	}
}

// mtuLocked returns the payload size of a full packet.
func (q *QP) mtuLocked() uint32 {
	if q.typ == verbs.QPTypeUD {
		return uint32(q.eng.e.cfg.ActiveMTU.Bytes())
	}
	return uint32(q.attr.PathMTU.Bytes())
}

// runRequesterLocked sends what the send queue and the window allow.
//
// Preconditions: q.mu is held.
func (q *QP) runRequesterLocked(w *worker) {
	s := &q.eng
	if s.e == nil {
		return
	}
	st := q.attr.QPState
	if st != verbs.QPStateRTS && st != verbs.QPStateSQD {
		return
	}
	if s.goBackPending {
		s.goBackPending = false
		if s.psn != s.ackPSN {
			q.goBackLocked(s.ackPSN)
		}
	}
	for s.next < q.sq.Len() && q.attr.QPState == st {
		wqe := q.sq.At(s.next)
		if !wqe.eng.started {
			if st == verbs.QPStateSQD || s.rnrWait {
				break
			}
			if wqe.wr.SendFlags&verbs.SendFence != 0 && s.rdAtomic > 0 {
				break
			}
			if wqe.isReadAtomic() && s.rdAtomic >= max(1, int(q.attr.MaxRdAtomic)) {
				break
			}
			if !q.startWQELocked(w, wqe) {
				continue // completed with an error (or, for UD, dropped)
			}
		}
		if q.typ == verbs.QPTypeRC && s.psn.Diff(s.ackPSN) >= maxUnackedPSNs {
			break
		}
		if !w.requesterBudgetLeft() {
			w.markDirty(q) // the worker's goroutine goes on
			break
		}
		q.sendPacketLocked(w, wqe)
	}
	if q.typ == verbs.QPTypeRC && s.psn != s.ackPSN && !s.timerArmed && !s.rnrWait {
		q.armRetransmitLocked()
	}
}

// startWQELocked checks a WQE's local memory and gives it its PSNs. It
// reports false when the WQE was completed with an error instead.
//
// Preconditions: q.mu is held; the WQE is at position s.next.
func (q *QP) startWQELocked(w *worker, wqe *sendWQE) bool {
	s := &q.eng
	length := uint32(0)
	if wqe.inlineLen > 0 || wqe.wr.SendFlags&verbs.SendInline != 0 {
		length = uint32(max(wqe.inlineLen, 0))
	} else {
		for _, sge := range q.wqeSGL(s.next) {
			length += sge.Length
		}
	}
	wqe.eng.length = length
	mtu := q.mtuLocked()
	if q.typ == verbs.QPTypeUD && length > mtu {
		// IBTA C10-93.1.1: a UD message longer than the port MTU is not
		// sent, "Further, the CI shall not generate an error due to this
		// condition" (rxe does the same).
		if s.e.cfg.UDOversizeError {
			q.sendErrorLocked(verbs.WCLocLenErr)
			return false
		}
		q.completeHeadSendLocked(verbs.WCSuccess)
		return false
	}
	if wqe.inlineLen < 0 || !q.localSGLOK(s.next, wqe) {
		q.sendErrorLocked(verbs.WCLocProtErr)
		return false
	}
	n := packetsFor(length, mtu) // a READ takes one PSN per response packet
	if wqe.wr.Opcode.IsAtomic() {
		n = 1
	}
	// A new WQE's PSNs follow the previous WQE's.
	if s.next > 0 {
		if prev := q.sq.At(s.next - 1); prev.eng.started {
			s.psn = prev.eng.lastPSN.Add(1)
		}
	}
	wqe.eng = wqeState{started: true, firstPSN: s.psn, lastPSN: s.psn.Add(n - 1), respNext: s.psn, length: length}
	s.off = 0
	if wqe.isReadAtomic() {
		s.rdAtomic++
	}
	return true
}

// wqeSGL returns the scatter list of the WQE at SQ position i.
func (q *QP) wqeSGL(i int) []verbs.SGE {
	slot := q.sq.Index(i)
	maxSGE := int(q.cfg.Cap.MaxSendSGE)
	return q.sqSGE[slot*maxSGE : slot*maxSGE+q.sq.At(i).nsge]
}

// localSGLOK checks that every scatter element names memory of the QP's
// PD: readable for sends and writes, writable (LOCAL_WRITE) for the
// destination of READs and atomics.
func (q *QP) localSGLOK(i int, wqe *sendWQE) bool {
	if wqe.wr.SendFlags&verbs.SendInline != 0 {
		return true
	}
	need := verbs.AccessFlags(0)
	if wqe.isReadAtomic() {
		need = verbs.AccessLocalWrite
	}
	t := q.eng.e.cfg.MRs
	for _, sge := range q.wqeSGL(i) {
		if sge.Length == 0 {
			continue
		}
		if _, st := t.Lookup(sge.LKey, q.pd, sge.Addr, sge.Length, need); st != mr.OK {
			return false
		}
	}
	return true
}

// gather copies n bytes of the WQE's data, from offset off, into dst.
func (q *QP) gather(i int, wqe *sendWQE, off uint32, dst []byte) {
	if wqe.wr.SendFlags&verbs.SendInline != 0 {
		slot := q.sq.Index(i)
		maxInline := int(q.cfg.Cap.MaxInlineData)
		copy(dst, q.sqInline[slot*maxInline+int(off):])
		return
	}
	t := q.eng.e.cfg.MRs
	for _, sge := range q.wqeSGL(i) {
		if len(dst) == 0 {
			return
		}
		if off >= sge.Length {
			off -= sge.Length
			continue
		}
		k := min(sge.Length-off, uint32(len(dst)))
		b, _ := t.Lookup(sge.LKey, q.pd, sge.Addr+uint64(off), k, 0)
		copy(dst, b)
		dst = dst[k:]
		off = 0
	}
}

// scatter copies src into the scatter list sgl from offset off; it reports
// the status of the first failing element.
func scatter(t *mr.Table, pd uint32, sgl []verbs.SGE, off uint32, src []byte) mr.Status {
	for _, sge := range sgl {
		if len(src) == 0 {
			return mr.OK
		}
		if off >= sge.Length {
			off -= sge.Length
			continue
		}
		k := min(sge.Length-off, uint32(len(src)))
		b, st := t.Lookup(sge.LKey, pd, sge.Addr+uint64(off), k, verbs.AccessLocalWrite)
		if st != mr.OK {
			return st
		}
		copy(b, src[:k])
		src = src[k:]
		off = 0
	}
	if len(src) > 0 {
		return mr.BadBounds
	}
	return mr.OK
}

// opFor returns the opcode of a packet of a send WQE at a position.
func (q *QP) opFor(wqe *sendWQE, pos wire.Position) wire.OpCode {
	base := wire.OpCode(wire.TransportRC)
	if q.typ == verbs.QPTypeUC {
		base = wire.OpCode(wire.TransportUC)
	}
	var low wire.OpCode
	switch wqe.wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv:
		if q.typ == verbs.QPTypeUD {
			if wqe.wr.Opcode == verbs.WRSendWithImm {
				return wire.UDSendOnlyWithImmediate
			}
			return wire.UDSendOnly
		}
		low = [...]wire.OpCode{wire.PosOnly: wire.RCSendOnly, wire.PosFirst: wire.RCSendFirst,
			wire.PosMiddle: wire.RCSendMiddle, wire.PosLast: wire.RCSendLast}[pos]
		if pos.Last() {
			switch wqe.wr.Opcode {
			case verbs.WRSendWithImm:
				low++ // Last/Only with Immediate follow Last/Only
			case verbs.WRSendWithInv:
				if pos == wire.PosOnly {
					return wire.RCSendOnlyWithInvalidate
				}
				return wire.RCSendLastWithInvalidate
			}
		}
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		low = [...]wire.OpCode{wire.PosOnly: wire.RCRDMAWriteOnly, wire.PosFirst: wire.RCRDMAWriteFirst,
			wire.PosMiddle: wire.RCRDMAWriteMiddle, wire.PosLast: wire.RCRDMAWriteLast}[pos]
		if pos.Last() && wqe.wr.Opcode == verbs.WRRDMAWriteWithImm {
			low++
		}
	case verbs.WRRDMARead:
		return wire.RCRDMAReadRequest
	case verbs.WRAtomicCmpAndSwp:
		return wire.RCCompareSwap
	case verbs.WRAtomicFetchAndAdd:
		return wire.RCFetchAdd
	}
	return base | low
}

// sendPacketLocked sends the next packet of the WQE at s.next.
//
// Preconditions: q.mu is held; the WQE is started.
func (q *QP) sendPacketLocked(w *worker, wqe *sendWQE) {
	s := &q.eng
	mtu := q.mtuLocked()
	total := wqe.eng.length
	var h wire.Headers
	h.BTH.PKey = 0xffff
	h.BTH.PSN = s.psn
	dst := &s.remote
	var payload uint32
	pos := wire.PosOnly
	switch {
	case wqe.wr.Opcode == verbs.WRRDMARead || wqe.wr.Opcode.IsAtomic():
		h.BTH.OpCode = q.opFor(wqe, pos)
		h.BTH.AckReq = true
		if wqe.wr.Opcode == verbs.WRRDMARead {
			// A READ sent again asks only for what is missing: s.psn is
			// then the first missing response's PSN.
			done := min(uint32(s.psn.Diff(wqe.eng.firstPSN))*mtu, total)
			h.RETH = wire.RETHFields{VirtualAddress: wqe.wr.RDMA.RemoteAddr + uint64(done), RKey: wqe.wr.RDMA.RKey, DMALength: total - done}
		} else {
			h.AtomicETH = wire.AtomicETHFields{VirtualAddress: wqe.wr.Atomic.RemoteAddr, RKey: wqe.wr.Atomic.RKey,
				SwapAddData: wqe.wr.Atomic.CompareAdd, CompareData: wqe.wr.Atomic.Swap}
			if wqe.wr.Opcode == verbs.WRAtomicCmpAndSwp {
				// CmpSwap: compare with CompareAdd, swap in Swap.
				h.AtomicETH.SwapAddData, h.AtomicETH.CompareData = wqe.wr.Atomic.Swap, wqe.wr.Atomic.CompareAdd
			}
		}
	default:
		first := s.off == 0
		payload = min(total-s.off, mtu)
		last := s.off+payload == total
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
		h.BTH.OpCode = q.opFor(wqe, pos)
		if q.typ == verbs.QPTypeRC {
			idx := uint32(s.psn.Diff(wqe.eng.firstPSN))
			h.BTH.AckReq = last || idx%ackReqInterval == ackReqInterval-1
		}
		h.BTH.SolicitedEvent = last && wqe.wr.SendFlags&verbs.SendSolicited != 0
		info := h.BTH.OpCode.Info()
		if info.Headers&wire.HasRETH != 0 {
			h.RETH = wire.RETHFields{VirtualAddress: wqe.wr.RDMA.RemoteAddr, RKey: wqe.wr.RDMA.RKey, DMALength: total}
		}
		h.ImmDt = wqe.wr.ImmData
		h.IETH = wqe.wr.InvalidateRKey
		if q.typ == verbs.QPTypeUD {
			ah := wqe.wr.UD.AH.Attr()
			n := s.e.netFor(ah.GRH.DGID.Addr())
			dst = &n
			h.BTH.DestQP = wqe.wr.UD.RemoteQPN
			qkey := wqe.wr.UD.RemoteQKey
			if qkey&0x80000000 != 0 {
				qkey = q.attr.QKey // IBTA 10.2.5: a Q_Key with the high bit set means "use the QP's"
			}
			h.DETH = wire.DETHFields{QKey: qkey, SrcQP: q.num}
		}
	}
	if q.typ != verbs.QPTypeUD {
		h.BTH.DestQP = q.attr.DestQPNum
	}
	buf := w.txSlot()
	hl := h.Encode(buf, int(payload))
	q.gather(s.next, wqe, s.off, buf[hl:hl+int(payload)])
	size := h.PacketLen(int(payload))
	wire.Seal(dst, buf[:size])
	w.queueTx(size, dst)
	w.inlineBytes += size

	switch {
	case wqe.wr.Opcode == verbs.WRRDMARead:
		s.psn = wqe.eng.lastPSN.Add(1)
		s.next++
	case wqe.wr.Opcode.IsAtomic():
		s.psn = s.psn.Add(1)
		s.next++
	default:
		s.psn = s.psn.Add(1)
		s.off += payload
		if s.off == total {
			s.off = 0
			s.next++
			if q.typ != verbs.QPTypeRC {
				// UC and UD complete when the last packet is sent.
				q.completeHeadSendLocked(verbs.WCSuccess)
			}
		}
	}
}

// completeHeadSendLocked completes the WQE at the head of the send queue:
// a completion if it was signaled or failed, then it leaves the queue.
//
// Preconditions: q.mu is held; the send queue is not empty.
func (q *QP) completeHeadSendLocked(status verbs.WCStatus) {
	wqe := q.sq.At(0)
	if wqe.eng.started && wqe.isReadAtomic() && q.eng.rdAtomic > 0 {
		// A READ or ATOMIC is outstanding until it completes, in order,
		// not when its response arrives: the responder keeps only
		// max_dest_rd_atomic of them to replay (IBTA 9.7.7.x).
		q.eng.rdAtomic--
	}
	if wqe.signaled || status != verbs.WCSuccess {
		wc := verbs.WC{
			WRID:    wqe.wr.WRID,
			Status:  status,
			Opcode:  verbs.WCOpcodeFor(wqe.wr.Opcode),
			ByteLen: wqe.eng.length,
			QPNum:   q.num,
		}
		q.sendCQ.Push(&wc, false)
	}
	if q.eng.next == 0 && wqe.eng.started {
		// The requester was about to send this WQE again (after a
		// go-back): what follows starts after its PSNs.
		if after := wqe.eng.lastPSN.Add(1); after.Diff(q.eng.psn) > 0 {
			q.eng.psn = after
		}
		q.eng.off = 0
	}
	q.sq.Drop(1)
	if q.eng.next > 0 {
		q.eng.next--
	}
	if q.eng.drainNotify && (q.sq.Len() == 0 || !q.sq.At(0).eng.started) {
		q.eng.drainNotify = false
		q.raiseLocked(verbs.EventSQDrained)
	}
}

// sendErrorLocked completes the head WQE with an error and moves the QP
// to the error state (RC) or the send queue error state (UC, UD), which
// flushes the rest (IBTA 10.8.3.3; rxe always moves to ERR).
//
// Preconditions: q.mu is held.
func (q *QP) sendErrorLocked(status verbs.WCStatus) {
	q.stopTimerLocked()
	next := verbs.QPStateErr
	if q.typ != verbs.QPTypeRC {
		next = verbs.QPStateSQE
	}
	// Publish the new state before the error completion: whoever polls
	// the completion and then asks the QP's state sees the error state.
	q.stateRO.Store(uint32(next))
	// Make the failing WQE the head: WQEs before it (RC) are awaiting
	// acknowledgement, and will be flushed after it, which keeps the
	// order libibverbs users see from rxe.
	q.completeHeadSendLocked(status)
	q.setStateLocked(next, false)
}

// armRetransmitLocked starts the transport timer if the QP has one.
func (q *QP) armRetransmitLocked() {
	d := timeoutDuration(q.attr.Timeout)
	if d == 0 {
		return
	}
	q.armTimerLocked(d)
}

func (q *QP) armTimerLocked(d time.Duration) {
	s := &q.eng
	c := s.e.cfg.Clock
	s.deadline = c.Now().Add(d)
	s.timerArmed = true
	if s.timer == nil {
		e := s.e
		s.timer = c.AfterFunc(d, func() { e.post(event{kind: evTimer, q: q}) })
		return
	}
	s.timer.Reset(d)
}

func (q *QP) stopTimerLocked() {
	s := &q.eng
	s.timerArmed = false
	if s.timer != nil {
		s.timer.Stop()
	}
}

// handleTimerLocked runs a fired timer: the end of an RNR wait, or a
// retransmission timeout (IBTA 9.7.6.1.3): go back to the oldest
// unacknowledged PSN, or fail the head WQE once retry_cnt retries are
// spent.
//
// Preconditions: q.mu is held.
func (q *QP) handleTimerLocked(w *worker) {
	s := &q.eng
	if !s.timerArmed || s.e == nil {
		return
	}
	now := s.e.cfg.Clock.Now()
	if now.Before(s.deadline) {
		s.timer.Reset(s.deadline.Sub(now))
		return
	}
	s.timerArmed = false
	st := q.attr.QPState
	if st != verbs.QPStateRTS && st != verbs.QPStateSQD {
		return
	}
	if s.rnrWait {
		s.rnrWait = false
		q.goBackLocked(s.rnrPSN)
		w.markDirty(q)
		return
	}
	// A READ or ATOMIC whose response arrived completes here if nothing
	// else completed it.
	q.ackUpToLocked(w, s.ackPSN.Sub(1))
	if s.psn == s.ackPSN || q.sq.Len() == 0 || q.attr.QPState == verbs.QPStateErr {
		return
	}
	s.e.c.retryTimeouts.Add(1)
	if s.retries == 0 {
		q.sendErrorLocked(verbs.WCRetryExcErr)
		return
	}
	if s.retries > 0 {
		s.retries--
	}
	// The go-back happens after the rest of this batch: a response in
	// the same batch must still be judged against what was sent.
	s.goBackPending = true
	w.markDirty(q)
}

// goBackLocked rewinds the requester to resend from psn (go-back-N, IBTA
// 9.7.6.1): the WQE holding psn restarts there and every later WQE is sent
// again. A READ asks again only for the responses still missing (a new
// request whose PSN, address and length start at the first missing
// response); an ATOMIC is sent again whole (the responder replays its
// result). An unfinished READ or ATOMIC before psn is where the requester
// goes back to; finished ones awaiting earlier acknowledgements are
// skipped.
//
// Preconditions: q.mu is held.
func (q *QP) goBackLocked(psn wire.PSN) {
	s := &q.eng
	limit := min(s.next+1, q.sq.Len())
	for i := 0; i < limit; i++ {
		wqe := q.sq.At(i)
		if !wqe.eng.started {
			break
		}
		if wqe.isReadAtomic() {
			if wqe.eng.done {
				continue
			}
			// An unfinished READ or ATOMIC before psn restarts here too:
			// resending later requests does not bring its responses.
		} else if psn.Diff(wqe.eng.lastPSN) > 0 {
			continue
		}
		s.e.c.retransmits.Add(1)
		for j := i + 1; j < limit; j++ {
			wj := q.sq.At(j)
			if wj.eng.started && wj.isReadAtomic() {
				s.rdAtomic--
			}
			wj.eng = wqeState{}
		}
		switch {
		case wqe.wr.Opcode == verbs.WRRDMARead:
			psn = wqe.eng.respNext
		case wqe.wr.Opcode.IsAtomic():
			psn = wqe.eng.firstPSN
		default:
			if psn.Diff(wqe.eng.firstPSN) < 0 {
				psn = wqe.eng.firstPSN
			}
			s.off = uint32(psn.Diff(wqe.eng.firstPSN)) * q.mtuLocked()
		}
		s.next = i
		s.psn = psn
		return
	}
}

// handleResponseLocked is the completer: it handles an ACK, NAK, READ
// response or ATOMIC acknowledge for an RC requester (IBTA 9.7.5).
//
// Preconditions: q.mu is held.
func (q *QP) handleResponseLocked(w *worker, p *wire.Packet) {
	s := &q.eng
	psn := p.BTH.PSN()
	// A response must be for a PSN sent (since the last go-back) and not
	// acknowledged before; a repeated ACK of the last acknowledged PSN is
	// harmless.
	info := p.Info()
	// READ responses and ATOMIC acknowledges are checked against the
	// READ or ATOMIC they answer (which stays started across a go-back);
	// an ACK or NAK must be for a PSN sent and not acknowledged before.
	if info.Kind == wire.KindAck && (psn.Diff(s.psn) >= 0 || psn.Diff(s.ackPSN) < -1) {
		s.e.drop(DropStaleResponse)
		return
	}
	if p.AETH != nil {
		syn := p.AETH.Syndrome()
		if k := syn.Kind(); (k == wire.AckKindRNRNAK || k == wire.AckKindNAK) && psn.Diff(s.ackPSN) < 0 {
			// A NAK names a PSN not received; one already acknowledged
			// makes it a late or duplicated packet.
			s.e.drop(DropStaleResponse)
			return
		}
		switch syn.Kind() {
		case wire.AckKindRNRNAK:
			if s.rnrWait && psn == s.rnrPSN {
				s.e.drop(DropStaleResponse) // a duplicate of the NAK being waited out
				return
			}
			q.ackUpToLocked(w, psn.Sub(1))
			if q.attr.QPState == verbs.QPStateErr {
				return
			}
			if s.rnrRetries == 0 {
				s.e.c.rnrRecv.Add(1)
				q.sendErrorLocked(verbs.WCRNRRetryExcErr)
				return
			}
			if s.rnrRetries > 0 {
				s.rnrRetries--
			}
			s.rnrWait, s.rnrPSN = true, psn
			q.armTimerLocked(time.Duration(wire.RNRTimerMicros(syn.Value())) * time.Microsecond)
			// Counted once the wait is armed, so an observer of the
			// counter sees the timer too.
			s.e.c.rnrRecv.Add(1)
			return
		case wire.AckKindNAK:
			q.handleNAKLocked(w, psn, syn.NAKCode())
			return
		}
	}
	switch info.Kind {
	case wire.KindAck:
		q.ackUpToLocked(w, psn)
	case wire.KindAtomicAck:
		wqe, i := q.findReadAtomicLocked(psn)
		if wqe == nil || !wqe.wr.Opcode.IsAtomic() || wqe.eng.done {
			s.e.drop(DropStaleResponse)
			return
		}
		var orig [8]byte
		binary.NativeEndian.PutUint64(orig[:], p.AtomicAckETH.OriginalRemoteData())
		if st := scatter(s.e.cfg.MRs, q.pd, q.wqeSGL(i), 0, orig[:]); st != mr.OK {
			q.sendErrorLocked(verbs.WCLocProtErr)
			return
		}
		wqe.eng.done = true
		q.ackUpToLocked(w, psn)
	case wire.KindReadResponse:
		wqe, i := q.findReadAtomicLocked(psn)
		if wqe == nil || wqe.wr.Opcode != verbs.WRRDMARead || wqe.eng.done {
			s.e.drop(DropStaleResponse)
			return
		}
		if psn == wqe.eng.firstPSN {
			// The first response's AETH acknowledges every earlier request.
			q.ackUpToLocked(w, wqe.eng.firstPSN.Sub(1))
			if wqe, i = q.findReadAtomicLocked(psn); wqe == nil {
				return
			}
		}
		q.readResponseLocked(w, wqe, i, p)
	default:
		s.e.drop(DropTransportMismatch)
	}
}

// readReorderTolerance is how many later READ responses may arrive before
// a missing one is taken as lost and asked for again.
const readReorderTolerance = 16

// readResponseLocked places one READ response. Responses are placed by
// their PSN as they come (each names its offset), so reordering costs
// nothing; a 128-response bitmap beyond the first missing one records
// what arrived. A missing response is asked for again once the last
// response arrived without it, or readReorderTolerance later ones did.
func (q *QP) readResponseLocked(w *worker, wqe *sendWQE, i int, p *wire.Packet) {
	s := &q.eng
	psn := p.BTH.PSN()
	d := psn.Diff(wqe.eng.respNext)
	if d < 0 || d >= 128 || wqe.eng.seen[d/64]&(1<<(d%64)) != 0 {
		s.e.drop(DropStaleResponse) // a duplicate, or too far ahead
		// Still, the responder is alive and working through this
		// READ: rxe sends a READ's last response before it looks at a
		// request to resend part of it, so after one loss a long READ
		// streams on past the bitmap for as long as it takes (half a
		// second for 8 MiB from a guest under emulation). The
		// transport timer, which is for silence, starts over; the
		// retry budget does not.
		if s.timerArmed && !s.rnrWait {
			q.armRetransmitLocked()
		}
		return
	}
	off := uint32(psn.Diff(wqe.eng.firstPSN)) * q.mtuLocked()
	if st := scatter(s.e.cfg.MRs, q.pd, q.wqeSGL(i), off, p.Payload); st != mr.OK {
		q.sendErrorLocked(verbs.WCLocProtErr)
		return
	}
	wqe.eng.seen[d/64] |= 1 << (d % 64)
	advanced := false
	for wqe.eng.seen[0]&1 != 0 {
		wqe.eng.seen[0] = wqe.eng.seen[0]>>1 | wqe.eng.seen[1]<<63
		wqe.eng.seen[1] >>= 1
		wqe.eng.respNext = wqe.eng.respNext.Add(1)
		advanced = true
	}
	if advanced {
		wqe.eng.rerequested = false
		if wqe.eng.firstPSN.Diff(s.ackPSN) <= 0 && wqe.eng.respNext.Diff(s.ackPSN) > 0 {
			// Responses received in order acknowledge their PSNs: the
			// window slides with them (a READ may span more than it).
			s.ackPSN = wqe.eng.respNext
		}
		// Responses arriving are progress: the retry budget is for
		// silence.
		s.resetRetriesLocked(q)
		q.armRetransmitLocked()
	}
	if wqe.eng.respNext.Diff(wqe.eng.lastPSN) > 0 {
		wqe.eng.done = true
		q.ackUpToLocked(w, wqe.eng.lastPSN)
		return
	}
	lost := psn == wqe.eng.lastPSN || psn.Diff(wqe.eng.respNext) >= readReorderTolerance
	if lost && !wqe.eng.rerequested {
		wqe.eng.rerequested = true
		q.goBackLocked(wqe.eng.respNext)
		w.markDirty(q)
	}
}

// findReadAtomicLocked returns the started READ/ATOMIC WQE whose PSN
// range holds psn, and its position.
func (q *QP) findReadAtomicLocked(psn wire.PSN) (*sendWQE, int) {
	for i := 0; i < q.sq.Len(); i++ {
		wqe := q.sq.At(i)
		if !wqe.eng.started {
			break
		}
		if wqe.isReadAtomic() && psn.Diff(wqe.eng.firstPSN) >= 0 && psn.Diff(wqe.eng.lastPSN) <= 0 {
			return wqe, i
		}
	}
	return nil, 0
}

// handleNAKLocked handles a NAK (IBTA 9.7.5.2.x): a PSN sequence error
// resends from the NAKed PSN; the others fail the WQE they name.
func (q *QP) handleNAKLocked(w *worker, psn wire.PSN, code wire.NAKCode) {
	s := &q.eng
	q.ackUpToLocked(w, psn.Sub(1))
	if q.attr.QPState == verbs.QPStateErr || q.sq.Len() == 0 {
		return
	}
	var status verbs.WCStatus
	switch code {
	case wire.NAKPSNSequenceError:
		s.e.c.seqRecv.Add(1)
		// The responder NAKs a gap once (until the missing packet
		// arrives), so a second NAK for a PSN already gone back to is a
		// duplicated or stale packet, not a new loss.
		if s.nakValid && psn.Diff(s.nakPSN) <= 0 {
			s.e.drop(DropStaleResponse)
			return
		}
		s.nakValid, s.nakPSN = true, psn
		// As rxe (rxe_comp.c): once a retry has started, further
		// sequence NAKs start none until progress is made; a packet lost
		// again is left to the transport timer. Under reordering this
		// keeps one loss from costing many retries.
		if s.retrying {
			return
		}
		s.retrying = true
		if s.retries == 0 {
			q.sendErrorLocked(verbs.WCRetryExcErr)
			return
		}
		if s.retries > 0 {
			s.retries--
		}
		q.goBackLocked(psn)
		w.markDirty(q)
		return
	case wire.NAKInvalidRequest:
		status = verbs.WCRemInvReqErr
	case wire.NAKRemoteAccessError:
		status = verbs.WCRemAccessErr
	default:
		status = verbs.WCRemOpErr
	}
	q.sendErrorLocked(status)
}

// ackUpToLocked completes, in order, every WQE whose last PSN is at or
// before psn. A READ or ATOMIC whose response has not arrived although a
// later PSN is acknowledged lost its response: it is asked for again
// (IBTA 9.7.5.1.2, implied NAK).
//
// Preconditions: q.mu is held.
func (q *QP) ackUpToLocked(w *worker, psn wire.PSN) {
	s := &q.eng
	progress := false
	limit := psn.Add(1) // the oldest PSN this acknowledgement leaves unacknowledged
	for q.sq.Len() > 0 {
		wqe := q.sq.At(0)
		if !wqe.eng.started {
			break
		}
		if wqe.isReadAtomic() && wqe.eng.done {
			// Its response acknowledged it; everything before it has
			// completed.
			next := wqe.eng.lastPSN.Add(1)
			q.completeHeadSendLocked(verbs.WCSuccess)
			if next.Diff(limit) > 0 {
				limit = next
			}
			progress = true
			continue
		}
		if wqe.eng.lastPSN.Diff(psn) > 0 {
			break
		}
		if wqe.isReadAtomic() && !wqe.eng.done {
			// Its missing responses stay unacknowledged.
			limit = wqe.eng.respNext
			if !wqe.eng.rerequested {
				wqe.eng.rerequested = true
				q.goBackLocked(wqe.eng.respNext)
				w.markDirty(q)
			}
			break
		}
		q.completeHeadSendLocked(verbs.WCSuccess)
		progress = true
	}
	if limit.Diff(s.ackPSN) > 0 && limit.Diff(s.psn) <= 0 {
		s.ackPSN = limit
		progress = true
	}
	if s.rnrWait && s.ackPSN.Diff(s.rnrPSN) > 0 {
		// The RNR NAKed packet was received after all (an earlier copy
		// got through): nothing to wait for.
		s.rnrWait = false
	}
	if progress {
		s.resetRetriesLocked(q)
		w.markDirty(q)
		if s.ackPSN == s.psn {
			q.stopTimerLocked()
		} else {
			q.armRetransmitLocked()
		}
	}
}
