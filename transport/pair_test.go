package transport

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// Two RC QPs wired to each other without a link: what one emits is
// handed, after seeded loss, duplication and reordering, to the other's
// Receive. Time is the test's; Held packets wait as the scheduler keeps
// them. This checks the protocol parts together (IBTA 9.7: the reliable
// service delivers every message once, in order, whatever the network
// loses, duplicates or reorders), still without goroutines.

// pairEnd is one side of the pair.
type pairEnd struct {
	*qpt
	held []*wire.Packet // packets Receive held, oldest first
	// dirty: an effect asked for Run (or work was posted), as the
	// scheduler marks a QP; only a dirty QP runs.
	dirty bool
}

// faults are the per-packet probabilities of the network's misdeeds.
type faults struct {
	drop, dup, reorder float64
}

type pair struct {
	t      *testing.T
	a, b   *pairEnd
	rnd    *rand.Rand
	f      faults
	flight []flying // packets in the network, in order
	now    time.Time
	// budget: random Run budgets when set.
	budget bool
}

type flying struct {
	to  *pairEnd
	raw []byte
	n   wire.Net
}

func newPair(t *testing.T, seed uint64, f faults, mtu uint32, rdAtomic uint8) *pair {
	pa := defaultParams(verbs.QPTypeRC)
	pa.RetryForever, pa.RetryCnt, pa.RNRRetry = true, 7, 7
	pa.MinRNRTimer = 1
	pa.MTU = mtu
	pa.MaxRdAtomic, pa.MaxDestRdAtomic = rdAtomic, rdAtomic
	pb := pa
	pb.QPN, pb.DestQPN = testPeerQPN, testQPN
	pb.Path.Src, pb.Path.Dst = pa.Path.Dst, pa.Path.Src
	a, b := newQPT(t, pa), newQPT(t, pb)
	for _, h := range []*qpt{a, b} {
		h.q.SetState(verbs.QPStateReset, 0, 0)
		h.q.SetState(verbs.QPStateInit, 0, 0)
	}
	a.q.SetState(verbs.QPStateRTR, testRQPSN, 0)
	a.q.SetState(verbs.QPStateRTS, testRQPSN, testSQPSN)
	b.q.SetState(verbs.QPStateRTR, testSQPSN, 0)
	b.q.SetState(verbs.QPStateRTS, testSQPSN, testRQPSN)
	return &pair{t: t, a: &pairEnd{qpt: a, dirty: true}, b: &pairEnd{qpt: b, dirty: true}, rnd: rand.New(rand.NewPCG(seed, 7)), f: f, now: t0}
}

func (pr *pair) other(e *pairEnd) *pairEnd {
	if e == pr.a {
		return pr.b
	}
	return pr.a
}

// emit puts what e emitted into the network, with faults.
func (pr *pair) emit(e *pairEnd) {
	for _, s := range e.out.take() {
		f := flying{to: pr.other(e), raw: s.raw, n: s.dst}
		switch r := pr.rnd.Float64(); {
		case r < pr.f.drop:
			continue
		case r < pr.f.drop+pr.f.dup:
			pr.flight = append(pr.flight, f, f)
		case r < pr.f.drop+pr.f.dup+pr.f.reorder && len(pr.flight) > 0:
			i := pr.rnd.IntN(len(pr.flight))
			pr.flight = append(pr.flight[:i], append([]flying{f}, pr.flight[i:]...)...)
		default:
			pr.flight = append(pr.flight, f)
		}
	}
}

// apply checks a call's effects: in this test nothing may fail.
func (pr *pair) apply(e *pairEnd, fx Effects, what string) {
	pr.t.Helper()
	if fx.Run || fx.More {
		e.dirty = true
	}
	require.Equal(pr.t, FailNone, fx.Fail, "%s: %s failed with %s", e.q.P.Type, what, fx.Status)
}

// run runs a QP (random budgets when asked), then offers its held
// packets again, as the scheduler does.
func (pr *pair) run(e *pairEnd) {
	if !e.dirty {
		return
	}
	e.dirty = false
	e.now = pr.now
	e.budget = Unlimited
	if pr.budget {
		e.budget = 1 + pr.rnd.IntN(3000)
	}
	fx := e.q.Run(e.env())
	e.budget = Unlimited
	pr.apply(e, fx, "Run")
	pr.emit(e)
	for len(e.held) > 0 {
		fx := e.q.Receive(e.env(), e.held[0])
		pr.apply(e, fx, "Receive (held)")
		pr.emit(e)
		if fx.Held {
			break
		}
		e.held = e.held[1:]
	}
}

