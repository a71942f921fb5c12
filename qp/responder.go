package qp

import (
	"sync/atomic"
	"unsafe"

	"github.com/softhca/softhca/mr"
	"github.com/softhca/softhca/srq"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// respState is the responder's state (IBTA 9.7.5).
type respState struct {
	epsn    wire.PSN // expected PSN
	msn     uint32   // message sequence number (24 bits)
	nakSent bool     // a NAK (sequence or RNR) is outstanding for epsn
	// The receive WQE a SEND in progress fills.
	recv     srq.RecvWQE
	haveRecv bool
	recvOff  uint32
	recvErr  verbs.WCStatus // set when the message did not fit
	// The RDMA WRITE in progress.
	wrVA   uint64
	wrRKey uint32
	wrLen  uint32
	wrOff  uint32
	// UC: drop packets until the next First or Only.
	ucResync bool
	// Coalesced acknowledgement.
	ackPending bool
	ackPSN     wire.PSN
	// READ and ATOMIC responder resources, replayed for duplicates.
	res     []resource
	resNext int
}

// resource is a remembered READ or ATOMIC request (IBTA 9.7.5.1.3,
// "responder resources"; max_dest_rd_atomic of them).
type resource struct {
	valid    bool
	atomic   bool
	firstPSN wire.PSN
	lastPSN  wire.PSN
	va       uint64
	rkey     uint32
	length   uint32
	orig     uint64 // ATOMIC: the value returned, replayed for duplicates
	msn      uint32
}

// startResponderLocked prepares the responder on entry to RTR.
//
// Preconditions: q.mu is held.
func (q *QP) startResponderLocked() {
	s := &q.eng
	s.resp = respState{epsn: wire.MakePSN(q.attr.RQPSN), res: make([]resource, max(1, int(q.attr.MaxDestRdAtomic)))}
	if q.typ != verbs.QPTypeUD && s.e != nil {
		s.remote = s.e.netFor(q.attr.AHAttr.GRH.DGID.Addr())
	}
}

// handlePacketLocked handles one received packet for the QP.
//
// Preconditions: q.mu is held.
func (q *QP) handlePacketLocked(w *worker, p *wire.Packet) {
	s := &q.eng
	e := s.e
	if e == nil {
		return
	}
	switch q.attr.QPState {
	case verbs.QPStateRTR, verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateSQE:
	default:
		e.drop(DropQPState)
		return
	}
	op := p.BTH.OpCode()
	if p.BTH.PKey()&0x7fff != 0x7fff {
		e.drop(DropPKey) // only the default partition exists (rxe's table)
		return
	}
	info := op.Info()
	switch q.typ {
	case verbs.QPTypeUD:
		if op.Transport() != wire.TransportUD {
			e.drop(DropTransportMismatch)
			return
		}
		q.receiveUDLocked(w, p)
		return
	case verbs.QPTypeUC:
		if op.Transport() != wire.TransportUC {
			e.drop(DropTransportMismatch)
			return
		}
	case verbs.QPTypeRC:
		if op.Transport() != wire.TransportRC {
			e.drop(DropTransportMismatch)
			return
		}
	}
	if p.Net.Src != s.remote.Dst {
		e.drop(DropAddress) // rxe: RC/UC packets must come from the QP's peer
		return
	}
	if !info.Request {
		if q.typ != verbs.QPTypeRC || (q.attr.QPState != verbs.QPStateRTS && q.attr.QPState != verbs.QPStateSQD) {
			e.drop(DropStaleResponse)
			return
		}
		q.handleResponseLocked(w, p)
		return
	}
	if q.typ == verbs.QPTypeUC {
		q.receiveUCLocked(w, p)
		return
	}
	q.receiveRCLocked(w, p)
}

// receiveRCLocked is the RC responder.
func (q *QP) receiveRCLocked(w *worker, p *wire.Packet) {
	s := &q.eng
	r := &s.resp
	e := s.e
	psn := p.BTH.PSN()
	info := p.Info()
	switch d := psn.Diff(r.epsn); {
	case d > 0:
		// A packet is missing: one NAK per gap (IBTA 9.7.5.2.2).
		e.drop(DropOutOfSequence)
		if !r.nakSent {
			r.nakSent = true
			e.c.seqSent.Add(1)
			q.sendAckLocked(w, r.epsn, wire.NAKSyndrome(wire.NAKPSNSequenceError))
		}
		return
	case d < 0:
		q.duplicateLocked(w, p)
		return
	}
	r.nakSent = false
	// The QP must allow the operation (qp_access_flags), and READ and
	// ATOMIC need responder resources (max_dest_rd_atomic): otherwise an
	// Invalid Request NAK (ibv_poll_cq(3), IBV_WC_REM_INV_REQ_ERR; rxe's
	// check_op_valid and RESPST_ERR_TOO_MANY_RDMA_ATM_REQ).
	if need := accessFor(info.Kind); need != 0 &&
		(q.attr.QPAccessFlags&need == 0 || need != verbs.AccessRemoteWrite && q.attr.MaxDestRdAtomic == 0) {
		q.responderErrorLocked(w, psn, wire.NAKInvalidRequest, 0)
		return
	}
	switch info.Kind {
	case wire.KindSend:
		if !q.rcSendLocked(w, p) {
			return
		}
	case wire.KindWrite:
		if !q.writeLocked(w, p, true) {
			return
		}
	case wire.KindReadRequest:
		q.readRequestLocked(w, p)
		return
	case wire.KindCompareSwap, wire.KindFetchAdd:
		q.atomicLocked(w, p)
		return
	default:
		q.responderErrorLocked(w, psn, wire.NAKInvalidRequest, verbs.WCRemInvReqErr)
		return
	}
	r.epsn = psn.Add(1)
	if p.BTH.AckReq() {
		r.ackPending, r.ackPSN = true, psn
		w.markDirty(q)
	}
}

// takeRecvLocked takes the next receive WQE from the SRQ or the RQ.
func (q *QP) takeRecvLocked(dst *srq.RecvWQE) bool {
	if q.srq != nil {
		return q.srq.Take(dst)
	}
	return q.rq.Take(dst)
}

// rcSendLocked places one SEND packet. It reports false when the packet
// was not accepted (RNR NAK or error sent).
func (q *QP) rcSendLocked(w *worker, p *wire.Packet) bool {
	r := &q.eng.resp
	info := p.Info()
	if info.Pos.First() {
		if !q.takeRecvLocked(&r.recv) {
			q.eng.e.drop(DropRNR)
			q.eng.e.c.rnrSent.Add(1)
			r.nakSent = true
			q.sendAckLocked(w, p.BTH.PSN(), wire.RNRNAKSyndrome(q.attr.MinRNRTimer))
			return false
		}
		r.haveRecv, r.recvOff, r.recvErr = true, 0, verbs.WCSuccess
	}
	if !r.haveRecv {
		q.responderErrorLocked(w, p.BTH.PSN(), wire.NAKInvalidRequest, verbs.WCRemInvReqErr)
		return false
	}
	if st := scatter(q.eng.e.cfg.MRs, q.pd, r.recv.SGL, r.recvOff, p.Payload); st != mr.OK {
		status := verbs.WCLocProtErr
		if st == mr.BadBounds {
			status = verbs.WCLocLenErr // the message is longer than the buffer
		}
		q.stateRO.Store(uint32(verbs.QPStateErr)) // visible before the completion
		q.completeRecvLocked(w, &r.recv, status, r.recvOff, p, 0)
		r.haveRecv = false
		q.responderErrorLocked(w, p.BTH.PSN(), wire.NAKInvalidRequest, 0)
		return false
	}
	r.recvOff += uint32(len(p.Payload))
	if info.Pos.Last() {
		r.msn = (r.msn + 1) & 0xffffff
		var flags verbs.WCFlags
		var imm uint32
		switch {
		case p.ImmDt != nil:
			flags, imm = verbs.WCFlagWithImm, p.ImmDt.Value()
		case p.IETH != nil:
			flags, imm = verbs.WCFlagWithInv, p.IETH.RKey()
		}
		q.completeRecvLocked(w, &r.recv, verbs.WCSuccess, r.recvOff, p, flags, imm)
		r.haveRecv = false
	}
	return true
}

// completeRecvLocked posts a receive completion.
func (q *QP) completeRecvLocked(w *worker, wqe *srq.RecvWQE, status verbs.WCStatus, n uint32, p *wire.Packet, flags verbs.WCFlags, imm ...uint32) {
	wc := verbs.WC{
		WRID:    wqe.WRID,
		Status:  status,
		Opcode:  verbs.WCRecv,
		ByteLen: n,
		QPNum:   q.num,
		SrcQP:   q.attr.DestQPNum,
		WCFlags: flags,
	}
	if len(imm) > 0 {
		wc.ImmData = imm[0]
	}
	if p.Info().Kind == wire.KindWrite {
		wc.Opcode = verbs.WCRecvRDMAWithImm
	}
	if p.DETH != nil {
		wc.SrcQP = p.DETH.SrcQP()
	}
	w.delivered = true
	q.recvCQ.Push(&wc, p.BTH.SolicitedEvent())
}

// writeLocked places one RDMA WRITE packet. It reports false when the
// packet was not accepted. reliable selects RC behaviour (NAKs).
func (q *QP) writeLocked(w *worker, p *wire.Packet, reliable bool) bool {
	s := &q.eng
	r := &s.resp
	info := p.Info()
	if info.Pos.First() {
		r.wrVA, r.wrRKey, r.wrLen, r.wrOff = p.RETH.VirtualAddress(), p.RETH.RKey(), p.RETH.DMALength(), 0
		if r.wrLen > 0 && !q.remoteAccessOK(r.wrRKey, r.wrVA, r.wrLen, verbs.AccessRemoteWrite) {
			if reliable {
				q.responderErrorLocked(w, p.BTH.PSN(), wire.NAKRemoteAccessError, 0)
			}
			return false
		}
	}
	n := uint32(len(p.Payload))
	if r.wrOff+n > r.wrLen {
		if reliable {
			q.responderErrorLocked(w, p.BTH.PSN(), wire.NAKInvalidRequest, 0)
		}
		return false
	}
	withImm := p.ImmDt != nil
	if withImm && !q.takeRecvLocked(&r.recv) {
		if reliable {
			s.e.drop(DropRNR)
			s.e.c.rnrSent.Add(1)
			r.nakSent = true
			q.sendAckLocked(w, p.BTH.PSN(), wire.RNRNAKSyndrome(q.attr.MinRNRTimer))
		} else {
			s.e.drop(DropUCNoReceive)
		}
		return false
	}
	if n > 0 {
		b, _ := s.e.cfg.MRs.Lookup(r.wrRKey, q.pd, r.wrVA+uint64(r.wrOff), n, verbs.AccessRemoteWrite)
		copy(b, p.Payload)
	}
	r.wrOff += n
	if info.Pos.Last() {
		if info.Pos == wire.PosLast && r.wrOff != r.wrLen && reliable {
			q.responderErrorLocked(w, p.BTH.PSN(), wire.NAKInvalidRequest, 0)
			return false
		}
		r.msn = (r.msn + 1) & 0xffffff
		if withImm {
			q.completeRecvLocked(w, &r.recv, verbs.WCSuccess, r.wrLen, p, verbs.WCFlagWithImm, p.ImmDt.Value())
		}
	}
	return true
}

// accessFor returns the remote access right a request needs from the QP
// and the memory region, or 0.
func accessFor(k wire.Kind) verbs.AccessFlags {
	switch k {
	case wire.KindWrite:
		return verbs.AccessRemoteWrite
	case wire.KindReadRequest:
		return verbs.AccessRemoteRead
	case wire.KindCompareSwap, wire.KindFetchAdd:
		return verbs.AccessRemoteAtomic
	}
	return 0
}

// remoteAccessOK checks an R_Key access: the QP allows it
// (qp_access_flags; RC checks this first and NAKs it as an invalid
// request), and the region exists in the QP's PD, covers the range and
// grants the right.
func (q *QP) remoteAccessOK(rkey uint32, va uint64, n uint32, need verbs.AccessFlags) bool {
	if q.attr.QPAccessFlags&need == 0 {
		return false
	}
	_, st := q.eng.e.cfg.MRs.Lookup(rkey, q.pd, va, n, need)
	return st == mr.OK
}

// readRequestLocked executes an RDMA READ request: it remembers it as a
// responder resource and sends the response packets.
func (q *QP) readRequestLocked(w *worker, p *wire.Packet) {
	s := &q.eng
	r := &s.resp
	psn := p.BTH.PSN()
	va, rkey, n := p.RETH.VirtualAddress(), p.RETH.RKey(), p.RETH.DMALength()
	if n > 0 && !q.remoteAccessOK(rkey, va, n, verbs.AccessRemoteRead) {
		q.responderErrorLocked(w, psn, wire.NAKRemoteAccessError, 0)
		return
	}
	npkts := packetsFor(n, q.mtuLocked())
	r.msn = (r.msn + 1) & 0xffffff
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	*res = resource{valid: true, firstPSN: psn, lastPSN: psn.Add(npkts - 1), va: va, rkey: rkey, length: n, msn: r.msn}
	r.epsn = psn.Add(npkts)
	q.sendReadResponsesLocked(w, res, psn)
}

// sendReadResponsesLocked sends the responses of a READ resource from
// PSN from on (all of them for a new request, the rest for a duplicate).
func (q *QP) sendReadResponsesLocked(w *worker, res *resource, from wire.PSN) {
	s := &q.eng
	mtu := q.mtuLocked()
	npkts := packetsFor(res.length, mtu)
	for i := uint32(from.Diff(res.firstPSN)); i < npkts; i++ {
		off := i * mtu
		n := min(mtu, res.length-off)
		if res.length == 0 {
			n = 0
		}
		var h wire.Headers
		switch {
		case npkts == 1:
			h.BTH.OpCode = wire.RCRDMAReadResponseOnly
		case i == 0:
			h.BTH.OpCode = wire.RCRDMAReadResponseFirst
		case i == npkts-1:
			h.BTH.OpCode = wire.RCRDMAReadResponseLast
		default:
			h.BTH.OpCode = wire.RCRDMAReadResponseMiddle
		}
		h.BTH.PKey, h.BTH.DestQP, h.BTH.PSN = 0xffff, q.attr.DestQPNum, res.firstPSN.Add(i)
		h.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: res.msn}
		buf := w.txSlot()
		hl := h.Encode(buf, int(n))
		if n > 0 {
			b, _ := s.e.cfg.MRs.Lookup(res.rkey, q.pd, res.va+uint64(off), n, 0)
			copy(buf[hl:], b)
		}
		size := h.PacketLen(int(n))
		wire.Seal(&s.remote, buf[:size])
		w.queueTx(size, &s.remote)
	}
}

