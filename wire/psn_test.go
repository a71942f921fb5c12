package wire_test

import (
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// The slow PSN reference: int64 arithmetic modulo 2^24, written from the
// definition of serial-number order (IBTA 9.7.1; RFC 1982 style).
const psnMod = int64(1) << 24

func refMod(v int64) int64 { return ((v % psnMod) + psnMod) % psnMod }

func refAdd(p int64, n uint32) int64 { return refMod(p + int64(n)) }
func refSub(p int64, n uint32) int64 { return refMod(p - int64(n)) }

// refDiff is the signed distance from q to p, in [-2^23, 2^23).
func refDiff(p, q int64) int64 {
	d := refMod(p - q)
	if d >= psnMod/2 {
		d -= psnMod
	}
	return d
}

func refInWindow(p, first int64, size uint32) bool { return refMod(p-first) < int64(size) }

// psnSamples are the PSNs the wrap-around test starts from: both ends of
// the space, both sides of the half-way point, and a few in between.
var psnSamples = []int64{
	0, 1, 2, 3, 127, 128, 129,
	1<<23 - 2, 1<<23 - 1, 1 << 23, 1<<23 + 1, 1<<23 + 2,
	1<<24 - 129, 1<<24 - 128, 1<<24 - 3, 1<<24 - 2, 1<<24 - 1,
	0x123456, 0xabcdef, 0x7ffff0, 0x800010, 0xfff000,
}

// distanceSamples are the distances added to each sample: every distance
// within ±300 of 0, ±2^23, ±2^24 and 2^25, the values n can take at the
// uint32 edges, and a sweep over the whole 24-bit range.
func distanceSamples() []int64 {
	var ds []int64
	for _, c := range []int64{0, 1 << 23, -(1 << 23), 1 << 24, -(1 << 24), 1 << 25, 1<<32 - 1} {
		for d := int64(-300); d <= 300; d++ {
			ds = append(ds, c+d)
		}
	}
	for d := int64(0); d < psnMod; d += 251 {
		ds = append(ds, d)
	}
	return ds
}

func checkPSN(t *testing.T, p, q int64, n uint32) {
	P, Q := wire.PSN(p), wire.PSN(q)
	if got, want := int64(P.Add(n)), refAdd(p, n); got != want {
		t.Fatalf("PSN(%#x).Add(%#x) = %#x, want %#x", p, n, got, want)
	}
	if got, want := int64(P.Sub(n)), refSub(p, n); got != want {
		t.Fatalf("PSN(%#x).Sub(%#x) = %#x, want %#x", p, n, got, want)
	}
	d := refDiff(p, q)
	if got := int64(P.Diff(Q)); got != d {
		t.Fatalf("PSN(%#x).Diff(%#x) = %d, want %d", p, q, got, d)
	}
	if got := P.LessThan(Q); got != (d < 0) {
		t.Fatalf("PSN(%#x).LessThan(%#x) = %v, want %v", p, q, got, d < 0)
	}
	if got := P.LessThanEq(Q); got != (d <= 0) {
		t.Fatalf("PSN(%#x).LessThanEq(%#x) = %v, want %v", p, q, got, d <= 0)
	}
	// Diff is what Add undoes.
	if got := int64(Q.Add(uint32(P.Diff(Q)))); got != p {
		t.Fatalf("PSN(%#x).Add(Diff) = %#x, want %#x", q, got, p)
	}
	if got, want := P.InWindow(Q, n), refInWindow(p, q, n); got != want {
		t.Fatalf("PSN(%#x).InWindow(%#x, %#x) = %v, want %v", p, q, n, got, want)
	}
}

// TestPSNWrapAround compares every PSN operation with the int64 reference
// for each sample PSN p and q = p+d over all the distance samples, n being
// d as uint32 (so both tiny and huge increments and windows appear).
func TestPSNWrapAround(t *testing.T) {
	ds := distanceSamples()
	for _, p := range psnSamples {
		for _, d := range ds {
			checkPSN(t, p, refMod(p+d), uint32(d))
			// Windows of the sizes rxe uses, whatever the distance.
			for _, size := range []uint32{0, 1, 128, 1 << 23, 1<<24 - 1, 1 << 24, 1<<32 - 1} {
				q := refMod(p + d)
				if got, want := wire.PSN(p).InWindow(wire.PSN(q), size), refInWindow(p, q, size); got != want {
					t.Fatalf("PSN(%#x).InWindow(%#x, %#x) = %v, want %v", p, q, size, got, want)
				}
			}
		}
	}
}

// TestPSNExhaustive compares Diff, LessThan and InWindow with the
// reference for every q against p = 0, 2^23 and 2^24-1.
func TestPSNExhaustive(t *testing.T) {
	for _, p := range []int64{0, 1 << 23, 1<<24 - 1} {
		P := wire.PSN(p)
		for q := range psnMod {
			Q := wire.PSN(q)
			d := refDiff(p, q)
			if int64(P.Diff(Q)) != d || P.LessThan(Q) != (d < 0) || Q.InWindow(P, 128) != refInWindow(q, p, 128) {
				t.Fatalf("p=%#x q=%#x: Diff %d (want %d), LessThan %v, InWindow %v",
					p, q, P.Diff(Q), d, P.LessThan(Q), Q.InWindow(P, 128))
			}
		}
	}
}

func TestPSNCases(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p, q     wire.PSN
		diff     int32
		lessThan bool
	}{
		{"equal", 5, 5, 0, false},
		{"one before", 4, 5, -1, true},
		{"one after", 6, 5, 1, false},
		{"wraps forward", 0, 0xffffff, 1, false},
		{"wraps backward", 0xffffff, 0, -1, true},
		{"just under half", 0x7fffff, 0, 0x7fffff, false},
		// Exactly half-way the order is undefined (RFC 1982); the sign
		// extension makes each PSN "before" the other.
		{"half way", 0x800000, 0, -0x800000, true},
		{"half way reversed", 0, 0x800000, -0x800000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.diff, tc.p.Diff(tc.q))
			require.Equal(t, tc.lessThan, tc.p.LessThan(tc.q))
			require.Equal(t, tc.lessThan || tc.p == tc.q, tc.p.LessThanEq(tc.q))
		})
	}
	require.Equal(t, wire.PSN(0), wire.PSN(0xffffff).Add(1))
	require.Equal(t, wire.PSN(0xffffff), wire.PSN(0).Sub(1))
	require.Equal(t, wire.PSN(0x345678), wire.MakePSN(0x12345678))
	require.Equal(t, wire.PSN(0xffffff), wire.MakePSN(0xffffffff))
	require.True(t, wire.PSN(0xffffff).InWindow(0xffff80, 128))
	require.True(t, wire.PSN(2).InWindow(0xfffffe, 128))
	require.False(t, wire.PSN(0x7e).InWindow(0xfffffe, 128))
	require.False(t, wire.PSN(0xfffffd).InWindow(0xfffffe, 128))
}
