package cq

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

// releases records the tokens a Releaser is given, in order.
type releases []uint32

func (r *releases) Released(token uint32) { *r = append(*r, token) }

// TestPushReleaseOnPoll: a completion pushed with PushRelease is released
// when the application polls it, not when it is queued, and in order;
// ordinary completions around it release nothing.
func TestPushReleaseOnPoll(t *testing.T) {
	c, err := New(Config{CQE: 8, MaxCQE: 8})
	require.NoError(t, err)
	var got releases
	push := func(id uint64, token uint32, rel bool) {
		wc := verbs.WC{WRID: id}
		if rel {
			require.True(t, c.PushRelease(&wc, false, &got, token))
		} else {
			require.True(t, c.Push(&wc, false))
		}
	}
	push(1, 10, true)
	push(2, 0, false)
	push(3, 30, true)
	require.Empty(t, got, "nothing is released before a poll")

	wcs := make([]verbs.WC, 1)
	require.Equal(t, 1, c.Poll(wcs))
	require.Equal(t, uint64(1), wcs[0].WRID)
	require.Equal(t, releases{10}, got)
	require.Equal(t, 1, c.Poll(wcs))
	require.Equal(t, releases{10}, got, "an ordinary completion releases nothing")

	// Pushed after some polls: its position counts from there.
	push(4, 40, true)
	require.Equal(t, 1, c.Poll(wcs))
	require.Equal(t, uint64(3), wcs[0].WRID)
	require.Equal(t, releases{10, 30}, got)
	require.Equal(t, 1, c.Poll(wcs))
	require.Equal(t, releases{10, 30, 40}, got)
	require.Zero(t, c.Poll(wcs))
}

// TestPushReleaseMany: more due releases than one batch of releaseDue.
func TestPushReleaseMany(t *testing.T) {
	c, err := New(Config{CQE: 100, MaxCQE: 100})
	require.NoError(t, err)
	var got releases
	for i := range 40 {
		require.True(t, c.PushRelease(&verbs.WC{WRID: uint64(i)}, false, &got, uint32(i)))
	}
	wcs := make([]verbs.WC, 64)
	require.Equal(t, 40, c.Poll(wcs))
	require.Len(t, got, 40)
	for i, tok := range got {
		require.Equal(t, uint32(i), tok)
	}
}

// TestPushReleaseOverrun: a completion that does not fit is not queued and
// never released by the CQ (the caller releases it).
func TestPushReleaseOverrun(t *testing.T) {
	c, err := New(Config{CQE: 1, MaxCQE: 1})
	require.NoError(t, err)
	var got releases
	require.True(t, c.PushRelease(&verbs.WC{WRID: 1}, false, &got, 1))
	require.False(t, c.PushRelease(&verbs.WC{WRID: 2}, false, &got, 2))
	wcs := make([]verbs.WC, 4)
	require.Equal(t, 1, c.Poll(wcs))
	require.Equal(t, releases{1}, got)
}

// TestPushReleaseBounded: a CQ polled one completion at a time, never
// empty, keeps its release list as short as the completions it holds.
// The released prefix used to be reclaimed only when the list emptied, so
// a steady stream of matched messages grew it without bound.
func TestPushReleaseBounded(t *testing.T) {
	c, err := New(Config{CQE: 8, MaxCQE: 8})
	require.NoError(t, err)
	var got releases
	wcs := make([]verbs.WC, 1)
	require.True(t, c.PushRelease(&verbs.WC{}, false, &got, 0))
	for i := 1; i <= 10000; i++ {
		require.True(t, c.PushRelease(&verbs.WC{WRID: uint64(i)}, false, &got, uint32(i)))
		require.Equal(t, 1, c.Poll(wcs))
	}
	require.Len(t, got, 10000)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.LessOrEqual(t, cap(c.releases), 16, "releases kept for 1 pending completion")
}
