package conformance

import (
	"fmt"
	"syscall"
	"time"

	"github.com/softhca/softhca/verbs"
)

// Tag-matching SRQ cases (ibv_post_srq_ops(3), rdma-core
// Documentation/tag_matching.md), written from softhca's rule book
// docs/tag-matching.md, whose rule names (T1-T5, M1-M5, P1-P3, O1-O4,
// R1-R6) the citations use. This file holds the cases that need one
// device: creation and the list operations. tm_datapath_cases.go holds
// the ones that send tagged messages between two devices.
//
// A case skips unless the device reports IBV_TM_CAP_RC in tm_caps.flags
// and the target's PD implements TMPD.

// tmOpsCite is the man page's description of the operations.
const tmOpsCite = `ibv_post_srq_ops(3) (seed 004): "Series of configuration operations defined by linked lists of struct ibv_ops_wr elements"`

func init() {
	Register(
		Case{
			Name:  "tm/create_srq_ex/tm_cap-above-tm_caps-einval",
			Cite:  `docs/tag-matching.md T1 (ibv_post_srq_ops(3): "Size of tag matching list is limited by max_num_tags"); ibv_query_device_ex(3): tm_caps.max_num_tags is the "Max number of tagged buffers in a TM-SRQ matching list" and tm_caps.max_ops the "Max number of outstanding list operations"; mlx5_ib_create_srq: "TM SRQ max_num_tags exceeding limit" is EINVAL`,
			Label: Spec,
			Run:   tmCreateAboveCaps,
		},
		Case{
			Name:  "tm/create_srq_ex/zero-tags-or-ops-einval",
			Cite:  `ibv_create_srq_ex(3): tm_cap.max_num_tags is the "Tag matching list size" and max_ops the "Number of outstanding tag list operations"; neither may be 0 (MLNX_OFED mlx5_ib: "if (!ucmd_exp.max_num_tags) return -EINVAL"); softhca takes 1..tm_caps for both (hca.TMCap)`,
			Label: ImplementationDefined,
			Run:   tmCreateZero,
		},
		Case{
			Name:  "tm/create_srq_ex/no-cq-einval",
			Cite:  `rdma-core Documentation/tag_matching.md: the TM-SRQ "reports all tag matching completions and events to a dedicated CQ"; mlx5_create_srq_ex: "An extended CQ is required to read TM information from" (EINVAL without srq_init_attr_ex.cq)`,
			Label: Spec,
			Run:   tmCreateNoCQ,
		},
		Case{
			Name:  "tm/create_qp/ud-on-tm-srq-einval",
			Cite:  `docs/tag-matching.md §5 (rdma-core tag_matching.md: "Tag-matching is initially defined for RC transport"; IBV_TM_CAP_RC): only an RC QP may be created on a TM-SRQ, EINVAL otherwise`,
			Label: ImplementationDefined,
			Run:   tmUDQP,
		},
		Case{
			Name:  "tm/post_srq_ops/ordinary-srq-einval",
			Cite:  `ibv_post_srq_ops(3): it "performs series of offload configuration manipulations on special types of SRQ"; mlx5_post_srq_ops returns EINVAL with bad_wr at the first op for an SRQ that is not a TM-SRQ (no command QP)`,
			Label: ImplementationDefined,
			Run:   tmOrdinarySRQ,
		},
		Case{
			Name:  "tm/post_srq_ops/bad_wr-is-the-first-refused-op",
			Cite:  `docs/tag-matching.md O1 (ibv_post_srq_ops(3)): the ops of the list are applied in order; on the first one refused the call stops, sets bad_wr to it and returns its errno; the ops before it took effect, it and the ones after did not. ` + tmOpsCite,
			Label: Spec,
			Run:   tmBadWR,
		},
		Case{
			Name:  "tm/post_srq_ops/signaled-ops-complete-with-their-wr_id",
			Cite:  `ibv_post_srq_ops(3): "To request WC for tag list operations IBV_OPS_SIGNALED flags should be passed. In this case WC will be generated on TM SRQ's CQ, provided wr_id will identify WC"; docs/tag-matching.md O2: TM_ADD, TM_DEL or TM_SYNC with the op's wr_id; a successful unsignaled op completes nothing`,
			Label: Spec,
			Run:   tmSignaled,
		},
		Case{
			Name:  "tm/post_srq_ops/list-full-enomem-changes-nothing",
			Cite:  `docs/tag-matching.md T4 (ibv_post_srq_ops(3): "Size of tag matching list is limited by max_num_tags"; mlx5: "tag matching list is full", ENOMEM): a TAG_ADD while every handle is in use fails with ENOMEM and bad_wr at it; T3: an unsignaled TAG_DEL ends its entry at once, so a later TAG_ADD fits`,
			Label: Spec,
			Run:   tmListFull,
		},
		Case{
			Name:  "tm/post_srq_ops/too-many-sges-einval",
			Cite:  `ibv_post_srq_ops(3): "SGE list size is limited by max_sge"; docs/tag-matching.md T5: a tag's scatter list longer than tm_caps.max_sge is EINVAL at post time`,
			Label: Spec,
			Run:   tmTooManySGEs,
		},
		Case{
			Name:  "tm/post_srq_ops/bad-opcode-or-flags-einval-too-many-ops-enomem",
			Cite:  `docs/tag-matching.md O4 (ibv_post_srq_ops(3): "Currently supported IBV_WR_TAG_ADD, IBV_WR_TAG_DEL and IBV_WR_TAG_SYNC values"; flags from enum ibv_ops_flags; tm_cap.max_ops is the "Number of outstanding tag list operations"): an unknown opcode or flag is EINVAL, more ops in one call than max_ops is ENOMEM, bad_wr at the op`,
			Label: Spec,
			Run:   tmBadOps,
		},
		Case{
			Name:  "tm/post_srq_ops/handles-distinct-while-in-use",
			Cite:  `ibv_post_srq_ops(3): a tag entry is "uniquely identified by handle (returned by driver)"; docs/tag-matching.md T2: no two entries in use share a handle; a handle no longer in use may be returned again`,
			Label: Spec,
			Run:   tmHandles,
		},
		Case{
			Name:  "tm/post_srq_ops/del-of-handle-not-in-use-einval",
			Cite:  `docs/tag-matching.md O3 (implementation-defined): a TAG_DEL of a handle not in use (never returned, or whose entry ended) is EINVAL at post time; a second TAG_DEL of an entry already removed while its handle is in use (T3: until the signaled TM_DEL is polled) completes with IBV_WC_TM_ERR, even unsignaled`,
			Label: ImplementationDefined,
			Run:   tmDelNotInUse,
		},
	)
}

