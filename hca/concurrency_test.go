package hca_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

// TestConcurrencySafety hammers one device from 16 goroutines: 8 post
// sends and receives to 4 RC QPs, 4 cycle the QPs through their states
// (RESET -> INIT -> RTR -> RTS <-> SQD -> ERR -> RESET), 2 poll the shared
// CQ and 2 arm it and take and acknowledge its completion events. Without
// a transport engine every accepted work request completes by being
// flushed (on entry to ERR, or at once when posted in ERR), and a QP is
// only reset from ERR, where its queues are empty. So every work request
// the device accepted must complete exactly once, and none it refused.
func TestConcurrencySafety(t *testing.T) {
	dev, err := hca.Open(hca.Config{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}})
	require.NoError(t, err)
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	buf := make([]byte, 1<<16)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	require.NoError(t, err)
	ch, err := dev.CreateCompChannel()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(32767, ch, nil, 0)
	require.NoError(t, err)
	gid, err := dev.QueryGID(1, 1)
	require.NoError(t, err)

	const nQP, postsPerPoster = 4, 300
	qps := make([]*hca.QP, nQP)
	for i := range qps {
		qps[i], err = pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
	}

	var accepted sync.Map // wr_id -> true
	var nAccepted atomic.Int64
	var wg sync.WaitGroup
	stopModify := make(chan struct{})
	stopPoll := make(chan struct{})

	// 8 posters.
	for p := 0; p < 8; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 1))
			// Post until postsPerPoster requests were accepted: a QP
			// refuses posts while in RESET (and sends in INIT and RTR).
			for i, ok := 0, 0; ok < postsPerPoster; i++ {
				q := qps[rng.IntN(nQP)]
				id := uint64(p)<<32 | uint64(i)
				sge := []verbs.SGE{mr.SGE((i%64)*1024, 64)}
				var err error
				if rng.IntN(2) == 0 {
					_, err = q.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SGList: sge})
				} else {
					_, err = q.PostRecv(&verbs.RecvWR{WRID: id, SGList: sge})
				}
				switch {
				case err == nil:
					accepted.Store(id, true)
					nAccepted.Add(1)
					ok++
				case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOMEM):
					runtime.Gosched()
				default:
					t.Errorf("post: unexpected error %v", err)
					return
				}
			}
		}()
	}

	// 4 modifiers, one per QP.
	var modWG sync.WaitGroup
	for i, q := range qps {
		modWG.Add(1)
		go func() {
			defer modWG.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			mod := func(a verbs.QPAttr, m verbs.QPAttrMask) {
				if err := q.Modify(&a, m|verbs.AttrState); err != nil {
					t.Errorf("QP %#x modify to %s: %v", q.Num(), a.QPState, err)
				}
			}
			for {
				select {
				case <-stopModify:
					return
				default:
				}
				// RESET -> INIT -> RTR -> RTS, pointed at itself.
				if err := q.Connect(hca.Remote{QPN: q.Num(), GID: gid}, nil); err != nil {
					t.Errorf("QP %#x: %v", q.Num(), err)
				}
				// Leave the QP in RTS until the posters made some
				// progress (or a bounded number of yields passed, as
				// full queues refuse posts until the next flush).
				for start, y := nAccepted.Load(), 0; nAccepted.Load() < start+8 && y < 1000; y++ {
					runtime.Gosched()
				}
				for k := rng.IntN(3); k > 0; k-- {
					mod(verbs.QPAttr{QPState: verbs.QPStateSQD}, 0)
					mod(verbs.QPAttr{QPState: verbs.QPStateRTS}, 0)
				}
				mod(verbs.QPAttr{QPState: verbs.QPStateErr}, 0)
				mod(verbs.QPAttr{QPState: verbs.QPStateReset}, 0)
			}
		}()
	}

	// 2 pollers.
	var completed sync.Map
	var nCompleted atomic.Int64
	poll := func() int {
		wcs := make([]verbs.WC, 32)
		n := cq.Poll(wcs)
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCWRFlushErr {
				t.Errorf("wr_id %#x: status %s, want flush", wc.WRID, wc.Status)
			}
			if _, dup := completed.LoadOrStore(wc.WRID, true); dup {
				t.Errorf("wr_id %#x completed twice", wc.WRID)
			}
			nCompleted.Add(1)
		}
		return n
	}
	var pollWG sync.WaitGroup
	for range 2 {
		pollWG.Add(1)
		go func() {
			defer pollWG.Done()
			for {
				select {
				case <-stopPoll:
					return
				default:
					if poll() == 0 {
						runtime.Gosched()
					}
				}
			}
		}()
	}

	// 2 armers: arm, take an event, acknowledge it.
	ctx, cancel := context.WithCancel(context.Background())
	var events, acked atomic.Int64
	var armWG sync.WaitGroup
	for range 2 {
		armWG.Add(1)
		go func() {
			defer armWG.Done()
			for {
				if err := cq.ReqNotify(false); err != nil {
					t.Errorf("req_notify: %v", err)
					return
				}
				c, err := ch.GetEvent(ctx)
				if err != nil {
					return // cancelled at the end
				}
				if c != cq {
					t.Errorf("event for another CQ")
				}
				events.Add(1)
				cq.AckEvents(1)
				acked.Add(1)
			}
		}()
	}

	wg.Wait() // the posters are done: stop the modifiers
	close(stopModify)
	modWG.Wait()
	for _, q := range qps {
		require.NoError(t, q.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState))
	}
	close(stopPoll)
	pollWG.Wait()
	for poll() > 0 {
	}
	cancel()
	armWG.Wait()

	require.Equal(t, nAccepted.Load(), nCompleted.Load(), "every accepted WR completes exactly once")
	accepted.Range(func(k, _ any) bool {
		if _, ok := completed.Load(k); !ok {
			t.Errorf("wr_id %#x accepted but never completed", k)
		}
		return true
	})
	require.Greater(t, nAccepted.Load(), int64(0))
	require.Equal(t, events.Load(), acked.Load())
	t.Logf("%d WRs accepted and completed, %d completion events", nAccepted.Load(), events.Load())

	for _, q := range qps {
		require.NoError(t, q.Destroy(context.Background()))
	}
	require.NoError(t, cq.Destroy(context.Background()), "every event was acknowledged")
}
