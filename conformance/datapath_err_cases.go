package conformance

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/softhca/softhca/verbs"
)

// Data-path error cases: length errors, remote and local protection
// errors, RNR and transport retries, flushing, and the SQD state with work
// in flight.

const (
	dpLenCite = `ibv_post_recv(3) (seed 000): a received message longer than the receive WR's buffer is dropped on a UD QP and is an error on RC/UC QPs (the seed points at "Local Length Error (IBV_LOC_LEN_ERR)"); ibv_poll_cq(3): IBV_WC_LOC_LEN_ERR "may happen if a Work Request that was posted in a local Receive Queue isn't big enough for holding the incoming message"`
	// The requester's view of errors the responder detects.
	dpRemAccCite = `ibv_poll_cq(3): IBV_WC_REM_ACCESS_ERR "Remote Access Error: a protection error occurred on a remote data buffer to be read by an RDMA Read, written by an RDMA Write or accessed by an atomic operation"; IBTA 9.9.3 (responder errors): the responder NAKs with Remote Access Error and both QPs enter the Error state; ibv_post_send(3)/IBTA 10.3.1: the WRs after the failed one are completed with IBV_WC_WR_FLUSH_ERR, signaled or not (IBTA 10.8.3)`
	dpFlushCite  = `IBTA 10.3.1 (Error state): on entering ERR every outstanding WR is completed with IBV_WC_WR_FLUSH_ERR, in order, signaled or not (IBTA 10.8.3)`
	dpRNRCite    = `ibv_modify_qp(3): rnr_retry "the number of times to retry before reporting an error (7 means infinite)", min_rnr_timer is the delay the responder asks for in its RNR NAK (IBTA 9.7.5.2.8, table 45); ibv_poll_cq(3): IBV_WC_RNR_RETRY_EXC_ERR "The RNR NAK retry count was exceeded. This usually means that the remote side didn't post any WR to its Receive Queue"`
)

