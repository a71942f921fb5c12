// Package softhca is the conformance suite's in-process softhca backend:
// Target opens hca devices and adapts them to the conformance interfaces
// (conformance.Target, conformance.PairTarget, conformance.AddrTarget).
// The cases themselves (package conformance) know nothing of hca; this
// package is the only bridge. `go test ./conformance/...` runs every case
// against it (TestSofthca, TestSofthcaBusyPoll), as does
// `softhca conformance`.
package softhca

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/softhca/softhca/conformance"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// The backend's optional abilities, checked at compile time: a renamed
// method would otherwise make the cases that need it skip silently.
var (
	_ conformance.PairTarget          = (*Target)(nil)
	_ conformance.ImplementationNamer = (*Target)(nil)
	_ conformance.AddrTarget          = (*Target)(nil)
	_ conformance.TransportDiagnoser  = (*shDevice)(nil)
	_ conformance.TMPD                = (*shPD)(nil)
	_ conformance.TMSRQ               = (*shSRQ)(nil)
)

// Target is the in-process softhca backend.
type Target struct {
	// Config is the device configuration; zero means hca's defaults with
	// the addresses DefaultAddrs.
	Config hca.Config
	// OpenLinks opens the links of the two devices OpenPair makes, which
	// must reach each other on port 4791 (each device sends to the port
	// its peer's link has); nil: UDP sockets on loopback addresses. The
	// devices take their GIDs from their links.
	OpenLinks func() (link.Link, link.Link, error)
}

// DefaultAddrs are the addresses of a device Open makes when
// Config.Addrs is nil: 192.0.2.1 and 2001:db8::1 (documentation ranges).
func DefaultAddrs() []netip.Addr {
	return []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}
}

// Name returns "softhca".
func (s *Target) Name() string { return "softhca" }

// Implementation returns conformance.ImplSofthca: the deviations a case
// declares for softhca apply to this backend.
func (s *Target) Implementation() string { return conformance.ImplSofthca }

// PortAddrs returns the IP addresses of port 1 of the devices Open makes,
// in GID order (conformance.AddrTarget).
func (s *Target) PortAddrs() []netip.Addr {
	if s.Config.Addrs != nil {
		return s.Config.Addrs
	}
	return DefaultAddrs()
}

// Open opens a softhca device.
func (s *Target) Open() (conformance.Device, error) {
	cfg := s.Config
	cfg.Addrs = s.PortAddrs()
	d, err := hca.Open(cfg)
	if err != nil {
		return nil, err
	}
	return newShDevice(d), nil
}

func newShDevice(d *hca.Device) *shDevice {
	return &shDevice{d: d, cqs: map[*hca.CQ]*shCQ{}, qps: map[*hca.QP]*shQP{}, srqs: map[*hca.SRQ]*shSRQ{}}
}

// OpenPair opens two softhca devices that reach each other over real UDP
// sockets on the loopback network (the conformance.PairTarget transport mode; Open
// keeps opening devices without a transport). Each device binds its own
// address 127.X.Y.Z:4791 (all of 127.0.0.0/8 is local on Linux), chosen at
// random and chosen again when it is in use, so suites can run in
// parallel processes; when port 4791 is taken everywhere (a loaded
// rdma_rxe listens on it) the devices bind free ports and send to each
// other's. The devices' GIDs come from their links' addresses; the rest
// of the configuration is s.Config. Closing a device closes its link.
func (s *Target) OpenPair() (conformance.Device, conformance.Device, error) {
	openLinks := s.OpenLinks
	if openLinks == nil {
		openLinks = openLoopbackLinks
	}
	la, lb, err := openLinks()
	if err != nil {
		return nil, nil, err
	}
	open := func(l, peer link.Link) (*hca.Device, error) {
		pn, err := peer.LocalAddr()
		if err != nil {
			return nil, err
		}
		cfg := s.Config
		cfg.Addrs = nil // the GID comes from the link
		cfg.Link = l
		cfg.PeerPort = pn.SrcPort
		return hca.Open(cfg)
	}
	da, err := open(la, lb)
	if err != nil {
		la.Close()
		lb.Close()
		return nil, nil, err
	}
	db, err := open(lb, la)
	if err != nil {
		da.Close()
		lb.Close()
		return nil, nil, err
	}
	return newShDevice(da), newShDevice(db), nil
}

