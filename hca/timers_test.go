package hca_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

// fakePair opens two devices over a pipe whose transports run on a manual
// clock.
func fakePair(t *testing.T) (*side, *side, *pipe.Endpoint, *pipe.Endpoint, *clock.Fake) {
	t.Helper()
	c := clock.NewFake(time.Unix(1000, 0))
	la, lb := pipe.New(pipe.Config{Seed: 1})
	open := func(l link.Link) *side {
		d, err := hca.Open(hca.Config{Link: l, Clock: c})
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		return sideOf(t, d, 1<<16)
	}
	return open(la), open(lb), la, lb, c
}

// until waits (yielding, bounded by a deadline) for cond to hold: the
// transport works on its own goroutines after each clock advance.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// TestRetryExceeded: with every packet to the responder lost, the
// requester retransmits retry_cnt times, one transport timeout apart, then
// completes the WQE with IBV_WC_RETRY_EXC_ERR, moves the QP to ERR and
// flushes the rest (IBTA 9.7.6.1.3).
func TestRetryExceeded(t *testing.T) {
	a, b, la, _, c := fakePair(t)
	connect(t, a, b, verbs.QPTypeRC, verbs.MTU1024)
	const timeout, retries = 12, 3 // 4.096 us * 2^12 = 16.8 ms
	for _, s := range []*side{a} {
		require.NoError(t, s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateSQD}, verbs.AttrState))
		require.NoError(t, s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateSQD, Timeout: timeout, RetryCnt: retries},
			verbs.AttrState|verbs.AttrTimeout|verbs.AttrRetryCnt))
		require.NoError(t, s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.AttrState))
	}
	la.SetFilter(func(*link.Packet) pipe.Verdict { return pipe.Drop })
	for i := range 3 {
		_, err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, 100)}, RDMA: verbs.RDMAInfo{RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		require.NoError(t, err)
	}
	period := 4096 * time.Nanosecond << timeout
	sent := func() uint64 { return a.dev.TransportStats().TxPackets }
	until(t, "the first transmission", func() bool { return sent() == 3 })
	for r := 1; r <= retries; r++ {
		c.Advance(period)
		until(t, "a retransmission", func() bool { return sent() == uint64(3+3*r) })
		require.Zero(t, a.cq.Poll(make([]verbs.WC, 1)), "no completion before the retries are spent")
	}
	c.Advance(period)
	wcs := waitWC(t, a, 3)
	require.Equal(t, verbs.WCRetryExcErr, wcs[0].Status, wcs[0].Status.String())
	require.Equal(t, uint64(0), wcs[0].WRID)
	for i, wc := range wcs[1:] {
		require.Equal(t, verbs.WCWRFlushErr, wc.Status)
		require.Equal(t, uint64(i+1), wc.WRID)
	}
	require.Equal(t, verbs.QPStateErr, a.qp.State())
	require.Equal(t, uint64(retries+1), a.dev.TransportStats().RetryTimeouts)
}

// TestRNRRetry: an RC SEND with no receive posted is RNR NAKed; the
// requester waits min_rnr_timer and retries, rnr_retry times, then
// completes with IBV_WC_RNR_RETRY_EXC_ERR. With a receive posted in time,
// the retry succeeds.
func TestRNRRetry(t *testing.T) {
	for _, postLate := range []bool{true, false} {
		name := "exhausted"
		if postLate {
			name = "receive-posted-in-time"
		}
		t.Run(name, func(t *testing.T) {
			a, b, _, _, c := fakePair(t)
			connect(t, a, b, verbs.QPTypeRC, verbs.MTU1024)
			const rnrRetry, rnrTimer = 2, 14 // timer code 14 = 1.28 ms
			require.NoError(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateSQD}, verbs.AttrState))
			require.NoError(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateSQD, RNRRetry: rnrRetry},
				verbs.AttrState|verbs.AttrRNRRetry))
			require.NoError(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.AttrState))
			require.NoError(t, b.qp.Modify(&verbs.QPAttr{MinRNRTimer: rnrTimer}, verbs.AttrMinRNRTimer))
			_, err := a.qp.PostSend(&verbs.SendWR{WRID: 7, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.mr.SGE(0, 32)}})
			require.NoError(t, err)
			rnr := func() uint64 { return a.dev.TransportStats().RNRNAKsReceived }
			wait := 1280 * time.Microsecond
			// The RNR timer is armed by the scheduler once the NAK was
			// handled: wait for it, not only for the counter, before the
			// clock moves.
			armed := func() bool { return c.PendingWithin(wait) > 0 }
			until(t, "the first RNR NAK", func() bool { return rnr() == 1 && armed() })
			if postLate {
				_, err := b.qp.PostRecv(&verbs.RecvWR{WRID: 8, SGList: []verbs.SGE{b.mr.SGE(0, 64)}})
				require.NoError(t, err)
				c.Advance(wait)
				wc := waitWC(t, a, 1)[0]
				require.Equal(t, verbs.WCSuccess, wc.Status, wc.Status.String())
				require.Equal(t, uint64(8), waitWC(t, b, 1)[0].WRID)
				return
			}
			for r := 1; r <= rnrRetry; r++ {
				c.Advance(wait)
				until(t, "another RNR NAK", func() bool { return rnr() == uint64(1+r) && (r == rnrRetry || armed()) })
			}
			wc := waitWC(t, a, 1)[0]
			require.Equal(t, verbs.WCRNRRetryExcErr, wc.Status, wc.Status.String())
			require.Equal(t, verbs.QPStateErr, a.qp.State())
			require.Equal(t, uint64(1+rnrRetry), b.dev.TransportStats().RNRNAKsSent)
		})
	}
}
