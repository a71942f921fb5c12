package conformance

import (
	"encoding/binary"
	"fmt"

	"github.com/softhca/softhca/verbs"
)

// Data-path edge cases: mixed operations in one send queue, messages
// longer than the PSN window, PSN wrap-around, the responder in RTR, INIT
// dropping packets, zero-length RDMA without a key, RNR on RDMA WRITE with
// immediate.

func init() {
	Register(
		Case{
			Name:  "datapath/rc/mixed-operations-complete-in-order",
			Cite:  `IBTA 10.8.3: the completions of one send queue are returned in the order its WRs were posted, whatever their operations (SEND, RDMA WRITE, RDMA READ, ATOMIC); RDMA READ and ATOMIC requests in flight are bounded by max_rd_atomic (ibv_modify_qp(3)) without reordering anything; each operation moves its bytes as ibv_post_send(3) describes`,
			Label: Spec,
			Run:   dpMixed,
		},
		Case{
			Name:  "datapath/rc/multi-packet/more-packets-than-the-window",
			Cite:  `ibv_post_send(3): RC messages of up to 2^31 bytes; IBTA 9.7.1: a message of more packets than the requester may have unacknowledged (rxe: 128 PSNs) is sent as acknowledgements arrive and still arrives whole; RDMA READ responses of 256 packets likewise`,
			Label: Spec,
			Run:   dpWindow,
		},
		Case{
			Name:  "datapath/rc/psn-wraps-around",
			Cite:  `IBTA 9.7.1: the PSN is a 24-bit number that wraps from 0xFFFFFF to 0; ibv_modify_qp(3): sq_psn and rq_psn may be any 24-bit value; messages whose packets cross the wrap (SEND, RDMA WRITE, RDMA READ responses) complete normally`,
			Label: Spec,
			Run:   dpPSNWrap,
		},
		Case{
			Name:  "datapath/rc/responder-in-rtr",
			Cite:  `IBTA 10.3.1 (Ready To Receive): a QP in RTR processes incoming requests and acknowledges them, only its send queue is inactive; ibv_modify_qp(3): RTR "Ready To Receive"; a SEND and an RDMA READ addressed to a QP in RTR complete`,
			Label: Spec,
			Run:   dpRTRResponder,
		},
		Case{
			Name:  "datapath/ud/init-qp-drops-incoming",
			Cite:  `IBTA 10.3.1 (Initialize state): receive WRs may be posted, but incoming packets are silently dropped until the QP is in RTR; ibv_post_recv(3) (seed 000) allows posting once the QP left RESET`,
			Label: Spec,
			Run:   dpUDInitDrops,
		},
		Case{
			Name:  "datapath/rc/zero-length-rdma-needs-no-key",
			Cite:  `IBTA (RDMA requests): a request with a DMA length of 0 accesses no memory, so the responder does not validate its R_Key and virtual address (rxe_resp.c check_rkey: "A zero-byte op is not required to set an addr or rkey"); ibv_post_send(3): RDMA WRITE and READ of [0, 2^31] bytes`,
			Label: Spec,
			Run:   dpZeroLengthNoKey,
		},
		Case{
			Name:  "datapath/rc/rdma-write-with-imm/rnr-without-a-receive",
			Cite:  `ibv_post_send(3): IBV_WR_RDMA_WRITE_WITH_IMM consumes a Receive Request of the remote QP, so without one the responder answers RNR NAK like for a SEND (IBTA 9.7.5.2.8); ibv_poll_cq(3): IBV_WC_RNR_RETRY_EXC_ERR once rnr_retry is used up (here 0)`,
			Label: Spec,
			Run:   dpWriteImmRNR,
		},
	)
}