// openLoopbackLinks binds two UDP links on distinct random loopback
// addresses, port 4791 if it is free there, any port otherwise.
func openLoopbackLinks() (link.Link, link.Link, error) {
	randAddr := func() netip.Addr {
		return netip.AddrFrom4([4]byte{127, byte(1 + rand.IntN(254)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
	}
	bind := func(port uint16) (*udp.Link, error) {
		var err error
		for range 16 {
			var l *udp.Link
			l, err = udp.Open(udp.Config{Addr: netip.AddrPortFrom(randAddr(), port), ECN: true})
			if err == nil {
				return l, nil
			}
			if !errors.Is(err, syscall.EADDRINUSE) {
				break
			}
		}
		return nil, err
	}
	var first error
	for _, port := range []uint16{wire.RoCEv2Port, 0} {
		a, err := bind(port)
		if err == nil {
			var b *udp.Link
			if b, err = bind(port); err == nil {
				return a, b, nil
			}
			a.Close()
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, nil, fmt.Errorf("conformance: cannot bind two UDP links on loopback: %w", first)
}

// shDevice adapts an hca.Device. Its maps turn the objects events name
// back into the wrappers the case holds.
type shDevice struct {
	d    *hca.Device
	mu   sync.Mutex
	cqs  map[*hca.CQ]*shCQ
	qps  map[*hca.QP]*shQP
	srqs map[*hca.SRQ]*shSRQ
}

func (d *shDevice) QueryDevice() verbs.DeviceAttr              { return d.d.QueryDevice() }
func (d *shDevice) QueryPort(p uint8) (verbs.PortAttr, error)  { return d.d.QueryPort(p) }
func (d *shDevice) QueryGID(p uint8, i int) (verbs.GID, error) { return d.d.QueryGID(p, i) }
func (d *shDevice) QueryPKey(p uint8, i int) (uint16, error)   { return d.d.QueryPKey(p, i) }
func (d *shDevice) SetAsyncNonBlocking(nb bool)                { d.d.SetAsyncNonBlocking(nb) }
func (d *shDevice) Close() error                               { return d.d.Close() }

// TransportDiag describes the transport's counters, for failure messages
// of data-path cases.
func (d *shDevice) TransportDiag() string {
	st := d.d.TransportStats()
	drops := st.DropNames()
	names := make([]string, 0, len(drops))
	for k, v := range drops {
		names = append(names, fmt.Sprintf("%s: %d", k, v))
	}
	sort.Strings(names)
	return fmt.Sprintf("rx %d tx %d retransmits %d timeouts %d RNR NAKs sent/received %d/%d drops {%s}",
		st.RxPackets, st.TxPackets, st.Retransmits, st.RetryTimeouts, st.RNRNAKsSent, st.RNRNAKsReceived, strings.Join(names, ", "))
}

func (d *shDevice) AllocPD() (conformance.PD, error) {
	p, err := d.d.AllocPD()
	if err != nil {
		return nil, err
	}
	return &shPD{p: p, dev: d}, nil
}

func (d *shDevice) CreateCompChannel() (conformance.CompChannel, error) {
	ch, err := d.d.CreateCompChannel()
	if err != nil {
		return nil, err
	}
	return &shChannel{ch: ch, dev: d}, nil
}

func (d *shDevice) CreateCQ(cqe int, ch conformance.CompChannel, ctx any, vec int) (conformance.CQ, error) {
	var c *hca.CompChannel
	if ch != nil {
		c = ch.(*shChannel).ch
	}
	q, err := d.d.CreateCQ(cqe, c, ctx, vec)
	if err != nil {
		return nil, err
	}
	w := &shCQ{q: q}
	d.mu.Lock()
	d.cqs[q] = w
	d.mu.Unlock()
	return w, nil
}

func (d *shDevice) GetAsyncEvent(ctx context.Context) (conformance.AsyncEvent, error) {
	e, err := d.d.GetAsyncEvent(ctx)
	if err != nil {
		return conformance.AsyncEvent{}, err
	}
	out := conformance.AsyncEvent{Type: e.Type, Port: e.Port}
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.QP != nil {
		out.QP = d.qps[e.QP]
	}
	if e.CQ != nil {
		out.CQ = d.cqs[e.CQ]
	}
	if e.SRQ != nil {
		out.SRQ = d.srqs[e.SRQ]
	}
	return out, nil
}

func (d *shDevice) AckAsyncEvent(e conformance.AsyncEvent) {
	// Rebuild the hca event from the wrapper objects.
	he := hca.AsyncEvent{Type: e.Type, Port: e.Port}
	if q, ok := e.QP.(*shQP); ok {
		he.QP = q.q
	}
	if c, ok := e.CQ.(*shCQ); ok {
		he.CQ = c.q
	}
	if s, ok := e.SRQ.(*shSRQ); ok {
		he.SRQ = s.s
	}
	d.d.AckAsyncEvent(he)
}

type shPD struct {
	p   *hca.PD
	dev *shDevice
}

func (p *shPD) Dealloc() error { return p.p.Dealloc() }

func (p *shPD) RegMR(buf []byte, access verbs.AccessFlags) (conformance.MR, error) {
	m, err := p.p.RegMR(buf, access)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (p *shPD) CreateQP(init *conformance.QPInitAttr) (conformance.QP, error) {
	hi := &hca.QPInitAttr{Context: init.Context, Cap: init.Cap, QPType: init.QPType, SQSigAll: init.SQSigAll}
	if c, ok := init.SendCQ.(*shCQ); ok {
		hi.SendCQ = c.q
	}
	if c, ok := init.RecvCQ.(*shCQ); ok {
		hi.RecvCQ = c.q
	}
	if s, ok := init.SRQ.(*shSRQ); ok {
		hi.SRQ = s.s
	}
	q, err := p.p.CreateQP(hi)
	if err != nil {
		return nil, err
	}
	w := &shQP{q: q}
	p.dev.mu.Lock()
	p.dev.qps[q] = w
	p.dev.mu.Unlock()
	return w, nil
}

func (p *shPD) CreateSRQ(attr verbs.SRQAttr, ctx any) (conformance.SRQ, error) {
	w, err := p.createSRQ(&hca.SRQInitAttr{Attr: attr, Context: ctx})
	if err != nil {
		return nil, err // not a nil *shSRQ in a non-nil interface
	}
	return w, nil
}

// CreateTMSRQ creates a tag-matching SRQ (conformance.TMPD). A cq that
// is not one of this backend's CQs counts as none.
func (p *shPD) CreateTMSRQ(attr verbs.SRQAttr, maxNumTags, maxOps uint32, cq conformance.CQ, ctx any) (conformance.TMSRQ, error) {
	init := &hca.SRQInitAttr{Attr: attr, Context: ctx, TM: &hca.TMCap{MaxNumTags: maxNumTags, MaxOps: maxOps}}
	if c, ok := cq.(*shCQ); ok && c != nil {
		init.CQ = c.q
	}
	w, err := p.createSRQ(init)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// createSRQ creates an SRQ and records its wrapper, by which async
// events name it.
func (p *shPD) createSRQ(init *hca.SRQInitAttr) (*shSRQ, error) {
	s, err := p.p.CreateSRQ(init)
	if err != nil {
		return nil, err
	}
	w := &shSRQ{s: s}
	p.dev.mu.Lock()
	p.dev.srqs[s] = w
	p.dev.mu.Unlock()
	return w, nil
}

func (p *shPD) CreateAH(attr verbs.AHAttr) (conformance.AH, error) {
	a, err := p.p.CreateAH(attr)
	if err != nil {
		return nil, err
	}
	return a, nil
}

type shChannel struct {
	ch  *hca.CompChannel
	dev *shDevice
}

func (c *shChannel) GetEvent(ctx context.Context) (conformance.CQ, error) {
	q, err := c.ch.GetEvent(ctx)
	if err != nil {
		return nil, err
	}
	c.dev.mu.Lock()
	defer c.dev.mu.Unlock()
	return c.dev.cqs[q], nil
}
func (c *shChannel) FD() int                { return c.ch.FD() }
func (c *shChannel) SetNonBlocking(nb bool) { c.ch.SetNonBlocking(nb) }
func (c *shChannel) Close() error           { return c.ch.Close() }

type shCQ struct{ q *hca.CQ }

func (c *shCQ) CQE() int                           { return c.q.CQE() }
func (c *shCQ) Context() any                       { return c.q.Context() }
func (c *shCQ) Poll(wcs []verbs.WC) int            { return c.q.Poll(wcs) }
func (c *shCQ) ReqNotify(solicitedOnly bool) error { return c.q.ReqNotify(solicitedOnly) }
func (c *shCQ) AckEvents(n int)                    { c.q.AckEvents(n) }
func (c *shCQ) Resize(cqe int) error               { return c.q.Resize(cqe) }
func (c *shCQ) Destroy(ctx context.Context) error  { return c.q.Destroy(ctx) }

// shSRQ adapts an hca.SRQ, ordinary or tag-matching. Every SRQ takes
// PostOps (conformance.TMSRQ), as ibv_post_srq_ops takes any ibv_srq: an
// ordinary one refuses the operations with EINVAL.
type shSRQ struct{ s *hca.SRQ }

func (s *shSRQ) PostRecv(wr *verbs.RecvWR) (*verbs.RecvWR, error)   { return s.s.PostRecv(wr) }
func (s *shSRQ) Modify(a *verbs.SRQAttr, m verbs.SRQAttrMask) error { return s.s.Modify(a, m) }
func (s *shSRQ) Query() (verbs.SRQAttr, error)                      { return s.s.Query(), nil }
func (s *shSRQ) Destroy(ctx context.Context) error                  { return s.s.Destroy(ctx) }
func (s *shSRQ) PostOps(wr *verbs.OpsWR) (*verbs.OpsWR, error)      { return s.s.PostOps(wr) }

type shQP struct{ q *hca.QP }

func (q *shQP) Num() uint32 { return q.q.Num() }
func (q *shQP) Query(verbs.QPAttrMask) (verbs.QPAttr, error) {
	return q.q.Query(), nil
}
func (q *shQP) Modify(a *verbs.QPAttr, m verbs.QPAttrMask) error { return q.q.Modify(a, m) }
func (q *shQP) PostSend(wr *verbs.SendWR) (*verbs.SendWR, error) { return q.q.PostSend(wr) }
func (q *shQP) PostRecv(wr *verbs.RecvWR) (*verbs.RecvWR, error) { return q.q.PostRecv(wr) }
func (q *shQP) AttachMcast(g verbs.GID, lid uint16) error        { return q.q.AttachMcast(g, lid) }
func (q *shQP) DetachMcast(g verbs.GID, lid uint16) error        { return q.q.DetachMcast(g, lid) }
func (q *shQP) Destroy(ctx context.Context) error                { return q.q.Destroy(ctx) }