// atomicLocked executes an atomic request, atomically with respect to
// every QP of the device (sync/atomic on the 8-byte word), remembers the
// original value and sends it in an ATOMIC acknowledge.
func (q *QP) atomicLocked(w *worker, p *wire.Packet) {
	s := &q.eng
	r := &s.resp
	psn := p.BTH.PSN()
	a := p.AtomicETH
	va := a.VirtualAddress()
	if va&7 != 0 {
		q.responderErrorLocked(w, psn, wire.NAKInvalidRequest, 0)
		return
	}
	if !q.remoteAccessOK(a.RKey(), va, 8, verbs.AccessRemoteAtomic) {
		q.responderErrorLocked(w, psn, wire.NAKRemoteAccessError, 0)
		return
	}
	b, _ := s.e.cfg.MRs.Lookup(a.RKey(), q.pd, va, 8, verbs.AccessRemoteAtomic)
	word := (*uint64)(unsafe.Pointer(&b[0]))
	var orig uint64
	if p.BTH.OpCode() == wire.RCFetchAdd {
		orig = atomic.AddUint64(word, a.SwapAddData()) - a.SwapAddData()
	} else {
		for {
			orig = atomic.LoadUint64(word)
			if orig != a.CompareData() || atomic.CompareAndSwapUint64(word, orig, a.SwapAddData()) {
				break
			}
		}
	}
	r.msn = (r.msn + 1) & 0xffffff
	res := &r.res[r.resNext]
	r.resNext = (r.resNext + 1) % len(r.res)
	*res = resource{valid: true, atomic: true, firstPSN: psn, lastPSN: psn, orig: orig, msn: r.msn}
	r.epsn = psn.Add(1)
	q.sendAtomicAckLocked(w, res)
}

