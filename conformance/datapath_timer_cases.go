package conformance

import (
	"time"

	"github.com/softhca/softhca/verbs"
)

// Data-path cases for the RC timers and responder resources, and for
// reusing a QP after an error.

func init() {
	Register(
		Case{
			Name:  "datapath/rc/rnr/requester-waits-the-rnr-timer",
			Cite:  `IBTA 9.7.5.2.8: after an RNR NAK the requester waits at least the time the NAK's timer field names (the responder's min_rnr_timer, ibv_modify_qp(3); IBTA table 45: code 20 is 10.24 ms) before it retries; with rnr_retry 2 the WR cannot fail before two such waits`,
			Label: Spec,
			Run:   dpRNRTimer,
		},
		Case{
			Name:  "datapath/rc/transport-timer-is-honoured",
			Cite:  `ibv_modify_qp(3): timeout "The minimum timeout that a QP waits for ACK/NACK from remote QP before retransmitting the packet"; IBTA 9.7.6.1.3: 4.096 us * 2^timeout (timeout 12: 16.8 ms); with retry_cnt 1 IBV_WC_RETRY_EXC_ERR cannot come before two timeouts`,
			Label: Spec,
			Run:   dpTransportTimer,
		},
		Case{
			Name:  "datapath/rc/timeout-0-waits-forever",
			Cite:  `ibv_modify_qp(3): timeout "The value zero is special value which means wait an infinite time for the ACK/NACK (useful for debugging)"; IBTA 9.7.6.1.3: a timeout of 0 disables the transport timer`,
			Label: Spec,
			Run:   dpTimeoutZero,
		},
		Case{
			Name:  "datapath/rc/max_dest_rd_atomic-0-rejects-read-and-atomic",
			Cite:  `ibv_modify_qp(3): max_dest_rd_atomic "Number of responder resources for handling incoming RDMA reads & atomic operations"; with 0 the responder has none, and answers NAK Invalid Request (rxe_resp.c check_resource: RESPST_ERR_TOO_MANY_RDMA_ATM_REQ); ibv_poll_cq(3): IBV_WC_REM_INV_REQ_ERR "Possible causes include ... insufficient buffering to receive a new RDMA or Atomic Operation request"`,
			Label: Spec,
			Run:   dpNoDestRdAtomic,
		},
		Case{
			Name:  "datapath/rc/reset-and-reconnect-after-an-error",
			Cite:  `ibv_modify_qp(3)/IBTA 10.3.1: any state may go to RESET, which empties the queues and returns the QP to its initial attributes; the QP can then be brought up again (INIT, RTR, RTS) with new PSNs and carries traffic as a new connection`,
			Label: Spec,
			Run:   dpReconnect,
		},
	)
}

func dpRNRTimer(t *T, d Device) {
	a, b := dpOpen(t)
	qa, _ := dpConnect1(t, a, b, dpOpts{RNRRetry: 2, SetRNRRetry: true, MinRNRTimer: 20})
	start := time.Now()
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 16)))
	wc := dpWait1(t, a.SCQ, "requester", a, b)
	elapsed := time.Since(start)
	dpExpectWC(t, wc, 1, verbs.WCRNRRetryExcErr, 0, "SEND with rnr_retry 2 and no receive WR")
	if min := 2 * 10240 * time.Microsecond; elapsed < min {
		t.Fatalf("IBV_WC_RNR_RETRY_EXC_ERR after %v, want at least two RNR timers of 10.24 ms (%v)", elapsed, min)
	}
}

func dpTransportTimer(t *T, d Device) {
	a, b := dpOpen(t)
	o := dpOpts{Timeout: 12, RetryCnt: 1}
	qa := dpCreateQP(t, a, o)
	dpBringUp(t, a, qa, o, b.GID, 0xfff0) // nobody answers
	start := time.Now()
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 16)))
	wc := dpWait1(t, a.SCQ, "requester", a, b)
	elapsed := time.Since(start)
	dpExpectWC(t, wc, 1, verbs.WCRetryExcErr, 0, "SEND nobody acknowledges")
	if min := 2 * 4096 * (1 << 12) * time.Nanosecond; elapsed < min {
		t.Fatalf("IBV_WC_RETRY_EXC_ERR after %v, want at least two timeouts of 16.8 ms (%v)", elapsed, min)
	}
}

