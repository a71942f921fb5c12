package testbench

// RC responder: the DUT receives requests in sequence and executes them.

import (
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// IBTA 9.4.1 (SEND), 9.7.5.1.1: a SEND ONLY lands byte-exact in the
// posted receive buffer (nothing beyond its length is written), completes
// the receive WQE, and a packet with AckReq is acknowledged with an ACK of
// its PSN whose MSN counts the completed message.
func TestRCSendOnlyLandsAndIsAcked(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mem := tb.Mem(t, 256, AllAccess)
	fill(mem.Buf, 0xee)
	c.PostRecv(t, 1, mem.SGE(0, 256))
	msg := pattern(37, 1) // pad 3 on the wire
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: msg})
	c.Expect(t, ACK(psn).WithMSN(1))
	wc := c.RecvCQ.Next(t)
	RequireWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	require.EqualValues(t, len(msg), wc.ByteLen)
	require.Equal(t, c.DUTQPN, wc.QPNum)
	require.Equal(t, msg, mem.Buf[:len(msg)])
	untouched(t, mem.Buf[len(msg):], 0xee)
	tb.ExpectNothing(t)
}

// IBTA 9.4.1, 9.7.5.1.1: a multi-packet SEND (FIRST, MIDDLE, LAST) is
// scattered in order over the receive WQE's elements, and one ACK (on the
// LAST, which carries AckReq) acknowledges the message.
func TestRCMultiPacketSendScatters(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mtu := c.MTU()
	mem := tb.Mem(t, 4096, AllAccess)
	// Two elements, the first ending in the middle of the second packet.
	c.PostRecv(t, 7, mem.SGE(0, mtu+300), mem.SGE(2048, 2048))
	msg := pattern(2*mtu+100, 3)
	c.Send(t, Pkt{Op: wire.RCSendFirst, Payload: msg[:mtu]})
	c.Send(t, Pkt{Op: wire.RCSendMiddle, Payload: msg[mtu : 2*mtu]})
	last := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendLast, AckReq: true, Payload: msg[2*mtu:]})
	c.Expect(t, ACK(last).WithMSN(1))
	wc := c.RecvCQ.Next(t)
	RequireWC(t, wc, 7, verbs.WCSuccess, verbs.WCRecv)
	require.EqualValues(t, len(msg), wc.ByteLen)
	require.Equal(t, msg[:mtu+300], mem.Buf[:mtu+300])
	require.Equal(t, msg[mtu+300:], mem.Buf[2048:2048+len(msg)-mtu-300])
	tb.ExpectNothing(t)
}

// IBTA 9.4.1, 9.3.7 (ImmDt): SEND ONLY with Immediate completes the
// receive with IBV_WC_WITH_IMM and the immediate data, and a SEND ONLY
// with no payload completes a zero-length receive.
func TestRCSendImmediateAndZeroLength(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mem := tb.Mem(t, 64, AllAccess)
	c.PostRecv(t, 1, mem.SGE(0, 64))
	c.PostRecv(t, 2, mem.SGE(0, 64))
	c.Send(t, Pkt{Op: wire.RCSendOnlyWithImmediate, Imm: 0xdeadbeef, Payload: []byte("imm")})
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true})
	c.Expect(t, ACK(psn).WithMSN(2))
	wcs := c.RecvCQ.Wait(t, 2)
	RequireWC(t, wcs[0], 1, verbs.WCSuccess, verbs.WCRecv)
	require.NotZero(t, wcs[0].WCFlags&verbs.WCFlagWithImm, "IBV_WC_WITH_IMM")
	require.EqualValues(t, 0xdeadbeef, wcs[0].ImmData)
	require.EqualValues(t, 3, wcs[0].ByteLen)
	RequireWC(t, wcs[1], 2, verbs.WCSuccess, verbs.WCRecv)
	require.Zero(t, wcs[1].ByteLen)
	require.Zero(t, wcs[1].WCFlags&verbs.WCFlagWithImm)
}