func init() {
	Register(
		Case{
			Name:  "datapath/rc/send-longer-than-receive-buffer",
			Cite:  dpLenCite + `; IBTA 9.9.3 (responder class C error): the responder NAKs Invalid Request and enters ERR, the requester completes the WR with IBV_WC_REM_INV_REQ_ERR and enters ERR, later WRs on both sides are flushed`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeCopyDataLength,
				Note: "completes the receive WR the message did not fit with IBV_WC_LOC_QP_OP_ERR, not IBV_WC_LOC_LEN_ERR",
			}},
			Run: dpRCTooLong,
		},
		Case{
			Name:  "datapath/uc/send-longer-than-receive-buffer",
			Cite:  dpLenCite + `; UC has no acknowledgements: the sender completes successfully`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeCopyDataLength,
				Note: "completes the receive WR the message did not fit with IBV_WC_LOC_QP_OP_ERR, not IBV_WC_LOC_LEN_ERR",
			}},
			Run: dpUCTooLong,
		},
		Case{
			Name:  "datapath/rc/local-protection/bad-lkey",
			Cite:  `ibv_poll_cq(3): IBV_WC_LOC_PROT_ERR "Local Protection Error: the locally posted Work Request's buffers in the scatter/gather list does not reference a Memory Region that is valid for the requested operation"; an RC QP then enters ERR and flushes the rest (IBTA 10.3.1)`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: `Linux 6.1.192 drivers/infiniband/sw/rxe/rxe_req.c rxe_requester(): finish_packet() -> fill_packet() -> rxe_mr.c copy_data(), where lookup_mr() finds no MR for the lkey ("err = -EINVAL"), and then "if (err == -EFAULT) wqe->status = IB_WC_LOC_PROT_ERR; else wqe->status = IB_WC_LOC_QP_OP_ERR;"`,
				Note: "completes a SEND whose lkey names no MR with IBV_WC_LOC_QP_OP_ERR, not IBV_WC_LOC_PROT_ERR",
			}},
			Run: func(t *T, d Device) {
				dpLocalProt(t, verbs.WRSend, func(a *dpSide) verbs.SGE {
					s := a.MR.SGE(0, 64)
					s.LKey ^= 0x00ff00ff
					return s
				})
			},
		},
		Case{
			Name:  "datapath/rc/local-protection/rdma-read-into-mr-without-local-write",
			Cite:  `ibv_reg_mr(3): IBV_ACCESS_LOCAL_WRITE is required for memory the device writes locally (the destination of an RDMA READ); ibv_poll_cq(3): IBV_WC_LOC_PROT_ERR "the locally posted Work Request's buffers in the scatter/gather list does not reference a Memory Region that is valid for the requested operation"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				dpLocalProt(t, verbs.WRRDMARead, func(a *dpSide) verbs.SGE {
					return a.RegMR(t, nil, 4096, verbs.AccessRemoteRead).SGE(0, 64)
				})
			},
		},
		dpRemoteAccessCase("rdma-write/bad-rkey", verbs.WRRDMAWrite, func(t *T, b *dpSide) (uint64, uint32) {
			return b.MR.Addr(), b.MR.RKey() ^ 0x5a5a0000
		}),
		dpRemoteAccessCase("rdma-write/beyond-the-region", verbs.WRRDMAWrite, func(t *T, b *dpSide) (uint64, uint32) {
			return b.MR.Addr() + dpMemSize - 100, b.MR.RKey() // 200 bytes from 100 before the end
		}),
		dpRemoteAccessCase("rdma-write/region-without-remote-write", verbs.WRRDMAWrite, func(t *T, b *dpSide) (uint64, uint32) {
			m := b.RegMR(t, nil, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
			return m.Addr(), m.RKey()
		}),
		dpRemoteAccessCase("rdma-write/region-of-another-pd", verbs.WRRDMAWrite, func(t *T, b *dpSide) (uint64, uint32) {
			pd, err := b.D.AllocPD()
			ExpectOK(t, err, "alloc_pd")
			m := b.RegMR(t, pd, 4096, dpAllAccess)
			return m.Addr(), m.RKey()
		}),
		dpRemoteAccessCase("rdma-read/bad-rkey", verbs.WRRDMARead, func(t *T, b *dpSide) (uint64, uint32) {
			return b.MR.Addr(), b.MR.RKey() ^ 0x5a5a0000
		}),
		dpRemoteAccessCase("rdma-read/beyond-the-region", verbs.WRRDMARead, func(t *T, b *dpSide) (uint64, uint32) {
			return b.MR.Addr() + dpMemSize - 100, b.MR.RKey()
		}),
		dpRemoteAccessCase("rdma-read/region-without-remote-read", verbs.WRRDMARead, func(t *T, b *dpSide) (uint64, uint32) {
			m := b.RegMR(t, nil, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic)
			return m.Addr(), m.RKey()
		}),
		dpRemoteAccessCase("atomic/bad-rkey", verbs.WRAtomicFetchAndAdd, func(t *T, b *dpSide) (uint64, uint32) {
			return b.MR.Addr(), b.MR.RKey() ^ 0x5a5a0000
		}),
		dpRemoteAccessCase("atomic/region-without-remote-atomic", verbs.WRAtomicFetchAndAdd, func(t *T, b *dpSide) (uint64, uint32) {
			m := b.RegMR(t, nil, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			return m.Addr(), m.RKey()
		}),
		dpQPAccessCase(verbs.WRRDMAWrite, verbs.AccessRemoteWrite),
		dpQPAccessCase(verbs.WRRDMARead, verbs.AccessRemoteRead),
		dpQPAccessCase(verbs.WRAtomicCmpAndSwp, verbs.AccessRemoteAtomic),
		Case{
			Name:  "datapath/rc/rnr/infinite-retry-completes-once-a-receive-is-posted",
			Cite:  dpRNRCite + `; with rnr_retry 7 the requester retries until the receive WR is posted, and the SEND then completes normally`,
			Label: Spec,
			Run:   dpRNRInfinite,
		},
		Case{
			Name:  "datapath/rc/rnr/retry-count-exceeded",
			Cite:  dpRNRCite + `; with rnr_retry 0 the first RNR NAK fails the WR, with rnr_retry 2 the third; the requester's QP enters ERR and flushes the rest (IBTA 10.3.1); RNR is not an error for the responder, whose QP stays in RTS`,
			Label: Spec,
			Run:   dpRNRExceeded,
		},
		Case{
			Name:  "datapath/uc/no-receive-wr-drops-the-message",
			Cite:  `IBTA chapter 9 (UC responder): a message arriving with no receive WR posted is dropped silently (no RNR on UC, no completion, the QP stays in RTS); wire-notes: "No receive WQE ... On UC/UD: drop"`,
			Label: Spec,
			Run:   dpUCNoReceive,
		},
		Case{
			Name:  "datapath/rc/transport-retry-count-exceeded",
			Cite:  `ibv_modify_qp(3): timeout "Local ack timeout (valid only for RC QPs)" (IBTA 9.7.6.1.3: 4.096 us * 2^timeout), retry_cnt "Retry count (valid only for RC QPs)"; ibv_poll_cq(3): IBV_WC_RETRY_EXC_ERR "Transport Retry Counter Exceeded: The local transport timeout retry counter was exceeded while trying to send this message. This means that the remote side didn't send any Ack or Nack"; the QP enters ERR and the following WRs are flushed in order (IBTA 10.3.1)`,
			Label: Spec,
			Run:   dpRetryExceeded,
		},
		Case{
			Name:  "datapath/rc/modify-to-err-flushes-work-in-flight",
			Cite:  dpFlushCite + `; ibv_modify_qp(3): a QP can be moved to ERR from any state; WRs being retried (here against RNR NAKs) are flushed too`,
			Label: Spec,
			Run:   dpFlushInFlight,
		},
		Case{
			Name:  "datapath/rc/sqd/holds-new-work-until-rts",
			Cite:  `ibv_post_send(3) (seed 003): "if the QP is in SQD state, Send Requests can be posted but they are not processed"; IBTA 10.3.1 (SQD): WRs posted in SQD are started once the QP returns to RTS; nothing reaches the peer before`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeDrainHoldsPosted,
				Note: "a SEND posted in SQD is held, but SQD -> RTS does not restart the requester, so it waits for the next post_send",
			}},
			Run: dpSQDHolds,
		},
		Case{
			Name:  "datapath/rc/sqd/finishes-work-already-started",
			Cite:  `IBTA 10.3.1 (SQ Drain): in SQD the send queue completes the messages already in progress and starts no new ones; a message being retried against RNR NAKs when the QP enters SQD still completes, the next one waits for RTS`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeDrainHoldsPosted,
				Note: "a SEND waiting for an RNR retry counts as not started and is held in SQD, and SQD -> RTS does not restart it",
			}},
			Run: dpSQDFinishesStarted,
		},
		Case{
			Name:  "datapath/rc/sqd/sq-drained-event-waits-for-outstanding-work",
			Cite:  `ibv_get_async_event(3): IBV_EVENT_SQ_DRAINED "Send Queue was drained of outstanding messages in progress"; IBTA 11.6.3.1: the SQ Drained event is generated once the transition to SQD requested it and every message in progress has completed (is acknowledged), not before`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeDrainHoldsPosted,
				Note: "a SEND waiting for an RNR retry counts as not started: the drain ends (SQ_DRAINED) at once and the SEND is held",
			}},
			Run: dpSQDrainedEvent,
		},
	)
}

