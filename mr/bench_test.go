package mr

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/softhca/softhca/verbs"
)

// benchTable returns a table holding n regions of 64 bytes each in
// protection domain 1, cut from one arena, and the regions.
func benchTable(b *testing.B, n int) (*Table, []*MR) {
	b.Helper()
	tb := NewTable(1<<20, 1<<20)
	arena := make([]byte, 64*n)
	mrs := make([]*MR, n)
	for i := range mrs {
		m, err := tb.Register(1, arena[64*i:64*i+64:64*i+64], verbs.AccessLocalWrite)
		if err != nil {
			b.Fatal(err)
		}
		mrs[i] = m
	}
	return tb, mrs
}

// BenchmarkLookup is the per-packet key check. With regions=1 it looks up
// one key (the table is hot in cache); with more it cycles through every
// region, so each lookup touches a different key; miss looks up keys that
// are not registered.
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run("regions="+strconv.Itoa(n), func(b *testing.B) {
			tb, mrs := benchTable(b, n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				m := mrs[i]
				if _, st := tb.Lookup(m.LKey(), 1, m.Addr()+8, 32, verbs.AccessLocalWrite); st != OK {
					b.Fatal(st)
				}
				if i++; i == len(mrs) {
					i = 0
				}
			}
		})
	}
	b.Run("regions=10000/miss", func(b *testing.B) {
		tb, _ := benchTable(b, 10000)
		keys := make([]uint32, 4096)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range keys {
			for keys[i] == 0 || tb.Get(keys[i]) != nil {
				keys[i] = r.Uint32()
			}
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, st := tb.Lookup(keys[i&4095], 1, 0, 32, 0); st != BadKey {
				b.Fatal(st)
			}
			i++
		}
	})
}

// BenchmarkLookupParallel is BenchmarkLookup from GOMAXPROCS goroutines,
// as the transport's workers do.
func BenchmarkLookupParallel(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run("regions="+strconv.Itoa(n), func(b *testing.B) {
			tb, mrs := benchTable(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(len(mrs))
				for pb.Next() {
					m := mrs[i]
					if _, st := tb.Lookup(m.LKey(), 1, m.Addr()+8, 32, verbs.AccessLocalWrite); st != OK {
						b.Error(st)
						return
					}
					if i++; i == len(mrs) {
						i = 0
					}
				}
			})
		})
	}
}

// BenchmarkRegisterDeregister registers and deregisters one region in a
// table that already holds live regions.
func BenchmarkRegisterDeregister(b *testing.B) {
	for _, n := range []int{0, 1000, 10000} {
		b.Run("live="+strconv.Itoa(n), func(b *testing.B) {
			tb, _ := benchTable(b, n)
			buf := make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				m, err := tb.Register(2, buf, verbs.AccessLocalWrite)
				if err != nil {
					b.Fatal(err)
				}
				if err := tb.Deregister(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRegister100k registers 100,000 regions, then deregisters them
// in a shuffled order, and reports the mean cost of the first and of the
// last 10,000 of each: with O(1) operations first and last are alike.
func BenchmarkRegister100k(b *testing.B) {
	const n, batch = 100000, 10000
	arena := make([]byte, 64*n)
	order := rand.New(rand.NewPCG(3, 4)).Perm(n)
	mrs := make([]*MR, n)
	var regFirst, regLast, deregFirst, deregLast time.Duration
	iters := 0
	b.ReportAllocs()
	for b.Loop() {
		tb := NewTable(n, 1<<20)
		var t0 time.Time
		for i := range n {
			switch i {
			case 0, n - batch:
				t0 = time.Now()
			}
			m, err := tb.Register(1, arena[64*i:64*i+64:64*i+64], verbs.AccessLocalWrite)
			if err != nil {
				b.Fatal(err)
			}
			mrs[i] = m
			switch i {
			case batch - 1:
				regFirst += time.Since(t0)
			case n - 1:
				regLast += time.Since(t0)
			}
		}
		for i, j := range order {
			switch i {
			case 0, n - batch:
				t0 = time.Now()
			}
			if err := tb.Deregister(mrs[j]); err != nil {
				b.Fatal(err)
			}
			switch i {
			case batch - 1:
				deregFirst += time.Since(t0)
			case n - 1:
				deregLast += time.Since(t0)
			}
		}
		iters++
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(iters*batch) }
	b.ReportMetric(per(regFirst), "ns/reg-first10k")
	b.ReportMetric(per(regLast), "ns/reg-last10k")
	b.ReportMetric(per(deregFirst), "ns/dereg-first10k")
	b.ReportMetric(per(deregLast), "ns/dereg-last10k")
}

// BenchmarkFindByAddr finds inline data by address among the regions of
// one protection domain (ibv_post_send with IBV_SEND_INLINE).
func BenchmarkFindByAddr(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run("regions="+strconv.Itoa(n), func(b *testing.B) {
			tb, mrs := benchTable(b, n)
			r := rand.New(rand.NewPCG(5, 6))
			idx := make([]int, 4096)
			for i := range idx {
				idx[i] = r.IntN(n)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				m := mrs[idx[i&4095]]
				if tb.FindByAddr(1, m.Addr()+8, 16) == nil {
					b.Fatal("not found")
				}
				i++
			}
		})
	}
}