// deliver hands the first packet in flight to its QP.
func (pr *pair) deliver() {
	f := pr.flight[0]
	pr.flight = pr.flight[1:]
	e := f.to
	e.now = pr.now
	p := new(wire.Packet)
	require.Equal(pr.t, wire.DropNone, wire.ParseTransport(f.raw, p))
	p.Net = f.n
	if len(e.held) > 0 {
		e.held = append(e.held, p)
		return
	}
	fx := e.q.Receive(e.env(), p)
	pr.apply(e, fx, "Receive")
	if fx.Held {
		e.held = append(e.held, p)
	}
	pr.emit(e)
}

// pump exchanges packets until done reports true, running each QP after
// each batch and its timer when it is due; each round starts with tick.
func (pr *pair) pump(done func() bool, tick func()) {
	for i := 0; !done(); i++ {
		require.Less(pr.t, i, 200000, "no progress")
		tick()
		pr.run(pr.a)
		pr.run(pr.b)
		for n := min(len(pr.flight), 1+pr.rnd.IntN(8)); n > 0; n-- {
			pr.deliver()
		}
		pr.now = pr.now.Add(time.Microsecond)
		if len(pr.flight) > 0 {
			continue
		}
		// Quiet: let the earliest timer expire.
		next := time.Time{}
		for _, e := range []*pairEnd{pr.a, pr.b} {
			if d := e.q.Deadline(); !d.IsZero() && (next.IsZero() || d.Before(next)) {
				next = d
			}
		}
		if next.After(pr.now) {
			pr.now = next
		}
		for _, e := range []*pairEnd{pr.a, pr.b} {
			if d := e.q.Deadline(); !d.IsZero() && !d.After(pr.now) {
				e.now = pr.now
				pr.apply(e, e.q.Timer(e.env()), "Timer")
				pr.emit(e)
			}
		}
	}
}

// Memory layout of each side of the pair: its mem0 (what the peer
// writes, reads and adds to) and its dst (READ and ATOMIC results,
// receive buffers).
const (
	pairCounter   = 0     // mem0: the word the peer's FetchAdds add to
	pairWriteArea = 1024  // mem0: [1024, 32768) the peer's WRITEs
	pairReadArea  = 32768 // mem0: [32768, 65536) what the peer READs
	pairReadDst   = 0     // dst: [0, 24576) READ results
	pairRecvArea  = 24576 // dst: 32 receive buffers of 1024 bytes
	pairAtomicDst = 60000 // dst: ATOMIC results
	pairRecvSize  = 1024
)

// pairWork is a random workload from one side to the other and what it
// must leave behind.
type pairWork struct {
	from, to *pairEnd
	wrids    []uint64 // signaled WQEs, in post order
	checks   []func(t *testing.T)
	// recvs: the messages that consume a receive on the other side,
	// in order: SEND data, or nil for a WRITE with immediate (its
	// length in recvLens).
	recvs    [][]byte
	recvLens []uint32
	adds     uint64
	readSrc  []byte
	// toPost receives the other side has yet to post (posted slowly,
	// so that RNR NAKs happen).
	toPost int
}

