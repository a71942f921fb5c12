package wire

// PSN is a 24-bit packet sequence number (IBTA 9.7.1). Arithmetic wraps
// modulo 2^24, and ordering is serial-number ordering: a is before b when
// the 24-bit difference b-a, read as a signed number, is positive. Values
// are always kept in the low 24 bits.
type PSN uint32

// PSNMask keeps the 24 bits of a PSN.
const PSNMask = 0xffffff

// MakePSN truncates v to 24 bits.
func MakePSN(v uint32) PSN { return PSN(v & PSNMask) }

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return PSN((uint32(p) + n) & PSNMask) }

// Sub returns p-n modulo 2^24.
func (p PSN) Sub(n uint32) PSN { return PSN((uint32(p) - n) & PSNMask) }

// Diff returns the signed distance from q to p: p == q.Add(uint32(d)),
// with d in [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 {
	return int32((uint32(p)-uint32(q))<<8) >> 8
}

// LessThan reports whether p comes before q in serial order.
func (p PSN) LessThan(q PSN) bool { return p.Diff(q) < 0 }

// LessThanEq reports whether p equals or comes before q in serial order.
func (p PSN) LessThanEq(q PSN) bool { return p.Diff(q) <= 0 }

// InWindow reports whether p lies in [first, first+size).
func (p PSN) InWindow(first PSN, size uint32) bool {
	return (uint32(p)-uint32(first))&PSNMask < size
}
