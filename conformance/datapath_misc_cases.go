package conformance

import (
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/softhca/softhca/verbs"
)

// Data-path cases for completion events, signaling, UC and SRQs.

const dpSolicitedCite = `ibv_req_notify_cq(3) (seed 002): solicited_only limits the notification; "If solicited_only is non-zero, an event will only be generated for a new CQE that is considered "solicited." A CQE is solicited if it is a receive completion for a message with the Solicited Event header bit set, or if the status is not successful. All other successful receive completions, or any successful send completion is unsolicited"; ibv_post_send(3): IBV_SEND_SOLICITED "Set the solicited event indicator for this message"; ibv_get_cq_event(3): EAGAIN on a non-blocking channel with no event`

func init() {
	Register(
		Case{
			Name:  "datapath/cq/solicited-only-ignores-unsolicited-messages",
			Cite:  dpSolicitedCite,
			Label: Spec,
			Run:   dpSolicited,
		},
		Case{
			Name:  "datapath/cq/solicited-only-fires-on-an-error-completion",
			Cite:  dpSolicitedCite + `; here the receive WR completes with IBV_WC_LOC_LEN_ERR`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeSolicitedErr,
				Note: "an error completion does not trigger a solicited-only notification unless its message was solicited",
			}},
			Run: dpSolicitedError,
		},
		Case{
			Name:  "datapath/cq/next-completion-fires-on-any-receive",
			Cite:  `ibv_req_notify_cq(3) (seed 002): "If solicited_only is zero, a completion event will be generated for any new CQE"; the request is one-shot: a second message creates no second event until the CQ is armed again`,
			Label: Spec,
			Run:   dpNextCompletion,
		},
		Case{
			Name:  "datapath/sq_sig_all/1-every-wr-completes",
			Cite:  `ibv_create_qp(3) (seed 001): sq_sig_all "If this value is set to 1, all send requests (WR) will generate completion queue events (CQE). If this value is set to 0, only WRs that are flagged will generate CQE's"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				dpSigAll(t, true)
			},
		},
		Case{
			Name:  "datapath/sq_sig_all/0-only-signaled-wrs-complete",
			Cite:  `ibv_create_qp(3) (seed 001): with sq_sig_all 0 "only WRs that are flagged will generate CQE's" (IBV_SEND_SIGNALED, ibv_post_send(3)); successful unsignaled WRs produce no completion but are done once a later signaled WR completes`,
			Label: Spec,
			Run: func(t *T, d Device) {
				dpSigAll(t, false)
			},
		},
		Case{
			Name:  "datapath/uc/send-write-and-write-with-imm",
			Cite:  `IBTA 1.2.1 table 38: UC carries SEND and RDMA WRITE (with or without immediate data); ibv_post_send(3): the message size can be [0, 2^31] for UC, so multi-packet messages arrive whole; RDMA WRITE with immediate consumes a receive WR (IBV_WC_RECV_RDMA_WITH_IMM); a UC send completes once sent`,
			Label: Spec,
			Run:   dpUC,
		},
		Case{
			Name:  "datapath/srq/rc-send-consumes-an-srq-wr",
			Cite:  `ibv_create_srq(3)/ibv_post_srq_recv(3): QPs created with an SRQ take their receive WRs from it, in posting order; ibv_poll_cq(3): qp_num is the QP the message arrived on`,
			Label: Spec,
			Run:   dpSRQ,
		},
	)
}

// dpChannelSide makes a receive CQ with a non-blocking completion channel
// on b.
func dpChannelSide(t *T, b *dpSide) (CompChannel, CQ) {
	t.Helper()
	ch, err := b.D.CreateCompChannel()
	ExpectOK(t, err, "create_comp_channel")
	cq, err := b.D.CreateCQ(64, ch, "B events", 0)
	ExpectOK(t, err, "create_cq with a channel")
	ch.SetNonBlocking(true)
	return ch, cq
}

// dpNoEvent fails the case if the channel has an event.
func dpNoEvent(t *T, ch CompChannel, what string) {
	t.Helper()
	c, err := ch.GetEvent(nqNB(t))
	if err == nil {
		c.AckEvents(1)
		t.Fatalf("%s: a completion event, want none", what)
	}
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("%s: non-blocking get_cq_event: %v, want EAGAIN", what, err)
	}
}

// dpEvent waits for an event for cq on the channel.
func dpEvent(t *T, ch CompChannel, cq CQ, what string) {
	t.Helper()
	deadline := time.Now().Add(dpDeadline)
	for {
		c, err := ch.GetEvent(nqNB(t))
		if err == nil {
			c.AckEvents(1)
			if c != cq {
				t.Fatalf("%s: the event is for another CQ", what)
			}
			return
		}
		if !errors.Is(err, syscall.EAGAIN) {
			t.Fatalf("%s: get_cq_event: %v", what, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no completion event", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func dpSolicited(t *T, d Device) {
	a, b := dpOpen(t)
	ch, rcq := dpChannelSide(t, b)
	qa, qb := dpConnect(t, a, b, dpOpts{}, dpOpts{RCQ: rcq})
	for i := range 3 {
		dpRecv(t, qb, uint64(0x61+i), b.MR.SGE(i*64, 64))
	}
	ExpectOK(t, rcq.ReqNotify(true), "req_notify_cq(solicited_only=1)")
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 16)))
	dpExpectOK(t, dpWait1(t, rcq, "receiver", a, b), 0x61, verbs.WCRecv, "unsolicited SEND")
	dpNoEvent(t, ch, "after a SEND without IBV_SEND_SOLICITED")
	imm := dpSend(2, verbs.WRSendWithImm, verbs.SendSignaled|verbs.SendSolicited, a.MR.SGE(0, 16))
	imm.ImmData = 0x5011c17
	dpPost(t, qa, imm)
	dpEvent(t, ch, rcq, "after a SEND_WITH_IMM with IBV_SEND_SOLICITED")
	wc := dpWait1(t, rcq, "receiver", a, b)
	dpExpectOK(t, wc, 0x62, verbs.WCRecv, "solicited SEND_WITH_IMM")
	Expect(t, wc.ImmData, uint32(0x5011c17), "imm_data")
	// The arm was used up: another solicited message raises nothing.
	dpPost(t, qa, dpSend(3, verbs.WRSend, verbs.SendSignaled|verbs.SendSolicited, a.MR.SGE(0, 16)))
	dpExpectOK(t, dpWait1(t, rcq, "receiver", a, b), 0x63, verbs.WCRecv, "second solicited SEND")
	dpNoEvent(t, ch, "after a solicited SEND with the CQ no longer armed (one-shot)")
	dpWaitWC(t, a.SCQ, 3, "sender", a, b)
}

func dpSolicitedError(t *T, d Device) {
	a, b := dpOpen(t)
	ch, rcq := dpChannelSide(t, b)
	qa, qb := dpConnect(t, a, b, dpOpts{}, dpOpts{RCQ: rcq})
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 16))
	ExpectOK(t, rcq.ReqNotify(true), "req_notify_cq(solicited_only=1)")
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 64)))
	wc := dpWait1(t, rcq, "receiver", a, b)
	if wc.Status == verbs.WCSuccess {
		t.Fatalf("a 64-byte SEND into a 16-byte receive WR completed successfully: %s", dpWC(wc))
	}
	dpEvent(t, ch, rcq, "after an unsolicited SEND that completed in error")
}

func dpNextCompletion(t *T, d Device) {
	a, b := dpOpen(t)
	ch, rcq := dpChannelSide(t, b)
	qa, qb := dpConnect(t, a, b, dpOpts{}, dpOpts{RCQ: rcq})
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 64))
	dpRecv(t, qb, 0x62, b.MR.SGE(64, 64))
	ExpectOK(t, rcq.ReqNotify(false), "req_notify_cq(solicited_only=0)")
	dpPost(t, qa, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 16)))
	dpEvent(t, ch, rcq, "after an unsolicited SEND")
	dpExpectOK(t, dpWait1(t, rcq, "receiver", a, b), 0x61, verbs.WCRecv, "receive")
	dpPost(t, qa, dpSend(2, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 16)))
	dpExpectOK(t, dpWait1(t, rcq, "receiver", a, b), 0x62, verbs.WCRecv, "second receive")
	dpNoEvent(t, ch, "after a second SEND without re-arming")
}

func dpSigAll(t *T, all bool) {
	a, b := dpOpen(t)
	qa, qb := dpConnect(t, a, b, dpOpts{SigAll: all}, dpOpts{})
	for i := range 4 {
		dpRecv(t, qb, uint64(0x61+i), b.MR.SGE(i*64, 64))
	}
	dpPost(t, qa, dpList(
		dpSend(1, verbs.WRSend, 0, a.MR.SGE(0, 16)),
		dpRDMA(2, verbs.WRRDMAWrite, b.MR.Addr()+4096, b.MR.RKey(), a.MR.SGE(0, 16)),
		dpSend(3, verbs.WRSend, 0, a.MR.SGE(0, 16)),
	))
	if all {
		wcs := dpWaitWC(t, a.SCQ, 3, "sender", a, b)
		dpExpectOK(t, wcs[0], 1, verbs.WCSend, "unflagged SEND with sq_sig_all=1")
		dpExpectOK(t, wcs[1], 2, verbs.WCRDMAWrite, "RDMA WRITE (dpRDMA flags it anyway)")
		dpExpectOK(t, wcs[2], 3, verbs.WCSend, "unflagged SEND with sq_sig_all=1")
		dpWaitWC(t, b.RCQ, 2, "receiver", a, b)
		return
	}
	// Without sq_sig_all only the flagged RDMA WRITE completes.
	wcs := dpWaitWC(t, a.SCQ, 1, "sender", a, b)
	dpExpectOK(t, wcs[0], 2, verbs.WCRDMAWrite, "the one flagged WR")
	dpWaitWC(t, b.RCQ, 2, "receiver", a, b) // both unflagged SENDs were delivered
	dpPost(t, qa, dpSend(4, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 16)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 4, verbs.WCSend, "a later flagged SEND")
	if n := a.SCQ.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatalf("%d more send completions, want none for the unflagged SENDs", n)
	}
}

func dpUC(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{Type: verbs.QPTypeUC})
	dpFill(a.Buf[:5000], 30)
	for i := range b.Buf[:256] {
		b.Buf[i] = 0xee
	}
	dpFence(t, qb)
	dpRecv(t, qb, 0x61, b.MR.SGE(1024, 8192))
	dpRecv(t, qb, 0x62, b.MR.SGE(0, 256))
	wimm := dpRDMA(3, verbs.WRRDMAWriteWithImm, b.MR.Addr()+40000, b.MR.RKey(), a.MR.SGE(0, 2500))
	wimm.ImmData = 0x0c0ffee0
	dpPost(t, qa, dpList(
		dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 5000)),
		dpRDMA(2, verbs.WRRDMAWrite, b.MR.Addr()+20000, b.MR.RKey(), a.MR.SGE(0, 5000)),
		wimm,
	))
	wcs := dpWaitWC(t, a.SCQ, 3, "sender", a, b)
	dpExpectOK(t, wcs[0], 1, verbs.WCSend, "UC SEND")
	dpExpectOK(t, wcs[1], 2, verbs.WCRDMAWrite, "UC RDMA WRITE")
	dpExpectOK(t, wcs[2], 3, verbs.WCRDMAWrite, "UC RDMA WRITE_WITH_IMM")
	rwcs := dpWaitWC(t, b.RCQ, 2, "receiver", a, b)
	dpExpectOK(t, rwcs[0], 0x61, verbs.WCRecv, "UC receive")
	Expect(t, rwcs[0].ByteLen, uint32(5000), "byte_len")
	dpExpectOK(t, rwcs[1], 0x62, verbs.WCRecvRDMAWithImm, "UC RDMA WRITE_WITH_IMM receive")
	Expect(t, rwcs[1].ByteLen, uint32(2500), "byte_len")
	Expect(t, rwcs[1].ImmData, uint32(0x0c0ffee0), "imm_data")
	dpFence(t, qb)
	dpExpectBytes(t, b.Buf[1024:1024+5000], a.Buf[:5000], "SEND payload")
	dpExpectBytes(t, b.Buf[20000:25000], a.Buf[:5000], "RDMA WRITE payload")
	dpExpectBytes(t, b.Buf[40000:42500], a.Buf[:2500], "RDMA WRITE_WITH_IMM payload")
	dpExpectUntouched(t, b.Buf[:256], 0xee, "the receive WR consumed by the WRITE_WITH_IMM")
}

func dpSRQ(t *T, d Device) {
	a, b := dpOpen(t)
	srq, err := b.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 16, MaxSGE: 2}, nil)
	ExpectOK(t, err, "create_srq")
	t.Cleanup(func() { _ = srq.Destroy(context.Background()) })
	qa1, qb1 := dpConnect(t, a, b, dpOpts{}, dpOpts{SRQ: srq})
	qa2, qb2 := dpConnect(t, a, b, dpOpts{}, dpOpts{SRQ: srq})
	for i := range 3 {
		bad, err := srq.PostRecv(&verbs.RecvWR{WRID: uint64(0x61 + i), SGList: []verbs.SGE{b.MR.SGE(i*256, 256)}})
		if err != nil || bad != nil {
			t.Fatalf("post_srq_recv: %v", err)
		}
	}
	dpFill(a.Buf[:300], 31)
	dpPost(t, qa1, dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 100)))
	w1 := dpWait1(t, b.RCQ, "receiver", a, b)
	dpPost(t, qa2, dpSend(2, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(100, 100)))
	w2 := dpWait1(t, b.RCQ, "receiver", a, b)
	dpPost(t, qa1, dpSend(3, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(200, 100)))
	w3 := dpWait1(t, b.RCQ, "receiver", a, b)
	dpWaitWC(t, a.SCQ, 3, "sender", a, b)
	for i, c := range []struct {
		wc verbs.WC
		qp QP
	}{{w1, qb1}, {w2, qb2}, {w3, qb1}} {
		dpExpectOK(t, c.wc, uint64(0x61+i), verbs.WCRecv, "SRQ receive in posting order")
		Expect(t, c.wc.QPNum, c.qp.Num(), "qp_num of an SRQ receive")
		dpExpectBytes(t, b.Buf[i*256:i*256+100], a.Buf[i*100:i*100+100], "payload in the SRQ WR")
	}
}