func dpRCTooLong(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 100))
	dpRecv(t, qb, 0x62, b.MR.SGE(100, 100))
	dpPost(t, qa, dpList(
		dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 200)),
		dpSend(2, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 10)),
	))
	rwcs := dpWaitWC(t, b.RCQ, 2, "receiver", a, b)
	dpExpectWC(t, rwcs[0], 0x61, verbs.WCLocLenErr, 0, "the receive WR the message did not fit")
	dpExpectFlushed(t, rwcs[1:], "the next receive WR", 0x62)
	wcs := dpWaitWC(t, a.SCQ, 2, "sender", a, b)
	dpExpectWC(t, wcs[0], 1, verbs.WCRemInvReqErr, 0, "the SEND that did not fit")
	dpExpectFlushed(t, wcs[1:], "the next SEND", 2)
	dpWaitState(t, qa, verbs.QPStateErr, "requester")
	dpWaitState(t, qb, verbs.QPStateErr, "responder")
}

func dpUCTooLong(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{Type: verbs.QPTypeUC})
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 100))
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 300)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCSend, "the UC sender")
	rwc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectWC(t, rwc, 0x61, verbs.WCLocLenErr, 0, "the receive WR the message did not fit")
}

// dpLocalProt checks that a WR whose local scatter/gather element is not
// valid for the operation completes with IBV_WC_LOC_PROT_ERR.
func dpLocalProt(t *T, op verbs.WROpcode, sge func(a *dpSide) verbs.SGE) {
	a, b := dpOpen(t)
	qa, _ := dpConnect1(t, a, b, dpOpts{})
	wr := dpRDMA(1, op, b.MR.Addr(), b.MR.RKey(), sge(a))
	dpPost(t, qa, dpList(wr, dpSend(2, verbs.WRSend, 0, a.MR.SGE(0, 8))))
	wcs := dpWaitWC(t, a.SCQ, 2, "requester", a, b)
	dpExpectWC(t, wcs[0], 1, verbs.WCLocProtErr, 0, op.String()+" with a bad local element")
	dpExpectFlushed(t, wcs[1:], "the WR after it", 2)
	dpWaitState(t, qa, verbs.QPStateErr, "requester")
}

