package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// The completer alone (IBTA 9.7.5.x and 9.7.6.x, the requester's side of
// acknowledgements; rxe_comp.c): what ACKs, NAKs, READ responses, ATOMIC
// acknowledges and timers do to the send queue.

// sendAll posts the WQEs and sends them all.
func (h *qpt) sendAll(ws ...SendWQE) []sent {
	h.t.Helper()
	for _, w := range ws {
		h.post(w)
	}
	fx, pkts := h.run()
	require.False(h.t, fx.More)
	require.Equal(h.t, FailNone, fx.Fail)
	return pkts
}

// TestCompleterAcks: an ACK completes every WQE whose last PSN it covers,
// in order (IBTA 9.7.5.1.1 coalesced acknowledgements; 10.8.3.3
// completions in order); an unsignaled WQE completes without a work
// completion (ibv_post_send(3), IBV_SEND_SIGNALED); an ACK within a
// message completes nothing but opens the window. The transport timer
// runs while PSNs are outstanding (IBTA 9.7.6.1.3) and stops when all are
// acknowledged.
func TestCompleterAcks(t *testing.T) {
	h := newRC(t)
	unsig := sendWR(2, 0, 5)
	unsig.Signaled = false
	w := writeWR(4, 10)
	h.sendAll(sendWR(1, 0, 3*testMTU), unsig, sendWR(3, 0, 7), w)
	// PSNs: 1: 1000-1002, 2: 1003, 3: 1004, 4: 1005.
	require.Equal(t, t0.Add(timeoutDuration(14)), h.q.Deadline())

	h.advance(time.Millisecond)
	fx, pkts := h.receive(ack(testSQPSN+1, 0), nil)
	require.Empty(t, pkts)
	require.Empty(t, h.scq.wcs, "an ACK within a message completes nothing")
	require.True(t, fx.Run)
	require.Equal(t, h.now.Add(timeoutDuration(14)), h.q.Deadline(), "progress restarts the timer")

	fx, _ = h.receive(ack(testSQPSN+4, 3), nil)
	require.True(t, fx.Run)
	got := h.scq.take()
	require.Equal(t, []string{"1:success", "3:success"}, wcs(got), "coalesced; the unsignaled one silently")
	require.Equal(t, verbs.WC{WRID: 1, Opcode: verbs.WCSend, ByteLen: 3 * testMTU, QPNum: testQPN}, got[0])
	require.Equal(t, 1, h.sq.Len())
	require.False(t, h.q.Deadline().IsZero())

	_, _ = h.receive(ack(testSQPSN+5, 4), nil)
	got = h.scq.take()
	require.Equal(t, verbs.WC{WRID: 4, Opcode: verbs.WCRDMAWrite, ByteLen: 10, QPNum: testQPN}, got[0])
	require.Zero(t, h.sq.Len())
	require.True(t, h.q.Deadline().IsZero(), "nothing outstanding: no timer")
	h.requireDrops(nil)
}

// TestCompleterStaleAndDuplicateAcks: an ACK for a PSN not sent, or older
// than the last acknowledged, is stale (the requester ignores
// acknowledgements outside the outstanding range: rxe_comp.c check_psn
// returns COMPST_DONE); a repeat of the last one is a duplicate (rxe's
// check_ack drops it too). Each is counted under its own name.
func TestCompleterStaleAndDuplicateAcks(t *testing.T) {
	h := newRC(t)
	h.sendAll(sendWR(1, 0, 1), sendWR(2, 0, 1), sendWR(3, 0, 1))
	_, _ = h.receive(ack(testSQPSN+1, 2), nil)
	require.Len(t, h.scq.take(), 2)

	for _, psn := range []uint32{testSQPSN + 1, testSQPSN + 1} {
		fx, _ := h.receive(ack(psn, 2), nil)
		require.False(t, fx.Run)
	}
	h.requireDrops(map[DropReason]uint64{DropDuplicateAck: 2})

	for _, psn := range []uint32{testSQPSN - 1, testSQPSN, testSQPSN + 3, testSQPSN + 100, testSQPSN + 1<<23} {
		fx, _ := h.receive(ack(psn, 2), nil)
		require.Equal(t, Effects{}, fx, "ACK of %d", psn)
	}
	// A NAK for an acknowledged PSN is stale too.
	_, _ = h.receive(nak(testSQPSN, wire.NAKRemoteAccessError), nil)
	h.requireDrops(map[DropReason]uint64{DropDuplicateAck: 2, DropStaleResponse: 6})
	require.Empty(t, h.scq.wcs)
	require.Equal(t, 1, h.sq.Len())
}