func (q *QP) sendAtomicAckLocked(w *worker, res *resource) {
	s := &q.eng
	var h wire.Headers
	h.BTH = wire.BTHFields{OpCode: wire.RCAtomicAcknowledge, PKey: 0xffff, DestQP: q.attr.DestQPNum, PSN: res.firstPSN}
	h.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: res.msn}
	h.AtomicAckETH = res.orig
	buf := w.txSlot()
	h.Encode(buf, 0)
	size := h.PacketLen(0)
	wire.Seal(&s.remote, buf[:size])
	w.queueTx(size, &s.remote)
}

// duplicateLocked answers a duplicate request (IBTA 9.7.5.1.3): a READ is
// executed again from its remembered resource, an ATOMIC's remembered
// result is sent again (never executed twice), anything else is
// acknowledged again.
func (q *QP) duplicateLocked(w *worker, p *wire.Packet) {
	s := &q.eng
	r := &s.resp
	psn := p.BTH.PSN()
	s.e.drop(DropDuplicate)
	s.e.c.dupAns.Add(1)
	switch p.Info().Kind {
	case wire.KindReadRequest, wire.KindCompareSwap, wire.KindFetchAdd:
		for i := range r.res {
			res := &r.res[i]
			if !res.valid || psn.Diff(res.firstPSN) < 0 || psn.Diff(res.lastPSN) > 0 {
				continue
			}
			if res.atomic {
				q.sendAtomicAckLocked(w, res)
			} else {
				q.sendReadResponsesLocked(w, res, psn)
			}
			return
		}
		// Too old to be remembered: nothing to replay.
		return
	}
	r.ackPending, r.ackPSN = true, r.epsn.Sub(1)
	w.markDirty(q)
}

