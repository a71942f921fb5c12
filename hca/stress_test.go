package hca_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

// The stress tests below attack the lifecycle verbs (destroy, deregister,
// close, modify) while traffic flows and other goroutines poll and post,
// as a careless application would, in each way a device can run: over
// link/pipe and over UDP loopback with the transport's own goroutines,
// and over UDP with Config.BusyPoll, where the application's polls and
// posts run the transport's turns in their own goroutines.

// stressMode is a way of opening the two devices of a stress test.
type stressMode struct {
	name string
	busy bool
	open func(t *testing.T, memSize int) (*side, *side)
}

var stressModes = []stressMode{
	{"pipe", false, func(t *testing.T, memSize int) (*side, *side) {
		la, lb := pipe.New(pipe.Config{Seed: 7})
		return openSide(t, la, memSize), openSide(t, lb, memSize)
	}},
	{"udp", false, func(t *testing.T, memSize int) (*side, *side) {
		return udpPairConfig(t, true, memSize, hca.Config{})
	}},
	{"udp-busypoll", true, func(t *testing.T, memSize int) (*side, *side) {
		return udpPairConfig(t, true, memSize, hca.Config{BusyPoll: true})
	}},
}

// eachStressMode runs f as a subtest in every stress mode.
func eachStressMode(t *testing.T, f func(t *testing.T, m stressMode)) {
	for _, m := range stressModes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// stressConnect connects a and b's RC QPs with the default local ACK
// timeout (4.096 us * 2^14, about 67 ms; with goroutines spinning on Poll
// on both cores, Go's network poller may run only every 10 ms, so a
// shorter one retries out on a healthy connection) and 2 retries, so
// that a requester whose peer is gone gives up within a quarter second.
func stressConnect(t *testing.T, a, b *side) {
	t.Helper()
	connectWith(t, a, b, verbs.QPTypeRC, verbs.MTU1024, func(o *hca.ConnectOptions) {
		o.Timeout, o.RetryCnt = 14, 2
	})
}

// stressFill fills b with a pattern that names seed at every 8 bytes.
func stressFill(b []byte, seed uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], seed<<20|uint64(i))
	}
}

// stressDone waits for wg with a deadline: a hang guard, not a timer the
// test relies on.
func stressDone(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("%s did not return\n%s", what, buf[:runtime.Stack(buf, true)])
	}
}

// wcLog records completions taken by several goroutines: each wr_id at
// most once.
type wcLog struct {
	mu  sync.Mutex
	wcs map[uint64]verbs.WC
	dup []uint64
}

func newWCLog() *wcLog { return &wcLog{wcs: map[uint64]verbs.WC{}} }

func (l *wcLog) add(wcs []verbs.WC) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, wc := range wcs {
		if _, ok := l.wcs[wc.WRID]; ok {
			l.dup = append(l.dup, wc.WRID)
		}
		l.wcs[wc.WRID] = wc
	}
}

func (l *wcLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.wcs)
}

func (l *wcLog) snapshot() map[uint64]verbs.WC {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[uint64]verbs.WC, len(l.wcs))
	for k, v := range l.wcs {
		m[k] = v
	}
	return m
}

// pollLoops starts two goroutines on cq, counted in wg: a Poll loop that
// runs until stop is closed, and a PollWait loop (with ctx) that runs
// until PollWait fails, which it must with an error expected accepts.
// Every completion either takes goes to log.
func pollLoops(t *testing.T, wg *sync.WaitGroup, cq *hca.CQ, log *wcLog, stop <-chan struct{}, ctx context.Context, expected func(error) bool) {
	wg.Add(2)
	go func() {
		defer wg.Done()
		wcs := make([]verbs.WC, 8)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n := cq.Poll(wcs)
			log.add(wcs[:n])
			if n == 0 {
				runtime.Gosched()
			}
		}
	}()
	go func() {
		defer wg.Done()
		wcs := make([]verbs.WC, 8)
		for {
			n, err := cq.PollWait(ctx, wcs)
			log.add(wcs[:n])
			if err != nil {
				if !expected(err) {
					t.Errorf("PollWait: %v", err)
				}
				return
			}
		}
	}()
}