// dpRemoteAccessCase checks that an RDMA or atomic operation the
// responder's memory does not allow fails with IBV_WC_REM_ACCESS_ERR.
func dpRemoteAccessCase(name string, op verbs.WROpcode, target func(t *T, b *dpSide) (uint64, uint32)) Case {
	return Case{
		Name:  "datapath/rc/remote-access/" + name,
		Cite:  dpRemAccCite + `; ibv_reg_mr(3): the remote rights are granted per region (IBV_ACCESS_REMOTE_WRITE/READ/ATOMIC), to QPs of the region's protection domain (IBTA 10.6.3.2), inside its bounds, under its R_Key`,
		Label: Spec,
		Run: func(t *T, d Device) {
			a, b := dpOpen(t)
			addr, rkey := target(t, b)
			qa, qb := dpConnect1(t, a, b, dpOpts{})
			dpRecv(t, qb, 0x61, b.MR.SGE(0, 64))
			dpPost(t, qa, dpList(dpOp(1, op, a, addr, rkey),
				dpSend(2, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 8)),
				dpSend(3, verbs.WRSend, 0, a.MR.SGE(0, 8))))
			wcs := dpWaitWC(t, a.SCQ, 3, "requester", a, b)
			dpExpectWC(t, wcs[0], 1, verbs.WCRemAccessErr, 0, op.String())
			dpExpectFlushed(t, wcs[1:], "the WRs after it", 2, 3)
			dpWaitState(t, qa, verbs.QPStateErr, "requester")
			dpWaitState(t, qb, verbs.QPStateErr, "responder")
			dpExpectFlushed(t, dpWaitWC(t, b.RCQ, 1, "responder", a, b), "the responder's receive WR", 0x61)
		},
	}
}

// dpOp builds an RDMA WRITE/READ of 200 bytes or an atomic on addr.
func dpOp(id uint64, op verbs.WROpcode, a *dpSide, addr uint64, rkey uint32) *verbs.SendWR {
	if op.IsAtomic() {
		return &verbs.SendWR{WRID: id, Opcode: op, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.MR.SGE(4096, 8)},
			Atomic: verbs.AtomicInfo{RemoteAddr: addr, RKey: rkey, CompareAdd: 1}}
	}
	return dpRDMA(id, op, addr, rkey, a.MR.SGE(4096, 200))
}

// dpQPAccessCase checks an operation the responder QP's qp_access_flags
// do not enable.
func dpQPAccessCase(op verbs.WROpcode, missing verbs.AccessFlags) Case {
	return Case{
		Name:  fmt.Sprintf("datapath/rc/qp-access-flags/%s-disabled", op),
		Cite:  `ibv_modify_qp(3): qp_access_flags enable the remote operations on the QP (IBV_ACCESS_REMOTE_WRITE/READ/ATOMIC); ibv_poll_cq(3): IBV_WC_REM_INV_REQ_ERR "The responder detected an invalid message on the channel. Possible causes include the operation is not supported by this receive queue (qp_access_flags in remote QP wasn't configured to support this operation)"; rxe (rxe_resp.c check_op_valid -> RESPST_ERR_UNSUPPORTED_OPCODE) NAKs Invalid Request; both QPs enter ERR (IBTA 9.9.3 class C)`,
		Label: Spec,
		Run: func(t *T, d Device) {
			a, b := dpOpen(t)
			all := verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
			ob := dpOpts{Access: all &^ missing}
			qa, qb := dpConnect(t, a, b, dpOpts{}, ob)
			dpPost(t, qa, dpList(dpOp(1, op, a, b.MR.Addr(), b.MR.RKey()),
				dpSend(2, verbs.WRSend, 0, a.MR.SGE(0, 8))))
			wcs := dpWaitWC(t, a.SCQ, 2, "requester", a, b)
			dpExpectWC(t, wcs[0], 1, verbs.WCRemInvReqErr, 0, op.String()+" the responder QP does not enable")
			dpExpectFlushed(t, wcs[1:], "the WR after it", 2)
			dpWaitState(t, qa, verbs.QPStateErr, "requester")
			dpWaitState(t, qb, verbs.QPStateErr, "responder")
		},
	}
}

