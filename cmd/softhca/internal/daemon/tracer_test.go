package daemon

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/stretchr/testify/require"
)

// TestTracerRing: the ring keeps the last packets; a reader behind by
// more than the ring loses the oldest and is told how many; recent
// starts a reader at the last n held; a packet longer than the slot is
// kept in part with its size.
func TestTracerRing(t *testing.T) {
	var clock time.Time
	tr := newTracer(4, func() time.Time { clock = clock.Add(time.Millisecond); return clock })
	rec := func(b byte) { tr.record(hca.Sent, &link.Packet{Buf: []byte{b}}) }
	out, next, lost, wake := tr.since(0, 0, nil)
	require.Empty(t, out)
	require.Zero(t, next)
	require.Zero(t, lost)
	rec(1)
	<-wake // closed by the record
	rec(2)
	out, next, lost, _ = tr.since(0, 0, nil)
	require.Len(t, out, 2)
	require.Equal(t, []byte{1}, out[0].data)
	require.True(t, out[1].at.After(out[0].at))
	require.Equal(t, uint64(2), next)
	require.Zero(t, lost)
	for b := byte(3); b <= 7; b++ {
		rec(b)
	}
	// 7 recorded (sequence numbers 0..6), 4 held (3..6, packets 4..7):
	// a reader at 2 lost packet 3.
	out, next, lost, _ = tr.since(2, 0, nil)
	require.Equal(t, uint64(1), lost)
	require.Equal(t, uint64(7), next)
	require.Len(t, out, 4)
	require.Equal(t, []byte{4}, out[0].data)
	out, _, _, _ = tr.since(3, 2, out) // max 2, buffer reused
	require.Len(t, out, 2)
	require.Equal(t, uint64(5), tr.recent(2))
	require.Equal(t, uint64(3), tr.recent(100)) // no more than the ring holds
	big := make([]byte, maxTraced+10)
	tr.record(hca.Received, &link.Packet{Buf: big})
	out, _, _, _ = tr.since(7, 0, nil)
	require.Len(t, out[0].data, maxTraced)
	require.Equal(t, maxTraced+10, out[0].size)
	require.Equal(t, hca.Received, out[0].dir)
	// A ring of 0 records nothing.
	none := newTracer(0, time.Now)
	none.record(hca.Sent, &link.Packet{Buf: []byte{1}})
	out, _, _, _ = none.since(0, 0, nil)
	require.Empty(t, out)
}

// TestTracerRecordAllocatesNothing: once the ring's buffers exist,
// recording a packet allocates nothing, whether or not a reader waits
// (the hook runs for every packet the device moves). It made a channel
// per packet.
func TestTracerRecordAllocatesNothing(t *testing.T) {
	tr := newTracer(4, time.Now)
	p := &link.Packet{Buf: make([]byte, 1024)}
	for range 4 {
		tr.record(hca.Sent, p) // each slot gets its buffer
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { tr.record(hca.Sent, p) }))
	// A reader waiting is woken by the next record, once.
	_, next, _, wake := tr.since(0, 0, nil)
	select {
	case <-wake:
		t.Fatal("woken before a packet came")
	default:
	}
	tr.record(hca.Received, p)
	<-wake
	out, _, _, _ := tr.since(next, 0, nil)
	require.Len(t, out, 1)
	require.Equal(t, hca.Received, out[0].dir)
}

// TestTracerSinceReusesBuffers: a reader's batch reuses the buffers of
// its previous one.
func TestTracerSinceReusesBuffers(t *testing.T) {
	tr := newTracer(8, time.Now)
	p := &link.Packet{Buf: make([]byte, 512)}
	for range 4 {
		tr.record(hca.Sent, p)
	}
	out, _, _, _ := tr.since(0, 0, nil)
	require.Zero(t, testing.AllocsPerRun(100, func() { out, _, _, _ = tr.since(0, 0, out) }))
	require.Len(t, out, 4)
}

// TestLogWriterBounded: a tool's output without a line end is logged in
// pieces of at most maxLogLine bytes, not held whole.
func TestLogWriterBounded(t *testing.T) {
	var out bytes.Buffer
	w := &logWriter{log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	chunk := bytes.Repeat([]byte("x"), 1000)
	for range 20 {
		_, err := w.Write(chunk)
		require.NoError(t, err)
		require.Less(t, len(w.buf), maxLogLine)
	}
	_, _ = w.Write([]byte("end\n"))
	require.Empty(t, w.buf)
	require.Equal(t, 5, bytes.Count(out.Bytes(), []byte("msg=output")))
}
