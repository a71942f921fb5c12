package transport

import (
	"time"

	"sync/atomic"
	"unsafe"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// ResponderState is where the responder is in the stream of request
// messages (IBTA 9.7.5 for RC, 9.8 for UC): which packet it expects next.
//
//	Inactive --RTR--> Idle --SEND First--> Send --SEND Last--> Idle
//	                   |  \--WRITE First--> Write --WRITE Last--> Idle
//	                   |
//	  (UC) a lost or refused packet --> DropMessage --First/Only--> Idle/...
//
// Any state moves to Inactive when the QP enters ERR or RESET. Answering
// an RDMA READ is a sub-machine of its own (ReplyState), since a
// duplicate READ may be answered again in the middle of a SEND.
type ResponderState uint8

// Responder states.
const (
	// ResponderInactive: the QP is not in RTR, RTS, SQD or SQE.
	ResponderInactive ResponderState = iota
	// ResponderIdle: between messages; a First or Only packet is next.
	ResponderIdle
	// ResponderSend: a SEND message is being received into a receive
	// WQE; its Middle or Last packet is next.
	ResponderSend
	// ResponderWrite: an RDMA WRITE message is being placed; its Middle
	// or Last packet is next.
	ResponderWrite
	// ResponderDropMessage: UC only: a packet of the message was lost or
	// refused; packets are dropped until the next First or Only (IBTA
	// 9.8.3.1).
	ResponderDropMessage
)

var responderStateNames = [...]string{"Inactive", "Idle", "Send", "Write", "DropMessage"}

func (s ResponderState) String() string { return responderStateNames[s] }

// ReplyState says whether the responder is sending the responses of an
// RDMA READ. While it is, later requests wait (rxe answers a READ before
// it looks at the next request), so that they execute after the READ has
// read its memory, in order; responses are built a budget at a time, so
// one long READ shares the link with every other QP.
type ReplyState uint8

// Reply states.
const (
	ReplyIdle      ReplyState = iota // no READ is being answered
	ReplyStreaming                   // sending a READ's responses from replyPSN on
)

func (s ReplyState) String() string { return [...]string{"Idle", "Streaming"}[s] }

// resource is a remembered READ or ATOMIC request (IBTA 9.7.5.1.3,
// "responder resources"; max_dest_rd_atomic of them), kept to answer a
// duplicate again.
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
	// sentTo is one past the highest READ response PSN sent: a response
	// before it sent again is a retransmission. runFrom and runAt are
	// where and when the responses last (re)started.
	sentTo, runFrom wire.PSN
	runAt           time.Time
}

// Responder executes incoming requests: it checks their sequence,
// chooses where each message's bytes go (a receive WQE, or the region an
// R_Key names), places them, and acknowledges.
type Responder struct {
	state ResponderState
	epsn  wire.PSN // expected PSN
	msn   uint32   // message sequence number (24 bits)
	// nakSent: a sequence or RNR NAK is outstanding for epsn; later
	// packets beyond it are dropped without another NAK until it
	// arrives (IBTA 9.7.5.2.2: one NAK per sequence error).
	nakSent bool

	// The receive WQE a SEND (or, at its last packet, a WRITE with
	// immediate) consumes. A UC message that was dropped leaves it to
	// the next message.
	recv     verbs.RecvWQE
	haveRecv bool
	// recvUD is the receive WQE a UD message takes (reused).
	recvUD  verbs.RecvWQE
	recvOff uint32
	// tm: how the SEND in progress goes to a tag-matching SRQ (tmNone
	// otherwise); rndv: the QP's rendezvous READs, made on first use.
	tm   tmMessage
	rndv *rndvState
	// The RDMA WRITE in progress (from its First packet's RETH).
	wr writeDest

	// The coalesced acknowledgement owed (IBTA 9.7.5.1.1).
	ackOwed bool
	ackPSN  wire.PSN

	// READ and ATOMIC responder resources.
	res     []resource
	resNext int
	// The READ being answered.
	reply    ReplyState
	replyRes int      // index in res
	replyPSN wire.PSN // next response to send
}

// writeDest is where an RDMA WRITE message goes.
type writeDest struct {
	va     uint64
	rkey   uint32
	length uint32 // the RETH's DMA Length
	off    uint32 // bytes placed so far
}

// setState is the responder's one transition point.
func (r *Responder) setState(s ResponderState) {
	if s == ResponderIdle || s == ResponderInactive {
		r.wr = writeDest{}
	}
	r.state = s
}

// setReply is the one transition point of the READ reply sub-machine.
func (r *Responder) setReply(s ReplyState, res int, psn wire.PSN) {
	r.reply, r.replyRes, r.replyPSN = s, res, psn
}

