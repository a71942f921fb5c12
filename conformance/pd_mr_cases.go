package conformance

import (
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/softhca/softhca/verbs"
)

// Protection domain and memory region cases.

func init() {
	Register(
		Case{
			Name:  "dealloc_pd/busy-while-an-mr-is-registered",
			Cite:  `ibv_alloc_pd(3): "ibv_dealloc_pd() may fail if any other resource is still associated with the PD being freed."; the kernel returns EBUSY`,
			Label: Spec,
			Run: func(t *T, d Device) {
				pd, err := d.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				m, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
				ExpectOK(t, err, "reg_mr")
				ExpectErrno(t, pd.Dealloc(), syscall.EBUSY, "dealloc_pd holding an MR")
				// The failed dealloc left the PD usable.
				m2, err := pd.RegMR(make([]byte, 4096), 0)
				ExpectOK(t, err, "reg_mr after the failed dealloc_pd")
				ExpectOK(t, m.Dereg(), "dereg_mr")
				ExpectErrno(t, pd.Dealloc(), syscall.EBUSY, "dealloc_pd still holding the second MR")
				ExpectOK(t, m2.Dereg(), "dereg_mr of the second MR")
				ExpectOK(t, pd.Dealloc(), "dealloc_pd once empty")
			},
		},
		Case{
			Name:  "dealloc_pd/other-pds-objects-do-not-count",
			Cite:  `ibv_alloc_pd(3): ibv_dealloc_pd "may fail if any other resource is still associated with the PD being freed" — only resources of that PD`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d) // f.PD holds an MR
				pd, err := d.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				ExpectOK(t, pd.Dealloc(), "dealloc_pd of an empty PD while another PD holds an MR")
				_, err = f.PD.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
				ExpectOK(t, err, "reg_mr on the other PD")
			},
		},
		Case{
			Name:  "dealloc_pd/twice-fails",
			Cite:  `ibv_alloc_pd(3): ibv_dealloc_pd "returns 0 on success, or the value of errno on failure"; the PD no longer exists after the first call`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				pd, err := d.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				ExpectOK(t, pd.Dealloc(), "dealloc_pd")
				if err := pd.Dealloc(); err == nil {
					t.Fatalf("second dealloc_pd succeeded")
				}
			},
		},
		Case{
			Name:  "dealloc_pd/dead-pd-takes-no-objects",
			Cite:  `ibv_alloc_pd(3): after ibv_dealloc_pd the PD is gone; the kernel rejects a stale PD handle in reg_mr, create_qp, create_srq and create_ah with EINVAL`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				pd, err := d.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				ExpectOK(t, pd.Dealloc(), "dealloc_pd")
				_, err = pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
				ExpectErrno(t, err, syscall.EINVAL, "reg_mr on a deallocated PD")
				_, err = pd.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, Cap: DefaultCap, QPType: verbs.QPTypeRC})
				ExpectErrno(t, err, syscall.EINVAL, "create_qp on a deallocated PD")
				_, err = pd.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}, nil)
				ExpectErrno(t, err, syscall.EINVAL, "create_srq on a deallocated PD")
				_, err = pd.CreateAH(nqAHAttr(t, f))
				ExpectErrno(t, err, syscall.EINVAL, "create_ah on a deallocated PD")
				// The failed creations left nothing in the CQ's use count.
				ExpectOK(t, f.CQ.Destroy(Ctx(t, time.Second)), "destroy_cq named by the failed create_qp")
			},
		},
		Case{
			Name:  "reg_mr/remote-write-needs-local-write",
			Cite:  `ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE must be set too."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				buf := make([]byte, 4096)
				_, err := f.PD.RegMR(buf, verbs.AccessRemoteWrite)
				ExpectErrno(t, err, syscall.EINVAL, "reg_mr REMOTE_WRITE without LOCAL_WRITE")
				_, err = f.PD.RegMR(buf, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
				ExpectErrno(t, err, syscall.EINVAL, "reg_mr REMOTE_WRITE|REMOTE_READ without LOCAL_WRITE")
				_, err = f.PD.RegMR(buf, verbs.AccessRemoteWrite|verbs.AccessLocalWrite)
				ExpectOK(t, err, "reg_mr REMOTE_WRITE|LOCAL_WRITE")
			},
		},
		Case{
			Name:  "reg_mr/remote-atomic-needs-local-write",
			Cite:  `ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then IBV_ACCESS_LOCAL_WRITE must be set too."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				buf := make([]byte, 4096)
				_, err := f.PD.RegMR(buf, verbs.AccessRemoteAtomic)
				ExpectErrno(t, err, syscall.EINVAL, "reg_mr REMOTE_ATOMIC without LOCAL_WRITE")
				_, err = f.PD.RegMR(buf, verbs.AccessRemoteAtomic|verbs.AccessLocalWrite)
				ExpectOK(t, err, "reg_mr REMOTE_ATOMIC|LOCAL_WRITE")
			},
		},
		Case{
			Name:  "reg_mr/remote-read-alone-ok",
			Cite:  `ibv_reg_mr(3): access "is either 0 or the bitwise OR of one or more of the following flags"; "Local read access is always enabled for the MR." — only REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				_, err := f.PD.RegMR(make([]byte, 4096), verbs.AccessRemoteRead)
				ExpectOK(t, err, "reg_mr REMOTE_READ alone")
				_, err = f.PD.RegMR(make([]byte, 4096), 0)
				ExpectOK(t, err, "reg_mr with access 0")
			},
		},
		Case{
			Name:  "reg_mr/keys-distinct",
			Cite:  `ibv_reg_mr(3): lkey "is used as the lkey field of struct ibv_sge" and rkey "is used by remote processes" to name the region — two live regions cannot share a key, even over the same memory`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				buf := make([]byte, 8192)
				a, err := f.PD.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
				ExpectOK(t, err, "reg_mr a")
				b, err := f.PD.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
				ExpectOK(t, err, "reg_mr b over the same buffer")
				c, err := f.PD.RegMR(buf[4096:], verbs.AccessLocalWrite|verbs.AccessRemoteRead)
				ExpectOK(t, err, "reg_mr c over half of it")
				ms := []MR{f.MR, a, b, c}
				for i := range ms {
					for j := i + 1; j < len(ms); j++ {
						if ms[i].LKey() == ms[j].LKey() {
							t.Errorf("regions %d and %d share lkey %#x", i, j, ms[i].LKey())
						}
						if ms[i].RKey() == ms[j].RKey() {
							t.Errorf("regions %d and %d share rkey %#x", i, j, ms[i].RKey())
						}
					}
				}
			},
		},
		Case{
			Name:  "reg_mr/addr-and-length-are-the-buffer",
			Cite:  `ibv_reg_mr(3): "The MR's starting address is addr and its size is length."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				buf := make([]byte, 10000)
				dpFill(buf, 0x3c)
				for _, r := range [][2]int{{0, 10000}, {100, 356}, {4095, 4097}} {
					sub := buf[r[0]:r[1]]
					m, err := f.PD.RegMR(sub, verbs.AccessLocalWrite)
					ExpectOK(t, err, "reg_mr")
					Expect(t, m.Len(), len(sub), "mr->length of buf["+nqRange(r)+"]")
					b := m.Bytes()
					Expect(t, len(b), len(sub), "length of the registered memory of buf["+nqRange(r)+"]")
					dpExpectBytes(t, b, sub, "the registered memory of buf["+nqRange(r)+"]")
					// A backend that registers buf itself (softhca in
					// process) must report its address; one that
					// registers a copy (PD.RegMR) reports the copy's, in
					// the device's process.
					if &b[0] == &sub[0] {
						Expect(t, m.Addr(), uint64(uintptr(unsafe.Pointer(&sub[0]))), "mr->addr of buf["+nqRange(r)+"]")
					}
				}
			},
		},
		Case{
			Name:  "reg_mr/zero-length-einval",
			Cite:  `ibv_reg_mr(3): registers "length" bytes at addr; a region of no bytes is invalid (EINVAL "for an invalid combination of arguments")`,
			Label: ImplementationDefined,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: `rdma-core v44.0 libibverbs/verbs.c ibv_reg_mr_iova2() passes length 0 on (memory.c ibv_madvise_range(): "if (!size || !base) return 0;"; providers/rxe/rxe.c rxe_reg_mr() -> ibv_cmd_reg_mr()); Linux 6.1.192 drivers/infiniband/sw/rxe/rxe_verbs.c rxe_reg_user_mr() -> rxe_mr.c rxe_mr_init_user() -> core/umem.c ib_umem_get(), which fails only "if (npages == 0 ...)" with npages = ib_umem_num_pages() = (ALIGN(addr + 0, PAGE_SIZE) - ALIGN_DOWN(addr, PAGE_SIZE)) / PAGE_SIZE: 1 for an address inside a page, 0 (EINVAL) only for a page-aligned one such as NULL`,
				Note: "registers 0 bytes at an address that is not page-aligned (it pins the page holding it); only a page-aligned address, such as NULL, gets EINVAL",
			}},
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				buf := make([]byte, 16)
				_, err := f.PD.RegMR(buf[:0], verbs.AccessLocalWrite)
				ExpectErrno(t, err, syscall.EINVAL, "reg_mr of 0 bytes")
				_, err = f.PD.RegMR(nil, verbs.AccessLocalWrite)
				ExpectErrno(t, err, syscall.EINVAL, "reg_mr of a nil buffer")
			},
		},
		Case{
			Name:  "dereg_mr/twice-fails",
			Cite:  `ibv_reg_mr(3): ibv_dereg_mr "returns 0 on success, or the value of errno on failure"; the region no longer exists after the first call`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				pd, err := d.AllocPD()
				ExpectOK(t, err, "alloc_pd")
				m, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
				ExpectOK(t, err, "reg_mr")
				m2, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
				ExpectOK(t, err, "reg_mr second")
				ExpectOK(t, m.Dereg(), "dereg_mr")
				if err := m.Dereg(); err == nil {
					t.Fatalf("second dereg_mr succeeded")
				}
				// The failed second dereg did not release the PD twice.
				ExpectErrno(t, pd.Dealloc(), syscall.EBUSY, "dealloc_pd still holding the second MR")
				ExpectOK(t, m2.Dereg(), "dereg_mr second")
				ExpectOK(t, pd.Dealloc(), "dealloc_pd")
			},
		},
	)
}

func nqRange(r [2]int) string {
	return strconv.Itoa(r[0]) + ":" + strconv.Itoa(r[1])
}
