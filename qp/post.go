package qp

import (
	"syscall"

	"github.com/softhca/softhca/srq"
	"github.com/softhca/softhca/transport"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// sendOpcodes says, indexed by QP type, which send opcodes each transport
// accepts
// (ibv_post_send(3); IBTA table 38: UC has no READ, atomics or SEND with
// Invalidate, UD only has SEND). LOCAL_INV and BIND_MW need memory windows
// and fast-registration MRs, which softhca does not implement yet.
var sendOpcodes = [...]uint32{
	verbs.QPTypeRC: 1<<verbs.WRRDMAWrite | 1<<verbs.WRRDMAWriteWithImm | 1<<verbs.WRSend |
		1<<verbs.WRSendWithImm | 1<<verbs.WRRDMARead | 1<<verbs.WRAtomicCmpAndSwp |
		1<<verbs.WRAtomicFetchAndAdd | 1<<verbs.WRSendWithInv,
	verbs.QPTypeUC: 1<<verbs.WRRDMAWrite | 1<<verbs.WRRDMAWriteWithImm | 1<<verbs.WRSend |
		1<<verbs.WRSendWithImm,
	verbs.QPTypeUD: 1<<verbs.WRSend | 1<<verbs.WRSendWithImm,
}

const knownSendFlags = verbs.SendFence | verbs.SendSignaled | verbs.SendSolicited | verbs.SendInline

// PostSend posts a linked list of send work requests (ibv_post_send). It
// stops at the first request that is invalid or does not fit and returns
// it with the error; the requests before it are posted. By state
// (ibv_post_send(3)): RESET, INIT and RTR fail at once with EINVAL; in RTS
// work is processed; in SQD it is queued and held until the QP returns to
// RTS; in SQE and ERR it is accepted and completed with
// IBV_WC_WR_FLUSH_ERR.
func (q *QP) PostSend(wr *verbs.SendWR) (*verbs.SendWR, error) {
	bad, ring, err := q.postSend(wr)
	switch ring {
	case ringIdle:
		q.h.Ring() // outside the QP's lock: may run the requester here
	case ringBusy:
		q.h.Kick()
	case ringNone:
	}
	return bad, err
}

// How PostSend rings the doorbell. With busy polling, as rxe does, the
// requester runs in the poster's goroutine when the send queue held
// nothing else (a lone request, sent at once); a poster adding to a
// queue the transport is still working on leaves the work to the worker,
// which sends the queued requests in batches.
type doorbell uint8

const (
	ringNone doorbell = iota
	ringIdle          // the send queue held only what this call posted
	ringBusy          // the transport still has earlier requests
)

func (q *QP) postSend(wr *verbs.SendWR) (bad *verbs.SendWR, ring doorbell, err error) {
	const op = "post_send"
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.life != alive {
		return wr, ringNone, verbs.Errorf(op, syscall.EINVAL, "QP %#x is destroyed", q.num)
	}
	st := q.attr.QPState
	switch st {
	case verbs.QPStateReset, verbs.QPStateInit, verbs.QPStateRTR:
		return wr, ringNone, verbs.Errorf(op, syscall.EINVAL, "QP %#x is in %s", q.num, st)
	default: // RTS, SQD, SQE, ERR accept posts
	}
	bad = wr
	posted := 0
	for ; wr != nil; wr = wr.Next {
		if err = q.validateSend(wr); err != nil {
			bad = wr
			break
		}
		if q.sq.Len()-q.tp.Internal() >= int(q.cfg.Cap.MaxSendWR) || q.sq.Full() {
			bad, err = wr, verbs.Errorf(op, syscall.ENOMEM, "QP %#x: wr_id %#x: send queue is full (max_send_wr %d)", q.num, wr.WRID, q.cfg.Cap.MaxSendWR)
			break
		}
		if err = q.pushSendLocked(wr); err != nil {
			bad = wr
			break
		}
		posted++
	}
	if err == nil {
		bad = nil
	}
	switch st {
	case verbs.QPStateSQE, verbs.QPStateErr:
		q.flushSendLocked()
	case verbs.QPStateRTS:
		switch {
		case posted == 0 || q.h == nil:
		case q.sq.Len() == posted:
			ring = ringIdle
		default:
			ring = ringBusy
		}
	default: // SQD holds the work until RTS
	}
	return bad, ring, err
}

// validateSend checks one send work request against the QP's type and
// caps.
func (q *QP) validateSend(wr *verbs.SendWR) error {
	const op = "post_send"
	bad := func(errno syscall.Errno, format string, args ...any) error {
		return verbs.Errorf(op, errno, "QP %#x: wr_id %#x: "+format, append([]any{q.num, wr.WRID}, args...)...)
	}
	if wr.Opcode == verbs.WRLocalInv || wr.Opcode == verbs.WRBindMW {
		return bad(syscall.EOPNOTSUPP, "opcode %s is not supported (no memory windows or fast-registration MRs)", wr.Opcode)
	}
	if int(q.typ) >= len(sendOpcodes) || sendOpcodes[q.typ]&(1<<wr.Opcode) == 0 || wr.Opcode > verbs.WRSendWithInv {
		return bad(syscall.EINVAL, "opcode %s is not allowed on a %s QP", wr.Opcode, q.typ)
	}
	if wr.SendFlags&^knownSendFlags != 0 {
		return bad(syscall.EINVAL, "unsupported send_flags %#x", uint32(wr.SendFlags&^knownSendFlags))
	}
	capa := &q.cfg.Cap
	if len(wr.SGList) > int(capa.MaxSendSGE) {
		return bad(syscall.EINVAL, "num_sge %d exceeds max_send_sge %d", len(wr.SGList), capa.MaxSendSGE)
	}
	var total uint64
	for _, s := range wr.SGList {
		total += uint64(s.Length)
	}
	if limit := uint64(q.cfg.Limits.MaxMsgSize); total > limit {
		return bad(syscall.EINVAL, "message length %d exceeds max_msg_sz %d", total, limit)
	}
	if wr.Opcode.IsAtomic() {
		if total != 8 {
			return bad(syscall.EINVAL, "an atomic operation needs exactly 8 bytes of local buffer, got %d", total)
		}
		if wr.Atomic.RemoteAddr&7 != 0 {
			return bad(syscall.EINVAL, "atomic remote_addr %#x is not 8-byte aligned", wr.Atomic.RemoteAddr)
		}
	}
	if wr.SendFlags&verbs.SendInline != 0 {
		switch {
		case wr.Opcode == verbs.WRRDMARead || wr.Opcode.IsAtomic():
			return bad(syscall.EINVAL, "IBV_SEND_INLINE is not valid for %s", wr.Opcode)
		case total > uint64(capa.MaxInlineData):
			return bad(syscall.EINVAL, "inline length %d exceeds max_inline_data %d", total, capa.MaxInlineData)
		case q.cfg.ReadInline == nil && total > 0:
			return bad(syscall.EINVAL, "inline data is not supported")
		}
	}
	if q.typ == verbs.QPTypeUD {
		if wr.UD.AH == nil {
			return bad(syscall.EINVAL, "a UD send needs an address handle")
		}
		if wr.UD.RemoteQPN > 0xffffff {
			return bad(syscall.EINVAL, "remote_qpn %#x exceeds 24 bits", wr.UD.RemoteQPN)
		}
	}
	return nil
}

// pushSendLocked copies a validated request into the send queue, inline
// data included, and resolves a UD request's address handle.
//
// Preconditions: q.mu is held; the queue is not full.
func (q *QP) pushSendLocked(wr *verbs.SendWR) error {
	var dst wire.Net
	if q.typ == verbs.QPTypeUD && q.cfg.Resolve != nil {
		av := wr.UD.AH.Attr()
		var err error
		if dst, err = q.cfg.Resolve(&av); err != nil {
			return verbs.Errorf("post_send", syscall.EINVAL, "QP %#x: wr_id %#x: address handle: %v", q.num, wr.WRID, err)
		}
	}
	w := q.sq.PushSlot()
	i := q.sq.Index(q.sq.Len() - 1)
	maxSGE := int(q.cfg.Cap.MaxSendSGE)
	sgl := q.sqSGE[i*maxSGE : i*maxSGE+len(wr.SGList)]
	copy(sgl, wr.SGList)
	*w = transport.SendWQE{WR: *wr, SGL: sgl, Dst: dst}
	w.WR.Next, w.WR.SGList = nil, nil
	w.Signaled = q.sigAll || wr.SendFlags&verbs.SendSignaled != 0
	if wr.SendFlags&verbs.SendInline != 0 && q.cfg.ReadInline != nil {
		maxInline := int(q.cfg.Cap.MaxInlineData)
		dst := q.sqInline[i*maxInline : (i+1)*maxInline]
		n := 0
		for _, s := range wr.SGList {
			b, err := q.cfg.ReadInline(s)
			if err != nil {
				// The element does not name readable memory: the work
				// request completes with a local protection error when
				// the transport processes it.
				w.InlineBad = true
				break
			}
			n += copy(dst[n:], b)
		}
		w.Inline = dst[:n]
	}
	return nil
}

// PostRecv posts a linked list of receive work requests (ibv_post_recv).
// It stops at the first request that is invalid or does not fit and
// returns it with the error. A QP that uses an SRQ has no receive queue
// of its own (EINVAL). In RESET posting fails (IBTA C10-97.2.1) unless the
// device is configured to accept it; in ERR requests are accepted and
// completed with IBV_WC_WR_FLUSH_ERR.
func (q *QP) PostRecv(wr *verbs.RecvWR) (*verbs.RecvWR, error) {
	const op = "post_recv"
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.life != alive:
		return wr, verbs.Errorf(op, syscall.EINVAL, "QP %#x is destroyed", q.num)
	case q.srq != nil:
		return wr, verbs.Errorf(op, syscall.EINVAL, "QP %#x receives from an SRQ; post to the SRQ", q.num)
	case q.attr.QPState == verbs.QPStateReset && !q.cfg.AllowPostRecvInReset:
		return wr, verbs.Errorf(op, syscall.EINVAL, "QP %#x is in RESET", q.num)
	}
	var err error
	bad := wr
	for ; wr != nil; wr = wr.Next {
		if err = validateRecv(q, wr); err != nil {
			bad = wr
			break
		}
		if !q.rq.Push(wr) {
			bad, err = wr, verbs.Errorf(op, syscall.ENOMEM, "QP %#x: wr_id %#x: receive queue is full (max_recv_wr %d)", q.num, wr.WRID, q.rq.Cap())
			break
		}
	}
	if err == nil {
		bad = nil
	}
	if q.attr.QPState == verbs.QPStateErr {
		q.flushRecvLocked()
	}
	return bad, err
}