// IBTA 9.4.2 (RDMA WRITE): a WRITE ONLY lands at the RETH's virtual
// address, is acknowledged, and consumes no receive WQE.
func TestRCWriteOnlyLands(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mem := tb.Mem(t, 512, AllAccess)
	fill(mem.Buf, 0xee)
	recv := tb.Mem(t, 64, AllAccess)
	c.PostRecv(t, 9, recv.SGE(0, 64))
	msg := pattern(61, 5)
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCRDMAWriteOnly, AckReq: true, RETH: mem.RETH(100, len(msg)), Payload: msg})
	c.Expect(t, ACK(psn).WithMSN(1))
	require.Equal(t, msg, mem.Buf[100:100+len(msg)])
	untouched(t, mem.Buf[:100], 0xee)
	untouched(t, mem.Buf[100+len(msg):], 0xee)
	c.RecvCQ.RequireEmpty(t)
	// The receive is still there for the next SEND.
	psn = c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("x")})
	c.Expect(t, ACK(psn).WithMSN(2))
	RequireWC(t, c.RecvCQ.Next(t), 9, verbs.WCSuccess, verbs.WCRecv)
}

// IBTA 9.4.2: a multi-packet WRITE (RETH on the FIRST only) lands
// byte-exact; one ACK acknowledges it.
func TestRCMultiPacketWriteLands(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mtu := c.MTU()
	mem := tb.Mem(t, 4096, AllAccess)
	msg := pattern(2*mtu+13, 9)
	c.Send(t, Pkt{Op: wire.RCRDMAWriteFirst, RETH: mem.RETH(8, len(msg)), Payload: msg[:mtu]})
	c.Send(t, Pkt{Op: wire.RCRDMAWriteMiddle, Payload: msg[mtu : 2*mtu]})
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCRDMAWriteLast, AckReq: true, Payload: msg[2*mtu:]})
	c.Expect(t, ACK(psn).WithMSN(1))
	require.Equal(t, msg, mem.Buf[8:8+len(msg)])
}

// IBTA 9.4.2, 9.3.7: RDMA WRITE with Immediate places the data and
// consumes a receive WQE, completed as IBV_WC_RECV_RDMA_WITH_IMM with the
// immediate data and the DMA length.
func TestRCWriteWithImmediateCompletesReceive(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mem := tb.Mem(t, 256, AllAccess)
	c.PostRecv(t, 3)
	msg := pattern(40, 11)
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCRDMAWriteOnlyWithImm, AckReq: true, Imm: 0x1234, RETH: mem.RETH(16, len(msg)), Payload: msg})
	c.Expect(t, ACK(psn).WithMSN(1))
	wc := c.RecvCQ.Next(t)
	RequireWC(t, wc, 3, verbs.WCSuccess, verbs.WCRecvRDMAWithImm)
	require.NotZero(t, wc.WCFlags&verbs.WCFlagWithImm)
	require.EqualValues(t, 0x1234, wc.ImmData)
	require.EqualValues(t, len(msg), wc.ByteLen)
	require.Equal(t, msg, mem.Buf[16:16+len(msg)])
}

// IBTA 9.4.3 (RDMA READ), 9.3.5, 9.7.1, C9-148 (the MSN counts a READ
// when it is accepted, as rxe's execute() cites): a READ of 2.5 MTUs is
// answered with READ RESPONSE FIRST, MIDDLE and LAST at the request's PSN
// and the two after it, the AETH (ACK, MSN 1) on FIRST and LAST only, the data
// byte-exact and the LAST padded; the request consumed three PSNs, so the
// next request is expected at PSN+3.
func TestRCReadResponses(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mtu := c.MTU()
	mem := tb.Mem(t, 4096, AllAccess)
	data := pattern(2*mtu+mtu/2+1, 13)
	copy(mem.Buf[4:], data)
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, AckReq: true, RETH: mem.RETH(4, len(data))})
	require.Equal(t, psn.Add(3), c.SendPSN)
	first := c.Expect(t, Match{Op: P(wire.RCRDMAReadResponseFirst), PSN: P(psn), AckKind: P(wire.AckKindACK), MSN: P(uint32(1)), Payload: data[:mtu]})
	require.False(t, first.P.BTH.AckReq())
	mid := c.Expect(t, Match{Op: P(wire.RCRDMAReadResponseMiddle), PSN: P(psn.Add(1)), Payload: data[mtu : 2*mtu]})
	require.Nil(t, mid.P.AETH, "READ RESPONSE MIDDLE carries no AETH")
	last := c.Expect(t, Match{Op: P(wire.RCRDMAReadResponseLast), PSN: P(psn.Add(2)), AckKind: P(wire.AckKindACK), MSN: P(uint32(1)), Payload: data[2*mtu:]})
	require.Len(t, last.P.Pad, 3)
	// The responder expects PSN+3 next.
	recv := tb.Mem(t, 16, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 16))
	next := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("next")})
	c.Expect(t, ACK(next).WithMSN(2))
}

