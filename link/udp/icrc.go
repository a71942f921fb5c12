package udp

import "hash/crc32"

// IPv4 Identification of GSO segments.
//
// Linux numbers the segments of a DF super-packet from an unconnected
// socket with IP IDs 0, 1, 2, ... (ip_select_ident_segs gives the first
// one 0; inet_gso_segment increments), while the ICRC the sender computed
// assumes 0. The ICRC covers the ID (wire-notes: IP header with only TOS,
// TTL and checksum masked), and the CRC is linear over GF(2): for two
// messages of equal length, crc(a) ^ crc(b) is the zero-initialised,
// un-complemented CRC of a ^ b. a ^ b is zero except for the ID field, so
// the correction for ID k is the XOR of one 32-bit column per set bit of
// k, and each column depends only on how many bytes follow the ID.
//
// The ICRC's message is 8 bytes of 0xFF, the 20-byte IPv4 header (ID at
// offset 4), the 8-byte UDP header and the InfiniBand packet without its
// 4 ICRC bytes: for an InfiniBand packet of n bytes, n+18 bytes follow the
// ID.

// idColumnBits is how many ID bits a GSO run can set: segments 0..63.
const idColumnBits = 6

// idBit7 is the ID field with only bit 7 set, in network byte order.
var idBit7 = []byte{0x00, 0x80}

// zeros is a read-only run of zero bytes to extend a CRC with.
var zeros [4096]byte

// idColumns returns col, where col[b] is what flipping bit b of the IP ID
// does to the ICRC of an n-byte InfiniBand packet (as the uint32 that
// wire.StoredICRC reads).
func idColumns(n int) (col [idColumnBits]uint32) {
	// hash/crc32 complements its state on the way in and out: starting
	// from ^0 runs the register from 0, and chaining Update keeps it.
	c := crc32.Update(^uint32(0), crc32.IEEETable, idBit7)
	for z := n + 18; z > 0; {
		m := min(z, len(zeros))
		c = crc32.Update(c, crc32.IEEETable, zeros[:m])
		z -= m
	}
	x := ^c // the column of ID bit 7
	// In a reflected CRC a byte's bit 0 goes first, so bit b of the ID
	// sits one degree higher than bit b+1: its column is x times as much.
	for b := 6; b >= 0; b-- {
		x = mulx(x)
		if b < idColumnBits {
			col[b] = x
		}
	}
	return col
}

// mulx multiplies a reflected CRC-32 value by x modulo the IEEE
// polynomial.
func mulx(c uint32) uint32 {
	return c>>1 ^ 0xedb88320&-(c&1)
}

// idDeltas caches ID columns for the few packet lengths in use (a run's
// full-size segments and the lengths of its last ones).
type idDeltas struct {
	ent  [8]idEntry
	next int
}

type idEntry struct {
	n   int
	col [idColumnBits]uint32
}

// delta returns what to XOR into the ICRC of an n-byte InfiniBand packet
// computed for IP ID 0 to make it right for ID k (k < 64).
func (d *idDeltas) delta(n, k int) uint32 {
	var e *idEntry
	for i := range d.ent {
		if d.ent[i].n == n {
			e = &d.ent[i]
			break
		}
	}
	if e == nil {
		e = &d.ent[d.next]
		d.next = (d.next + 1) % len(d.ent)
		e.n, e.col = n, idColumns(n)
	}
	var x uint32
	for b := 0; k != 0 && b < idColumnBits; b, k = b+1, k>>1 {
		if k&1 != 0 {
			x ^= e.col[b]
		}
	}
	return x
}
