package hca_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
)

// readable polls fd without waiting.
func readable(t *testing.T, fd int) bool {
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	require.NoError(t, err)
	return n == 1 && p[0].Revents&unix.POLLIN != 0
}

// TestAsyncFD: the async fd (ibv_context.async_fd) polls readable exactly
// while an asynchronous event is queued: one queued before the first call
// counts, taking the last makes it quiet, and an event purged with its
// destroyed object takes its count back.
func TestAsyncFD(t *testing.T) {
	d, err := hca.Open(hca.Config{})
	require.NoError(t, err)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	cq, err := d.CreateCQ(16, nil, nil, 0)
	require.NoError(t, err)
	srq, err := pd.CreateSRQ(&hca.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}})
	require.NoError(t, err)
	newQP := func() *hca.QP {
		q, err := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: verbs.QPTypeRC,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
		require.NoError(t, err)
		return q
	}
	// A QP on an SRQ entering ERR raises IBV_EVENT_QP_LAST_WQE_REACHED.
	q := newQP()
	require.NoError(t, q.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState))
	fd := d.AsyncFD()
	require.GreaterOrEqual(t, fd, 0)
	require.Equal(t, fd, d.AsyncFD(), "one fd per device")
	require.True(t, readable(t, fd), "an event queued before the fd existed")
	ev, err := d.GetAsyncEvent(context.Background())
	require.NoError(t, err)
	require.Equal(t, verbs.EventQPLastWQEReached, ev.Type)
	require.False(t, readable(t, fd))
	d.AckAsyncEvent(ev)
	require.NoError(t, q.Destroy(context.Background()))

	// An event never taken leaves with its QP.
	q = newQP()
	require.NoError(t, q.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState))
	require.True(t, readable(t, fd))
	require.NoError(t, q.Destroy(context.Background()))
	require.False(t, readable(t, fd))

	require.NoError(t, d.Close())
	require.Equal(t, -1, d.AsyncFD(), "closed with the device")
}