// genWork posts n random WQEs on w.from.
func genWork(t *testing.T, rnd *rand.Rand, from, to *pairEnd, n int, wridBase uint64) *pairWork {
	w := &pairWork{from: from, to: to, readSrc: bytes.Clone(to.mem0)}
	copy(w.readSrc[pairReadArea:], pattern(byte(wridBase), memSize-pairReadArea))
	copy(to.mem0[pairReadArea:], w.readSrc[pairReadArea:])
	woff, roff := uint32(pairWriteArea), uint32(pairReadDst)
	for i := range n {
		wrid := wridBase + uint64(i)
		var wqe SendWQE
		switch k := rnd.IntN(6); k {
		case 0, 1: // SEND, maybe with immediate
			sz := uint32(rnd.IntN(pairRecvSize + 1))
			off := uint32(rnd.IntN(30000))
			wqe = sendWR(wrid, off, sz)
			if k == 1 {
				wqe.WR.Opcode, wqe.WR.ImmData = verbs.WRSendWithImm, uint32(wrid)
			}
			w.recvs = append(w.recvs, srcBytes(off, int(sz)))
			w.recvLens = append(w.recvLens, sz)
		case 2: // WRITE, maybe with immediate
			sz := uint32(rnd.IntN(1500))
			if woff+sz > pairReadArea {
				sz = 0
			}
			off := uint32(rnd.IntN(30000))
			wqe = sendWR(wrid, off, sz)
			wqe.WR.Opcode = verbs.WRRDMAWrite
			wqe.WR.RDMA = verbs.RDMAInfo{RemoteAddr: memVA + uint64(woff), RKey: rkeyMem}
			if rnd.IntN(3) == 0 {
				wqe.WR.Opcode, wqe.WR.ImmData = verbs.WRRDMAWriteWithImm, uint32(wrid)
				w.recvs = append(w.recvs, nil)
				w.recvLens = append(w.recvLens, sz)
			}
			at, data := woff, srcBytes(off, int(sz))
			w.checks = append(w.checks, func(t *testing.T) {
				require.Equal(t, data, to.mem0[at:at+sz], "WRITE %d", wrid)
			})
			woff += sz
		case 3, 4: // READ
			sz := uint32(rnd.IntN(2000))
			if roff+sz > pairRecvArea {
				sz = 0
			}
			src := uint32(pairReadArea + rnd.IntN(memSize-pairReadArea-2000))
			wqe = readWR(wrid, roff, sz)
			wqe.WR.RDMA = verbs.RDMAInfo{RemoteAddr: memVA + uint64(src), RKey: rkeyMem}
			at, want := roff, w.readSrc[src:src+sz]
			w.checks = append(w.checks, func(t *testing.T) {
				require.Equal(t, want, from.dst[at:at+sz], "READ %d", wrid)
			})
			roff += sz
		case 5: // FetchAdd of 1
			at := pairAtomicDst + uint32(i)*8
			wqe = atomicWR(wrid, verbs.WRAtomicFetchAndAdd, at, 1, 0)
			wqe.WR.Atomic.RemoteAddr, wqe.WR.Atomic.RKey = memVA+pairCounter, rkeyMem
			want := w.adds
			w.adds++
			w.checks = append(w.checks, func(t *testing.T) {
				require.Equal(t, want, u64(from.dst[at:]), "ATOMIC %d", wrid)
			})
		}
		if rnd.IntN(8) == 0 {
			wqe.WR.SendFlags |= verbs.SendFence
		}
		wqe.Signaled = rnd.IntN(4) != 0
		if wqe.Signaled {
			w.wrids = append(w.wrids, wrid)
		}
		from.post(wqe)
	}
	require.LessOrEqual(t, len(w.recvs), (pairAtomicDst-pairRecvArea)/pairRecvSize)
	w.toPost = len(w.recvs)
	return w
}

// postSome posts the next receive on the other side, now and then.
func (w *pairWork) postSome(rnd *rand.Rand) {
	if w.toPost == 0 || rnd.IntN(20) != 0 {
		return
	}
	i := uint32(len(w.recvs) - w.toPost)
	w.to.postRecv(uint64(i), pairRecvArea+i*pairRecvSize, pairRecvSize)
	w.toPost--
}

func (w *pairWork) check(t *testing.T) {
	t.Helper()
	got := w.from.scq.take()
	require.Equal(t, len(w.wrids), len(got), "send completions")
	for i, wc := range got {
		require.Equal(t, w.wrids[i], wc.WRID, "completions in order")
		require.Equal(t, verbs.WCSuccess, wc.Status, "WR %d", wc.WRID)
	}
	for _, c := range w.checks {
		c(t)
	}
	require.Equal(t, w.adds, u64(w.to.mem0[pairCounter:]), "each ATOMIC executed once")
	recvs := w.to.rcq.take()
	require.Len(t, recvs, len(w.recvs))
	for i, wc := range recvs {
		require.Equal(t, verbs.WCSuccess, wc.Status)
		require.Equal(t, uint64(i), wc.WRID, "receives in order")
		require.Equal(t, w.recvLens[i], wc.ByteLen)
		if d := w.recvs[i]; d != nil {
			off := pairRecvArea + uint32(i)*pairRecvSize
			require.Equal(t, d, w.to.dst[off:off+wc.ByteLen], "SEND into receive %d", i)
			require.Equal(t, verbs.WCRecv, wc.Opcode)
		} else {
			require.Equal(t, verbs.WCRecvRDMAWithImm, wc.Opcode)
		}
	}
}

