package conformance

import (
	"fmt"
	"math"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// Cases for ibv_post_send(3) (seed 003).
//
// There is no transport engine yet, so nothing posted in RTS completes on
// its own; what a case can observe is the return value, bad_wr, and the
// flush completions a move to ERR produces. Posting in SQE is not covered:
// a QP enters SQE only through a send error on a UC or UD QP, which needs
// the transport (ibv_modify_qp cannot lead there).

const (
	qpPostSendCite = `ibv_post_send(3): "It stops processing WRs from this list at the first failure (that can be detected immediately while requests are being posted), and returns this failing WR through bad_wr"`
	qpSeedStates   = `ibv_post_send(3) (seed 003): "if the QP is in RESET, INIT or RTR, an immediate error should be returned"; "in RTS, Send Requests can be posted and they are processed"; "in SQE or ERROR, Send Requests can be posted and they are completed with error"; "in SQD, Send Requests can be posted but they are not processed"`
)

func init() {
	Register(
		qpSendEarlyStateCase(qsReset),
		qpSendEarlyStateCase(qsInit),
		qpSendEarlyStateCase(qsRTR),
		Case{
			Name:  "post_send/state/RTS-accepts",
			Cite:  qpSeedStates,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				qpPostSend(t, q, qpSendList(qpSendWR(1, f.MR.SGE(0, 32)), qpSendWR(2, f.MR.SGE(32, 32))))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTS -> ERR", 1, 2)
			},
		},
		Case{
			Name:  "post_send/state/ERR-accepts-and-flushes",
			Cite:  qpSeedStates + `; ibv_poll_cq(3): such completions carry IBV_WC_WR_FLUSH_ERR`,
			Label: Spec,
			Run: func(t *T, d Device) {
				for _, typ := range qpTypes {
					f, q := qpAt(t, d, typ, qsErr)
					ah := qpAH(t, f)
					bad, err := q.PostSend(qpSendList(qpValidSend(typ, ah, 0x10, f.MR.SGE(0, 16)), qpValidSend(typ, ah, 0x11, f.MR.SGE(16, 16))))
					if err != nil || bad != nil {
						t.Fatalf("%s QP in ERR: post_send: %v (bad_wr %v), want it accepted", typ, err, qpSendID(bad))
					}
					qpExpectFlushed(t, f.CQ, q, typ.String()+" QP in ERR", 0x10, 0x11)
				}
			},
		},
		Case{
			Name:  "post_send/state/SQD-accepts-and-holds",
			Cite:  qpSeedStates + `; IBTA 10.3.1 (SQD): WRs posted in SQD stay queued until the QP returns to RTS; when it enters ERR they are flushed with the earlier ones, in order`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				qpPostSend(t, q, qpSendWR(0x20, f.MR.SGE(0, 16)))
				ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: qsSQD}, verbs.AttrState), "modify RTS -> SQD")
				qpPostSend(t, q, qpSendList(qpSendWR(0x21, f.MR.SGE(16, 16)), qpSendWR(0x22, f.MR.SGE(32, 16))))
				qpExpectNoCompletion(t, f.CQ, "send WRs posted in SQD")
				Expect(t, State(t, q), qsSQD, "state after posting in SQD")
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after SQD -> ERR", 0x20, 0x21, 0x22)
			},
		},
		Case{
			Name:  "post_send/list/stops-at-first-bad-wr",
			Cite:  qpPostSendCite + `; the WRs before it were posted, the ones after it were not`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				capa := qpQuery(t, q).Cap
				badWR := qpSendWR(0x32, qpSGEs(f, int(capa.MaxSendSGE)+1)...)
				list := qpSendList(qpSendWR(0x31, f.MR.SGE(0, 8)), badWR, qpSendWR(0x33, f.MR.SGE(8, 8)))
				qpExpectSendRejected(t, q, list, badWR, syscall.EINVAL, "post_send with a bad second WR")
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTS -> ERR", 0x31)
			},
		},
		Case{
			Name:  "post_send/list/full-send-queue-enomem",
			Cite:  qpPostSendCite + `; libibverbs ERRORS: ENOMEM "Send Queue is full or not enough resources to complete this operation" (more than max_send_wr outstanding)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f := NewFixture(t, d)
				c := DefaultCap
				c.MaxSendWR = 4
				q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, Cap: c, QPType: verbs.QPTypeRC})
				ExpectOK(t, err, "create_qp")
				f.Walk(t, q, verbs.QPTypeRC, qsRTS, qpPeerQPN)
				n := int(qpQuery(t, q).Cap.MaxSendWR)
				if n > 60 {
					t.Skipf("the device granted max_send_wr %d for 4; the fixture CQ holds 64", n)
				}
				wrs := make([]*verbs.SendWR, n+2)
				ids := make([]uint64, n)
				for i := range wrs {
					wrs[i] = qpSendWR(0x100+uint64(i), f.MR.SGE(i*8, 8))
					if i < n {
						ids[i] = wrs[i].WRID
					}
				}
				qpExpectSendRejected(t, q, qpSendList(wrs...), wrs[n], syscall.ENOMEM, fmt.Sprintf("post_send of %d WRs with max_send_wr %d", n+2, n))
				one := qpSendWR(0x1ff, f.MR.SGE(0, 8))
				qpExpectSendRejected(t, q, one, one, syscall.ENOMEM, "post_send to the full send queue")
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTS -> ERR", ids...)
			},
		},
		Case{
			Name:  "post_send/num_sge-above-max_send_sge",
			Cite:  `ibv_post_send(3): num_sge "can be less or equal to the number of scatter/gather entries that the Queue Pair was created to support in the Send Queue (qp_init_attr.cap.max_send_sge)"; rxe: EINVAL; ` + qpPostSendCite,
			Label: Spec,
			Run: func(t *T, d Device) {
				for _, typ := range qpTypes {
					f, q := qpAt(t, d, typ, qsRTS)
					capa := qpQuery(t, q).Cap
					wr := qpValidSend(typ, qpAH(t, f), 0x40, qpSGEs(f, int(capa.MaxSendSGE)+1)...)
					qpExpectSendRejected(t, q, wr, wr, syscall.EINVAL, fmt.Sprintf("%s: num_sge %d with max_send_sge %d", typ, capa.MaxSendSGE+1, capa.MaxSendSGE))
					ok := qpValidSend(typ, qpAH(t, f), 0x41, qpSGEs(f, int(capa.MaxSendSGE))...)
					qpPostSend(t, q, ok)
				}
			},
		},
		Case{
			Name:  "post_send/num_sge-0-allowed",
			Cite:  `ibv_post_send(3): num_sge "If this size is 0, this indicates that the message size is 0"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				for _, typ := range qpTypes {
					f, q := qpAt(t, d, typ, qsRTS)
					qpPostSend(t, q, qpValidSend(typ, qpAH(t, f), 0x50))
					if typ == verbs.QPTypeRC {
						qpToErr(t, q)
						qpExpectFlushed(t, f.CQ, q, "after RTS -> ERR", 0x50)
					}
				}
			},
		},
		Case{
			Name:  "post_send/sges-from-different-mrs",
			Cite:  `ibv_post_send(3) (seed 003): "The entries in the list can specify memory blocks that were registered by different Memory Regions"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				mr2, err := f.PD.RegMR(make([]byte, 256), verbs.AccessLocalWrite)
				ExpectOK(t, err, "reg_mr")
				qpPostSend(t, q, qpSendWR(0x60, f.MR.SGE(0, 100), mr2.SGE(0, 100)))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTS -> ERR", 0x60)
			},
		},
		Case{
			Name:  "post_send/inline/longer-than-max_inline_data",
			Cite:  `ibv_create_qp(3): max_inline_data is the "maximum size of data that can be posted inline to the send queue"; ibv_post_send(3) IBV_SEND_INLINE; rxe validate_send_wr: length > max_inline is EINVAL; ` + qpPostSendCite,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeUC, qsRTS)
				lim := int(qpQuery(t, q).Cap.MaxInlineData)
				wr := qpSendWR(0x70, f.MR.SGE(0, lim+1))
				wr.SendFlags |= verbs.SendInline
				qpExpectSendRejected(t, q, wr, wr, syscall.EINVAL, fmt.Sprintf("inline send of %d bytes with max_inline_data %d", lim+1, lim))
				// Exactly max_inline_data bytes, in two elements, fit.
				ok := qpSendWR(0x71, f.MR.SGE(0, lim/2), f.MR.SGE(lim, lim-lim/2))
				ok.SendFlags |= verbs.SendInline
				qpPostSend(t, q, ok)
			},
		},
		qpInlineOpcodeCase(verbs.WRRDMARead),
		qpInlineOpcodeCase(verbs.WRAtomicFetchAndAdd),
		Case{
			Name:  "post_send/inline/lkey-not-checked",
			Cite:  `ibv_post_send(3): IBV_SEND_INLINE "Send data in given gather list as inline data in a send WQE. Valid only for Send and RDMA Write. The L_Key will not be checked."`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				sge := f.MR.SGE(0, 16)
				sge.LKey ^= 0x5a5a5a5a
				wr := qpSendWR(0x78, sge)
				wr.SendFlags |= verbs.SendInline
				qpPostSend(t, q, wr)
			},
		},
		qpOpcodeAllowedCase(verbs.QPTypeRC, []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite,
			verbs.WRRDMAWriteWithImm, verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd}),
		qpOpcodeAllowedCase(verbs.QPTypeUC, []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm}),
		qpOpcodeAllowedCase(verbs.QPTypeUD, []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm}),
		qpOpcodeRejectedCase(verbs.QPTypeUC, verbs.WRRDMARead),
		qpOpcodeRejectedCase(verbs.QPTypeUC, verbs.WRAtomicCmpAndSwp),
		qpOpcodeRejectedCase(verbs.QPTypeUC, verbs.WRAtomicFetchAndAdd),
		qpOpcodeRejectedCase(verbs.QPTypeUD, verbs.WRRDMAWrite),
		qpOpcodeRejectedCase(verbs.QPTypeUD, verbs.WRRDMAWriteWithImm),
		qpOpcodeRejectedCase(verbs.QPTypeUD, verbs.WRRDMARead),
		qpOpcodeRejectedCase(verbs.QPTypeUD, verbs.WRAtomicCmpAndSwp),
		Case{
			Name:  "post_send/UD-without-ah",
			Cite:  `ibv_post_send(3): wr.ud.ah is the "Address handle (AH) for the remote node address" of a UD send; without it there is no destination; ` + qpPostSendCite,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: `rdma-core v44.0 providers/rxe/rxe.c convert_send_wr() (from post_one_send() -> init_send_wqe()): for IBV_WR_SEND on a UD QP "struct rxe_ah *ah = to_rah(uwr->wr.ud.ah); ... kwr->wr.ud.ah_num = ah->ah_num;" dereferences the NULL AH; validate_send_wr() does not check it`,
				Note: "crashes (SIGSEGV) where the man page has the post fail: a UD send without an AH dereferences NULL in the provider",
			}},
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeUD, qsRTS)
				wr := qpSendWR(0x80, f.MR.SGE(0, 16))
				wr.UD = verbs.UDInfo{RemoteQPN: qpPeerQPN, RemoteQKey: 0x11111111}
				qpExpectSendRejected(t, q, wr, wr, syscall.EINVAL, "UD send without an address handle")
			},
		},
		Case{
			Name:  "post_send/UD-longer-than-mtu-no-immediate-error",
			Cite:  `ibv_post_send(3) (seed 003): UD message size is [0, path MTU]; IBTA C10-93.1.1: if a UD message exceeds the port MTU "the CI shall not emit any packets for this message. Further, the CI shall not generate an error due to this condition" (rxe fakes a successful send)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeUD, qsRTS)
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				n := verbs.MTU4096.Bytes() + 1
				if p.ActiveMTU.Valid() {
					n = p.ActiveMTU.Bytes() + 1
				}
				qpPostSend(t, q, qpValidSend(verbs.QPTypeUD, qpAH(t, f), 0x88, f.MR.SGE(0, n)))
			},
		},
		Case{
			Name:  "post_send/atomic/length-not-8",
			Cite:  `ibv_post_send(3): the atomic operations work on 64-bit values (IBTA 9.4.5: the local buffer of an atomic is 8 bytes); ` + qpPostSendCite,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxePostSendChecks,
				Note: "refuses an atomic shorter than 8 bytes but accepts a longer local buffer (16 bytes)",
			}},
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				for _, c := range []struct {
					op verbs.WROpcode
					n  int
				}{{verbs.WRAtomicCmpAndSwp, 4}, {verbs.WRAtomicFetchAndAdd, 16}, {verbs.WRAtomicFetchAndAdd, 0}} {
					wr := qpAtomicWR(f, c.op, 0x90)
					wr.SGList = []verbs.SGE{f.MR.SGE(0, c.n)}
					if c.n == 0 {
						wr.SGList = nil
					}
					qpExpectSendRejected(t, q, wr, wr, syscall.EINVAL, fmt.Sprintf("%s with a %d-byte local buffer", c.op, c.n))
				}
			},
		},
		Case{
			Name:  "post_send/atomic/unaligned-remote-addr",
			Cite:  `ibv_post_send(3): wr.atomic.remote_addr is the "start address of remote memory buffer"; IBTA 9.4.5: the remote address of an atomic must be 8-byte aligned; rxe validate_send_wr: "misaligned atomic address" is EINVAL; ` + qpPostSendCite,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				for _, op := range []verbs.WROpcode{verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd} {
					wr := qpAtomicWR(f, op, 0x98)
					wr.Atomic.RemoteAddr += 4
					qpExpectSendRejected(t, q, wr, wr, syscall.EINVAL, fmt.Sprintf("%s at remote address %#x", op, wr.Atomic.RemoteAddr))
				}
			},
		},
		Case{
			Name:  "post_send/message-longer-than-max_msg_sz",
			Cite:  `ibv_query_port(3): max_msg_sz is the "max message size"; ibv_post_send(3) (seed 003): "The message size can be [0, 2^31] for RC and UC QPs"; ` + qpPostSendCite,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxePostSendChecks,
				Note: "accepts a SEND longer than the port's max_msg_sz at post time",
			}},
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				if p.MaxMsgSz == math.MaxUint32 {
					t.Skipf("max_msg_sz is 2^32-1: one SGE cannot exceed it")
				}
				sge := f.MR.SGE(0, 0)
				sge.Length = p.MaxMsgSz + 1
				wr := qpSendWR(0xa0, sge)
				qpExpectSendRejected(t, q, wr, wr, syscall.EINVAL, fmt.Sprintf("send of %d bytes with max_msg_sz %d", sge.Length, p.MaxMsgSz))
			},
		},
		Case{
			Name:  "post_send/wr_id-returned-in-completion",
			Cite:  `ibv_post_send(3): wr_id is a "user defined WR ID"; seed 003: "If a Work Completion will be generated when this Work Request ends, it will contain this value"; ibv_poll_cq(3): wr_id is valid in error completions`,
			Label: Spec,
			Run: func(t *T, d Device) {
				// RC: its sends stay outstanding until acknowledged, and
				// nobody acknowledges them here, so each ends flushed on
				// any device (a UC send completes once sent, which a
				// device with a network does at once).
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				ids := []uint64{0, math.MaxUint64, 1 << 63, 0xdeadbeefcafe}
				for _, id := range ids {
					qpPostSend(t, q, qpSendWR(id, f.MR.SGE(0, 8)))
				}
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTS -> ERR", ids...)
			},
		},
		Case{
			Name:  "post_send/unsignaled-wrs-still-flushed",
			Cite:  `ibv_create_qp(3): without sq_sig_all only WRs with IBV_SEND_SIGNALED generate a completion on success; IBTA 10.8.3: a WR completed in error (including flushed) always generates a completion, signaled or not`,
			Label: Spec,
			Run: func(t *T, d Device) {
				f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
				a := qpSendWR(0xb0, f.MR.SGE(0, 8))
				a.SendFlags = 0
				b := qpSendWR(0xb1, f.MR.SGE(8, 8))
				c := qpSendWR(0xb2, f.MR.SGE(16, 8))
				c.SendFlags = 0
				qpPostSend(t, q, qpSendList(a, b, c))
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTS -> ERR", 0xb0, 0xb1, 0xb2)
				d2 := qpSendWR(0xb3, f.MR.SGE(0, 8))
				d2.SendFlags = 0
				qpPostSend(t, q, d2)
				qpExpectFlushed(t, f.CQ, q, "unsignaled WR posted in ERR", 0xb3)
			},
		},
	)
}