// sendStream starts a goroutine, counted in wg, that sends nSend signaled
// SENDs of size bytes on a's QP (the i-th from a's region at i*size, with
// wr_id i), at most 32 outstanding, and polls a's CQ into log until all
// have completed. With a non-nil hold, the SENDs from holdAt on are posted
// only once hold is closed.
func sendStream(t *testing.T, wg *sync.WaitGroup, a *side, log *wcLog, nSend, size int, hold <-chan struct{}, holdAt int) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		wcs := make([]verbs.WC, 16)
		held := func(posted int) bool {
			if hold == nil || posted < holdAt {
				return false
			}
			select {
			case <-hold:
				return false
			default:
				return true
			}
		}
		for posted := 0; log.len() < nSend; {
			for posted < nSend && posted-log.len() < 32 && !held(posted) {
				if _, err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(posted), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
					SGList: []verbs.SGE{a.mr.SGE(posted*size, size)}}); err != nil {
					t.Errorf("post_send %d: %v", posted, err)
					return
				}
				posted++
			}
			n := a.cq.Poll(wcs)
			log.add(wcs[:n])
			if n == 0 {
				runtime.Gosched()
			}
		}
	}()
}

// postRecvs posts n receives on s's QP, the i-th with wr_id first+i into
// s's region at i*size, size bytes.
func postRecvs(t *testing.T, s *side, first uint64, n, size int) {
	t.Helper()
	for i := range n {
		_, err := s.qp.PostRecv(&verbs.RecvWR{WRID: first + uint64(i), SGList: []verbs.SGE{s.mr.SGE(i*size, size)}})
		require.NoError(t, err)
	}
}

// destroyedDrops is how many packets b's transport dropped for a QP that
// is gone (destroyed while they waited, or no longer in the table).
func destroyedDrops(d *hca.Device) uint64 {
	n := d.TransportStats().DropNames()
	return n["unknown destination QP"] + n["QP destroyed"]
}

// TestStressDestroyQPUnderFire destroys a receiving RC QP, then its CQ,
// while its peer keeps sending to it (the second half of its SENDs posted
// once Destroy has returned) and other goroutines poll the CQ (Poll and
// PollWait; with BusyPoll they drive the transport). It
// asserts that Destroy returns; that every SEND the peer saw acknowledged
// was delivered (its receive completed successfully with the right
// bytes) before Destroy returned; that once Destroy returned no
// completion reaches the CQ, although the peer's packets still arrive
// (and are dropped as for a destroyed QP); that the CQ can then be
// destroyed under its pollers, whose PollWait returns EINVAL; and that
// the peer's work requests each complete once, successfully or with a
// retry error and then flushes.
func TestStressDestroyQPUnderFire(t *testing.T) {
	eachStressMode(t, func(t *testing.T, m stressMode) {
		const (
			size   = 2000
			nRecv  = 200
			nSend  = 200
			before = 20 // receives completed before the Destroy
		)
		a, b := m.open(t, 1<<20)
		stressConnect(t, a, b)
		for i := range nSend {
			stressFill(a.buf[i*size:][:size], uint64(i)+1)
		}
		postRecvs(t, b, 0, nRecv, size)

		// The peer: post every SEND, at most 32 outstanding, and take
		// its completions until each has one. The second half waits for
		// the Destroy to return, so that packets for the destroyed QP
		// come however fast the first half went (all 200 could complete
		// before the Destroy when the pollers outran the test goroutine).
		aLog := newWCLog()
		var aWG sync.WaitGroup
		destroyed := make(chan struct{})
		var release sync.Once // on the way out too, should a require fail first
		defer release.Do(func() { close(destroyed) })
		sendStream(t, &aWG, a, aLog, nSend, size, destroyed, nSend/2)

		// b's pollers: one Poll loop, one PollWait loop.
		bLog := newWCLog()
		startPollers := func(stop chan struct{}, ctx context.Context) *sync.WaitGroup {
			var wg sync.WaitGroup
			pollLoops(t, &wg, b.cq, bLog, stop, ctx, func(err error) bool {
				return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EINTR)
			})
			return &wg
		}
		ctx1, cancel1 := context.WithCancel(context.Background())
		stop1 := make(chan struct{})
		pollers := startPollers(stop1, ctx1)

		until(t, "the first receives", func() bool { return bLog.len() >= before })
		dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer dcancel()
		require.NoError(t, b.qp.Destroy(dctx))
		dropsAtDestroy := destroyedDrops(b.dev)
		release.Do(func() { close(destroyed) })

		// Stop the pollers and take what the CQ still holds: all of it
		// was pushed before Destroy returned.
		close(stop1)
		cancel1()
		stressDone(t, pollers, "b's pollers")
		wcs := make([]verbs.WC, 64)
		for n := b.cq.Poll(wcs); n > 0; n = b.cq.Poll(wcs) {
			bLog.add(wcs[:n])
		}
		delivered := bLog.snapshot()

		// Poll on while the peer's packets keep arriving: nothing more
		// may come, and the CQ is destroyed under the pollers.
		ctx2, cancel2 := context.WithCancel(context.Background())
		defer cancel2()
		stop2 := make(chan struct{})
		pollers = startPollers(stop2, ctx2)
		until(t, "the peer's packets for the destroyed QP", func() bool { return destroyedDrops(b.dev) > dropsAtDestroy })
		aDone := make(chan struct{})
		go func() { aWG.Wait(); close(aDone) }()
		select {
		case <-aDone:
		case <-time.After(20 * time.Second):
			t.Fatalf("the peer's %d sends did not all complete: %d did", nSend, aLog.len())
		}
		require.NoError(t, b.cq.Destroy(dctx), "no QP uses the CQ any more")
		close(stop2)
		stressDone(t, pollers, "b's pollers after the CQ's destroy") // PollWait: EINVAL
		require.Equal(t, delivered, bLog.snapshot(), "a completion reached the CQ after Destroy returned")
		require.Empty(t, bLog.dup, "a receive completed twice")

		for id, wc := range delivered {
			require.Equal(t, verbs.WCSuccess, wc.Status, "receive %d: %s", id, wc.Status)
			require.Equal(t, uint32(size), wc.ByteLen)
			require.True(t, bytes.Equal(a.buf[int(id)*size:][:size], b.buf[int(id)*size:][:size]), "receive %d holds another message", id)
		}
		// The peer: successes first, in order, each delivered; then at
		// most one retry error; then flushes.
		aWCs := aLog.snapshot()
		require.Empty(t, aLog.dup, "a send completed twice")
		require.Len(t, aWCs, nSend)
		phase := 0
		for i := range uint64(nSend) {
			wc := aWCs[i]
			switch {
			case wc.Status == verbs.WCSuccess && phase == 0:
				_, ok := delivered[i]
				require.True(t, ok, "send %d was acknowledged but its receive never completed", i)
			case wc.Status == verbs.WCRetryExcErr && phase == 0:
				phase = 1
			case wc.Status == verbs.WCWRFlushErr:
				phase = 2
			default:
				t.Fatalf("send %d: %s after %d sends in phase %d", i, wc.Status, i, phase)
			}
		}
		t.Logf("%d receives before the Destroy; %d packets dropped after it", len(delivered), destroyedDrops(b.dev)-dropsAtDestroy)
	})
}