// IBTA 9.4.3: a zero-length READ needs no valid R_Key ("a zero-byte op is
// not required to set an addr or rkey", rxe check_rkey) and is answered by
// one empty READ RESPONSE ONLY.
func TestRCZeroLengthRead(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, AckReq: true, RETH: &wire.RETHFields{VirtualAddress: 0xdead0000, RKey: 0xbad}})
	c.Expect(t, Match{Op: P(wire.RCRDMAReadResponseOnly), PSN: P(psn), AckKind: P(wire.AckKindACK), MSN: P(uint32(1)), Payload: []byte{}})
	require.Equal(t, verbs.QPStateRTS.String(), c.State().String())
}

// IBTA 9.4.5 (atomic operations), 9.5.3 (AtomicAckETH): FETCH_ADD adds to
// the 8-byte word and returns the original value in an ATOMIC
// ACKNOWLEDGE at the request's PSN; COMPARE_SWAP swaps only when the
// word equals the compare value, and returns the original either way.
func TestRCAtomics(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mem := tb.Mem(t, 64, AllAccess)
	putU64(mem.Buf[8:], 100)
	rk := mem.RKey()

	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCFetchAdd, AckReq: true, AtomicETH: &wire.AtomicETHFields{VirtualAddress: mem.VA(8), RKey: rk, SwapAddData: 5}})
	c.Expect(t, Match{Op: P(wire.RCAtomicAcknowledge), PSN: P(psn), AckKind: P(wire.AckKindACK), MSN: P(uint32(1)), AtomicAck: P(uint64(100))})
	require.EqualValues(t, 105, getU64(mem.Buf[8:]))

	psn = c.SendPSN // compare fails: nothing swapped
	c.Send(t, Pkt{Op: wire.RCCompareSwap, AckReq: true, AtomicETH: &wire.AtomicETHFields{VirtualAddress: mem.VA(8), RKey: rk, SwapAddData: 7, CompareData: 104}})
	c.Expect(t, Match{Op: P(wire.RCAtomicAcknowledge), PSN: P(psn), MSN: P(uint32(2)), AtomicAck: P(uint64(105))})
	require.EqualValues(t, 105, getU64(mem.Buf[8:]))

	psn = c.SendPSN // compare matches: swapped
	c.Send(t, Pkt{Op: wire.RCCompareSwap, AckReq: true, AtomicETH: &wire.AtomicETHFields{VirtualAddress: mem.VA(8), RKey: rk, SwapAddData: 7, CompareData: 105}})
	c.Expect(t, Match{Op: P(wire.RCAtomicAcknowledge), PSN: P(psn), MSN: P(uint32(3)), AtomicAck: P(uint64(105))})
	require.EqualValues(t, 7, getU64(mem.Buf[8:]))
}