// qpSGEs returns n 8-byte elements of the fixture's MR.
func qpSGEs(f *Fixture, n int) []verbs.SGE {
	s := make([]verbs.SGE, n)
	for i := range s {
		s[i] = f.MR.SGE(i*8, 8)
	}
	return s
}

// qpValidSend is a signaled SEND that is valid for a QP of the type: UD
// sends carry the address handle, the peer QP number and a Q_Key.
func qpValidSend(typ verbs.QPType, ah AH, id uint64, sges ...verbs.SGE) *verbs.SendWR {
	wr := qpSendWR(id, sges...)
	if typ == verbs.QPTypeUD {
		wr.UD = verbs.UDInfo{AH: ah, RemoteQPN: qpPeerQPN, RemoteQKey: 0x11111111}
	}
	return wr
}

// qpAtomicWR is a valid atomic on the fixture's MR: 8 local bytes, an
// aligned remote address.
func qpAtomicWR(f *Fixture, op verbs.WROpcode, id uint64) *verbs.SendWR {
	wr := qpSendWR(id, f.MR.SGE(0, 8))
	wr.Opcode = op
	wr.Atomic = verbs.AtomicInfo{RemoteAddr: f.MR.Addr() + 64, RKey: f.MR.RKey(), CompareAdd: 1, Swap: 2}
	return wr
}