// TestCompleterSequenceNAK: a PSN sequence error NAK acknowledges the
// PSNs before it and makes the requester resend from the NAKed PSN,
// go-back-N (IBTA 9.7.5.2.1, 9.7.6.1; rxe_comp.c COMPST_ERROR_RETRY); the resent
// packets are the originals. A second NAK for the same PSN is stale: the
// responder NAKs a gap once (IBTA 9.7.5.2.2; rxe's sent_psn_nak).
func TestCompleterSequenceNAK(t *testing.T) {
	h := newRC(t)
	orig := h.sendAll(sendWR(1, 0, 1), sendWR(2, 0, 3*testMTU), sendWR(3, 0, 9))
	// PSNs: 1: 1000, 2: 1001-1003, 3: 1004.
	fx, pkts := h.receive(nak(testSQPSN+2, wire.NAKPSNSequenceError), nil)
	require.Empty(t, pkts)
	require.True(t, fx.Run)
	require.Equal(t, []string{"1:success"}, wcs(h.scq.take()), "the NAK acknowledges what precedes it")
	require.Equal(t, CompleterRetrying, h.q.Completer())
	s := h.stats.Snapshot()
	require.Equal(t, uint64(1), s.SeqNAKsReceived)
	require.Equal(t, uint64(1), s.Retransmits)

	_, pkts = h.run()
	require.Equal(t, seq(testSQPSN+2, 3), psns(pkts))
	for i := range pkts {
		require.Equal(t, orig[i+2].raw, pkts[i].raw, "resent packet %d", i)
	}

	fx, _ = h.receive(nak(testSQPSN+2, wire.NAKPSNSequenceError), nil)
	require.False(t, fx.Run)
	h.requireDrops(map[DropReason]uint64{DropStaleResponse: 1})
	_, pkts = h.run()
	require.Empty(t, pkts)

	_, _ = h.receive(ack(testSQPSN+4, 3), nil)
	require.Equal(t, []string{"2:success", "3:success"}, wcs(h.scq.take()))
	require.Equal(t, CompleterReady, h.q.Completer())
}

// TestCompleterRetryingIgnoresNAKs: once a sequence NAK started a retry,
// later sequence NAKs start none until an acknowledgement makes progress
// (rxe_comp.c: "if we've started a retry, don't start another retry
// sequence, unless this is a timeout"), so one loss under reordering costs
// one retry. Here a READ whose responses are missing keeps the QP from
// progressing.
func TestCompleterRetryingIgnoresNAKs(t *testing.T) {
	h := newRC(t)
	h.sendAll(readWR(1, 0, 2*testMTU), sendWR(2, 0, 3*testMTU))
	// PSNs: READ 1000-1001, SEND 1002-1004.
	fx, _ := h.receive(nak(testSQPSN+3, wire.NAKPSNSequenceError), nil)
	require.True(t, fx.Run)
	require.Equal(t, CompleterRetrying, h.q.Completer())
	retries := h.q.req.retries
	retransmits := h.stats.Snapshot().Retransmits
	_, pkts := h.run()
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadRequest, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast}, ops(pkts),
		"back to the unanswered READ")

	fx, _ = h.receive(nak(testSQPSN+4, wire.NAKPSNSequenceError), nil)
	require.False(t, fx.Run)
	require.Equal(t, retries, h.q.req.retries, "no retry spent")
	require.Equal(t, retransmits, h.stats.Snapshot().Retransmits)
	_, pkts = h.run()
	require.Empty(t, pkts)

	// The READ's responses are progress: the retry is over.
	_, _ = h.receive(readResp(wire.RCRDMAReadResponseFirst, testSQPSN), pattern(0, testMTU))
	require.Equal(t, CompleterReady, h.q.Completer())
}