// start prepares the responder on entry to RTR.
func (r *Responder) start(q *QP, epsn wire.PSN) {
	*r = Responder{epsn: epsn, res: make([]resource, max(1, int(q.P.MaxDestRdAtomic))), recv: r.recv, recvUD: r.recvUD}
	r.recv.SGL, r.recvUD.SGL = r.recv.SGL[:0], r.recvUD.SGL[:0]
	r.setState(ResponderIdle)
}

// stop ends the responder's work (ERR). The receive WQE of a message in
// progress stays for TakeRecvInProgress.
func (r *Responder) stop() {
	r.setState(ResponderInactive)
	r.setReply(ReplyIdle, 0, 0)
	r.ackOwed = false
}

// receiveRC is the RC responder (IBTA 9.7.5).
func (r *Responder) receiveRC(q *QP, env *Env, p *wire.Packet, fx *Effects) {
	psn := p.BTH.PSN()
	info := p.Info()
	if r.reply == ReplyStreaming {
		// Requests wait for the READ being answered, except a duplicate
		// of that READ, which restarts its responses where it asks
		// (rxe's duplicate_request).
		if info.Kind == wire.KindReadRequest && psn.Diff(r.epsn) < 0 && r.restartReply(q, env, p) {
			env.Stats.Drop(DropDuplicate)
			env.Stats.DupAnswered.Add(1)
			fx.Run = true
			return
		}
		fx.Held = true
		return
	}
	switch d := psn.Diff(r.epsn); {
	case d > 0:
		// A packet is missing: one NAK per gap (IBTA 9.7.5.2.2, C9-?),
		// the packet is dropped.
		env.Stats.Drop(DropOutOfSequence)
		if !r.nakSent {
			r.nakSent = true
			env.Stats.SeqNAKsSent.Add(1)
			q.counts.SeqNAKsSent++
			r.sendAck(q, env, r.epsn, wire.NAKSyndrome(wire.NAKPSNSequenceError))
		}
		return
	case d < 0:
		r.duplicate(q, env, p, fx)
		return
	}
	r.nakSent = false
	if !r.sequenceOK(info) {
		// IBTA 9.7.5.2.4 (C9-?): a Middle or Last packet without its
		// First, or a new message before the Last of the one in
		// progress, is an invalid request (rxe's MISSING_OPCODE_FIRST
		// and MISSING_OPCODE_LAST_C, class C).
		r.invalidRequest(q, env, psn, verbs.WCRemInvReqErr, fx)
		return
	}
	// The QP must allow the operation (qp_access_flags), and READ and
	// ATOMIC need responder resources (max_dest_rd_atomic): otherwise an
	// Invalid Request NAK (ibv_poll_cq(3), IBV_WC_REM_INV_REQ_ERR; rxe's
	// check_op_valid and RESPST_ERR_TOO_MANY_RDMA_ATM_REQ).
	if need := accessFor(info.Kind); need != 0 &&
		(q.P.Access&need == 0 || need != verbs.AccessRemoteWrite && q.P.MaxDestRdAtomic == 0) {
		r.invalidRequest(q, env, psn, verbs.WCRemInvReqErr, fx)
		return
	}
	if !lengthOK(info.Pos, len(p.Payload), q.P.MTU) {
		// IBTA 9.7.5.2.4: a First or Middle packet carries exactly one
		// path MTU, a Last packet 1 to MTU bytes, an Only packet at most
		// MTU (rxe's check_length).
		r.invalidRequest(q, env, psn, verbs.WCRemInvReqErr, fx)
		return
	}
	switch info.Kind {
	case wire.KindSend:
		if !r.send(q, env, p, fx) {
			return
		}
	case wire.KindWrite:
		if !r.write(q, env, p, true, fx) {
			return
		}
	case wire.KindReadRequest:
		r.readRequest(q, env, p, fx)
		return
	case wire.KindCompareSwap, wire.KindFetchAdd:
		r.atomic(q, env, p, fx)
		return
	default:
		r.invalidRequest(q, env, psn, verbs.WCRemInvReqErr, fx)
		return
	}
	r.epsn = psn.Add(1)
	if p.BTH.AckReq() {
		r.ackOwed, r.ackPSN = true, psn
		fx.Run = true
	}
}

