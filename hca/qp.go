package hca

import (
	"context"
	"syscall"

	"github.com/softhca/softhca/qp"
	"github.com/softhca/softhca/srq"
	"github.com/softhca/softhca/verbs"
)

// QPInitAttr describes a QP to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	// Context is the qp_context, returned by QP.Context.
	Context any
	// SendCQ and RecvCQ receive the completions of send and receive
	// work requests; both are required and may be the same CQ.
	SendCQ *CQ
	RecvCQ *CQ
	// SRQ, if set, is the shared receive queue the QP takes its receive
	// requests from (RC and UD only; the SRQ's PD must be the QP's). The
	// receive caps are then ignored.
	SRQ *SRQ
	// Cap is the requested queue sizes: max_send_wr, max_recv_wr,
	// max_send_sge, max_recv_sge, max_inline_data.
	Cap verbs.QPCap
	// QPType is RC, UC or UD (RAW_PACKET is not supported).
	QPType verbs.QPType
	// SQSigAll makes every send work request generate a completion;
	// otherwise only those posted with verbs.SendSignaled do.
	SQSigAll bool
}

// QP is a queue pair (ibv_qp). PD.CreateQP creates one in RESET; Connect
// (or Modify, step by step) brings it to RTS; PostRecv and PostSend queue
// work requests, whose completions go to RecvCQ and SendCQ.
type QP struct {
	qp     *qp.QP
	pd     *PD
	send   *CQ
	recv   *CQ
	srq    *SRQ
	groups map[verbs.GID]bool // multicast groups joined; protected by pd.dev.mu
}

// CreateQP creates a queue pair in the RESET state (ibv_create_qp). The
// caps granted are in Cap (equal to the request, or clamped and written
// back when the device is opened with Config.ClampQPCaps). Errors: EINVAL
// when a CQ is missing or destroyed, the SRQ belongs to another PD or the
// QP type cannot use one (UC), a cap exceeds the device limits, or the PD
// is deallocated; EOPNOTSUPP for RAW_PACKET; ENOMEM when the device holds
// max_qp QPs.
func (p *PD) CreateQP(init *QPInitAttr) (*QP, error) {
	const op = "create_qp"
	d := p.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.liveLocked(op); err != nil {
		return nil, err
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "send_cq and recv_cq are required")
	}
	if init.SRQ != nil && init.SRQ.pd != p {
		return nil, verbs.Errorf(op, syscall.EINVAL, "the SRQ belongs to another protection domain")
	}
	if err := d.roomLocked(op, len(d.qps), d.cfg.Attr.MaxQP, "QPs"); err != nil {
		return nil, err
	}
	qpn, ok := d.allocQPNLocked()
	if !ok {
		return nil, verbs.Errorf(op, syscall.ENOMEM, "no free QP number")
	}
	w := &QP{pd: p, send: init.SendCQ, recv: init.RecvCQ, srq: init.SRQ, groups: map[verbs.GID]bool{}}
	var s *srq.SRQ
	if init.SRQ != nil {
		s = init.SRQ.srq
	}
	a := &d.cfg.Attr
	q, err := qp.New(qp.Config{
		Type:     init.QPType,
		QPN:      qpn,
		PD:       p.handle,
		SendCQ:   init.SendCQ.cq,
		RecvCQ:   init.RecvCQ.cq,
		SRQ:      s,
		Cap:      init.Cap,
		SQSigAll: init.SQSigAll,
		Context:  init.Context,
		Limits: qp.Limits{
			MaxQPWR:         a.MaxQPWR,
			MaxSGE:          a.MaxSGE,
			MaxInlineData:   a.MaxInlineData,
			MaxQPRdAtom:     a.MaxQPRdAtom,
			MaxQPInitRdAtom: a.MaxQPInitRdAtom,
			MaxMsgSize:      d.cfg.PortAttr.MaxMsgSz,
			PhysPortCnt:     a.PhysPortCnt,
			PKeyTblLen:      d.cfg.PortAttr.PKeyTblLen,
			GIDTblLen:       len(d.gids),
			MaxMTU:          d.cfg.PortAttr.MaxMTU,
		},
		ClampCaps:            d.cfg.ClampQPCaps,
		AllowPostRecvInReset: d.cfg.AllowPostRecvInReset,
		CheckRecvSGE:         p.checkRecvSGE(),
		ReadInline:           p.readInline(),
		OnEvent: func(_ *qp.QP, t verbs.EventType) {
			d.ev.raise(AsyncEvent{Type: t, QP: w})
		},
		Engine:          d.eng,
		Resolve:         d.resolve,
		ActiveMTU:       d.cfg.PortAttr.ActiveMTU,
		RxeRetryCompat:  d.cfg.RxeRetryCompat,
		UDOversizeError: d.cfg.UDOversizeError,
	})
	if err != nil {
		return nil, err
	}
	w.qp = q
	d.qps[qpn] = w
	p.refs++
	return w, nil
}

