package softhca

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"github.com/softhca/softhca/conformance"
	"github.com/softhca/softhca/verbs"
)

// TestNonQPCasesCatchMutants checks that the device, PD/MR, CQ, channel,
// SRQ, async-event and AH cases can fail: each mutant wraps the softhca
// backend with one deliberate deviation from the man pages, and every case
// listed for it must fail against it (while passing against softhca).

type nqMutation struct {
	gidShift       bool // query_gid returns the entry after the one asked for
	pkeyZero       bool // query_pkey returns 0
	deallocLax     bool // dealloc_pd reports success while objects remain
	regMRLax       bool // reg_mr adds LOCAL_WRITE instead of failing
	pollReversed   bool // poll_cq returns each batch newest first
	cqeShort       bool // cq->cqe reported one below the request
	notifySticky   bool // the arm survives its event (not one-shot)
	ackNoop        bool // ibv_ack_cq_events acknowledges nothing
	cqCtxLost      bool // cq_context is not kept
	srqPartial     bool // modify_srq applies the limit before checking max_wr
	asyncBlocking  bool // the async queue ignores non-blocking mode
	asyncQPDropped bool // async events lose their QP
	asyncCQDropped bool // async events lose their CQ
}

type nqMutant struct {
	inner Target
	m     nqMutation
}

func (t *nqMutant) Name() string { return "mutant" }

// PortAddrs makes the mutant a conformance.AddrTarget, as its inner
// target is, so that the query_gid cases run against it.
func (t *nqMutant) PortAddrs() []netip.Addr { return t.inner.PortAddrs() }

func (t *nqMutant) Open() (conformance.Device, error) {
	d, err := t.inner.Open()
	if err != nil {
		return nil, err
	}
	return &mDevice{Device: d, m: t.m, cqs: map[conformance.CQ]*mCQ{}}, nil
}

type mDevice struct {
	conformance.Device
	m   nqMutation
	mu  sync.Mutex
	cqs map[conformance.CQ]*mCQ // inner -> wrapper
}

func (d *mDevice) wrapCQ(c conformance.CQ) conformance.CQ {
	if c == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.cqs[c]; ok {
		return w
	}
	return c
}

func unwrapCQ(c conformance.CQ) conformance.CQ {
	if w, ok := c.(*mCQ); ok {
		return w.CQ
	}
	return c
}

func (d *mDevice) QueryGID(p uint8, i int) (verbs.GID, error) {
	if d.m.gidShift {
		i++
	}
	return d.Device.QueryGID(p, i)
}

func (d *mDevice) QueryPKey(p uint8, i int) (uint16, error) {
	k, err := d.Device.QueryPKey(p, i)
	if d.m.pkeyZero {
		k = 0
	}
	return k, err
}

func (d *mDevice) SetAsyncNonBlocking(nb bool) {
	if !d.m.asyncBlocking {
		d.Device.SetAsyncNonBlocking(nb)
	}
}

func (d *mDevice) GetAsyncEvent(ctx context.Context) (conformance.AsyncEvent, error) {
	e, err := d.Device.GetAsyncEvent(ctx)
	e.CQ = d.wrapCQ(e.CQ)
	if d.m.asyncQPDropped {
		e.QP = nil
	}
	if d.m.asyncCQDropped {
		e.CQ = nil
	}
	return e, err
}

func (d *mDevice) AckAsyncEvent(e conformance.AsyncEvent) {
	if e.CQ != nil {
		e.CQ = unwrapCQ(e.CQ)
	}
	d.Device.AckAsyncEvent(e)
}

func (d *mDevice) AllocPD() (conformance.PD, error) {
	p, err := d.Device.AllocPD()
	if err != nil {
		return nil, err
	}
	return &mPD{PD: p, d: d}, nil
}

func (d *mDevice) CreateCompChannel() (conformance.CompChannel, error) {
	ch, err := d.Device.CreateCompChannel()
	if err != nil {
		return nil, err
	}
	return &mChannel{CompChannel: ch, d: d}, nil
}

