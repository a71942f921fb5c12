package srq

import (
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// Config describes a shared receive queue to create.
type Config struct {
	// Attr holds the requested max_wr and max_sge; srq_limit is ignored at
	// creation (ibv_create_srq(3)) and the SRQ starts disarmed.
	Attr verbs.SRQAttr
	// DevMaxWR and DevMaxSGE are the device's max_srq_wr and max_srq_sge.
	DevMaxWR, DevMaxSGE uint32
	// CanResize says whether the device has IBV_DEVICE_SRQ_RESIZE.
	CanResize bool
	// PD is the protection domain's handle.
	PD uint32
	// Context is the srq_context returned with events.
	Context any
	// Check validates receive scatter elements; it is bound to PD.
	Check SGEChecker
	// OnLimit raises IBV_EVENT_SRQ_LIMIT_REACHED. It is called without
	// the SRQ's lock held, at most once per arming.
	OnLimit func(*SRQ)
	// TM, when set, makes the SRQ a tag-matching SRQ.
	TM *TMConfig
}

// SRQ is a shared receive queue.
type SRQ struct {
	pd        uint32
	ctx       any
	devMaxWR  uint32
	canResize bool
	check     SGEChecker
	onLimit   func(*SRQ)
	users     atomic.Int32

	tm *tmState // nil unless a tag-matching SRQ; its fields are protected by mu

	mu        sync.Mutex
	q         Queue  // protected by mu
	limit     uint32 // protected by mu; 0 = disarmed
	destroyed bool   // protected by mu
}

// New creates a shared receive queue (ibv_create_srq). max_wr must be in
// 1..max_srq_wr and max_sge in 1..max_srq_sge; anything else is EINVAL.
// The queue holds exactly max_wr requests.
func New(cfg Config) (*SRQ, error) {
	const op = "create_srq"
	a := cfg.Attr
	switch {
	case a.MaxWR == 0 || a.MaxWR > cfg.DevMaxWR:
		return nil, verbs.Errorf(op, syscall.EINVAL, "max_wr %d not in 1..%d", a.MaxWR, cfg.DevMaxWR)
	case a.MaxSGE == 0 || a.MaxSGE > cfg.DevMaxSGE:
		return nil, verbs.Errorf(op, syscall.EINVAL, "max_sge %d not in 1..%d", a.MaxSGE, cfg.DevMaxSGE)
	}
	var t *tmState
	if cfg.TM != nil {
		var err error
		if t, err = newTM(cfg.TM); err != nil {
			return nil, err
		}
	}
	return &SRQ{
		tm:        t,
		pd:        cfg.PD,
		ctx:       cfg.Context,
		devMaxWR:  cfg.DevMaxWR,
		canResize: cfg.CanResize,
		check:     cfg.Check,
		onLimit:   cfg.OnLimit,
		q:         NewQueue(int(a.MaxWR), int(a.MaxSGE)),
	}, nil
}

// PD returns the protection domain handle.
func (s *SRQ) PD() uint32 { return s.pd }

// Context returns the srq_context.
func (s *SRQ) Context() any { return s.ctx }

// PostRecv posts a linked list of receive work requests
// (ibv_post_srq_recv). It stops at the first request that is invalid or
// does not fit (ENOMEM) and returns it with the error; the requests before
// it are posted.
func (s *SRQ) PostRecv(wr *verbs.RecvWR) (*verbs.RecvWR, error) {
	const op = "post_srq_recv"
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return wr, verbs.Errorf(op, syscall.EINVAL, "SRQ is destroyed")
	}
	for ; wr != nil; wr = wr.Next {
		if err := ValidateRecvWR(op, wr, s.q.MaxSGE(), s.check); err != nil {
			return wr, err
		}
		if !s.q.Push(wr) {
			return wr, verbs.Errorf(op, syscall.ENOMEM, "wr_id %#x: SRQ is full (%d outstanding)", wr.WRID, s.q.Cap())
		}
	}
	return nil, nil
}

// Take removes the oldest receive request for an incoming message. When
// the SRQ is armed and fewer than srq_limit requests remain, it raises the
// limit event once and disarms (ibv_modify_srq(3): the event fires "once
// the number of WRs in the SRQ drops below srq_limit").
func (s *SRQ) Take(dst *RecvWQE) bool {
	s.mu.Lock()
	ok := s.q.Take(dst)
	fire := ok && s.limitReachedLocked()
	s.mu.Unlock()
	if fire && s.onLimit != nil {
		s.onLimit(s)
	}
	return ok
}

