package hca

import (
	"context"
	"runtime"
	"sync/atomic"
	"syscall"

	"github.com/softhca/softhca/cq"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/verbs"
)

// CompChannel is a completion channel (struct ibv_comp_channel), created
// by Device.CreateCompChannel: the queue of completion events of the CQs
// created with it (CreateCQ), with a file descriptor that polls readable
// while an event is pending.
type CompChannel struct {
	ch *cq.Channel
}

// CreateCompChannel creates a completion channel (ibv_create_comp_channel).
// Creating its eventfd can fail with the errno of eventfd(2) (EMFILE,
// ENFILE, ENOMEM).
func (d *Device) CreateCompChannel() (*CompChannel, error) {
	ch, err := cq.NewChannel()
	if err != nil {
		return nil, err
	}
	return &CompChannel{ch: ch}, nil
}

// FD returns the channel's file descriptor (channel->fd), or -1 once the
// channel is closed. It polls readable (POLLIN) exactly while GetEvent
// would return an event without blocking: poll, select or epoll it, but do
// not read it.
func (c *CompChannel) FD() int { return c.ch.FD() }

// SetNonBlocking sets or clears non-blocking mode, as
// fcntl(channel->fd, F_SETFL, O_NONBLOCK) does with libibverbs: in
// non-blocking mode GetEvent fails with EAGAIN instead of waiting.
func (c *CompChannel) SetNonBlocking(nb bool) { c.ch.SetNonBlocking(nb) }

// GetEvent takes the oldest completion event (ibv_get_cq_event) and
// returns the CQ it is for; its cq_context is CQ.Context. Every event
// returned must be acknowledged with CQ.AckEvents (batching is allowed)
// before the CQ can be destroyed. An event fires only for a CQ armed
// with ReqNotify, once per arming.
//
// With no event pending it fails with EAGAIN in non-blocking mode, and
// otherwise waits until an event arrives, the channel is closed (EBADF)
// or ctx is done: then the error matches syscall.EINTR and ctx.Err(), as
// a read of the channel's fd interrupted by a signal would. A pending
// event is returned even if ctx is already done.
func (c *CompChannel) GetEvent(ctx context.Context) (*CQ, error) {
	q, err := c.ch.GetEvent(ctx)
	if err != nil {
		return nil, err
	}
	return q.Owner().(*CQ), nil
}

// Close destroys the channel and closes its file descriptor
// (ibv_destroy_comp_channel): EBUSY while a CQ created with it is not
// destroyed, EBADF when it is already closed. Goroutines waiting in
// GetEvent return EBADF.
func (c *CompChannel) Close() error { return c.ch.Close() }

// CQ is a completion queue (ibv_cq), created by Device.CreateCQ. Poll
// takes completions without waiting, PollWait waits for them; ReqNotify
// asks for an event on the CQ's CompChannel instead.
type CQ struct {
	cq     *cq.CQ
	dev    *Device
	num    uint32 // the CQ's number (cqn), for Resources
	ch     *CompChannel
	events eventCounter // async events (CQ_ERR) about this CQ
	dead   atomic.Bool  // Destroy succeeded: a busy-polling PollWait stops
}

// CreateCQ creates a completion queue of cqe entries (ibv_create_cq): EINVAL
// when cqe is not within 1..max_cqe or comp_vector is not 0 (the device
// has one completion vector), EBADF when ch is closed, ENOMEM when the
// device holds max_cq CQs. ch may be nil (no completion events); ctx is
// the cq_context, returned by Context.
func (d *Device) CreateCQ(cqe int, ch *CompChannel, ctx any, compVector int) (*CQ, error) {
	const op = "create_cq"
	if compVector != 0 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "comp_vector %d: the device has 1 completion vector", compVector)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.roomLocked(op, len(d.cqs), d.cfg.Attr.MaxCQ, "CQs"); err != nil {
		return nil, err
	}
	w := &CQ{dev: d, ch: ch}
	cfg := cq.Config{CQE: cqe, MaxCQE: int(d.cfg.Attr.MaxCQE), Context: ctx, Owner: w}
	if ch != nil {
		cfg.Channel = ch.ch
	}
	c, err := cq.New(cfg)
	if err != nil {
		return nil, err
	}
	w.cq = c
	w.num = d.nextCQ
	d.nextCQ++
	d.cqs[w.num] = w
	c.SetOverrunHandler(func(*cq.CQ) { d.ev.raise(AsyncEvent{Type: verbs.EventCQErr, CQ: w}) })
	return w, nil
}

// CQE returns the CQ's capacity (ibv_cq.cqe): the number of completions
// it holds before it overruns.
func (c *CQ) CQE() int { return c.cq.CQE() }

// Context returns the cq_context given to CreateCQ (ibv_cq.cq_context).
func (c *CQ) Context() any { return c.cq.Context() }

// Channel returns the completion channel given to CreateCQ
// (ibv_cq.channel), or nil.
func (c *CQ) Channel() *CompChannel { return c.ch }