// qpOpWR is a valid WR of the opcode for a QP of the type.
func qpOpWR(f *Fixture, typ verbs.QPType, ah AH, op verbs.WROpcode, id uint64) *verbs.SendWR {
	if op.IsAtomic() {
		wr := qpAtomicWR(f, op, id)
		if typ == verbs.QPTypeUD {
			// The address, so that only the opcode is wrong.
			wr.UD = verbs.UDInfo{AH: ah, RemoteQPN: qpPeerQPN, RemoteQKey: 0x11111111}
		}
		return wr
	}
	wr := qpValidSend(typ, ah, id, f.MR.SGE(0, 64))
	wr.Opcode = op
	wr.ImmData = 0x1234
	wr.RDMA = verbs.RDMAInfo{RemoteAddr: f.MR.Addr() + 1024, RKey: f.MR.RKey()}
	return wr
}

// qpSendEarlyStateCase checks that posting in RESET, INIT or RTR fails at
// once, returns the first WR and queues nothing.
func qpSendEarlyStateCase(st verbs.QPState) Case {
	return Case{
		Name:  "post_send/state/" + st.String() + "-fails",
		Cite:  qpSeedStates + `; ` + qpPostSendCite,
		Label: Spec,
		Deviations: []Deviation{{
			Impl: ImplRxe,
			Cite: rxeBadWRNull,
			Note: "post_send in " + st.String() + " fails with EINVAL but leaves *bad_wr NULL (the WRs were queued before the doorbell failed)",
		}},
		Run: func(t *T, d Device) {
			for _, typ := range qpTypes {
				f, q := qpAt(t, d, typ, st)
				ah := qpAH(t, f)
				first := qpValidSend(typ, ah, 0xc0, f.MR.SGE(0, 16))
				qpExpectSendRejected(t, q, qpSendList(first, qpValidSend(typ, ah, 0xc1, f.MR.SGE(16, 16))), first, syscall.EINVAL,
					fmt.Sprintf("post_send to a %s QP in %s", typ, st))
				Expect(t, State(t, q), st, "state after the rejected post")
				qpToErr(t, q)
				qpExpectNoCompletion(t, f.CQ, fmt.Sprintf("%s QP moved to ERR after the rejected post", typ))
			}
		},
	}
}

