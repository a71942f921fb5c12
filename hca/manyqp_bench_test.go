package hca_test

import (
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/transport"
	"github.com/softhca/softhca/verbs"
)

// connectQPs creates n RC QP pairs with caps c, x's on the send and
// receive CQ xcq and y's on y.cq, and connects each x QP to its y QP at
// MTU 4096 with the options connectWith gives.
func connectQPs(tb testing.TB, x, y *side, n int, xcq *hca.CQ, c verbs.QPCap) (xs, ys []*hca.QP) {
	tb.Helper()
	xs, ys = make([]*hca.QP, n), make([]*hca.QP, n)
	create := func(s *side, cq *hca.CQ) *hca.QP {
		q, err := s.pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: c})
		if err != nil {
			tb.Fatal(err)
		}
		return q
	}
	xgid, err := x.dev.QueryGID(1, 1)
	if err != nil {
		tb.Fatal(err)
	}
	ygid, err := y.dev.QueryGID(1, 1)
	if err != nil {
		tb.Fatal(err)
	}
	o := &hca.ConnectOptions{
		PathMTU: verbs.MTU4096, PSN: 100, MinRNRTimer: 1, MaxRdAtomic: 8, MaxDestRdAtomic: 8,
		Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	for i := range n {
		xs[i], ys[i] = create(x, xcq), create(y, y.cq)
		if err := xs[i].Connect(hca.Remote{QPN: ys[i].Num(), PSN: 100, GID: ygid}, o); err != nil {
			tb.Fatal(err)
		}
		if err := ys[i].Connect(hca.Remote{QPN: xs[i].Num(), PSN: 100, GID: xgid}, o); err != nil {
			tb.Fatal(err)
		}
	}
	return xs, ys
}

// BenchmarkRCWrite64KQPs is BenchmarkRCWrite64K/gso+gro spread over many
// RC QP pairs between two devices: RDMA WRITEs of 64 KiB from x to y at
// MTU 4096 over UDP loopback with GSO and GRO, posted round robin over
// the QPs (each QP's completion puts it back at the end of the round),
// with every QP of x on one send CQ. inflight=16 keeps 16 WRs in flight
// in all, as BenchmarkRCWrite64K does (with more than 16 QPs, 16 of them
// are busy at a time); inflight=perqp keeps one in flight on every QP.
// One 64 KiB MR on each side is the source and the target of every QP.
// Reports payload Gbit/s; the QPs' creation and a warm-up round (one WR
// per QP at least) are outside the timed part, and setup-ms says how long
// creating and connecting the pairs took. With one WR per QP, 1000 QPs
// want 16,000 packets in flight: the device window (256 by default) is
// what bounds them, and what the QPs it stops cost shows.
func BenchmarkRCWrite64KQPs(b *testing.B) {
	for _, n := range []int{1, 16, 100, 1000} {
		depths := []int{16}
		if n > 16 {
			depths = append(depths, n)
		}
		for _, d := range depths {
			name := "inflight=16"
			if d == n && n > 16 {
				name = "inflight=perqp"
			}
			b.Run("qps="+strconv.Itoa(n)+"/"+name, func(b *testing.B) { benchWrite64KQPs(b, n, d) })
		}
	}
}