func (d *mDevice) CreateCQ(cqe int, ch conformance.CompChannel, ctx any, vec int) (conformance.CQ, error) {
	if w, ok := ch.(*mChannel); ok {
		ch = w.CompChannel
	}
	if d.m.cqCtxLost {
		ctx = nil
	}
	c, err := d.Device.CreateCQ(cqe, ch, ctx, vec)
	if err != nil {
		return nil, err
	}
	w := &mCQ{CQ: c, m: d.m}
	d.mu.Lock()
	d.cqs[c] = w
	d.mu.Unlock()
	return w, nil
}

type mPD struct {
	conformance.PD
	d *mDevice
}

func (p *mPD) Dealloc() error {
	err := p.PD.Dealloc()
	if p.d.m.deallocLax {
		return nil
	}
	return err
}

func (p *mPD) RegMR(buf []byte, a verbs.AccessFlags) (conformance.MR, error) {
	if p.d.m.regMRLax && a&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 {
		a |= verbs.AccessLocalWrite
	}
	return p.PD.RegMR(buf, a)
}

func (p *mPD) CreateQP(init *conformance.QPInitAttr) (conformance.QP, error) {
	in := *init
	in.SendCQ, in.RecvCQ = unwrapCQ(in.SendCQ), unwrapCQ(in.RecvCQ)
	if s, ok := in.SRQ.(*mSRQ); ok {
		in.SRQ = s.SRQ
	}
	return p.PD.CreateQP(&in)
}

func (p *mPD) CreateSRQ(a verbs.SRQAttr, ctx any) (conformance.SRQ, error) {
	s, err := p.PD.CreateSRQ(a, ctx)
	if err != nil {
		return nil, err
	}
	return &mSRQ{SRQ: s, m: p.d.m}, nil
}

type mChannel struct {
	conformance.CompChannel
	d *mDevice
}

func (ch *mChannel) GetEvent(ctx context.Context) (conformance.CQ, error) {
	c, err := ch.CompChannel.GetEvent(ctx)
	if err != nil {
		return nil, err
	}
	if ch.d.m.notifySticky {
		_ = c.ReqNotify(false)
	}
	return ch.d.wrapCQ(c), nil
}

type mCQ struct {
	conformance.CQ
	m nqMutation
}

func (c *mCQ) CQE() int {
	if c.m.cqeShort {
		return c.CQ.CQE() - 1
	}
	return c.CQ.CQE()
}

func (c *mCQ) Poll(wcs []verbs.WC) int {
	n := c.CQ.Poll(wcs)
	if c.m.pollReversed {
		for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
			wcs[i], wcs[j] = wcs[j], wcs[i]
		}
	}
	return n
}

func (c *mCQ) AckEvents(n int) {
	if !c.m.ackNoop {
		c.CQ.AckEvents(n)
	}
}

type mSRQ struct {
	conformance.SRQ
	m nqMutation
}

func (s *mSRQ) Modify(a *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	if s.m.srqPartial && mask&verbs.SRQLimit != 0 && mask&verbs.SRQMaxWR != 0 {
		if err := s.SRQ.Modify(a, verbs.SRQLimit); err != nil {
			return err
		}
		return s.SRQ.Modify(a, verbs.SRQMaxWR)
	}
	return s.SRQ.Modify(a, mask)
}

