package hca

import (
	"context"
	"syscall"

	"github.com/softhca/softhca/mr"
	"github.com/softhca/softhca/qp"
	"github.com/softhca/softhca/srq"
	"github.com/softhca/softhca/verbs"
)

// PD is a protection domain (ibv_pd).
type PD struct {
	dev    *Device
	handle uint32
	refs   int // objects in the PD; protected by dev.mu
	dead   bool
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.reserveLocked("alloc_pd", &d.counts.pd, d.cfg.Attr.MaxPD, "PDs"); err != nil {
		return nil, err
	}
	p := &PD{dev: d, handle: d.nextPD}
	d.nextPD++
	return p, nil
}

// Handle returns the PD's number, which memory regions record.
func (p *PD) Handle() uint32 { return p.handle }

// Device returns the device the PD belongs to.
func (p *PD) Device() *Device { return p.dev }

// Dealloc deallocates the PD (ibv_dealloc_pd): EBUSY while memory
// regions, QPs, SRQs or address handles still belong to it.
func (p *PD) Dealloc() error {
	d := p.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case p.dead:
		return verbs.Errorf("dealloc_pd", syscall.EINVAL, "PD %d is already deallocated", p.handle)
	case p.refs > 0:
		return verbs.Errorf("dealloc_pd", syscall.EBUSY, "PD %d still holds %d objects", p.handle, p.refs)
	}
	p.dead = true
	d.counts.pd--
	return nil
}

// live checks that the PD can take a new object.
//
// Preconditions: dev.mu is held.
func (p *PD) liveLocked(op string) error {
	if p.dead {
		return verbs.Errorf(op, syscall.EINVAL, "PD %d is deallocated", p.handle)
	}
	if p.dev.closed {
		return verbs.Errorf(op, syscall.EINVAL, "device is closed")
	}
	return nil
}

// MR is a registered memory region (ibv_mr).
type MR struct {
	*mr.MR
	pd *PD
}

// RegMR registers buf with the given access flags (ibv_reg_mr). The
// region's address (MR.Addr) is buf's address in this process.
func (p *PD) RegMR(buf []byte, access verbs.AccessFlags) (*MR, error) {
	d := p.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.liveLocked("reg_mr"); err != nil {
		return nil, err
	}
	m, err := d.mrs.Register(p.handle, buf, access)
	if err != nil {
		return nil, err
	}
	p.refs++
	return &MR{MR: m, pd: p}, nil
}

// Dereg deregisters the region (ibv_dereg_mr). When it returns, no packet
// reads or writes the region any more: the transport's lookups of its keys
// fail from the moment it is deregistered, and Dereg waits for those that
// succeeded before to finish with the memory. A request that needs the
// region afterwards fails as IBTA says (a remote access error NAK for a
// peer's READ, WRITE or ATOMIC; a local protection error for a send
// gathering from it).
func (m *MR) Dereg() error {
	d := m.pd.dev
	d.mu.Lock()
	if err := d.mrs.Deregister(m.MR); err != nil {
		d.mu.Unlock()
		return err
	}
	m.pd.refs--
	d.mu.Unlock()
	if d.eng != nil {
		d.eng.Quiesce()
	}
	return nil
}

// PD returns the protection domain the region belongs to.
func (m *MR) PD() *PD { return m.pd }

// checkRecvSGE returns the post-time check of receive scatter elements
// for a PD.
func (p *PD) checkRecvSGE() srq.SGEChecker {
	if p.dev.cfg.DeferRecvSGEChecks {
		return nil
	}
	t := p.dev.mrs
	return func(s verbs.SGE) error {
		if s.Length == 0 {
			return nil
		}
		if _, st := t.Lookup(s.LKey, p.handle, s.Addr, s.Length, verbs.AccessLocalWrite); st != mr.OK {
			return mrError(s, st)
		}
		return nil
	}
}

type sgeError struct {
	sge verbs.SGE
	st  mr.Status
}

