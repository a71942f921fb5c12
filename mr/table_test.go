package mr

import (
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

// checkTable checks the table's internal invariants: the key array is a
// power of two at most half used, every live region resolves by its key,
// and each PD's address tree is ordered, heap-ordered, carries correct
// subtree maxima and holds exactly that PD's live regions.
func checkTable(t *testing.T, tb *Table, live map[*MR]bool) {
	t.Helper()
	tb.mu.RLock()
	defer tb.mu.RUnlock()
	a := tb.keys.arr.Load()
	require.Equal(t, len(a.slots)-1, int(a.mask))
	require.Zero(t, len(a.slots)&int(a.mask), "array size is a power of two")
	require.LessOrEqual(t, 2*tb.keys.used, len(a.slots), "at most half the slots are used")
	var nLive, nUsed int
	for i := range a.slots {
		switch m := a.slots[i].Load(); m {
		case nil:
		case tombstone:
			nUsed++
		default:
			nLive++
			nUsed++
			require.True(t, live[m], "only live regions are in the key table")
		}
	}
	require.Equal(t, len(live), nLive)
	require.Equal(t, tb.keys.live, nLive)
	require.Equal(t, tb.keys.used, nUsed)

	perPD := map[uint32]int{}
	for m := range live {
		require.Same(t, m, tb.keys.get(m.key))
		require.True(t, m.valid.Load())
		perPD[m.pd]++
	}
	require.Equal(t, len(perPD), len(tb.byPD), "byPD holds exactly the PDs with regions")
	for pd, root := range tb.byPD {
		n := 0
		var prev *MR
		var walk func(m *MR) uint64
		walk = func(m *MR) uint64 {
			if m == nil {
				return 0
			}
			require.Equal(t, pd, m.pd)
			require.True(t, live[m])
			maxEnd := m.end()
			for _, c := range []*MR{m.idx.left, m.idx.right} {
				if c != nil {
					require.LessOrEqual(t, c.idx.prio, m.idx.prio, "heap order")
				}
			}
			if e := walk(m.idx.left); e > maxEnd {
				maxEnd = e
			}
			if prev != nil {
				require.True(t, before(prev, m), "in-order walk is sorted")
			}
			prev = m
			n++
			if e := walk(m.idx.right); e > maxEnd {
				maxEnd = e
			}
			require.Equal(t, maxEnd, m.idx.maxEnd, "subtree maximum")
			return maxEnd
		}
		walk(root)
		require.Equal(t, perPD[pd], n, "PD %d's tree holds its regions", pd)
	}
}

// TestKeyTableModel registers and deregisters at random against a map,
// once with crypto/rand keys and once with keys that all share their low
// 24 bits, so that every key probes from the same slot: long runs of
// occupied slots and tombstones, through growth and shrinking.
func TestKeyTableModel(t *testing.T) {
	for _, c := range []struct {
		name    string
		clashes bool
	}{{"random keys", false}, {"clashing keys", true}} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, 12))
			tb := NewTable(1<<20, 1<<20)
			if c.clashes {
				tb.randKey = func() uint32 { return r.Uint32N(256) << 24 } // includes 0
			}
			live := map[*MR]bool{}
			var dead []*MR
			var order []*MR
			for step := 0; step < 4000; step++ {
				// Grow to about 150 regions, shrink to none, grow again.
				grow := step%2000 < 1000
				if len(order) == 0 || (grow && r.IntN(4) != 0) || (!grow && r.IntN(4) == 0) {
					if len(order) >= 200 {
						continue
					}
					m, err := tb.Register(uint32(1+r.IntN(3)), make([]byte, 1+r.IntN(64)), 0)
					require.NoError(t, err)
					require.NotZero(t, m.LKey())
					live[m] = true
					order = append(order, m)
				} else {
					i := r.IntN(len(order))
					m := order[i]
					order[i] = order[len(order)-1]
					order = order[:len(order)-1]
					require.NoError(t, tb.Deregister(m))
					delete(live, m)
					dead = append(dead, m)
				}
				require.Equal(t, len(live), tb.Count())
				for _, m := range dead[max(0, len(dead)-8):] {
					if g := tb.Get(m.key); g == m {
						t.Fatalf("step %d: deregistered region %#x still resolves", step, m.key)
					}
					_, st := tb.Lookup(m.key, m.pd, m.addr, uint32(m.Len()), 0)
					if tb.Get(m.key) == nil {
						require.Equal(t, BadKey, st)
					}
				}
				if step%50 == 0 {
					checkTable(t, tb, live)
				}
			}
			checkTable(t, tb, live)
			for _, m := range order {
				require.NoError(t, tb.Deregister(m))
			}
			checkTable(t, tb, map[*MR]bool{})
			require.Equal(t, minSlots, len(tb.keys.arr.Load().slots), "an empty table shrinks back")
		})
	}
}