// TestStressDeregUnderRDMA deregisters memory regions while RDMA WRITEs
// and READs into and from them are in flight: the responder's target
// region (WRITEs land in it, READs read it), and the requester's own
// WRITE source and READ sink. At once after each Dereg the test writes a
// guard pattern over the region (the memory is the application's again),
// which the race detector reports if the transport touches the region
// later, and which must be intact at the end. Every work request
// completes once: successfully (a WRITE's bytes then in the target as
// it was when its Dereg returned; a READ's bytes those of the target), or
// with a remote access or local protection error, then flushes. With
// BusyPoll a goroutine polls the responder's CQ throughout, driving its
// transport.
func TestStressDeregUnderRDMA(t *testing.T) {
	eachStressMode(t, func(t *testing.T, m stressMode) {
		for round, name := range []string{"target", "source", "sink"} {
			t.Run(name, func(t *testing.T) { stressDereg(t, m, round) })
		}
	})
}

func stressDereg(t *testing.T, m stressMode, round int) {
	const (
		size  = 8 << 10
		slots = 32  // per region half
		nWR   = 240 // WRITEs and READs alternating
		depth = 16
	)
	a, b := m.open(t, 1<<12)
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	// b's target: WRITEs land in the first half, READs read the second.
	tbuf := make([]byte, 2*slots*size)
	stressFill(tbuf[slots*size:], 0xbb)
	tmr, err := b.pd.RegMR(tbuf, acc)
	require.NoError(t, err)
	// a's WRITE source and READ sink.
	src := make([]byte, slots*size)
	for i := range slots {
		stressFill(src[i*size:][:size], 0xa0+uint64(i))
	}
	sink := make([]byte, slots*size)
	smr, err := a.pd.RegMR(src, acc)
	require.NoError(t, err)
	kmr, err := a.pd.RegMR(sink, acc)
	require.NoError(t, err)
	stressConnect(t, a, b)
	guard := func(buf []byte) { stressFill(buf, 0x6a4d) }

	// b: deregister the target at a moment a's loop picks; a goroutine
	// polls b's CQ meanwhile (nothing completes on it: with BusyPoll it
	// drives b's transport).
	derefTarget := make(chan struct{})
	var tSnap []byte
	var bWG sync.WaitGroup
	stop := make(chan struct{})
	bWG.Add(2)
	go func() {
		defer bWG.Done()
		<-derefTarget
		if err := tmr.Dereg(); err != nil {
			t.Errorf("dereg of the target: %v", err)
		}
		tSnap = append([]byte(nil), tbuf...)
		guard(tbuf)
	}()
	go func() {
		defer bWG.Done()
		wcs := make([]verbs.WC, 4)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := b.cq.Poll(wcs); n > 0 {
				t.Errorf("b completed %+v", wcs[:n])
			}
			runtime.Gosched()
		}
	}()

	// a: WRITEs and READs, depth in flight; after at a chosen number of
	// completions, the round's Dereg: b's target (round 0), a's WRITE
	// source (1) or a's READ sink (2). The other regions go at the end.
	at := 15 + 20*round
	var srcGone, sinkGone bool
	wcs := make([]verbs.WC, 16)
	got := map[uint64]verbs.WC{}
	posted := 0
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < nWR {
		require.False(t, time.Now().After(deadline), "%d of %d completions", len(got), nWR)
		for posted < nWR && posted-len(got) < depth {
			i := posted
			wr := &verbs.SendWR{WRID: uint64(i), SendFlags: verbs.SendSignaled}
			if i%2 == 0 {
				wr.Opcode = verbs.WRRDMAWrite
				wr.SGList = []verbs.SGE{smr.SGE((i/2%slots)*size, size)}
				wr.RDMA = verbs.RDMAInfo{RemoteAddr: tmr.Addr() + uint64((i/2%slots)*size), RKey: tmr.RKey()}
			} else {
				wr.Opcode = verbs.WRRDMARead
				wr.SGList = []verbs.SGE{kmr.SGE((i/2%slots)*size, size)}
				wr.RDMA = verbs.RDMAInfo{RemoteAddr: tmr.Addr() + uint64((slots+i/2%slots)*size), RKey: tmr.RKey()}
			}
			_, err := a.qp.PostSend(wr)
			require.NoError(t, err, "post %d", i)
			posted++
		}
		n := a.cq.Poll(wcs)
		for _, wc := range wcs[:n] {
			_, dup := got[wc.WRID]
			require.False(t, dup, "wr %d completed twice", wc.WRID)
			got[wc.WRID] = wc
			i := int(wc.WRID)
			if wc.Status == verbs.WCSuccess && i%2 == 1 && !sinkGone {
				// A READ: the bytes of the target's second half.
				off := (i / 2 % slots) * size
				require.True(t, bytes.Equal(tbufPattern(slots, size, i/2%slots), sink[off:off+size]), "READ %d returned other bytes", i)
			}
		}
		if len(got) >= at && at >= 0 {
			switch round {
			case 0:
				close(derefTarget)
			case 1:
				require.NoError(t, smr.Dereg())
				guard(src)
				srcGone = true
			case 2:
				require.NoError(t, kmr.Dereg())
				guard(sink)
				sinkGone = true
			}
			at = -1
		}
		if n == 0 {
			runtime.Gosched()
		}
	}
	if round != 0 {
		close(derefTarget)
	}
	close(stop)
	stressDone(t, &bWG, "b's goroutines")
	if !srcGone {
		require.NoError(t, smr.Dereg())
		guard(src)
	}
	if !sinkGone {
		require.NoError(t, kmr.Dereg())
		guard(sink)
	}
	// Nothing may touch the regions from here on either.
	require.NoError(t, a.dev.Close())
	require.NoError(t, b.dev.Close())
	g := make([]byte, len(tbuf))
	guard(g)
	require.True(t, bytes.Equal(g, tbuf), "the target changed after its Dereg returned")
	require.True(t, bytes.Equal(g[:len(src)], src), "the WRITE source changed after its Dereg returned")
	require.True(t, bytes.Equal(g[:len(sink)], sink), "the READ sink changed after its Dereg returned")

	// Statuses: successes, then one error (a remote access error once the
	// target is gone, a local protection error once the source or sink
	// is), then flushes.
	wantErr := map[int]verbs.WCStatus{0: verbs.WCRemAccessErr, 1: verbs.WCLocProtErr, 2: verbs.WCLocProtErr}[round]
	phase := 0
	counts := map[verbs.WCStatus]int{}
	for i := range uint64(nWR) {
		wc := got[i]
		counts[wc.Status]++
		switch {
		case wc.Status == verbs.WCSuccess && phase == 0:
			if i%2 == 0 {
				// A WRITE that completed landed before the Dereg
				// returned.
				off := int(i/2%slots) * size
				require.True(t, bytes.Equal(srcPattern(size, int(i/2%slots)), tSnap[off:off+size]), "WRITE %d did not land", i)
			}
		case wc.Status == wantErr && phase == 0:
			phase = 1
		case wc.Status == verbs.WCWRFlushErr && phase == 1:
		default:
			t.Fatalf("wr %d (%s): %s in phase %d", i, map[bool]string{true: "WRITE", false: "READ"}[i%2 == 0], wc.Status, phase)
		}
	}
	t.Logf("statuses %v", counts)
}

