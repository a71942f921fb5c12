package mr

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// The alternatives to keyTable that were measured before choosing it; see
// the keyTable comment. BenchmarkKeyIndex compares them behind one
// interface (its dynamic call costs each the same), so that the choice can
// be measured again:
//
//	go test ./mr/ -run '^$' -bench KeyIndex

type keyIndex interface {
	get(key uint32) *MR
	put(m *MR)
	del(m *MR)
}

// lockedKeyTable is keyTable with the lock that Table.mu provides.
type lockedKeyTable struct {
	mu sync.Mutex
	keyTable
}

func (k *lockedKeyTable) put(m *MR) { k.mu.Lock(); k.insert(m); k.mu.Unlock() }
func (k *lockedKeyTable) del(m *MR) { k.mu.Lock(); k.remove(m); k.mu.Unlock() }

// syncMapIndex is Go 1.24's sync.Map, a concurrent hash-trie.
type syncMapIndex struct{ m sync.Map }

func (s *syncMapIndex) get(key uint32) *MR {
	v, _ := s.m.Load(key)
	m, _ := v.(*MR)
	return m
}
func (s *syncMapIndex) put(m *MR) { s.m.Store(m.key, m) }
func (s *syncMapIndex) del(m *MR) { s.m.Delete(m.key) }

// shardedIndex is 64 maps, each with its RWMutex on its own cache line.
type shardedIndex [64]struct {
	mu sync.RWMutex
	m  map[uint32]*MR
	_  [40]byte
}

func (s *shardedIndex) get(key uint32) *MR {
	sh := &s[key%64]
	sh.mu.RLock()
	m := sh.m[key]
	sh.mu.RUnlock()
	return m
}
func (s *shardedIndex) put(m *MR) {
	sh := &s[m.key%64]
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = map[uint32]*MR{}
	}
	sh.m[m.key] = m
	sh.mu.Unlock()
}
func (s *shardedIndex) del(m *MR) {
	sh := &s[m.key%64]
	sh.mu.Lock()
	delete(sh.m, m.key)
	sh.mu.Unlock()
}

func BenchmarkKeyIndex(b *testing.B) {
	const n = 10000
	impls := []struct {
		name string
		new  func() keyIndex
	}{
		{"keyTable", func() keyIndex { k := &lockedKeyTable{}; k.init(); return k }},
		{"sync.Map", func() keyIndex { return &syncMapIndex{} }},
		{"sharded", func() keyIndex { return &shardedIndex{} }},
	}
	r := rand.New(rand.NewPCG(7, 8))
	mrs := make([]*MR, n+64)
	used := map[uint32]bool{0: true}
	for i := range mrs {
		k := uint32(0)
		for used[k] {
			k = r.Uint32()
		}
		used[k] = true
		mrs[i] = &MR{key: k}
	}
	for _, im := range impls {
		fill := func() keyIndex {
			x := im.new()
			for _, m := range mrs[:n] {
				x.put(m)
			}
			return x
		}
		b.Run(im.name+"/get", func(b *testing.B) {
			x := fill()
			i := 0
			for b.Loop() {
				if x.get(mrs[i].key) == nil {
					b.Fatal("missing")
				}
				if i++; i == n {
					i = 0
				}
			}
		})
		b.Run(im.name+"/get-parallel", func(b *testing.B) {
			x := fill()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(n)
				for pb.Next() {
					if x.get(mrs[i].key) == nil {
						b.Error("missing")
						return
					}
					if i++; i == n {
						i = 0
					}
				}
			})
		})
		b.Run(im.name+"/get-during-churn", func(b *testing.B) {
			x := fill()
			stop, done := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					m := mrs[n+i%64]
					x.put(m)
					x.del(m)
				}
			}()
			i := 0
			for b.Loop() {
				if x.get(mrs[i].key) == nil {
					b.Fatal("missing")
				}
				if i++; i == n {
					i = 0
				}
			}
			close(stop)
			<-done
		})
		b.Run(im.name+"/put-del", func(b *testing.B) {
			x := fill()
			b.ReportAllocs()
			for b.Loop() {
				x.put(mrs[n])
				x.del(mrs[n])
			}
		})
	}
}