// IBTA 9.7.5.1.1 (coalesced acknowledges), 9.2 (AckReq), 9.3.5 (MSN).
func TestRCAckCoalescing(t *testing.T) {
	t.Parallel()
	// A request without AckReq is executed but not acknowledged on its
	// own: the responder sends nothing (rxe acknowledge(): bth_ack).
	t.Run("NoACKWithoutAckReq", func(t *testing.T) {
		t.Parallel()
		tb := New(t)
		c := tb.NewRC(t)
		mem := tb.Mem(t, 64, AllAccess)
		c.PostRecv(t, 1, mem.SGE(0, 64))
		c.Send(t, Pkt{Op: wire.RCSendOnly, Payload: []byte("quiet")})
		c.Send(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: mem.RETH(32, 4), Payload: []byte("wxyz")})
		tb.ExpectNothing(t)
		RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
		require.Equal(t, "wxyz", string(mem.Buf[32:36]))
	})
	// One ACK of PSN n acknowledges every request up to n: three SENDs,
	// only the last with AckReq, get exactly one ACK whose MSN is 3.
	t.Run("OneACKCoversEarlierPSNs", func(t *testing.T) {
		t.Parallel()
		tb := New(t)
		c := tb.NewRC(t)
		mem := tb.Mem(t, 64, AllAccess)
		for i := range 3 {
			c.PostRecv(t, uint64(i), mem.SGE(i*16, 16))
		}
		c.Send(t, Pkt{Op: wire.RCSendOnly, Payload: []byte("a")})
		c.Send(t, Pkt{Op: wire.RCSendOnly, Payload: []byte("b")})
		psn := c.SendPSN
		c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("c")})
		c.Expect(t, ACK(psn).WithMSN(3))
		tb.ExpectNothing(t)
		require.Len(t, c.RecvCQ.Wait(t, 3), 3)
	})
	// The MSN counts completed messages, not packets: an ACK requested on
	// the FIRST packet of a SEND carries the MSN before the message, the
	// ACK of its LAST packet one more.
	t.Run("MSNCountsCompletedMessages", func(t *testing.T) {
		t.Parallel()
		tb := New(t)
		c := tb.NewRC(t)
		mtu := c.MTU()
		mem := tb.Mem(t, 4096, AllAccess)
		c.PostRecv(t, 1, mem.SGE(0, 4096))
		msg := pattern(2*mtu+1, 1)
		psn := c.SendPSN
		c.Send(t, Pkt{Op: wire.RCSendFirst, AckReq: true, Payload: msg[:mtu]})
		c.Expect(t, ACK(psn).WithMSN(0))
		c.Send(t, Pkt{Op: wire.RCSendMiddle, Payload: msg[mtu : 2*mtu]})
		psn = c.SendPSN
		c.Send(t, Pkt{Op: wire.RCSendLast, AckReq: true, Payload: msg[2*mtu:]})
		c.Expect(t, ACK(psn).WithMSN(1))
	})
}

// IBTA 9.7.5.2.2 (PSN sequence error, class B): a request beyond the
// expected PSN is answered by exactly one NAK (PSN sequence error)
// carrying the expected PSN; further out-of-sequence requests are dropped
// silently (and counted) until the expected PSN arrives; nothing of them
// is executed; after the gap is filled, a new gap gets a new NAK (rxe
// check_psn: sent_psn_nak).
func TestRCSequenceError(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mem := tb.Mem(t, 64, AllAccess)
	fill(mem.Buf, 0xee)
	c.PostRecv(t, 1, mem.SGE(0, 16))
	c.PostRecv(t, 2, mem.SGE(16, 16))
	epsn := c.SendPSN

	before := tb.Drops()
	c.Send(t, Pkt{Op: wire.RCSendOnly, PSN: psnp(epsn.Add(2)), AckReq: true, Payload: []byte("ahead")})
	c.Expect(t, NAK(wire.NAKPSNSequenceError, epsn).WithMSN(0))
	require.Equal(t, map[string]uint64{DropOutOfSequence: 1}, tb.DropDelta(before))

	// The same gap: dropped silently, every one counted.
	tb.ExpectDropped(t, DropOutOfSequence, func() {
		c.Send(t, Pkt{Op: wire.RCSendOnly, PSN: psnp(epsn.Add(3)), AckReq: true, Payload: []byte("later")})
	})
	tb.ExpectDropped(t, DropOutOfSequence, func() {
		c.Send(t, Pkt{Op: wire.RCRDMAWriteOnly, PSN: psnp(epsn.Add(1)), AckReq: true, RETH: mem.RETH(40, 4), Payload: []byte("nope")})
	})
	c.RecvCQ.RequireEmpty(t)
	untouched(t, mem.Buf, 0xee)

	// The expected PSN is accepted.
	c.Send(t, Pkt{Op: wire.RCSendOnly, PSN: psnp(epsn), AckReq: true, Payload: []byte("in order")})
	c.Expect(t, ACK(epsn).WithMSN(1))
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
	require.Equal(t, "in order", string(mem.Buf[:8]))

	// A new gap is NAKed again, once.
	c.Send(t, Pkt{Op: wire.RCSendOnly, PSN: psnp(epsn.Add(5)), AckReq: true, Payload: []byte("gap")})
	c.Expect(t, NAK(wire.NAKPSNSequenceError, epsn.Add(1)).WithMSN(1))
	c.SendPSN = epsn.Add(1)
	c.Barrier(t)
}

