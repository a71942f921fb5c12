package testbench

// Requester and completer: the DUT sends, the testbench plays the
// responder.

import (
	"testing"
	"time"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// sendWR returns a signaled SEND of the given elements.
func sendWR(wrid uint64, sges ...verbs.SGE) *verbs.SendWR {
	return &verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: sges}
}

// IBTA 9.7.4 / 9.2 (requester packet generation): a SEND of 2.5 MTUs
// gathered from two elements goes out as SEND FIRST, MIDDLE and LAST at
// consecutive PSNs from the QP's sq_psn, full MTUs in FIRST and MIDDLE,
// the LAST padded to four bytes with zeros, AckReq on the LAST only (rxe
// sets it on the last packet of a message), the Solicited Event on the
// LAST of a solicited SEND, P_Key 0xFFFF, addressed to the connected QP.
// The WR completes only when acknowledged.
func TestRequesterMultiPacketSend(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mtu := c.MTU()
	src := tb.Mem(t, 4096, AllAccess)
	msg := pattern(2*mtu+515, 3)
	copy(src.Buf, msg)
	wr := sendWR(1, src.SGE(0, 1500), src.SGE(1500, len(msg)-1500))
	wr.SendFlags |= verbs.SendSolicited
	c.PostSend(t, wr)
	require.EqualValues(t, c.Cfg.SQPSN, c.ExpectPSN)
	for i, op := range []wire.OpCode{wire.RCSendFirst, wire.RCSendMiddle} {
		pk := c.ExpectReq(t, Match{Op: P(op), AckReq: P(false), Solicited: P(false), Payload: msg[i*mtu : (i+1)*mtu]})
		require.EqualValues(t, 0xffff, pk.P.BTH.PKey())
	}
	last := c.ExpectReq(t, Match{Op: P(wire.RCSendLast), AckReq: P(true), Solicited: P(true), Payload: msg[2*mtu:]})
	require.Len(t, last.P.Pad, 1)
	tb.ExpectNothing(t)
	c.SendCQ.RequireEmpty(t)
	c.Ack(t, last.PSN())
	wc := c.SendCQ.Next(t)
	RequireWC(t, wc, 1, verbs.WCSuccess, verbs.WCSend)
	require.EqualValues(t, len(msg), wc.ByteLen)
}

// IBTA 9.4.2, 9.3.3 (RETH): an RDMA WRITE with Immediate of 2 MTUs + 8
// goes out as WRITE FIRST with the RETH (remote address, R_Key, total
// length), a MIDDLE without RETH, and a LAST with Immediate carrying the
// immediate data.
func TestRequesterMultiPacketWrite(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mtu := c.MTU()
	src := tb.Mem(t, 4096, AllAccess)
	msg := pattern(2*mtu+8, 5)
	copy(src.Buf, msg)
	const va, rkey = 0x7f0000001000, 0x4242
	c.PostSend(t, &verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 0xabcd, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{src.SGE(0, len(msg))}, RDMA: verbs.RDMAInfo{RemoteAddr: va, RKey: rkey}})
	c.ExpectReq(t, Match{Op: P(wire.RCRDMAWriteFirst), AckReq: P(false), RETH: &wire.RETHFields{VirtualAddress: va, RKey: rkey, DMALength: uint32(len(msg))}, Payload: msg[:mtu]})
	mid := c.ExpectReq(t, Match{Op: P(wire.RCRDMAWriteMiddle), AckReq: P(false), Payload: msg[mtu : 2*mtu]})
	require.Nil(t, mid.P.RETH)
	last := c.ExpectReq(t, Match{Op: P(wire.RCRDMAWriteLastWithImm), AckReq: P(true), Imm: P(uint32(0xabcd)), Payload: msg[2*mtu:]})
	c.Ack(t, last.PSN())
	wc := c.SendCQ.Next(t)
	RequireWC(t, wc, 2, verbs.WCSuccess, verbs.WCRDMAWrite)
	require.EqualValues(t, len(msg), wc.ByteLen)
}