func dpMixed(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{MaxRdAtomic: 4})
	const n = 30
	const (
		aSrc, aRead, aAtomic = 0, 0x4000, 0x10000
		bRead, bWrite, bRecv = 0x2000, 0xe000, 0x10000
		bWord                = 0x1f000
	)
	dpFill(a.Buf[aSrc:aSrc+n*256], 40)
	dpFill(b.Buf[bRead:bRead+n*1600], 41)
	binary.NativeEndian.PutUint64(b.Buf[bWord:], 0)
	dpFence(t, qb)
	wrs := make([]*verbs.SendWR, n)
	wantOp := make([]verbs.WCOpcode, n)
	var recvs []int // the WRs that consume a receive WR, in order
	for i := range n {
		src := a.MR.SGE(aSrc+i*256, 64+i)
		switch i % 5 {
		case 0:
			wrs[i], wantOp[i] = dpSend(uint64(i), verbs.WRSend, verbs.SendSignaled, src), verbs.WCSend
			recvs = append(recvs, i)
		case 1:
			wrs[i], wantOp[i] = dpRDMA(uint64(i), verbs.WRRDMAWrite, b.MR.Addr()+bWrite+uint64(i*256), b.MR.RKey(), src), verbs.WCRDMAWrite
		case 2:
			wrs[i], wantOp[i] = dpRDMA(uint64(i), verbs.WRRDMARead, b.MR.Addr()+bRead+uint64(i*1600), b.MR.RKey(), a.MR.SGE(aRead+i*1600, 1500)), verbs.WCRDMARead
		case 3:
			wrs[i] = &verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(aAtomic+i*8, 8)}, Atomic: verbs.AtomicInfo{RemoteAddr: b.MR.Addr() + bWord, RKey: b.MR.RKey(), CompareAdd: uint64(i)}}
			wantOp[i] = verbs.WCFetchAdd
		case 4:
			wrs[i] = dpRDMA(uint64(i), verbs.WRRDMAWriteWithImm, b.MR.Addr()+bWrite+uint64(i*256), b.MR.RKey(), src)
			wrs[i].ImmData = uint32(0x1000 + i)
			wantOp[i] = verbs.WCRDMAWrite
			recvs = append(recvs, i)
		}
	}
	for k := range recvs {
		dpRecv(t, qb, uint64(0x100+k), b.MR.SGE(bRecv+k*256, 256))
	}
	dpPost(t, qa, dpList(wrs...))
	wcs := dpWaitWC(t, a.SCQ, n, "sender", a, b)
	for i, wc := range wcs {
		dpExpectOK(t, wc, uint64(i), wantOp[i], fmt.Sprintf("completion %d (in posting order)", i))
	}
	rwcs := dpWaitWC(t, b.RCQ, len(recvs), "receiver", a, b)
	dpFence(t, qb)
	sum := uint64(0)
	for i := range n {
		what := fmt.Sprintf("WR %d (%s)", i, wrs[i].Opcode)
		switch i % 5 {
		case 1, 4:
			dpExpectBytes(t, b.Buf[bWrite+i*256:bWrite+i*256+64+i], a.Buf[aSrc+i*256:aSrc+i*256+64+i], what)
		case 2:
			dpExpectBytes(t, a.Buf[aRead+i*1600:aRead+i*1600+1500], b.Buf[bRead+i*1600:bRead+i*1600+1500], what)
		case 3:
			Expect(t, binary.NativeEndian.Uint64(a.Buf[aAtomic+i*8:]), sum, what+": fetched value")
			sum += uint64(i)
		}
	}
	Expect(t, binary.NativeEndian.Uint64(b.Buf[bWord:]), sum, "the atomic word after the additions")
	for k, i := range recvs {
		rwc := rwcs[k]
		what := fmt.Sprintf("receive %d (WR %d, %s)", k, i, wrs[i].Opcode)
		if wrs[i].Opcode == verbs.WRSend {
			dpExpectOK(t, rwc, uint64(0x100+k), verbs.WCRecv, what)
			dpExpectBytes(t, b.Buf[bRecv+k*256:bRecv+k*256+64+i], a.Buf[aSrc+i*256:aSrc+i*256+64+i], what)
		} else {
			dpExpectOK(t, rwc, uint64(0x100+k), verbs.WCRecvRDMAWithImm, what)
			Expect(t, rwc.ImmData, uint32(0x1000+i), what+": imm_data")
		}
		Expect(t, rwc.ByteLen, uint32(64+i), what+": byte_len")
	}
}