// sequenceOK reports whether a packet may come next in the message
// stream: Middle and Last continue the message in progress, of the same
// kind; First and Only start a new one between messages.
func (r *Responder) sequenceOK(info *wire.OpInfo) bool {
	switch r.state {
	case ResponderSend:
		return info.Kind == wire.KindSend && !info.Pos.First()
	case ResponderWrite:
		return info.Kind == wire.KindWrite && !info.Pos.First()
	case ResponderIdle, ResponderDropMessage:
		return info.Pos.First()
	case ResponderInactive:
	}
	return false
}

// lengthOK checks a request packet's payload length against its
// position in the message.
func lengthOK(pos wire.Position, n int, mtu uint32) bool {
	switch pos {
	case wire.PosFirst, wire.PosMiddle:
		return n == int(mtu)
	case wire.PosLast:
		return n > 0 && n <= int(mtu)
	case wire.PosOnly:
		return n <= int(mtu)
	}
	return false
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
	default:
		return 0
	}
}

// send places one SEND packet: the First packet chooses the destination
// (a receive WQE), every packet places its bytes. It reports false when
// the packet was not accepted (an RNR NAK or an error was sent).
func (r *Responder) send(q *QP, env *Env, p *wire.Packet, fx *Effects) bool {
	info := p.Info()
	psn := p.BTH.PSN()
	if info.Pos.First() {
		if !r.chooseSendDest(q, p) {
			// IBTA 9.7.5.2.8: no receive WQE, an RNR NAK; the requester
			// tries again after min_rnr_timer.
			env.Stats.Drop(DropRNR)
			env.Stats.RNRNAKsSent.Add(1)
			q.counts.RNRNAKsSent++
			r.nakSent = true
			r.sendAck(q, env, psn, wire.RNRNAKSyndrome(q.P.MinRNRTimer))
			return false
		}
		if !info.Pos.Last() {
			r.setState(ResponderSend)
		}
	}
	payload := p.Payload
	if r.tm.skip > 0 {
		// A tag-matching header is not placed (nor any of a rendezvous
		// request).
		k := min(r.tm.skip, uint32(len(payload)))
		payload, r.tm.skip = payload[k:], r.tm.skip-k
	}
	switch scatter(env.Mem, q.P.PD, r.recv.SGL, r.recvOff, payload) {
	case scatterTooLong:
		// ibv_post_recv(3): a message longer than the receive buffer
		// completes with a local length error; the requester gets an
		// invalid request NAK (IBTA 9.7.5.2.4).
		r.invalidRequest(q, env, psn, verbs.WCLocLenErr, fx)
		return false
	case scatterBadLocal:
		r.invalidRequest(q, env, psn, verbs.WCLocProtErr, fx)
		return false
	case scatterOK:
	}
	r.recvOff += uint32(len(payload))
	if !info.Pos.Last() {
		return true
	}
	r.setState(ResponderIdle)
	if p.IETH != nil {
		// SEND with Invalidate names an R_Key to invalidate, and softhca
		// has no memory region or window that can be invalidated: the
		// receive completes in error and the QP moves to the error
		// state, as rxe does when its invalidation fails (rxe_resp.c,
		// RESPST_ERR_INVALIDATE_RKEY, "Class J"); the packet itself is
		// acknowledged.
		env.Stats.Drop(DropInvalidRequest)
		if p.BTH.AckReq() {
			r.sendAck(q, env, psn, wire.ACKSyndrome(wire.CreditsInvalid))
		}
		fx.fail(FailRecv, verbs.WCRemInvReqErr)
		return false
	}
	r.msn = (r.msn + 1) & 0xffffff
	var flags verbs.WCFlags
	var imm uint32
	if p.ImmDt != nil {
		flags, imm = verbs.WCFlagWithImm, p.ImmDt.Value()
	}
	r.completeRecv(q, p, verbs.WCRecv, r.recvOff, flags, imm, fx)
	return true
}

// chooseSendDest chooses the destination of a new SEND message from its
// first packet: on a tag-matching SRQ, what its TMH says; otherwise the
// next receive WQE.
func (r *Responder) chooseSendDest(q *QP, p *wire.Packet) bool {
	if q.TQ == nil {
		return r.chooseRecv(q)
	}
	if !r.chooseTagged(q, p) {
		return false
	}
	r.haveRecv, r.recvOff = true, 0
	return true
}

// chooseRecv chooses the destination of a new SEND message (or a WRITE
// with immediate): the next receive WQE of the QP's receive queue or
// SRQ. A WQE left by a dropped UC message is used first.
func (r *Responder) chooseRecv(q *QP) bool {
	if !r.haveRecv {
		if !q.RQ.Take(&r.recv) {
			return false
		}
		r.haveRecv = true
	}
	r.recvOff = 0
	return true
}

