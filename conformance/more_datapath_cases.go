package conformance

import (
	"context"

	"github.com/softhca/softhca/verbs"
)

// More data-path cases (issue 15): the SRQ limit event, which needs
// receives taken from an SRQ by arriving messages; an SRQ behind UD QPs;
// one UD QP addressing two remote QPs; RDMA READ and WRITE scattering
// and gathering across regions. Registered memory is read and written
// through MR.Bytes().

const srqLimitCite = `ibv_modify_srq(3): IBV_SRQ_LIMIT sets the SRQ limit, and modifying srq_limit arms the SRQ for an IBV_EVENT_SRQ_LIMIT_REACHED ("low watermark") asynchronous event once the number of WRs in the SRQ drops below srq_limit; ibv_query_srq(3): "If the value returned for srq_limit is 0, then the SRQ limit reached ("low watermark") event is not (or no longer) armed, and no asynchronous events will be generated until the event is rearmed"; ibv_get_async_event(3): IBV_EVENT_SRQ_LIMIT_REACHED is affiliated with the SRQ`

func init() {
	Register(
		Case{
			Name:  "datapath/srq/limit-event-once-below-the-limit",
			Cite:  srqLimitCite,
			Label: Spec,
			Run:   dpSRQLimitReached,
		},
		Case{
			Name:  "datapath/srq/limit-event-is-one-shot",
			Cite:  srqLimitCite,
			Label: Spec,
			Run:   dpSRQLimitOneShot,
		},
		Case{
			Name:  "datapath/srq/ud-send-consumes-an-srq-wr",
			Cite:  `ibv_create_qp(3) (seed 001): a QP may use an SRQ if it is IBV_QPT_RC or IBV_QPT_UD; ibv_post_srq_recv(3): the WRs posted to the SRQ are the receive WRs of every QP associated with it; ibv_post_recv(3) (seed 000): a UD receive buffer begins with the 40-byte GRH area; ibv_poll_cq(3): qp_num is the "Local QP number of completed WR", src_qp the "Source QP number (remote QP number) of completed WR (valid only for UD QPs)"`,
			Label: Spec,
			Run:   dpUDSRQ,
		},
		Case{
			Name:  "datapath/ud/one-qp-reaches-two-remote-qps",
			Cite:  `ibv_post_send(3): for UD, wr.ud.ah is the "Address handle (AH) for the remote node address", wr.ud.remote_qpn the "QP number of the destination QP" and wr.ud.remote_qkey the "Q_Key number of the destination QP" — each WR names its own destination, so one UD QP talks to many`,
			Label: Spec,
			Run:   dpUDTwoDestinations,
		},
		Case{
			Name:  "datapath/rc/rdma-read/scatters-into-two-regions",
			Cite:  `ibv_post_send(3): IBV_WR_RDMA_READ "Data is being read from a contiguous block of memory range in the remote QP's virtual space and being written to the local memory buffers specified in sg_list"; seed 003: "The entries in the list can specify memory blocks that were registered by different Memory Regions"`,
			Label: Spec,
			Run:   dpReadScatter,
		},
		Case{
			Name:  "datapath/rc/rdma-write/gathers-from-two-regions",
			Cite:  `ibv_post_send(3) (seed 003): IBV_WR_RDMA_WRITE "The content of the local memory buffers specified in sg_list is being sent and written to a contiguous block of memory range in the remote QP's virtual space"; "The entries in the list can specify memory blocks that were registered by different Memory Regions. The message size is the sum of all of the memory buffers length in the scatter/gather list"`,
			Label: Spec,
			Run:   dpWriteGather,
		},
	)
}

// dpSRQLimitPair connects an RC QP on a to one on b that takes its
// receives from an SRQ of b holding posted WRs of 256 bytes each.
func dpSRQLimitPair(t *T, posted int) (a, b *dpSide, qa QP, srq SRQ) {
	t.Helper()
	a, b = dpOpen(t)
	srq, err := b.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 16, MaxSGE: 1}, nil)
	ExpectOK(t, err, "B: create_srq")
	t.Cleanup(func() { _ = srq.Destroy(context.Background()) })
	for i := range posted {
		bad, err := srq.PostRecv(&verbs.RecvWR{WRID: uint64(0x100 + i), SGList: []verbs.SGE{b.MR.SGE(i*256, 256)}})
		if err != nil || bad != nil {
			t.Fatalf("B: post_srq_recv %d: %v", i, err)
		}
	}
	qa, _ = dpConnect(t, a, b, dpOpts{}, dpOpts{SRQ: srq})
	return a, b, qa, srq
}