// benchWrite64KQPs runs b.N WRITEs of 64 KiB over n QP pairs, depth in
// flight.
func benchWrite64KQPs(b *testing.B, n, depth int) {
	const size = 64 << 10
	x, y := udpPairConfig(b, true, size, hca.Config{})
	perQP := (depth + n - 1) / n // the most WRs one QP has in flight
	// x's send CQ holds at most one completion per WR in flight; it
	// takes the place of x.cq (and its completion channel) for pollWait.
	xcq, err := x.dev.CreateCQ(depth, x.ch, nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	x.cq = xcq
	start := time.Now()
	xs, _ := connectQPs(b, x, y, n, xcq, verbs.QPCap{MaxSendWR: uint32(perQP), MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
	setup := time.Since(start)

	wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{x.mr.SGE(0, size)}, RDMA: verbs.RDMAInfo{RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	rr := newRoundRobin(b, x, xs, wr, depth, perQP, nil)
	// Warm-up: every QP sends at least once (its timers and windows are
	// set up), and the timed part starts with the QPs idle.
	rr.run(max(2*n, 4*depth))
	b.SetBytes(size)
	el := rr.timed()
	b.ReportMetric(float64(b.N)*size*8/el/1e9, "Gbit/s")
	b.ReportMetric(float64(setup.Microseconds())/1e3, "setup-ms") // after ResetTimer, which clears metrics
	sx := x.dev.TransportStats()
	b.Logf("N=%d qps=%d inflight=%d setup %v: tx %d retransmits %d timeouts %d window cuts %d device waits %d drops %v",
		b.N, n, depth, setup.Round(time.Millisecond), sx.TxPackets, sx.Retransmits, sx.RetryTimeouts, sx.WindowCuts, sx.DeviceWaits, sx.DropNames())
}

// BenchmarkIdleQPMemory creates 10,000 connected RC QP pairs between two
// devices (20,000 QPs, 10,000 on each device) with MaxSendWR 16,
// MaxRecvWR 16, one SGE each way and no inline data, and reports the heap
// they hold per QP, after a forced GC, against the heap before they were
// created: B/qp from HeapAlloc, inuse-B/qp from HeapInuse (whole spans).
// ring-B/qp is the heap the QP's send and receive queue rings take
// (qp.New, srq.NewQueue): the same four arrays allocated here, so with
// the allocator's size-class rounding (ring-size-B/qp is their bytes
// before it); beyond-ring-B/qp is the rest of B/qp.
// used-B/qp is B/qp again once every x QP has completed one 64-byte RDMA
// WRITE (a QP that has sent keeps a timer). The link is link/pipe: the
// figure is the QPs' memory, and in-process devices add no socket or
// kernel buffer to it (a device's fixed cost is in the baseline anyway).
// Run it with -test.benchtime 1x: one op creates and measures all of them.
func BenchmarkIdleQPMemory(b *testing.B) {
	const pairs = 10_000
	c := verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	// The rings of qp.New and srq.NewQueue: the send queue has
	// transport.InternalSlots more slots than max_send_wr, each a
	// SendWQE, MaxSendSGE SGEs and MaxInlineData bytes (none here); the
	// receive queue has max_recv_wr slots of 16 bytes (srq's slot: a WR
	// ID and a count) and MaxRecvSGE SGEs each.
	sge := int(unsafe.Sizeof(verbs.SGE{}))
	sqSlots := int(c.MaxSendWR) + transport.InternalSlots
	ringSize := sqSlots*(int(unsafe.Sizeof(transport.SendWQE{}))+int(c.MaxSendSGE)*sge+int(c.MaxInlineData)) +
		int(c.MaxRecvWR)*(16+int(c.MaxRecvSGE)*sge)
	ring := ringHeap(1000, sqSlots, c)
	var alloc, inuse, used float64
	var setup time.Duration
	b.ReportAllocs()
	for range b.N {
		la, lb := pipe.New(pipe.Config{})
		x, y := openSide(b, la, 64<<10), openSide(b, lb, 64<<10)
		before := heapNow()
		start := time.Now()
		xs, ys := connectQPs(b, x, y, pairs, x.cq, c)
		setup += time.Since(start)
		after := heapNow()
		qps := float64(2 * pairs)
		alloc += float64(after.HeapAlloc-before.HeapAlloc) / qps
		inuse += float64(after.HeapInuse-before.HeapInuse) / qps

		// One signaled 64-byte WRITE per x QP, a CQ's worth at a time.
		wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{x.mr.SGE(0, 64)}, RDMA: verbs.RDMAInfo{RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
		wcs := make([]verbs.WC, 64)
		for i := 0; i < pairs; i += 512 {
			k := min(512, pairs-i)
			for _, q := range xs[i : i+k] {
				if _, err := q.PostSend(wr); err != nil {
					b.Fatal(err)
				}
			}
			for k > 0 {
				m := x.pollWait(wcs)
				for _, wc := range wcs[:m] {
					if wc.Status != verbs.WCSuccess {
						b.Fatal(wc.Status)
					}
				}
				k -= m
			}
		}
		afterUse := heapNow()
		used += float64(afterUse.HeapAlloc-before.HeapAlloc) / qps
		runtime.KeepAlive(xs)
		runtime.KeepAlive(ys)
		_ = x.dev.Close()
		_ = y.dev.Close()
	}
	nf := float64(b.N)
	b.ReportMetric(alloc/nf, "B/qp")
	b.ReportMetric(inuse/nf, "inuse-B/qp")
	b.ReportMetric(float64(ringSize), "ring-size-B/qp")
	b.ReportMetric(ring, "ring-B/qp")
	b.ReportMetric(alloc/nf-ring, "beyond-ring-B/qp")
	b.ReportMetric(used/nf, "used-B/qp")
	b.ReportMetric(float64(setup.Nanoseconds())/nf/pairs, "ns/connected-pair")
	if beyond := alloc/nf - ring; beyond > 16<<10 {
		b.Logf("%.0f bytes per idle QP beyond its rings: above the 16 KiB of issue 18", beyond)
	}
}

// ringHeap returns the heap the rings of one QP with caps c hold: n sets
// of the arrays qp.New and srq.NewQueue allocate (sqSlots slots in the
// send queue, MaxInlineData 0), measured as BenchmarkIdleQPMemory
// measures QPs.
func ringHeap(n, sqSlots int, c verbs.QPCap) float64 {
	sq := make([][]transport.SendWQE, n)
	sqSGE := make([][]verbs.SGE, n)
	rq := make([][][2]uint64, n) // srq's slot: a uint64 and an int
	rqSGE := make([][]verbs.SGE, n)
	before := heapNow()
	for i := range n {
		sq[i] = make([]transport.SendWQE, sqSlots)
		sqSGE[i] = make([]verbs.SGE, sqSlots*int(c.MaxSendSGE))
		rq[i] = make([][2]uint64, c.MaxRecvWR)
		rqSGE[i] = make([]verbs.SGE, int(c.MaxRecvWR)*int(c.MaxRecvSGE))
	}
	after := heapNow()
	runtime.KeepAlive(sq)
	runtime.KeepAlive(sqSGE)
	runtime.KeepAlive(rq)
	runtime.KeepAlive(rqSGE)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// heapNow returns the memory statistics after two forced collections
// (the second frees what the first's finalizers released).
func heapNow() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// BenchmarkRCSend64QPs is BenchmarkRCSend64 over 1 and 16 RC QP pairs:
// 64-byte SENDs over UDP loopback (GSO and GRO on), 64 in flight in all,
// posted round robin over the QPs (a QP whose SEND completes goes back
// to the end of the round); each receive completion is answered by a new
// receive on its QP. Reports messages/s.
func BenchmarkRCSend64QPs(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run("qps="+strconv.Itoa(n), func(b *testing.B) { benchSend64QPs(b, n) })
	}
}

func benchSend64QPs(b *testing.B, n int) {
	const depth, size = 64, 64
	x, y := udpPairConfig(b, true, 4096, hca.Config{})
	perQP := (depth + n - 1) / n
	xcq, err := x.dev.CreateCQ(depth, x.ch, nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	x.cq = xcq
	// Twice a QP's share of receives, so that a SEND never waits for one
	// (y.cq holds 1024 completions: more than all the receives).
	xs, ys := connectQPs(b, x, y, n, xcq, verbs.QPCap{MaxSendWR: uint32(perQP), MaxRecvWR: uint32(2 * perQP), MaxSendSGE: 1, MaxRecvSGE: 1})
	yIndex := make(map[uint32]int, n)
	rwr := &verbs.RecvWR{SGList: []verbs.SGE{y.mr.SGE(0, size)}}
	for i, q := range ys {
		yIndex[q.Num()] = i
		for range 2 * perQP {
			if _, err := q.PostRecv(rwr); err != nil {
				b.Fatal(err)
			}
		}
	}
	wr := &verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.mr.SGE(0, size)}}
	ywcs := make([]verbs.WC, 64)
	// After each poll of x's CQ, y's receives are completed and replaced.
	rr := newRoundRobin(b, x, xs, wr, depth, perQP, func() {
		r := y.cq.Poll(ywcs)
		for _, wc := range ywcs[:r] {
			if wc.Status != verbs.WCSuccess || wc.ByteLen != size {
				b.Fatalf("receive on qp %d: %s, %d bytes", wc.QPNum, wc.Status, wc.ByteLen)
			}
			if _, err := ys[yIndex[wc.QPNum]].PostRecv(rwr); err != nil {
				b.Fatal(err)
			}
		}
	})
	rr.run(4 * depth)
	b.ReportMetric(float64(b.N)/rr.timed(), "msgs/s")
}

// roundRobin posts copies of wr over a set of QPs of x, at most depth in
// flight in all and perQP on each, round robin: the QPs that may take
// another WR wait in a FIFO, and a QP whose WR completes goes to its
// back. Every completion must be a success; after each poll of x's CQ,
// after (if set) runs.
type roundRobin struct {
	b        *testing.B
	x        *side
	qps      []*hca.QP
	wr       *verbs.SendWR
	depth    int
	after    func()
	ready    []int // a ring: the QPs that may take another WR
	head     int
	queued   int
	inflight int
	wcs      []verbs.WC
}

func newRoundRobin(b *testing.B, x *side, qps []*hca.QP, wr *verbs.SendWR, depth, perQP int, after func()) *roundRobin {
	r := &roundRobin{b: b, x: x, qps: qps, wr: wr, depth: depth, after: after,
		ready: make([]int, perQP*len(qps)), wcs: make([]verbs.WC, 64)}
	for range perQP {
		for i := range qps {
			r.push(i)
		}
	}
	return r
}

func (r *roundRobin) push(i int) {
	r.ready[(r.head+r.queued)%len(r.ready)] = i
	r.queued++
}

// timed runs b.N WRs as the benchmark's timed part, allocations
// reported, and returns how long they took in seconds.
func (r *roundRobin) timed() float64 {
	r.b.ReportAllocs()
	r.b.ResetTimer()
	t0 := time.Now()
	r.run(r.b.N)
	el := time.Since(t0).Seconds()
	r.b.StopTimer()
	return el
}

// run posts and completes count WRs.
func (r *roundRobin) run(count int) {
	posted, done := 0, 0
	for done < count {
		for posted < count && r.inflight < r.depth {
			i := r.ready[r.head]
			r.head = (r.head + 1) % len(r.ready)
			r.queued--
			r.wr.WRID = uint64(i)
			if _, err := r.qps[i].PostSend(r.wr); err != nil {
				r.b.Fatalf("qp %d: %v", i, err)
			}
			posted++
			r.inflight++
		}
		k := r.x.pollWait(r.wcs)
		for _, wc := range r.wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				r.b.Fatalf("qp %d: %s", wc.WRID, wc.Status)
			}
			r.push(int(wc.WRID))
		}
		done += k
		r.inflight -= k
		if r.after != nil {
			r.after()
		}
	}
}
