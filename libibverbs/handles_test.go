//go:build libibverbs

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHandleTable: a deleted or unknown handle yields nothing instead of
// panicking as cgo.Handle.Value does, so a verb on a destroyed object
// fails cleanly.
func TestHandleTable(t *testing.T) {
	var tb handleTable
	a, b := &pdObj{}, &mrObj{}
	ha, hb := tb.add(a), tb.add(b)
	require.NotZero(t, ha)
	require.NotEqual(t, ha, hb)
	require.Same(t, a, tb.get(ha))
	require.Same(t, b, tb.get(hb))
	tb.del(ha)
	require.Nil(t, tb.get(ha))
	tb.del(ha) // twice: nothing happens
	require.Nil(t, tb.get(0))
	require.Nil(t, tb.get(12345))
	require.Same(t, b, tb.get(hb))
}
