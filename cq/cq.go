package cq

import (
	"context"
	"sync"
	"syscall"

	"github.com/softhca/softhca/internal/ring"
	"github.com/softhca/softhca/verbs"
)

// Config holds the parameters of New (the arguments of ibv_create_cq plus
// the device limits that bound them).
type Config struct {
	// CQE is the requested number of entries (cqe). It must be 1..MaxCQE.
	CQE int
	// MaxCQE is the device limit (ibv_device_attr.max_cqe); it must be
	// at least 1.
	MaxCQE int
	// Channel is the completion channel events go to, or nil for none.
	Channel *Channel
	// Context is the cq_context, returned by CQ.Context.
	Context any
	// Owner is the object that wraps the CQ (the hca's CQ), returned by
	// Owner, so that a completion event (Channel.GetEvent) leads back to
	// it.
	Owner any
	// CompVector is the completion vector (comp_vector). It must not be
	// negative, and must be below NumCompVectors when that is set.
	CompVector int
	// NumCompVectors is the device's number of completion vectors
	// (ibv_context.num_comp_vectors). Zero skips the upper bound check,
	// leaving it to the caller.
	NumCompVectors int

	// RoundUp sizes the ring as rxe does instead of exactly CQE: the
	// smallest 2^k-1 at least CQE (rxe_queue_init rounds cqe+1 slots up
	// to a power of two and reports slots-1 as ibcq.cqe). ibv_create_cq(3)
	// and ibv_resize_cq(3) allow either: the size is "at least" cqe. The
	// default, exact sizing, makes overrun tests portable.
	RoundUp bool
	// ArmWithoutChannel makes ReqNotify succeed on a CQ created without a
	// channel, as rxe and every libibverbs provider do: the arm is
	// consumed by the next matching completion and the event is
	// discarded (ib_uverbs_comp_handler returns at once when the CQ has
	// no event file). By default ReqNotify fails with EINVAL instead,
	// because such an arm can never be delivered. Implementation-defined.
	ArmWithoutChannel bool
}

// notifyState is a CQ's arm (the notify field of rxe_cq).
type notifyState uint8

const (
	notifyNone      notifyState = iota // not armed
	notifySolicited                    // IB_CQ_SOLICITED: next solicited or failed completion
	notifyNextComp                     // IB_CQ_NEXT_COMP: next completion
)

// CQ is a completion queue (struct ibv_cq): a fixed-capacity FIFO of work
// completions with a one-shot notification arm. All methods are safe for
// concurrent use. See the package documentation for the lock order.
type CQ struct {
	// Immutable after New.
	ch                *Channel
	context           any
	owner             any
	compVector        int
	maxCQE            int
	roundUp           bool
	armWithoutChannel bool
	// waitHook, when set (by tests, before use), is called by Destroy
	// each time it is about to wait for acknowledgements, with no lock
	// held.
	waitHook func()

	mu sync.Mutex
	// The following fields are protected by mu.
	ring      ring.Ring[verbs.WC] // queued completions, oldest first
	cqe       int                 // capacity as reported (ring.Cap() while live)
	notify    notifyState         // the arm
	inError   bool                // overrun happened: the CQ is in the error state
	destroyed bool                // Destroy succeeded
	users     int                 // QPs and SRQs using the CQ
	onOverrun func(*CQ)           // called once, on the first overrun
	waiters   int                 // goroutines in Wait

	// The following fields are protected by ch.mu (the channel's lock),
	// because the channel updates them without taking mu. Unused without
	// a channel.
	reported uint64        // events taken by GetEvent (comp_events_reported)
	acked    uint64        // events acknowledged (comp_events_completed); <= reported
	ackWait  chan struct{} // closed on the next AckEvents, for Destroy; nil if none waits

	// Releases due when the application polls past a completion
	// (PushRelease), oldest first; relHead is the first not yet due.
	// Protected by mu. polled counts the completions ever polled.
	releases []release
	relHead  int
	polled   uint64

	// ready holds a token when a goroutine in Wait should look at the
	// ring again: Push leaves one when waiters > 0. It is apart from the
	// arm and the channel, which belong to the application. Senders never
	// block (it has room for one token).
	ready chan struct{}
}

