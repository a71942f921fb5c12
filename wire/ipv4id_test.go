package wire_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// packetOfLen builds a random IPv4 RC SEND Only packet of exactly l bytes
// (BTH through ICRC; l a multiple of 4, at least 16).
func packetOfLen(r interface{ Uint32() uint32 }, l int, id uint16, df bool) (wire.Net, []byte) {
	rr := newRand(uint64(r.Uint32()))
	n := randNet(rr, false)
	n.ID, n.DontFragment = id, df
	h := canonical(randHeaders(rr, wire.RCSendOnly), l-16)
	return n, wire.AppendPacket(nil, &n, &h, randBytes(rr, l-16))
}

// idSpan is the independent linear-algebra model of the ID solve for IPv4
// packets of one length: the ICRC changes that some change of the ID
// explains, mapped to that ID change. It is built from the bit-by-bit CRC
// register, not from the package.
type idSpan map[uint32]uint16

// newIDSpan computes, for a packet of l bytes (BTH through ICRC), the ICRC
// difference each ID bit makes: the bit's contribution to the CRC register
// of the masked pseudo-packet, with the LRH, IP header up to the ID (12
// bytes) in front and 14+8+l-4 bytes after.
func newIDSpan(l int) idSpan {
	trailer := 14 + 8 + l - 4
	var cols [16]uint32
	for i := range 16 {
		v := uint16(1) << i
		c := crcRegister(0, []byte{byte(v >> 8), byte(v)})
		c = crcRegister(c, make([]byte, trailer))
		cols[i] = c
	}
	s := make(idSpan, 1<<16)
	for m := range 1 << 16 {
		var v uint32
		for i := range 16 {
			if m>>i&1 != 0 {
				v ^= cols[i]
			}
		}
		s[v] = uint16(m)
	}
	return s
}

// flipErrors returns, for each bit of a packet of l bytes (index 8*byte +
// bit, bit 0 the least significant), the ICRC difference flipping it makes
// to a check that assumes the original stored ICRC: the CRC register
// contribution for bits before the ICRC (0 for the masked BTH byte 4),
// the bit itself for bits of the stored ICRC.
func flipErrors(l int) []uint32 {
	errs := make([]uint32, 8*l)
	for k := range 32 {
		errs[8*(l-4)+k] = 1 << k
	}
	var e [8]uint32
	for b := range 8 {
		e[b] = crcRegister(0, []byte{1 << b})
	}
	for i := l - 5; i >= 0; i-- {
		for b := range 8 {
			if i != 4 {
				errs[8*i+b] = e[b]
			}
			e[b] = crcRegister(e[b], []byte{0})
		}
	}
	return errs
}

// TestSolveIPv4ID recovers random IDs of random packets of many lengths,
// and checks the model above agrees with the package on what the solve
// accepts.
func TestSolveIPv4ID(t *testing.T) {
	r := newRand(30)
	for l := 16; l <= 9000; l += 4 {
		id := uint16(r.Uint32())
		n, pkt := packetOfLen(r, l, id, l%8 == 0)
		probe := n
		probe.ID = ^id
		got, ok := wire.SolveIPv4ID(&probe, pkt)
		if !ok || got != id {
			t.Fatalf("length %d: SolveIPv4ID = %#04x, %v; want %#04x", l, got, ok, id)
		}
		// A wrong DontFragment assumption is one flipped bit next to the
		// ID, which the solve can never explain.
		probe.DontFragment = !probe.DontFragment
		if _, ok := wire.SolveIPv4ID(&probe, pkt); ok {
			t.Fatalf("length %d: accepted with the wrong DontFragment", l)
		}
	}
	// IPv6 has no ID; a packet shorter than BTH and ICRC has nothing to
	// solve.
	tp := randPacket(r, wire.RCSendOnly, true, 64)
	_, ok := wire.SolveIPv4ID(&tp.net, tp.ib)
	require.False(t, ok)
	n, pkt := packetOfLen(r, 16, 1, true)
	_, ok = wire.SolveIPv4ID(&n, pkt[:15])
	require.False(t, ok)
}

// TestSolveIPv4IDEveryID seals one packet with each of the 65536 IDs; every
// one must come back.
func TestSolveIPv4IDEveryID(t *testing.T) {
	r := newRand(31)
	n, pkt := packetOfLen(r, 64, 0, true)
	for id := range 1 << 16 {
		n.ID = uint16(id)
		wire.PutICRC(&n, pkt)
		n.ID = 0x5555
		got, ok := wire.SolveIPv4ID(&n, pkt)
		if !ok || got != uint16(id) {
			t.Fatalf("ID %#04x: got %#04x, %v", id, got, ok)
		}
	}
}

