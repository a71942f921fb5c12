package testbench

import (
	"encoding/binary"
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// pattern returns n bytes that differ from packet to packet and position
// to position, so that misplaced data shows.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
	return b
}

// fill sets every byte of b to v.
func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

// untouched requires every byte of b to be v.
func untouched(t testing.TB, b []byte, v byte) {
	t.Helper()
	for i, x := range b {
		if x != v {
			t.Fatalf("byte %d of registered memory is %#x, want it untouched (%#x)", i, x, v)
		}
	}
}

func getU64(b []byte) uint64    { return binary.NativeEndian.Uint64(b) }
func putU64(b []byte, v uint64) { binary.NativeEndian.PutUint64(b, v) }

// psnp returns a pointer to a PSN, for Pkt.PSN.
func psnp(p wire.PSN) *wire.PSN { return &p }

// requireErrState requires the DUT QP to be in the error state.
func requireErrState(t testing.TB, c *RCConn) {
	t.Helper()
	require.Equal(t, verbs.QPStateErr.String(), c.State().String(), "DUT QP state")
}