func dpTimeoutZero(t *T, d Device) {
	a, b := dpOpen(t)
	o := dpOpts{Timeout: 0, SetTimeout: true, RetryCnt: 0, SetRetryCnt: true}
	qa := dpCreateQP(t, a, o)
	dpBringUp(t, a, qa, o, b.GID, 0xfff0) // nobody answers
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 16)))
	dpNoWC(t, a.SCQ, "a SEND nobody acknowledges, with timeout 0 and retry_cnt 0")
	Expect(t, State(t, qa), verbs.QPStateRTS, "requester state")
	ExpectOK(t, qa.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState), "modify to ERR")
	dpExpectFlushed(t, dpWaitWC(t, a.SCQ, 1, "requester", a, b), "the SEND still waiting", 1)
}

func dpNoDestRdAtomic(t *T, d Device) {
	a, b := dpOpen(t)
	for _, op := range []verbs.WROpcode{verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd} {
		qa, qb := dpConnect(t, a, b, dpOpts{}, dpOpts{NoDestRdAtomic: true})
		dpPost(t, qa, dpOp(1, op, a, b.MR.Addr(), b.MR.RKey()))
		wc := dpWait1(t, a.SCQ, "requester", a, b)
		dpExpectWC(t, wc, 1, verbs.WCRemInvReqErr, 0, op.String()+" to a responder with max_dest_rd_atomic 0")
		dpWaitState(t, qa, verbs.QPStateErr, op.String()+": requester")
		dpWaitState(t, qb, verbs.QPStateErr, op.String()+": responder")
	}
}

func dpReconnect(t *T, d Device) {
	a, b := dpOpen(t)
	o := dpOpts{RNRRetry: 0, SetRNRRetry: true}
	qa, qb := dpConnect1(t, a, b, o)
	// An RNR error puts the requester in ERR; the responder is moved there
	// too, as an application tearing the connection down would.
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 16)))
	dpExpectWC(t, dpWait1(t, a.SCQ, "requester", a, b), 1, verbs.WCRNRRetryExcErr, 0, "SEND without a receive WR")
	dpWaitState(t, qa, verbs.QPStateErr, "requester")
	ExpectOK(t, qb.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState), "responder to ERR")
	for _, q := range []QP{qa, qb} {
		ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.AttrState), "modify ERR -> RESET")
		Expect(t, State(t, q), verbs.QPStateReset, "state after the reset")
	}
	o2 := dpOpts{PSN: 0x5000}
	dpBringUp(t, a, qa, o2, b.GID, qb.Num())
	dpBringUp(t, b, qb, o2, a.GID, qa.Num())
	dpFill(a.Buf[:3000], 47)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 4096))
	dpPost(t, qa, dpList(
		dpSend(2, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 3000)),
		dpRDMA(3, verbs.WRRDMARead, b.MR.Addr(), b.MR.RKey(), a.MR.SGE(8192, 3000)),
	))
	wcs := dpWaitWC(t, a.SCQ, 2, "requester after reconnecting", a, b)
	dpExpectOK(t, wcs[0], 2, verbs.WCSend, "SEND after reconnecting")
	dpExpectOK(t, wcs[1], 3, verbs.WCRDMARead, "RDMA READ after reconnecting")
	dpExpectOK(t, dpWait1(t, b.RCQ, "responder after reconnecting", a, b), 0x61, verbs.WCRecv, "receive after reconnecting")
	dpExpectBytes(t, b.Buf[:3000], a.Buf[:3000], "SEND payload")
	dpExpectBytes(t, a.Buf[8192:8192+3000], a.Buf[:3000], "RDMA READ payload")
}
