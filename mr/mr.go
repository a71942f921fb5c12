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
// Register and Deregister serialise on the table's lock and cost O(1)
// amortised for the key table plus O(log n) expected for the address index
// of the region's protection domain. Lookup and Get take no lock, write no
// shared memory and allocate nothing: the key table is a hash table of
// atomic pointers (keys.go), so the data path never waits for a
// registration. Once Deregister has returned, neither Lookup nor Get
// resolves the region's key to it (a later region may draw the same key).
// FindByAddr searches the per-PD address index (addrs.go) under the read
// lock, in O(log n) expected.
package mr

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"slices"
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
	valid  atomic.Bool // from Register until Deregister
	idx    treeNode    // place in the PD's address tree; protected by Table.mu
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

// Table is a device's memory regions by key, and by address within each
// protection domain.
type Table struct {
	maxMR   int
	maxSize uint64
	randKey func() uint32 // the source of keys; tests replace it

	// mu serialises Register and Deregister (write lock) and guards the
	// address trees for FindByAddr (read lock). Lookup and Get do not
	// take it.
	mu sync.RWMutex
	// keys is written under mu and read without it.
	keys keyTable
	// byPD holds the root of each protection domain's address tree, for
	// the PDs that have regions. Protected by mu.
	byPD map[uint32]*MR
}

// NewTable returns an empty table that holds up to maxMR regions of up to
// maxSize bytes each.
func NewTable(maxMR int, maxSize uint64) *Table {
	t := &Table{maxMR: maxMR, maxSize: maxSize, randKey: cryptoKey, byPD: map[uint32]*MR{}}
	t.keys.init()
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
	m := &MR{
		buf:    buf,
		addr:   uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))),
		access: access,
		pd:     pd,
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys.live >= t.maxMR {
		return nil, verbs.Errorf(op, syscall.ENOMEM, "device holds max_mr (%d) regions", t.maxMR)
	}
	m.key = t.newKeyLocked()
	m.valid.Store(true)
	t.keys.insert(m)
	t.byPD[pd] = treeInsert(t.byPD[pd], m)
	return m, nil
}

// newKeyLocked returns a random key that is non-zero and not in use.
//
// Preconditions: t.mu is held for writing.
func (t *Table) newKeyLocked() uint32 {
	for {
		if k := t.randKey(); k != 0 && t.keys.get(k) == nil {
			return k
		}
	}
}

// cryptoKey returns 32 random bits from crypto/rand.
func cryptoKey() uint32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("mr: crypto/rand failed: " + err.Error())
	}
	return binary.LittleEndian.Uint32(b[:])
}

// Deregister removes the region (ibv_dereg_mr). Deregistering a region
// twice, or one from another table, is EINVAL. Once it has returned,
// Lookup and Get no longer find the region by its key, nor FindByAddr by
// its addresses.
func (t *Table) Deregister(m *MR) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.keys.remove(m) {
		return verbs.Errorf("dereg_mr", syscall.EINVAL, "memory region %#x is not registered", m.key)
	}
	m.valid.Store(false)
	if root := treeRemove(t.byPD[m.pd], m); root != nil {
		t.byPD[m.pd] = root
	} else {
		delete(t.byPD, m.pd)
	}
	return nil
}

// Count returns how many regions are registered.
func (t *Table) Count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.keys.live
}

// Regions returns the registered regions, ordered by protection domain
// and then by address (for inspection: rdma resource show mr).
func (t *Table) Regions() []*MR {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]*MR, 0, t.keys.live)
	slots := t.keys.arr.Load().slots
	for i := range slots {
		if m := slots[i].Load(); m != nil && m != tombstone {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *MR) int {
		if a.pd != b.pd {
			return cmp.Compare(a.pd, b.pd)
		}
		if a.addr != b.addr {
			return cmp.Compare(a.addr, b.addr)
		}
		return cmp.Compare(a.key, b.key)
	})
	return out
}

// Get returns the region with the key, or nil. It takes no lock.
func (t *Table) Get(key uint32) *MR { return t.keys.get(key) }

// Lookup returns the n bytes at virtual address va of the region whose key
// is key, checking that the region belongs to protection domain pd, that
// the range lies inside it, and that it grants every right in need (0 for
// a local read). On any failure the slice is nil and the Status says why.
// It takes no lock and does not allocate.
func (t *Table) Lookup(key, pd uint32, va uint64, n uint32, need verbs.AccessFlags) ([]byte, Status) {
	m := t.keys.get(key)
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
// of protection domain pd that holds all of them, whatever its key, or nil.
// It takes the table's read lock and costs O(log n) expected for n regions
// in the PD; it is for inline data at post time, not for the data path.
func (t *Table) FindByAddr(pd uint32, va uint64, n uint32) []byte {
	want := va + uint64(n)
	if want < va {
		return nil // the range wraps around the address space
	}
	t.mu.RLock()
	m := treeFind(t.byPD[pd], va, want)
	t.mu.RUnlock()
	if m == nil {
		return nil
	}
	off := va - m.addr
	return m.buf[off : off+uint64(n) : off+uint64(n)]
}
