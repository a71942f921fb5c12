package rdma

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/conformance"
	"github.com/softhca/softhca/verbs"
)

// The backend's abilities, checked at compile time: a renamed method
// would otherwise make the cases that need it skip silently.
var (
	_ conformance.PairTarget          = (*Target)(nil)
	_ conformance.AddrTarget          = (*AddrTarget)(nil)
	_ conformance.PairTarget          = (*AddrTarget)(nil)
	_ conformance.TransportDiagnoser  = (*device)(nil)
	_ conformance.ImplementationNamer = (*Target)(nil)
	_ conformance.DestroyOrderer      = (*device)(nil)
	_ conformance.TMPD                = (*pd)(nil)
	_ conformance.TMSRQ               = (*srq)(nil)
)

// Target opens devices that libibverbs drives, each through its own
// agent process.
type Target struct {
	// Device is the libibverbs device name ("rxe0", "softhca0").
	Device string
	// Agent is the path of a prebuilt shca-verbs-agent; empty builds
	// the embedded agent.c (BuildAgent).
	Agent string
	// Env is added to the environment of the agent Open starts.
	Env []string
	// PairEnv is added to the environments of the two agents OpenPair
	// starts (with softhca's drop-in library, each its own
	// SOFTHCA_ADDR; with rxe, nothing: both open the same device and
	// reach each other through it).
	PairEnv [2][]string
	// Impl names the implementation behind the device, the name cases
	// declare deviations under (conformance.ImplRxe, ...); empty takes
	// the device name without its index ("rxe0" is "rxe", "mlx5_0"
	// "mlx5").
	Impl string
}

// Name returns "rdma:DEVICE".
func (t *Target) Name() string { return "rdma:" + t.Device }

// Implementation returns Impl, or the implementation the device's name
// says (conformance.ImplementationNamer).
func (t *Target) Implementation() string {
	if t.Impl != "" {
		return t.Impl
	}
	return strings.TrimSuffix(strings.TrimRight(t.Device, "0123456789"), "_")
}

func (t *Target) agentPath() (string, error) {
	if t.Agent != "" {
		return t.Agent, nil
	}
	return BuildAgent()
}

// Open starts an agent on the device.
func (t *Target) Open() (conformance.Device, error) {
	path, err := t.agentPath()
	if err != nil {
		return nil, err
	}
	return openDevice(path, t.Device, t.Env)
}