func (e *sgeError) Error() string {
	s := "lkey " + hex32(e.sge.LKey) + " addr " + hex64(e.sge.Addr) + " length " + itoa(int(e.sge.Length)) + ": " + e.st.String()
	if e.st == mr.BadAccess {
		s += " (receive buffers need IBV_ACCESS_LOCAL_WRITE)"
	}
	return s
}

func mrError(s verbs.SGE, st mr.Status) error { return &sgeError{s, st} }

// readInline returns the reader of inline send data for a PD. For inline
// data "the L_Key will not be checked" (ibv_post_send(3)): the element is
// found by address among the PD's regions, trying the L_Key's region
// first. softhca reads only registered memory, so an address outside every
// region of the PD fails the post.
func (p *PD) readInline() func(verbs.SGE) ([]byte, error) {
	t := p.dev.mrs
	return func(s verbs.SGE) ([]byte, error) {
		if s.Length == 0 {
			return nil, nil
		}
		if b, st := t.Lookup(s.LKey, p.handle, s.Addr, s.Length, 0); st == mr.OK {
			return b, nil
		}
		if b := t.FindByAddr(p.handle, s.Addr, s.Length); b != nil {
			return b, nil
		}
		return nil, mrError(s, mr.BadBounds)
	}
}

// SRQ is a shared receive queue (ibv_srq).
type SRQ struct {
	*srq.SRQ
	pd     *PD
	events eventCounter
}

// SRQInitAttr describes an SRQ to create (struct ibv_srq_init_attr).
type SRQInitAttr struct {
	Context any
	Attr    verbs.SRQAttr
}

// CreateSRQ creates a shared receive queue (ibv_create_srq).
func (p *PD) CreateSRQ(init *SRQInitAttr) (*SRQ, error) {
	const op = "create_srq"
	d := p.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.liveLocked(op); err != nil {
		return nil, err
	}
	if err := d.reserveLocked(op, &d.counts.srq, d.cfg.Attr.MaxSRQ, "SRQs"); err != nil {
		return nil, err
	}
	w := &SRQ{pd: p}
	s, err := srq.New(srq.Config{
		Attr:      init.Attr,
		DevMaxWR:  d.cfg.Attr.MaxSRQWR,
		DevMaxSGE: d.cfg.Attr.MaxSRQSGE,
		CanResize: d.cfg.Attr.DeviceCapFlags&verbs.DeviceSRQResize != 0,
		PD:        p.handle,
		Context:   init.Context,
		Check:     p.checkRecvSGE(),
		OnLimit:   func(*srq.SRQ) { d.ev.raise(AsyncEvent{Type: verbs.EventSRQLimitReached, SRQ: w}) },
	})
	if err != nil {
		d.counts.srq--
		return nil, err
	}
	w.SRQ = s
	p.refs++
	return w, nil
}