// write places one RDMA WRITE packet. The First packet chooses the
// destination (the RETH's address, R_Key and length, checked whole); each
// packet must carry exactly what its position leaves, and its bytes land
// only if its region is still there. It reports false when the packet
// was not accepted. reliable selects RC behaviour (NAKs); UC drops the
// message instead.
func (r *Responder) write(q *QP, env *Env, p *wire.Packet, reliable bool, fx *Effects) bool {
	info := p.Info()
	psn := p.BTH.PSN()
	refuse := func(code wire.NAKCode, status verbs.WCStatus) bool {
		if reliable {
			if code == wire.NAKRemoteAccessError {
				r.remoteAccessError(q, env, psn, fx)
			} else {
				r.invalidRequest(q, env, psn, status, fx)
			}
		} else {
			env.Stats.Drop(DropUCInvalid)
			r.setState(ResponderDropMessage)
		}
		return false
	}
	if info.Pos.First() {
		d := writeDest{va: p.RETH.VirtualAddress(), rkey: p.RETH.RKey(), length: p.RETH.DMALength()}
		if d.length > 1<<31 {
			return refuse(wire.NAKInvalidRequest, verbs.WCRemInvReqErr)
		}
		if q.P.Access&verbs.AccessRemoteWrite == 0 ||
			d.length > 0 && !r.accessOK(q, env, d.rkey, d.va, d.length, verbs.AccessRemoteWrite) {
			// IBTA 9.7.5.2.6 (C9-?): an R_Key violation is a remote
			// access error.
			return refuse(wire.NAKRemoteAccessError, verbs.WCRemAccessErr)
		}
		r.wr = d
	}
	n := uint32(len(p.Payload))
	left := r.wr.length - r.wr.off
	if info.Pos.Last() && n != left || !info.Pos.Last() && n >= left {
		// The packets of a WRITE carry exactly its DMA Length (IBTA
		// 9.7.5.2.4; rxe's check_rkey length checks).
		return refuse(wire.NAKInvalidRequest, verbs.WCRemInvReqErr)
	}
	if p.ImmDt != nil && !r.chooseRecv(q) {
		// The immediate needs a receive WQE: without one nothing of the
		// packet is placed (IBTA 9.7.5.2.8; rxe checks resources before
		// it executes), and the requester sends it again after the RNR
		// wait.
		if reliable {
			env.Stats.Drop(DropRNR)
			env.Stats.RNRNAKsSent.Add(1)
			q.counts.RNRNAKsSent++
			r.nakSent = true
			r.sendAck(q, env, psn, wire.RNRNAKSyndrome(q.P.MinRNRTimer))
		} else {
			env.Stats.Drop(DropUCNoReceive)
			r.setState(ResponderDropMessage)
		}
		return false
	}
	if n > 0 {
		b, ok := env.Mem.Lookup(r.wr.rkey, q.P.PD, r.wr.va+uint64(r.wr.off), n, verbs.AccessRemoteWrite)
		if !ok {
			// The region went away during the message. A receive WQE
			// taken for the immediate completes with the error.
			return refuse(wire.NAKRemoteAccessError, verbs.WCRemAccessErr)
		}
		copy(b, p.Payload)
	}
	r.wr.off += n
	if !info.Pos.Last() {
		r.setState(ResponderWrite)
		return true
	}
	length := r.wr.length
	r.setState(ResponderIdle)
	r.msn = (r.msn + 1) & 0xffffff
	if p.ImmDt != nil {
		r.completeRecv(q, p, verbs.WCRecvRDMAWithImm, length, verbs.WCFlagWithImm, p.ImmDt.Value(), fx)
	}
	return true
}

// accessOK checks an R_Key access to [va, va+n) for the QP's PD.
func (r *Responder) accessOK(q *QP, env *Env, rkey uint32, va uint64, n uint32, need verbs.AccessFlags) bool {
	_, ok := env.Mem.Lookup(rkey, q.P.PD, va, n, need)
	return ok
}