// tmNeed skips the case unless the device does tag matching on RC QPs
// and pd can create a tag-matching SRQ.
func tmNeed(t *T, d Device, pd PD) TMPD {
	t.Helper()
	if d.QueryDevice().TM.Flags&verbs.TMCapRC == 0 {
		t.Skipf("tm_caps.flags lacks IBV_TM_CAP_RC: no tag matching")
	}
	tp, ok := pd.(TMPD)
	if !ok {
		t.Skipf("target %s: the PD cannot create a tag-matching SRQ (no TMPD)", t.Target().Name())
	}
	return tp
}

// tmSRQ creates a tag-matching SRQ on the fixture's PD with a small
// ordinary queue, completing on the fixture's CQ.
func tmSRQ(t *T, f *Fixture, tags, ops uint32) TMSRQ {
	t.Helper()
	s, err := tmNeed(t, f.D, f.PD).CreateTMSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}, tags, ops, f.CQ, nil)
	ExpectOK(t, err, fmt.Sprintf("create_srq_ex TM max_num_tags %d max_ops %d", tags, ops))
	return s
}

// tmAdd builds a TAG_ADD of wr_id id whose entry completes with recvID.
func tmAdd(id, recvID uint64, flags verbs.OpsFlags, tag, mask uint64, sges ...verbs.SGE) *verbs.OpsWR {
	return &verbs.OpsWR{WRID: id, Opcode: verbs.WRTagAdd, Flags: flags,
		TM: verbs.TMOp{Add: verbs.TagAdd{RecvWRID: recvID, Tag: tag, Mask: mask, SGList: sges}}}
}

// tmDel builds a TAG_DEL of handle h.
func tmDel(id uint64, flags verbs.OpsFlags, h uint32) *verbs.OpsWR {
	return &verbs.OpsWR{WRID: id, Opcode: verbs.WRTagDel, Flags: flags, TM: verbs.TMOp{Handle: h}}
}

// tmSync builds a TAG_SYNC; with verbs.OpsTMSync in flags it reports cnt
// unexpected messages handled.
func tmSync(id uint64, flags verbs.OpsFlags, cnt uint32) *verbs.OpsWR {
	return &verbs.OpsWR{WRID: id, Opcode: verbs.WRTagSync, Flags: flags, TM: verbs.TMOp{UnexpectedCnt: cnt}}
}

