package hca_test

import (
	"context"
	"sync"
	"testing"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

// TestResources: the snapshot lists every live object with its numbers,
// links and queue depths, and nothing destroyed.
func TestResources(t *testing.T) {
	d, err := hca.Open(hca.Config{})
	require.NoError(t, err)
	defer d.Close()
	require.Equal(t, hca.Resources{}, d.Resources())

	pd1, err := d.AllocPD()
	require.NoError(t, err)
	pd2, err := d.AllocPD()
	require.NoError(t, err)
	ch, err := d.CreateCompChannel()
	require.NoError(t, err)
	cq1, err := d.CreateCQ(16, ch, nil, 0)
	require.NoError(t, err)
	cq2, err := d.CreateCQ(32, nil, nil, 0)
	require.NoError(t, err)
	buf := make([]byte, 4096)
	mr, err := pd1.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	s, err := pd1.CreateSRQ(&hca.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 8, MaxSGE: 1}})
	require.NoError(t, err)
	caps := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	rc, err := pd1.CreateQP(&hca.QPInitAttr{SendCQ: cq1, RecvCQ: cq2, QPType: verbs.QPTypeRC, Cap: caps})
	require.NoError(t, err)
	ud, err := pd1.CreateQP(&hca.QPInitAttr{SendCQ: cq2, RecvCQ: cq2, SRQ: s, QPType: verbs.QPTypeUD, Cap: caps, SQSigAll: true})
	require.NoError(t, err)
	require.NoError(t, rc.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	for i := range 3 {
		_, err = rc.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(0, 64)}})
		require.NoError(t, err)
	}
	_, err = s.PostRecv(&verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{mr.SGE(64, 64)}})
	require.NoError(t, err)

	r := d.Resources()
	require.Equal(t, []hca.PDInfo{{Handle: pd1.Handle(), Users: 4}, {Handle: pd2.Handle(), Users: 0}}, r.PDs)
	require.Equal(t, []hca.MRInfo{{LKey: mr.LKey(), RKey: mr.RKey(), PD: pd1.Handle(), Addr: mr.Addr(), Length: 4096,
		Access: verbs.AccessLocalWrite | verbs.AccessRemoteRead}}, r.MRs)
	require.Len(t, r.CQs, 2)
	require.Equal(t, hca.CQInfo{Num: 1, CQE: cq1.CQE(), Users: 1, Channel: true}, r.CQs[0])
	require.Equal(t, hca.CQInfo{Num: 2, CQE: cq2.CQE(), Users: 2}, r.CQs[1]) // rc receives into it, ud sends and receives
	require.Len(t, r.QPs, 2)
	q := r.QPs[0]
	require.Equal(t, rc.Num(), q.QPN)
	require.Equal(t, verbs.QPTypeRC, q.Type)
	require.Equal(t, verbs.QPStateInit, q.Attr.QPState)
	require.Equal(t, [3]uint32{pd1.Handle(), 1, 2}, [3]uint32{q.PD, q.SendCQ, q.RecvCQ})
	require.Equal(t, 3, q.RecvQueued)
	require.Zero(t, q.SRQ)
	q = r.QPs[1]
	require.Equal(t, ud.Num(), q.QPN)
	require.Equal(t, verbs.QPStateReset, q.Attr.QPState)
	require.Equal(t, uint32(1), q.SRQ)
	require.True(t, q.SQSigAll)
	require.Equal(t, []hca.SRQInfo{{Num: 1, PD: pd1.Handle(), Attr: s.Query(), Queued: 1, Users: 1}}, r.SRQs)

	// Destroyed objects leave the snapshot.
	ctx := context.Background()
	require.NoError(t, ud.Destroy(ctx))
	require.NoError(t, s.Destroy(ctx))
	require.NoError(t, pd2.Dealloc())
	r = d.Resources()
	require.Len(t, r.QPs, 1)
	require.Empty(t, r.SRQs)
	require.Equal(t, []hca.PDInfo{{Handle: pd1.Handle(), Users: 2}}, r.PDs)
	require.NoError(t, rc.Destroy(ctx))
	require.NoError(t, cq1.Destroy(ctx))
	require.NoError(t, mr.Dereg())
	r = d.Resources()
	require.Equal(t, []hca.CQInfo{{Num: 2, CQE: cq2.CQE()}}, r.CQs)
	require.Empty(t, r.MRs)
	require.Empty(t, r.QPs)
}

// TestResourcesConcurrent: snapshots taken while other goroutines create
// and destroy objects (run with -race) see each object whole or not at all.
func TestResourcesConcurrent(t *testing.T) {
	d, err := hca.Open(hca.Config{})
	require.NoError(t, err)
	defer d.Close()
	pd, err := d.AllocPD()
	require.NoError(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			r := d.Resources()
			for _, q := range r.QPs {
				if q.SendCQ == 0 || q.PD != pd.Handle() {
					t.Errorf("QP %#x half seen: %+v", q.QPN, q)
					return
				}
			}
		}
	}()
	ctx := context.Background()
	for range 200 {
		cq, err := d.CreateCQ(4, nil, nil, 0)
		require.NoError(t, err)
		q, err := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, q.Destroy(ctx))
		require.NoError(t, cq.Destroy(ctx))
	}
	close(stop)
	wg.Wait()
	require.Empty(t, d.Resources().QPs)
}