// TestSolveIPv4IDSingleBitFlips flips each bit of a packet, one at a time,
// and counts the flips the solve accepts, which it should not: the check
// keeps only 16 of the ICRC's 32 bits, so a random corruption passes with
// probability 2^-16. Single-bit errors are better than random: flipping a
// bit j positions after the ID changes the CRC by x^-j times an ID column
// (modulo the CRC polynomial), which the solve accepts only if x^-j mod P
// has degree below 16. The first such j lies about 26.7 KB after the ID
// (the model finds packet byte 26744), so every single-bit error in any
// packet a 4096-byte MTU allows is detected. Flips in BTH byte 4 (FECN,
// BECN, Resv6) are not errors: the ICRC masks that byte on purpose, and
// the solve accepts them with the right ID.
func TestSolveIPv4IDSingleBitFlips(t *testing.T) {
	r := newRand(32)
	for _, l := range []int{16, 256, 1024 + 28, 4096 + 60} {
		t.Run(fmt.Sprint(l), func(t *testing.T) {
			id := uint16(r.Uint32())
			n, pkt := packetOfLen(r, l, id, true)
			span := newIDSpan(l)
			errs := flipErrors(l)
			wrong, predicted := 0, 0
			for bit := range 8 * l {
				_, model := span[errs[bit]]
				pkt[bit/8] ^= 1 << (bit % 8)
				got, ok := wire.SolveIPv4ID(&n, pkt)
				pkt[bit/8] ^= 1 << (bit % 8)
				require.Equal(t, model, ok, "bit %d (byte %d): model and solve disagree", bit, bit/8)
				if bit/8 == 4 {
					require.True(t, ok, "masked byte 4")
					require.Equal(t, id, got, "masked byte 4")
					continue
				}
				if model {
					predicted++
				}
				if ok {
					wrong++
					require.NotEqual(t, id, got)
					require.Equal(t, id^span[errs[bit]], got)
				}
			}
			t.Logf("%d-byte packet: %d of %d single-bit flips wrongly accepted (model: %d)",
				l, wrong, 8*l-8, predicted)
			require.Zero(t, wrong)
		})
	}
}

// TestSolveIPv4IDLongPacketFlip checks the model's prediction beyond the
// MTU: in a packet long enough to reach byte 26744, flipping bit 6 of that
// byte is accepted (with a wrong ID), while other flips are not.
func TestSolveIPv4IDLongPacketFlip(t *testing.T) {
	const l = 26752
	r := newRand(33)
	id := uint16(r.Uint32())
	n, pkt := packetOfLen(r, l, id, true)
	span := newIDSpan(l)
	errs := flipErrors(l)
	var accepted []int
	for bit, e := range errs {
		if _, ok := span[e]; ok && bit/8 != 4 {
			accepted = append(accepted, bit)
		}
	}
	require.Equal(t, []int{8*26744 + 6}, accepted)
	pkt[26744] ^= 0x40
	got, ok := wire.SolveIPv4ID(&n, pkt)
	require.True(t, ok)
	require.Equal(t, id^span[errs[8*26744+6]], got)
	pkt[26744] ^= 0x40
	for range 200 {
		bit := r.IntN(8 * l)
		if bit == 8*26744+6 || bit/8 == 4 {
			continue
		}
		pkt[bit/8] ^= 1 << (bit % 8)
		_, ok := wire.SolveIPv4ID(&n, pkt)
		pkt[bit/8] ^= 1 << (bit % 8)
		require.False(t, ok, "bit %d", bit)
	}
}

// TestSolveIPv4IDRandomCorruption replaces the stored ICRC with random
// values: exactly the 2^16 values the ID columns span pass, a rate of
// 2^-16. With 2^20 trials about 16 pass.
func TestSolveIPv4IDRandomCorruption(t *testing.T) {
	r := newRand(35)
	const l = 32
	n, pkt := packetOfLen(r, l, 0x1234, true)
	span := newIDSpan(l)
	good := wire.StoredICRC(pkt)
	trials := 1 << 20
	if testing.Short() || raceEnabled {
		trials = 1 << 16
	}
	passed, predicted := 0, 0
	for range trials {
		bad := r.Uint32()
		pkt[l-4], pkt[l-3], pkt[l-2], pkt[l-1] = byte(bad), byte(bad>>8), byte(bad>>16), byte(bad>>24)
		_, ok := wire.SolveIPv4ID(&n, pkt)
		_, model := span[bad^good]
		require.Equal(t, model, ok)
		if ok {
			passed++
		}
		if model {
			predicted++
		}
	}
	t.Logf("%d of %d random ICRCs accepted (expected %.1f)", passed, trials, float64(trials)/65536)
	require.Equal(t, predicted, passed)
	// Binomial(2^20, 2^-16): mean 16, sd 4; with the fixed seed the count
	// is deterministic, the bounds say what it means.
	if trials == 1<<20 {
		require.InDelta(t, 16, passed, 12)
	}
}

// TestSolveIPv4IDConcurrent solves from several goroutines at once, on
// lengths whose decoders are not cached yet (some shared, some not, and
// one past the cache), for the race detector.
func TestSolveIPv4IDConcurrent(t *testing.T) {
	r := newRand(35)
	type job struct {
		n   wire.Net
		pkt []byte
		id  uint16
	}
	var jobs []job
	for i := range 24 {
		l := 60000 + 4*(i%12) // each length twice
		if i == 23 {
			l = 1<<16 + 4
		}
		id := uint16(r.Uint32())
		n, pkt := packetOfLen(r, l, id, true)
		n.ID = 0
		jobs = append(jobs, job{n, pkt, id})
	}
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for g := range 4 {
		wg.Go(func() {
			for k := range len(jobs) {
				j := jobs[(k+g*5)%len(jobs)]
				got, ok := wire.SolveIPv4ID(&j.n, j.pkt)
				if !ok || got != j.id {
					errs[k] = fmt.Errorf("length %d: got %#04x, %v; want %#04x", len(j.pkt), got, ok, j.id)
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}