// New creates a completion queue (ibv_create_cq). It fails with EINVAL
// when CQE is not within 1..MaxCQE or CompVector is out of range (rxe's
// rxe_cq_chk_attr, uverbs' comp_vector check), and with EBADF when Channel
// is closed.
func New(cfg Config) (*CQ, error) {
	if cfg.MaxCQE < 1 {
		return nil, verbs.Errorf("create_cq", syscall.EINVAL, "max_cqe %d: the device limit must be at least 1", cfg.MaxCQE)
	}
	if cfg.CQE < 1 || cfg.CQE > cfg.MaxCQE {
		return nil, verbs.Errorf("create_cq", syscall.EINVAL, "cqe %d is not within 1..%d (max_cqe)", cfg.CQE, cfg.MaxCQE)
	}
	if cfg.CompVector < 0 || (cfg.NumCompVectors > 0 && cfg.CompVector >= cfg.NumCompVectors) {
		return nil, verbs.Errorf("create_cq", syscall.EINVAL, "comp_vector %d is out of range (%d vectors)", cfg.CompVector, cfg.NumCompVectors)
	}
	n := capacityFor(cfg.CQE, cfg.RoundUp)
	c := &CQ{
		ch:                cfg.Channel,
		context:           cfg.Context,
		owner:             cfg.Owner,
		compVector:        cfg.CompVector,
		maxCQE:            cfg.MaxCQE,
		roundUp:           cfg.RoundUp,
		armWithoutChannel: cfg.ArmWithoutChannel,
		ring:              ring.New[verbs.WC](n),
		cqe:               n,
		ready:             make(chan struct{}, 1),
	}
	if c.ch != nil {
		if err := c.ch.attach(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// capacityFor returns the ring size for a requested cqe.
func capacityFor(cqe int, roundUp bool) int {
	if !roundUp {
		return cqe
	}
	n := 1
	for n < cqe+1 {
		n <<= 1
	}
	return n - 1
}

// CQE returns the capacity (ibv_cq.cqe): the number of completions the CQ
// holds before it overruns.
func (c *CQ) CQE() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cqe
}

// Context returns the cq_context given to New.
func (c *CQ) Context() any { return c.context }

// Owner returns the owner given to New (Config.Owner).
func (c *CQ) Owner() any { return c.owner }

// Channel returns the completion channel given to New, or nil.
func (c *CQ) Channel() *Channel { return c.ch }

// CompVector returns the completion vector given to New.
func (c *CQ) CompVector() int { return c.compVector }

// Len returns the number of completions queued; 0 once destroyed.
func (c *CQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ring.Len()
}

// InError reports whether the CQ has overrun and is in the error state.
func (c *CQ) InError() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inError
}

// Poll moves up to len(wcs) of the oldest completions into wcs, oldest
// first, and returns how many (ibv_poll_cq). It never blocks, returns 0
// when the CQ is empty, len(wcs) is 0 or the CQ is destroyed, and does not
// allocate. Completions queued before an overrun can still be polled.
func (c *CQ) Poll(wcs []verbs.WC) int {
	c.mu.Lock()
	n := min(len(wcs), c.ring.Len())
	for i := range n {
		wcs[i] = *c.ring.At(i)
	}
	c.ring.Drop(n)
	c.polled += uint64(n)
	if c.relHead < len(c.releases) && c.releases[c.relHead].pos < c.polled {
		c.releaseDue() // unlocks
		return n
	}
	c.mu.Unlock()
	return n
}

// Releaser learns that the application has polled a completion pushed
// with PushRelease: the tag-matching SRQ frees the tag handle that the
// completion ended only then, so that a handle is never reused while the
// application may still name it (docs/tag-matching.md, T3).
type Releaser interface {
	Released(token uint32)
}

// release is a Releaser to tell when the completion at position pos (in
// the order of all completions ever pushed) is polled.
type release struct {
	pos   uint64
	r     Releaser
	token uint32
}

// PushRelease is Push for a completion whose polling r must learn of:
// once the application has polled it, r.Released(token) is called, from
// the polling goroutine with no CQ lock held. It reports false, and
// calls nothing, when the completion could not be queued (the CQ is
// destroyed or overran): the caller then releases at once.
func (c *CQ) PushRelease(wc *verbs.WC, solicited bool, r Releaser, token uint32) bool {
	c.mu.Lock()
	pos := c.polled + uint64(c.ring.Len())
	if !c.pushLocked(wc, solicited) {
		return false // pushLocked unlocked
	}
	if c.relHead > 0 && c.relHead >= len(c.releases)/2 {
		// Reclaim the released prefix, so that a CQ that is never
		// drained empty keeps no more than its pending releases.
		n := copy(c.releases, c.releases[c.relHead:])
		clear(c.releases[n:])
		c.releases, c.relHead = c.releases[:n], 0
	}
	c.releases = append(c.releases, release{pos: pos, r: r, token: token})
	c.mu.Unlock()
	return true
}

// releaseDue tells the Releasers of the completions polled so far,
// without the lock, which the caller holds and releaseDue releases.
func (c *CQ) releaseDue() {
	for {
		var due [16]release
		n := 0
		for n < len(due) && c.relHead < len(c.releases) && c.releases[c.relHead].pos < c.polled {
			due[n] = c.releases[c.relHead]
			c.releases[c.relHead] = release{}
			c.relHead++
			n++
		}
		more := n == len(due) && c.relHead < len(c.releases) && c.releases[c.relHead].pos < c.polled
		c.mu.Unlock()
		for _, d := range due[:n] {
			d.r.Released(d.token)
		}
		if !more {
			return
		}
		c.mu.Lock()
	}
}

// Wait blocks until the CQ holds at least one completion, and returns nil
// (a completion already queued returns at once, even if ctx is done). It
// returns an *InterruptedError (matching syscall.EINTR and ctx.Err()) when
// ctx is done first, and EINVAL when the CQ is or becomes destroyed. It
// is the wait of a blocking poll (the hca's PollWait): it neither
// consumes nor needs the arm of ReqNotify, and queues no event on the
// channel, so it leaves the application's notifications alone. Several
// goroutines may wait at once. Waiting does not allocate.
func (c *CQ) Wait(ctx context.Context) error {
	c.mu.Lock()
	for {
		switch {
		case c.ring.Len() > 0:
			if c.waiters > 0 {
				// Another waiter may have slept through the token
				// this one took; pass it on.
				c.signalLocked()
			}
			c.mu.Unlock()
			return nil
		case c.destroyed:
			if c.waiters > 0 {
				c.signalLocked()
			}
			c.mu.Unlock()
			return verbs.Errorf("poll_cq", syscall.EINVAL, "CQ is destroyed")
		case ctx.Err() != nil:
			c.mu.Unlock()
			return interrupted("poll_cq", ctx)
		}
		c.waiters++
		c.mu.Unlock()
		select {
		case <-c.ready:
		case <-ctx.Done():
		}
		c.mu.Lock()
		c.waiters--
	}
}

// signalLocked leaves a wake-up token for a goroutine in Wait, without
// blocking.
//
// Preconditions: c.mu is held.
func (c *CQ) signalLocked() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// ReqNotify arms the CQ for one completion event (ibv_req_notify_cq). The
// arm is one-shot: the next completion added after the call that matches
// it queues one event on the channel and disarms the CQ. Completions
// already queued do not fire it (there is no IBV_CQ_REPORT_MISSED_EVENTS):
// poll the CQ after arming.
//
// With solicitedOnly, only a solicited completion matches: a receive
// completion for a message with the Solicited Event bit, or any completion
// whose status is not success (ibv_req_notify_cq(3)). Arming again before
// the event is harmless and never yields a second event; the broader arm
// wins, so an arm for any completion is not narrowed by a later
// solicited-only arm (rxe: "if (cq->notify != IB_CQ_NEXT_COMP) cq->notify =
// flags", or "cq->notify |= flags" in newer kernels).
//
// It fails with EINVAL when the CQ is destroyed, and when the CQ has no
// channel unless Config.ArmWithoutChannel was set. Arming a CQ in the
// error state succeeds but can never fire: no completion is added to it.
func (c *CQ) ReqNotify(solicitedOnly bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return verbs.Errorf("req_notify_cq", syscall.EINVAL, "CQ is destroyed")
	}
	if c.ch == nil && !c.armWithoutChannel {
		return verbs.Errorf("req_notify_cq", syscall.EINVAL, "CQ has no completion channel")
	}
	switch {
	case !solicitedOnly:
		c.notify = notifyNextComp
	case c.notify == notifyNone:
		c.notify = notifySolicited
	}
	return nil
}

