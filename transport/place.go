package transport

import (
	"github.com/softhca/softhca/verbs"
)

// Placing bytes: the data path between packets and registered memory.
// Every access goes through Memory.Lookup with the QP's protection
// domain and the access right it needs; a lookup that fails (a key that
// was never valid, or a region deregistered meanwhile) stops the copy and
// says so, and the caller answers with the error IBTA prescribes. No byte
// is ever copied from or to memory that failed its lookup.

// gather copies len(dst) bytes of a send WQE's data, from offset off,
// into dst. It reports false when a region of the scatter list can no
// longer be read.
func gather(mem Memory, pd uint32, w *SendWQE, off uint32, dst []byte) bool {
	if w.WR.SendFlags&verbs.SendInline != 0 {
		copy(dst, w.Inline[off:])
		return true
	}
	for _, sge := range w.SGL {
		if len(dst) == 0 {
			return true
		}
		if off >= sge.Length {
			off -= sge.Length
			continue
		}
		k := min(sge.Length-off, uint32(len(dst)))
		b, ok := mem.Lookup(sge.LKey, pd, sge.Addr+uint64(off), k, 0)
		if !ok {
			return false
		}
		copy(dst, b)
		dst = dst[k:]
		off = 0
	}
	return len(dst) == 0
}

// inPlace returns the n bytes at offset off of w's message as one slice
// of registered memory, to be sent from where they lie (Env.Gather): when
// they lie within one SGE of a WR that is not inline, and the lookup
// succeeds. Otherwise nil: gather copies them, and reports a failed
// lookup.
func inPlace(mem Memory, pd uint32, w *SendWQE, off, n uint32) []byte {
	if w.WR.SendFlags&verbs.SendInline != 0 {
		return nil
	}
	for _, sge := range w.SGL {
		if off >= sge.Length {
			off -= sge.Length
			continue
		}
		if sge.Length-off < n {
			return nil // the bytes span SGEs
		}
		b, ok := mem.Lookup(sge.LKey, pd, sge.Addr+uint64(off), n, 0)
		if !ok {
			return nil
		}
		return b
	}
	return nil
}

// scatterResult is the outcome of placing bytes into a scatter list.
type scatterResult uint8

const (
	scatterOK       scatterResult = iota
	scatterTooLong                // the bytes do not fit the scatter list
	scatterBadLocal               // a region of the list is gone or not writable
)

// scatter copies src into the scatter list sgl from offset off. It checks
// that everything fits before it copies anything.
func scatter(mem Memory, pd uint32, sgl []verbs.SGE, off uint32, src []byte) scatterResult {
	if uint64(off)+uint64(len(src)) > sglLength(sgl) {
		return scatterTooLong
	}
	for _, sge := range sgl {
		if len(src) == 0 {
			break
		}
		if off >= sge.Length {
			off -= sge.Length
			continue
		}
		k := min(sge.Length-off, uint32(len(src)))
		b, ok := mem.Lookup(sge.LKey, pd, sge.Addr+uint64(off), k, verbs.AccessLocalWrite)
		if !ok {
			return scatterBadLocal
		}
		copy(b, src[:k])
		src = src[k:]
		off = 0
	}
	return scatterOK
}

// sglLength returns the bytes a scatter list holds.
func sglLength(sgl []verbs.SGE) uint64 {
	var n uint64
	for _, sge := range sgl {
		n += uint64(sge.Length)
	}
	return n
}