// TestCompleterRNRNAK: an RNR NAK acknowledges the PSNs before it; the
// requester sends nothing until the RNR timer the NAK names (IBTA table
// 45) has expired, then resends from the NAKed PSN (IBTA 9.7.5.2.8,
// rxe_comp.c COMPST_RNR_RETRY); rnr_retry such waits are allowed, the next completes the WQE
// with IBV_WC_RNR_RETRY_EXC_ERR; rnr_retry 7 means forever
// (ibv_modify_qp(3)).
func TestCompleterRNRNAK(t *testing.T) {
	const timerCode = 14 // 1.28 ms
	wait := time.Duration(wire.RNRTimerMicros(timerCode)) * time.Microsecond
	require.Equal(t, 1280*time.Microsecond, wait)

	h := newRC(t)
	h.sendAll(sendWR(1, 0, 1), sendWR(2, 0, 2), sendWR(3, 0, 3))
	h.advance(time.Millisecond)
	fx, _ := h.receive(rnrNak(testSQPSN+1, timerCode), nil)
	require.Equal(t, []string{"1:success"}, wcs(h.scq.take()))
	require.Equal(t, RequesterRNRWait, h.q.Requester())
	deadline := h.now.Add(wait)
	require.Equal(t, deadline, h.q.Deadline(), "the Deadline is the RNR timer")
	require.Equal(t, FailNone, fx.Fail)
	_, pkts := h.run()
	require.Empty(t, pkts, "nothing is sent during the RNR wait")

	// A duplicate of the NAK being waited out is stale.
	_, _ = h.receive(rnrNak(testSQPSN+1, timerCode), nil)
	h.requireDrops(map[DropReason]uint64{DropStaleResponse: 1})

	h.now = deadline.Add(-time.Nanosecond)
	fx, pkts = h.timer()
	require.Equal(t, Effects{}, fx)
	require.Empty(t, pkts)
	require.Equal(t, deadline, h.q.Deadline())

	h.now = deadline
	fx, _ = h.timer()
	require.True(t, fx.Run)
	_, pkts = h.run()
	require.Equal(t, seq(testSQPSN+1, 2), psns(pkts), "resent from the NAKed PSN")
	require.Equal(t, RequesterSending, h.q.Requester())
	require.Equal(t, h.now.Add(timeoutDuration(14)), h.q.Deadline(), "the transport timer again")
	require.Equal(t, uint64(1), h.stats.Snapshot().RNRNAKsReceived)

	t.Run("exhausted", func(t *testing.T) {
		p := defaultParams(verbs.QPTypeRC)
		p.RNRRetry = 2
		h := newQPT(t, p)
		h.sendAll(sendWR(1, 0, 1))
		for range 2 {
			fx, _ := h.receive(rnrNak(testSQPSN, 1), nil)
			require.Equal(t, FailNone, fx.Fail)
			h.now = h.q.Deadline()
			fx, _ = h.timer()
			require.True(t, fx.Run)
			_, pkts := h.run()
			require.Len(t, pkts, 1)
		}
		fx, _ := h.receive(rnrNak(testSQPSN, 1), nil)
		require.Equal(t, FailSend, fx.Fail)
		require.Equal(t, verbs.WCRNRRetryExcErr, fx.Status)
		h.applyFail(fx)
		require.Equal(t, []string{"1:RNR retry counter exceeded"}, wcs(h.scq.take()))
	})

	t.Run("rnr_retry 7 is forever", func(t *testing.T) {
		p := defaultParams(verbs.QPTypeRC)
		p.RNRRetry = 7
		h := newQPT(t, p)
		h.sendAll(sendWR(1, 0, 1))
		for range 50 {
			fx, _ := h.receive(rnrNak(testSQPSN, 1), nil)
			require.Equal(t, FailNone, fx.Fail)
			h.now = h.q.Deadline()
			_, _ = h.timer()
			_, pkts := h.run()
			require.Len(t, pkts, 1)
		}
	})
}

