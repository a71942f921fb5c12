package conformance

import (
	"errors"
	"strconv"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// Address handle cases. On RoCE an address vector must carry a GRH whose
// source GID index names a populated entry and whose destination GID names
// the peer.

func init() {
	Register(
		Case{
			Name:  "create_ah/roce-needs-grh-einval",
			Cite:  `ibv_create_ah(3): "If port flag IBV_QPF_GRH_REQUIRED is set then ibv_create_ah() must be created with definition of 'struct ibv_ah_attr { .is_global = 1; .grh = {...}; }'" — RoCE ports require it (rdma_check_ah_attr: a RoCE AH without IB_AH_GRH is EINVAL)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				a := nqAHAttr(t, f)
				a.IsGlobal = false
				_, err := f.PD.CreateAH(a)
				ExpectErrno(t, err, syscall.EINVAL, "create_ah without is_global")
			},
		},
		Case{
			Name:  "create_ah/empty-sgid-index-rejected",
			Cite:  `ibv_create_ah(3): grh.sgid_index is the "Source GID index"; the kernel resolves it with rdma_get_gid_attr, which fails for an entry that holds no GID (ENODATA; EINVAL in softhca and in older kernels)`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				idx := nqFirstEmptyGID(t, d)
				a := nqAHAttr(t, f)
				a.GRH.SGIDIndex = uint8(idx)
				_, err := f.PD.CreateAH(a)
				if err == nil {
					t.Fatalf("create_ah with sgid_index %d (an empty GID entry) succeeded", idx)
				}
				if !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENODATA) {
					t.Fatalf("create_ah with an empty sgid_index: %v, want EINVAL or ENODATA", err)
				}
			},
		},
		Case{
			Name:  "create_ah/zero-dgid-einval",
			Cite:  `ibv_create_ah(3): grh.dgid is the "Destination GID or MGID"; on RoCE it carries the peer's IP address, and the zero GID (::) names no peer`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				a := nqAHAttr(t, f)
				a.GRH.DGID = verbs.GID{}
				_, err := f.PD.CreateAH(a)
				ExpectErrno(t, err, syscall.EINVAL, "create_ah with dgid ::")
			},
		},
		Case{
			Name:  "create_ah/port-must-exist-einval",
			Cite:  `ibv_create_ah(3): port_num is the "Physical port number"; ib_uverbs_create_ah: "if (!rdma_is_port_valid(ib_dev, cmd.attr.port_num)) ret = -EINVAL" — ports are numbered from 1 to phys_port_cnt`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				a := nqAHAttr(t, f)
				a.PortNum = d.QueryDevice().PhysPortCnt + 1
				_, err := f.PD.CreateAH(a)
				ExpectErrno(t, err, syscall.EINVAL, "create_ah on port phys_port_cnt+1")
				a.PortNum = 0
				_, err = f.PD.CreateAH(a)
				ExpectErrno(t, err, syscall.EINVAL, "create_ah on port 0")
			},
		},
		Case{
			Name:  "create_ah/valid-keeps-attributes",
			Cite:  `ibv_create_ah(3): "creates an address handle (AH) associated with the protection domain pd" from the ibv_ah_attr given; the handle carries that address vector to ibv_post_send. Each populated source GID is tried whose address is of the destination's family: on RoCE v2 the two GIDs are the source and destination addresses of one IP header (IBTA annex A17), so an IPv6 source cannot reach an IPv4-mapped destination (the kernel's rdma_resolve_ip() refuses a mixed pair with EINVAL)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				v4 := f.PeerGID(t).Addr().Is4()
				for _, idx := range nqPopulatedGIDs(t, d) {
					g, err := d.QueryGID(1, idx)
					ExpectOK(t, err, "query_gid "+strconv.Itoa(idx))
					if g.Addr().Is4() != v4 {
						continue
					}
					a := nqAHAttr(t, f)
					a.GRH.SGIDIndex = uint8(idx)
					a.GRH.FlowLabel, a.GRH.TrafficClass, a.GRH.HopLimit = 0x12345, 0x20, 17
					a.SL, a.StaticRate = 3, 0
					ah, err := f.PD.CreateAH(a)
					ExpectOK(t, err, "create_ah with sgid_index "+strconv.Itoa(idx))
					Expect(t, ah.Attr(), a, "address vector of the AH")
				}
			},
		},
		Case{
			Name:  "dealloc_pd/busy-while-an-ah-exists",
			Cite:  `ibv_alloc_pd(3): "ibv_dealloc_pd() may fail if any other resource is still associated with the PD being freed."; the kernel returns EBUSY`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				pd, err := d.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				ah, err := pd.CreateAH(nqAHAttr(t, f))
				ExpectOK(t, err, "create_ah")
				ExpectErrno(t, pd.Dealloc(), syscall.EBUSY, "dealloc_pd holding an AH")
				ExpectOK(t, ah.Destroy(), "destroy_ah")
				ExpectOK(t, pd.Dealloc(), "dealloc_pd once empty")
			},
		},
		Case{
			Name:  "destroy_ah/twice-fails",
			Cite:  `ibv_create_ah(3): "ibv_destroy_ah() returns 0 on success, or the value of errno on failure"; the AH no longer exists after the first call`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				ah, err := f.PD.CreateAH(nqAHAttr(t, f))
				ExpectOK(t, err, "create_ah")
				ExpectOK(t, ah.Destroy(), "destroy_ah")
				if err := ah.Destroy(); err == nil {
					t.Fatalf("second destroy_ah succeeded")
				}
				// The failed second destroy did not release the PD twice:
				// a new AH keeps it busy.
				ah2, err := f.PD.CreateAH(nqAHAttr(t, f))
				ExpectOK(t, err, "create_ah after the double destroy")
				_ = ah2
				ExpectOK(t, f.MR.Dereg(), "dereg_mr")
				ExpectErrno(t, f.PD.Dealloc(), syscall.EBUSY, "dealloc_pd still holding the second AH")
			},
		},
	)
}

// nqAHAttr returns a valid RoCEv2 address vector: port 1, the GRH from the
// device's own GID at index 1 to the same GID.
func nqAHAttr(t *T, f *Fixture) verbs.AHAttr {
	t.Helper()
	return verbs.AHAttr{
		IsGlobal: true,
		PortNum:  1,
		GRH:      verbs.GlobalRoute{DGID: f.PeerGID(t), SGIDIndex: 1, HopLimit: 64},
	}
}

// nqPopulatedGIDs returns the indexes of port 1's non-zero GIDs among the
// first 16.
func nqPopulatedGIDs(t *T, d Device) []int {
	t.Helper()
	var out []int
	for i := range 16 {
		g, err := d.QueryGID(1, i)
		ExpectOK(t, err, "query_gid "+strconv.Itoa(i))
		if !g.IsZero() {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		t.Fatalf("port 1 has no GID")
	}
	return out
}

// nqFirstEmptyGID returns the index of port 1's first zero GID below 256
// (sgid_index is 8 bits), skipping the case if every entry is populated.
func nqFirstEmptyGID(t *T, d Device) int {
	t.Helper()
	p, err := d.QueryPort(1)
	ExpectOK(t, err, "query_port 1")
	for i := 0; i < int(p.GIDTblLen) && i < 256; i++ {
		g, err := d.QueryGID(1, i)
		ExpectOK(t, err, "query_gid "+strconv.Itoa(i))
		if g.IsZero() {
			return i
		}
	}
	t.Skipf("every GID entry an sgid_index can name is populated")
	return 0
}