// OpenPair starts two agents, with PairEnv[0] and PairEnv[1], on the
// device (conformance.PairTarget).
func (t *Target) OpenPair() (conformance.Device, conformance.Device, error) {
	path, err := t.agentPath()
	if err != nil {
		return nil, nil, err
	}
	a, err := openDevice(path, t.Device, t.PairEnv[0])
	if err != nil {
		return nil, nil, err
	}
	b, err := openDevice(path, t.Device, t.PairEnv[1])
	if err != nil {
		_ = a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// AddrTarget is a Target whose devices' port 1 has known IP addresses
// (conformance.AddrTarget), such as softhca's drop-in library, whose
// address the environment sets.
type AddrTarget struct {
	Target
	// Addrs are the addresses of the device Open opens, in GID order.
	Addrs []netip.Addr
}

// PortAddrs returns Addrs.
func (t *AddrTarget) PortAddrs() []netip.Addr { return t.Addrs }

// DropIn returns a target for softhca's drop-in libibverbs.so.1 in
// libDir (LD_LIBRARY_PATH): the device is named device (SOFTHCA_DEVICE),
// on 127.0.0.3 for Open and on 127.0.0.1 and 127.0.0.2 for OpenPair, all
// on UDP port 4791 (SOFTHCA_ADDR). agent is Target.Agent.
func DropIn(device, libDir, agent string) *AddrTarget {
	return DropInAt(device, libDir, agent, [3]netip.Addr{
		netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")})
}

// DropInAt is DropIn with the addresses of Open's device and of the
// pair's.
func DropInAt(device, libDir, agent string, addrs [3]netip.Addr) *AddrTarget {
	env := func(a netip.Addr) []string {
		return []string{"LD_LIBRARY_PATH=" + libDir, "SOFTHCA_ADDR=" + a.String(), "SOFTHCA_DEVICE=" + device}
	}
	return &AddrTarget{
		Target: Target{Device: device, Agent: agent, Env: env(addrs[0]),
			PairEnv: [2][]string{env(addrs[1]), env(addrs[2])}, Impl: conformance.ImplSofthcaLib},
		Addrs: []netip.Addr{addrs[0]},
	}
}

// device is an open device: one agent. Its maps turn the handles events
// name back into the objects the case holds.
type device struct {
	ag      *agent
	asyncFD int // the runner's copy of the context's async_fd

	// fdMu orders the fds' uses (waits hold it shared) with Close, which
	// closes them; closeFD (an eventfd) wakes the waits first.
	fdMu    sync.RWMutex
	closeFD int
	closed  bool

	mu      sync.Mutex
	attr    *verbs.DeviceAttr
	asyncNB bool
	cqs     map[uint32]*cq
	qps     map[uint32]*qp
	srqs    map[uint32]*srq
	chans   []*channel
	maps    [][]byte // MR memory, unmapped by Close
}

func openDevice(path, name string, env []string) (*device, error) {
	ag, afd, err := startAgent(path, name, env)
	if err != nil {
		return nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(afd)
		_ = ag.close()
		return nil, fmt.Errorf("rdma: eventfd: %w", err)
	}
	return &device{ag: ag, asyncFD: afd, closeFD: efd,
		cqs: map[uint32]*cq{}, qps: map[uint32]*qp{}, srqs: map[uint32]*srq{}}, nil
}

// rpc makes one call. A verb's failure is a *verbs.Error wrapping its
// errno, returned with the body (a post's refused index comes with it);
// a failed exchange returns a nil body.
func (d *device) rpc(e *encoder, fdIn int) (*decoder, int, error) {
	errno, body, fd, err := d.ag.call(e, fdIn)
	if err != nil {
		return nil, -1, err
	}
	if errno != 0 {
		op := uint32(e.b[0]) | uint32(e.b[1])<<8
		return body, fd, verbs.Errorf(opName(op), errno, "%s (%s through the verbs agent)", errno.Error(), d.ag.device)
	}
	return body, fd, nil
}

// call is rpc for a request without fds, whose body must decode.
func (d *device) call(e *encoder, decode func(*decoder)) error {
	body, fd, err := d.rpc(e, -1)
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil {
		return err
	}
	if decode != nil {
		decode(body)
	}
	return body.err
}

func (d *device) QueryDevice() verbs.DeviceAttr {
	d.mu.Lock()
	if d.attr != nil {
		defer d.mu.Unlock()
		return *d.attr
	}
	d.mu.Unlock()
	var a verbs.DeviceAttr
	if err := d.call(newRequest(opQueryDevice), func(b *decoder) { a = decodeDeviceAttr(b) }); err != nil {
		return verbs.DeviceAttr{}
	}
	d.mu.Lock()
	d.attr = &a
	d.mu.Unlock()
	return a
}

func (d *device) QueryPort(port uint8) (verbs.PortAttr, error) {
	e := newRequest(opQueryPort)
	e.u8(port)
	var a verbs.PortAttr
	err := d.call(e, func(b *decoder) { a = decodePortAttr(b) })
	return a, err
}

func (d *device) QueryGID(port uint8, index int) (verbs.GID, error) {
	e := newRequest(opQueryGID)
	e.u8(port)
	e.i32(clampInt32(index))
	var g verbs.GID
	err := d.call(e, func(b *decoder) { copy(g[:], b.take(16, "gid")) })
	return g, err
}

func (d *device) QueryPKey(port uint8, index int) (uint16, error) {
	e := newRequest(opQueryPKey)
	e.u8(port)
	e.i32(clampInt32(index))
	var k uint16
	err := d.call(e, func(b *decoder) { k = b.u16("pkey") })
	return k, err
}

func clampInt32(v int) int32 {
	switch {
	case v > 1<<31-1:
		return 1<<31 - 1
	case v < -1<<31:
		return -1 << 31
	}
	return int32(v)
}

// TransportDiag says how the agent is (running, or how it ended), for
// the data-path cases' failure messages.
func (d *device) TransportDiag() string { return d.ag.status() }

func (d *device) AllocPD() (conformance.PD, error) {
	var h uint32
	if err := d.call(newRequest(opAllocPD), func(b *decoder) { h = b.u32("pd handle") }); err != nil {
		return nil, err
	}
	return &pd{d: d, h: h}, nil
}

func (d *device) CreateCompChannel() (conformance.CompChannel, error) {
	body, fd, err := d.rpc(newRequest(opCreateChannel), -1)
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, err
	}
	h := body.u32("channel handle")
	if body.err == nil && fd < 0 {
		body.fail("no channel fd")
	}
	if body.err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, body.err
	}
	c := &channel{d: d, h: h, fd: fd}
	d.mu.Lock()
	d.chans = append(d.chans, c)
	d.mu.Unlock()
	return c, nil
}

func (d *device) CreateCQ(cqe int, ch conformance.CompChannel, ctx any, vec int) (conformance.CQ, error) {
	e := newRequest(opCreateCQ)
	e.i32(clampInt32(cqe))
	var chh uint32
	if c, ok := ch.(*channel); ok && c != nil && c.d == d {
		chh = c.h
	}
	e.u32(chh)
	e.i32(clampInt32(vec))
	q := &cq{d: d, ctx: ctx}
	q.acks.init()
	var n int32
	if err := d.call(e, func(b *decoder) { q.h = b.u32("cq handle"); n = b.i32("cqe") }); err != nil {
		return nil, err
	}
	q.cqe = int(n)
	d.mu.Lock()
	d.cqs[q.h] = q
	d.mu.Unlock()
	return q, nil
}

// GetAsyncEvent takes an event from the device's queue: in blocking mode
// it waits (in the runner) for the async fd to become readable, then
// asks the agent, which never blocks.
func (d *device) GetAsyncEvent(ctx context.Context) (conformance.AsyncEvent, error) {
	for {
		d.mu.Lock()
		nb := d.asyncNB
		d.mu.Unlock()
		if !nb {
			if err := d.waitReadable(ctx, d.asyncFD); err != nil {
				return conformance.AsyncEvent{}, fmt.Errorf("get_async_event: %w", err)
			}
		}
		var r asyncRecord
		err := d.call(newRequest(opGetAsyncEvent), func(b *decoder) { r = decodeAsync(b) })
		if err != nil {
			if !nb && errors.Is(err, syscall.EAGAIN) {
				continue // another waiter took it
			}
			return conformance.AsyncEvent{}, err
		}
		e := conformance.AsyncEvent{Type: verbs.EventType(r.Type), Port: r.Port}
		d.mu.Lock()
		switch r.Kind {
		case evCQ:
			if q := d.cqs[r.Handle]; q != nil {
				q.acks.add(1)
				e.CQ = q
			}
		case evQP:
			if q := d.qps[r.Handle]; q != nil {
				q.acks.add(1)
				e.QP = q
			}
		case evSRQ:
			if s := d.srqs[r.Handle]; s != nil {
				s.acks.add(1)
				e.SRQ = s
			}
		}
		d.mu.Unlock()
		return e, nil
	}
}

// AckAsyncEvent acknowledges an event for the object it names: the
// agent acknowledged it when it took it; the runner counts.
func (d *device) AckAsyncEvent(e conformance.AsyncEvent) {
	if q, ok := e.CQ.(*cq); ok && q != nil {
		q.acks.ack(1)
	}
	if q, ok := e.QP.(*qp); ok && q != nil {
		q.acks.ack(1)
	}
	if s, ok := e.SRQ.(*srq); ok && s != nil {
		s.acks.ack(1)
	}
}

func (d *device) SetAsyncNonBlocking(nb bool) {
	d.mu.Lock()
	d.asyncNB = nb
	d.mu.Unlock()
}

// Close ends the agent (which releases every object it made) and then
// releases the runner's copies of fds and MR memory: Bytes() of the
// device's MRs must not be used after Close.
// DestroysBeforeWaiting reports true: the agent calls the destroy verb,
// which in libibverbs destroys the object and then waits for the
// acknowledgement of its events (conformance.DestroyOrderer).
func (d *device) DestroysBeforeWaiting() bool { return true }

func (d *device) Close() error {
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(d.closeFD, one[:])
	d.fdMu.Lock()
	if d.closed {
		d.fdMu.Unlock()
		return nil
	}
	d.closed = true
	err := d.ag.close()
	unix.Close(d.asyncFD)
	d.mu.Lock()
	for _, c := range d.chans {
		c.closeFD()
	}
	for _, m := range d.maps {
		_ = unix.Munmap(m)
	}
	d.maps = nil
	d.mu.Unlock()
	unix.Close(d.closeFD)
	d.fdMu.Unlock()
	return err
}

// waitReadable waits until fd is readable, ctx ends, the device closes
// or the agent exits. The socket is polled for no event: poll reports
// its hang-up when the agent is gone.
func (d *device) waitReadable(ctx context.Context, fd int) error {
	d.fdMu.RLock()
	defer d.fdMu.RUnlock()
	if d.closed || fd < 0 {
		return fmt.Errorf("%w: the device or channel is closed", syscall.EBADF)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return err
	}
	var mu sync.Mutex // orders the wake-up's write with the close below
	done := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			var one [8]byte
			one[0] = 1
			_, _ = unix.Write(wake, one[:])
		}
	})
	defer func() {
		stop()
		mu.Lock()
		done = true
		unix.Close(wake)
		mu.Unlock()
	}()
	fds := []unix.PollFd{
		{Fd: int32(fd), Events: unix.POLLIN},
		{Fd: int32(wake), Events: unix.POLLIN},
		{Fd: int32(d.closeFD), Events: unix.POLLIN},
		{Fd: int32(d.ag.sock)},
	}
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return err
		}
		switch {
		case fds[0].Revents != 0:
			return nil // readable (or in error: the agent's call says which)
		case fds[1].Revents != 0:
			return ctx.Err()
		case fds[2].Revents != 0:
			return fmt.Errorf("%w: the device was closed", syscall.EBADF)
		case fds[3].Revents != 0:
			return d.ag.gone(opGetCQEvent)
		}
	}
}

