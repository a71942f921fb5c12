package hca

import (
	"syscall"
	"unsafe"

	"github.com/softhca/softhca/mr"
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
	if err := d.roomLocked("alloc_pd", len(d.pds), d.cfg.Attr.MaxPD, "PDs"); err != nil {
		return nil, err
	}
	p := &PD{dev: d, handle: d.nextPD}
	d.nextPD++
	d.pds[p.handle] = p
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
	delete(d.pds, p.handle)
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
	anyAddr := p.dev.cfg.InlineFromAnyAddress
	return func(s verbs.SGE) ([]byte, error) {
		if s.Length == 0 {
			return nil, nil
		}
		if anyAddr {
			if s.Addr == 0 {
				return nil, mrError(s, mr.BadBounds)
			}
			// The caller's memory, as libibverbs reads it: the C ABI
			// hands its application's addresses here, never Go's.
			a := uintptr(s.Addr)
			return unsafe.Slice(*(**byte)(unsafe.Pointer(&a)), s.Length), nil
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
	if err := d.roomLocked(op, d.ahs, d.cfg.Attr.MaxAH, "address handles"); err != nil {
		return nil, err
	}
	d.ahs++
	p.refs++
	return &AH{attr: attr, pd: p}, nil
}