// tbufPattern is the pattern of slot k of the target's second half.
func tbufPattern(slots, size, k int) []byte {
	half := make([]byte, slots*size)
	stressFill(half, 0xbb)
	return half[k*size : (k+1)*size]
}

// srcPattern is the pattern of slot k of the WRITE source.
func srcPattern(size, k int) []byte {
	b := make([]byte, size)
	stressFill(b, 0xa0+uint64(k))
	return b
}

// TestStressCloseDeviceInUse closes a device while its goroutines are
// inside CQ.Poll, CQ.PollWait, QP.PostSend (two at once, on one QP) and
// CompChannel.GetEvent. Each must return, none may panic: Close returns;
// every send and receive the device accepted completes exactly once
// (sends successfully, then flushed; receives flushed), posts after the
// Close included; the CQ armed on a channel fires for the flushes, so
// GetEvent returns its event; PollWait returns its completions, and
// EINTR only when its context ends; and every send that completed
// successfully was received by the peer.
func TestStressCloseDeviceInUse(t *testing.T) {
	eachStressMode(t, func(t *testing.T, m stressMode) {
		const nRecv = 64
		a, b := m.open(t, 1<<20)
		stressConnect(t, a, b)
		postRecvs(t, a, 0, 256, 64)
		postRecvs(t, b, 1<<40, nRecv, 64)
		// A second CQ, armed on a channel of its own, with one receive
		// outstanding on a QP in INIT.
		ch2, err := b.dev.CreateCompChannel()
		require.NoError(t, err)
		cq2, err := b.dev.CreateCQ(4, ch2, nil, 0)
		require.NoError(t, err)
		q2, err := b.pd.CreateQP(&hca.QPInitAttr{SendCQ: cq2, RecvCQ: cq2, QPType: verbs.QPTypeRC,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, q2.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		_, err = q2.PostRecv(&verbs.RecvWR{WRID: 77, SGList: []verbs.SGE{b.mr.SGE(1<<19, 64)}})
		require.NoError(t, err)
		require.NoError(t, cq2.ReqNotify(false))

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		pollCtx, stopPollWait := context.WithCancel(ctx)
		defer stopPollWait()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		bLog := newWCLog()
		var accepted sync.Map
		var nAccepted atomic.Int64

		// GetEvent: returns once Close flushes q2's receive.
		event := make(chan error, 1)
		go func() {
			c, err := ch2.GetEvent(ctx)
			if err == nil && c != cq2 {
				err = fmt.Errorf("event for another CQ")
			}
			event <- err
		}()
		// Two posters on b's QP.
		var posters sync.WaitGroup
		for p := range 2 {
			posters.Add(1)
			go func() {
				defer posters.Done()
				for i := uint64(0); ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if nAccepted.Load()+nRecv-int64(bLog.len()) > 512 {
						runtime.Gosched() // the CQ (1024 entries) must not overrun
						continue
					}
					id := uint64(p)<<32 | i
					_, err := b.qp.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
						SGList: []verbs.SGE{b.mr.SGE(1<<18+p*64, 64)}})
					switch {
					case err == nil:
						accepted.Store(id, true)
						nAccepted.Add(1)
					case errors.Is(err, syscall.ENOMEM):
						runtime.Gosched()
					default:
						t.Errorf("post_send: %v", err)
						return
					}
				}
			}()
		}
		// A Poll loop and a PollWait loop on b's CQ.
		pollLoops(t, &wg, b.cq, bLog, stop, pollCtx, func(err error) bool {
			return errors.Is(err, syscall.EINTR) && ctx.Err() == nil
		})

		until(t, "sends to complete before the Close", func() bool { return bLog.len() >= 20 })
		closed := make(chan error, 1)
		go func() { closed <- b.dev.Close() }()
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatal("Close did not return")
		}
		select {
		case err := <-event:
			require.NoError(t, err, "GetEvent")
		case <-ctx.Done():
			t.Fatal("GetEvent did not return after the Close flushed its CQ")
		}
		cq2.AckEvents(1)
		// Posts go on after the Close for a while: they are flushed.
		afterClose := nAccepted.Load()
		until(t, "posts after the Close", func() bool { return nAccepted.Load() > afterClose+10 })
		close(stop)
		stressDone(t, &posters, "the goroutines in PostSend")
		for deadline := time.Now().Add(5 * time.Second); bLog.len() < int(nAccepted.Load())+nRecv; runtime.Gosched() {
			if time.Now().After(deadline) {
				log := bLog.snapshot()
				accepted.Range(func(k, _ any) bool {
					if _, ok := log[k.(uint64)]; !ok {
						t.Errorf("send %#x accepted, never completed", k)
					}
					return true
				})
				t.Fatalf("%d of %d requests completed; QP %s", len(log), nAccepted.Load()+nRecv, b.qp.State())
			}
		}
		stopPollWait()
		stressDone(t, &wg, "the goroutines in Poll, PollWait and PostSend")
		wcs := make([]verbs.WC, 4)
		require.Zero(t, b.cq.Poll(wcs), "nothing more")
		require.Equal(t, 1, cq2.Poll(wcs))
		require.Equal(t, verbs.WCWRFlushErr, wcs[0].Status)

		require.Empty(t, bLog.dup, "a request completed twice")
		log := bLog.snapshot()
		successes := 0
		accepted.Range(func(k, _ any) bool {
			wc, ok := log[k.(uint64)]
			if !ok {
				t.Errorf("send %#x accepted, never completed", k)
			} else if wc.Status == verbs.WCSuccess {
				successes++
			} else if wc.Status != verbs.WCWRFlushErr {
				t.Errorf("send %#x: %s", k, wc.Status)
			}
			return true
		})
		for i := range nRecv {
			wc, ok := log[1<<40|uint64(i)]
			require.True(t, ok, "receive %d never completed", i)
			require.Equal(t, verbs.WCWRFlushErr, wc.Status, "receive %d: nothing was sent to it", i)
		}
		// Each send that b saw acknowledged was received by a.
		received := 0
		until(t, "a's receives", func() bool {
			received += a.cq.Poll(make([]verbs.WC, 64))
			return received >= successes
		})
		t.Logf("%d sends accepted, %d completed successfully", nAccepted.Load(), successes)
	})
}