// TakeIfFits takes the oldest request if it holds need bytes (a UD message
// longer than the buffer is dropped and leaves the request queued), with
// the limit event as Take.
func (s *SRQ) TakeIfFits(dst *RecvWQE, need uint64) (taken, present bool) {
	s.mu.Lock()
	taken, present = s.q.TakeIfFits(dst, need)
	fire := taken && s.limitReachedLocked()
	s.mu.Unlock()
	if fire && s.onLimit != nil {
		s.onLimit(s)
	}
	return taken, present
}

// limitReachedLocked disarms the limit event and reports true when a
// request was just taken and fewer than srq_limit remain; the caller
// raises the event once it has released mu.
func (s *SRQ) limitReachedLocked() bool {
	if s.limit == 0 || uint32(s.q.Len()) >= s.limit {
		return false
	}
	s.limit = 0
	return true
}

// Len returns how many receive requests are queued.
func (s *SRQ) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.Len()
}

// Modify resizes the SRQ (IBV_SRQ_MAX_WR) and/or arms its limit event
// (IBV_SRQ_LIMIT). If any attribute is invalid nothing is modified
// (ibv_modify_srq(3)). Errors, all EINVAL: unknown mask bits; resizing
// without IBV_DEVICE_SRQ_RESIZE, to 0, above max_srq_wr, or below the
// number of queued requests; a limit above max_wr.
func (s *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	const op = "modify_srq"
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return verbs.Errorf(op, syscall.EINVAL, "SRQ is destroyed")
	}
	if mask&^(verbs.SRQMaxWR|verbs.SRQLimit) != 0 {
		return verbs.Errorf(op, syscall.EINVAL, "unknown attribute mask bits %#x", uint32(mask))
	}
	maxWR := uint32(s.q.Cap())
	if mask&verbs.SRQMaxWR != 0 {
		switch {
		case !s.canResize:
			return verbs.Errorf(op, syscall.EINVAL, "device cannot resize SRQs")
		case attr.MaxWR == 0 || attr.MaxWR > s.devMaxWR:
			return verbs.Errorf(op, syscall.EINVAL, "max_wr %d not in 1..%d", attr.MaxWR, s.devMaxWR)
		case int(attr.MaxWR) < s.q.Len():
			return verbs.Errorf(op, syscall.EINVAL, "max_wr %d is below the %d queued requests", attr.MaxWR, s.q.Len())
		case mask&verbs.SRQLimit == 0 && s.limit > attr.MaxWR:
			// rxe_srq_chk_attr: "max_wr < srq->limit".
			return verbs.Errorf(op, syscall.EINVAL, "max_wr %d is below the armed srq_limit %d", attr.MaxWR, s.limit)
		}
		maxWR = attr.MaxWR
	}
	if mask&verbs.SRQLimit != 0 && attr.SRQLimit > maxWR {
		return verbs.Errorf(op, syscall.EINVAL, "srq_limit %d exceeds max_wr %d", attr.SRQLimit, maxWR)
	}
	if mask&verbs.SRQMaxWR != 0 {
		s.q.Resize(int(maxWR))
	}
	if mask&verbs.SRQLimit != 0 {
		s.limit = attr.SRQLimit
	}
	return nil
}

// Query returns the SRQ's attributes (ibv_query_srq). srq_limit is 0 when
// the limit event is not armed.
func (s *SRQ) Query() verbs.SRQAttr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return verbs.SRQAttr{MaxWR: uint32(s.q.Cap()), MaxSGE: uint32(s.q.MaxSGE()), SRQLimit: s.limit}
}

// AddUser records a QP attached to the SRQ.
func (s *SRQ) AddUser() { s.users.Add(1) }

// RemoveUser records that an attached QP was destroyed.
func (s *SRQ) RemoveUser() { s.users.Add(-1) }

// Users returns the number of attached QPs.
func (s *SRQ) Users() int { return int(s.users.Load()) }

// Destroy destroys the SRQ (ibv_destroy_srq): EBUSY while QPs are
// attached. Queued requests are discarded.
func (s *SRQ) Destroy() error {
	const op = "destroy_srq"
	if n := s.Users(); n > 0 {
		return verbs.Errorf(op, syscall.EBUSY, "%d QPs still use the SRQ", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return verbs.Errorf(op, syscall.EINVAL, "SRQ is already destroyed")
	}
	s.destroyed = true
	s.q.Reset()
	return nil
}