// acks counts the events taken for an object and not acknowledged yet;
// zero is closed exactly while the count is 0.
type acks struct {
	mu   sync.Mutex
	n    int
	zero chan struct{}
}

func (a *acks) init() {
	a.zero = make(chan struct{})
	close(a.zero)
}

func (a *acks) add(k int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == 0 {
		a.zero = make(chan struct{})
	}
	a.n += k
}

func (a *acks) ack(k int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == 0 || k <= 0 {
		return
	}
	a.n -= min(k, a.n)
	if a.n == 0 {
		close(a.zero)
	}
}

// wait returns when every event taken is acknowledged or ctx ends.
func (a *acks) wait(ctx context.Context) error {
	a.mu.Lock()
	z, n := a.zero, a.n
	a.mu.Unlock()
	select {
	case <-z:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d events not acknowledged: %w", n, ctx.Err())
	}
}

// destroyer is the state of an object whose ibv_destroy_* waits for its
// events' acknowledgements. As libibverbs does, the object is destroyed
// first (a busy object fails at once) and the wait comes after; a wait
// the context ends is resumed by the next Destroy.
type destroyer struct {
	mu      sync.Mutex
	waiting bool // destroyed in the agent, acknowledgements outstanding
}

// destroy runs the agent's destroy (unless one already succeeded and
// its wait was interrupted) and waits for a's count to reach zero.
func (s *destroyer) destroy(ctx context.Context, verb string, a *acks, agentDestroy func() error) error {
	s.mu.Lock()
	waiting := s.waiting
	s.mu.Unlock()
	if !waiting {
		if err := agentDestroy(); err != nil {
			return err
		}
		s.mu.Lock()
		s.waiting = true
		s.mu.Unlock()
	}
	if err := a.wait(ctx); err != nil {
		return fmt.Errorf("%s: destroyed; waiting for the acknowledgements: %w", verb, err)
	}
	s.mu.Lock()
	s.waiting = false
	s.mu.Unlock()
	return nil
}