// dpSRQConsume sends n messages from qa and waits for their receive
// completions, so that n WRs have left the SRQ.
func dpSRQConsume(t *T, a, b *dpSide, qa QP, n int, first uint64) {
	t.Helper()
	for i := range n {
		dpPost(t, qa, dpSend(first+uint64(i), verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 32)))
	}
	dpWaitWC(t, a.SCQ, n, "sender", a, b)
	for _, wc := range dpWaitWC(t, b.RCQ, n, "receiver", a, b) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("receive from the SRQ: %s", dpWC(wc))
		}
	}
}

// dpSRQLimitEvent waits for IBV_EVENT_SRQ_LIMIT_REACHED on srq and
// acknowledges it.
func dpSRQLimitEvent(t *T, d Device, srq SRQ) {
	t.Helper()
	e, err := d.GetAsyncEvent(Ctx(t, dpDeadline))
	ExpectOK(t, err, "get_async_event (waiting for the SRQ limit event)")
	d.AckAsyncEvent(e)
	if e.Type != verbs.EventSRQLimitReached || e.SRQ != srq {
		t.Fatalf("async event %q (SRQ %v), want %q on the SRQ", e.Type, e.SRQ, verbs.EventSRQLimitReached)
	}
}

// dpNoAsync fails the case if an asynchronous event arrives on d within
// dpQuiet.
func dpNoAsync(t *T, d Device, what string) {
	t.Helper()
	e, err := d.GetAsyncEvent(Ctx(t, dpQuiet))
	if err == nil {
		d.AckAsyncEvent(e)
		t.Fatalf("%s: async event %q, want none", what, e.Type)
	}
}

func dpSRQLimitReached(t *T, d Device) {
	a, b, qa, srq := dpSRQLimitPair(t, 6)
	ExpectOK(t, srq.Modify(&verbs.SRQAttr{SRQLimit: 4}, verbs.SRQLimit), "B: modify_srq srq_limit 4")
	// 6 -> 4 WRs: not below the limit.
	dpSRQConsume(t, a, b, qa, 2, 1)
	dpNoAsync(t, b.D, "4 WRs left with srq_limit 4")
	Expect(t, nqQuerySRQ(t, srq).SRQLimit, uint32(4), "srq_limit while still armed")
	// 4 -> 3: below.
	dpSRQConsume(t, a, b, qa, 1, 3)
	dpSRQLimitEvent(t, b.D, srq)
	Expect(t, nqQuerySRQ(t, srq).SRQLimit, uint32(0), "srq_limit after the event (no longer armed)")
}

func dpSRQLimitOneShot(t *T, d Device) {
	a, b, qa, srq := dpSRQLimitPair(t, 8)
	ExpectOK(t, srq.Modify(&verbs.SRQAttr{SRQLimit: 6}, verbs.SRQLimit), "B: modify_srq srq_limit 6")
	dpSRQConsume(t, a, b, qa, 3, 1) // 8 -> 5
	dpSRQLimitEvent(t, b.D, srq)
	dpSRQConsume(t, a, b, qa, 2, 4) // 5 -> 3: no longer armed
	dpNoAsync(t, b.D, "more WRs taken after the event, before re-arming")
	// Re-armed at 2 with 3 WRs: the next one taken fires again.
	ExpectOK(t, srq.Modify(&verbs.SRQAttr{SRQLimit: 2}, verbs.SRQLimit), "B: modify_srq srq_limit 2 (re-arm)")
	dpSRQConsume(t, a, b, qa, 1, 6) // 3 -> 2: not below
	dpNoAsync(t, b.D, "2 WRs left with srq_limit 2")
	dpSRQConsume(t, a, b, qa, 1, 7) // 2 -> 1
	dpSRQLimitEvent(t, b.D, srq)
}

