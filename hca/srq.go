package hca

import (
	"context"
	"syscall"

	"github.com/softhca/softhca/cq"
	"github.com/softhca/softhca/srq"
	"github.com/softhca/softhca/verbs"
)

// SRQ is a shared receive queue (ibv_srq), created by PD.CreateSRQ: the
// receive work requests of every QP created with it (QPInitAttr.SRQ).
type SRQ struct {
	srq    *srq.SRQ
	pd     *PD
	num    uint32 // the SRQ's number (srqn), for Resources
	cq     *CQ    // a tag-matching SRQ's CQ, else nil
	events eventCounter
}

// SRQInitAttr describes an SRQ to create (struct ibv_srq_init_attr).
type SRQInitAttr struct {
	// Context is the srq_context, returned by SRQ.Context.
	Context any
	// Attr holds max_wr and max_sge; srq_limit is ignored at creation
	// (ibv_create_srq(3)) and the SRQ starts disarmed.
	Attr verbs.SRQAttr
	// TM, when set, makes a tag-matching SRQ (ibv_create_srq_ex(3)
	// with IBV_SRQT_TM and tm_cap): PostOps edits its tag list, and the
	// SENDs its RC QPs receive are matched by their tag
	// (docs/tag-matching.md).
	TM *TMCap
	// CQ is the SRQ's completion queue (srq_init_attr_ex.cq), required
	// with TM: the list operations and every message the SRQ receives
	// complete there.
	CQ *CQ
}

// TMCap is the tag list a tag-matching SRQ holds (struct ibv_tm_cap):
// max_num_tags within 1..tm_caps.max_num_tags and max_ops within
// 1..tm_caps.max_ops of the device.
type TMCap struct {
	MaxNumTags uint32
	MaxOps     uint32
}

// CreateSRQ creates a shared receive queue (ibv_create_srq) holding
// exactly max_wr requests of up to max_sge elements. EINVAL when max_wr is
// not within 1..max_srq_wr or max_sge not within 1..max_srq_sge, or the PD
// is deallocated; ENOMEM when the device holds max_srq SRQs.
func (p *PD) CreateSRQ(init *SRQInitAttr) (*SRQ, error) {
	const op = "create_srq"
	d := p.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := p.liveLocked(op); err != nil {
		return nil, err
	}
	if err := d.roomLocked(op, len(d.srqs), d.cfg.Attr.MaxSRQ, "SRQs"); err != nil {
		return nil, err
	}
	w := &SRQ{pd: p}
	var tmc *srq.TMConfig
	if init.TM != nil {
		if init.CQ == nil {
			return nil, verbs.Errorf(op, syscall.EINVAL, "a tag-matching SRQ needs a CQ")
		}
		if init.CQ.cq.Acquire() != nil {
			return nil, verbs.Errorf(op, syscall.EINVAL, "the CQ is destroyed")
		}
		tc := &d.cfg.Attr.TM
		tmc = &srq.TMConfig{
			MaxNumTags: init.TM.MaxNumTags, MaxOps: init.TM.MaxOps, MaxSGE: tc.MaxSGE,
			DevMaxNumTags: tc.MaxNumTags, DevMaxOps: tc.MaxOps,
			CQ: tmSink{init.CQ.cq},
		}
		w.cq = init.CQ
	}
	s, err := srq.New(srq.Config{
		Attr:      init.Attr,
		DevMaxWR:  d.cfg.Attr.MaxSRQWR,
		DevMaxSGE: d.cfg.Attr.MaxSRQSGE,
		CanResize: d.cfg.Attr.DeviceCapFlags&verbs.DeviceSRQResize != 0,
		PD:        p.handle,
		Context:   init.Context,
		Check:     p.checkRecvSGE(),
		OnLimit:   func(*srq.SRQ) { d.ev.raise(AsyncEvent{Type: verbs.EventSRQLimitReached, SRQ: w}) },
		TM:        tmc,
	})
	if err != nil {
		if w.cq != nil {
			w.cq.cq.RemoveUser()
		}
		return nil, err
	}
	w.srq = s
	w.num = d.nextSRQ
	d.nextSRQ++
	d.srqs[w.num] = w
	p.refs++
	return w, nil
}