// responderErrorLocked answers a request the responder cannot execute with
// a NAK and moves the QP to the error state (IBTA 9.9.3.1; rxe moves
// straight to ERR). status, if not 0, is reported on the receive WQE in
// progress.
func (q *QP) responderErrorLocked(w *worker, psn wire.PSN, code wire.NAKCode, status verbs.WCStatus) {
	r := &q.eng.resp
	q.sendAckLocked(w, psn, wire.NAKSyndrome(code))
	q.stateRO.Store(uint32(verbs.QPStateErr)) // before the completion, as sendErrorLocked
	if status != 0 && r.haveRecv {
		wc := verbs.WC{WRID: r.recv.WRID, Status: status, Opcode: verbs.WCRecv, QPNum: q.num}
		q.recvCQ.Push(&wc, false)
		r.haveRecv = false
	}
	q.stopTimerLocked()
	q.setStateLocked(verbs.QPStateErr, false)
}

// sendAckLocked sends an acknowledgement (ACK, RNR NAK or NAK) for psn,
// first sending any coalesced ACK so the peer sees them in order.
func (q *QP) sendAckLocked(w *worker, psn wire.PSN, syn wire.Syndrome) {
	q.flushAckLocked(w)
	q.buildAckLocked(w, psn, syn)
}

func (q *QP) buildAckLocked(w *worker, psn wire.PSN, syn wire.Syndrome) {
	s := &q.eng
	var h wire.Headers
	h.BTH = wire.BTHFields{OpCode: wire.RCAcknowledge, PKey: 0xffff, DestQP: q.attr.DestQPNum, PSN: psn}
	h.AETH = wire.AETHFields{Syndrome: syn, MSN: s.resp.msn}
	buf := w.txSlot()
	h.Encode(buf, 0)
	size := h.PacketLen(0)
	wire.Seal(&s.remote, buf[:size])
	w.queueTx(size, &s.remote)
	s.e.c.acks.Add(1)
}