// AckEvents acknowledges n events of this CQ taken with GetEvent
// (ibv_ack_cq_events). Acknowledgements may be batched. libibverbs adds n
// unchecked; here the acknowledged count is clamped to the reported count,
// so acknowledging more than was taken (or acknowledging early) changes
// nothing beyond balancing the taken events, and n <= 0 is ignored.
func (c *CQ) AckEvents(n int) {
	ch := c.ch
	if n <= 0 || ch == nil {
		return
	}
	ch.mu.Lock()
	if out := c.reported - c.acked; uint64(n) >= out {
		c.acked = c.reported
	} else {
		c.acked += uint64(n)
	}
	if c.ackWait != nil {
		close(c.ackWait)
		c.ackWait = nil
	}
	ch.mu.Unlock()
}

// UnackedEvents returns how many events taken from the channel for this CQ
// are not yet acknowledged.
func (c *CQ) UnackedEvents() int {
	ch := c.ch
	if ch == nil {
		return 0
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return int(c.reported - c.acked)
}

// Resize changes the capacity to cqe (ibv_resize_cq), keeping the queued
// completions in order. It fails with EINVAL, changing nothing, when cqe
// is not within 1..max_cqe, is below the number of completions queued
// (rxe_cq_chk_attr), or the CQ is destroyed. The arm and the error state
// are kept.
func (c *CQ) Resize(cqe int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return verbs.Errorf("resize_cq", syscall.EINVAL, "CQ is destroyed")
	}
	if cqe < 1 || cqe > c.maxCQE {
		return verbs.Errorf("resize_cq", syscall.EINVAL, "cqe %d is not within 1..%d (max_cqe)", cqe, c.maxCQE)
	}
	if n := c.ring.Len(); cqe < n {
		return verbs.Errorf("resize_cq", syscall.EINVAL, "cqe %d is below the %d completions queued", cqe, n)
	}
	n := capacityFor(cqe, c.roundUp)
	if n != c.ring.Cap() {
		c.ring.Resize(n) // cannot fail: n >= cqe >= Len
	}
	c.cqe = n
	return nil
}

