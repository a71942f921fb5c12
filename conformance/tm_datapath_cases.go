package conformance

import (
	"fmt"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Tag-matching data-path cases: device A sends tagged messages (RC
// SENDs that start with a TMH, rdma-core Documentation/tag_matching.md)
// to device B, whose RC QP takes its receives from a tag-matching SRQ.
// The SRQ completes on a CQ of its own, not the QP's send or receive
// CQ: every completion these cases expect on B arrives there
// (docs/tag-matching.md §5).

// tmRDCite is rdma-core Documentation/tag_matching.md on where a message
// goes.
const tmRDCite = `rdma-core Documentation/tag_matching.md: "When a message is matched by HW, the payload is transferred directly to the application buffer (both in the eager and the rendezvous case), while skipping any TM headers. Otherwise, the entire message, including any TM headers, is scattered to the SRQ buffer."`

// tmSyncCite is its paragraph on phase synchronisation.
const tmSyncCite = `rdma-core Documentation/tag_matching.md: "whenever HW deems a message unexpected, tag matching must be disabled for new tags until SW and HW synchronize. This synchronization is achieved by reporting to HW the number of unexpected messages handled by SW ... When the SW and HW are in synch, tag matching resumes normally."`

func init() {
	Register(
		Case{
			Name:  "tm/eager/matched-data-after-the-tmh",
			Cite:  tmRDCite + `; docs/tag-matching.md §5: an EAGER an enabled entry matches completes TM_RECV with the entry's recv_wr_id, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, tm_info (tag, app_ctx) and byte_len without the TMH, on the SRQ's CQ ("reports all tag matching completions and events to a dedicated CQ")`,
			Label: Spec,
			Run:   tmEagerMatched,
		},
		Case{
			Name:  "tm/unexpected/eager-and-rndv-go-whole-to-an-srq-buffer",
			Cite:  tmRDCite + `; docs/tag-matching.md M4: a tagged message (EAGER or RNDV) no enabled entry matches goes whole to an ordinary SRQ buffer (TM_RECV, neither MATCH nor DATA_VALID) and the unexpected counter advances by one`,
			Label: Spec,
			Run:   tmUnexpected,
		},
		Case{
			Name:  "tm/no_tag/goes-whole-as-tm_no_tag-uncounted",
			Cite:  `docs/tag-matching.md M5 (rdma-core tag_matching.md; libibverbs IBV_WC_TM_NO_TAG): NO_TAG messages are not matched and not counted as unexpected; they go whole to an ordinary SRQ buffer with opcode TM_NO_TAG`,
			Label: Spec,
			Run:   tmNoTag,
		},
		Case{
			Name:  "tm/match/tag-and-mask",
			Cite:  `ibv_post_srq_ops(3): "Incoming message considered matching if TMH.tag & entry.mask == entry.tag"; docs/tag-matching.md M1, M3 (a matched entry is consumed); tm_info.tag is the message's tag`,
			Label: Spec,
			Run:   tmTagAndMask,
		},
		Case{
			Name:  "tm/match/entry-tag-outside-its-mask-never-matches",
			Cite:  `docs/tag-matching.md M1 (implementation-defined): the entry's tag is not masked, exactly as ibv_post_srq_ops(3) writes it ("TMH.tag & entry.mask == entry.tag"), so an entry whose tag has bits outside its mask never matches; it is accepted and ends only by TAG_DEL`,
			Label: ImplementationDefined,
			Run:   tmTagOutsideMask,
		},
		Case{
			Name:  "tm/match/earliest-added-wins",
			Cite:  `docs/tag-matching.md M2 (Linux tag_matching.rst: "the pair that includes the earliest posted-send and the earliest posted-receive is the pair that must be used"; rdma-core tag_matching.md: "a later generated tag may be consumed if earlier tags do not satisfy the matching rules"); mask 0 with tag 0 matches every tag`,
			Label: Spec,
			Run:   tmEarliest,
		},
		Case{
			Name:  "tm/phase/tag-added-out-of-sync-matches-after-tag_sync",
			Cite:  tmSyncCite + `; docs/tag-matching.md P1, P2: a tag added while the unexpected counts differ matches nothing until an op with IBV_OPS_TM_SYNC reports unexpected_cnt equal to the device's count`,
			Label: Spec,
			Run:   tmPhaseSync,
		},
		Case{
			Name:  "tm/phase/tm_add-asks-for-sync-while-out-of-sync",
			Cite:  `ibv_post_srq_ops(3): "IBV_WC_TM_SYNC_REQ flag returned in list operation WC shows that counter synchronization required"; docs/tag-matching.md P1 (IBV_OPS_TM_SYNC sets the count before the op takes effect), P3`,
			Label: Spec,
			Run:   tmAddSyncReq,
		},
		Case{
			Name:  "tm/phase/sync-req-on-tm_sync-not-on-an-unexpected-message",
			Cite:  `docs/tag-matching.md P3 (implementation-defined): softhca compares the counts as they are for TM_ADD, TM_DEL and TM_SYNC alike (mlx5 never flags TM_SYNC); an unexpected message's completion asks for a sync only when software is more than 16,383 behind, as mlx5 does (ibv_post_srq_ops(3): the flag "also may be returned by unexpected receive WC")`,
			Label: ImplementationDefined,
			Run:   tmSyncReqDetails,
		},
		Case{
			Name:  "tm/post_srq_ops/del-racing-consumption-completes-tm_err",
			Cite:  `ibv_post_srq_ops(3): "Opcode IBV_WR_TAG_DEL removes previously added tag entry ... Operation may fail due to concurrent tag consumption - in this case IBV_WC_TM_ERR status will be returned in WC"; docs/tag-matching.md O3, T3 (the handle is in use until the consuming TM_RECV is polled)`,
			Label: Spec,
			Run:   tmDelRace,
		},
		Case{
			Name:  "tm/rndv/matched-read-then-fin",
			Cite:  `rdma-core Documentation/tag_matching.md: "In case the message uses the rendezvous protocol, HW will also initiate the RDMA-Read data transfer and send a notification message when the data transfer completes"; "Rendezvous response: TMH"; docs/tag-matching.md §5 and R1: TM_RECV with MATCH (byte_len the RVH's length), then TM_RECV with DATA_VALID once the READ brought the sender's bytes; the FIN is a 16-byte SEND whose TMH has opcode FIN and the request's app_ctx and tag`,
			Label: Spec,
			Run:   tmRendezvous,
		},
	)
}

// tmPair is a sender A and a receiver B whose RC QP uses a TM-SRQ.
type tmPair struct {
	A, B   *dpSide
	QA, QB QP
	SRQ    TMSRQ
	CQ     CQ          // the SRQ's CQ, on B
	Ch     CompChannel // CQ's completion channel (blocking)
	sends  uint64
}

// tmAddBit marks the wr_id of the TAG_ADD of an entry whose recv_wr_id
// is the rest, so that a completion with the wrong one of the two shows.
const tmAddBit = 1 << 40

// tmConnect opens a pair of devices, gives B a TM-SRQ of max_num_tags
// tags with an 8-deep ordinary queue and its own CQ, and connects an RC
// QP on A to one on B that uses the SRQ.
func tmConnect(t *T, tags uint32) *tmPair {
	t.Helper()
	a, b := dpOpen(t)
	tp := tmNeed(t, b.D, b.PD)
	ch, err := b.D.CreateCompChannel()
	ExpectOK(t, err, "B: create_comp_channel")
	cq, err := b.D.CreateCQ(256, ch, "B tag matching", 0)
	ExpectOK(t, err, "B: create_cq for the TM-SRQ")
	srq, err := tp.CreateTMSRQ(verbs.SRQAttr{MaxWR: 8, MaxSGE: 2}, tags, 16, cq, nil)
	ExpectOK(t, err, "B: create_srq_ex TM")
	qa, qb := dpConnect(t, a, b, dpOpts{}, dpOpts{SRQ: srq})
	return &tmPair{A: a, B: b, QA: qa, QB: qb, SRQ: srq, CQ: cq, Ch: ch}
}

// next waits for the next completion on the SRQ's CQ.
func (p *tmPair) next(t *T, what string) verbs.WC {
	t.Helper()
	return dpWait1(t, p.CQ, what, p.A, p.B)
}

// add posts a signaled TAG_ADD of an entry for B's bytes [off, off+n)
// whose completions carry recvID, and waits for its TM_ADD. flags and
// cnt may add IBV_OPS_TM_SYNC and unexpected_cnt.
func (p *tmPair) add(t *T, recvID, tag, mask uint64, off, n int, flags verbs.OpsFlags, cnt uint32) (uint32, verbs.WC) {
	t.Helper()
	wr := tmAdd(recvID|tmAddBit, recvID, verbs.OpsSignaled|flags, tag, mask, p.B.MR.SGE(off, n))
	wr.TM.UnexpectedCnt = cnt
	tmPost(t, p.SRQ, wr, fmt.Sprintf("TAG_ADD tag %#x mask %#x", tag, mask))
	wc := p.next(t, "TM_ADD")
	dpExpectOK(t, wc, wr.WRID, verbs.WCTMAdd, fmt.Sprintf("the TAG_ADD of tag %#x", tag))
	return wr.TM.Handle, wc
}

// postSRQ posts an ordinary receive for B's bytes [off, off+n).
func (p *tmPair) postSRQ(t *T, id uint64, off, n int) {
	t.Helper()
	bad, err := p.SRQ.PostRecv(&verbs.RecvWR{WRID: id, SGList: []verbs.SGE{p.B.MR.SGE(off, n)}})
	if err != nil || bad != nil {
		t.Fatalf("post_srq_recv wr_id %#x: %v", id, err)
	}
}

// msg writes a message, a TMH and data, at A's offset off and returns its
// length.
func (p *tmPair) msg(off int, op wire.TMOpcode, tag uint64, appCtx uint32, data []byte) int {
	wire.TMH(p.A.Buf[off:]).Encode(&wire.TMHFields{Opcode: op, AppCtx: appCtx, Tag: tag})
	copy(p.A.Buf[off+wire.TMHSize:], data)
	return wire.TMHSize + len(data)
}

// rndv writes a rendezvous request (TMH and RVH) at A's offset off naming
// A's bytes [dataOff, dataOff+n), and returns its length.
func (p *tmPair) rndv(off int, tag uint64, appCtx uint32, dataOff, n int) int {
	wire.TMH(p.A.Buf[off:]).Encode(&wire.TMHFields{Opcode: wire.TMRendezvous, AppCtx: appCtx, Tag: tag})
	wire.RVH(p.A.Buf[off+wire.TMHSize:]).Encode(&wire.RVHFields{
		VirtualAddress: p.A.MR.SGE(dataOff, n).Addr, RKey: p.A.MR.RKey(), Length: uint32(n)})
	return wire.TMHSize + wire.RVHSize
}

// send sends A's bytes [off, off+n) as one SEND and waits for its
// completion.
func (p *tmPair) send(t *T, off, n int) {
	t.Helper()
	p.sends++
	id := 0x5e00 + p.sends
	dpPost(t, p.QA, dpSend(id, verbs.WRSend, verbs.SendSignaled, p.A.MR.SGE(off, n)))
	dpExpectOK(t, dpWait1(t, p.A.SCQ, "A: the SEND", p.A, p.B), id, verbs.WCSend, "A: the tagged SEND")
}

// eager sends an EAGER message with tag, app_ctx and data from A's
// offset 0 and returns B's completion for it.
func (p *tmPair) eager(t *T, tag uint64, appCtx uint32, data []byte, what string) verbs.WC {
	t.Helper()
	p.send(t, 0, p.msg(0, wire.TMEager, tag, appCtx, data))
	return p.next(t, what)
}

// expectMatched checks the completion of an EAGER message an entry
// matched: TM_RECV with the entry's recv_wr_id, MATCH | DATA_VALID,
// tm_info (tag, app_ctx), byte_len of the data after the TMH, and that
// data at B's offset off.
func (p *tmPair) expectMatched(t *T, wc verbs.WC, recvID, tag uint64, appCtx uint32, data []byte, off int, what string) {
	t.Helper()
	dpExpectOK(t, wc, recvID, verbs.WCTMRecv, what)
	if wc.WCFlags != verbs.WCFlagTMMatch|verbs.WCFlagTMDataValid {
		t.Fatalf("%s: wc_flags %#x, want IBV_WC_TM_MATCH|IBV_WC_TM_DATA_VALID (%#x): %s", what, uint32(wc.WCFlags),
			uint32(verbs.WCFlagTMMatch|verbs.WCFlagTMDataValid), tmWC(wc))
	}
	if wc.TMInfo != (verbs.TMInfo{Tag: tag, Priv: appCtx}) {
		t.Fatalf("%s: tm_info {tag %#x priv %#x}, want the message's {tag %#x priv %#x}", what, wc.TMInfo.Tag, wc.TMInfo.Priv, tag, appCtx)
	}
	Expect(t, wc.ByteLen, uint32(len(data)), what+": byte_len (the data after the TMH)")
	dpExpectBytes(t, p.B.Buf[off:off+len(data)], data, what+": the data in the tag's buffer")
}

// expectWhole checks the completion of a message that went whole to the
// ordinary buffer id at B's offset bOff: opcode op, neither MATCH nor
// DATA_VALID, byte_len n, and A's bytes [aOff, aOff+n) there, headers
// included.
func (p *tmPair) expectWhole(t *T, wc verbs.WC, id uint64, op verbs.WCOpcode, aOff, n, bOff int, what string) {
	t.Helper()
	dpExpectOK(t, wc, id, op, what)
	if f := wc.WCFlags & (verbs.WCFlagTMMatch | verbs.WCFlagTMDataValid); f != 0 {
		t.Fatalf("%s: wc_flags %#x, want neither IBV_WC_TM_MATCH nor IBV_WC_TM_DATA_VALID: %s", what, uint32(wc.WCFlags), tmWC(wc))
	}
	Expect(t, wc.ByteLen, uint32(n), what+": byte_len (the whole message)")
	dpExpectBytes(t, p.B.Buf[bOff:bOff+n], p.A.Buf[aOff:aOff+n], what+": the whole message, TMH included, in the ordinary buffer")
}

func tmEagerMatched(t *T, d Device) {
	p := tmConnect(t, 8)
	data := make([]byte, 3000) // three packets at MTU 1024
	dpFill(data, 3)
	p.add(t, 0x77, 0x1234, ^uint64(0), 0x4000, 8192, 0, 0)
	wc := p.eager(t, 0x1234, 0xabcdef01, data, "B: the EAGER message")
	p.expectMatched(t, wc, 0x77, 0x1234, 0xabcdef01, data, 0x4000, "an EAGER message the entry matches")
	if n := p.B.RCQ.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatalf("%d completions on the QP's receive CQ, want every one on the TM-SRQ's CQ", n)
	}
}

func tmUnexpected(t *T, d Device) {
	p := tmConnect(t, 4)
	p.postSRQ(t, 0x501, 0, 4096)
	p.postSRQ(t, 0x502, 4096, 4096)
	p.postSRQ(t, 0x503, 8192, 4096) // takes the last message if the count is wrong
	n := p.msg(0, wire.TMEager, 9, 1, []byte("unexpected eager payload"))
	p.send(t, 0, n)
	p.expectWhole(t, p.next(t, "B: the EAGER message"), 0x501, verbs.WCTMRecv, 0, n, 0, "an EAGER message no entry matches")
	dpFill(p.A.Buf[0x8000:0x8000+5000], 5)
	n = p.rndv(0, 0x99, 7, 0x8000, 5000)
	p.send(t, 0, n)
	p.expectWhole(t, p.next(t, "B: the RNDV request"), 0x502, verbs.WCTMRecv, 0, n, 4096, "a rendezvous request no entry matches")
	// Both were counted: an entry added with unexpected_cnt 2 is enabled
	// at once and takes the next message.
	p.add(t, 0x60, 9, ^uint64(0), 0x10000, 4096, verbs.OpsTMSync, 2)
	data := []byte("after the sync")
	wc := p.eager(t, 9, 3, data, "B: an EAGER message after TAG_ADD with unexpected_cnt 2")
	p.expectMatched(t, wc, 0x60, 9, 3, data, 0x10000, "an EAGER message after software reported the two unexpected ones (each counted once)")
}

func tmNoTag(t *T, d Device) {
	p := tmConnect(t, 4)
	p.add(t, 0x55, 0x55, ^uint64(0), 0x10000, 4096, 0, 0)
	p.postSRQ(t, 0x9, 0, 4096)
	p.postSRQ(t, 0xa, 4096, 4096) // takes a tagged message a disabled entry misses
	n := p.msg(0, wire.TMNoTag, 0x55, 0, []byte("no tag, with a tag field that would match"))
	p.send(t, 0, n)
	p.expectWhole(t, p.next(t, "B: the NO_TAG message"), 0x9, verbs.WCTMNoTag, 0, n, 0, "a NO_TAG message")
	// Not counted: a new entry is enabled at once, and its TM_ADD does
	// not ask for a sync. Not matched: the first entry is still there.
	_, wc := p.add(t, 0x56, 0x56, ^uint64(0), 0x11000, 4096, 0, 0)
	tmExpectOpWC(t, wc, 0x56|tmAddBit, verbs.WCTMAdd, false, "TAG_ADD after a NO_TAG message (the counts are equal)")
	data := []byte("tagged")
	for i, tag := range []uint64{0x55, 0x56} {
		wc := p.eager(t, tag, uint32(i), data, "B: an EAGER message")
		p.expectMatched(t, wc, tag, tag, uint32(i), data, 0x10000+i*0x1000, fmt.Sprintf("an EAGER message with tag %#x after the NO_TAG", tag))
	}
}

func tmTagAndMask(t *T, d Device) {
	p := tmConnect(t, 4)
	p.add(t, 1, 0x0100, 0xff00, 0x10000, 256, 0, 0)
	p.add(t, 2, 0x0100, 0xff00, 0x11000, 256, 0, 0)
	p.postSRQ(t, 0x90, 0, 4096)
	data := []byte("masked")
	p.expectMatched(t, p.eager(t, 0x01ab, 1, data, "B: tag 0x01ab"), 1, 0x01ab, 1, data, 0x10000, "tag 0x01ab against entry 0x0100/0xff00")
	n := p.msg(0, wire.TMEager, 0x02ab, 2, data)
	p.send(t, 0, n)
	p.expectWhole(t, p.next(t, "B: tag 0x02ab"), 0x90, verbs.WCTMRecv, 0, n, 0, "tag 0x02ab against entry 0x0100/0xff00 (0x02ab & 0xff00 = 0x0200)")
	p.expectMatched(t, p.eager(t, 0x01cd, 3, data, "B: tag 0x01cd"), 2, 0x01cd, 3, data, 0x11000, "tag 0x01cd: the first entry was consumed, the second takes it")
}

func tmTagOutsideMask(t *T, d Device) {
	p := tmConnect(t, 4)
	h, _ := p.add(t, 1, 0x01ff, 0xff00, 0x10000, 256, 0, 0) // bits outside its mask
	p.add(t, 2, 0x0100, 0xff00, 0x11000, 256, 0, 0)
	p.postSRQ(t, 0x90, 0, 4096)
	data := []byte("outside")
	p.expectMatched(t, p.eager(t, 0x01ff, 1, data, "B: tag 0x01ff"), 2, 0x01ff, 1, data, 0x11000,
		"tag 0x01ff: the earlier entry 0x01ff/0xff00 never matches (0x01ff & 0xff00 = 0x0100), the later 0x0100/0xff00 does")
	n := p.msg(0, wire.TMEager, 0x01ff, 2, data)
	p.send(t, 0, n)
	p.expectWhole(t, p.next(t, "B: tag 0x01ff again"), 0x90, verbs.WCTMRecv, 0, n, 0, "tag 0x01ff again: unexpected")
	// The entry is still in the list: TAG_DEL removes it.
	tmPost(t, p.SRQ, tmDel(0xde1, verbs.OpsSignaled, h), "TAG_DEL of the entry 0x01ff/0xff00")
	dpExpectOK(t, p.next(t, "TM_DEL"), 0xde1, verbs.WCTMDel, "TAG_DEL of the entry that never matched")
}

func tmEarliest(t *T, d Device) {
	p := tmConnect(t, 8)
	entries := []struct{ tag, mask uint64 }{{0x0100, 0xff00}, {0x0123, ^uint64(0)}, {0, 0}, {0x0123, ^uint64(0)}}
	for i, e := range entries {
		p.add(t, uint64(i+1), e.tag, e.mask, 0x10000+i*0x1000, 256, 0, 0)
	}
	for i, e := range entries {
		data := []byte{byte(i), 0xee}
		wc := p.eager(t, 0x0123, uint32(i), data, "B: tag 0x0123")
		p.expectMatched(t, wc, uint64(i+1), 0x0123, uint32(i), data, 0x10000+i*0x1000,
			fmt.Sprintf("message %d with tag 0x0123: the earliest added matching entry left is %#x/%#x", i+1, e.tag, e.mask))
	}
}

func tmPhaseSync(t *T, d Device) {
	p := tmConnect(t, 4)
	for i := range 3 {
		p.postSRQ(t, uint64(0x501+i), i*4096, 4096)
	}
	data := []byte("phase")
	unexpected := func(id uint64, bOff int, what string) {
		t.Helper()
		n := p.msg(0, wire.TMEager, 9, 0, data)
		p.send(t, 0, n)
		p.expectWhole(t, p.next(t, "B: tag 9"), id, verbs.WCTMRecv, 0, n, bOff, what)
	}
	unexpected(0x501, 0, "tag 9 with no entry (unexpected 1)")
	p.add(t, 0x60, 9, ^uint64(0), 0x10000, 4096, 0, 0) // software 0, device 1
	unexpected(0x502, 4096, "tag 9 after TAG_ADD of tag 9 while out of sync (unexpected 2)")
	tmPost(t, p.SRQ, tmSync(0x51, verbs.OpsSignaled|verbs.OpsTMSync, 1), "TAG_SYNC unexpected_cnt 1")
	dpExpectOK(t, p.next(t, "TM_SYNC"), 0x51, verbs.WCTMSync, "TAG_SYNC unexpected_cnt 1")
	unexpected(0x503, 8192, "tag 9 after TAG_SYNC with unexpected_cnt 1 of 2 (unexpected 3)")
	tmPost(t, p.SRQ, tmSync(0x52, verbs.OpsSignaled|verbs.OpsTMSync, 3), "TAG_SYNC unexpected_cnt 3")
	dpExpectOK(t, p.next(t, "TM_SYNC"), 0x52, verbs.WCTMSync, "TAG_SYNC unexpected_cnt 3")
	p.expectMatched(t, p.eager(t, 9, 4, data, "B: tag 9"), 0x60, 9, 4, data, 0x10000, "tag 9 after TAG_SYNC with unexpected_cnt 3 of 3")
}

func tmAddSyncReq(t *T, d Device) {
	p := tmConnect(t, 4)
	p.postSRQ(t, 0x501, 0, 4096)
	_, wc := p.add(t, 0x61, 1, ^uint64(0), 0x10000, 256, 0, 0)
	tmExpectOpWC(t, wc, 0x61|tmAddBit, verbs.WCTMAdd, false, "TAG_ADD in sync")
	n := p.msg(0, wire.TMEager, 9, 0, []byte("unexpected"))
	p.send(t, 0, n)
	p.expectWhole(t, p.next(t, "B: tag 9"), 0x501, verbs.WCTMRecv, 0, n, 0, "tag 9 with no entry")
	_, wc = p.add(t, 0x62, 2, ^uint64(0), 0x11000, 256, 0, 0)
	tmExpectOpWC(t, wc, 0x62|tmAddBit, verbs.WCTMAdd, true, "TAG_ADD after an unexpected message, without IBV_OPS_TM_SYNC")
	_, wc = p.add(t, 0x63, 3, ^uint64(0), 0x12000, 256, verbs.OpsTMSync, 1)
	tmExpectOpWC(t, wc, 0x63|tmAddBit, verbs.WCTMAdd, false, "TAG_ADD with IBV_OPS_TM_SYNC and unexpected_cnt 1")
	data := []byte("in sync")
	p.expectMatched(t, p.eager(t, 3, 5, data, "B: tag 3"), 0x63, 3, 5, data, 0x12000, "tag 3 after the TAG_ADD that synced")
}

func tmSyncReqDetails(t *T, d Device) {
	p := tmConnect(t, 4)
	p.postSRQ(t, 0x501, 0, 4096)
	n := p.msg(0, wire.TMEager, 9, 0, []byte("unexpected"))
	p.send(t, 0, n)
	wc := p.next(t, "B: tag 9")
	p.expectWhole(t, wc, 0x501, verbs.WCTMRecv, 0, n, 0, "tag 9 with no entry")
	if wc.WCFlags&verbs.WCFlagTMSyncReq != 0 {
		t.Fatalf("the completion of the first unexpected message asks for a sync (software is 1 behind): %s", tmWC(wc))
	}
	tmPost(t, p.SRQ, tmSync(0x71, verbs.OpsSignaled, 0), "TAG_SYNC without IBV_OPS_TM_SYNC")
	tmExpectOpWC(t, p.next(t, "TM_SYNC"), 0x71, verbs.WCTMSync, true, "TAG_SYNC without IBV_OPS_TM_SYNC (software 0, device 1)")
	tmPost(t, p.SRQ, tmSync(0x72, verbs.OpsSignaled|verbs.OpsTMSync, 1), "TAG_SYNC unexpected_cnt 1")
	tmExpectOpWC(t, p.next(t, "TM_SYNC"), 0x72, verbs.WCTMSync, false, "TAG_SYNC unexpected_cnt 1 (in sync)")
}

func tmDelRace(t *T, d Device) {
	p := tmConnect(t, 4)
	h, _ := p.add(t, 5, 0x10, ^uint64(0), 0x10000, 4096, 0, 0)
	ExpectOK(t, p.CQ.ReqNotify(false), "req_notify_cq on the TM-SRQ's CQ")
	data := []byte("consumed first")
	p.send(t, 0, p.msg(0, wire.TMEager, 0x10, 0xc0, data))
	// The message consumed the entry: its completion is queued (the
	// event says so) and not polled. The application deletes the entry.
	c, err := p.Ch.GetEvent(Ctx(t, dpDeadline))
	if err != nil {
		t.Fatalf("get_cq_event for the consuming message: %v%s", err, dpDiag([]*dpSide{p.A, p.B}))
	}
	c.AckEvents(1)
	if c != p.CQ {
		t.Fatalf("the completion event is for another CQ")
	}
	tmPost(t, p.SRQ, tmDel(0x66, verbs.OpsSignaled, h), "TAG_DEL of the entry consumed, its completion not polled")
	wcs := dpWaitWC(t, p.CQ, 2, "the message and the TAG_DEL", p.A, p.B)
	p.expectMatched(t, wcs[0], 5, 0x10, 0xc0, data, 0x10000, "the message that consumed the entry")
	dpExpectWC(t, wcs[1], 0x66, verbs.WCTMErr, 0, "TAG_DEL racing the consumption")
}

func tmRendezvous(t *T, d Device) {
	p := tmConnect(t, 4)
	const size, dataOff, tagOff, finOff = 20000, 0x8000, 0x10000, 0x4000
	dpFill(p.A.Buf[dataOff:dataOff+size], 7)
	dpRecv(t, p.QA, 0xf1, p.A.MR.SGE(finOff, 64))
	p.add(t, 42, 0x7000, 0xf000, tagOff, size, 0, 0)
	p.send(t, 0, p.rndv(0, 0x7abc, 0x600d, dataOff, size))
	first := p.next(t, "B: the rendezvous request")
	dpExpectOK(t, first, 42, verbs.WCTMRecv, "the matched rendezvous request")
	if first.WCFlags != verbs.WCFlagTMMatch {
		t.Fatalf("the matched rendezvous request: wc_flags %#x, want IBV_WC_TM_MATCH alone (%#x): %s", uint32(first.WCFlags), uint32(verbs.WCFlagTMMatch), tmWC(first))
	}
	if first.TMInfo != (verbs.TMInfo{Tag: 0x7abc, Priv: 0x600d}) {
		t.Fatalf("the matched rendezvous request: tm_info {tag %#x priv %#x}, want {tag 0x7abc priv 0x600d}", first.TMInfo.Tag, first.TMInfo.Priv)
	}
	Expect(t, first.ByteLen, uint32(size), "the matched rendezvous request: byte_len (the RVH's length)")
	second := p.next(t, "B: the rendezvous data")
	dpExpectOK(t, second, 42, verbs.WCTMRecv, "the rendezvous data")
	if second.WCFlags != verbs.WCFlagTMDataValid {
		t.Fatalf("the rendezvous data: wc_flags %#x, want IBV_WC_TM_DATA_VALID alone (%#x): %s", uint32(second.WCFlags), uint32(verbs.WCFlagTMDataValid), tmWC(second))
	}
	Expect(t, second.ByteLen, uint32(size), "the rendezvous data: byte_len")
	dpExpectBytes(t, p.B.Buf[tagOff:tagOff+size], p.A.Buf[dataOff:dataOff+size], "the bytes READ from the sender into the tag's buffer")
	fin := dpWait1(t, p.A.RCQ, "A: the FIN", p.A, p.B)
	dpExpectOK(t, fin, 0xf1, verbs.WCRecv, "A: the FIN")
	Expect(t, fin.ByteLen, uint32(wire.TMHSize), "A: the FIN's byte_len")
	got := wire.TMH(p.A.Buf[finOff : finOff+wire.TMHSize]).Fields()
	Expect(t, got, wire.TMHFields{Opcode: wire.TMFin, AppCtx: 0x600d, Tag: 0x7abc}, "A: the FIN's TMH")
}