// flushAckLocked sends the coalesced ACK: one per batch acknowledges every
// request up to its PSN (IBTA 9.7.5.1.1).
func (q *QP) flushAckLocked(w *worker) {
	r := &q.eng.resp
	if !r.ackPending || q.eng.e == nil {
		return
	}
	r.ackPending = false
	q.buildAckLocked(w, r.ackPSN, wire.ACKSyndrome(wire.CreditsInvalid))
}

// receiveUCLocked is the UC responder: no acknowledgements; a missing
// packet drops the message it belongs to, and the next First or Only packet
// starts afresh (IBTA 9.8.3).
func (q *QP) receiveUCLocked(w *worker, p *wire.Packet) {
	s := &q.eng
	r := &s.resp
	psn := p.BTH.PSN()
	info := p.Info()
	if psn != r.epsn || r.ucResync {
		if !info.Pos.First() {
			s.e.drop(DropUCOutOfSequence)
			r.ucResync = true
			r.epsn = psn.Add(1)
			return
		}
		r.ucResync = false
	}
	r.epsn = psn.Add(1)
	switch info.Kind {
	case wire.KindSend:
		if info.Pos.First() {
			if !r.haveRecv && !q.takeRecvLocked(&r.recv) {
				s.e.drop(DropUCNoReceive)
				r.ucResync = true
				return
			}
			r.haveRecv, r.recvOff = true, 0 // an unfinished message's WQE is reused
		}
		if !r.haveRecv {
			s.e.drop(DropUCOutOfSequence)
			return
		}
		if st := scatter(s.e.cfg.MRs, q.pd, r.recv.SGL, r.recvOff, p.Payload); st != mr.OK {
			status := verbs.WCLocProtErr
			if st == mr.BadBounds {
				status = verbs.WCLocLenErr
			}
			q.stateRO.Store(uint32(verbs.QPStateErr)) // visible before the completion
			q.completeRecvLocked(w, &r.recv, status, r.recvOff, p, 0)
			r.haveRecv = false
			q.setStateLocked(verbs.QPStateErr, false)
			return
		}
		r.recvOff += uint32(len(p.Payload))
		if info.Pos.Last() {
			var flags verbs.WCFlags
			var imm uint32
			if p.ImmDt != nil {
				flags, imm = verbs.WCFlagWithImm, p.ImmDt.Value()
			}
			q.completeRecvLocked(w, &r.recv, verbs.WCSuccess, r.recvOff, p, flags, imm)
			r.haveRecv = false
		}
	case wire.KindWrite:
		if !q.writeLocked(w, p, false) {
			r.ucResync = true
		}
	}
}