// TestCompleterTransportTimer: the transport timer (IBTA 9.7.6.1.3,
// 4.096 us * 2^timeout; rxe's retrans_timer) runs while PSNs are unacknowledged; its
// expiry resends from the oldest unacknowledged PSN, at most retry_cnt
// times in a row, after which the head WQE completes with
// IBV_WC_RETRY_EXC_ERR (rxe_comp.c COMPST_ERROR_RETRY); progress restores the budget. Timer
// before the deadline does nothing; timeout 0 means no timer
// (ibv_modify_qp(3)).
func TestCompleterTransportTimer(t *testing.T) {
	h := newRC(t)
	orig := h.sendAll(sendWR(1, 0, 1), sendWR(2, 0, 2*testMTU))
	d := timeoutDuration(14)
	require.Equal(t, 67108864*time.Nanosecond, d)
	deadline := t0.Add(d)
	require.Equal(t, deadline, h.q.Deadline())

	h.now = deadline.Add(-time.Nanosecond)
	fx, pkts := h.timer()
	require.Equal(t, Effects{}, fx)
	require.Empty(t, pkts)
	require.Equal(t, deadline, h.q.Deadline())

	h.now = deadline
	fx, _ = h.timer()
	require.True(t, fx.Run)
	require.Equal(t, uint64(1), h.stats.Snapshot().RetryTimeouts)
	_, pkts = h.run()
	require.Len(t, pkts, 3)
	for i := range pkts {
		require.Equal(t, orig[i].raw, pkts[i].raw)
	}
	require.Equal(t, h.now.Add(d), h.q.Deadline())

	// Progress re-arms it from now; the last ACK stops it.
	h.advance(time.Millisecond)
	_, _ = h.receive(ack(testSQPSN, 1), nil)
	require.Equal(t, h.now.Add(d), h.q.Deadline())
	_, _ = h.receive(ack(testSQPSN+2, 2), nil)
	require.True(t, h.q.Deadline().IsZero())
	require.Equal(t, []string{"1:success", "2:success"}, wcs(h.scq.take()))

	tests := []struct {
		name     string
		retryCnt uint8
		forever  bool
		retries  int // timeouts that resend before the one that fails; -1: none fails
	}{
		{"retry_cnt 0", 0, false, 0},
		{"retry_cnt 3", 3, false, 3},
		{"retry_cnt 7 (IBTA: seven retries)", 7, false, 7},
		{"retry_cnt 7 with RetryForever (rxe)", 7, true, -1},
		{"retry_cnt 6 with RetryForever", 6, true, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := defaultParams(verbs.QPTypeRC)
			p.RetryCnt, p.RetryForever = tc.retryCnt, tc.forever
			h := newQPT(t, p)
			h.sendAll(sendWR(1, 0, 1), sendWR(2, 0, 1))
			n := tc.retries
			if n < 0 {
				n = 40
			}
			for i := range n {
				h.now = h.q.Deadline()
				require.False(t, h.now.IsZero())
				fx, _ := h.timer()
				require.Equal(t, FailNone, fx.Fail, "timeout %d", i+1)
				_, pkts := h.run()
				require.Equal(t, seq(testSQPSN, 2), psns(pkts))
			}
			if tc.retries < 0 {
				return
			}
			h.now = h.q.Deadline()
			fx, _ := h.timer()
			require.Equal(t, FailSend, fx.Fail)
			require.Equal(t, verbs.WCRetryExcErr, fx.Status)
			h.applyFail(fx)
			require.Equal(t, []string{"1:transport retry counter exceeded"}, wcs(h.scq.take()))
		})
	}

	t.Run("progress restores retry_cnt", func(t *testing.T) {
		p := defaultParams(verbs.QPTypeRC)
		p.RetryCnt = 1
		h := newQPT(t, p)
		h.sendAll(sendWR(1, 0, 1), sendWR(2, 0, 1))
		h.now = h.q.Deadline()
		_, _ = h.timer()
		_, _ = h.run()
		_, _ = h.receive(ack(testSQPSN, 1), nil)
		h.now = h.q.Deadline()
		fx, _ := h.timer()
		require.Equal(t, FailNone, fx.Fail)
		_, pkts := h.run()
		require.Equal(t, []uint32{testSQPSN + 1}, psns(pkts))
	})

	t.Run("timeout 0: no timer", func(t *testing.T) {
		p := defaultParams(verbs.QPTypeRC)
		p.Timeout = 0
		h := newQPT(t, p)
		h.sendAll(sendWR(1, 0, 1))
		require.True(t, h.q.Deadline().IsZero())
		h.advance(time.Hour)
		fx, pkts := h.timer()
		require.Equal(t, Effects{}, fx)
		require.Empty(t, pkts)
	})
}