// IBTA 9.7.5.1.1 / 9.7.6 (completer): an ACK of PSN n completes, in
// order, every WR whose last PSN is at or before n, and no other.
func TestRequesterACKCompletes(t *testing.T) {
	t.Parallel()
	t.Run("ACKCompletesTheWRsItCovers", func(t *testing.T) {
		t.Parallel()
		tb := New(t)
		c := tb.NewRC(t)
		src := tb.Mem(t, 64, AllAccess)
		c.PostSend(t, sendWR(1, src.SGE(0, 8)))
		c.PostSend(t, sendWR(2, src.SGE(8, 8)))
		p1 := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
		p2 := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
		c.Ack(t, p1)
		RequireWC(t, c.SendCQ.Next(t), 1, verbs.WCSuccess, verbs.WCSend)
		tb.ExpectNothing(t)
		c.SendCQ.RequireEmpty(t)
		c.Ack(t, p2)
		RequireWC(t, c.SendCQ.Next(t), 2, verbs.WCSuccess, verbs.WCSend)
	})
	t.Run("CoalescedACKCompletesSeveral", func(t *testing.T) {
		t.Parallel()
		tb := New(t)
		c := tb.NewRC(t)
		src := tb.Mem(t, 64, AllAccess)
		for i := range 3 {
			c.PostSend(t, sendWR(uint64(10+i), src.SGE(i*8, 8)))
		}
		var last wire.PSN
		for range 3 {
			last = c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
		}
		c.Ack(t, last)
		wcs := c.SendCQ.Wait(t, 3)
		for i, wc := range wcs {
			RequireWC(t, wc, uint64(10+i), verbs.WCSuccess, verbs.WCSend)
		}
	})
}

// IBTA 9.7.6.1.x (the requester validates response PSNs: a response for a
// PSN it never sent, or one already acknowledged, is ignored) / rxe
// check_psn: such an ACK completes nothing, is dropped and counted.
func TestRequesterStaleACKIgnored(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	src := tb.Mem(t, 64, AllAccess)
	c.PostSend(t, sendWR(1, src.SGE(0, 8)))
	p := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	tb.ExpectDropped(t, DropStaleResponse, func() { c.Ack(t, p.Add(5)) })
	tb.ExpectDropped(t, DropStaleResponse, func() { c.Ack(t, p.Sub(10)) })
	c.SendCQ.RequireEmpty(t)
	c.Ack(t, p)
	RequireWC(t, c.SendCQ.Next(t), 1, verbs.WCSuccess, verbs.WCSend)
}

// IBTA 9.7.6.1.x (duplicate responses are ignored): an ACK that arrives
// again after it was handled completes nothing more and is dropped and
// counted, both a repeat of the latest ACK and an older one.
func TestRequesterDuplicateACKIgnored(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	src := tb.Mem(t, 64, AllAccess)
	c.PostSend(t, sendWR(1, src.SGE(0, 8)))
	c.PostSend(t, sendWR(2, src.SGE(8, 8)))
	p1 := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	p2 := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	c.Ack(t, p1)
	RequireWC(t, c.SendCQ.Next(t), 1, verbs.WCSuccess, verbs.WCSend)
	tb.ExpectDropped(t, DropDuplicateAck, func() { c.Ack(t, p1) })
	c.SendCQ.RequireEmpty(t)
	c.Ack(t, p2)
	RequireWC(t, c.SendCQ.Next(t), 2, verbs.WCSuccess, verbs.WCSend)
	tb.ExpectDropped(t, DropStaleResponse, func() { c.Ack(t, p1) })
}