// Destroy destroys the CQ (ibv_destroy_cq).
//
// It fails with EBUSY while a QP or SRQ uses the CQ (Users() > 0, as
// ib_destroy_cq_user checks usecnt; IBA C11-17) and with EINVAL when the CQ
// is already destroyed. Otherwise it waits until every event taken from
// the channel for this CQ has been acknowledged, as libibverbs waits for
// comp_events_completed to reach comp_events_reported. If ctx is done
// first it returns an *InterruptedError (matching ctx.Err()) and destroys
// nothing. Unlike libibverbs, which destroys first and waits after, the
// wait comes first so that a cancelled Destroy leaves a usable CQ.
//
// On success the CQ's events still queued in the channel are removed from
// it (ib_uverbs_release_ucq), the channel is released, and the CQ behaves
// as destroyed: Poll and Len return 0, Push returns false, ReqNotify,
// Resize and Destroy fail with EINVAL.
func (c *CQ) Destroy(ctx context.Context) error {
	for {
		c.mu.Lock()
		if c.destroyed {
			c.mu.Unlock()
			return verbs.Errorf("destroy_cq", syscall.EINVAL, "CQ is already destroyed")
		}
		if c.users > 0 {
			n := c.users
			c.mu.Unlock()
			return verbs.Errorf("destroy_cq", syscall.EBUSY, "CQ is used by %d QP(s)/SRQ(s)", n)
		}
		ch := c.ch
		if ch == nil {
			c.destroyLocked()
			c.mu.Unlock()
			return nil
		}
		ch.mu.Lock()
		if c.acked == c.reported {
			// No event can be taken for c after this: the queued
			// ones go now, and a destroyed CQ posts no more.
			ch.detachLocked(c)
			c.destroyLocked()
			ch.mu.Unlock()
			c.mu.Unlock()
			return nil
		}
		w := c.ackWait
		if w == nil {
			w = make(chan struct{})
			c.ackWait = w
		}
		ch.mu.Unlock()
		c.mu.Unlock()
		if c.waitHook != nil {
			c.waitHook()
		}
		select {
		case <-w:
		case <-ctx.Done():
			return interrupted("destroy_cq", ctx)
		}
	}
}