// allocQPNLocked returns the next free 24-bit QP number at or after
// nextQPN, skipping 0 and 1.
//
// Preconditions: d.mu is held.
func (d *Device) allocQPNLocked() (uint32, bool) {
	for range 1 << 24 {
		n := d.nextQPN
		d.nextQPN = (d.nextQPN + 1) & 0xffffff
		if d.nextQPN < firstQPN {
			d.nextQPN = firstQPN
		}
		if _, used := d.qps[n]; !used {
			return n, true
		}
	}
	return 0, false
}

// LookupQP returns the QP with the number, or nil.
func (d *Device) LookupQP(qpn uint32) *QP {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.qps[qpn]
}

// Num returns the QP number (ibv_qp.qp_num), which the peer names as its
// dest_qp_num (Remote.QPN) or in a UD send.
func (q *QP) Num() uint32 { return q.qp.Num() }

// Type returns the QP's transport type (ibv_qp.qp_type).
func (q *QP) Type() verbs.QPType { return q.qp.Type() }

// PD returns the QP's protection domain (ibv_qp.pd).
func (q *QP) PD() *PD { return q.pd }

// Context returns the qp_context given to CreateQP (ibv_qp.qp_context).
func (q *QP) Context() any { return q.qp.Context() }

// SendCQ returns the CQ of the QP's send completions (ibv_qp.send_cq).
func (q *QP) SendCQ() *CQ { return q.send }

// RecvCQ returns the CQ of the QP's receive completions (ibv_qp.recv_cq).
func (q *QP) RecvCQ() *CQ { return q.recv }

// SRQ returns the shared receive queue the QP receives from (ibv_qp.srq),
// or nil.
func (q *QP) SRQ() *SRQ { return q.srq }

// Cap returns the caps granted at creation (the cap of ibv_query_qp's
// init_attr).
func (q *QP) Cap() verbs.QPCap { return q.qp.Cap() }

// State returns the QP's current state (ibv_qp.state), without waiting
// for a verb in progress on the QP.
func (q *QP) State() verbs.QPState { return q.qp.State() }

// Query returns the QP's attributes (ibv_query_qp): every attribute,
// whatever mask libibverbs would have been given, with cur_qp_state equal
// to qp_state and the caps granted at creation.
func (q *QP) Query() verbs.QPAttr { return q.qp.Query() }

// Modify changes the QP's attributes and state (ibv_modify_qp). The mask
// must hold exactly the attributes the transition from the current state
// to attr.QPState (or to the current state, without verbs.AttrState)
// requires and allows for the QP's type, and every value must be in range
// (a port that exists, a GID index that holds a GID, a path MTU up to the
// port's max_mtu, ...); otherwise the error wraps EINVAL, says what was
// wrong, and nothing changes. Moving to ERR completes every outstanding
// work request with IBV_WC_WR_FLUSH_ERR. Connect walks a new QP to RTS
// with the usual attributes.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	return q.qp.Modify(attr, mask)
}