// tmList links ops into a list and returns its head.
func tmList(ops ...*verbs.OpsWR) *verbs.OpsWR {
	for i := 0; i+1 < len(ops); i++ {
		ops[i].Next = ops[i+1]
	}
	return ops[0]
}

// tmPost posts list ops and fails the case unless all were accepted.
func tmPost(t *T, s TMSRQ, wr *verbs.OpsWR, what string) {
	t.Helper()
	bad, err := s.PostOps(wr)
	if err != nil || bad != nil {
		t.Fatalf("%s: post_srq_ops: %v (bad_wr %v)", what, err, tmOpID(bad))
	}
}

// tmRefused posts list ops and fails the case unless the call returns
// errno with bad_wr at want.
func tmRefused(t *T, s TMSRQ, wr, want *verbs.OpsWR, errno syscall.Errno, what string) {
	t.Helper()
	bad, err := s.PostOps(wr)
	ExpectErrno(t, err, errno, what)
	if bad != want {
		t.Fatalf("%s: bad_wr is %v, want %v", what, tmOpID(bad), tmOpID(want))
	}
}

// tmOpID describes a list op for messages.
func tmOpID(wr *verbs.OpsWR) string {
	if wr == nil {
		return "nil"
	}
	return fmt.Sprintf("%s wr_id %#x", wr.Opcode, wr.WRID)
}

// tmWC formats a completion with its tag-matching fields.
func tmWC(wc verbs.WC) string {
	return fmt.Sprintf("%s tm_info {tag %#x priv %#x}", dpWC(wc), wc.TMInfo.Tag, wc.TMInfo.Priv)
}

// tmExpectOpWC checks a successful list-op completion: wr_id, opcode,
// and whether it asks for a sync.
func tmExpectOpWC(t *T, wc verbs.WC, id uint64, op verbs.WCOpcode, syncReq bool, what string) {
	t.Helper()
	dpExpectOK(t, wc, id, op, what)
	if got := wc.WCFlags&verbs.WCFlagTMSyncReq != 0; got != syncReq {
		t.Fatalf("%s: IBV_WC_TM_SYNC_REQ is %v, want %v: %s", what, got, syncReq, tmWC(wc))
	}
}

func tmCreateAboveCaps(t *T, d Device) {
	f := NewFixture(t, d)
	tp := tmNeed(t, d, f.PD)
	tc := d.QueryDevice().TM
	attr := verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}
	_, err := tp.CreateTMSRQ(attr, tc.MaxNumTags+1, 1, f.CQ, nil)
	ExpectErrno(t, err, syscall.EINVAL, "create_srq_ex TM max_num_tags tm_caps.max_num_tags+1")
	_, err = tp.CreateTMSRQ(attr, 1, tc.MaxOps+1, f.CQ, nil)
	ExpectErrno(t, err, syscall.EINVAL, "create_srq_ex TM max_ops tm_caps.max_ops+1")
	s, err := tp.CreateTMSRQ(attr, tc.MaxNumTags, tc.MaxOps, f.CQ, nil)
	ExpectOK(t, err, "create_srq_ex TM at tm_caps.max_num_tags and tm_caps.max_ops")
	ExpectOK(t, s.Destroy(Ctx(t, time.Second)), "destroy_srq")
}

func tmCreateZero(t *T, d Device) {
	f := NewFixture(t, d)
	tp := tmNeed(t, d, f.PD)
	attr := verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}
	_, err := tp.CreateTMSRQ(attr, 0, 1, f.CQ, nil)
	ExpectErrno(t, err, syscall.EINVAL, "create_srq_ex TM max_num_tags 0")
	_, err = tp.CreateTMSRQ(attr, 1, 0, f.CQ, nil)
	ExpectErrno(t, err, syscall.EINVAL, "create_srq_ex TM max_ops 0")
	_, err = tp.CreateTMSRQ(attr, 1, 1, f.CQ, nil)
	ExpectOK(t, err, "create_srq_ex TM max_num_tags 1 max_ops 1")
}

func tmCreateNoCQ(t *T, d Device) {
	f := NewFixture(t, d)
	tp := tmNeed(t, d, f.PD)
	_, err := tp.CreateTMSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}, 1, 1, nil, nil)
	ExpectErrno(t, err, syscall.EINVAL, "create_srq_ex TM without a CQ")
}