func destroyReq(op, h uint32) *encoder {
	e := newRequest(op)
	e.u32(h)
	return e
}

// pd is a protection domain.
type pd struct {
	d *device
	h uint32
}

func (p *pd) Dealloc() error { return p.d.call(destroyReq(opDeallocPD, p.h), nil) }

// RegMR registers a copy of buf: the memory is a memfd mapped shared by
// the runner and the agent, which registers its mapping; Bytes() is the
// runner's. The copy keeps buf's offset in its page. A nil or empty buf
// is registered as ibv_reg_mr would be given it (NULL, or a valid
// address, with length 0).
func (p *pd) RegMR(buf []byte, access verbs.AccessFlags) (conformance.MR, error) {
	e := newRequest(opRegMR)
	e.u32(p.h)
	e.u32(uint32(access))
	e.u64(uint64(len(buf)))
	var mem []byte
	fd := -1
	off := 0
	switch {
	case buf == nil:
		e.u32(0)
		e.u8(mrNil)
	case len(buf) == 0:
		e.u32(0)
		e.u8(mrEmpty)
	default:
		page := os.Getpagesize()
		off = int(uintptr(unsafe.Pointer(&buf[0])) % uintptr(page))
		size := (off + len(buf) + page - 1) / page * page
		var err error
		fd, err = unix.MemfdCreate("shca-mr", unix.MFD_CLOEXEC)
		if err != nil {
			return nil, verbs.Errorf("reg_mr", syscall.ENOMEM, "memfd_create: %v", err)
		}
		defer unix.Close(fd)
		if err := unix.Ftruncate(fd, int64(size)); err != nil {
			return nil, verbs.Errorf("reg_mr", syscall.ENOMEM, "ftruncate of the memfd to %d bytes: %v", size, err)
		}
		mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return nil, verbs.Errorf("reg_mr", syscall.ENOMEM, "mmap of the memfd: %v", err)
		}
		copy(mem[off:], buf)
		e.u32(uint32(off))
		e.u8(mrMemfd)
	}
	var r mrRecord
	body, rfd, err := p.d.rpc(e, fd)
	if rfd >= 0 {
		unix.Close(rfd)
	}
	if err == nil {
		r = decodeMR(body)
		err = body.err
	}
	if err != nil {
		if mem != nil {
			_ = unix.Munmap(mem)
		}
		return nil, err
	}
	m := &mr{d: p.d, h: r.Handle, addr: r.Addr, lkey: r.LKey, rkey: r.RKey, length: int(r.Length), mem: buf}
	if mem != nil {
		m.mem = mem[off : off+len(buf) : off+len(buf)]
		p.d.mu.Lock()
		p.d.maps = append(p.d.maps, mem)
		p.d.mu.Unlock()
	}
	return m, nil
}