// TestStressModifyUnderPolling moves a receiving RC QP to ERR (round 0)
// or straight to RESET (round 1) while its peer streams SENDs to it and
// two goroutines poll its CQ (with BusyPoll, driving the transport that
// runs the QP), then reconnects both QPs with new PSNs and checks that
// the connection works again. Every receive completes at most once;
// before the change successfully with the peer's bytes, after ERR with
// a flush (RESET discards them); the peer's sends succeed, then fail
// once and flush; and after the reconnection a SEND carries its bytes and
// nothing of the old traffic comes back.
func TestStressModifyUnderPolling(t *testing.T) {
	eachStressMode(t, func(t *testing.T, m stressMode) {
		for round, to := range []verbs.QPState{verbs.QPStateErr, verbs.QPStateReset} {
			t.Run(to.String(), func(t *testing.T) { stressModify(t, m, round, to) })
		}
	})
}

func stressModify(t *testing.T, m stressMode, round int, to verbs.QPState) {
	const (
		size  = 1500
		nRecv = 200
		nSend = 200
	)
	a, b := m.open(t, 1<<20)
	stressConnect(t, a, b)
	for i := range nSend {
		stressFill(a.buf[i*size:][:size], uint64(round*1000+i)+1)
	}
	postRecvs(t, b, 0, nRecv, size)
	aLog := newWCLog()
	var aWG sync.WaitGroup
	sendStream(t, &aWG, a, aLog, nSend, size, nil, 0)
	bLog := newWCLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pollers sync.WaitGroup
	for k := range 2 {
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			wcs := make([]verbs.WC, 8)
			for ctx.Err() == nil {
				var n int
				if k == 0 {
					n = b.cq.Poll(wcs)
					if n == 0 {
						runtime.Gosched()
					}
				} else {
					n, _ = b.cq.PollWait(ctx, wcs)
				}
				bLog.add(wcs[:n])
			}
		}()
	}

	until(t, "the first receives", func() bool { return bLog.len() >= 20 })
	require.NoError(t, b.qp.Modify(&verbs.QPAttr{QPState: to}, verbs.AttrState))
	atChange := bLog.len()
	if to == verbs.QPStateErr {
		until(t, "the receives to flush", func() bool { return bLog.len() == nRecv })
		require.NoError(t, b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.AttrState))
	}
	aDone := make(chan struct{})
	go func() { aWG.Wait(); close(aDone) }()
	select {
	case <-aDone:
	case <-time.After(20 * time.Second):
		t.Fatalf("the peer's sends did not all complete: %d did", aLog.len())
	}
	require.Empty(t, aLog.dup)
	aWCs := aLog.snapshot()
	bWCs := bLog.snapshot()
	phase := 0
	for i := range uint64(nSend) {
		switch wc := aWCs[i]; {
		case wc.Status == verbs.WCSuccess && phase == 0:
			_, ok := bWCs[i]
			require.True(t, ok, "send %d was acknowledged, its receive did not complete", i)
		case wc.Status == verbs.WCRetryExcErr && phase == 0:
			phase = 1
		case wc.Status == verbs.WCWRFlushErr && phase == 1:
		default:
			t.Fatalf("send %d: %s in phase %d", i, wc.Status, phase)
		}
	}
	require.Empty(t, bLog.dup, "a receive completed twice")
	for id, wc := range bWCs {
		if wc.Status == verbs.WCSuccess {
			require.True(t, bytes.Equal(a.buf[int(id)*size:][:size], b.buf[int(id)*size:][:size]), "receive %d holds other bytes", id)
			continue
		}
		require.Equal(t, verbs.QPStateErr, to, "receive %d: %s, but RESET completes nothing", id, wc.Status)
		require.Equal(t, verbs.WCWRFlushErr, wc.Status, "receive %d", id)
	}
	if to == verbs.QPStateReset {
		// Each of the two pollers may have taken a batch (8) before the
		// RESET and logged it after.
		require.LessOrEqual(t, len(bWCs), atChange+2*8, "completions after RESET")
	}

	// Reconnect with new PSNs; the pollers go on.
	require.NoError(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.AttrState))
	before := bLog.len()
	for _, p := range [][2]*side{{a, b}, {b, a}} {
		me, peer := p[0], p[1]
		gid, err := peer.dev.QueryGID(1, 1)
		require.NoError(t, err)
		require.NoError(t, me.qp.Connect(hca.Remote{QPN: peer.qp.Num(), PSN: 5000, GID: gid},
			&hca.ConnectOptions{PathMTU: verbs.MTU1024, PSN: 5000, MinRNRTimer: 1}))
	}
	copy(a.buf[1<<19:], "after the reconnection")
	_, err := b.qp.PostRecv(&verbs.RecvWR{WRID: 1000, SGList: []verbs.SGE{b.mr.SGE(1<<19, 64)}})
	require.NoError(t, err)
	_, err = a.qp.PostSend(&verbs.SendWR{WRID: 1000, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(1<<19, 22)}})
	require.NoError(t, err)
	require.Equal(t, verbs.WCSuccess, waitWC(t, a, 1)[0].Status)
	until(t, "the receive after the reconnection", func() bool { return bLog.len() > before })
	cancel()
	stressDone(t, &pollers, "b's pollers")
	after := bLog.snapshot()
	require.Len(t, after, before+1, "only the new receive completed")
	require.Equal(t, verbs.WCSuccess, after[1000].Status)
	require.Equal(t, uint32(22), after[1000].ByteLen)
	require.Equal(t, "after the reconnection", string(b.buf[1<<19:][:22]))
}