// IBTA 9.7.5.2.2 / 9.7.6.1.x (PSN sequence error NAK): the NAK implicitly
// acknowledges every PSN before it (those WRs complete), and the
// requester goes back to the NAKed PSN and sends everything from there
// again, in order, with the same contents (go-back-N).
func TestRequesterGoBackN(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	src := tb.Mem(t, 64, AllAccess)
	copy(src.Buf, pattern(64, 9))
	var psns []wire.PSN
	for i := range 3 {
		c.PostSend(t, sendWR(uint64(i+1), src.SGE(i*16, 16)))
	}
	for i := range 3 {
		psns = append(psns, c.ExpectReq(t, Match{Op: P(wire.RCSendOnly), Payload: src.Buf[i*16 : (i+1)*16]}).PSN())
	}
	c.NAK(t, wire.NAKPSNSequenceError, psns[1])
	RequireWC(t, c.SendCQ.Next(t), 1, verbs.WCSuccess, verbs.WCSend)
	c.Expect(t, Match{Op: P(wire.RCSendOnly), PSN: P(psns[1]), AckReq: P(true), Payload: src.Buf[16:32]})
	c.Expect(t, Match{Op: P(wire.RCSendOnly), PSN: P(psns[2]), AckReq: P(true), Payload: src.Buf[32:48]})
	tb.ExpectNothing(t)
	c.Ack(t, psns[2])
	wcs := c.SendCQ.Wait(t, 2)
	RequireWC(t, wcs[0], 2, verbs.WCSuccess, verbs.WCSend)
	RequireWC(t, wcs[1], 3, verbs.WCSuccess, verbs.WCSend)
}

// IBTA 9.7.5.2.8 (RNR NAK): after an RNR NAK the requester sends nothing
// until the RNR timer the NAK names has run out (table 45), then sends
// the NAKed request again.
func TestRequesterRNRNAKWaits(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t, func(q *QPConfig) { q.Timeout = 20 })
	src := tb.Mem(t, 64, AllAccess)
	copy(src.Buf, "retry me")
	c.PostSend(t, sendWR(1, src.SGE(0, 8)))
	p := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	const timer = 10 // 0.32 ms
	c.RNRNAK(t, timer, p)
	tb.ExpectNothing(t)
	tb.Clock.Advance(RNRDelay(timer) - time.Microsecond)
	tb.ExpectNothing(t)
	c.SendCQ.RequireEmpty(t)
	tb.Clock.Advance(time.Microsecond)
	c.Expect(t, Match{Op: P(wire.RCSendOnly), PSN: P(p), Payload: []byte("retry me")})
	c.Ack(t, p)
	RequireWC(t, c.SendCQ.Next(t), 1, verbs.WCSuccess, verbs.WCSend)
}

// IBTA 9.7.5.2.8, ibv_modify_qp(3) rnr_retry / ibv_poll_cq(3): once
// rnr_retry retries were answered by RNR NAKs, the WR completes with
// IBV_WC_RNR_RETRY_EXC_ERR, the QP moves to the error state, and the rest
// of the send queue is flushed.
func TestRequesterRNRRetryExceeded(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t, func(q *QPConfig) { q.RNRRetry, q.Timeout = 1, 20 })
	src := tb.Mem(t, 64, AllAccess)
	c.PostSend(t, sendWR(1, src.SGE(0, 8)))
	c.PostSend(t, sendWR(2, src.SGE(8, 8)))
	p1 := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	p2 := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	const timer = 2
	c.RNRNAK(t, timer, p1)
	tb.ExpectNothing(t)
	tb.Clock.Advance(RNRDelay(timer))
	c.Expect(t, Match{Op: P(wire.RCSendOnly), PSN: P(p1)})
	c.Expect(t, Match{Op: P(wire.RCSendOnly), PSN: P(p2)})
	c.RNRNAK(t, timer, p1)
	wcs := c.SendCQ.Wait(t, 2)
	RequireWC(t, wcs[0], 1, verbs.WCRNRRetryExcErr, 0)
	RequireWC(t, wcs[1], 2, verbs.WCWRFlushErr, 0)
	requireErrState(t, c)
	tb.Clock.Advance(time.Second)
	tb.ExpectNothing(t)
}