// PD returns the protection domain the SRQ belongs to (ibv_srq.pd).
func (s *SRQ) PD() *PD { return s.pd }

// Context returns the srq_context given to CreateSRQ
// (ibv_srq.srq_context).
func (s *SRQ) Context() any { return s.srq.Context() }

// PostRecv posts a linked list of receive work requests to the SRQ
// (ibv_post_srq_recv). It stops at the first request that is invalid
// (EINVAL: more than max_sge elements, an element the PD's regions do not
// cover with LOCAL_WRITE unless Config.DeferRecvSGEChecks) or does not fit
// (ENOMEM) and returns it with the error; the requests before it are
// posted.
func (s *SRQ) PostRecv(wr *verbs.RecvWR) (*verbs.RecvWR, error) { return s.srq.PostRecv(wr) }

// Modify resizes the SRQ (verbs.SRQMaxWR, when the device has
// IBV_DEVICE_SRQ_RESIZE) and/or arms its limit event (verbs.SRQLimit):
// once fewer than srq_limit requests remain, IBV_EVENT_SRQ_LIMIT_REACHED
// is raised, once, and the SRQ disarms (ibv_modify_srq). If any attribute
// is invalid nothing changes and the error wraps EINVAL.
func (s *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	return s.srq.Modify(attr, mask)
}

// Query returns the SRQ's attributes (ibv_query_srq): max_wr, max_sge,
// and srq_limit, 0 when the limit event is not armed.
func (s *SRQ) Query() verbs.SRQAttr { return s.srq.Query() }

// Destroy destroys the SRQ (ibv_destroy_srq): EBUSY while QPs use it,
// EINVAL when it is already destroyed; otherwise it waits until the
// asynchronous events taken for it were acknowledged, or ctx is done
// (then the error matches ctx.Err() and nothing is destroyed). Requests
// still queued are discarded.
func (s *SRQ) Destroy(ctx context.Context) error {
	d := s.pd.dev
	if n := s.srq.Users(); n > 0 {
		return verbs.Errorf("destroy_srq", syscall.EBUSY, "%d QPs still use the SRQ", n)
	}
	if err := s.events.Wait(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := s.srq.Destroy(); err != nil {
		return err
	}
	d.ev.purge(func(e *AsyncEvent) bool { return e.SRQ == s })
	if s.cq != nil {
		s.cq.cq.RemoveUser()
	}
	delete(d.srqs, s.num)
	s.pd.refs--
	return nil
}

// PostOps posts a linked list of tag-matching list operations
// (ibv_post_srq_ops(3)): TAG_ADD (its handle is written to wr.TM.Handle),
// TAG_DEL, TAG_SYNC, in order. It stops at the first operation it refuses
// and returns it with the error; the ones before it took effect. EINVAL:
// not a tag-matching SRQ, an unknown opcode or flag, a tag scatter list
// longer than tm_caps.max_sge or outside the PD's LOCAL_WRITE regions, a
// TAG_DEL of a handle not in use; ENOMEM: the tag list is full, or the
// list is longer than max_ops. Operations with verbs.OpsSignaled, and
// failed ones, complete on the SRQ's CQ (IBV_WC_TM_ADD, TM_DEL, TM_SYNC).
func (s *SRQ) PostOps(wr *verbs.OpsWR) (*verbs.OpsWR, error) { return s.srq.PostOps(wr) }

// IsTM reports whether the SRQ is a tag-matching SRQ.
func (s *SRQ) IsTM() bool { return s.srq.IsTM() }

// tmSink is a CQ as a tag-matching SRQ pushes to it.
type tmSink struct{ c *cq.CQ }

func (t tmSink) Push(wc *verbs.WC, solicited bool) bool { return t.c.Push(wc, solicited) }

func (t tmSink) PushRelease(wc *verbs.WC, solicited bool, r srq.Releaser, token uint32) bool {
	return t.c.PushRelease(wc, solicited, r, token)
}