// TestStressSharedQueues has four goroutines take the receive
// completions of one CQ at once (two with Poll, two with PollWait: with
// BusyPoll, four goroutines drive one transport) and repost each receive
// as they go, while two goroutines post SENDs to one QP at once and take
// that QP's send completions from its CQ between them. Every message is
// received exactly once with the bytes its sender posted (the immediate
// names the poster and its sequence number), and every send completes
// exactly once, successfully.
func TestStressSharedQueues(t *testing.T) {
	eachStressMode(t, func(t *testing.T, m stressMode) {
		const (
			size    = 512
			perPost = 300
			window  = 48 // per poster; with the other's, below the receives posted
			nRecv   = 128
		)
		a, b := m.open(t, 1<<20)
		stressConnect(t, a, b)
		postRecvs(t, b, 0, nRecv, size)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()

		// The posters: slot k of poster p is reused once its send
		// completed (sends complete in order, so the poster's count of
		// completions says which).
		var sent [2]atomic.Int64
		sendLog := newWCLog()
		var posters sync.WaitGroup
		for p := range 2 {
			posters.Add(1)
			go func() {
				defer posters.Done()
				wcs := make([]verbs.WC, 8)
				for i := 0; i < perPost || sent[p].Load() < perPost; {
					if ctx.Err() != nil {
						t.Errorf("poster %d: %d of %d sends completed", p, sent[p].Load(), perPost)
						return
					}
					if i < perPost && int64(i)-sent[p].Load() < window {
						off := (p*window + i%window) * size
						stressFill(a.buf[off:off+size], uint64(p)<<16|uint64(i))
						_, err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(p)<<32 | uint64(i), Opcode: verbs.WRSendWithImm,
							ImmData: uint32(p)<<16 | uint32(i), SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(off, size)}})
						if err != nil {
							t.Errorf("post_send: %v", err)
							return
						}
						i++
						continue
					}
					n := a.cq.Poll(wcs)
					sendLog.add(wcs[:n])
					for _, wc := range wcs[:n] {
						if wc.Status != verbs.WCSuccess {
							t.Errorf("send %#x: %s", wc.WRID, wc.Status)
						}
						sent[wc.WRID>>32].Add(1)
					}
					if n == 0 {
						runtime.Gosched()
					}
				}
			}()
		}

		// The receivers.
		var mu sync.Mutex
		got := map[uint32]bool{}
		var pollers sync.WaitGroup
		for k := range 4 {
			pollers.Add(1)
			go func() {
				defer pollers.Done()
				wcs := make([]verbs.WC, 4)
				want := make([]byte, size)
				for ctx.Err() == nil {
					var n int
					if k < 2 {
						if n = b.cq.Poll(wcs); n == 0 {
							runtime.Gosched()
						}
					} else {
						n, _ = b.cq.PollWait(ctx, wcs)
					}
					for _, wc := range wcs[:n] {
						if wc.Status != verbs.WCSuccess || wc.ByteLen != size || wc.WCFlags&verbs.WCFlagWithImm == 0 {
							t.Errorf("receive %d: %s, %d bytes, flags %v", wc.WRID, wc.Status, wc.ByteLen, wc.WCFlags)
							continue
						}
						stressFill(want, uint64(wc.ImmData>>16)<<16|uint64(wc.ImmData&0xffff))
						slot := b.buf[int(wc.WRID)*size:][:size]
						if !bytes.Equal(want, slot) {
							t.Errorf("receive %d of message %#x holds other bytes", wc.WRID, wc.ImmData)
						}
						mu.Lock()
						if got[wc.ImmData] {
							t.Errorf("message %#x received twice", wc.ImmData)
						}
						got[wc.ImmData] = true
						mu.Unlock()
						if _, err := b.qp.PostRecv(&verbs.RecvWR{WRID: wc.WRID, SGList: []verbs.SGE{b.mr.SGE(int(wc.WRID)*size, size)}}); err != nil {
							t.Errorf("post_recv: %v", err)
						}
					}
				}
			}()
		}
		stressDone(t, &posters, "the posters")
		until(t, "every message", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == 2*perPost
		})
		cancel()
		stressDone(t, &pollers, "the pollers")
		require.Empty(t, sendLog.dup, "a send completed twice")
		require.Equal(t, 2*perPost, sendLog.len())
		s := b.dev.TransportStats()
		t.Logf("RNR NAKs %d, retransmits %d", s.RNRNAKsSent, s.Retransmits)
	})
}