// IBTA 9.7.6.1.3 (transport timer): with no response, the requester
// sends the unacknowledged request again when 4.096 us * 2^timeout have
// passed, and not before.
func TestRequesterTransportTimer(t *testing.T) {
	t.Parallel()
	tb := New(t)
	const timeout = 10 // 4.19 ms
	c := tb.NewRC(t, func(q *QPConfig) { q.Timeout = timeout })
	src := tb.Mem(t, 64, AllAccess)
	copy(src.Buf, "lost")
	c.PostSend(t, sendWR(1, src.SGE(0, 4)))
	p := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	tb.Clock.Advance(TransportTimeout(timeout) - time.Nanosecond)
	tb.ExpectNothing(t)
	tb.Clock.Advance(time.Nanosecond)
	c.Expect(t, Match{Op: P(wire.RCSendOnly), PSN: P(p), AckReq: P(true), Payload: []byte("lost")})
	c.Ack(t, p)
	RequireWC(t, c.SendCQ.Next(t), 1, verbs.WCSuccess, verbs.WCSend)
}

// IBTA 9.7.6.1.3, ibv_modify_qp(3) retry_cnt / ibv_poll_cq(3): after
// retry_cnt retransmissions without an answer the WR completes with
// IBV_WC_RETRY_EXC_ERR, the QP moves to the error state and the rest of
// the send queue is flushed; nothing more is sent.
func TestRequesterRetryExceeded(t *testing.T) {
	t.Parallel()
	tb := New(t)
	const timeout = 10
	c := tb.NewRC(t, func(q *QPConfig) { q.Timeout, q.RetryCnt = timeout, 2 })
	src := tb.Mem(t, 64, AllAccess)
	c.PostSend(t, sendWR(1, src.SGE(0, 8)))
	c.PostSend(t, sendWR(2, src.SGE(8, 8)))
	p1 := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	p2 := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	for range 2 {
		tb.Clock.Advance(TransportTimeout(timeout))
		c.Expect(t, Match{Op: P(wire.RCSendOnly), PSN: P(p1)})
		c.Expect(t, Match{Op: P(wire.RCSendOnly), PSN: P(p2)})
	}
	c.SendCQ.RequireEmpty(t)
	tb.Clock.Advance(TransportTimeout(timeout))
	wcs := c.SendCQ.Wait(t, 2)
	RequireWC(t, wcs[0], 1, verbs.WCRetryExcErr, 0)
	RequireWC(t, wcs[1], 2, verbs.WCWRFlushErr, 0)
	requireErrState(t, c)
	tb.Clock.Advance(time.Second)
	tb.ExpectNothing(t)
}

// IBTA 9.4.3, 9.7.6.1.x (READ responses): each READ response is placed by
// its PSN (response k at offset k*MTU), so responses that arrive out of
// order are placed right; a duplicate response is ignored (and counted);
// the READ completes when all its responses have arrived.
func TestRequesterReadResponses(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mtu := c.MTU()
	dst := tb.Mem(t, 4096, AllAccess)
	fill(dst.Buf, 0xee)
	const va, rkey = 0x7f0000100000, 0x5151
	c.PostSend(t, &verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{dst.SGE(0, 3*mtu)}, RDMA: verbs.RDMAInfo{RemoteAddr: va, RKey: rkey}})
	req := c.ExpectReq(t, Match{Op: P(wire.RCRDMAReadRequest), AckReq: P(true), RETH: &wire.RETHFields{VirtualAddress: va, RKey: rkey, DMALength: uint32(3 * mtu)}})
	p := req.PSN()
	require.Equal(t, p.Add(3), c.ExpectPSN, "a READ of 3 MTUs takes 3 PSNs")
	data := pattern(3*mtu, 21)
	c.ReadResponse(t, wire.RCRDMAReadResponseMiddle, p.Add(1), data[mtu:2*mtu])
	c.ReadResponse(t, wire.RCRDMAReadResponseFirst, p, data[:mtu])
	tb.ExpectDropped(t, DropStaleResponse, func() {
		c.ReadResponse(t, wire.RCRDMAReadResponseMiddle, p.Add(1), pattern(mtu, 99))
	})
	c.SendCQ.RequireEmpty(t)
	c.ReadResponse(t, wire.RCRDMAReadResponseLast, p.Add(2), data[2*mtu:])
	wc := c.SendCQ.Next(t)
	RequireWC(t, wc, 1, verbs.WCSuccess, verbs.WCRDMARead)
	require.EqualValues(t, 3*mtu, wc.ByteLen)
	require.Equal(t, data, dst.Buf[:3*mtu])
	untouched(t, dst.Buf[3*mtu:], 0xee)
}