// IBTA 9.7.5.1.3 (duplicate requests), C9-105 (as cited by rxe's
// duplicate_request): a duplicate SEND or WRITE is acknowledged again
// (with the last PSN acknowledged) but not executed again: no receive
// WQE is consumed and no memory written.
func TestRCDuplicateSendAndWriteReAcked(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mem := tb.Mem(t, 128, AllAccess)
	c.PostRecv(t, 1, mem.SGE(0, 32))
	c.PostRecv(t, 2, mem.SGE(32, 32))
	sendPSN := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("original send")})
	c.Expect(t, ACK(sendPSN).WithMSN(1))
	writePSN := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCRDMAWriteOnly, AckReq: true, RETH: mem.RETH(64, 8), Payload: []byte("original")})
	c.Expect(t, ACK(writePSN).WithMSN(2))
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)

	before := tb.Drops()
	c.Send(t, Pkt{Op: wire.RCSendOnly, PSN: psnp(sendPSN), AckReq: true, Payload: []byte("DUPLICATE SEND")})
	c.Expect(t, ACK(writePSN).WithMSN(2))
	c.Send(t, Pkt{Op: wire.RCRDMAWriteOnly, PSN: psnp(writePSN), AckReq: true, RETH: mem.RETH(64, 8), Payload: []byte("DUPLICAT")})
	c.Expect(t, ACK(writePSN).WithMSN(2))
	require.Equal(t, map[string]uint64{DropDuplicate: 2}, tb.DropDelta(before))
	tb.ExpectNothing(t)
	c.RecvCQ.RequireEmpty(t)
	require.Equal(t, "original send", string(mem.Buf[:13]))
	require.Equal(t, "original", string(mem.Buf[64:72]))
	require.Zero(t, mem.Buf[32], "the second receive buffer was written")
}

// IBTA 9.7.5.1.3: a duplicate RDMA READ is executed again from memory
// (its responses carry what the memory holds now and the original MSN),
// and a duplicate naming a later PSN of the READ gets only the responses
// from that PSN on.
func TestRCDuplicateReadAnsweredFromMemory(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mtu := c.MTU()
	mem := tb.Mem(t, 4096, AllAccess)
	copy(mem.Buf, pattern(3*mtu, 1))
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, AckReq: true, RETH: mem.RETH(0, 3*mtu)})
	for i := range 3 {
		c.Expect(t, Match{PSN: P(psn.Add(uint32(i))), Payload: mem.Buf[i*mtu : (i+1)*mtu]})
	}
	// The memory changes; the duplicate reads it again.
	newData := pattern(3*mtu, 77)
	copy(mem.Buf, newData)
	c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, PSN: psnp(psn), AckReq: true, RETH: mem.RETH(0, 3*mtu)})
	c.Expect(t, Match{Op: P(wire.RCRDMAReadResponseFirst), PSN: P(psn), MSN: P(uint32(1)), Payload: newData[:mtu]})
	c.Expect(t, Match{Op: P(wire.RCRDMAReadResponseMiddle), PSN: P(psn.Add(1)), Payload: newData[mtu : 2*mtu]})
	c.Expect(t, Match{Op: P(wire.RCRDMAReadResponseLast), PSN: P(psn.Add(2)), MSN: P(uint32(1)), Payload: newData[2*mtu:]})
	// A duplicate for the rest of the READ, from its second PSN.
	c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, PSN: psnp(psn.Add(1)), AckReq: true, RETH: mem.RETH(mtu, 2*mtu)})
	c.Expect(t, Match{PSN: P(psn.Add(1)), Payload: newData[mtu : 2*mtu]})
	c.Expect(t, Match{PSN: P(psn.Add(2)), Payload: newData[2*mtu:]})
	tb.ExpectNothing(t)
}

// IBTA 9.7.5.1.3, 9.4.5: a duplicate atomic is not executed again: the
// responder replays the original value it remembered (responder
// resources, max_dest_rd_atomic) and the memory keeps the value of the
// single execution.
func TestRCDuplicateAtomicReplayed(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mem := tb.Mem(t, 16, AllAccess)
	putU64(mem.Buf, 10)
	psn := c.SendPSN
	req := Pkt{Op: wire.RCFetchAdd, AckReq: true, AtomicETH: &wire.AtomicETHFields{VirtualAddress: mem.VA(0), RKey: mem.RKey(), SwapAddData: 1}}
	c.Send(t, req)
	c.Expect(t, Match{Op: P(wire.RCAtomicAcknowledge), PSN: P(psn), AtomicAck: P(uint64(10)), MSN: P(uint32(1))})
	require.EqualValues(t, 11, getU64(mem.Buf))
	req.PSN = psnp(psn)
	for range 2 {
		c.Send(t, req)
		c.Expect(t, Match{Op: P(wire.RCAtomicAcknowledge), PSN: P(psn), AtomicAck: P(uint64(10)), MSN: P(uint32(1))})
	}
	require.EqualValues(t, 11, getU64(mem.Buf), "a duplicate atomic was executed again")
}