func tmUDQP(t *T, d Device) {
	f := NewFixture(t, d)
	s := tmSRQ(t, f, 4, 4)
	_, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: verbs.QPTypeUD})
	ExpectErrno(t, err, syscall.EINVAL, "create_qp UD on a TM-SRQ")
	q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, SRQ: s, Cap: DefaultCap, QPType: verbs.QPTypeRC})
	ExpectOK(t, err, "create_qp RC on the same TM-SRQ")
	ExpectOK(t, q.Destroy(Ctx(t, time.Second)), "destroy_qp")
}

func tmOrdinarySRQ(t *T, d Device) {
	f := NewFixture(t, d)
	tmNeed(t, d, f.PD)
	plain := nqSRQ(t, f, 4, 1)
	s, ok := plain.(TMSRQ)
	if !ok {
		t.Skipf("target %s: an ordinary SRQ does not take ibv_post_srq_ops (not a TMSRQ)", t.Target().Name())
	}
	add := tmAdd(1, 1, verbs.OpsSignaled, 1, ^uint64(0), f.MR.SGE(0, 64))
	tmRefused(t, s, add, add, syscall.EINVAL, "post_srq_ops TAG_ADD on an ordinary SRQ")
	sync := tmSync(2, verbs.OpsSignaled, 0)
	tmRefused(t, s, sync, sync, syscall.EINVAL, "post_srq_ops TAG_SYNC on an ordinary SRQ")
	dpNoWC(t, f.CQ, "after refused list ops on an ordinary SRQ")
}

func tmBadWR(t *T, d Device) {
	f := NewFixture(t, d)
	s := tmSRQ(t, f, 2, 8)
	tc := d.QueryDevice().TM
	long := make([]verbs.SGE, tc.MaxSGE+1)
	for i := range long {
		long[i] = f.MR.SGE(1024+i*64, 64)
	}
	first := tmAdd(0x11, 0x111, verbs.OpsSignaled, 0x10, ^uint64(0), f.MR.SGE(0, 64))
	second := tmAdd(0x12, 0x112, verbs.OpsSignaled, 0x20, ^uint64(0), long...)
	third := tmSync(0x13, verbs.OpsSignaled, 0)
	tmRefused(t, s, tmList(first, second, third), second, syscall.EINVAL,
		"post_srq_ops [TAG_ADD, TAG_ADD with max_sge+1 elements, TAG_SYNC]")
	// The first op took effect and completed; the third was not applied.
	tmExpectOpWC(t, dpWait1(t, f.CQ, "the first op's completion"), 0x11, verbs.WCTMAdd, false, "the TAG_ADD before bad_wr")
	dpNoWC(t, f.CQ, "the ops from bad_wr on (the TAG_SYNC after it is signaled)")
	// The list holds exactly the first entry: one more fits (max_num_tags 2),
	// a second does not.
	tmPost(t, s, tmAdd(0x14, 0x114, 0, 0x30, ^uint64(0), f.MR.SGE(64, 64)), "TAG_ADD into the second slot")
	over := tmAdd(0x15, 0x115, 0, 0x40, ^uint64(0), f.MR.SGE(128, 64))
	tmRefused(t, s, over, over, syscall.ENOMEM, "TAG_ADD with the first op's entry and one more in the list (max_num_tags 2)")
	// The first op's entry is there to delete.
	tmPost(t, s, tmDel(0x16, verbs.OpsSignaled, first.TM.Handle), "TAG_DEL of the first op's handle")
	tmExpectOpWC(t, dpWait1(t, f.CQ, "TAG_DEL"), 0x16, verbs.WCTMDel, false, "TAG_DEL of the entry the first op added")
}

func tmSignaled(t *T, d Device) {
	f := NewFixture(t, d)
	s := tmSRQ(t, f, 4, 8)
	a1 := tmAdd(0x21, 0x121, verbs.OpsSignaled, 1, ^uint64(0), f.MR.SGE(0, 64))
	a2 := tmAdd(0x22, 0x122, 0, 2, ^uint64(0), f.MR.SGE(64, 64))
	tmPost(t, s, a1, "signaled TAG_ADD")
	tmPost(t, s, a2, "unsignaled TAG_ADD")
	tmPost(t, s, tmSync(0x23, verbs.OpsSignaled, 0), "signaled TAG_SYNC")
	tmPost(t, s, tmSync(0x24, 0, 0), "unsignaled TAG_SYNC")
	tmPost(t, s, tmDel(0x25, verbs.OpsSignaled, a1.TM.Handle), "signaled TAG_DEL")
	tmPost(t, s, tmDel(0x26, 0, a2.TM.Handle), "unsignaled TAG_DEL")
	wcs := dpWaitWC(t, f.CQ, 3, "completions of the three signaled ops")
	tmExpectOpWC(t, wcs[0], 0x21, verbs.WCTMAdd, false, "signaled TAG_ADD")
	tmExpectOpWC(t, wcs[1], 0x23, verbs.WCTMSync, false, "signaled TAG_SYNC")
	tmExpectOpWC(t, wcs[2], 0x25, verbs.WCTMDel, false, "signaled TAG_DEL")
	dpNoWC(t, f.CQ, "after the three unsignaled ops")
}