// IBTA 9.7.5.1.2 (implied NAK): an acknowledgement of a PSN after a READ
// whose responses are incomplete means the missing responses were lost;
// the requester asks again for just the missing part (a READ request at
// the first missing response's PSN, for the rest of the data), and
// completes the READ and the later SEND in order once the data is in.
func TestRequesterImpliedNAK(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mtu := c.MTU()
	dst := tb.Mem(t, 4096, AllAccess)
	src := tb.Mem(t, 64, AllAccess)
	const va, rkey = 0x7f0000200000, 0x6161
	c.PostSend(t, &verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{dst.SGE(0, 3*mtu)}, RDMA: verbs.RDMAInfo{RemoteAddr: va, RKey: rkey}})
	c.PostSend(t, sendWR(2, src.SGE(0, 8)))
	p := c.ExpectReq(t, Op(wire.RCRDMAReadRequest)).PSN()
	sendPSN := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	require.Equal(t, p.Add(3), sendPSN)
	data := pattern(3*mtu, 31)
	c.ReadResponse(t, wire.RCRDMAReadResponseFirst, p, data[:mtu])
	c.Ack(t, sendPSN) // the responses at p+1 and p+2 were lost
	c.Expect(t, Match{Op: P(wire.RCRDMAReadRequest), PSN: P(p.Add(1)),
		RETH: &wire.RETHFields{VirtualAddress: va + uint64(mtu), RKey: rkey, DMALength: uint32(2 * mtu)}})
	c.SendCQ.RequireEmpty(t)
	c.ReadResponse(t, wire.RCRDMAReadResponseMiddle, p.Add(1), data[mtu:2*mtu])
	c.ReadResponse(t, wire.RCRDMAReadResponseLast, p.Add(2), data[2*mtu:])
	// Going back, the requester may send the SEND again (its duplicate
	// is harmless); acknowledge it again either way.
	resent := func(pk *Packet) bool { return pk.Op() == wire.RCSendOnly && pk.PSN() == sendPSN }
	tb.BarrierSkipping(t, resent)
	c.Ack(t, sendPSN)
	wcs := c.SendCQ.Wait(t, 2)
	RequireWC(t, wcs[0], 1, verbs.WCSuccess, verbs.WCRDMARead)
	RequireWC(t, wcs[1], 2, verbs.WCSuccess, verbs.WCSend)
	require.Equal(t, data, dst.Buf[:3*mtu])
	tb.BarrierSkipping(t, resent)
}