// receiveUDLocked is the UD responder: Q_Key check, one receive WQE per
// message, the 40-byte GRH area filled as rxe fills it (IBTA 11.4.1.2).
func (q *QP) receiveUDLocked(w *worker, p *wire.Packet) {
	s := &q.eng
	if p.DETH.QKey() != q.attr.QKey {
		s.e.drop(DropQKey)
		return
	}
	need := uint64(grhSize + len(p.Payload))
	var wqe srq.RecvWQE
	var taken, present bool
	if q.srq != nil {
		taken, present = q.srq.TakeIfFits(&wqe, need)
	} else {
		taken, present = q.rq.TakeIfFits(&wqe, need)
	}
	switch {
	case !present:
		s.e.drop(DropUDNoReceive)
		return
	case !taken:
		s.e.drop(DropUDTooLong) // ibv_post_recv(3): UD drops a message longer than the buffer
		return
	}
	var grh [grhSize]byte
	putGRH(grh[:], &p.Net, len(p.Raw))
	t := s.e.cfg.MRs
	if st := scatter(t, q.pd, wqe.SGL, 0, grh[:]); st == mr.OK {
		st = scatter(t, q.pd, wqe.SGL, grhSize, p.Payload)
		if st != mr.OK {
			q.completeRecvLocked(w, &wqe, verbs.WCLocProtErr, 0, p, 0)
			return
		}
	} else {
		q.completeRecvLocked(w, &wqe, verbs.WCLocProtErr, 0, p, 0)
		return
	}
	flags := verbs.WCFlagGRH
	var imm uint32
	if p.ImmDt != nil {
		flags |= verbs.WCFlagWithImm
		imm = p.ImmDt.Value()
	}
	q.completeRecvLocked(w, &wqe, verbs.WCSuccess, uint32(need), p, flags, imm)
}

// grhSize is the GRH area at the start of every UD receive buffer.
const grhSize = 40

// putGRH fills a UD receive buffer's GRH area as rxe does: for IPv4, 20
// zero bytes and then the IPv4 header; for IPv6, the IPv6 header.
func putGRH(dst []byte, n *wire.Net, ibLen int) {
	clear(dst)
	var hdr [wire.IPv6HeaderSize + wire.UDPHeaderSize]byte
	wire.EncodeIPUDP(hdr[:], n, ibLen)
	if n.IsIPv6() {
		copy(dst, hdr[:wire.IPv6HeaderSize])
		return
	}
	copy(dst[20:], hdr[:wire.IPv4HeaderSize])
}