func (p *pd) CreateQP(init *conformance.QPInitAttr) (conformance.QP, error) {
	e := newRequest(opCreateQP)
	e.u32(p.h)
	e.u32(p.d.cqHandle(init.SendCQ))
	e.u32(p.d.cqHandle(init.RecvCQ))
	var sh uint32
	if s, ok := init.SRQ.(*srq); ok && s != nil && s.d == p.d {
		sh = s.h
	}
	e.u32(sh)
	c := init.Cap
	encodeCap(e, &c)
	e.u8(uint8(init.QPType))
	e.bool(init.SQSigAll)
	q := &qp{d: p.d, ctx: init.Context, typ: init.QPType}
	q.acks.init()
	if err := p.d.call(e, func(b *decoder) {
		q.h = b.u32("qp handle")
		q.num = b.u32("qp_num")
		q.cap = decodeCap(b)
	}); err != nil {
		return nil, err
	}
	p.d.mu.Lock()
	p.d.qps[q.h] = q
	p.d.mu.Unlock()
	return q, nil
}

// cqHandle returns the agent's handle of a CQ of this device, or 0 (NULL)
// for none or another device's.
func (d *device) cqHandle(c conformance.CQ) uint32 {
	if q, ok := c.(*cq); ok && q != nil && q.d == d {
		return q.h
	}
	return 0
}