// TestNewKeySkipsZeroAndTaken feeds the table keys that are zero or in use
// and checks that it draws again.
func TestNewKeySkipsZeroAndTaken(t *testing.T) {
	tb := NewTable(8, 1<<20)
	seq := []uint32{0, 0x1234, 0x1234, 0, 0x1234, 0x5678}
	tb.randKey = func() uint32 { k := seq[0]; seq = seq[1:]; return k }
	a, err := tb.Register(1, make([]byte, 8), 0)
	require.NoError(t, err)
	b, err := tb.Register(1, make([]byte, 8), 0)
	require.NoError(t, err)
	require.Equal(t, uint32(0x1234), a.LKey())
	require.Equal(t, uint32(0x5678), b.LKey())
	require.Empty(t, seq)
	require.Nil(t, tb.Get(0), "key 0 never resolves")
	_, st := tb.Lookup(0, 1, a.Addr(), 1, 0)
	require.Equal(t, BadKey, st)
}

// TestKeysUnique registers many regions with real random keys, churns
// them, and checks that live keys are non-zero and distinct.
func TestKeysUnique(t *testing.T) {
	const n = 20000
	tb := NewTable(n, 1<<20)
	arena := make([]byte, n)
	mrs := make([]*MR, n)
	keys := make(map[uint32]*MR, n)
	for i := range mrs {
		m, err := tb.Register(1, arena[i:i+1], 0)
		require.NoError(t, err)
		mrs[i] = m
	}
	for i := 0; i < n; i += 2 {
		require.NoError(t, tb.Deregister(mrs[i]))
		m, err := tb.Register(2, arena[i:i+1], 0)
		require.NoError(t, err)
		mrs[i] = m
	}
	for _, m := range mrs {
		require.NotZero(t, m.LKey())
		if keys[m.LKey()] != nil {
			t.Fatalf("key %#x is in use twice", m.LKey())
		}
		keys[m.LKey()] = m
		require.Same(t, m, tb.Get(m.LKey()))
	}
	_, err := tb.Register(1, arena[:1], 0)
	require.ErrorIs(t, err, syscall.ENOMEM)
}

// TestDeregisterForeign deregisters a region of another table, including
// one whose key is in use in this table, and a deregistered one.
func TestDeregisterForeign(t *testing.T) {
	same := func() uint32 { return 0xabcd }
	ta, tb := NewTable(8, 1<<20), NewTable(8, 1<<20)
	ta.randKey, tb.randKey = same, same
	a, err := ta.Register(1, make([]byte, 8), 0)
	require.NoError(t, err)
	b, err := tb.Register(1, make([]byte, 8), 0)
	require.NoError(t, err)
	require.Equal(t, a.LKey(), b.LKey())
	require.ErrorIs(t, ta.Deregister(b), syscall.EINVAL, "another table's region with the same key")
	require.Same(t, a, ta.Get(a.LKey()), "a failed deregistration changes nothing")
	require.Equal(t, 1, ta.Count())
	require.NoError(t, tb.Deregister(b))
	require.ErrorIs(t, tb.Deregister(b), syscall.EINVAL, "twice")
	require.ErrorIs(t, ta.Deregister(b), syscall.EINVAL, "deregistered, from another table")
	require.NotNil(t, ta.FindByAddr(1, a.Addr(), 8))
	require.Nil(t, tb.FindByAddr(1, b.Addr(), 8))
}

// TestFindByAddrModel registers and deregisters overlapping regions of
// one arena in a few PDs at random, and checks FindByAddr after every step
// against a linear search of the live regions.
func TestFindByAddrModel(t *testing.T) {
	const arenaLen = 512
	r := rand.New(rand.NewPCG(21, 22))
	arena := make([]byte, arenaLen)
	base := uint64(uintptr(unsafe.Pointer(&arena[0])))
	tb := NewTable(1<<10, 1<<20)
	live := map[*MR]bool{}
	var order []*MR

	linear := func(pd uint32, va uint64, n uint32) bool {
		for m := range live {
			off := va - m.addr
			if m.pd == pd && va >= m.addr && off <= uint64(m.Len()) && uint64(n) <= uint64(m.Len())-off {
				return true
			}
		}
		return false
	}
	query := func(pd uint32, va uint64, n uint32) {
		t.Helper()
		got := tb.FindByAddr(pd, va, n)
		want := linear(pd, va, n)
		require.Equal(t, want, got != nil, "FindByAddr(%d, base%+d, %d)", pd, int64(va-base), n)
		if got != nil {
			require.Len(t, got, int(n))
			require.Equal(t, int(n), cap(got))
			if n > 0 { // an empty slice's pointer is unspecified
				require.Equal(t, va, uint64(uintptr(unsafe.Pointer(&got[0]))), "the slice starts at va")
			}
		}
	}
	for step := 0; step < 3000; step++ {
		if len(order) == 0 || len(order) < 80 && r.IntN(3) != 0 {
			s := r.IntN(arenaLen)
			e := s + 1 + r.IntN(min(arenaLen-s, 1+r.IntN(arenaLen)))
			m, err := tb.Register(uint32(1+r.IntN(3)), arena[s:e], 0)
			require.NoError(t, err)
			live[m] = true
			order = append(order, m)
		} else {
			i := r.IntN(len(order))
			m := order[i]
			order[i] = order[len(order)-1]
			order = order[:len(order)-1]
			require.NoError(t, tb.Deregister(m))
			delete(live, m)
		}
		for range 20 {
			pd := uint32(1 + r.IntN(4)) // PD 4 never has regions
			va := base + uint64(r.IntN(arenaLen+16)) - 8
			query(pd, va, uint32(r.IntN(80)))
		}
		// Edges: each live region whole, one byte more, its end, and a
		// range that wraps around the address space.
		if len(order) > 0 {
			m := order[r.IntN(len(order))]
			query(m.pd, m.addr, uint32(m.Len()))
			query(m.pd, m.addr, uint32(m.Len())+1)
			query(m.pd, m.addr-1, uint32(m.Len()))
			query(m.pd, m.end(), 0)
			query(m.pd, ^uint64(0)-2, 4)
		}
		if step%100 == 0 {
			checkTable(t, tb, live)
		}
	}
	checkTable(t, tb, live)
}

