package clock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestFakeFiresInOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	c := NewFake(start)
	var got []string
	c.AfterFunc(3*time.Millisecond, func() { got = append(got, "c") })
	c.AfterFunc(1*time.Millisecond, func() {
		got = append(got, "a")
		c.AfterFunc(1*time.Millisecond, func() { got = append(got, "b") }) // due at 2 ms
	})
	stopped := c.AfterFunc(2*time.Millisecond, func() { got = append(got, "x") })
	require.True(t, stopped.Stop())
	require.False(t, stopped.Stop())
	require.Equal(t, 2, c.Pending())

	c.Advance(2 * time.Millisecond)
	require.Equal(t, []string{"a", "b"}, got)
	require.Equal(t, start.Add(2*time.Millisecond), c.Now())
	c.Advance(time.Millisecond)
	require.Equal(t, []string{"a", "b", "c"}, got)
	require.Equal(t, 0, c.Pending())
}

func TestFakeNowDuringCallback(t *testing.T) {
	c := NewFake(time.Unix(0, 0))
	var at time.Time
	c.AfterFunc(5*time.Second, func() { at = c.Now() })
	c.Advance(time.Minute)
	require.Equal(t, time.Unix(5, 0), at, "a timer sees the time it was due")
	require.Equal(t, time.Unix(60, 0), c.Now())
}

func TestFakeReset(t *testing.T) {
	c := NewFake(time.Unix(0, 0))
	n := 0
	tm := c.AfterFunc(time.Second, func() { n++ })
	c.Advance(500 * time.Millisecond)
	require.True(t, tm.Reset(time.Second)) // now due at 1.5 s
	c.Advance(600 * time.Millisecond)
	require.Equal(t, 0, n)
	c.Advance(400 * time.Millisecond)
	require.Equal(t, 1, n)
	require.False(t, tm.Reset(time.Second), "reset after firing re-arms it")
	c.Advance(time.Second)
	require.Equal(t, 2, n)
	require.Equal(t, 0, c.Pending())
}

func TestFakePendingWithin(t *testing.T) {
	c := NewFake(time.Unix(0, 0))
	c.AfterFunc(time.Millisecond, func() {})
	late := c.AfterFunc(time.Second, func() {})
	if n := c.PendingWithin(time.Millisecond); n != 1 {
		t.Fatalf("PendingWithin(1ms) = %d, want 1", n)
	}
	if n := c.PendingWithin(time.Second); n != 2 {
		t.Fatalf("PendingWithin(1s) = %d, want 2", n)
	}
	late.Stop()
	c.Advance(time.Millisecond)
	if n := c.PendingWithin(time.Hour); n != 0 {
		t.Fatalf("after the first fired and the second stopped: %d pending, want 0", n)
	}
}