func (p *pd) CreateSRQ(attr verbs.SRQAttr, ctx any) (conformance.SRQ, error) {
	s, err := p.createSRQ(attr, false, 0, 0, nil, ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// CreateTMSRQ creates a tag-matching SRQ with ibv_create_srq_ex
// (conformance.TMPD). A cq that is not one of this device's counts as
// none.
func (p *pd) CreateTMSRQ(attr verbs.SRQAttr, maxNumTags, maxOps uint32, c conformance.CQ, ctx any) (conformance.TMSRQ, error) {
	s, err := p.createSRQ(attr, true, maxNumTags, maxOps, c, ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (p *pd) createSRQ(attr verbs.SRQAttr, tm bool, tags, ops uint32, c conformance.CQ, ctx any) (*srq, error) {
	e := newRequest(opCreateSRQ)
	e.u32(p.h)
	e.u32(attr.MaxWR)
	e.u32(attr.MaxSGE)
	e.u32(attr.SRQLimit)
	e.bool(tm)
	e.u32(tags)
	e.u32(ops)
	e.u32(p.d.cqHandle(c))
	s := &srq{d: p.d, ctx: ctx}
	s.acks.init()
	if err := p.d.call(e, func(b *decoder) { s.h = b.u32("srq handle") }); err != nil {
		return nil, err
	}
	p.d.mu.Lock()
	p.d.srqs[s.h] = s
	p.d.mu.Unlock()
	return s, nil
}

func (p *pd) CreateAH(attr verbs.AHAttr) (conformance.AH, error) {
	e := newRequest(opCreateAH)
	e.u32(p.h)
	encodeAHAttr(e, &attr)
	a := &ah{d: p.d, attr: attr}
	if err := p.d.call(e, func(b *decoder) { a.h = b.u32("ah handle") }); err != nil {
		return nil, err
	}
	return a, nil
}

// mr is a registered memory region: addr is the agent's address of it,
// mem the runner's mapping of the same memory.
type mr struct {
	d          *device
	h          uint32
	addr       uint64
	lkey, rkey uint32
	length     int
	mem        []byte
}

func (m *mr) Addr() uint64  { return m.addr }
func (m *mr) Len() int      { return m.length }
func (m *mr) LKey() uint32  { return m.lkey }
func (m *mr) RKey() uint32  { return m.rkey }
func (m *mr) Bytes() []byte { return m.mem }
func (m *mr) SGE(off, n int) verbs.SGE {
	return verbs.SGE{Addr: m.addr + uint64(off), Length: uint32(n), LKey: m.lkey}
}

// Dereg deregisters the region. The runner's mapping stays until the
// device is closed, so that Bytes() never faults.
func (m *mr) Dereg() error { return m.d.call(destroyReq(opDeregMR, m.h), nil) }

// channel is a completion channel; fd is the runner's copy of its fd
// (the same open file description as the agent's).
type channel struct {
	d  *device
	h  uint32
	mu sync.Mutex
	fd int
	nb bool
}

// GetEvent takes a completion event: in blocking mode it waits (in the
// runner) for the channel's fd to become readable, then asks the agent,
// which never blocks; in non-blocking mode it asks at once, and the
// agent's ibv_get_cq_event fails with EAGAIN when there is none.
func (c *channel) GetEvent(ctx context.Context) (conformance.CQ, error) {
	for {
		c.mu.Lock()
		nb, fd := c.nb, c.fd
		c.mu.Unlock()
		if !nb {
			if err := c.d.waitReadable(ctx, fd); err != nil {
				return nil, fmt.Errorf("get_cq_event: %w", err)
			}
		}
		var h uint32
		err := c.d.call(destroyReq(opGetCQEvent, c.h), func(b *decoder) { h = b.u32("cq handle") })
		if err != nil {
			if !nb && errors.Is(err, syscall.EAGAIN) {
				continue // another waiter took it
			}
			return nil, err
		}
		c.d.mu.Lock()
		q := c.d.cqs[h]
		c.d.mu.Unlock()
		if q == nil {
			return nil, nil
		}
		q.acks.add(1)
		return q, nil
	}
}

func (c *channel) FD() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fd
}

// SetNonBlocking chooses what GetEvent does with no event pending; the
// fd itself stays as the agent keeps it (non-blocking).
func (c *channel) SetNonBlocking(nb bool) {
	c.mu.Lock()
	c.nb = nb
	c.mu.Unlock()
}

func (c *channel) Close() error {
	if err := c.d.call(destroyReq(opDestroyChannel, c.h), nil); err != nil {
		return err
	}
	c.d.fdMu.Lock()
	c.closeFD()
	c.d.fdMu.Unlock()
	return nil
}

func (c *channel) closeFD() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// cq is a completion queue.
type cq struct {
	d    *device
	h    uint32
	ctx  any
	acks acks
	dest destroyer

	mu  sync.Mutex
	cqe int
}

func (q *cq) CQE() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cqe
}

func (q *cq) Context() any { return q.ctx }

// Poll polls up to len(wcs) completions, asking the agent for at most
// maxPoll at a time. A failed call (the agent is gone) polls nothing.
func (q *cq) Poll(wcs []verbs.WC) int {
	got := 0
	for got < len(wcs) {
		n := min(len(wcs)-got, maxPoll)
		e := newRequest(opPollCQ)
		e.u32(q.h)
		e.u32(uint32(n))
		k := 0
		if err := q.d.call(e, func(b *decoder) { k = decodeWCs(b, wcs[got:got+n]) }); err != nil {
			break
		}
		got += k
		if k < n {
			break
		}
	}
	return got
}

func (q *cq) ReqNotify(solicitedOnly bool) error {
	e := newRequest(opReqNotifyCQ)
	e.u32(q.h)
	e.bool(solicitedOnly)
	return q.d.call(e, nil)
}

// AckEvents acknowledges n completion events: the agent acknowledged
// each when it took it; the runner counts, for Destroy.
func (q *cq) AckEvents(n int) { q.acks.ack(n) }

func (q *cq) Resize(cqe int) error {
	e := newRequest(opResizeCQ)
	e.u32(q.h)
	e.i32(clampInt32(cqe))
	var n int32
	if err := q.d.call(e, func(b *decoder) { n = b.i32("cqe") }); err != nil {
		return err
	}
	q.mu.Lock()
	q.cqe = int(n)
	q.mu.Unlock()
	return nil
}

// Destroy destroys the CQ and then waits until its events are
// acknowledged (ibv_destroy_cq's order; see destroyer).
func (q *cq) Destroy(ctx context.Context) error {
	return q.dest.destroy(ctx, "destroy_cq", &q.acks, func() error {
		if err := q.d.call(destroyReq(opDestroyCQ, q.h), nil); err != nil {
			return err
		}
		q.d.mu.Lock()
		delete(q.d.cqs, q.h)
		q.d.mu.Unlock()
		return nil
	})
}

// srq is a shared receive queue, ordinary or tag-matching: every one
// takes PostOps, as ibv_post_srq_ops takes any ibv_srq.
type srq struct {
	d    *device
	h    uint32
	ctx  any
	acks acks
	dest destroyer
}

func (s *srq) PostRecv(wr *verbs.RecvWR) (*verbs.RecvWR, error) {
	e := newRequest(opPostSRQRecv)
	e.u32(s.h)
	list := encodeRecvWRs(e, wr)
	return postResult(s.d, e, list)
}

func (s *srq) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	e := newRequest(opModifySRQ)
	e.u32(s.h)
	e.u32(uint32(mask))
	e.u32(attr.MaxWR)
	e.u32(attr.MaxSGE)
	e.u32(attr.SRQLimit)
	return s.d.call(e, nil)
}

func (s *srq) Query() (verbs.SRQAttr, error) {
	var a verbs.SRQAttr
	err := s.d.call(destroyReq(opQuerySRQ, s.h), func(b *decoder) {
		a = verbs.SRQAttr{MaxWR: b.u32("max_wr"), MaxSGE: b.u32("max_sge"), SRQLimit: b.u32("srq_limit")}
	})
	return a, err
}

func (s *srq) Destroy(ctx context.Context) error {
	return s.dest.destroy(ctx, "destroy_srq", &s.acks, func() error {
		if err := s.d.call(destroyReq(opDestroySRQ, s.h), nil); err != nil {
			return err
		}
		s.d.mu.Lock()
		delete(s.d.srqs, s.h)
		s.d.mu.Unlock()
		return nil
	})
}

// PostOps posts tag-matching list operations; each TAG_ADD's handle is
// written back to its WR.
func (s *srq) PostOps(wr *verbs.OpsWR) (*verbs.OpsWR, error) {
	e := newRequest(opPostSRQOps)
	e.u32(s.h)
	list := encodeOpsWRs(e, wr)
	body, fd, err := s.d.rpc(e, -1)
	if fd >= 0 {
		unix.Close(fd)
	}
	if body == nil {
		return wr, err
	}
	bad := decodeBadIndex(body, len(list))
	var hs []uint32
	if body.off < len(body.b) {
		hs = decodeOpsHandles(body, len(list))
	}
	if body.err != nil {
		return wr, body.err
	}
	for i, h := range hs {
		if list[i].Opcode == verbs.WRTagAdd {
			list[i].TM.Handle = h
		}
	}
	if bad >= 0 {
		return list[bad], err
	}
	return nil, err
}

// postResult makes a post's call and names the WR the agent refused.
func postResult[W any](d *device, e *encoder, list []*W) (*W, error) {
	if len(list) == 0 {
		return nil, nil
	}
	body, fd, err := d.rpc(e, -1)
	if fd >= 0 {
		unix.Close(fd)
	}
	if body == nil {
		return list[0], err
	}
	bad := decodeBadIndex(body, len(list))
	if body.err != nil {
		return list[0], body.err
	}
	if bad >= 0 {
		return list[bad], err
	}
	return nil, err
}

// ah is an address handle; its attributes are kept in the runner (C has
// no query of an AH).
type ah struct {
	d    *device
	h    uint32
	attr verbs.AHAttr
}

func (a *ah) Attr() verbs.AHAttr { return a.attr }
func (a *ah) Destroy() error     { return a.d.call(destroyReq(opDestroyAH, a.h), nil) }

// qp is a queue pair.
type qp struct {
	d    *device
	h    uint32
	num  uint32
	typ  verbs.QPType
	cap  verbs.QPCap
	ctx  any
	acks acks
	dest destroyer
}

func (q *qp) Num() uint32 { return q.num }

func (q *qp) Query(mask verbs.QPAttrMask) (verbs.QPAttr, error) {
	e := newRequest(opQueryQP)
	e.u32(q.h)
	e.u32(uint32(mask))
	var a verbs.QPAttr
	err := q.d.call(e, func(b *decoder) { a = decodeQPAttr(b) })
	return a, err
}

func (q *qp) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	e := newRequest(opModifyQP)
	e.u32(q.h)
	e.u32(uint32(mask))
	encodeQPAttr(e, attr)
	return q.d.call(e, nil)
}