// TestCompleterReadResponses: READ responses are placed by their PSN,
// each naming its offset (IBTA 9.7.5.1.x: the response PSN identifies the
// MTU-sized segment; rxe_comp.c do_read), so they may arrive out of order; duplicates are
// ignored and counted; the READ completes when all arrived, with its
// length (IBTA 10.8.3), and its first response acknowledges what
// precedes it (IBTA 9.7.5.1.2).
func TestCompleterReadResponses(t *testing.T) {
	h := newRC(t)
	const n = 1000 // 4 responses: 256, 256, 256, 232
	h.sendAll(sendWR(1, 0, 1), readWR(2, 10, n))
	// PSNs: SEND 1000, READ 1001-1004.
	data := pattern(9, n)
	resp := func(i int) (wire.Headers, []byte) {
		op := [...]wire.OpCode{wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle,
			wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast}[i]
		end := min((i+1)*testMTU, n)
		return readResp(op, testSQPSN+1+uint32(i)), data[i*testMTU : end]
	}
	for _, i := range []int{2, 1} {
		fx, pkts := h.receive(resp(i))
		require.Empty(t, pkts)
		require.False(t, fx.Run, "no re-request before the last response or the reorder tolerance")
	}
	require.Empty(t, h.scq.wcs)
	_, _ = h.receive(resp(0))
	require.Equal(t, []string{"1:success"}, wcs(h.scq.take()), "the first response acknowledges the SEND")
	_, _ = h.receive(resp(1)) // a duplicate
	h.requireDrops(map[DropReason]uint64{DropStaleResponse: 1})
	_, _ = h.receive(resp(3))
	got := h.scq.take()
	require.Equal(t, []verbs.WC{{WRID: 2, Opcode: verbs.WCRDMARead, ByteLen: n, QPNum: testQPN}}, got)
	require.True(t, bytes.Equal(data, h.dst[10:10+n]))
	require.Zero(t, h.dst[10+n])
	require.True(t, h.q.Deadline().IsZero())

	_, _ = h.receive(resp(3)) // nothing outstanding any more
	h.requireDrops(map[DropReason]uint64{DropStaleResponse: 2})
}

// TestCompleterReadBadLength: a READ response whose payload is not what
// its position leaves (one MTU, or the rest) is a bad response: the READ
// completes with IBV_WC_BAD_RESP_ERR (ibv_poll_cq(3); rxe_comp.c
// check_op_seq/do_read: COMPST_ERROR).
func TestCompleterReadBadLength(t *testing.T) {
	tests := []struct {
		name string
		op   wire.OpCode
		psn  uint32
		n    int
	}{
		{"short First", wire.RCRDMAReadResponseFirst, 0, testMTU - 4},
		{"short Middle", wire.RCRDMAReadResponseMiddle, 1, 100},
		{"long Last", wire.RCRDMAReadResponseLast, 2, 236},
		{"short Last", wire.RCRDMAReadResponseLast, 2, 228},
		{"empty Middle", wire.RCRDMAReadResponseMiddle, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newRC(t)
			h.sendAll(readWR(1, 0, 2*testMTU+232))
			fx, _ := h.receive(readResp(tc.op, testSQPSN+tc.psn), pattern(1, tc.n))
			require.Equal(t, FailSend, fx.Fail)
			require.Equal(t, verbs.WCBadRespErr, fx.Status)
			h.applyFail(fx)
			require.Equal(t, []string{"1:bad response error"}, wcs(h.scq.take()))
		})
	}
}