// readRequest accepts an RDMA READ request: it checks the R_Key for the
// whole range, remembers the request as a responder resource, and starts
// answering it (the responses are built by Run).
func (r *Responder) readRequest(q *QP, env *Env, p *wire.Packet, fx *Effects) {
	psn := p.BTH.PSN()
	va, rkey, n := p.RETH.VirtualAddress(), p.RETH.RKey(), p.RETH.DMALength()
	if n > 1<<31 {
		r.invalidRequest(q, env, psn, verbs.WCRemInvReqErr, fx)
		return
	}
	if n > 0 && !r.accessOK(q, env, rkey, va, n, verbs.AccessRemoteRead) {
		r.remoteAccessError(q, env, psn, fx)
		return
	}
	npkts := packetsFor(n, q.P.MTU)
	// C9-148: the MSN counts a READ when it is executed.
	r.msn = (r.msn + 1) & 0xffffff
	i := r.resNext
	r.resNext = (r.resNext + 1) % len(r.res)
	r.res[i] = resource{valid: true, firstPSN: psn, lastPSN: psn.Add(npkts - 1), va: va, rkey: rkey, length: n, msn: r.msn, sentTo: psn, runFrom: psn, runAt: env.Now}
	r.epsn = psn.Add(npkts)
	r.flushAck(q, env) // acknowledgements of earlier requests go first
	r.setReply(ReplyStreaming, i, psn)
	fx.Run = true
}

// restartReply handles a duplicate of the READ being answered: its
// responses start again at the duplicate's PSN, provided it asks for the
// same region (rxe's duplicate_request checks the R_Key and the range).
// It reports false when the duplicate is for another request.
func (r *Responder) restartReply(q *QP, env *Env, p *wire.Packet) bool {
	res := &r.res[r.replyRes]
	psn := p.BTH.PSN()
	if !res.valid || res.atomic || !resHolds(res, psn) || !r.sameRead(res, p) {
		return false
	}
	r.setReply(ReplyStreaming, r.replyRes, psn)
	r.readLost(q, env, res, psn)
	return true
}

// readLost answers a duplicate READ that asks again for responses already
// sent: they were lost on the way, a congestion signal for the responder
// (the requester sends no acknowledgement of READ responses), which cuts
// its rate.
func (r *Responder) readLost(q *QP, env *Env, res *resource, psn wire.PSN) {
	if psn.Diff(res.sentTo) >= 0 {
		return
	}
	if psn.Diff(res.runFrom) <= 0 {
		// Nothing got through since the last restart (the requester's
		// timer asks again): the cut that restart made stands.
		res.runFrom, res.runAt = psn, env.Now
		return
	}
	// What the requester received in order since the last restart, over
	// the time the responder took to send what it sent since (the
	// requester may ask again only after its timer): the send rate times
	// the share that got through, the rate the path delivered.
	delivered := 0.0
	if d := q.rate.lastSent.Sub(res.runAt); d > 0 {
		delivered = float64(uint32(psn.Diff(res.runFrom))*q.P.MTU) / d.Seconds()
	}
	q.rate.lossCut(env, delivered)
	res.runFrom, res.runAt = psn, env.Now
}

// sameRead reports whether a duplicate READ request asks for the part of
// a remembered READ that starts at its PSN.
func (r *Responder) sameRead(res *resource, p *wire.Packet) bool {
	return p.RETH.RKey() == res.rkey && p.RETH.VirtualAddress() >= res.va &&
		p.RETH.VirtualAddress()+uint64(p.RETH.DMALength()) <= res.va+uint64(res.length)
}

func resHolds(res *resource, psn wire.PSN) bool {
	return psn.Diff(res.firstPSN) >= 0 && psn.Diff(res.lastPSN) <= 0
}

// runReadReply builds the responses of the READ being answered, within
// the budget, reading the region as it goes: a region that went away
// ends the READ with a remote access error NAK (IBTA 9.7.5.2.6) instead of
// a response (nothing stale is ever sent).
func (r *Responder) runReadReply(q *QP, env *Env, fx *Effects) {
	if r.reply != ReplyStreaming {
		return
	}
	res := &r.res[r.replyRes]
	mtu := q.P.MTU
	npkts := packetsFor(res.length, mtu)
	for r.reply == ReplyStreaming {
		if !env.budgetLeft() {
			fx.More = true
			return
		}
		if !q.rate.allow(env, int(q.P.MTU)+maxHeaders) {
			return // Deadline says when the pacer lets it go on
		}
		i := uint32(r.replyPSN.Diff(res.firstPSN))
		off := i * mtu
		n := min(mtu, res.length-min(off, res.length))
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
		h.BTH.PKey, h.BTH.DestQP, h.BTH.PSN = 0xffff, q.P.DestQPN, r.replyPSN
		h.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: res.msn}
		var src []byte
		if n > 0 {
			b, ok := env.Mem.Lookup(res.rkey, q.P.PD, res.va+uint64(off), n, verbs.AccessRemoteRead)
			if !ok {
				r.setReply(ReplyIdle, 0, 0)
				r.remoteAccessError(q, env, h.BTH.PSN, fx)
				return
			}
			src = b
		}
		buf := env.Out.Buffer()
		hl := h.Encode(buf, int(n))
		size := h.PacketLen(int(n))
		if env.Gather != nil && n >= gatherMin {
			// The response leaves from the region, as an RC requester's
			// packets do.
			q.emitGather(env, buf, hl, size, src, &q.P.Path)
		} else {
			copy(buf[hl:], src)
			q.icrc.Seal(&q.P.Path, buf[:size])
			q.emit(env, size, &q.P.Path)
		}
		env.spend(size)
		q.rate.sent(env, size)
		if r.replyPSN.Diff(res.sentTo) < 0 {
			env.Stats.RetxPackets.Add(1)
		} else {
			res.sentTo = r.replyPSN.Add(1)
		}
		if i+1 >= npkts {
			r.setReply(ReplyIdle, 0, 0)
			return
		}
		r.replyPSN = r.replyPSN.Add(1)
	}
}