// Destroy destroys the SRQ (ibv_destroy_srq): EBUSY while QPs use it;
// otherwise it waits until the asynchronous events taken for it were
// acknowledged, or ctx is done.
func (s *SRQ) Destroy(ctx context.Context) error {
	d := s.pd.dev
	if n := s.Users(); n > 0 {
		return verbs.Errorf("destroy_srq", syscall.EBUSY, "%d QPs still use the SRQ", n)
	}
	if err := s.events.Wait(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := s.SRQ.Destroy(); err != nil {
		return err
	}
	d.ev.purge(func(e *AsyncEvent) bool { return e.SRQ == s })
	d.counts.srq--
	s.pd.refs--
	return nil
}

// CreateAH creates an address handle (ibv_create_ah). RoCE needs the GRH:
// is_global set, a source GID index inside the table and a non-zero
// destination GID.
func (p *PD) CreateAH(attr verbs.AHAttr) (*AH, error) {
	const op = "create_ah"
	d := p.dev
	switch {
	case !attr.IsGlobal:
		return nil, verbs.Errorf(op, syscall.EINVAL, "RoCE needs a GRH (is_global)")
	case int(attr.GRH.SGIDIndex) >= len(d.gids):
		return nil, verbs.Errorf(op, syscall.EINVAL, "sgid_index %d holds no GID", attr.GRH.SGIDIndex)
	case attr.GRH.DGID.IsZero():
		return nil, verbs.Errorf(op, syscall.EINVAL, "dgid is zero")
	case attr.PortNum < 1 || attr.PortNum > d.cfg.Attr.PhysPortCnt:
		return nil, verbs.Errorf(op, syscall.EINVAL, "port_num %d does not exist (ports are 1..%d)", attr.PortNum, d.cfg.Attr.PhysPortCnt)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.liveLocked(op); err != nil {
		return nil, err
	}
	if err := d.reserveLocked(op, &d.counts.ah, d.cfg.Attr.MaxAH, "address handles"); err != nil {
		return nil, err
	}
	p.refs++
	return &AH{attr: attr, pd: p}, nil
}

// QPInitAttr describes a QP to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Context  any
	SendCQ   *CQ
	RecvCQ   *CQ
	SRQ      *SRQ
	Cap      verbs.QPCap
	QPType   verbs.QPType
	SQSigAll bool
}

// QP is a queue pair (ibv_qp).
type QP struct {
	*qp.QP
	pd     *PD
	groups map[verbs.GID]bool // multicast groups joined; protected by pd.dev.mu
}

// CreateQP creates a queue pair in the RESET state (ibv_create_qp). The
// caps granted are in QP.Cap (equal to the request, or clamped when the
// device is configured to clamp).
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
	if err := d.reserveLocked(op, &d.counts.qp, d.cfg.Attr.MaxQP, "QPs"); err != nil {
		return nil, err
	}
	qpn, ok := d.allocQPNLocked()
	if !ok {
		d.counts.qp--
		return nil, verbs.Errorf(op, syscall.ENOMEM, "no free QP number")
	}
	w := &QP{pd: p, groups: map[verbs.GID]bool{}}
	var s *srq.SRQ
	if init.SRQ != nil {
		s = init.SRQ.SRQ
	}
	a := &d.cfg.Attr
	q, err := qp.New(qp.Config{
		Type:     init.QPType,
		QPN:      qpn,
		PD:       p.handle,
		SendCQ:   init.SendCQ.CQ,
		RecvCQ:   init.RecvCQ.CQ,
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
		d.counts.qp--
		return nil, err
	}
	w.QP = q
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

// PD returns the QP's protection domain.
func (q *QP) PD() *PD { return q.pd }

// Destroy destroys the QP (ibv_destroy_qp): EBUSY while it is attached to
// a multicast group; otherwise it waits until every asynchronous event
// taken for it was acknowledged, or ctx is done (then nothing is
// destroyed). When it returns, nothing queued for the QP runs any more
// (qp.QP.Destroy). The device's lock is not held while it waits, so the
// rest of the device keeps working meanwhile.
func (q *QP) Destroy(ctx context.Context) error {
	d := q.pd.dev
	// EBUSY comes first: the kernel refuses before libibverbs waits.
	d.mu.Lock()
	groups := len(q.groups)
	d.mu.Unlock()
	if groups > 0 {
		return verbs.Errorf("destroy_qp", syscall.EBUSY, "QP %#x is attached to %d multicast groups", q.Num(), groups)
	}
	if err := q.QP.Destroy(ctx); err != nil {
		return err
	}
	d.ev.purge(func(e *AsyncEvent) bool { return e.QP == q })
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.qps, q.Num())
	d.counts.qp--
	q.pd.refs--
	return nil
}

// AttachMcast attaches a UD QP to a multicast group (ibv_attach_mcast).
// Attaching to a group already joined succeeds and changes nothing.
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
		q.QP.AttachMcast()
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
	q.QP.DetachMcast()
	return nil
}