// TestCompleterReadImpliedNAK: a READ whose responses stop short is asked
// again for only what is missing: a new READ request whose PSN is the
// first missing response's, whose RETH address and length start there
// (IBTA 9.7.5.1.2 implied NAK, 9.7.6.1.4; rxe_req.c req_retry restarts a
// READ at the first missing response and adjusts its RETH).
func TestCompleterReadImpliedNAK(t *testing.T) {
	const n = 1000
	data := pattern(3, n)
	part := func(i int) []byte { return data[i*testMTU : min((i+1)*testMTU, n)] }

	t.Run("the last response arrived without one before it", func(t *testing.T) {
		h := newRC(t)
		h.sendAll(readWR(1, 0, n), sendWR(2, 0, 4))
		_, _ = h.receive(readResp(wire.RCRDMAReadResponseFirst, testSQPSN), part(0))
		_, _ = h.receive(readResp(wire.RCRDMAReadResponseMiddle, testSQPSN+1), part(1))
		fx, _ := h.receive(readResp(wire.RCRDMAReadResponseLast, testSQPSN+3), part(3))
		require.True(t, fx.Run)
		_, pkts := h.run()
		require.Equal(t, []wire.OpCode{wire.RCRDMAReadRequest, wire.RCSendOnly}, ops(pkts))
		require.Equal(t, []uint32{testSQPSN + 2, testSQPSN + 4}, psns(pkts))
		require.Equal(t, wire.RETHFields{VirtualAddress: peerVA + 2*testMTU, RKey: rkeyPeer, DMALength: n - 2*testMTU},
			pkts[0].p.RETH.Fields())
		// The re-requested response completes the READ (the last
		// one arrived already).
		_, _ = h.receive(readResp(wire.RCRDMAReadResponseMiddle, testSQPSN+2), part(2))
		require.Equal(t, []string{"1:success"}, wcs(h.scq.take()))
		require.True(t, bytes.Equal(data, h.dst[:n]))
	})

	t.Run("reorder tolerance exceeded", func(t *testing.T) {
		h := newRC(t).fullWindow()
		const long = 40 * testMTU
		h.sendAll(readWR(1, 0, long))
		for i := 1; i < readReorderTolerance; i++ {
			fx, _ := h.receive(readResp(wire.RCRDMAReadResponseMiddle, testSQPSN+uint32(i)), pattern(0, testMTU))
			require.False(t, fx.Run)
		}
		fx, _ := h.receive(readResp(wire.RCRDMAReadResponseMiddle, testSQPSN+readReorderTolerance), pattern(0, testMTU))
		require.True(t, fx.Run)
		_, pkts := h.run()
		require.Len(t, pkts, 1)
		require.Equal(t, uint32(testSQPSN), pkts[0].psn())
		require.Equal(t, wire.RETHFields{VirtualAddress: peerVA, RKey: rkeyPeer, DMALength: long}, pkts[0].p.RETH.Fields())
	})

	t.Run("a later PSN acknowledged", func(t *testing.T) {
		h := newRC(t)
		h.sendAll(readWR(1, 0, n), sendWR(2, 0, 4))
		_, _ = h.receive(readResp(wire.RCRDMAReadResponseFirst, testSQPSN), part(0))
		// The SEND's ACK: the READ's missing responses were lost.
		fx, _ := h.receive(ack(testSQPSN+4, 2), nil)
		require.True(t, fx.Run)
		require.Empty(t, h.scq.wcs, "the READ is not complete, so neither is the SEND")
		_, pkts := h.run()
		require.Equal(t, []wire.OpCode{wire.RCRDMAReadRequest, wire.RCSendOnly}, ops(pkts))
		require.Equal(t, []uint32{testSQPSN + 1, testSQPSN + 4}, psns(pkts))
		require.Equal(t, wire.RETHFields{VirtualAddress: peerVA + testMTU, RKey: rkeyPeer, DMALength: n - testMTU},
			pkts[0].p.RETH.Fields())
	})
}