func tmListFull(t *T, d Device) {
	f := NewFixture(t, d)
	s := tmSRQ(t, f, 2, 8)
	a := tmAdd(1, 0x101, 0, 1, ^uint64(0), f.MR.SGE(0, 64))
	b := tmAdd(2, 0x102, 0, 2, ^uint64(0), f.MR.SGE(64, 64))
	tmPost(t, s, tmList(a, b), "two TAG_ADDs (max_num_tags 2)")
	c := tmAdd(3, 0x103, verbs.OpsSignaled, 3, ^uint64(0), f.MR.SGE(128, 64))
	tmRefused(t, s, c, c, syscall.ENOMEM, "a third TAG_ADD")
	dpNoWC(t, f.CQ, "after the refused TAG_ADD (signaled)")
	// Refused twice: the list did not change.
	tmRefused(t, s, c, c, syscall.ENOMEM, "the third TAG_ADD again")
	// An unsignaled TAG_DEL frees a handle at once; the TAG_ADD fits.
	tmPost(t, s, tmDel(4, 0, a.TM.Handle), "unsignaled TAG_DEL of the first entry")
	tmPost(t, s, c, "the third TAG_ADD after the TAG_DEL")
	tmExpectOpWC(t, dpWait1(t, f.CQ, "the TAG_ADD"), 3, verbs.WCTMAdd, false, "the TAG_ADD that fits")
	if c.TM.Handle == b.TM.Handle {
		t.Fatalf("TAG_ADD returned handle %d, which the second entry holds", c.TM.Handle)
	}
	e := tmAdd(5, 0x105, 0, 5, ^uint64(0), f.MR.SGE(192, 64))
	tmRefused(t, s, e, e, syscall.ENOMEM, "a TAG_ADD with the list full again")
}

func tmTooManySGEs(t *T, d Device) {
	f := NewFixture(t, d)
	s := tmSRQ(t, f, 2, 8)
	n := int(d.QueryDevice().TM.MaxSGE)
	sges := make([]verbs.SGE, n+1)
	for i := range sges {
		sges[i] = f.MR.SGE(i*64, 64)
	}
	long := tmAdd(1, 0x101, verbs.OpsSignaled, 1, ^uint64(0), sges...)
	tmRefused(t, s, long, long, syscall.EINVAL, fmt.Sprintf("TAG_ADD with tm_caps.max_sge+1 (%d) elements", n+1))
	dpNoWC(t, f.CQ, "after the refused TAG_ADD")
	tmPost(t, s, tmAdd(2, 0x102, verbs.OpsSignaled, 2, ^uint64(0), sges[:n]...), fmt.Sprintf("TAG_ADD with tm_caps.max_sge (%d) elements", n))
	tmExpectOpWC(t, dpWait1(t, f.CQ, "TAG_ADD"), 2, verbs.WCTMAdd, false, "TAG_ADD with max_sge elements")
}

func tmBadOps(t *T, d Device) {
	f := NewFixture(t, d)
	const maxOps = 4
	s := tmSRQ(t, f, 4, maxOps)
	op := &verbs.OpsWR{WRID: 1, Opcode: 9, Flags: verbs.OpsSignaled}
	tmRefused(t, s, op, op, syscall.EINVAL, "post_srq_ops with opcode 9")
	flags := tmSync(2, verbs.OpsSignaled|1<<5, 0)
	tmRefused(t, s, flags, flags, syscall.EINVAL, "post_srq_ops with flag 1<<5")
	good := tmSync(3, 0, 0)
	bad := &verbs.OpsWR{WRID: 4, Opcode: 0x7f}
	tmRefused(t, s, tmList(good, bad), bad, syscall.EINVAL, "a TAG_SYNC then opcode 0x7f")
	ops := make([]*verbs.OpsWR, maxOps+1)
	for i := range ops {
		ops[i] = tmSync(uint64(0x10+i), 0, 0)
	}
	tmRefused(t, s, tmList(ops...), ops[maxOps], syscall.ENOMEM, "a list of max_ops+1 ops")
	dpNoWC(t, f.CQ, "after refused ops and unsignaled TAG_SYNCs")
}

