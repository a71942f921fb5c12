package conformance

import (
	"syscall"
	"time"

	"github.com/softhca/softhca/verbs"
)

// Shared receive queue cases: creation limits, query, modify (resize and
// the limit arm), posting, and destruction.
//
// IBV_EVENT_SRQ_LIMIT_REACHED needs receives taken from the SRQ, which
// only arriving data does: the data-path cases datapath/srq/limit-event-*
// (more_datapath_cases.go) trigger it.

func init() {
	Register(
		Case{
			Name:  "create_srq/max_wr-zero-einval",
			Cite:  `ibv_create_srq(3): max_wr is the "Requested max number of outstanding work requests (WRs) in the SRQ"; rxe_srq_chk_init: "max_wr(%d) <= 0" is EINVAL`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				_, err := f.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 0, MaxSGE: 1}, nil)
				ExpectErrno(t, err, syscall.EINVAL, "create_srq max_wr 0")
			},
		},
		Case{
			Name:  "create_srq/above-device-limits-einval",
			Cite:  `ibv_query_device(3): max_srq_wr is the "Maximum number of WRs per SRQ" and max_srq_sge the "Maximum number of s/g per SRQ"; rxe_srq_chk_init rejects larger requests with EINVAL`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				a := d.QueryDevice()
				_, err := f.PD.CreateSRQ(verbs.SRQAttr{MaxWR: a.MaxSRQWR + 1, MaxSGE: 1}, nil)
				ExpectErrno(t, err, syscall.EINVAL, "create_srq max_wr max_srq_wr+1")
				_, err = f.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: a.MaxSRQSGE + 1}, nil)
				ExpectErrno(t, err, syscall.EINVAL, "create_srq max_sge max_srq_sge+1")
				_, err = f.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: a.MaxSRQSGE}, nil)
				ExpectOK(t, err, "create_srq max_sge max_srq_sge")
			},
		},
		Case{
			Name:  "query_srq/after-create",
			Cite:  `ibv_create_srq(3): "the values of max_wr and max_sge will be greater than or equal to the values requested"; srq_limit is "irrelevant for ibv_create_srq"; ibv_query_srq(3): "If the value returned for srq_limit is 0, then the SRQ limit reached ("low watermark") event is not (or no longer) armed"`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: `Linux 6.1.192 drivers/infiniband/sw/rxe/rxe_srq.c rxe_srq_from_init(): "srq->limit = init->attr.srq_limit;" and rxe_verbs.c rxe_query_srq(): "attr->srq_limit = srq->limit;"`,
				Note: "keeps the srq_limit given to create_srq and reports it (2) from query_srq",
			}},
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s, err := f.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 5, MaxSGE: 3, SRQLimit: 2}, nil)
				ExpectOK(t, err, "create_srq")
				a := nqQuerySRQ(t, s)
				if a.MaxWR < 5 || a.MaxSGE < 3 {
					t.Fatalf("query_srq: max_wr %d, max_sge %d, want at least 5 and 3", a.MaxWR, a.MaxSGE)
				}
				Expect(t, a.SRQLimit, uint32(0), "srq_limit of a new SRQ (the limit given to create_srq is ignored)")
			},
		},
		Case{
			Name:  "modify_srq/limit-arms-and-query-shows-it",
			Cite:  `ibv_modify_srq(3): "IBV_SRQ_LIMIT Set the SRQ limit"; "Modifying the srq_limit arms the SRQ"; ibv_query_srq(3): srq_limit 0 means not armed`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 8, 1)
				ExpectOK(t, s.Modify(&verbs.SRQAttr{SRQLimit: 3}, verbs.SRQLimit), "modify_srq limit 3")
				a := nqQuerySRQ(t, s)
				Expect(t, a.SRQLimit, uint32(3), "srq_limit after arming")
				// max_wr in the attribute is ignored without IBV_SRQ_MAX_WR.
				before := a.MaxWR
				ExpectOK(t, s.Modify(&verbs.SRQAttr{MaxWR: 1, SRQLimit: 2}, verbs.SRQLimit), "modify_srq limit 2 (max_wr not in the mask)")
				a = nqQuerySRQ(t, s)
				Expect(t, a.SRQLimit, uint32(2), "srq_limit after re-arming")
				Expect(t, a.MaxWR, before, "max_wr, not in the mask")
			},
		},
		Case{
			Name:  "modify_srq/limit-above-max_wr-einval",
			Cite:  `ibv_modify_srq(3): "If any of the modify attributes is invalid, none of the attributes will be modified"; rxe_srq_chk_attr: an srq_limit above the SRQ's capacity is EINVAL`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 8, 1)
				ExpectOK(t, s.Modify(&verbs.SRQAttr{SRQLimit: 1}, verbs.SRQLimit), "modify_srq limit 1")
				a := nqQuerySRQ(t, s)
				err := s.Modify(&verbs.SRQAttr{SRQLimit: a.MaxWR + 1}, verbs.SRQLimit)
				ExpectErrno(t, err, syscall.EINVAL, "modify_srq limit max_wr+1")
				Expect(t, nqQuerySRQ(t, s), a, "attributes after the failed modify")
			},
		},
		Case{
			Name:  "modify_srq/all-or-nothing",
			Cite:  `ibv_modify_srq(3): "If any of the modify attributes is invalid, none of the attributes will be modified."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 8, 1)
				ExpectOK(t, s.Modify(&verbs.SRQAttr{SRQLimit: 2}, verbs.SRQLimit), "modify_srq limit 2")
				a := nqQuerySRQ(t, s)
				both := verbs.SRQMaxWR | verbs.SRQLimit
				// A valid resize with an invalid limit: neither applies.
				err := s.Modify(&verbs.SRQAttr{MaxWR: a.MaxWR * 2, SRQLimit: a.MaxWR*4 + 1}, both)
				ExpectErrno(t, err, syscall.EINVAL, "modify_srq valid max_wr with limit above it")
				Expect(t, nqQuerySRQ(t, s), a, "attributes after the failed modify (bad limit)")
				// An invalid resize with a valid limit: neither applies.
				err = s.Modify(&verbs.SRQAttr{MaxWR: d.QueryDevice().MaxSRQWR + 1, SRQLimit: 1}, both)
				ExpectErrno(t, err, syscall.EINVAL, "modify_srq max_wr above max_srq_wr with a valid limit")
				Expect(t, nqQuerySRQ(t, s), a, "attributes after the failed modify (bad max_wr)")
			},
		},
		Case{
			Name:  "modify_srq/resize-below-outstanding-keeps-posted-wrs",
			Cite:  `ibv_modify_srq(3): "IBV_SRQ_MAX_WR Resize the SRQ"; max_wr is the "maximum number of outstanding work requests (WRs) in the SRQ", so the SRQ cannot drop below those already posted. The man page does not say whether a request below them fails or is rounded up (ibv_create_srq(3): the sizes granted may exceed those requested): softhca fails with EINVAL and changes nothing; rxe grants roundup_pow_of_two(max_wr + 1) - 1 (rxe_queue.c rxe_queue_init()) and fails only when that cannot hold the posted WRs (resize_finish()). Either way none of the posted WRs is lost`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				nqNeedSRQResize(t, d)
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 8, 1)
				nqPostSRQ(t, s, 1, 2, 3)
				a := nqQuerySRQ(t, s)
				if err := s.Modify(&verbs.SRQAttr{MaxWR: 2}, verbs.SRQMaxWR); err != nil {
					ExpectErrno(t, err, syscall.EINVAL, "modify_srq max_wr 2 with 3 posted")
					Expect(t, nqQuerySRQ(t, s), a, "attributes after the failed resize")
				} else {
					a = nqQuerySRQ(t, s)
					if a.MaxWR < 3 {
						t.Fatalf("modify_srq max_wr 2 with 3 posted succeeded with max_wr %d: the posted WRs do not fit", a.MaxWR)
					}
				}
				// The three are still there: exactly max_wr-3 more fit.
				nqFillSRQ(t, s, int(a.MaxWR)-3)
			},
		},
		Case{
			Name:  "modify_srq/resize-grows-capacity",
			Cite:  `ibv_modify_srq(3): "IBV_SRQ_MAX_WR Resize the SRQ"; "Not all devices support resizing SRQs. To check if a device supports it, check if the IBV_DEVICE_SRQ_RESIZE bit is set"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				nqNeedSRQResize(t, d)
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 2, 1)
				first := nqQuerySRQ(t, s).MaxWR
				nqFillSRQ(t, s, int(first))
				ExpectOK(t, s.Modify(&verbs.SRQAttr{MaxWR: first + 6}, verbs.SRQMaxWR), "modify_srq max_wr +6")
				a := nqQuerySRQ(t, s)
				if a.MaxWR < first+6 {
					t.Fatalf("max_wr %d after resizing to %d", a.MaxWR, first+6)
				}
				nqFillSRQ(t, s, int(a.MaxWR-first))
			},
		},
		Case{
			Name:  "modify_srq/resize-below-armed-limit-einval",
			Cite:  `rxe_srq_chk_attr: "max_wr (%d) < srq->limit (%d)" is EINVAL — the armed srq_limit may not exceed max_wr, as ibv_modify_srq(3) requires of a limit set together with it`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				nqNeedSRQResize(t, d)
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 8, 1)
				ExpectOK(t, s.Modify(&verbs.SRQAttr{SRQLimit: 6}, verbs.SRQLimit), "modify_srq limit 6")
				a := nqQuerySRQ(t, s)
				ExpectErrno(t, s.Modify(&verbs.SRQAttr{MaxWR: 4}, verbs.SRQMaxWR), syscall.EINVAL, "modify_srq max_wr 4 below the armed limit 6")
				Expect(t, nqQuerySRQ(t, s), a, "attributes after the failed resize")
			},
		},
		Case{
			Name:  "post_srq_recv/too-many-sge-einval-returns-bad-wr",
			Cite:  `ibv_post_srq_recv(3): "It stops processing WRs from this list at the first failure (that can be detected immediately while requests are being posted), and returns this failing WR through bad_wr."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 4, 1)
				a := nqQuerySRQ(t, s)
				sges := make([]verbs.SGE, a.MaxSGE+1)
				for i := range sges {
					sges[i] = f.MR.SGE(i*64, 64)
				}
				w3 := &verbs.RecvWR{WRID: 3, SGList: []verbs.SGE{f.MR.SGE(0, 64)}}
				w2 := &verbs.RecvWR{WRID: 2, SGList: sges, Next: w3}
				w1 := &verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{f.MR.SGE(0, 64)}, Next: w2}
				bad, err := s.PostRecv(w1)
				ExpectErrno(t, err, syscall.EINVAL, "post_srq_recv with num_sge max_sge+1 in the second WR")
				if bad != w2 {
					t.Fatalf("bad_wr is %v, want the second WR", nqRecvID(bad))
				}
				// Exactly the first WR was posted.
				nqFillSRQ(t, s, int(a.MaxWR)-1)
			},
		},
		Case{
			Name:  "post_srq_recv/full-enomem",
			Cite:  `ibv_post_srq_recv(3): posting stops at the first failure and returns it through bad_wr; max_wr is the maximum number of outstanding WRs (ENOMEM when the SRQ is full, as rxe's post_one_recv returns)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 3, 1)
				n := int(nqQuerySRQ(t, s).MaxWR)
				var head *verbs.RecvWR
				var last *verbs.RecvWR
				for i := n; i >= 0; i-- {
					head = &verbs.RecvWR{WRID: uint64(i + 1), Next: head}
					if i == n {
						last = head
					}
				}
				bad, err := s.PostRecv(head)
				ExpectErrno(t, err, syscall.ENOMEM, "post_srq_recv of max_wr+1 WRs")
				if bad != last {
					t.Fatalf("bad_wr is %v, want the WR past max_wr", nqRecvID(bad))
				}
				bad, err = s.PostRecv(&verbs.RecvWR{WRID: 99})
				ExpectErrno(t, err, syscall.ENOMEM, "post_srq_recv to a full SRQ")
				if bad == nil || bad.WRID != 99 {
					t.Fatalf("bad_wr is %v, want wr_id 99", nqRecvID(bad))
				}
			},
		},
		Case{
			Name:  "destroy_srq/busy-while-a-qp-uses-it",
			Cite:  `ibv_create_srq(3): "ibv_destroy_srq() fails if any queue pair is still associated with this SRQ."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 4, 1)
				q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: verbs.QPTypeRC})
				ExpectOK(t, err, "create_qp with the SRQ")
				ExpectErrno(t, s.Destroy(Ctx(t, time.Second)), syscall.EBUSY, "destroy_srq while a QP uses it")
				nqPostSRQ(t, s, 7) // still usable
				ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp")
				ExpectOK(t, s.Destroy(Ctx(t, time.Second)), "destroy_srq once the QP is gone")
			},
		},
		Case{
			Name:  "dealloc_pd/busy-while-an-srq-exists",
			Cite:  `ibv_alloc_pd(3): "ibv_dealloc_pd() may fail if any other resource is still associated with the PD being freed."; the kernel returns EBUSY`,
			Label: Spec,
			Run: func(t *T, d Device) {
				pd, err := d.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				s, err := pd.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}, nil)
				ExpectOK(t, err, "create_srq")
				ExpectErrno(t, pd.Dealloc(), syscall.EBUSY, "dealloc_pd holding an SRQ")
				ExpectOK(t, s.Destroy(Ctx(t, time.Second)), "destroy_srq")
				ExpectOK(t, pd.Dealloc(), "dealloc_pd once empty")
			},
		},
		Case{
			Name:  "destroy_srq/twice-fails",
			Cite:  `ibv_create_srq(3): ibv_destroy_srq "returns 0 on success, or the value of errno on failure"; the SRQ no longer exists after the first call`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 4, 1)
				ExpectOK(t, s.Destroy(Ctx(t, time.Second)), "destroy_srq")
				if err := s.Destroy(Ctx(t, time.Second)); err == nil {
					t.Fatalf("second destroy_srq succeeded")
				}
			},
		},
	)
}

// nqSRQ creates an SRQ on the fixture's PD.
func nqSRQ(t *T, f *Fixture, maxWR, maxSGE uint32) SRQ {
	t.Helper()
	s, err := f.PD.CreateSRQ(verbs.SRQAttr{MaxWR: maxWR, MaxSGE: maxSGE}, nil)
	ExpectOK(t, err, "create_srq")
	return s
}

// nqQuerySRQ queries an SRQ, failing the case on error.
func nqQuerySRQ(t *T, s SRQ) verbs.SRQAttr {
	t.Helper()
	a, err := s.Query()
	ExpectOK(t, err, "query_srq")
	return a
}

// nqPostSRQ posts one receive without scatter elements per wr_id.
func nqPostSRQ(t *T, s SRQ, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		bad, err := s.PostRecv(&verbs.RecvWR{WRID: id})
		if err != nil || bad != nil {
			t.Fatalf("post_srq_recv wr_id %d: %v", id, err)
		}
	}
}

// nqFillSRQ posts exactly n more receives and checks that the next one
// fails with ENOMEM: the SRQ had room for exactly n.
func nqFillSRQ(t *T, s SRQ, n int) {
	t.Helper()
	for i := range n {
		bad, err := s.PostRecv(&verbs.RecvWR{WRID: uint64(0x100 + i)})
		if err != nil || bad != nil {
			t.Fatalf("post_srq_recv %d of the %d that should fit: %v", i+1, n, err)
		}
	}
	_, err := s.PostRecv(&verbs.RecvWR{WRID: 0x1ff})
	ExpectErrno(t, err, syscall.ENOMEM, "post_srq_recv past max_wr")
}

// nqNeedSRQResize skips the case unless the device can resize SRQs.
func nqNeedSRQResize(t *T, d Device) {
	t.Helper()
	if d.QueryDevice().DeviceCapFlags&verbs.DeviceSRQResize == 0 {
		t.Skipf("the device lacks IBV_DEVICE_SRQ_RESIZE")
	}
}

// nqRecvID describes a receive WR for messages.
func nqRecvID(wr *verbs.RecvWR) any {
	if wr == nil {
		return "nil"
	}
	return wr.WRID
}