// qpInlineOpcodeCase checks that IBV_SEND_INLINE is refused for an opcode
// other than SEND and RDMA WRITE.
func qpInlineOpcodeCase(op verbs.WROpcode) Case {
	return Case{
		Name:  "post_send/inline/" + op.String() + "-rejected",
		Cite:  `ibv_post_send(3): IBV_SEND_INLINE "Valid only for Send and RDMA Write"; ` + qpPostSendCite,
		Label: Spec,
		Deviations: []Deviation{{
			Impl: ImplRxe,
			Cite: rxePostSendChecks,
			Note: "accepts IBV_SEND_INLINE on " + op.String() + " (it copies the data inline like a SEND's)",
		}},
		Run: func(t *T, d Device) {
			f, q := qpAt(t, d, verbs.QPTypeRC, qsRTS)
			wr := qpOpWR(f, verbs.QPTypeRC, nil, op, 0xd0)
			wr.SGList = []verbs.SGE{f.MR.SGE(0, 8)}
			wr.SendFlags |= verbs.SendInline
			qpExpectSendRejected(t, q, wr, wr, syscall.EINVAL, "inline "+op.String())
		},
	}
}

// qpOpcodeAllowedCase checks that every opcode the transport supports is
// accepted, and completes (flushed) under its wr_id.
func qpOpcodeAllowedCase(typ verbs.QPType, ops []verbs.WROpcode) Case {
	return Case{
		Name:  "post_send/opcode/" + typ.String() + "-supported-accepted",
		Cite:  `ibv_post_send(3) opcode list; IBTA 1.2.1 table 38 (service types and operations): RC has SEND, RDMA WRITE, RDMA READ and atomics; UC has SEND and RDMA WRITE; UD has SEND only (each with immediate where defined)`,
		Label: Spec,
		Run: func(t *T, d Device) {
			f, q := qpAt(t, d, typ, qsRTS)
			ah := qpAH(t, f)
			ids := make([]uint64, len(ops))
			for i, op := range ops {
				ids[i] = 0xe0 + uint64(i)
				bad, err := q.PostSend(qpOpWR(f, typ, ah, op, ids[i]))
				if err != nil || bad != nil {
					t.Fatalf("%s QP: post_send %s: %v, want it accepted", typ, op, err)
				}
			}
			switch typ {
			case verbs.QPTypeRC:
				qpToErr(t, q)
				qpExpectFlushed(t, f.CQ, q, "after RTS -> ERR", ids...)
			case verbs.QPTypeUC:
				// A UC send completes once sent (IBTA 9.8.3): on a device
				// with a network some may succeed before the move to ERR
				// flushes the rest.
				qpToErr(t, q)
				qpExpectSentOrFlushed(t, f.CQ, q, "after RTS -> ERR", ids...)
			default:
			}
		},
	}
}

// qpOpcodeRejectedCase checks that an opcode the transport lacks fails.
func qpOpcodeRejectedCase(typ verbs.QPType, op verbs.WROpcode) Case {
	return Case{
		Name:  "post_send/opcode/" + typ.String() + "-" + op.String() + "-rejected",
		Cite:  `ibv_post_send(3) opcode list; IBTA 1.2.1 table 38: UC has no RDMA READ and no atomics, UD has SEND only; ` + qpPostSendCite,
		Label: Spec,
		Deviations: []Deviation{{
			Impl: ImplRxe,
			Cite: rxePostSendChecks,
			Note: "accepts " + op.String() + " on a " + typ.String() + " QP at post time",
		}},
		Run: func(t *T, d Device) {
			f, q := qpAt(t, d, typ, qsRTS)
			wr := qpOpWR(f, typ, qpAH(t, f), op, 0xf0)
			qpExpectSendRejected(t, q, wr, wr, syscall.EINVAL, fmt.Sprintf("%s on a %s QP", op, typ))
			qpToErr(t, q)
			qpExpectNoCompletion(t, f.CQ, "after the rejected post and a move to ERR")
		},
	}
}