// TestPairLossy: random mixes of SENDs, WRITEs (with immediate or not),
// READs and ATOMICs, fenced or not, signaled or not, in both directions,
// over a network that loses, duplicates and reorders packets, with
// receives posted late enough for RNR NAKs: every WQE completes
// successfully, once, in order (IBTA 10.8.3.3); every message lands whole
// (9.7.1, go-back-N 9.7.6.1); every ATOMIC executes once (9.7.5.1.3,
// C9-105); lost READ responses are asked for again (9.7.5.1.2); RNR NAKs
// are waited out (9.7.5.2.8).
func TestPairLossy(t *testing.T) {
	cases := []struct {
		name   string
		f      faults
		budget bool
	}{
		{"lossless", faults{}, false},
		{"lossless, small budgets", faults{}, true},
		{"loss", faults{drop: 0.1}, false},
		{"loss, duplicates, reordering", faults{drop: 0.05, dup: 0.05, reorder: 0.1}, true},
		{"heavy", faults{drop: 0.25, dup: 0.1, reorder: 0.25}, true},
	}
	seeds := uint64(6)
	if testing.Short() {
		seeds = 2
	}
	for _, tc := range cases {
		for seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", tc.name, seed), func(t *testing.T) {
				runPair(t, seed, tc.f, tc.budget)
			})
		}
	}
}

func runPair(t *testing.T, seed uint64, f faults, budget bool) {
	rnd := rand.New(rand.NewPCG(seed, 99))
	mtu := []uint32{256, 512, 1024, 4096}[rnd.IntN(4)]
	pr := newPair(t, seed, f, mtu, uint8(1+rnd.IntN(4)))
	pr.budget = budget
	a, b := pr.a, pr.b
	wa := genWork(t, rnd, a, b, 30, 1000)
	wb := genWork(t, rnd, b, a, 20, 2000)
	pr.pump(func() bool {
		return a.sq.Len() == 0 && b.sq.Len() == 0 && len(pr.flight) == 0
	}, func() {
		wa.postSome(rnd)
		wb.postSome(rnd)
	})
	wa.check(t)
	wb.check(t)
}

// TestPairLossyLong: long WRITEs and READs, both ways, over a network
// that loses a tenth of the packets, with retry_cnt 7 (not forever): the
// congestion window shrinks to its floor, READs longer than it are asked
// for in parts, and every message still completes (a go-back keeps each
// WQE's PSNs and each READ part's end, and acknowledgements of packets
// sent before a go-back still count).
func TestPairLossyLong(t *testing.T) {
	seeds := uint64(12)
	if testing.Short() {
		seeds = 4
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			pr := newPair(t, seed, faults{drop: 0.10, dup: 0.05, reorder: 0.1}, 256, 4)
			for _, e := range []*pairEnd{pr.a, pr.b} {
				e.q.P.RetryForever, e.q.P.Timeout = false, 12
				e.q.ParamsChanged()
			}
			rnd := rand.New(rand.NewPCG(seed, 1))
			want := map[*pairEnd][]uint64{}
			for i := range uint64(12) {
				e := []*pairEnd{pr.a, pr.b}[rnd.IntN(2)]
				n := uint32(rnd.IntN(60000))
				var w SendWQE
				if rnd.IntN(2) == 0 {
					w = sendWR(i, 0, n)
					w.WR.Opcode = verbs.WRRDMAWrite
				} else {
					w = readWR(i, 0, n)
				}
				w.WR.RDMA = verbs.RDMAInfo{RemoteAddr: memVA + 1024, RKey: rkeyMem}
				w.Signaled = true
				e.post(w)
				want[e] = append(want[e], i)
			}
			pr.pump(func() bool { return pr.a.sq.Len() == 0 && pr.b.sq.Len() == 0 && len(pr.flight) == 0 }, func() {})
			for _, e := range []*pairEnd{pr.a, pr.b} {
				var got []uint64
				for _, wc := range e.scq.take() {
					require.Equal(t, verbs.WCSuccess, wc.Status)
					got = append(got, wc.WRID)
				}
				require.Equal(t, want[e], got)
			}
		})
	}
}