// atomic executes an ATOMIC request, atomically with respect to every QP
// of the device (sync/atomic on the 8-byte word), remembers the original
// value and sends it in an ATOMIC acknowledge (IBTA 9.4.5).
func (r *Responder) atomic(q *QP, env *Env, p *wire.Packet, fx *Effects) {
	psn := p.BTH.PSN()
	a := p.AtomicETH
	va := a.VirtualAddress()
	if va&7 != 0 {
		// IBTA 9.4.5 (C9-?): the address must be 8-byte aligned;
		// otherwise an invalid request (rxe: MISALIGNED_ATOMIC).
		r.invalidRequest(q, env, psn, verbs.WCRemInvReqErr, fx)
		return
	}
	b, ok := env.Mem.Lookup(a.RKey(), q.P.PD, va, 8, verbs.AccessRemoteAtomic)
	if !ok {
		r.remoteAccessError(q, env, psn, fx)
		return
	}
	word := (*uint64)(unsafe.Pointer(unsafe.SliceData(b)))
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
	i := r.resNext
	r.resNext = (r.resNext + 1) % len(r.res)
	r.res[i] = resource{valid: true, atomic: true, firstPSN: psn, lastPSN: psn, orig: orig, msn: r.msn}
	r.epsn = psn.Add(1)
	r.flushAck(q, env)
	r.sendAtomicAck(q, env, &r.res[i])
}

func (r *Responder) sendAtomicAck(q *QP, env *Env, res *resource) {
	var h wire.Headers
	h.BTH = wire.BTHFields{OpCode: wire.RCAtomicAcknowledge, PKey: 0xffff, DestQP: q.P.DestQPN, PSN: res.firstPSN}
	h.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: res.msn}
	h.AtomicAckETH = res.orig
	r.emit(q, env, &h)
}

// duplicate answers a duplicate request (IBTA 9.7.5.1.3, C9-105): a READ
// is answered again from its remembered resource (from the duplicate's
// PSN), an ATOMIC's remembered result is sent again (never executed
// twice), anything else is acknowledged again.
func (r *Responder) duplicate(q *QP, env *Env, p *wire.Packet, fx *Effects) {
	psn := p.BTH.PSN()
	env.Stats.Drop(DropDuplicate)
	env.Stats.DupAnswered.Add(1)
	switch p.Info().Kind {
	case wire.KindReadRequest, wire.KindCompareSwap, wire.KindFetchAdd:
		for i := range r.res {
			res := &r.res[i]
			if !res.valid || !resHolds(res, psn) {
				continue
			}
			if res.atomic {
				if p.Info().Kind != wire.KindReadRequest {
					r.flushAck(q, env)
					r.sendAtomicAck(q, env, res)
				}
				return
			}
			if p.Info().Kind == wire.KindReadRequest && r.sameRead(res, p) {
				r.flushAck(q, env)
				r.setReply(ReplyStreaming, i, psn)
				r.readLost(q, env, res, psn)
				fx.Run = true
			}
			return
		}
		// Too old to be remembered: nothing to replay (rxe: class D,
		// dropped).
		return
	default: // SEND, WRITE: acknowledged again
	}
	r.ackOwed, r.ackPSN = true, r.epsn.Sub(1)
	fx.Run = true
}

// invalidRequest answers a request the responder cannot execute with an
// Invalid Request NAK; the receive in progress completes with status and
// the QP moves to the error state (IBTA 9.9.3.1 class C; rxe moves
// straight to ERR).
func (r *Responder) invalidRequest(q *QP, env *Env, psn wire.PSN, status verbs.WCStatus, fx *Effects) {
	env.Stats.Drop(DropInvalidRequest)
	r.sendAck(q, env, psn, wire.NAKSyndrome(wire.NAKInvalidRequest))
	fx.fail(FailRecv, status)
}