// destroyLocked marks the CQ destroyed and frees its ring.
//
// Preconditions: c.mu is held.
func (c *CQ) destroyLocked() {
	c.destroyed = true
	c.notify = notifyNone
	c.ring = ring.Ring[verbs.WC]{}
	c.releases, c.relHead = nil, 0
	c.onOverrun = nil
	if c.waiters > 0 {
		c.signalLocked() // they return EINVAL, passing the token on
	}
}

// Push appends a completion (the engine's rxe_cq_post); *wc is copied. It
// returns false, queuing nothing, when the CQ is destroyed or in the error
// state, and on overrun: when the CQ is full the completion is lost, the
// CQ enters the error state for good and the overrun handler is called,
// once, with no lock held.
//
// solicited says whether the completion is for a message with the
// Solicited Event bit. If the CQ is armed and the arm matches (any
// completion; or, for a solicited-only arm, solicited or wc.Status is not
// WCSuccess) the arm is consumed and one event is queued on the channel.
// A goroutine in Wait is woken whatever the arm. Push does not allocate
// (the channel's event FIFO aside, which grows only to the most events
// ever pending).
func (c *CQ) Push(wc *verbs.WC, solicited bool) bool {
	c.mu.Lock()
	if !c.pushLocked(wc, solicited) {
		return false
	}
	c.mu.Unlock()
	return true
}

// pushLocked queues a completion with mu held. When it fails it has
// unlocked mu (the overrun handler runs without it); when it succeeds mu
// is still held.
func (c *CQ) pushLocked(wc *verbs.WC, solicited bool) bool {
	if c.destroyed || c.inError {
		c.mu.Unlock()
		return false
	}
	slot := c.ring.PushSlot()
	if slot == nil {
		c.inError = true
		h := c.onOverrun
		c.mu.Unlock()
		if h != nil {
			h(c)
		}
		return false
	}
	*slot = *wc
	if c.waiters > 0 {
		c.signalLocked()
	}
	switch c.notify {
	case notifyNextComp:
		c.fireLocked()
	case notifySolicited:
		if solicited || wc.Status != verbs.WCSuccess {
			c.fireLocked()
		}
	case notifyNone:
	}
	return true
}

// fireLocked consumes the arm and queues one event.
//
// Preconditions: c.mu is held.
func (c *CQ) fireLocked() {
	c.notify = notifyNone
	if c.ch != nil {
		c.ch.post(c)
	}
}

// SetOverrunHandler sets the function called on the first overrun (the hca
// raises IBV_EVENT_CQ_ERR from it). It runs on the goroutine of the Push
// that overran, with no lock held.
func (c *CQ) SetOverrunHandler(f func(*CQ)) {
	c.mu.Lock()
	c.onOverrun = f
	c.mu.Unlock()
}

// AddUser counts one more QP or SRQ using the CQ. The caller must know the
// CQ is not destroyed (Acquire checks).
func (c *CQ) AddUser() {
	c.mu.Lock()
	c.users++
	c.mu.Unlock()
}

// Acquire is AddUser that fails with EINVAL, counting nothing, when the CQ
// is destroyed; create_qp and create_srq use it to attach atomically.
func (c *CQ) Acquire() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return verbs.Errorf("create_qp", syscall.EINVAL, "CQ is destroyed")
	}
	c.users++
	return nil
}

// RemoveUser counts one QP or SRQ fewer. It panics if the count would go
// below zero, as sync.WaitGroup does: that is a bug in the caller.
func (c *CQ) RemoveUser() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users == 0 {
		panic("cq: RemoveUser without a matching AddUser")
	}
	c.users--
}

// Users returns the number of QPs and SRQs using the CQ.
func (c *CQ) Users() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.users
}