// IBTA 9.4.5, 9.3.4 (AtomicETH), 9.5.3 (AtomicAckETH): FETCH_ADD sends
// the addend, COMPARE_SWAP the swap and compare values; the ATOMIC
// ACKNOWLEDGE's original remote data is written to the WR's 8-byte local
// buffer and the WR completes.
func TestRequesterAtomics(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	local := tb.Mem(t, 16, AllAccess)
	const va, rkey = 0x7f0000300008, 0x7171
	c.PostSend(t, &verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{local.SGE(0, 8)}, Atomic: verbs.AtomicInfo{RemoteAddr: va, RKey: rkey, CompareAdd: 5}})
	pk := c.ExpectReq(t, Match{Op: P(wire.RCFetchAdd), AckReq: P(true),
		AtomicETH: &wire.AtomicETHFields{VirtualAddress: va, RKey: rkey, SwapAddData: 5}})
	c.AtomicAck(t, pk.PSN(), 0x1122334455667788)
	wc := c.SendCQ.Next(t)
	RequireWC(t, wc, 1, verbs.WCSuccess, verbs.WCFetchAdd)
	require.EqualValues(t, 0x1122334455667788, getU64(local.Buf))

	c.PostSend(t, &verbs.SendWR{WRID: 2, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{local.SGE(8, 8)}, Atomic: verbs.AtomicInfo{RemoteAddr: va, RKey: rkey, CompareAdd: 7, Swap: 9}})
	pk = c.ExpectReq(t, Match{Op: P(wire.RCCompareSwap), AckReq: P(true),
		AtomicETH: &wire.AtomicETHFields{VirtualAddress: va, RKey: rkey, SwapAddData: 9, CompareData: 7}})
	c.AtomicAck(t, pk.PSN(), 7)
	RequireWC(t, c.SendCQ.Next(t), 2, verbs.WCSuccess, verbs.WCCompSwap)
	require.EqualValues(t, 7, getU64(local.Buf[8:]))
}

// IBTA 9.7.5.2.x, 9.9.2 (requester class errors) / ibv_poll_cq(3): a NAK
// remote access error, invalid request or remote operational error
// completes the NAKed WR with IBV_WC_REM_ACCESS_ERR,
// IBV_WC_REM_INV_REQ_ERR or IBV_WC_REM_OP_ERR, moves the QP to the error
// state, and flushes the later WRs; nothing more is sent. Unsignaled WRs
// complete too: "if a completion error occurs, a Work Completion will
// always be generated" (IBTA 10.7.3.1, as quoted in rxe_comp.c).
func TestRequesterNAKErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code   wire.NAKCode
		status verbs.WCStatus
	}{
		{wire.NAKRemoteAccessError, verbs.WCRemAccessErr},
		{wire.NAKInvalidRequest, verbs.WCRemInvReqErr},
		{wire.NAKRemoteOperational, verbs.WCRemOpErr},
	} {
		t.Run(tc.status.String(), func(t *testing.T) {
			t.Parallel()
			tb := New(t)
			c := tb.NewRC(t, func(q *QPConfig) { q.SQSigAll = false })
			src := tb.Mem(t, 64, AllAccess)
			c.PostSend(t, &verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite,
				SGList: []verbs.SGE{src.SGE(0, 8)}, RDMA: verbs.RDMAInfo{RemoteAddr: 0x1000, RKey: 1}})
			unsignaled := sendWR(2, src.SGE(8, 8))
			unsignaled.SendFlags = 0
			c.PostSend(t, unsignaled)
			c.PostSend(t, sendWR(3, src.SGE(16, 8)))
			p := c.ExpectReq(t, Op(wire.RCRDMAWriteOnly)).PSN()
			c.ExpectReq(t, Op(wire.RCSendOnly))
			c.ExpectReq(t, Op(wire.RCSendOnly))
			c.NAK(t, tc.code, p)
			wcs := c.SendCQ.Wait(t, 3)
			RequireWC(t, wcs[0], 1, tc.status, 0)
			RequireWC(t, wcs[1], 2, verbs.WCWRFlushErr, 0)
			RequireWC(t, wcs[2], 3, verbs.WCWRFlushErr, 0)
			requireErrState(t, c)
			tb.Clock.Advance(time.Second)
			tb.ExpectNothing(t)
		})
	}
}