func dpWindow(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{MTU: verbs.MTU256})
	const n = 60000 // 235 packets of 256 bytes
	dpFill(a.Buf[:n], 42)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, n))
	dpPost(t, qa, dpList(
		dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, n)),
		dpRDMA(2, verbs.WRRDMAWrite, b.MR.Addr()+65536, b.MR.RKey(), a.MR.SGE(0, n)),
		dpRDMA(3, verbs.WRRDMARead, b.MR.Addr()+65536, b.MR.RKey(), a.MR.SGE(65536, n)),
	))
	wcs := dpWaitWC(t, a.SCQ, 3, "sender", a, b)
	dpExpectOK(t, wcs[0], 1, verbs.WCSend, "SEND")
	dpExpectOK(t, wcs[1], 2, verbs.WCRDMAWrite, "RDMA WRITE")
	dpExpectOK(t, wcs[2], 3, verbs.WCRDMARead, "RDMA READ")
	rwc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, rwc, 0x61, verbs.WCRecv, "receive")
	Expect(t, rwc.ByteLen, uint32(n), "byte_len")
	dpFence(t, qb)
	dpExpectBytes(t, b.Buf[:n], a.Buf[:n], "SEND payload")
	dpExpectBytes(t, b.Buf[65536:65536+n], a.Buf[:n], "RDMA WRITE payload")
	dpExpectBytes(t, a.Buf[65536:65536+n], a.Buf[:n], "RDMA READ payload")
}

func dpPSNWrap(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{MTU: verbs.MTU256, PSN: 0xfffff0})
	const n = 8000 // 32 packets
	dpFill(a.Buf[:n], 43)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, n))
	dpRecv(t, qb, 0x62, b.MR.SGE(n, 64))
	dpPost(t, qa, dpList(
		dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, n)),
		dpRDMA(2, verbs.WRRDMARead, b.MR.Addr(), b.MR.RKey(), a.MR.SGE(16384, n)),
		dpRDMA(3, verbs.WRRDMAWrite, b.MR.Addr()+32768, b.MR.RKey(), a.MR.SGE(0, n)),
		dpSend(4, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 64)),
	))
	wcs := dpWaitWC(t, a.SCQ, 4, "sender", a, b)
	for i, op := range []verbs.WCOpcode{verbs.WCSend, verbs.WCRDMARead, verbs.WCRDMAWrite, verbs.WCSend} {
		dpExpectOK(t, wcs[i], uint64(i+1), op, fmt.Sprintf("WR %d", i+1))
	}
	rwcs := dpWaitWC(t, b.RCQ, 2, "receiver", a, b)
	dpExpectOK(t, rwcs[0], 0x61, verbs.WCRecv, "receive across the wrap")
	dpExpectOK(t, rwcs[1], 0x62, verbs.WCRecv, "receive after the wrap")
	dpFence(t, qb)
	dpExpectBytes(t, b.Buf[:n], a.Buf[:n], "SEND payload")
	dpExpectBytes(t, a.Buf[16384:16384+n], a.Buf[:n], "RDMA READ payload")
	dpExpectBytes(t, b.Buf[32768:32768+n], a.Buf[:n], "RDMA WRITE payload")
}