func tmHandles(t *T, d Device) {
	f := NewFixture(t, d)
	const tags = 8
	s := tmSRQ(t, f, tags, 16)
	adds := make([]*verbs.OpsWR, tags)
	for i := range adds {
		adds[i] = tmAdd(uint64(i), uint64(0x100+i), 0, uint64(i), ^uint64(0), f.MR.SGE(i*64, 64))
	}
	tmPost(t, s, tmList(adds...), "max_num_tags TAG_ADDs")
	inUse := map[uint32]int{}
	for i, a := range adds {
		if j, dup := inUse[a.TM.Handle]; dup {
			t.Fatalf("TAG_ADD %d returned handle %d, which TAG_ADD %d holds", i, a.TM.Handle, j)
		}
		inUse[a.TM.Handle] = i
	}
	// End three entries (unsignaled TAG_DEL: at once) and add three more:
	// their handles differ from the five still in use and from each
	// other.
	for _, i := range []int{1, 4, 6} {
		tmPost(t, s, tmDel(uint64(0x40+i), 0, adds[i].TM.Handle), "unsignaled TAG_DEL")
		delete(inUse, adds[i].TM.Handle)
	}
	for i := range 3 {
		a := tmAdd(uint64(0x80+i), uint64(0x180+i), 0, uint64(0x80+i), ^uint64(0), f.MR.SGE(1024+i*64, 64))
		tmPost(t, s, a, "TAG_ADD after the TAG_DELs")
		if j, dup := inUse[a.TM.Handle]; dup {
			t.Fatalf("TAG_ADD returned handle %d, which entry %d still holds", a.TM.Handle, j)
		}
		inUse[a.TM.Handle] = 0x80 + i
	}
	dpNoWC(t, f.CQ, "after unsignaled ops")
}

func tmDelNotInUse(t *T, d Device) {
	f := NewFixture(t, d)
	s := tmSRQ(t, f, 4, 8)
	never := tmDel(1, verbs.OpsSignaled, 0)
	tmRefused(t, s, never, never, syscall.EINVAL, "TAG_DEL of a handle never returned (an empty list)")
	// An entry ended by an unsignaled TAG_DEL: its handle is not in use.
	a := tmAdd(2, 0x102, 0, 2, ^uint64(0), f.MR.SGE(0, 64))
	tmPost(t, s, a, "TAG_ADD")
	tmPost(t, s, tmDel(3, 0, a.TM.Handle), "unsignaled TAG_DEL")
	again := tmDel(4, verbs.OpsSignaled, a.TM.Handle)
	tmRefused(t, s, again, again, syscall.EINVAL, "TAG_DEL of a handle whose entry an unsignaled TAG_DEL ended")
	dpNoWC(t, f.CQ, "after the refused TAG_DELs")
	// Removed by a signaled TAG_DEL: the handle stays in use until its
	// TM_DEL is polled, and a second TAG_DEL meanwhile fails in its
	// completion, unsignaled as it is.
	b := tmAdd(5, 0x105, 0, 5, ^uint64(0), f.MR.SGE(64, 64))
	tmPost(t, s, b, "TAG_ADD")
	tmPost(t, s, tmDel(6, verbs.OpsSignaled, b.TM.Handle), "signaled TAG_DEL")
	tmPost(t, s, tmDel(7, 0, b.TM.Handle), "unsignaled TAG_DEL of the removed entry, its TM_DEL not polled")
	wcs := dpWaitWC(t, f.CQ, 2, "the two TAG_DELs")
	tmExpectOpWC(t, wcs[0], 6, verbs.WCTMDel, false, "the first TAG_DEL")
	dpExpectWC(t, wcs[1], 7, verbs.WCTMErr, 0, "the second TAG_DEL of the same entry")
	dpNoWC(t, f.CQ, "after the two TAG_DELs")
	// Both polled: the entry has ended.
	last := tmDel(8, verbs.OpsSignaled, b.TM.Handle)
	tmRefused(t, s, last, last, syscall.EINVAL, "TAG_DEL of a handle whose TM_DEL was polled")
}