// IBTA 10.8.3 / ibv_poll_cq(3), rxe's completer (completions in send
// queue order: get_wqe looks at the head only): a WR that fails a local
// check (its local region was deregistered before it was sent) while an
// earlier WR awaits its ACK sends nothing; the earlier WR completes
// successfully once acknowledged, and the faulty WR completes with
// IBV_WC_LOC_PROT_ERR after it, not the other way round.
func TestRequesterLocalErrorAfterOutstandingWR(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	good := tb.Mem(t, 64, AllAccess)
	gone := tb.Mem(t, 64, AllAccess)
	c.PostSend(t, sendWR(1, good.SGE(0, 8)))
	p := c.ExpectReq(t, Op(wire.RCSendOnly)).PSN()
	require.NoError(t, gone.MR.Dereg())
	c.PostSend(t, sendWR(2, gone.SGE(0, 8)))
	tb.ExpectNothing(t)
	c.Ack(t, p)
	wcs := c.SendCQ.Wait(t, 2)
	RequireWC(t, wcs[0], 1, verbs.WCSuccess, verbs.WCSend)
	RequireWC(t, wcs[1], 2, verbs.WCLocProtErr, 0)
	requireErrState(t, c)
}

// IBTA 9.8.4 (UD), 9.3.2 (DETH): a UD send is one UD SEND ONLY to the
// address handle's QP with the DETH carrying the remote Q_Key and the
// DUT QP as source; a remote Q_Key with the high bit set means the QP's
// own Q_Key (IBTA 10.2.5); the WR completes without any acknowledgement.
func TestRequesterUDSend(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUD(t)
	src := tb.Mem(t, 64, AllAccess)
	copy(src.Buf, "datagram")
	c.PostSend(t, sendWR(1, src.SGE(0, 8)))
	c.Expect(t, Match{Op: P(wire.UDSendOnly), PSN: P(wire.MakePSN(c.Cfg.SQPSN)),
		DETH: &wire.DETHFields{QKey: c.Cfg.QKey, SrcQP: c.DUTQPN}, Payload: []byte("datagram")})
	RequireWC(t, c.SendCQ.Next(t), 1, verbs.WCSuccess, verbs.WCSend)

	wr := sendWR(2, src.SGE(0, 4))
	wr.Opcode, wr.ImmData = verbs.WRSendWithImm, 0x99
	wr.UD = verbs.UDInfo{AH: c.AH, RemoteQPN: c.TBQPN, RemoteQKey: 0x80000000}
	_, err := c.QP.PostSend(wr)
	require.NoError(t, err)
	c.Expect(t, Match{Op: P(wire.UDSendOnlyWithImmediate), PSN: P(wire.MakePSN(c.Cfg.SQPSN + 1)), Imm: P(uint32(0x99)),
		DETH: &wire.DETHFields{QKey: c.Cfg.QKey, SrcQP: c.DUTQPN}})
	RequireWC(t, c.SendCQ.Next(t), 2, verbs.WCSuccess, verbs.WCSend)
}

// IBTA C10-93.1.1: a UD send longer than the port MTU emits no packet and
// generates no error (the WR completes successfully, as rxe does).
func TestRequesterUDSendLongerThanMTU(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUD(t)
	src := tb.Mem(t, 4096, AllAccess)
	c.PostSend(t, sendWR(1, src.SGE(0, 1024+1)))
	RequireWC(t, c.SendCQ.Next(t), 1, verbs.WCSuccess, verbs.WCSend)
	tb.ExpectNothing(t)
}

// IBTA 9.8 (UC requester): a UC SEND uses the UC opcodes, and the WR
// completes once its last packet is sent, without any acknowledgement.
func TestRequesterUCSend(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUC(t)
	mtu := c.MTU()
	src := tb.Mem(t, 4096, AllAccess)
	msg := pattern(mtu+3, 8)
	copy(src.Buf, msg)
	c.PostSend(t, sendWR(1, src.SGE(0, len(msg))))
	c.ExpectReq(t, Match{Op: P(wire.UCSendFirst), Payload: msg[:mtu]})
	c.ExpectReq(t, Match{Op: P(wire.UCSendLast), Payload: msg[mtu:]})
	RequireWC(t, c.SendCQ.Next(t), 1, verbs.WCSuccess, verbs.WCSend)
	tb.ExpectNothing(t)
}