func dpRNRInfinite(t *T, d Device) {
	a, b := dpOpen(t)
	// min_rnr_timer 12 is 0.64 ms between retries.
	qa, qb := dpConnect1(t, a, b, dpOpts{RNRRetry: 7, MinRNRTimer: 12})
	dpFill(a.Buf[:500], 9)
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 500)))
	dpNoWC(t, a.SCQ, "a SEND retried against RNR NAKs")
	Expect(t, State(t, qa), verbs.QPStateRTS, "requester state while retrying")
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 1000))
	dpExpectOK(t, dpWait1(t, a.SCQ, "requester", a, b), 1, verbs.WCSend, "the SEND once a receive WR is posted")
	rwc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, rwc, 0x61, verbs.WCRecv, "receive")
	Expect(t, rwc.ByteLen, uint32(500), "byte_len")
	dpExpectBytes(t, b.Buf[:500], a.Buf[:500], "received bytes")
}

func dpRNRExceeded(t *T, d Device) {
	a, b := dpOpen(t)
	for _, n := range []uint8{0, 2} {
		what := fmt.Sprintf("rnr_retry %d", n)
		qa, qb := dpConnect1(t, a, b, dpOpts{RNRRetry: n, SetRNRRetry: true, MinRNRTimer: 1})
		dpPost(t, qa, dpList(dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 64)),
			dpSend(2, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 64))))
		wcs := dpWaitWC(t, a.SCQ, 2, what, a, b)
		dpExpectWC(t, wcs[0], 1, verbs.WCRNRRetryExcErr, 0, what+": the SEND nobody received")
		dpExpectFlushed(t, wcs[1:], what+": the next SEND", 2)
		dpWaitState(t, qa, verbs.QPStateErr, what+": requester")
		Expect(t, State(t, qb), verbs.QPStateRTS, what+": responder state")
	}
}

func dpUCNoReceive(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{Type: verbs.QPTypeUC})
	dpFill(a.Buf[:200], 10)
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 100)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCSend, "UC SEND with no receive WR at the peer")
	dpNoWC(t, b.RCQ, "the receiver without a receive WR")
	Expect(t, State(t, qb), verbs.QPStateRTS, "receiver state")
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 256))
	dpPost(t, qa, dpSend(2, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(100, 100)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 2, verbs.WCSend, "second UC SEND")
	rwc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, rwc, 0x61, verbs.WCRecv, "the receive WR")
	dpExpectBytes(t, b.Buf[:100], a.Buf[100:200], "the receive WR holds the second message, not the dropped first")
}

func dpRetryExceeded(t *T, d Device) {
	a, b := dpOpen(t)
	// A QP addressed to a QP number that does not exist at the peer: its
	// packets are dropped there and nothing answers.
	o := dpOpts{Timeout: 4, RetryCnt: 1} // 65.5 us
	qa := dpCreateQP(t, a, o)
	dpBringUp(t, a, qa, o, b.GID, 0xfff0)
	dpPost(t, qa, dpList(
		dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 64)),
		dpRDMA(2, verbs.WRRDMAWrite, 0x1000, 0x1234, a.MR.SGE(0, 64)),
		dpSend(3, verbs.WRSend, 0, a.MR.SGE(0, 64)),
	))
	wcs := dpWaitWC(t, a.SCQ, 3, "requester", a, b)
	dpExpectWC(t, wcs[0], 1, verbs.WCRetryExcErr, 0, "the SEND nobody acknowledged")
	dpExpectFlushed(t, wcs[1:], "the WRs after it", 2, 3)
	dpWaitState(t, qa, verbs.QPStateErr, "requester")
}