func TestNonQPCasesCatchMutants(t *testing.T) {
	mutants := []struct {
		name  string
		m     nqMutation
		cases []string
	}{
		{"no mutation", nqMutation{}, nil},
		{"gid-shift", nqMutation{gidShift: true}, []string{
			"query_gid/index-0-is-link-local-from-node-guid",
			"query_gid/ipv4-address-is-mapped-gid-at-index-1",
			"query_gid/ipv6-address-gid",
		}},
		{"pkey-zero", nqMutation{pkeyZero: true}, []string{"query_pkey/index-0-is-default-partition"}},
		{"dealloc-lax", nqMutation{deallocLax: true}, []string{
			"dealloc_pd/busy-while-an-mr-is-registered",
			"dealloc_pd/busy-while-an-srq-exists",
			"dealloc_pd/busy-while-an-ah-exists",
			"dealloc_pd/twice-fails",
		}},
		{"reg-mr-lax", nqMutation{regMRLax: true}, []string{
			"reg_mr/remote-write-needs-local-write",
			"reg_mr/remote-atomic-needs-local-write",
		}},
		{"poll-reversed", nqMutation{pollReversed: true}, []string{
			"poll_cq/oldest-first-at-most-num_entries",
			"resize_cq/grow-keeps-completions-in-order",
			"resize_cq/below-queued-einval-nothing-lost",
		}},
		{"cqe-short", nqMutation{cqeShort: true}, []string{
			"create_cq/cqe-at-least-requested",
			"create_cq/cqe-above-max_cqe-einval",
		}},
		{"notify-sticky", nqMutation{notifySticky: true}, []string{
			"req_notify_cq/one-shot",
			"req_notify_cq/arm-twice-one-event",
		}},
		{"ack-noop", nqMutation{ackNoop: true}, []string{
			"ack_cq_events/batched-ack-lets-destroy",
		}},
		{"cq-context-lost", nqMutation{cqCtxLost: true}, []string{
			"create_cq/context-is-kept",
			"get_cq_event/returns-cq-and-context",
		}},
		{"srq-partial", nqMutation{srqPartial: true}, []string{"modify_srq/all-or-nothing"}},
		{"async-blocking", nqMutation{asyncBlocking: true}, []string{"get_async_event/nonblocking-eagain"}},
		{"async-qp-dropped", nqMutation{asyncQPDropped: true}, []string{
			"async_event/last-wqe-reached-delivered-once",
			"modify_qp/ERR/with-srq-raises-LAST_WQE_REACHED/RC",
		}},
		{"async-cq-dropped", nqMutation{asyncCQDropped: true}, []string{
			"async_event/blocked-get-wakes-on-event",
			"async_event/one-waiter-gets-each-event",
			"get_async_event/nonblocking-eagain",
			"get_async_event/interrupted-wait-consumes-nothing",
			"async_event/destroy-cq-waits-for-cq-err-ack",
		}},
	}
	byName := map[string]conformance.Case{}
	for _, c := range conformance.Cases() {
		byName[c.Name] = c
	}
	for _, mu := range mutants {
		target := &nqMutant{m: mu.m}
		for _, name := range mu.cases {
			c, ok := byName[name]
			if !ok {
				t.Fatalf("%s: no case %q", mu.name, name)
			}
			t.Run(mu.name+"/"+name, func(t *testing.T) {
				t.Parallel()
				if r := conformance.RunCase(target, c); r.Outcome != conformance.Failed {
					t.Errorf("case %s %s against mutant %s, want FAIL", name, r.Outcome, mu.name)
				}
			})
		}
	}
	// The wrapper itself is faithful: with no mutation a sample of cases
	// that cross every wrapped object passes.
	clean := &nqMutant{}
	for _, name := range []string{
		"req_notify_cq/one-shot", "destroy_cq/waits-for-event-ack", "cq/overrun-raises-cq-err",
		"modify_srq/all-or-nothing", "async_event/last-wqe-reached-delivered-once",
		"comp_channel/events-in-order-across-cqs", "dealloc_pd/busy-while-an-mr-is-registered",
	} {
		t.Run("no mutation/"+name, func(t *testing.T) {
			t.Parallel()
			if r := conformance.RunCase(clean, byName[name]); r.Outcome != conformance.Passed {
				t.Errorf("unmutated wrapper: case %s %s: %v", name, r.Outcome, r.Messages)
			}
		})
	}
}