// ibv_modify_qp(3), max_rd_atomic: the number of RDMA READs and ATOMICs
// the requester may have outstanding at the destination QP, whose
// responder keeps only that many (IBTA 9.5: the responder's resources
// for them; one it forgot cannot be asked for again). A READ longer than
// the requester's window is asked for in parts, each a READ request of
// its own to the responder, so each part counts, and a later READ may
// not start while the parts hold every resource. With max_rd_atomic 2,
// every time the testbench looks, at most two READ requests are
// unanswered; the parts ask for the READ's responses in order, and both
// READs complete with their data.
func TestRequesterReadPartsWithinMaxRdAtomic(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t, func(q *QPConfig) { q.MaxRdAtomic = 2 })
	mtu := c.MTU()
	const n = 200 // responses: longer than any window, so asked for in parts
	dst := tb.Mem(t, (n+1)*mtu, AllAccess)
	const va, rkey = 0x7f0000300000, 0x7171
	c.PostSend(t, &verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{dst.SGE(0, n*mtu)}, RDMA: verbs.RDMAInfo{RemoteAddr: va, RKey: rkey}})
	c.PostSend(t, &verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{dst.SGE(n*mtu, mtu)}, RDMA: verbs.RDMAInfo{RemoteAddr: va + uint64(n*mtu), RKey: rkey}})
	data := pattern((n+1)*mtu, 41)

	// The READ requests unanswered, oldest first, as offsets (in
	// responses) from the first READ's first PSN; both READs' remote
	// bytes are one range from va.
	type ask struct{ off, k int }
	var out []ask
	var first wire.PSN
	next, asks := 0, 0
	add := func(pk *Packet) {
		t.Helper()
		off, k := int(pk.PSN().Diff(first)), int(pk.P.RETH.DMALength())/mtu
		require.Equal(t, next, off, "the READs' responses are asked for in order, from the first not asked for")
		require.Positive(t, k)
		require.EqualValues(t, va+uint64(off*mtu), pk.P.RETH.VirtualAddress())
		require.EqualValues(t, k*mtu, pk.P.RETH.DMALength(), "whole responses")
		out = append(out, ask{off, k})
		require.LessOrEqual(t, len(out), 2, "READ requests unanswered: at most max_rd_atomic")
		next += k
		asks++
	}
	isRead := func(pk *Packet) bool { return pk.Op() == wire.RCRDMAReadRequest }
	collect := func() {
		t.Helper()
		for _, pk := range tb.BarrierSkipping(t, isRead) {
			add(pk)
		}
	}
	pk := c.Expect(t, Op(wire.RCRDMAReadRequest))
	first = pk.PSN()
	add(pk)
	collect()
	for len(out) > 0 {
		a := out[0]
		out = out[1:]
		for i := range a.k {
			op := wire.RCRDMAReadResponseMiddle
			switch {
			case a.k == 1:
				op = wire.RCRDMAReadResponseOnly
			case i == 0:
				op = wire.RCRDMAReadResponseFirst
			case i == a.k-1:
				op = wire.RCRDMAReadResponseLast
			}
			c.ReadResponse(t, op, first.Add(uint32(a.off+i)), data[(a.off+i)*mtu:(a.off+i+1)*mtu])
		}
		collect()
	}
	require.Equal(t, n+1, next, "every response asked for")
	require.Greater(t, asks, 2, "a READ of %d responses is asked for in parts", n)
	wcs := c.SendCQ.Wait(t, 2)
	RequireWC(t, wcs[0], 1, verbs.WCSuccess, verbs.WCRDMARead)
	RequireWC(t, wcs[1], 2, verbs.WCSuccess, verbs.WCRDMARead)
	require.Equal(t, data, dst.Buf[:(n+1)*mtu])
}
