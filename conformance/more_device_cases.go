package conformance

import (
	"strconv"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// More device, port, CQ, MR and SRQ cases (issue 15): the boundaries of
// the limits ibv_query_device and ibv_query_port report, and poll_cq with
// no room.

func init() {
	Register(
		Case{
			Name:  "query_port/bad-port-einval",
			Cite:  `ibv_query_port(3): "returns the attributes of port port_num for device context context"; ports are numbered 1..phys_port_cnt (ibv_query_device(3)), and the kernel's ib_query_port: "if (!rdma_is_port_valid(device, port_num)) return -EINVAL"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				n := d.QueryDevice().PhysPortCnt
				_, err := d.QueryPort(0)
				ExpectErrno(t, err, syscall.EINVAL, "query_port 0")
				_, err = d.QueryPort(n + 1)
				ExpectErrno(t, err, syscall.EINVAL, "query_port phys_port_cnt+1")
				for p := uint8(1); p <= n; p++ {
					_, err := d.QueryPort(p)
					ExpectOK(t, err, "query_port "+strconv.Itoa(int(p)))
				}
			},
		},
		Case{
			Name:  "query_port/active_mtu-at-most-max_mtu",
			Cite:  `ibv_query_port(3): max_mtu is the "Max MTU supported by port" and active_mtu the "Actual MTU", both an enum ibv_mtu (IBV_MTU_256 .. IBV_MTU_4096)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				if !p.MaxMTU.Valid() || !p.ActiveMTU.Valid() {
					t.Fatalf("max_mtu %d, active_mtu %d: want values of enum ibv_mtu (1..5)", p.MaxMTU, p.ActiveMTU)
				}
				if p.ActiveMTU > p.MaxMTU {
					t.Fatalf("active_mtu %d above max_mtu %d", p.ActiveMTU.Bytes(), p.MaxMTU.Bytes())
				}
			},
		},
		Case{
			Name:  "query_pkey/every-index-below-pkey_tbl_len",
			Cite:  `ibv_query_port(3): pkey_tbl_len is the "Length of partition table"; ibv_query_pkey(3): "returns the P_Key value (in network byte order) in entry index of port port_num" — every index below the length is an entry`,
			Label: Spec,
			Run: func(t *T, d Device) {
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				if p.PKeyTblLen == 0 {
					t.Fatalf("pkey_tbl_len is 0: a port has at least the default partition")
				}
				for i := range int(p.PKeyTblLen) {
					_, err := d.QueryPKey(1, i)
					ExpectOK(t, err, "query_pkey index "+strconv.Itoa(i))
				}
			},
		},
		Case{
			Name:  "create_cq/cqe-max_cqe-accepted",
			Cite:  `ibv_query_device(3): max_cqe is the "Maximum number of entries in each CQ supported by this device"; ibv_create_cq(3): "ibv_create_cq() may create a CQ with size greater than or equal to the requested size" — the maximum itself is supported`,
			Label: Spec,
			Run: func(t *T, d Device) {
				maxCQE := int(d.QueryDevice().MaxCQE)
				c, err := d.CreateCQ(maxCQE, nil, nil, 0)
				ExpectOK(t, err, "create_cq with cqe = max_cqe "+strconv.Itoa(maxCQE))
				if c.CQE() < maxCQE {
					t.Fatalf("cq->cqe %d below the requested %d", c.CQE(), maxCQE)
				}
				ExpectOK(t, c.Destroy(Ctx(t, dpDeadline)), "destroy_cq")
			},
		},
		Case{
			Name:  "reg_mr/access-0-accepted",
			Cite:  `ibv_reg_mr(3): access "is either 0 or the bitwise OR of one or more of the following flags"; "Local read access is always enabled for the MR."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				pd, err := d.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				m, err := pd.RegMR(make([]byte, 4096), 0)
				ExpectOK(t, err, "reg_mr with access 0")
				Expect(t, m.Len(), 4096, "length")
				ExpectOK(t, m.Dereg(), "dereg_mr")
				ExpectOK(t, pd.Dealloc(), "dealloc_pd")
			},
		},
		Case{
			Name:  "poll_cq/num_entries-0-takes-nothing",
			Cite:  `ibv_poll_cq(3): "returns the first num_entries (or all available completions if the CQ contains fewer than this number)"; "Each polled completion is removed from the CQ" — with num_entries 0 none is polled, and the return value is "the number of completions found"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				q := f.NewQP(t, verbs.QPTypeRC)
				f.Walk(t, q, verbs.QPTypeRC, qsInit, qpPeerQPN)
				qpPostRecv(t, q, qpRecvList(qpRecvWR(1), qpRecvWR(2)))
				qpToErr(t, q)
				// Let the flushes arrive, then poll with no room.
				wcs := make([]verbs.WC, 4)
				for range 1000 {
					if n := f.CQ.Poll(wcs[:0]); n != 0 {
						t.Fatalf("poll_cq with num_entries 0 returned %d", n)
					}
				}
				qpExpectFlushed(t, f.CQ, q, "the completions left by the empty polls", 1, 2)
			},
		},
		Case{
			Name:  "post_srq_recv/num_sge-max_sge-accepted",
			Cite:  `ibv_create_srq(3): max_sge is the "Requested max number of scatter elements per WR" of the SRQ, and the values granted "will be greater than or equal to the values requested"; ibv_post_srq_recv(3) posts WRs within it`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				s := nqSRQ(t, f, 4, 3)
				sges := []verbs.SGE{f.MR.SGE(0, 16), f.MR.SGE(64, 16), f.MR.SGE(128, 16)}
				bad, err := s.PostRecv(&verbs.RecvWR{WRID: 1, SGList: sges})
				if err != nil || bad != nil {
					t.Fatalf("post_srq_recv with num_sge = max_sge 3: %v", err)
				}
			},
		},
	)
}
