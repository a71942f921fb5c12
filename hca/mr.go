package hca

import (
	"github.com/softhca/softhca/mr"
	"github.com/softhca/softhca/verbs"
)

// MR is a registered memory region (ibv_mr), created by PD.RegMR. Work
// requests name its memory with SGE; a peer names it with Addr and RKey.
type MR struct {
	mr *mr.MR
	pd *PD
}

// RegMR registers buf with the given access flags (ibv_reg_mr). The
// region's address (Addr) is buf's address in this process, as with
// libibverbs, and the region keeps buf alive. Errors: EINVAL for an empty
// buffer, one above max_mr_size, unknown access flags, or REMOTE_WRITE or
// REMOTE_ATOMIC without LOCAL_WRITE (ibv_reg_mr(3)), or a deallocated PD;
// EOPNOTSUPP for IBV_ACCESS_ON_DEMAND; ENOMEM when the device holds
// max_mr regions.
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
	return &MR{mr: m, pd: p}, nil
}

// Addr returns the region's virtual address (ibv_mr.addr): the address of
// the registered buffer's first byte in this process.
func (m *MR) Addr() uint64 { return m.mr.Addr() }

// Len returns the region's length in bytes (ibv_mr.length).
func (m *MR) Len() int { return m.mr.Len() }

// LKey returns the local key (ibv_mr.lkey), which scatter/gather elements
// name.
func (m *MR) LKey() uint32 { return m.mr.LKey() }

// RKey returns the remote key (ibv_mr.rkey), which a peer names in RDMA
// and atomic requests; equal to LKey, as in rxe.
func (m *MR) RKey() uint32 { return m.mr.RKey() }

// Access returns the access flags the region was registered with.
func (m *MR) Access() verbs.AccessFlags { return m.mr.Access() }

// PD returns the protection domain the region belongs to (ibv_mr.pd).
func (m *MR) PD() *PD { return m.pd }

// Bytes returns the registered buffer.
func (m *MR) Bytes() []byte { return m.mr.Bytes() }

// SGE returns a scatter/gather element (struct ibv_sge) for n bytes at
// offset off of the region: address Addr()+off, length n, the region's
// L_Key. It checks nothing; a post checks the element.
func (m *MR) SGE(off, n int) verbs.SGE { return m.mr.SGE(off, n) }

// Dereg deregisters the region (ibv_dereg_mr); EINVAL when it is already
// deregistered. When it returns, no packet reads or writes the region any
// more: the transport's lookups of its keys fail from the moment it is
// deregistered, and Dereg waits for those that succeeded before to finish
// with the memory. A request that needs the region afterwards fails as
// IBTA says (a remote access error NAK for a peer's READ, WRITE or ATOMIC;
// a local protection error for a send gathering from it).
func (m *MR) Dereg() error {
	d := m.pd.dev
	d.mu.Lock()
	if err := d.mrs.Deregister(m.mr); err != nil {
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
