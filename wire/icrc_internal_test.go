package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestCRCSmall compares the pseudo-header CRC with hash/crc32 for every
// length up to 200 bytes and random starting states.
func TestCRCSmall(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 200)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for n := range len(b) + 1 {
		for _, c := range []uint32{0, 0xffffffff, icrcLRH, r.Uint32()} {
			if got, want := crcSmall(c, b[:n]), crc32.Update(c, crc32.IEEETable, b[:n]); got != want {
				t.Fatalf("crcSmall(%#08x, %d bytes) = %#08x, want %#08x", c, n, got, want)
			}
		}
	}
}