func dpUDSRQ(t *T, d Device) {
	a, b := dpOpen(t)
	srq, err := b.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 8, MaxSGE: 1}, nil)
	ExpectOK(t, err, "B: create_srq")
	t.Cleanup(func() { _ = srq.Destroy(context.Background()) })
	o := dpOpts{Type: verbs.QPTypeUD}
	qa := dpCreateQP(t, a, o)
	dpBringUp(t, a, qa, o, b.GID, 0)
	ob := dpOpts{Type: verbs.QPTypeUD, SRQ: srq}
	qb1, qb2 := dpCreateQP(t, b, ob), dpCreateQP(t, b, ob)
	dpBringUp(t, b, qb1, ob, a.GID, 0)
	dpBringUp(t, b, qb2, ob, a.GID, 0)
	bm := b.MR.Bytes()
	for i := range bm[:1024] {
		bm[i] = 0xee
	}
	dpFence(t, qb1, qb2)
	for i := range 2 {
		bad, err := srq.PostRecv(&verbs.RecvWR{WRID: uint64(0x71 + i), SGList: []verbs.SGE{b.MR.SGE(i*512, 40+100)}})
		if err != nil || bad != nil {
			t.Fatalf("B: post_srq_recv: %v", err)
		}
	}
	am := a.MR.Bytes()
	dpFill(am[:200], 9)
	ah := a.AH(t, b)
	// One message at a time: the order between two QPs' arrivals is not
	// defined, the order in which the SRQ hands out its WRs is.
	dpPost(t, qa, dpUDSend(1, ah, qb2.Num(), dpQKey, a.MR.SGE(0, 100)))
	w1 := dpWait1(t, b.RCQ, "receiver", a, b)
	dpPost(t, qa, dpUDSend(2, ah, qb1.Num(), dpQKey, a.MR.SGE(100, 100)))
	w2 := dpWait1(t, b.RCQ, "receiver", a, b)
	dpWaitWC(t, a.SCQ, 2, "sender", a, b)
	wcs := []verbs.WC{w1, w2}
	dpFence(t, qb1, qb2)
	for i, want := range []QP{qb2, qb1} {
		wc := wcs[i]
		dpExpectOK(t, wc, uint64(0x71+i), verbs.WCRecv, "UD receive from the SRQ, in posting order")
		Expect(t, wc.QPNum, want.Num(), "qp_num (the QP the message was sent to)")
		Expect(t, wc.SrcQP, qa.Num(), "src_qp")
		Expect(t, wc.ByteLen, uint32(40+100), "byte_len (GRH area + 100)")
		dpExpectBytes(t, bm[i*512+40:i*512+140], am[i*100:i*100+100], "payload after the GRH area")
	}
}

