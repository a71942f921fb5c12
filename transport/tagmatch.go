package transport

import (
	"math"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Tag matching on the wire (rdma-core Documentation/tag_matching.md;
// docs/tag-matching.md): a SEND to a QP on a tag-matching SRQ begins with
// a TMH, and for a rendezvous with an RVH. The responder chooses the
// message's destination from its first packet: a tag entry the SRQ's
// list matches, or an ordinary SRQ buffer. A matched rendezvous places
// nothing: the QP itself READs the sender's buffer into the tag's (an
// Issue of its own) and then SENDs the FIN the sender waits for.

// TagVerdict is where a tagged message goes.
type TagVerdict uint8

// Tag verdicts.
const (
	TagNone       TagVerdict = iota // nowhere: no enabled entry matched and no ordinary buffer (RNR)
	TagMatched                      // a tag entry, consumed
	TagUnexpected                   // an ordinary buffer; the unexpected count advanced
)

// TagQueue is a tag-matching SRQ as the responder reaches it.
type TagQueue interface {
	// Arrive chooses the destination of a tagged (EAGER or RNDV)
	// message with tag: TagMatched fills dst with the entry's
	// recv_wr_id and scatter list and returns its handle; TagUnexpected
	// takes an ordinary buffer into dst and returns whether its
	// completion asks for a sync; TagNone changes nothing.
	Arrive(tag uint64, dst *verbs.RecvWQE) (v TagVerdict, handle uint32, syncReq bool)
	// Take takes an ordinary buffer (a NO_TAG message).
	Take(dst *verbs.RecvWQE) bool
	// Complete queues a completion on the SRQ's CQ; ends: it ends the
	// tag entry handle (freed once the application polled it).
	Complete(wc verbs.WC, solicited bool, ends bool, handle uint32)
}

// tmKind is how the SEND in progress was classified.
type tmKind uint8

const (
	tmNone       tmKind = iota // not a SEND to a tag-matching SRQ
	tmNoTag                    // NO_TAG, FIN or no TMH: an ordinary buffer, whole (TM_NO_TAG)
	tmUnexpected               // EAGER or RNDV matching no enabled entry: an ordinary buffer, whole
	tmEager                    // matched EAGER: the bytes after the TMH go to the tag's buffer
	tmRndv                     // matched RNDV: nothing is placed; the data is READ afterwards
)

// tmMessage is the tag-matching state of the SEND in progress.
type tmMessage struct {
	kind    tmKind
	handle  uint32
	tag     uint64
	appCtx  uint32
	syncReq bool
	// skip: bytes of the message still to drop before placing (the TMH
	// of an EAGER; all of a rendezvous request).
	skip uint32
	rvh  wire.RVHFields
}

// rndvSlots is how many rendezvous READs a QP runs at once. A READ holds
// one of the QP's InternalSlots requests and its FIN takes the same slot
// when the READ completes (completeHead frees it before calling done), so
// the FINs waiting for their ACKs and the READs never need more.
const rndvSlots = InternalSlots

// MaxTagSGE bounds a tag's scatter list: a rendezvous READ keeps it in a
// fixed array. A tag-matching SRQ refuses a larger tm_caps.max_sge.
const MaxTagSGE = 4

// maxMessage is the longest message, and so the longest READ (IBTA
// 9.4.4: 2^31 bytes).
const maxMessage = 1 << 31

// rndvOp is one rendezvous in progress: its READ, then its FIN.
type rndvOp struct {
	busy      bool // from the match until its READ ends (the tag's last completion)
	handle    uint32
	wrID      uint64
	tag       uint64
	appCtx    uint32
	length    uint32
	sgl       [MaxTagSGE]verbs.SGE
	sglN      int
	readDone  func(verbs.WCStatus) // made once per slot
	finHeader [wire.TMHSize]byte
}

// finDone is the outcome of a FIN: nothing waits for it.
func finDone(verbs.WCStatus) {}

// rndvState is a QP's rendezvous slots, made on the first rendezvous.
type rndvState struct {
	ops [rndvSlots]rndvOp
}

// chooseTagged chooses the destination of a SEND to a tag-matching SRQ
// from its first packet. It reports false, changing nothing, when there
// is none now (an RNR NAK follows).
func (r *Responder) chooseTagged(q *QP, p *wire.Packet) bool {
	m := &r.tm
	*m = tmMessage{}
	tmh, rvh, _, ok := wire.ParseTMH(p.Payload)
	op := wire.TMNoTag
	if ok {
		op = tmh.Opcode()
	}
	switch op {
	case wire.TMEager, wire.TMRendezvous:
		if op == wire.TMRendezvous && (r.freeRndv(q) < 0 || q.internal >= InternalSlots) {
			return false // its READ would have no room: the sender tries again
		}
		v, h, syncReq := q.TQ.Arrive(tmh.Tag(), &r.recv)
		switch v {
		case TagNone:
			return false
		case TagUnexpected:
			m.kind, m.syncReq = tmUnexpected, syncReq
		case TagMatched:
			m.handle, m.tag, m.appCtx = h, tmh.Tag(), tmh.AppCtx()
			if op == wire.TMEager {
				m.kind, m.skip = tmEager, wire.TMHSize
			} else {
				m.kind, m.skip, m.rvh = tmRndv, math.MaxUint32, rvh.Fields()
			}
		}
	default:
		if !q.TQ.Take(&r.recv) {
			return false
		}
		m.kind = tmNoTag
	}
	return true
}

// completeTagged completes a SEND to a tag-matching SRQ at its last
// packet, on the SRQ's CQ; a matched rendezvous then starts its READ.
func (r *Responder) completeTagged(q *QP, p *wire.Packet, n uint32, flags verbs.WCFlags, imm uint32, fx *Effects) {
	m := &r.tm
	wc := verbs.WC{
		WRID:    r.recv.WRID,
		Status:  verbs.WCSuccess,
		Opcode:  verbs.WCTMRecv,
		ByteLen: n,
		QPNum:   q.P.QPN,
		SrcQP:   q.P.DestQPN,
		WCFlags: flags,
		ImmData: imm,
	}
	sol := p.BTH.SolicitedEvent()
	switch m.kind {
	case tmNoTag:
		wc.Opcode = verbs.WCTMNoTag
		q.TQ.Complete(wc, sol, false, 0)
	case tmUnexpected:
		if m.syncReq {
			wc.WCFlags |= verbs.WCFlagTMSyncReq
		}
		q.TQ.Complete(wc, sol, false, 0)
	case tmEager:
		wc.WCFlags |= verbs.WCFlagTMMatch | verbs.WCFlagTMDataValid
		wc.TMInfo = verbs.TMInfo{Tag: m.tag, Priv: m.appCtx}
		q.TQ.Complete(wc, sol, true, m.handle)
	case tmRndv:
		wc.WCFlags |= verbs.WCFlagTMMatch
		wc.ByteLen = m.rvh.Length
		wc.TMInfo = verbs.TMInfo{Tag: m.tag, Priv: m.appCtx}
		q.TQ.Complete(wc, sol, false, m.handle)
		r.startRndv(q, fx)
	case tmNone:
	}
	m.kind = tmNone
}

// failTagged completes the tag-matching message in progress with an
// error status (a message longer than its buffer, a bad buffer, the QP
// entering the error state).
func (r *Responder) failTagged(q *QP, status verbs.WCStatus) {
	m := &r.tm
	wc := verbs.WC{WRID: r.recv.WRID, Status: status, Opcode: verbs.WCTMRecv, QPNum: q.P.QPN}
	switch m.kind {
	case tmNoTag:
		wc.Opcode = verbs.WCTMNoTag
		q.TQ.Complete(wc, false, false, 0)
	case tmUnexpected:
		q.TQ.Complete(wc, false, false, 0)
	case tmEager, tmRndv:
		wc.TMInfo = verbs.TMInfo{Tag: m.tag, Priv: m.appCtx}
		q.TQ.Complete(wc, false, true, m.handle)
	case tmNone:
	}
	m.kind = tmNone
}

// freeRndv returns a free rendezvous slot, or -1.
func (r *Responder) freeRndv(q *QP) int {
	if r.rndv == nil {
		r.rndv = &rndvState{}
		for i := range r.rndv.ops {
			op := &r.rndv.ops[i]
			op.readDone = func(status verbs.WCStatus) { r.rndvFinish(q, op, status) }
		}
	}
	for i := range r.rndv.ops {
		if !r.rndv.ops[i].busy {
			return i
		}
	}
	return -1
}

// startRndv READs a matched rendezvous's data into its tag's buffer: as
// much as the RVH says, which must fit the buffer.
func (r *Responder) startRndv(q *QP, fx *Effects) {
	fx.Run = true // the READ, or at once the FIN, waits for Run
	m := &r.tm
	i := r.freeRndv(q) // chooseTagged made sure there is one
	op := &r.rndv.ops[i]
	*op = rndvOp{busy: true, handle: m.handle, wrID: r.recv.WRID, tag: m.tag, appCtx: m.appCtx,
		length: m.rvh.Length, readDone: op.readDone}
	// The tag's scatter list cut to the RVH's length.
	left := m.rvh.Length
	for _, sge := range r.recv.SGL {
		if left == 0 || op.sglN == len(op.sgl) {
			break
		}
		sge.Length = min(sge.Length, left)
		left -= sge.Length
		op.sgl[op.sglN] = sge
		op.sglN++
	}
	switch {
	case left > 0 || m.rvh.Length > maxMessage:
		// ibv_post_recv(3)'s rule for a message longer than its buffer;
		// a READ longer than a message may be is refused the same way.
		r.rndvFinish(q, op, verbs.WCLocLenErr)
	case m.rvh.Length == 0:
		r.rndvFinish(q, op, verbs.WCSuccess)
	default:
		rd := verbs.SendWR{Opcode: verbs.WRRDMARead, RDMA: verbs.RDMAInfo{RemoteAddr: m.rvh.VirtualAddress, RKey: m.rvh.RKey}}
		if !q.Issue(rd, op.sgl[:op.sglN], op.readDone) {
			// The requester is not running (SQE): the data cannot be
			// fetched.
			r.rndvFinish(q, op, verbs.WCGeneralErr)
		}
	}
}

// rndvFinish completes a rendezvous (its READ's done): the tag's second
// completion (IBV_WC_TM_DATA_VALID when its data is in place) ends the
// entry, and the FIN tells the sender its buffer is free. The FIN is sent
// whatever the outcome, so that the sender does not wait for ever; it is
// not sent by a QP whose requester stopped (SQE, ERR), and then the
// connection is broken anyway.
func (r *Responder) rndvFinish(q *QP, op *rndvOp, status verbs.WCStatus) {
	op.busy = false
	wc := verbs.WC{
		WRID:   op.wrID,
		Status: status,
		Opcode: verbs.WCTMRecv,
		QPNum:  q.P.QPN,
		SrcQP:  q.P.DestQPN,
		TMInfo: verbs.TMInfo{Tag: op.tag, Priv: op.appCtx},
	}
	if status == verbs.WCSuccess {
		wc.WCFlags, wc.ByteLen = verbs.WCFlagTMDataValid, op.length
	}
	q.TQ.Complete(wc, false, true, op.handle)
	wire.TMH(op.finHeader[:]).Encode(&wire.TMHFields{Opcode: wire.TMFin, AppCtx: op.appCtx, Tag: op.tag})
	q.IssueInline(verbs.SendWR{Opcode: verbs.WRSend}, op.finHeader[:], finDone)
}

// resetTagged ends the tag-matching work of a QP being reset: its
// queues are emptied without completions (IBTA 10.3.1), but a tag entry
// this QP consumed still gets its completion, flushed, so that its handle
// is not lost to the SRQ; the rendezvous slots are given up (their
// requests were dropped, not flushed).
func (r *Responder) resetTagged(q *QP) {
	if r.haveRecv && r.tm.kind != tmNone {
		r.haveRecv = false
		r.failTagged(q, verbs.WCWRFlushErr)
	}
	if r.rndv == nil {
		return
	}
	for i := range r.rndv.ops {
		op := &r.rndv.ops[i]
		if op.busy {
			wc := verbs.WC{WRID: op.wrID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCTMRecv, QPNum: q.P.QPN,
				TMInfo: verbs.TMInfo{Tag: op.tag, Priv: op.appCtx}}
			q.TQ.Complete(wc, false, true, op.handle)
		}
		op.busy = false
	}
}
