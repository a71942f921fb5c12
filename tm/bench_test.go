package tm

import (
	"fmt"
	"testing"

	"github.com/softhca/softhca/verbs"
)

// BenchmarkMatch measures one match with n entries posted: the message
// consumes an entry, whose completion is polled, and the entry is added
// again, so that the list stays at n (a match, a Release and a TAG_ADD
// per operation). masks is how many distinct
// masks the entries use: 1 (exact tags, MPI without wildcards), 4 (a few
// wildcard patterns) and 16 (beyond the hashed masks: a scan).
func BenchmarkMatch(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		for _, masks := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("tags=%d/masks=%d", n, masks), func(b *testing.B) {
				l, err := New(Config{MaxNumTags: n, MaxSGE: 1})
				if err != nil {
					b.Fatal(err)
				}
				sge := []verbs.SGE{{Addr: 0x1000, Length: 4096, LKey: 1}}
				op := &verbs.OpsWR{Opcode: verbs.WRTagAdd}
				// Entry i: the low bits select its mask, so that the
				// masks differ in which high bits they ignore.
				add := func(i int) {
					m := ^uint64(0) >> uint(i%masks)
					op.TM.Add = verbs.TagAdd{RecvWRID: uint64(i), SGList: sge, Tag: uint64(i) & m, Mask: m}
					if _, err := l.Apply(op); err != nil {
						b.Fatal(err)
					}
				}
				for i := range n {
					add(i)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for k := range b.N {
					i := k % n // the oldest entry: the rest were re-added after it
					m, ok := l.Match(uint64(i))
					if !ok || m.RecvWRID != uint64(i) {
						b.Fatalf("tag %d matched %v (entry %d)", i, ok, m.RecvWRID)
					}
					l.Release(m.Handle)
					add(i)
				}
			})
		}
	}
}

// BenchmarkMatchMiss measures a message that matches none of n entries
// (it will be unexpected): nothing changes, so this is the lookup alone,
// and with 16 masks the whole list is scanned (the worst case).
func BenchmarkMatchMiss(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		for _, masks := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("tags=%d/masks=%d", n, masks), func(b *testing.B) {
				l, err := New(Config{MaxNumTags: n, MaxSGE: 1})
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					m := ^uint64(0) >> uint(i%masks)
					op := &verbs.OpsWR{Opcode: verbs.WRTagAdd, TM: verbs.TMOp{Add: verbs.TagAdd{Tag: uint64(i) & m, Mask: m}}}
					if _, err := l.Apply(op); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, ok := l.Match(1 << 62); ok {
						b.Fatal("matched")
					}
				}
			})
		}
	}
}