func validateRecv(q *QP, wr *verbs.RecvWR) error {
	return srq.ValidateRecvWR("post_recv", wr, q.rq.MaxSGE(), q.cfg.CheckRecvSGE)
}

// flushSendLocked completes every queued send request with
// IBV_WC_WR_FLUSH_ERR, oldest first. Flushed requests complete whether or
// not they were signaled.
//
// Preconditions: q.mu is held.
func (q *QP) flushSendLocked() { q.tp.FlushSend() }

// flushRecvLocked completes every queued receive request with
// IBV_WC_WR_FLUSH_ERR, oldest first.
//
// Preconditions: q.mu is held.
func (q *QP) flushRecvLocked() { q.rq.Drain(q.flushRecvWRLocked) }

// flushRecvWRLocked completes one receive request with
// IBV_WC_WR_FLUSH_ERR.
//
// Preconditions: q.mu is held.
func (q *QP) flushRecvWRLocked(id uint64) {
	wc := verbs.WC{WRID: id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num}
	q.recvCQ.Push(&wc, false)
}

// SendQueueLen returns how many send requests are queued (posted and not
// yet completed).
func (q *QP) SendQueueLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sq.Len()
}

// Counters returns the QP's counters (its packets and transport events).
func (q *QP) Counters() transport.QPCounters {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.tp.Counters()
}

// RecvQueueLen returns how many receive requests are queued.
func (q *QP) RecvQueueLen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rq.Len()
}
