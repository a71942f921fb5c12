package hca_test

import (
	"context"
	"testing"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

// TestDestroyWaitsWithoutTheDeviceLock: ibv_destroy_qp waits until every
// asynchronous event reported about the QP was acknowledged. While one
// Destroy waits, the rest of the device keeps working: objects are
// created and registered, other QPs destroyed. (Issue 11: hca's Destroy
// waited a second time under the device's lock, so an event reported in
// between stopped every create and destroy on the device.)
func TestDestroyWaitsWithoutTheDeviceLock(t *testing.T) {
	d, err := hca.Open(hca.Config{})
	require.NoError(t, err)
	defer d.Close()
	pd, err := d.AllocPD()
	require.NoError(t, err)
	cq, err := d.CreateCQ(16, nil, nil, 0)
	require.NoError(t, err)
	srq, err := pd.CreateSRQ(&hca.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}})
	require.NoError(t, err)
	q, err := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	require.NoError(t, err)
	// A QP on an SRQ entering ERR raises IBV_EVENT_QP_LAST_WQE_REACHED.
	require.NoError(t, q.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState))
	ev, err := d.GetAsyncEvent(context.Background())
	require.NoError(t, err)
	require.Equal(t, verbs.EventQPLastWQEReached, ev.Type)

	destroyed := make(chan error, 1)
	go func() { destroyed <- q.Destroy(context.Background()) }()

	// Destroy waits for the acknowledgement; meanwhile the device works.
	other, err := d.AllocPD()
	require.NoError(t, err)
	_, err = other.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	require.NoError(t, err)
	q2, err := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeUD,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, q2.Destroy(context.Background()))
	select {
	case err := <-destroyed:
		t.Fatalf("Destroy returned (%v) before its event was acknowledged", err)
	default:
	}

	d.AckAsyncEvent(ev)
	select {
	case err := <-destroyed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Destroy did not return after the acknowledgement")
	}
}