// remoteAccessError answers an R_Key violation with a Remote Access
// Error NAK; the receive in progress completes with
// IBV_WC_REM_ACCESS_ERR and the QP moves to the error state (class C).
func (r *Responder) remoteAccessError(q *QP, env *Env, psn wire.PSN, fx *Effects) {
	env.Stats.Drop(DropRemoteAccess)
	r.sendAck(q, env, psn, wire.NAKSyndrome(wire.NAKRemoteAccessError))
	fx.fail(FailRecv, verbs.WCRemAccessErr)
}

// sendAck sends an acknowledgement (ACK, RNR NAK or NAK) for psn, after
// any coalesced ACK owed, so the peer sees them in PSN order.
func (r *Responder) sendAck(q *QP, env *Env, psn wire.PSN, syn wire.Syndrome) {
	r.flushAck(q, env)
	r.buildAck(q, env, psn, syn)
}

func (r *Responder) buildAck(q *QP, env *Env, psn wire.PSN, syn wire.Syndrome) {
	var h wire.Headers
	h.BTH = wire.BTHFields{OpCode: wire.RCAcknowledge, PKey: 0xffff, DestQP: q.P.DestQPN, PSN: psn}
	h.AETH = wire.AETHFields{Syndrome: syn, MSN: r.msn}
	r.emit(q, env, &h)
	env.Stats.AcksSent.Add(1)
}

// emit builds a packet without payload to the peer.
func (r *Responder) emit(q *QP, env *Env, h *wire.Headers) {
	buf := env.Out.Buffer()
	h.Encode(buf, 0)
	size := h.PacketLen(0)
	q.icrc.Seal(&q.P.Path, buf[:size])
	q.emit(env, size, &q.P.Path)
}

// flushAck sends the coalesced ACK: one per batch acknowledges every
// request up to its PSN (IBTA 9.7.5.1.1).
func (r *Responder) flushAck(q *QP, env *Env) {
	if !r.ackOwed {
		return
	}
	r.ackOwed = false
	r.buildAck(q, env, r.ackPSN, wire.ACKSyndrome(wire.CreditsInvalid))
}

// completeRecv completes the receive WQE of the message that ended.
func (r *Responder) completeRecv(q *QP, p *wire.Packet, op verbs.WCOpcode, n uint32, flags verbs.WCFlags, imm uint32, fx *Effects) {
	if r.tm.kind != tmNone {
		r.haveRecv = false
		fx.Delivered = true
		r.completeTagged(q, p, n, flags, imm, fx)
		return
	}
	wc := verbs.WC{
		WRID:    r.recv.WRID,
		Status:  verbs.WCSuccess,
		Opcode:  op,
		ByteLen: n,
		QPNum:   q.P.QPN,
		SrcQP:   q.P.DestQPN,
		WCFlags: flags,
		ImmData: imm,
	}
	r.haveRecv = false
	fx.Delivered = true
	q.RecvCQ.Push(wc, p.BTH.SolicitedEvent())
}

// completeInProgress completes the receive WQE a message in progress
// holds with an error status.
func (r *Responder) completeInProgress(q *QP, status verbs.WCStatus) {
	if !r.haveRecv {
		return
	}
	r.haveRecv = false
	if r.tm.kind != tmNone {
		r.failTagged(q, status)
		return
	}
	wc := verbs.WC{WRID: r.recv.WRID, Status: status, Opcode: verbs.WCRecv, QPNum: q.P.QPN}
	q.RecvCQ.Push(wc, false)
}

// takeInProgress hands out the receive WQE a message in progress holds.
// A message to a tag-matching SRQ is flushed here instead, on the SRQ's
// CQ (a tag entry is not the caller's to flush).
func (r *Responder) takeInProgress(q *QP, dst *verbs.RecvWQE) bool {
	if !r.haveRecv {
		return false
	}
	r.haveRecv = false
	if r.tm.kind != tmNone {
		r.failTagged(q, verbs.WCWRFlushErr)
		return false
	}
	dst.WRID = r.recv.WRID
	dst.SGL = append(dst.SGL[:0], r.recv.SGL...)
	return true
}

