package qp

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/softhca/softhca/cq"
	"github.com/softhca/softhca/internal/acks"
	"github.com/softhca/softhca/internal/ring"
	"github.com/softhca/softhca/srq"
	"github.com/softhca/softhca/transport"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Limits are the device limits a QP is checked against.
type Limits struct {
	MaxQPWR         uint32 // max_qp_wr
	MaxSGE          uint32 // max_sge
	MaxInlineData   uint32
	MaxQPRdAtom     uint32 // max_qp_rd_atom: bound of max_rd_atomic
	MaxQPInitRdAtom uint32 // max_qp_init_rd_atom: bound of max_dest_rd_atomic
	MaxMsgSize      uint32 // port max_msg_sz
	PhysPortCnt     uint8
	PKeyTblLen      uint16
	GIDTblLen       int
	// MaxMTU bounds path_mtu (rxe checks against the port's max_mtu).
	MaxMTU verbs.MTU
}

// Config describes a QP to create (struct ibv_qp_init_attr plus what the
// device supplies).
type Config struct {
	Type     verbs.QPType
	QPN      uint32
	PD       uint32
	SendCQ   *cq.CQ
	RecvCQ   *cq.CQ
	SRQ      *srq.SRQ
	Cap      verbs.QPCap
	SQSigAll bool
	Context  any

	Limits Limits
	// ClampCaps makes caps above the device limits be clamped and written
	// back instead of failing with EINVAL (ibv_create_qp(3) allows both).
	ClampCaps bool
	// AllowPostRecvInReset accepts receive posts in RESET, as some HCAs
	// do; the default fails them (IBTA C10-97.2.1).
	AllowPostRecvInReset bool
	// CheckRecvSGE validates receive scatter elements at post time (key,
	// PD, bounds, LOCAL_WRITE). nil defers the checks to data placement.
	CheckRecvSGE srq.SGEChecker
	// ReadInline returns the bytes an inline send element names; nil
	// means inline sends are not supported.
	ReadInline func(sge verbs.SGE) ([]byte, error)
	// OnEvent raises an affiliated asynchronous event for the QP. It is
	// called with the QP's lock held.
	OnEvent func(q *QP, t verbs.EventType)

	// The transport. Engine nil leaves posted work queued.
	Engine *transport.Engine
	// Resolve turns an address vector into the IP and UDP fields of the
	// packets sent with it (the source from sgid_index, the destination
	// from the dgid), or says why it cannot be used.
	Resolve func(av *verbs.AHAttr) (wire.Net, error)
	// ActiveMTU is the port's MTU, the limit of a UD message.
	ActiveMTU verbs.MTU
	// RxeRetryCompat makes retry_cnt 7 retry forever, as rxe does.
	RxeRetryCompat bool
	// UDOversizeError completes a UD send longer than the port MTU with
	// IBV_WC_LOC_LEN_ERR instead of dropping it (IBTA C10-93.1.1).
	UDOversizeError bool
}

// QP is a queue pair.
type QP struct {
	num     uint32
	typ     verbs.QPType
	pd      uint32
	sendCQ  *cq.CQ
	recvCQ  *cq.CQ
	srq     *srq.SRQ
	ctx     any
	sigAll  bool
	cfg     Config
	events  acks.Counter // async events reported about this QP
	mcast   atomic.Int32 // multicast groups attached
	stateRO atomic.Uint32

	// h is the QP's place in the transport's scheduler (nil without a
	// transport).
	h *transport.Handle

	mu       sync.Mutex
	attr     verbs.QPAttr // protected by mu
	sq       ring.Ring[transport.SendWQE]
	sqSGE    []verbs.SGE // slot i: sqSGE[i*maxSendSGE:]
	sqInline []byte      // slot i: sqInline[i*maxInline:]
	rq       srq.Queue
	life     life // protected by mu
	// tp is the transport's half of the QP; protected by mu.
	tp transport.QP
}

// life says whether a QP may be used.
type life uint8

const (
	alive life = iota
	// destroying: Destroy runs; every verb fails, packets for the QP
	// are dropped, and the transport only sends the acknowledgement it
	// owes.
	destroying
	// destroyed: nothing of the QP runs any more.
	destroyed
)