// TestCompleterAtomicAck: an ATOMIC acknowledge writes the original
// remote value into the WQE's local buffer, in host order (IBTA 9.4.5,
// ibv_post_send(3); rxe_comp.c do_atomic), and completes the ATOMIC; a second one is stale.
func TestCompleterAtomicAck(t *testing.T) {
	h := newRC(t)
	h.sendAll(atomicWR(1, verbs.WRAtomicFetchAndAdd, 16, 5, 0), atomicWR(2, verbs.WRAtomicCmpAndSwp, 24, 1, 2))
	_, _ = h.receive(atomicAck(testSQPSN, 0x1122334455667788), nil)
	_, _ = h.receive(atomicAck(testSQPSN+1, 42), nil)
	got := h.scq.take()
	require.Equal(t, []verbs.WC{
		{WRID: 1, Opcode: verbs.WCFetchAdd, ByteLen: 8, QPNum: testQPN},
		{WRID: 2, Opcode: verbs.WCCompSwap, ByteLen: 8, QPNum: testQPN},
	}, got)
	require.Equal(t, uint64(0x1122334455667788), u64(h.dst[16:]))
	require.Equal(t, uint64(42), u64(h.dst[24:]))
	_, _ = h.receive(atomicAck(testSQPSN+1, 7), nil)
	require.Equal(t, uint64(42), u64(h.dst[24:]))
	h.requireDrops(map[DropReason]uint64{DropStaleResponse: 1})
}

// TestCompleterErrorNAKs: a NAK other than a sequence error completes the
// WQE it names with the status ibv_poll_cq(3) gives it (IBTA 9.7.5.2.x,
// table 44; rxe_comp.c check_ack): invalid request -> REM_INV_REQ_ERR,
// remote access -> REM_ACCESS_ERR, remote operational (and reserved
// codes) -> REM_OP_ERR. Everything before it completes successfully.
func TestCompleterErrorNAKs(t *testing.T) {
	tests := []struct {
		code wire.NAKCode
		want verbs.WCStatus
	}{
		{wire.NAKInvalidRequest, verbs.WCRemInvReqErr},
		{wire.NAKRemoteAccessError, verbs.WCRemAccessErr},
		{wire.NAKRemoteOperational, verbs.WCRemOpErr},
		{wire.NAKInvalidRDRequest, verbs.WCRemOpErr},
		{0x1f, verbs.WCRemOpErr},
	}
	for _, tc := range tests {
		t.Run(wire.NAKSyndrome(tc.code).String(), func(t *testing.T) {
			h := newRC(t)
			h.sendAll(sendWR(1, 0, 1), writeWR(2, 2*testMTU), sendWR(3, 0, 1))
			fx, _ := h.receive(nak(testSQPSN+1, tc.code), nil)
			require.Equal(t, FailSend, fx.Fail)
			require.Equal(t, tc.want, fx.Status)
			h.applyFail(fx)
			require.Equal(t, []string{"1:success", "2:" + tc.want.String()}, wcs(h.scq.take()))
			require.Equal(t, verbs.QPStateErr, h.q.State())
		})
	}
}

// TestCompleterErrorNAKBehindUnansweredRead: a NAK for a request that
// follows a READ whose responses have not arrived says the responder
// executed the READ and its responses were lost; the error is the later
// request's, not the READ's. rxe's check_psn sees a response beyond the
// oldest WQE, a READ, and retries (COMPST_ERROR_RETRY): the READ is asked
// again, and the later request will be NAKed again once it is resent. The
// READ must not complete with the other request's error.
func TestCompleterErrorNAKBehindUnansweredRead(t *testing.T) {
	h := newRC(t)
	h.sendAll(readWR(1, 0, 8), writeWR(2, 8))
	fx, _ := h.receive(nak(testSQPSN+1, wire.NAKRemoteAccessError), nil)
	if fx.Fail == FailSend {
		h.applyFail(fx)
	}
	require.Empty(t, wcs(h.scq.take()), "the READ completed with the WRITE's error")
	require.Equal(t, FailNone, fx.Fail)
	_, pkts := h.run()
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadRequest, wire.RCRDMAWriteOnly}, ops(pkts), "READ asked again")
}