// PostSend posts a linked list of send work requests (ibv_post_send) and
// returns, with an error, the first one it could not post (bad_wr); the
// ones before it are posted. The request is copied, scatter list and
// inline data included: the caller may reuse it when PostSend returns.
// By state: RESET, INIT and RTR fail with EINVAL; in RTS work is
// processed; in SQD it is held until the QP returns to RTS; in SQE and ERR
// it is accepted and completed with IBV_WC_WR_FLUSH_ERR. EINVAL for an
// opcode the QP type does not carry, unknown send flags, more elements
// than max_send_sge, inline data above max_inline_data, a message above
// the port's max_msg_sz, an atomic without 8 aligned bytes, or a UD send
// without an address handle; EOPNOTSUPP for LOCAL_INV and BIND_MW; ENOMEM
// when the send queue is full. (A UD message longer than the path MTU is
// not an error: nothing is sent and it completes successfully, IBTA
// C10-93.1.1, unless Config.UDOversizeError.)
func (q *QP) PostSend(wr *verbs.SendWR) (*verbs.SendWR, error) { return q.qp.PostSend(wr) }

// PostRecv posts a linked list of receive work requests (ibv_post_recv)
// and returns, with an error, the first one it could not post (bad_wr).
// Received messages fill each request's elements in order (a UD receive
// begins with the 40 bytes of the GRH). EINVAL in RESET (IBTA C10-97.2.1,
// unless Config.AllowPostRecvInReset), for a QP that receives from an
// SRQ, too many elements, or an element the PD's regions do not cover
// with LOCAL_WRITE (unless Config.DeferRecvSGEChecks); ENOMEM when the
// receive queue is full. In ERR requests are accepted and flushed.
func (q *QP) PostRecv(wr *verbs.RecvWR) (*verbs.RecvWR, error) { return q.qp.PostRecv(wr) }

// Destroy destroys the QP (ibv_destroy_qp): EBUSY while it is attached to
// a multicast group, EINVAL when it is already destroyed; otherwise it
// waits until every asynchronous event taken for it was acknowledged, or
// ctx is done (then the error matches ctx.Err() and nothing is destroyed).
// Outstanding work requests are discarded without completions, but the
// acknowledgement the QP owes its peer is sent first; when Destroy
// returns, nothing of the QP runs any more (no packet is placed, no
// completion pushed, nothing sent). The rest of the device keeps working
// while it waits.
func (q *QP) Destroy(ctx context.Context) error {
	d := q.pd.dev
	// EBUSY comes first: the kernel refuses before libibverbs waits.
	d.mu.Lock()
	groups := len(q.groups)
	d.mu.Unlock()
	if groups > 0 {
		return verbs.Errorf("destroy_qp", syscall.EBUSY, "QP %#x is attached to %d multicast groups", q.Num(), groups)
	}
	if err := q.qp.Destroy(ctx); err != nil {
		return err
	}
	d.ev.purge(func(e *AsyncEvent) bool { return e.QP == q })
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.qps, q.Num())
	q.pd.refs--
	return nil
}

// AttachMcast attaches a UD QP to a multicast group (ibv_attach_mcast):
// EINVAL for a QP of another type or a GID that is not multicast (ff00::/8).
// Attaching to a group already joined succeeds and changes nothing. lid
// is unused on RoCE.
func (q *QP) AttachMcast(gid verbs.GID, lid uint16) error {
	const op = "attach_mcast"
	if q.Type() != verbs.QPTypeUD {
		return verbs.Errorf(op, syscall.EINVAL, "only UD QPs join multicast groups")
	}
	if gid[0] != 0xff {
		return verbs.Errorf(op, syscall.EINVAL, "%s is not a multicast GID", gid)
	}
	d := q.pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if !q.groups[gid] {
		q.groups[gid] = true
		q.qp.AttachMcast()
	}
	return nil
}

// DetachMcast detaches the QP from a multicast group (ibv_detach_mcast);
// EINVAL if it is not attached to it.
func (q *QP) DetachMcast(gid verbs.GID, lid uint16) error {
	d := q.pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if !q.groups[gid] {
		return verbs.Errorf("detach_mcast", syscall.EINVAL, "QP %#x is not attached to %s", q.Num(), gid)
	}
	delete(q.groups, gid)
	q.qp.DetachMcast()
	return nil
}