// New creates a QP in the RESET state (ibv_create_qp), enforcing the
// rules of ibv_create_qp(3): send and receive CQs are required; an SRQ is
// allowed only for RC and UD QPs and only from the QP's protection domain;
// RAW_PACKET is not supported; caps above the device limits fail with
// EINVAL unless the device clamps them. The caps actually granted are
// returned by Cap.
func New(cfg Config) (*QP, error) {
	const op = "create_qp"
	switch cfg.Type {
	case verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD:
	case verbs.QPTypeRawPacket:
		return nil, verbs.Errorf(op, syscall.EOPNOTSUPP, "RAW_PACKET QPs need raw Ethernet access, which softhca does not offer")
	default:
		return nil, verbs.Errorf(op, syscall.EINVAL, "unknown QP type %d", uint8(cfg.Type))
	}
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "send_cq and recv_cq are required")
	}
	if cfg.SRQ != nil {
		if cfg.Type == verbs.QPTypeUC {
			return nil, verbs.Errorf(op, syscall.EINVAL, "a UC QP cannot use an SRQ (only RC and UD can)")
		}
		if cfg.Type != verbs.QPTypeRC && cfg.SRQ.IsTM() {
			// tm_caps.flags offers IBV_TM_CAP_RC only: tag matching is
			// defined for RC (rdma-core Documentation/tag_matching.md).
			return nil, verbs.Errorf(op, syscall.EINVAL, "only an RC QP can use a tag-matching SRQ")
		}
		if cfg.SRQ.PD() != cfg.PD {
			return nil, verbs.Errorf(op, syscall.EINVAL, "the SRQ belongs to another protection domain")
		}
	}
	c, err := checkCaps(op, cfg.Cap, cfg.Limits, cfg.SRQ != nil, cfg.ClampCaps)
	if err != nil {
		return nil, err
	}
	cfg.Cap = c
	maxInline := int(c.MaxInlineData)
	// The send queue's ring also holds the requests the transport issues
	// on its own (transport.QP.Issue).
	slots := int(c.MaxSendWR) + transport.InternalSlots
	q := &QP{
		num:      cfg.QPN,
		typ:      cfg.Type,
		pd:       cfg.PD,
		sendCQ:   cfg.SendCQ,
		recvCQ:   cfg.RecvCQ,
		srq:      cfg.SRQ,
		ctx:      cfg.Context,
		sigAll:   cfg.SQSigAll,
		cfg:      cfg,
		sq:       ring.New[transport.SendWQE](slots),
		sqSGE:    make([]verbs.SGE, slots*int(c.MaxSendSGE)),
		sqInline: make([]byte, slots*maxInline),
		rq:       srq.NewQueue(int(c.MaxRecvWR), int(c.MaxRecvSGE)),
	}
	q.attr = q.defaultAttr()
	q.tp.SQ = &q.sq
	q.tp.SendCQ, q.tp.RecvCQ = cqSink{cfg.SendCQ}, cqSink{cfg.RecvCQ}
	if cfg.SRQ != nil {
		q.tp.RQ = cfg.SRQ
		if cfg.SRQ.IsTM() {
			q.tp.TQ = cfg.SRQ
		}
	} else {
		q.tp.RQ = &q.rq
	}
	q.syncParamsLocked()
	if err := cfg.SendCQ.Acquire(); err != nil {
		return nil, verbs.Errorf(op, syscall.EINVAL, "send_cq is destroyed")
	}
	if cfg.RecvCQ != cfg.SendCQ {
		if err := cfg.RecvCQ.Acquire(); err != nil {
			cfg.SendCQ.RemoveUser()
			return nil, verbs.Errorf(op, syscall.EINVAL, "recv_cq is destroyed")
		}
	}
	if cfg.SRQ != nil {
		cfg.SRQ.AddUser()
	}
	if cfg.Engine != nil {
		q.h = cfg.Engine.Attach(q.num, q)
	}
	return q, nil
}

// checkCaps applies the device limits to requested caps.
func checkCaps(op string, c verbs.QPCap, l Limits, hasSRQ, clamp bool) (verbs.QPCap, error) {
	if hasSRQ {
		// With an SRQ the receive caps are ignored (ibv_create_qp(3)).
		c.MaxRecvWR, c.MaxRecvSGE = 0, 0
	}
	type field struct {
		name  string
		v     *uint32
		limit uint32
	}
	for _, f := range []field{
		{"max_send_wr", &c.MaxSendWR, l.MaxQPWR},
		{"max_recv_wr", &c.MaxRecvWR, l.MaxQPWR},
		{"max_send_sge", &c.MaxSendSGE, l.MaxSGE},
		{"max_recv_sge", &c.MaxRecvSGE, l.MaxSGE},
		{"max_inline_data", &c.MaxInlineData, l.MaxInlineData},
	} {
		if *f.v <= f.limit {
			continue
		}
		if !clamp {
			return c, verbs.Errorf(op, syscall.EINVAL, "%s %d exceeds the device limit %d", f.name, *f.v, f.limit)
		}
		*f.v = f.limit
	}
	return c, nil
}