func (q *qp) PostSend(wr *verbs.SendWR) (*verbs.SendWR, error) {
	e := newRequest(opPostSend)
	e.u32(q.h)
	list := encodeSendWRs(e, wr, func(a verbs.AH) uint32 {
		if x, ok := a.(*ah); ok && x != nil && x.d == q.d {
			return x.h
		}
		return 0
	})
	return postResult(q.d, e, list)
}

func (q *qp) PostRecv(wr *verbs.RecvWR) (*verbs.RecvWR, error) {
	e := newRequest(opPostRecv)
	e.u32(q.h)
	list := encodeRecvWRs(e, wr)
	return postResult(q.d, e, list)
}

func (q *qp) mcast(op uint32, g verbs.GID, lid uint16) error {
	e := newRequest(op)
	e.u32(q.h)
	e.bytes(g[:])
	e.u16(lid)
	return q.d.call(e, nil)
}

func (q *qp) AttachMcast(g verbs.GID, lid uint16) error { return q.mcast(opAttachMcast, g, lid) }
func (q *qp) DetachMcast(g verbs.GID, lid uint16) error { return q.mcast(opDetachMcast, g, lid) }

func (q *qp) Destroy(ctx context.Context) error {
	return q.dest.destroy(ctx, "destroy_qp", &q.acks, func() error {
		if err := q.d.call(destroyReq(opDestroyQP, q.h), nil); err != nil {
			return err
		}
		q.d.mu.Lock()
		delete(q.d.qps, q.h)
		q.d.mu.Unlock()
		return nil
	})
}