// Poll takes up to len(wcs) completions, oldest first, and returns how
// many (ibv_poll_cq). It never blocks and returns 0 when the CQ is empty
// or destroyed; completions queued before an overrun can still be polled.
// On a device opened with Config.BusyPoll, a poll that finds the CQ empty
// first drives the transport in the caller's goroutine, then looks again.
func (c *CQ) Poll(wcs []verbs.WC) int {
	n := c.cq.Poll(wcs)
	if n == 0 && c.dev.eng != nil && c.dev.eng.Progress() {
		n = c.cq.Poll(wcs)
	}
	return n
}

// PollWait is a blocking Poll: it takes up to len(wcs) completions and
// returns how many as soon as at least one is there (a completion already
// queued is returned even if ctx is done). When ctx ends first it returns
// 0 and an error that matches syscall.EINTR and ctx.Err(), as GetEvent's
// does; EINVAL when wcs is empty or the CQ is destroyed.
//
// libibverbs has no such verb: it is the loop of ReqNotify, GetEvent,
// AckEvents and Poll that its examples write, without its pitfalls. It
// does not consume the CQ's arm and queues no completion event, so it
// can be used together with ReqNotify and a completion channel. On a
// device opened with Config.BusyPoll (and a link that can be polled) it
// spins, driving the transport in the caller's goroutine as Poll does;
// otherwise it sleeps until a completion is added.
func (c *CQ) PollWait(ctx context.Context, wcs []verbs.WC) (int, error) {
	if len(wcs) == 0 {
		return 0, verbs.Errorf("poll_cq", syscall.EINVAL, "no room for a completion (len(wcs) is 0)")
	}
	spin := c.dev.busyPolls()
	for {
		if n := c.Poll(wcs); n > 0 {
			return n, nil
		}
		if spin && ctx.Err() == nil && !c.dead.Load() && !c.dev.eng.Closed() {
			runtime.Gosched() // the transport's goroutines share the cores
			continue
		}
		// Without busy polling: sleep until a Push. With it, once ctx
		// is done, the CQ destroyed or the device closed (polls no
		// longer drive anything; the flushes Close makes, and those of
		// later posts, are pushed): a last look, then sleep, EINTR or
		// EINVAL unless a completion came meanwhile.
		if err := c.cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

// busyPolls reports whether the device's polls drive the transport
// (Config.BusyPoll with a link that can be polled).
func (d *Device) busyPolls() bool {
	if d.eng == nil || !d.cfg.BusyPoll {
		return false
	}
	_, ok := d.cfg.Link.(link.Poller)
	return ok
}

// ReqNotify arms the CQ for one completion event (ibv_req_notify_cq): the
// next completion added after the call queues one event on the CQ's
// channel, for GetEvent, and disarms the CQ. With solicitedOnly, only a
// receive completion for a message with the Solicited Event bit, or a
// completion in error, fires it. Completions already queued fire nothing:
// poll the CQ after arming. Arming again before the event is harmless.
// EINVAL when the CQ has no completion channel or is destroyed.
func (c *CQ) ReqNotify(solicitedOnly bool) error { return c.cq.ReqNotify(solicitedOnly) }

// AckEvents acknowledges n completion events of this CQ taken with
// GetEvent (ibv_ack_cq_events). Acknowledgements may be batched; Destroy
// waits for every event taken to be acknowledged.
func (c *CQ) AckEvents(n int) { c.cq.AckEvents(n) }

// Resize changes the CQ's capacity to cqe entries (ibv_resize_cq),
// keeping the completions queued in order. EINVAL, changing nothing, when
// cqe is not within 1..max_cqe, is below the number of completions queued,
// or the CQ is destroyed.
func (c *CQ) Resize(cqe int) error { return c.cq.Resize(cqe) }

// Destroy destroys the CQ (ibv_destroy_cq): EBUSY while a QP or SRQ uses
// it, EINVAL when it is already destroyed; otherwise it waits until every
// completion event and asynchronous event taken for it was acknowledged,
// or ctx is done (then the error matches ctx.Err() and nothing is
// destroyed). The CQ's events still queued in its channel are dropped.
func (c *CQ) Destroy(ctx context.Context) error {
	// EBUSY comes first, as the kernel refuses before libibverbs waits.
	if n := c.cq.Users(); n > 0 {
		return verbs.Errorf("destroy_cq", syscall.EBUSY, "%d QPs or SRQs still use the CQ", n)
	}
	if err := c.events.Wait(ctx); err != nil {
		return err
	}
	if err := c.cq.Destroy(ctx); err != nil {
		return err
	}
	c.dead.Store(true)
	c.dev.ev.purge(func(e *AsyncEvent) bool { return e.CQ == c })
	d := c.dev
	d.mu.Lock()
	delete(d.cqs, c.num)
	d.mu.Unlock()
	return nil
}