// TestCompleterResponseForNothing: responses when nothing is outstanding,
// or before the QP is in RTS, are stale (a response that matches no
// outstanding request is discarded: rxe_comp.c check_psn, COMPST_DONE).
func TestCompleterResponseForNothing(t *testing.T) {
	h := newRC(t)
	for _, hd := range []wire.Headers{ack(testSQPSN, 0), nak(testSQPSN, wire.NAKPSNSequenceError),
		rnrNak(testSQPSN, 1), atomicAck(testSQPSN, 1)} {
		fx, pkts := h.receive(hd, nil)
		require.Equal(t, Effects{}, fx)
		require.Empty(t, pkts)
	}
	_, _ = h.receive(readResp(wire.RCRDMAReadResponseOnly, testSQPSN), pattern(0, 8))
	h.requireDrops(map[DropReason]uint64{DropStaleResponse: 5})

	// An ATOMIC acknowledge for a READ's PSN, a READ response for an
	// ATOMIC's.
	h = newRC(t)
	h.sendAll(readWR(1, 0, 8), atomicWR(2, verbs.WRAtomicFetchAndAdd, 8, 1, 0))
	_, _ = h.receive(atomicAck(testSQPSN, 1), nil)
	_, _ = h.receive(readResp(wire.RCRDMAReadResponseOnly, testSQPSN+1), pattern(0, 8))
	h.requireDrops(map[DropReason]uint64{DropStaleResponse: 2})
	require.Empty(t, h.scq.wcs)

	// In RTR the requester has not started.
	p := defaultParams(verbs.QPTypeRC)
	h = newQPT(t, p)
	h.q.SetState(verbs.QPStateReset, 0, 0)
	h.q.SetState(verbs.QPStateInit, 0, 0)
	h.q.SetState(verbs.QPStateRTR, testRQPSN, 0)
	_, _ = h.receive(ack(testSQPSN, 0), nil)
	h.requireDrops(map[DropReason]uint64{DropStaleResponse: 1})
}

// TestCompleterNAKAfterTimeout: a sequence error NAK that arrives after
// the transport timer expired, before the requester went back, decides
// where it goes back to: the NAKed PSN (IBTA 9.7.5.2.2), not the older
// PSN the timer would have resent from (one go-back, not two).
func TestCompleterNAKAfterTimeout(t *testing.T) {
	h := newRC(t)
	h.sendAll(sendWR(1, 0, 4*testMTU))
	h.now = h.q.Deadline()
	fx, _ := h.timer()
	require.True(t, fx.Run)
	require.Equal(t, RequesterGoBack, h.q.Requester())
	_, _ = h.receive(nak(testSQPSN+2, wire.NAKPSNSequenceError), nil)
	_, pkts := h.run()
	require.Equal(t, seq(testSQPSN+2, 2), psns(pkts), "resent from the NAKed PSN")
}

// TestNAKForUnsentPSN: a NAK or RNR NAK syndrome naming a PSN the
// requester never sent is dropped as a stale response and changes
// nothing. An ACK packet was already checked; a READ response or ATOMIC
// acknowledge carrying a NAK syndrome was not: on a QP with nothing
// outstanding it passed uncounted (FuzzQPReceive found it), on one with
// requests outstanding it acknowledged up to the PSN before it.
func TestNAKForUnsentPSN(t *testing.T) {
	for _, op := range []wire.OpCode{wire.RCAcknowledge, wire.RCRDMAReadResponseOnly, wire.RCAtomicAcknowledge} {
		for _, syn := range []wire.Syndrome{wire.NAKSyndrome(wire.NAKPSNSequenceError), wire.RNRNAKSyndrome(3),
			wire.NAKSyndrome(wire.NAKRemoteAccessError)} {
			idle := newRC(t)
			_, _ = idle.receive(aethPacket(op, testSQPSN+100, syn, 0), nil)
			idle.requireDrops(map[DropReason]uint64{DropStaleResponse: 1})

			h := newRC(t)
			h.post(sendWR(1, 0, 8))
			h.post(sendWR(2, 0, 8))
			_, _ = h.run()
			_, pkts := h.receive(aethPacket(op, testSQPSN+5, syn, 0), nil)
			require.Empty(t, pkts)
			h.requireDrops(map[DropReason]uint64{DropStaleResponse: 1})
			require.Empty(t, h.scq.take(), "%s %s: the outstanding SENDs are neither acknowledged nor failed", op, syn)
			require.Equal(t, 2, h.sq.Len())
		}
	}
}