// defaultAttr is the attribute set of a QP in RESET.
func (q *QP) defaultAttr() verbs.QPAttr {
	return verbs.QPAttr{
		QPState:    verbs.QPStateReset,
		CurQPState: verbs.QPStateReset,
		PathMTU:    verbs.MTU1024,
		Cap:        q.cfg.Cap,
		PortNum:    1,
	}
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

// Type returns the QP's transport type.
func (q *QP) Type() verbs.QPType { return q.typ }

// PD returns the protection domain handle.
func (q *QP) PD() uint32 { return q.pd }

// Context returns the qp_context given at creation.
func (q *QP) Context() any { return q.ctx }

// SendCQ returns the send completion queue.
func (q *QP) SendCQ() *cq.CQ { return q.sendCQ }

// RecvCQ returns the receive completion queue.
func (q *QP) RecvCQ() *cq.CQ { return q.recvCQ }

// SRQ returns the shared receive queue, or nil.
func (q *QP) SRQ() *srq.SRQ { return q.srq }

// Cap returns the caps granted at creation.
func (q *QP) Cap() verbs.QPCap { return q.cfg.Cap }

// SQSigAll reports whether every send work request generates a completion.
func (q *QP) SQSigAll() bool { return q.sigAll }

// State returns the current state without taking the QP's lock.
func (q *QP) State() verbs.QPState { return verbs.QPState(q.stateRO.Load()) }

// Events returns the counter of asynchronous events reported about the
// QP, which Destroy waits on.
func (q *QP) Events() *acks.Counter { return &q.events }

// AttachMcast records that the QP joined a multicast group.
func (q *QP) AttachMcast() { q.mcast.Add(1) }

// DetachMcast records that the QP left a multicast group.
func (q *QP) DetachMcast() { q.mcast.Add(-1) }

// Query returns the QP's attributes and its creation attributes
// (ibv_query_qp). Every attribute is returned whatever the mask; as
// libibverbs allows, the mask is only a hint. sq_psn and rq_psn are the
// PSNs the QP sends and expects next once its requester (RTS) and
// responder (RTR) run, as rxe reports them; before, the values given to
// Modify.
func (q *QP) Query() verbs.QPAttr {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.CurQPState = a.QPState
	// The PSNs as they are now, as rxe reports them (rxe_qp_to_attr:
	// req.psn, resp.psn), once the requester and responder run.
	sq, sqLive, rq, rqLive := q.tp.PSNs()
	if sqLive {
		a.SQPSN = sq
	}
	if rqLive {
		a.RQPSN = rq
	}
	a.Cap = q.cfg.Cap
	if q.srq != nil {
		a.Cap.MaxRecvWR, a.Cap.MaxRecvSGE = 0, 0
	}
	a.SQDraining = false
	return a
}

// Destroy destroys the QP (ibv_destroy_qp). It fails with EBUSY while the
// QP is attached to a multicast group, and waits until every asynchronous
// event reported about it was acknowledged, or ctx is done (then nothing
// is destroyed and ctx's error is returned). Outstanding work requests are
// discarded without completions.
//
// When Destroy returns, nothing queued for the QP runs any more: no
// packet for it is placed in memory, no receive WQE is taken from its SRQ,
// no completion is pushed to its CQs and nothing is sent for it.
func (q *QP) Destroy(ctx context.Context) error {
	const op = "destroy_qp"
	if n := q.mcast.Load(); n > 0 {
		return verbs.Errorf(op, syscall.EBUSY, "QP %#x is attached to %d multicast groups", q.num, n)
	}
	if err := q.events.Wait(ctx); err != nil {
		return err
	}
	q.mu.Lock()
	if q.life != alive {
		q.mu.Unlock()
		return verbs.Errorf(op, syscall.EINVAL, "QP %#x is already destroyed", q.num)
	}
	q.life = destroying
	q.mu.Unlock()
	// Outside the lock (a turn running the QP's work takes it): the
	// acknowledgement the QP owes for requests it executed leaves first
	// (a program that takes its last completion and exits must not leave
	// its peer retrying), then nothing of the QP runs any more.
	if q.h != nil {
		q.h.Flush()
	}
	q.mu.Lock()
	q.life = destroyed
	q.tp.SetState(verbs.QPStateReset, 0, 0)
	q.sq.Reset()
	q.rq.Reset()
	q.mu.Unlock()
	if q.h != nil {
		q.h.Detach()
	}
	q.sendCQ.RemoveUser()
	if q.recvCQ != q.sendCQ {
		q.recvCQ.RemoveUser()
	}
	if q.srq != nil {
		q.srq.RemoveUser()
	}
	return nil
}