// IBTA 9.7.5.2.8 (RNR NAK), class B: a SEND with no receive WQE posted is
// answered with an RNR NAK of its PSN carrying the QP's min_rnr_timer,
// consumes nothing, and leaves the expected PSN where it was: the same
// SEND is accepted once a receive is posted.
func TestRCRNRNAK(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t, func(q *QPConfig) { q.MinRNRTimer = 14 })
	mem := tb.Mem(t, 64, AllAccess)
	fill(mem.Buf, 0xee)
	psn := c.SendPSN
	before := tb.Drops()
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("early")})
	c.Expect(t, RNRNAK(14, psn).WithMSN(0))
	require.Equal(t, map[string]uint64{DropRNR: 1}, tb.DropDelta(before))
	tb.ExpectNothing(t)
	c.RecvCQ.RequireEmpty(t)
	require.Equal(t, verbs.QPStateRTS.String(), c.State().String())

	c.PostRecv(t, 1, mem.SGE(0, 64))
	c.Send(t, Pkt{Op: wire.RCSendOnly, PSN: psnp(psn), AckReq: true, Payload: []byte("again")})
	c.Expect(t, ACK(psn).WithMSN(1))
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
	require.Equal(t, "again", string(mem.Buf[:5]))
}

// IBTA 9.7.5.2.8, rxe check_resource (RDMA WRITE with Immediate needs a
// receive WQE): with none posted it is answered with an RNR NAK and
// nothing is written; once a receive is posted it is executed.
func TestRCWriteWithImmediateRNR(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t, func(q *QPConfig) { q.MinRNRTimer = 3 })
	mem := tb.Mem(t, 64, AllAccess)
	fill(mem.Buf, 0xee)
	psn := c.SendPSN
	req := Pkt{Op: wire.RCRDMAWriteOnlyWithImm, AckReq: true, Imm: 8, RETH: mem.RETH(0, 4), Payload: []byte("data")}
	c.Send(t, req)
	c.Expect(t, RNRNAK(3, psn))
	tb.ExpectNothing(t)
	untouched(t, mem.Buf, 0xee)
	c.PostRecv(t, 1)
	req.PSN = psnp(psn)
	c.Send(t, req)
	c.Expect(t, ACK(psn).WithMSN(1))
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecvRDMAWithImm)
	require.Equal(t, "data", string(mem.Buf[:4]))
}

// IBTA 9.7.1: PSNs are 24 bits and wrap from 0xFFFFFF to 0; a message
// crossing the wrap is received in sequence.
func TestRCPSNWraps(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t, func(q *QPConfig) { q.RQPSN = 0xffffff })
	mtu := c.MTU()
	mem := tb.Mem(t, 4096, AllAccess)
	c.PostRecv(t, 1, mem.SGE(0, 4096))
	msg := pattern(mtu+5, 2)
	c.Send(t, Pkt{Op: wire.RCSendFirst, Payload: msg[:mtu]})
	require.EqualValues(t, 0, c.SendPSN)
	c.Send(t, Pkt{Op: wire.RCSendLast, AckReq: true, Payload: msg[mtu:]})
	c.Expect(t, ACK(0).WithMSN(1))
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
	require.Equal(t, msg, mem.Buf[:len(msg)])
}

// IBTA 10.3.1 (RTR: the responder is active): a QP in RTR executes and
// acknowledges requests before it is moved to RTS.
func TestRCResponderInRTR(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t, func(q *QPConfig) { q.State = verbs.QPStateRTR })
	mem := tb.Mem(t, 64, AllAccess)
	c.PostRecv(t, 1, mem.SGE(0, 64))
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("rtr")})
	c.Expect(t, ACK(psn).WithMSN(1))
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
}