// receiveUC is the UC responder (IBTA 9.8): no acknowledgements; a
// missing or refused packet drops the message it belongs to, and the next
// First or Only packet starts afresh.
func (r *Responder) receiveUC(q *QP, env *Env, p *wire.Packet, fx *Effects) {
	psn := p.BTH.PSN()
	info := p.Info()
	inSequence := psn == r.epsn && r.state != ResponderDropMessage
	if psn.Diff(r.epsn) > 0 {
		// Packets were lost on the way: UC has no acknowledgement to
		// tell the sender, so a CNP asks it to slow down.
		q.lossCNP(env)
	}
	r.epsn = psn.Add(1)
	if !inSequence || !r.sequenceOK(info) {
		if !info.Pos.First() {
			// IBTA 9.8.3.1 (C9-?): drop until a new message starts.
			env.Stats.Drop(DropUCOutOfSequence)
			r.setState(ResponderDropMessage)
			return
		}
		// A First or Only packet starts a new message; the one in
		// progress is abandoned and its receive WQE serves the new one
		// (rxe's class D1).
		r.setState(ResponderIdle)
	}
	if !lengthOK(info.Pos, len(p.Payload), q.P.MTU) {
		env.Stats.Drop(DropUCInvalid)
		r.setState(ResponderDropMessage)
		return
	}
	switch info.Kind {
	case wire.KindSend:
		if info.Pos.First() {
			if !r.chooseRecv(q) {
				env.Stats.Drop(DropUCNoReceive)
				r.setState(ResponderDropMessage)
				return
			}
			if !info.Pos.Last() {
				r.setState(ResponderSend)
			}
		}
		switch scatter(env.Mem, q.P.PD, r.recv.SGL, r.recvOff, p.Payload) {
		case scatterTooLong:
			fx.fail(FailRecv, verbs.WCLocLenErr)
			return
		case scatterBadLocal:
			fx.fail(FailRecv, verbs.WCLocProtErr)
			return
		case scatterOK:
		}
		r.recvOff += uint32(len(p.Payload))
		if info.Pos.Last() {
			r.setState(ResponderIdle)
			var flags verbs.WCFlags
			var imm uint32
			if p.ImmDt != nil {
				flags, imm = verbs.WCFlagWithImm, p.ImmDt.Value()
			}
			r.completeRecv(q, p, verbs.WCRecv, r.recvOff, flags, imm, fx)
		}
	case wire.KindWrite:
		r.write(q, env, p, false, fx)
	default:
		env.Stats.Drop(DropUCInvalid)
		r.setState(ResponderDropMessage)
	}
}

// receiveUD is the UD responder (IBTA 9.8.4 / 11.4.1.2): Q_Key check, one
// receive WQE per message, the 40-byte GRH area filled as rxe fills it.
func (r *Responder) receiveUD(q *QP, env *Env, p *wire.Packet, fx *Effects) {
	if p.DETH.QKey() != q.P.QKey {
		env.Stats.Drop(DropQKey) // IBTA 10.2.5: the Q_Key must match
		return
	}
	if uint32(len(p.Payload)) > q.P.MTU {
		env.Stats.Drop(DropUDTooLongForMTU)
		return
	}
	need := uint64(grhSize + len(p.Payload))
	wqe := &r.recvUD
	taken, present := q.RQ.TakeIfFits(wqe, need)
	switch {
	case !present:
		env.Stats.Drop(DropUDNoReceive)
		return
	case !taken:
		env.Stats.Drop(DropUDTooLong) // ibv_post_recv(3): UD drops a message longer than the buffer
		return
	}
	var grh [grhSize]byte
	putGRH(grh[:], &p.Net, len(p.Raw))
	flags := verbs.WCFlagGRH
	var imm uint32
	if p.ImmDt != nil {
		flags |= verbs.WCFlagWithImm
		imm = p.ImmDt.Value()
	}
	wc := verbs.WC{WRID: wqe.WRID, Status: verbs.WCSuccess, Opcode: verbs.WCRecv, ByteLen: uint32(need),
		QPNum: q.P.QPN, SrcQP: p.DETH.SrcQP(), WCFlags: flags, ImmData: imm}
	if scatter(env.Mem, q.P.PD, wqe.SGL, 0, grh[:]) != scatterOK ||
		scatter(env.Mem, q.P.PD, wqe.SGL, grhSize, p.Payload) != scatterOK {
		// A receive buffer that cannot be written is a local error of
		// the QP: the WQE completes with it and the QP moves to the
		// error state, as on RC and UC (rxe: class A).
		wc = verbs.WC{WRID: wqe.WRID, Status: verbs.WCLocProtErr, Opcode: verbs.WCRecv, QPNum: q.P.QPN, SrcQP: p.DETH.SrcQP()}
		q.RecvCQ.Push(wc, false)
		fx.fail(FailRecv, verbs.WCLocProtErr)
		return
	}
	fx.Delivered = true
	q.RecvCQ.Push(wc, p.BTH.SolicitedEvent())
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