func dpUDTwoDestinations(t *T, d Device) {
	a, b := dpOpen(t)
	o := dpOpts{Type: verbs.QPTypeUD}
	qa := dpCreateQP(t, a, o)
	dpBringUp(t, a, qa, o, b.GID, 0)
	o2 := dpOpts{Type: verbs.QPTypeUD, QKey: 0x22220000}
	qb1, qb2 := dpCreateQP(t, b, o), dpCreateQP(t, b, o2)
	dpBringUp(t, b, qb1, o, a.GID, 0)
	dpBringUp(t, b, qb2, o2, a.GID, 0)
	dpRecv(t, qb1, 0x81, b.MR.SGE(0, 40+64))
	dpRecv(t, qb2, 0x82, b.MR.SGE(1024, 40+64))
	am := a.MR.Bytes()
	copy(am, "to the first QP..")
	copy(am[64:], "to the second QP")
	ah := a.AH(t, b)
	dpPost(t, qa, dpList(
		dpUDSend(1, ah, qb1.Num(), dpQKey, a.MR.SGE(0, 17)),
		dpUDSend(2, ah, qb2.Num(), 0x22220000, a.MR.SGE(64, 16)),
	))
	sw := dpWaitWC(t, a.SCQ, 2, "sender", a, b)
	dpExpectOK(t, sw[0], 1, verbs.WCSend, "SEND to the first QP")
	dpExpectOK(t, sw[1], 2, verbs.WCSend, "SEND to the second QP")
	wcs := dpWaitWC(t, b.RCQ, 2, "receivers", a, b)
	got := map[uint32]verbs.WC{}
	for _, wc := range wcs {
		got[wc.QPNum] = wc
	}
	w1, ok1 := got[qb1.Num()]
	w2, ok2 := got[qb2.Num()]
	if !ok1 || !ok2 {
		t.Fatalf("receive completions %s, want one on QP %#x and one on QP %#x", dpWCs(wcs), qb1.Num(), qb2.Num())
	}
	dpExpectOK(t, w1, 0x81, verbs.WCRecv, "first QP's receive")
	dpExpectOK(t, w2, 0x82, verbs.WCRecv, "second QP's receive")
	Expect(t, w1.ByteLen, uint32(40+17), "first QP's byte_len")
	Expect(t, w2.ByteLen, uint32(40+16), "second QP's byte_len")
	dpFence(t, qb1, qb2)
	bm := b.MR.Bytes()
	Expect(t, string(bm[40:57]), "to the first QP..", "first QP's payload")
	Expect(t, string(bm[1024+40:1024+56]), "to the second QP", "second QP's payload")
}

func dpReadScatter(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	m2 := a.RegMR(t, nil, 4096, verbs.AccessLocalWrite)
	bm := b.MR.Bytes()
	dpFill(bm[:3000], 5)
	want := append([]byte(nil), bm[:3000]...)
	am, m2b := a.MR.Bytes(), m2.Bytes()
	for i := range am[:4096] {
		am[i] = 0xee
	}
	for i := range m2b {
		m2b[i] = 0xee
	}
	dpFence(t, qa, qb)
	dpPost(t, qa, dpRDMA(1, verbs.WRRDMARead, b.MR.Addr(), b.MR.RKey(), a.MR.SGE(100, 1200), m2.SGE(500, 1800)))
	wc := dpWait1(t, a.SCQ, "requester", a, b)
	dpExpectOK(t, wc, 1, verbs.WCRDMARead, "RDMA READ into two regions")
	Expect(t, wc.ByteLen, uint32(3000), "RDMA READ byte_len")
	dpFence(t, qa)
	dpExpectBytes(t, am[100:1300], want[:1200], "first element (first region)")
	dpExpectBytes(t, m2b[500:2300], want[1200:3000], "second element (second region)")
	dpExpectUntouched(t, am[:100], 0xee, "first region before the element")
	dpExpectUntouched(t, am[1300:4096], 0xee, "first region after the element")
	dpExpectUntouched(t, m2b[:500], 0xee, "second region before the element")
	dpExpectUntouched(t, m2b[2300:], 0xee, "second region after the element")
}

func dpWriteGather(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	m2 := a.RegMR(t, nil, 4096, verbs.AccessLocalWrite)
	am, m2b := a.MR.Bytes(), m2.Bytes()
	dpFill(am[:2000], 11)
	dpFill(m2b, 12)
	want := append(append([]byte(nil), am[1000:2000]...), m2b[3000:3700]...)
	bm := b.MR.Bytes()
	for i := range bm[:8192] {
		bm[i] = 0xee
	}
	dpFence(t, qa, qb)
	dpPost(t, qa, dpRDMA(1, verbs.WRRDMAWrite, b.MR.Addr()+2048, b.MR.RKey(), a.MR.SGE(1000, 1000), m2.SGE(3000, 700)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "requester", a, b), 1, verbs.WCRDMAWrite, "RDMA WRITE from two regions")
	dpNoWC(t, b.RCQ, "the responder of an RDMA WRITE")
	dpFence(t, qb)
	dpExpectBytes(t, bm[2048:2048+1700], want, "remote memory: the two elements, contiguous")
	dpExpectUntouched(t, bm[:2048], 0xee, "remote memory before the write")
	dpExpectUntouched(t, bm[2048+1700:8192], 0xee, "remote memory after the write")
}
