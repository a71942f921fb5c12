package mr

import "sync/atomic"

// keyTable maps keys to regions. It is a hash table with open addressing
// and linear probing over a power-of-two array of atomic pointers: readers
// (get) take no lock, never write shared memory and never allocate; writers
// (insert, remove) are serialised by the owner (Table.mu).
//
// Why not sync.Map or a sharded map: BenchmarkKeyIndex (keys_test.go)
// measures all three with 10,000 keys. Medians of 3 on the shared 2-core
// development machine, in ns for keyTable / sync.Map / 64 shards of
// map+RWMutex: a get costs 6 / 35 / 22; with 2 goroutines getting, 7 / 35
// / 26; beside a goroutine churning put+delete, 14 / 62 / 37; a put+delete
// pair, 55 / 142 (2 allocations) / 101. sync.Map boxes the key, hashes an
// interface and walks a trie; an RWMutex reader writes the shared reader
// count, so readers contend with each other and wait behind a writer on
// their shard. The table is small enough to own.
//
// # Invariants
//
// A slot goes nil → region → tombstone → region → tombstone …, and never
// back to nil except in a new array (rebuild). A region never moves inside
// an array. So a reader probing from key&mask to the first nil slot finds
// every region that was present for the whole of its probe: the slots
// before it were non-nil when it was inserted and stay non-nil. At most half
// the slots are used (live or tombstone), so every probe ends at a nil slot,
// and probes are short: keys are uniformly random (crypto/rand), so their
// low bits are a good hash as they are.
//
// When an insert would use more than half the slots, or a removal leaves
// fewer than 1/16 of them live, the live regions are copied into a new
// array of 4 to 8 slots per live region, which is then published; a reader
// still probing the old array sees regions as they were (Lookup also checks
// MR.valid, so a region deregistered meanwhile does not resolve). A
// rebuild costs O(S) for a new array of S slots, and the next one comes
// after at least S/4 insertions (used grows from at most S/4 to S/2) or
// S/16 removals (live falls from at least S/8 to S/16), so insert and
// remove are O(1) amortised.
type keyTable struct {
	arr atomic.Pointer[keyArray]
	// live counts regions; used counts live regions and tombstones. Both
	// are protected by the owner's lock.
	live, used int
}

// keyArray is one generation of slots. len(slots) is a power of two and
// mask is len(slots)-1.
type keyArray struct {
	mask  uint32
	slots []atomic.Pointer[MR]
}

// tombstone fills the slot of a removed region. Its key is 0, which no
// region has, and get never returns it.
var tombstone = new(MR)

// minSlots is the size of the smallest array.
const minSlots = 16

func (k *keyTable) init() { k.arr.Store(newKeyArray(minSlots)) }

func newKeyArray(n int) *keyArray {
	return &keyArray{mask: uint32(n - 1), slots: make([]atomic.Pointer[MR], n)}
}

// get returns the region with the key, or nil. It is safe to call
// concurrently with everything.
func (k *keyTable) get(key uint32) *MR {
	if key == 0 {
		return nil // the tombstone's key
	}
	a := k.arr.Load()
	for i := key & a.mask; ; i = (i + 1) & a.mask {
		m := a.slots[i].Load()
		if m == nil || m.key == key {
			return m
		}
	}
}

// insert adds m, whose key is non-zero and not in the table.
//
// Preconditions: the owner's lock is held.
func (k *keyTable) insert(m *MR) {
	a := k.arr.Load()
	if 2*(k.used+1) > len(a.slots) {
		a = k.rebuild(k.live + 1)
	}
	for i := m.key & a.mask; ; i = (i + 1) & a.mask {
		switch a.slots[i].Load() {
		case nil:
			k.used++
			fallthrough
		case tombstone:
			a.slots[i].Store(m)
			k.live++
			return
		}
	}
}

// remove removes m and reports whether it was in the table.
//
// Preconditions: the owner's lock is held.
func (k *keyTable) remove(m *MR) bool {
	if m.key == 0 {
		return false
	}
	a := k.arr.Load()
	for i := m.key & a.mask; ; i = (i + 1) & a.mask {
		switch a.slots[i].Load() {
		case nil:
			return false
		case m:
			a.slots[i].Store(tombstone)
			k.live--
			if 16*k.live < len(a.slots) && len(a.slots) > minSlots {
				k.rebuild(k.live)
			}
			return true
		}
	}
}

// rebuild publishes a new array sized for n live regions holding the live
// regions of the current one, and returns it.
//
// Preconditions: the owner's lock is held; n >= k.live.
func (k *keyTable) rebuild(n int) *keyArray {
	size := minSlots
	for size < 4*n {
		size *= 2
	}
	old := k.arr.Load()
	a := newKeyArray(size)
	for i := range old.slots {
		m := old.slots[i].Load()
		if m == nil || m == tombstone {
			continue
		}
		j := m.key & a.mask
		for a.slots[j].Load() != nil {
			j = (j + 1) & a.mask
		}
		a.slots[j].Store(m)
	}
	k.used = k.live
	k.arr.Store(a)
	return a
}
