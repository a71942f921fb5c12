// Package mr holds memory regions: registration with access flags, the
// key table, and Lookup, the only way the transport touches registered
// memory (with key, protection domain, bounds and access checks).
//
// # Addresses and keys
//
// A region's virtual address is the address of its first byte in this
// process, as with libibverbs (ibv_mr.addr): work requests and remote peers
// name memory by address and key, and Lookup turns them back into a slice
// of the registered buffer. Go's garbage collector does not move heap
// objects, and the MR keeps its buffer alive. As in rxe, a region's L_Key
// and R_Key are equal; unlike rxe's index-plus-8-bits keys they are 32
// random bits, so a peer cannot guess them.
//
// # Threading
//
// Register and Deregister serialise on the table's mutex and publish a new
// copy of the key map; Lookup reads the current map without locking, so the
// data path never waits for a registration.
package mr

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/softhca/softhca/verbs"
)

// MR is a registered memory region (ibv_mr).
type MR struct {
	buf    []byte
	addr   uint64
	key    uint32
	access verbs.AccessFlags
	pd     uint32
	valid  atomic.Bool
}

// Addr returns the region's virtual address (ibv_mr.addr).
func (m *MR) Addr() uint64 { return m.addr }

// Len returns the region's length (ibv_mr.length).
func (m *MR) Len() int { return len(m.buf) }

// LKey returns the local key (ibv_mr.lkey).
func (m *MR) LKey() uint32 { return m.key }

// RKey returns the remote key (ibv_mr.rkey); equal to LKey, as in rxe.
func (m *MR) RKey() uint32 { return m.key }

// Access returns the access flags the region was registered with.
func (m *MR) Access() verbs.AccessFlags { return m.access }

// PD returns the handle of the protection domain the region belongs to.
func (m *MR) PD() uint32 { return m.pd }

// Bytes returns the registered buffer.
func (m *MR) Bytes() []byte { return m.buf }

// SGE returns a scatter/gather element for n bytes at offset off of the
// region.
func (m *MR) SGE(off, n int) verbs.SGE {
	return verbs.SGE{Addr: m.addr + uint64(off), Length: uint32(n), LKey: m.key}
}

// Status is the outcome of a Lookup.
type Status uint8

// Lookup outcomes.
const (
	OK        Status = iota
	BadKey           // no region has this key (or it was deregistered)
	BadPD            // the region belongs to another protection domain
	BadBounds        // the range is not inside the region
	BadAccess        // the region lacks a needed access right
)

var statusNames = [...]string{"ok", "invalid key", "protection domain mismatch", "out of bounds", "access denied"}

// String names the status.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "mr.Status(?)"
}

// knownAccess is every access flag softhca understands.
const knownAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead |
	verbs.AccessRemoteAtomic | verbs.AccessMWBind | verbs.AccessRelaxedOrder

// Table is a device's memory regions by key.
type Table struct {
	maxMR   int
	maxSize uint64

	mu    sync.Mutex
	count int // protected by mu
	keys  atomic.Pointer[map[uint32]*MR]
}

// NewTable returns an empty table that holds up to maxMR regions of up to
// maxSize bytes each.
func NewTable(maxMR int, maxSize uint64) *Table {
	t := &Table{maxMR: maxMR, maxSize: maxSize}
	m := map[uint32]*MR{}
	t.keys.Store(&m)
	return t
}

// Register registers buf for protection domain pd (ibv_reg_mr). Errors:
// EINVAL for an empty buffer, a buffer above the device's max_mr_size,
// unknown access bits, or REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE
// (ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC
// is set, then IBV_ACCESS_LOCAL_WRITE must be set too"); EOPNOTSUPP for
// on-demand paging; ENOMEM when the device holds max_mr regions.
func (t *Table) Register(pd uint32, buf []byte, access verbs.AccessFlags) (*MR, error) {
	const op = "reg_mr"
	switch {
	case len(buf) == 0:
		return nil, verbs.Errorf(op, syscall.EINVAL, "empty buffer")
	case uint64(len(buf)) > t.maxSize:
		return nil, verbs.Errorf(op, syscall.EINVAL, "length %d exceeds max_mr_size %d", len(buf), t.maxSize)
	case access&verbs.AccessOnDemand != 0:
		return nil, verbs.Errorf(op, syscall.EOPNOTSUPP, "on-demand paging is not supported")
	case access&^knownAccess != 0:
		return nil, verbs.Errorf(op, syscall.EINVAL, "unknown access flags %#x", uint32(access&^knownAccess))
	case access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0:
		return nil, verbs.Errorf(op, syscall.EINVAL, "REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.count >= t.maxMR {
		return nil, verbs.Errorf(op, syscall.ENOMEM, "device holds max_mr (%d) regions", t.maxMR)
	}
	old := *t.keys.Load()
	m := &MR{
		buf:    buf,
		addr:   uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))),
		access: access,
		pd:     pd,
	}
	m.key = newKey(old)
	m.valid.Store(true)
	next := make(map[uint32]*MR, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[m.key] = m
	t.keys.Store(&next)
	t.count++
	return m, nil
}

// newKey returns a random key that is non-zero and not in use.
func newKey(used map[uint32]*MR) uint32 {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic("mr: crypto/rand failed: " + err.Error())
		}
		k := binary.LittleEndian.Uint32(b[:])
		if _, taken := used[k]; k != 0 && !taken {
			return k
		}
	}
}

// Deregister removes the region (ibv_dereg_mr). Deregistering a region
// twice, or one from another table, is EINVAL.
func (t *Table) Deregister(m *MR) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.keys.Load()
	if old[m.key] != m || !m.valid.Load() {
		return verbs.Errorf("dereg_mr", syscall.EINVAL, "memory region %#x is not registered", m.key)
	}
	next := make(map[uint32]*MR, len(old))
	for k, v := range old {
		if k != m.key {
			next[k] = v
		}
	}
	m.valid.Store(false)
	t.keys.Store(&next)
	t.count--
	return nil
}

// Count returns how many regions are registered.
func (t *Table) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.count
}

// Get returns the region with the key, or nil.
func (t *Table) Get(key uint32) *MR { return (*t.keys.Load())[key] }

// Lookup returns the n bytes at virtual address va of the region whose key
// is key, checking that the region belongs to protection domain pd, that
// the range lies inside it, and that it grants every right in need (0 for
// a local read). On any failure the slice is nil and the Status says why.
func (t *Table) Lookup(key, pd uint32, va uint64, n uint32, need verbs.AccessFlags) ([]byte, Status) {
	m := (*t.keys.Load())[key]
	if m == nil || !m.valid.Load() {
		return nil, BadKey
	}
	if m.pd != pd {
		return nil, BadPD
	}
	off := va - m.addr
	if va < m.addr || off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, BadBounds
	}
	if m.access&need != need {
		return nil, BadAccess
	}
	return m.buf[off : off+uint64(n) : off+uint64(n)], OK
}

// FindByAddr returns the n bytes at virtual address va inside any region
// of protection domain pd, whatever its key, or nil. It walks every
// region, so it is for inline data at post time, not for the data path.
func (t *Table) FindByAddr(pd uint32, va uint64, n uint32) []byte {
	for _, m := range *t.keys.Load() {
		if m.pd != pd || !m.valid.Load() {
			continue
		}
		off := va - m.addr
		if va >= m.addr && off <= uint64(len(m.buf)) && uint64(n) <= uint64(len(m.buf))-off {
			return m.buf[off : off+uint64(n) : off+uint64(n)]
		}
	}
	return nil
}