func dpFlushInFlight(t *T, d Device) {
	a, b := dpOpen(t)
	qa, _ := dpConnect1(t, a, b, dpOpts{RNRRetry: 7, MinRNRTimer: 12})
	dpPost(t, qa, dpList(
		dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 64)),
		dpSend(2, verbs.WRSend, 0, a.MR.SGE(0, 64)),
		dpRDMA(3, verbs.WRRDMAWrite, b.MR.Addr(), b.MR.RKey(), a.MR.SGE(0, 64)),
	))
	dpNoWC(t, a.SCQ, "WRs behind a SEND retried against RNR NAKs")
	ExpectOK(t, qa.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState), "modify to ERR")
	dpExpectFlushed(t, dpWaitWC(t, a.SCQ, 3, "requester", a, b), "WRs in flight when the QP entered ERR", 1, 2, 3)
	if n := a.SCQ.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatalf("%d completions after the flush", n)
	}
}

// dpToSQD moves a QP from RTS to SQD, asking for the drained event when
// notify is set.
func dpToSQD(t *T, q QP, notify bool) {
	t.Helper()
	a := verbs.QPAttr{QPState: verbs.QPStateSQD, EnSQDAsyncNotify: notify}
	m := verbs.AttrState
	if notify {
		m |= verbs.AttrEnSQDAsyncNotify
	}
	ExpectOK(t, q.Modify(&a, m), "modify RTS -> SQD")
}

func dpToRTS(t *T, q QP) {
	t.Helper()
	ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.AttrState), "modify SQD -> RTS")
}

func dpSQDHolds(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	dpFill(a.Buf[:64], 11)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 64))
	dpToSQD(t, qa, false)
	dpWaitState(t, qa, verbs.QPStateSQD, "requester")
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 64)))
	dpNoWC(t, b.RCQ, "the peer while the sender is in SQD")
	if n := a.SCQ.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatalf("the sender in SQD has %d completions, want none", n)
	}
	dpToRTS(t, qa)
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCSend, "the SEND posted in SQD, after RTS")
	dpExpectOK(t, dpWait1(t, b.RCQ, "receiver", a, b), 0x61, verbs.WCRecv, "the receive")
	dpExpectBytes(t, b.Buf[:64], a.Buf[:64], "received bytes")
}

func dpSQDFinishesStarted(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{RNRRetry: 7, MinRNRTimer: 12})
	dpFill(a.Buf[:128], 12)
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 64)))
	dpNoWC(t, a.SCQ, "a SEND retried against RNR NAKs")
	dpToSQD(t, qa, false)
	dpPost(t, qa, dpSend(2, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(64, 64)))
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 64))
	dpRecv(t, qb, 0x62, b.MR.SGE(64, 64))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCSend, "the SEND in progress when the QP entered SQD")
	dpExpectOK(t, dpWait1(t, b.RCQ, "receiver", a, b), 0x61, verbs.WCRecv, "its receive")
	dpNoWC(t, b.RCQ, "the SEND posted in SQD before RTS")
	dpWaitState(t, qa, verbs.QPStateSQD, "sender")
	dpToRTS(t, qa)
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 2, verbs.WCSend, "the SEND posted in SQD, after RTS")
	dpExpectOK(t, dpWait1(t, b.RCQ, "receiver", a, b), 0x62, verbs.WCRecv, "its receive")
	dpExpectBytes(t, b.Buf[:128], a.Buf[:128], "received bytes")
}

func dpSQDrainedEvent(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{RNRRetry: 7, MinRNRTimer: 12})
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 64)))
	dpNoWC(t, a.SCQ, "a SEND retried against RNR NAKs")
	dpToSQD(t, qa, true)
	a.D.SetAsyncNonBlocking(true)
	deadline := time.Now().Add(dpQuiet)
	for time.Now().Before(deadline) {
		e, err := a.D.GetAsyncEvent(nqNB(t))
		if err == nil {
			a.D.AckAsyncEvent(e)
			t.Fatalf("async event %v while a SEND is still outstanding, want none before the drain", e.Type)
		}
		ExpectErrno(t, err, syscall.EAGAIN, "non-blocking get_async_event")
		time.Sleep(time.Millisecond)
	}
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 64))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCSend, "the SEND in progress")
	a.D.SetAsyncNonBlocking(false)
	ctx, cancel := context.WithTimeout(context.Background(), dpDeadline)
	defer cancel()
	e, err := a.D.GetAsyncEvent(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no IBV_EVENT_SQ_DRAINED after the outstanding SEND completed")
	}
	ExpectOK(t, err, "get_async_event")
	a.D.AckAsyncEvent(e)
	Expect(t, e.Type, verbs.EventSQDrained, "event type")
	if e.QP != qa {
		t.Fatalf("the event names QP %v, want the drained QP", e.QP)
	}
}