// TestLookupDoesNotAllocate guards the per-packet path.
func TestLookupDoesNotAllocate(t *testing.T) {
	tb := NewTable(1<<20, 1<<20)
	arena := make([]byte, 64*1000)
	var m *MR
	for i := 0; i < 1000; i++ {
		var err error
		m, err = tb.Register(1, arena[64*i:64*i+64], verbs.AccessLocalWrite)
		require.NoError(t, err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, st := tb.Lookup(m.LKey(), 1, m.Addr(), 64, verbs.AccessLocalWrite); st != OK {
			t.Fatal(st)
		}
		if _, st := tb.Lookup(m.LKey()^1, 1, m.Addr(), 64, 0); st != BadKey {
			t.Fatal(st)
		}
		if tb.FindByAddr(1, m.Addr(), 64) == nil {
			t.Fatal("not found")
		}
	})
	require.Zero(t, allocs)
}

// TestConcurrentRegistration has goroutines register, look up and
// deregister their own regions while others look up a stable region and
// check regions that were deregistered: run with -race. A region handed
// to the checker was deregistered before it was sent, so its key must no
// longer resolve to it.
func TestConcurrentRegistration(t *testing.T) {
	const writers, rounds = 6, 400
	tb := NewTable(1<<20, 1<<20)
	stable, err := tb.Register(100, make([]byte, 64), verbs.AccessLocalWrite)
	require.NoError(t, err)

	dead := make(chan *MR, 64)
	stop := make(chan struct{})
	var wg, readers sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pd := uint32(1 + w)
			for i := range rounds {
				// A fresh buffer each time, so that no later region of
				// this PD covers a deregistered one.
				buf := make([]byte, 16+i%64)
				m, err := tb.Register(pd, buf, verbs.AccessLocalWrite)
				if err != nil {
					t.Error(err)
					return
				}
				if b, st := tb.Lookup(m.LKey(), pd, m.Addr(), uint32(len(buf)), verbs.AccessLocalWrite); st != OK || &b[0] != &buf[0] {
					t.Errorf("registered region %#x: %v", m.LKey(), st)
					return
				}
				if tb.FindByAddr(pd, m.Addr()+1, 8) == nil {
					t.Errorf("registered region %#x not found by address", m.LKey())
					return
				}
				if err := tb.Deregister(m); err != nil {
					t.Error(err)
					return
				}
				dead <- m
			}
		}()
	}
	readers.Add(2)
	go func() { // the data path: a stable region always resolves
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, st := tb.Lookup(stable.LKey(), 100, stable.Addr(), 64, verbs.AccessLocalWrite); st != OK {
				t.Errorf("stable region: %v", st)
				return
			}
			if tb.FindByAddr(100, stable.Addr(), 64) == nil {
				t.Error("stable region not found by address")
				return
			}
		}
	}()
	go func() { // deregistered regions never resolve again
		defer readers.Done()
		for m := range dead {
			if b, st := tb.Lookup(m.LKey(), m.PD(), m.Addr(), uint32(m.Len()), 0); st == OK && &b[0] == &m.Bytes()[0] {
				t.Errorf("deregistered region %#x still resolves", m.LKey())
			}
			if tb.Get(m.LKey()) == m {
				t.Errorf("Get finds deregistered region %#x", m.LKey())
			}
			if b := tb.FindByAddr(m.PD(), m.Addr(), uint32(m.Len())); b != nil {
				t.Errorf("FindByAddr finds deregistered region %#x", m.LKey())
			}
		}
	}()
	wg.Wait()
	close(dead)
	close(stop)
	readers.Wait()
	require.Equal(t, 1, tb.Count())
	checkTable(t, tb, map[*MR]bool{stable: true})
}