func dpRTRResponder(t *T, d Device) {
	a, b := dpOpen(t)
	o := dpOpts{}
	qa, qb := dpCreateQP(t, a, o), dpCreateQP(t, b, o)
	dpToInit(t, b, qb, o)
	dpToRTR(t, b, qb, o, a.GID, qa.Num())
	dpBringUp(t, a, qa, o, b.GID, qb.Num())
	dpFill(a.Buf[:100], 44)
	dpFill(b.Buf[4096:4096+100], 45)
	dpFence(t, qb)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 100))
	dpPost(t, qa, dpList(
		dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 100)),
		dpRDMA(2, verbs.WRRDMARead, b.MR.Addr()+4096, b.MR.RKey(), a.MR.SGE(8192, 100)),
	))
	wcs := dpWaitWC(t, a.SCQ, 2, "requester", a, b)
	dpExpectOK(t, wcs[0], 1, verbs.WCSend, "SEND to a QP in RTR")
	dpExpectOK(t, wcs[1], 2, verbs.WCRDMARead, "RDMA READ from a QP in RTR")
	dpExpectOK(t, dpWait1(t, b.RCQ, "responder", a, b), 0x61, verbs.WCRecv, "receive in RTR")
	dpExpectBytes(t, b.Buf[:100], a.Buf[:100], "SEND payload")
	dpExpectBytes(t, a.Buf[8192:8292], b.Buf[4096:4196], "RDMA READ payload")
	Expect(t, State(t, qb), verbs.QPStateRTR, "responder state")
}

func dpUDInitDrops(t *T, d Device) {
	a, b := dpOpen(t)
	o := dpOpts{Type: verbs.QPTypeUD}
	qa, qb := dpCreateQP(t, a, o), dpCreateQP(t, b, o)
	dpBringUp(t, a, qa, o, b.GID, qb.Num())
	dpToInit(t, b, qb, o)
	ah := a.AH(t, b)
	dpFill(a.Buf[:200], 46)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 40+128))
	dpPost(t, qa, dpUDSend(1, ah, qb.Num(), dpQKey, a.MR.SGE(0, 100)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCSend, "UD SEND to a QP in INIT")
	dpNoWC(t, b.RCQ, "the QP in INIT")
	dpToRTR(t, b, qb, o, a.GID, qa.Num())
	dpPost(t, qa, dpUDSend(2, ah, qb.Num(), dpQKey, a.MR.SGE(100, 100)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 2, verbs.WCSend, "UD SEND to the QP in RTR")
	dpUDExpectOnly(t, a, b, 0x61, 100, 100)
}

func dpZeroLengthNoKey(t *T, d Device) {
	a, b := dpOpen(t)
	qa, _ := dpConnect1(t, a, b, dpOpts{})
	dpPost(t, qa, dpList(
		dpRDMA(1, verbs.WRRDMAWrite, 0, 0),
		dpRDMA(2, verbs.WRRDMARead, 0, 0),
	))
	wcs := dpWaitWC(t, a.SCQ, 2, "requester", a, b)
	dpExpectOK(t, wcs[0], 1, verbs.WCRDMAWrite, "zero-length RDMA WRITE with R_Key 0 at address 0")
	dpExpectOK(t, wcs[1], 2, verbs.WCRDMARead, "zero-length RDMA READ with R_Key 0 at address 0")
}

func dpWriteImmRNR(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{RNRRetry: 0, SetRNRRetry: true})
	wr := dpRDMA(1, verbs.WRRDMAWriteWithImm, b.MR.Addr(), b.MR.RKey(), a.MR.SGE(0, 64))
	wr.ImmData = 1
	dpPost(t, qa, dpList(wr, dpSend(2, verbs.WRSend, 0, a.MR.SGE(0, 8))))
	wcs := dpWaitWC(t, a.SCQ, 2, "requester", a, b)
	dpExpectWC(t, wcs[0], 1, verbs.WCRNRRetryExcErr, 0, "RDMA WRITE_WITH_IMM with no receive WR at the peer")
	dpExpectFlushed(t, wcs[1:], "the WR after it", 2)
	dpWaitState(t, qa, verbs.QPStateErr, "requester")
	Expect(t, State(t, qb), verbs.QPStateRTS, "responder state")
}
