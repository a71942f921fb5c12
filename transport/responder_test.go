package transport

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// The responder alone (IBTA 9.7.5 for RC, 9.8 for UC and UD; rxe_resp.c):
// what request packets do to memory, receive WQEs and completions, and
// which acknowledgements they earn.

// postRecv posts a receive WQE of n bytes at off in the destination region.
func (h *qpt) postRecv(wrid uint64, off, n uint32) {
	h.rq.post(wrid, verbs.SGE{Addr: dstVA + uint64(off), Length: n, LKey: lkeyDst})
}

// requireAck checks that pkts is one acknowledgement of psn with the
// syndrome and MSN given.
func requireAck(t testing.TB, pkts []sent, psn uint32, syn wire.Syndrome, msn uint32) {
	t.Helper()
	require.Len(t, pkts, 1, "want one acknowledgement, got %v", ops(pkts))
	p := &pkts[0]
	require.Equal(t, wire.RCAcknowledge, p.op())
	require.Equal(t, psn, p.psn(), "acknowledged PSN")
	require.Equal(t, syn.String(), p.syn().String())
	require.Equal(t, msn, p.p.AETH.MSN(), "MSN")
	require.Equal(t, uint32(testPeerQPN), p.p.BTH.DestQP())
}

var ackSyn = wire.ACKSyndrome(wire.CreditsInvalid)

// TestResponderSend: a SEND message fills the oldest receive WQE, its
// packets placed in order across the scatter list (IBTA 9.4.1, 9.7.5.x;
// rxe's send_data_in); its last packet completes the receive with the
// message length, the immediate data and the SE bit (IBTA 9.2.2,
// 10.8.3); the AckReq of the last packet earns an ACK (IBTA 9.7.5.1)
// that is coalesced until Run (9.7.5.1.1), carrying the MSN, the count of
// completed messages.
func TestResponderSend(t *testing.T) {
	h := newRC(t)
	h.rq.post(7,
		verbs.SGE{Addr: dstVA, Length: 100, LKey: lkeyDst},
		verbs.SGE{Addr: dstVA + 1000, Length: 300, LKey: lkeyDst},
		verbs.SGE{Addr: dstVA + 5000, Length: 500, LKey: lkeyDst})
	h.postRecv(8, 0x8000, 64)
	data := pattern(5, 600)
	fx, pkts := h.receive(request(wire.RCSendFirst, testRQPSN), data[:256])
	require.Equal(t, Effects{}, fx)
	require.Empty(t, pkts)
	_, _ = h.receive(request(wire.RCSendMiddle, testRQPSN+1), data[256:512])
	require.Empty(t, h.rcq.wcs)
	last := request(wire.RCSendLastWithImmediate, testRQPSN+2)
	last.ImmDt = 0xfeed
	last.BTH.SolicitedEvent = true
	fx, pkts = h.receive(last, data[512:])
	require.Equal(t, Effects{Run: true, Delivered: true}, fx)
	require.Empty(t, pkts, "the ACK is coalesced until Run")
	require.Equal(t, []verbs.WC{{WRID: 7, Opcode: verbs.WCRecv, ByteLen: 600, QPNum: testQPN, SrcQP: testPeerQPN,
		WCFlags: verbs.WCFlagWithImm, ImmData: 0xfeed}}, h.rcq.wcs)
	require.Equal(t, []bool{true}, h.rcq.solicited)
	require.Equal(t, data[:100], h.dst[:100])
	require.Equal(t, data[100:400], h.dst[1000:1300])
	require.Equal(t, data[400:], h.dst[5000:5200])
	require.Zero(t, h.dst[5200])
	require.Len(t, h.rq.q, 1)

	_, pkts = h.run()
	requireAck(t, pkts, testRQPSN+2, ackSyn, 1)
	_, pkts = h.run()
	require.Empty(t, pkts, "one ACK")

	// SEND Only of zero bytes, then a flush by FlushAck.
	fx, _ = h.receive(request(wire.RCSendOnly, testRQPSN+3), nil)
	require.True(t, fx.Delivered)
	h.q.FlushAck(h.env())
	requireAck(t, h.out.take(), testRQPSN+3, ackSyn, 2)
	require.Equal(t, uint32(0), h.rcq.wcs[1].ByteLen)
	h.requireDrops(nil)
}

// TestResponderCoalescedAck: requests that ask for acknowledgements
// between two Runs earn one ACK, of the last (IBTA 9.7.5.1.1); packets
// without AckReq earn none.
func TestResponderCoalescedAck(t *testing.T) {
	h := newRC(t)
	for i := range 3 {
		h.postRecv(uint64(i), uint32(i)*100, 100)
		_, pkts := h.receive(request(wire.RCSendOnly, testRQPSN+uint32(i)), pattern(1, 10))
		require.Empty(t, pkts)
	}
	w := withRETH(request(wire.RCRDMAWriteFirst, testRQPSN+3), memVA, rkeyMem, 2*testMTU)
	_, _ = h.receive(w, pattern(0, testMTU))
	_, pkts := h.run()
	requireAck(t, pkts, testRQPSN+2, ackSyn, 3)
	last := request(wire.RCRDMAWriteLast, testRQPSN+4)
	last.BTH.AckReq = false
	fx, _ := h.receive(last, pattern(0, testMTU))
	require.False(t, fx.Run)
	_, pkts = h.run()
	require.Empty(t, pkts, "no AckReq, no ACK")
	require.Equal(t, uint64(1), h.stats.Snapshot().AcksSent)
}

// TestResponderWrite: an RDMA WRITE places its packets at the RETH's
// address, through the R_Key (IBTA 9.4.2, 9.7.5.x; rxe's write_data_in);
// it consumes no receive WQE unless it carries immediate data, which
// completes one as IBV_WC_RECV_RDMA_WITH_IMM with the message length
// (ibv_poll_cq(3)). A zero-length WRITE checks no R_Key (IBTA 9.4.2:
// "if the DMA length is zero the R_Key is not validated"; rxe's
// check_rkey).
func TestResponderWrite(t *testing.T) {
	h := newRC(t)
	data := pattern(2, 600)
	_, _ = h.receive(withRETH(request(wire.RCRDMAWriteFirst, testRQPSN), memVA+100, rkeyMem, 600), data[:256])
	_, _ = h.receive(request(wire.RCRDMAWriteMiddle, testRQPSN+1), data[256:512])
	fx, _ := h.receive(request(wire.RCRDMAWriteLast, testRQPSN+2), data[512:])
	require.Equal(t, Effects{Run: true}, fx)
	require.Equal(t, data, h.mem0[100:700])
	require.Zero(t, h.mem0[700])
	require.Empty(t, h.rcq.wcs)
	_, pkts := h.run()
	requireAck(t, pkts, testRQPSN+2, ackSyn, 1)

	h.postRecv(9, 0, 16)
	wi := withRETH(request(wire.RCRDMAWriteOnlyWithImm, testRQPSN+3), memVA+2000, rkeyMem, 5)
	wi.ImmDt = 0x1234
	fx, _ = h.receive(wi, data[:5])
	require.Equal(t, Effects{Run: true, Delivered: true}, fx)
	require.Equal(t, []verbs.WC{{WRID: 9, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: 5, QPNum: testQPN, SrcQP: testPeerQPN,
		WCFlags: verbs.WCFlagWithImm, ImmData: 0x1234}}, h.rcq.take())
	require.Equal(t, data[:5], h.mem0[2000:2005])
	require.Zero(t, h.dst[0], "the receive buffer is untouched")

	fx, _ = h.receive(withRETH(request(wire.RCRDMAWriteOnly, testRQPSN+4), 0, 0xbad, 0), nil)
	require.Equal(t, Effects{Run: true}, fx)
	_, pkts = h.run()
	requireAck(t, pkts, testRQPSN+4, ackSyn, 3)
	h.requireDrops(nil)
}

// readResponses runs the QP one packet per Run until the READ responses
// are all built, checking that More is reported until then.
func (h *qpt) readResponses() []sent {
	h.t.Helper()
	var all []sent
	for i := 0; ; i++ {
		require.Less(h.t, i, 100)
		fx, pkts := h.runBudget(1)
		require.LessOrEqual(h.t, len(pkts), 1)
		all = append(all, pkts...)
		if !fx.More {
			return all
		}
	}
}

// TestResponderReadInPlace: with an emitter that takes payloads where
// they lie (Env.Gather), a READ response of at least gatherMin bytes is
// emitted with its payload as a slice of the region, as an RC requester's
// packets are; a shorter one is copied. Both are byte-exact with a good
// ICRC (the recorder checks the assembled packet's).
func TestResponderReadInPlace(t *testing.T) {
	p := defaultParams(verbs.QPTypeRC)
	p.MTU = 4096
	h := newQPT(t, p)
	h.gather = true
	copy(h.mem0, pattern(5, memSize))
	_, _ = h.receive(withRETH(request(wire.RCRDMAReadRequest, testRQPSN), memVA+10, rkeyMem, 4096+1000), nil)
	pkts := h.readResponses()
	require.Len(t, pkts, 2)
	end := h.mem0[:cap(h.mem0)]
	require.NotNil(t, pkts[0].inPlace, "a full response leaves from the region")
	b := pkts[0].inPlace[:cap(pkts[0].inPlace)]
	require.Same(t, &end[len(end)-1], &b[len(b)-1], "the region's own bytes")
	require.Nil(t, pkts[1].inPlace, "1000 bytes: copied")
	require.Equal(t, h.mem0[10:4106], pkts[0].p.Payload)
	require.Equal(t, h.mem0[4106:5106], pkts[1].p.Payload)
}

// TestResponderRead: an RDMA READ is answered by Run, a Budget at a time
// (More until done), with READ responses First/Middle/Last or Only from
// the request's PSN on (IBTA 9.4.3, 9.7.4.1.3, table 38); First, Last and
// Only carry an AETH with the MSN, which counts the READ when it is
// executed (C9-148); the bytes are read from the region when each
// response is built. The next request's PSN follows the READ's response
// PSNs.
func TestResponderRead(t *testing.T) {
	h := newRC(t)
	copy(h.mem0, pattern(4, memSize))
	fx, pkts := h.receive(withRETH(request(wire.RCRDMAReadRequest, testRQPSN), memVA+10, rkeyMem, 1000), nil)
	require.Equal(t, Effects{Run: true}, fx)
	require.Empty(t, pkts, "responses are built by Run")
	pkts = h.readResponses()
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseMiddle,
		wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast}, ops(pkts))
	require.Equal(t, seq(testRQPSN, 4), psns(pkts))
	var got []byte
	for i := range pkts {
		p := &pkts[i]
		require.Equal(t, i == 0 || i == 3, p.p.AETH != nil, "AETH on First and Last")
		if p.p.AETH != nil {
			require.Equal(t, ackSyn, p.p.AETH.Syndrome())
			require.Equal(t, uint32(1), p.p.AETH.MSN())
		}
		got = append(got, p.p.Payload...)
	}
	require.Equal(t, h.mem0[10:1010], got)

	// Only, then a zero-length READ; then a SEND whose PSN follows.
	_, _ = h.receive(withRETH(request(wire.RCRDMAReadRequest, testRQPSN+4), memVA, rkeyMem, 10), nil)
	_, pkts = h.run()
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadResponseOnly}, ops(pkts))
	require.Equal(t, uint32(2), pkts[0].p.AETH.MSN())
	require.Equal(t, h.mem0[:10], pkts[0].p.Payload)
	_, _ = h.receive(withRETH(request(wire.RCRDMAReadRequest, testRQPSN+5), 0, 0xbad, 0), nil)
	_, pkts = h.run()
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadResponseOnly}, ops(pkts))
	require.Empty(t, pkts[0].p.Payload)
	h.postRecv(1, 0, 8)
	fx, _ = h.receive(request(wire.RCSendOnly, testRQPSN+6), nil)
	require.True(t, fx.Delivered)
	h.requireDrops(nil)
}

// TestResponderAtomic: an ATOMIC is executed once, on the 8-byte word at
// its address, and answered with an ATOMIC acknowledge carrying the
// original value (IBTA 9.4.5); a duplicate is answered again with the
// remembered value and is not executed again (IBTA 9.7.5.1.3, C9-105;
// rxe's duplicate_request).
func TestResponderAtomic(t *testing.T) {
	h := newRC(t)
	word := h.mem0[8:16]
	binary.NativeEndian.PutUint64(word, 100)
	fa := request(wire.RCFetchAdd, testRQPSN)
	fa.AtomicETH = wire.AtomicETHFields{VirtualAddress: memVA + 8, RKey: rkeyMem, SwapAddData: 5}
	fx, pkts := h.receive(fa, nil)
	require.Equal(t, Effects{}, fx)
	require.Len(t, pkts, 1)
	require.Equal(t, wire.RCAtomicAcknowledge, pkts[0].op())
	require.Equal(t, uint32(testRQPSN), pkts[0].psn())
	require.Equal(t, uint64(100), pkts[0].p.AtomicAckETH.OriginalRemoteData())
	require.Equal(t, uint32(1), pkts[0].p.AETH.MSN())
	require.Equal(t, uint64(105), u64(word))

	cs := func(psn uint32, compare, swap uint64) wire.Headers {
		hd := request(wire.RCCompareSwap, psn)
		hd.AtomicETH = wire.AtomicETHFields{VirtualAddress: memVA + 8, RKey: rkeyMem, SwapAddData: swap, CompareData: compare}
		return hd
	}
	_, pkts = h.receive(cs(testRQPSN+1, 105, 7), nil)
	require.Equal(t, uint64(105), pkts[0].p.AtomicAckETH.OriginalRemoteData())
	require.Equal(t, uint64(7), u64(word))
	_, pkts = h.receive(cs(testRQPSN+2, 1, 99), nil)
	require.Equal(t, uint64(7), pkts[0].p.AtomicAckETH.OriginalRemoteData())
	require.Equal(t, uint64(7), u64(word), "no swap when the compare fails")

	// Duplicates replay.
	_, pkts = h.receive(fa, nil)
	require.Len(t, pkts, 1)
	require.Equal(t, uint32(testRQPSN), pkts[0].psn())
	require.Equal(t, uint64(100), pkts[0].p.AtomicAckETH.OriginalRemoteData())
	require.Equal(t, uint32(1), pkts[0].p.AETH.MSN())
	_, pkts = h.receive(cs(testRQPSN+1, 105, 7), nil)
	require.Equal(t, uint64(105), pkts[0].p.AtomicAckETH.OriginalRemoteData())
	require.Equal(t, uint64(7), u64(word), "not executed again")
	h.requireDrops(map[DropReason]uint64{DropDuplicate: 2})
	require.Equal(t, uint64(2), h.stats.Snapshot().DuplicatesAnswered)
}

// TestResponderSequenceError: a request beyond the expected PSN is
// dropped and NAKed with a PSN sequence error naming the expected PSN,
// once per gap (IBTA 9.7.5.2.1/9.7.5.2.2; rxe's check_psn with
// sent_psn_nak); any ACK owed goes first. Once the expected packet
// arrives, a new gap is NAKed again.
func TestResponderSequenceError(t *testing.T) {
	h := newRC(t)
	for i := range 4 {
		h.postRecv(uint64(i), uint32(i)*16, 16)
	}
	_, _ = h.receive(request(wire.RCSendOnly, testRQPSN), nil)
	_, pkts := h.receive(request(wire.RCSendOnly, testRQPSN+2), nil)
	require.Len(t, pkts, 2)
	requireAck(t, pkts[:1], testRQPSN, ackSyn, 1)
	requireAck(t, pkts[1:], testRQPSN+1, wire.NAKSyndrome(wire.NAKPSNSequenceError), 1)
	for _, psn := range []uint32{testRQPSN + 2, testRQPSN + 3, testRQPSN + 9} {
		fx, pkts := h.receive(request(wire.RCSendOnly, psn), nil)
		require.Equal(t, Effects{}, fx)
		require.Empty(t, pkts, "one NAK per gap")
	}
	require.Len(t, h.rcq.wcs, 1)

	_, _ = h.receive(request(wire.RCSendOnly, testRQPSN+1), nil)
	_, _ = h.receive(request(wire.RCSendOnly, testRQPSN+2), nil)
	_, pkts = h.receive(request(wire.RCSendOnly, testRQPSN+4), nil)
	require.Len(t, pkts, 2)
	requireAck(t, pkts[1:], testRQPSN+3, wire.NAKSyndrome(wire.NAKPSNSequenceError), 3)
	h.requireDrops(map[DropReason]uint64{DropOutOfSequence: 5})
	require.Equal(t, uint64(2), h.stats.Snapshot().SeqNAKsSent)
}

// TestResponderDuplicate: a duplicate SEND or WRITE is not executed again
// and is acknowledged with the PSN before the expected one (IBTA
// 9.7.5.1.3, C9-105; rxe's duplicate_request: send_ack(prev_psn)); a
// duplicate READ is answered again from its PSN, reading the memory
// again.
func TestResponderDuplicate(t *testing.T) {
	h := newRC(t)
	h.postRecv(1, 0, 16)
	h.postRecv(2, 16, 16)
	_, _ = h.receive(request(wire.RCSendOnly, testRQPSN), pattern(1, 4))
	_, _ = h.receive(withRETH(request(wire.RCRDMAWriteOnly, testRQPSN+1), memVA, rkeyMem, 4), pattern(1, 4))
	_, _ = h.run()
	h.rcq.take()

	fx, pkts := h.receive(request(wire.RCSendOnly, testRQPSN), pattern(9, 4))
	require.Equal(t, Effects{Run: true}, fx)
	require.Empty(t, pkts)
	_, _ = h.receive(withRETH(request(wire.RCRDMAWriteOnly, testRQPSN+1), memVA, rkeyMem, 4), pattern(9, 4))
	_, pkts = h.run()
	requireAck(t, pkts, testRQPSN+1, ackSyn, 2)
	require.Empty(t, h.rcq.wcs)
	require.Len(t, h.rq.q, 1)
	require.Equal(t, pattern(1, 4), h.dst[:4])
	require.Equal(t, pattern(1, 4), h.mem0[:4])

	copy(h.mem0[1000:], pattern(3, 600))
	rd := withRETH(request(wire.RCRDMAReadRequest, testRQPSN+2), memVA+1000, rkeyMem, 600)
	_, _ = h.receive(rd, nil)
	_, pkts = h.run()
	require.Len(t, pkts, 3)
	copy(h.mem0[1000:], pattern(7, 600))
	// Asked again from its second response on.
	dup := withRETH(request(wire.RCRDMAReadRequest, testRQPSN+3), memVA+1000+testMTU, rkeyMem, 600-testMTU)
	fx, _ = h.receive(dup, nil)
	require.True(t, fx.Run)
	_, pkts = h.run()
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast}, ops(pkts))
	require.Equal(t, seq(testRQPSN+3, 2), psns(pkts))
	require.Equal(t, pattern(7, 600)[testMTU:], append(pkts[0].p.Payload, pkts[1].p.Payload...))
	h.requireDrops(map[DropReason]uint64{DropDuplicate: 3})
}

// TestResponderRNR: a SEND (or WRITE with immediate) with no receive WQE
// to take is answered with an RNR NAK carrying min_rnr_timer (IBTA
// 9.7.5.2.8; rxe_resp.c get_rwqe failing, RESPST_ERR_RNR) and not
// executed: nothing is written; the packets after it are dropped without
// another NAK; the same PSN is accepted once a receive is posted.
func TestResponderRNR(t *testing.T) {
	h := newRC(t)
	_, pkts := h.receive(request(wire.RCSendFirst, testRQPSN), pattern(0, testMTU))
	requireAck(t, pkts, testRQPSN, wire.RNRNAKSyndrome(12), 0)
	_, pkts = h.receive(request(wire.RCSendLast, testRQPSN+1), pattern(0, 8))
	require.Empty(t, pkts)
	h.requireDrops(map[DropReason]uint64{DropRNR: 1, DropOutOfSequence: 1})
	require.Equal(t, uint64(1), h.stats.Snapshot().RNRNAKsSent)

	h.postRecv(1, 0, 1024)
	_, _ = h.receive(request(wire.RCSendFirst, testRQPSN), pattern(0, testMTU))
	fx, _ := h.receive(request(wire.RCSendLast, testRQPSN+1), pattern(0, 8))
	require.True(t, fx.Delivered)

	wi := withRETH(request(wire.RCRDMAWriteOnlyWithImm, testRQPSN+2), memVA, rkeyMem, 8)
	_, pkts = h.receive(wi, pattern(5, 8))
	require.Len(t, pkts, 2, "the owed ACK, then the RNR NAK")
	requireAck(t, pkts[1:], testRQPSN+2, wire.RNRNAKSyndrome(12), 1)
	require.Zero(t, h.mem0[0], "nothing of it is written")
}

// responderError is a case of a request the responder refuses.
type responderError struct {
	name string
	// setup may change the QP before the packets are received.
	setup func(h *qpt)
	// pkts are received in order; the last is refused.
	pkts   []wire.Headers
	sizes  []int
	nak    wire.NAKCode
	status verbs.WCStatus
	drop   DropReason
	// recvs are the receive completions after the failure was applied.
	recvs []string
}

func (tc *responderError) run(t *testing.T) {
	h := newRC(t)
	h.postRecv(1, 0, 600)
	if tc.setup != nil {
		tc.setup(h)
	}
	var fx Effects
	var pkts []sent
	for i, hd := range tc.pkts {
		fx, pkts = h.receive(hd, pattern(byte(i), tc.sizes[i]))
		if i < len(tc.pkts)-1 {
			require.Equal(t, FailNone, fx.Fail, "packet %d", i)
			require.Empty(t, pkts)
		}
	}
	last := uint32(tc.pkts[len(tc.pkts)-1].BTH.PSN)
	requireAck(t, pkts, last, wire.NAKSyndrome(tc.nak), 0)
	require.Equal(t, FailRecv, fx.Fail)
	require.Equal(t, tc.status, fx.Status)
	h.requireDrops(map[DropReason]uint64{tc.drop: 1})
	h.applyFail(fx)
	require.Equal(t, tc.recvs, wcs(h.rcq.take()))
	var w verbs.RecvWQE
	require.False(t, h.q.TakeRecvInProgress(&w))
	// An ERR QP takes nothing more.
	_, pkts = h.receive(request(wire.RCSendOnly, last+1), nil)
	require.Empty(t, pkts)
}

// TestResponderInvalidRequest: requests the responder cannot execute are
// NAKed with Invalid Request, the receive in progress completes with the
// error, and the QP goes to ERR (IBTA 9.7.5.2.4 and 9.9.3.1 class C;
// rxe's check_op_seq, check_op_valid, check_length and their
// do_class_ac_error): an opcode out of sequence, a packet whose length
// does not fit its position, a WRITE whose packets do not add up to its
// DMA length, an operation the QP's access flags or max_dest_rd_atomic
// do not allow, an unsupported opcode. A SEND longer than its receive
// buffer completes the receive with IBV_WC_LOC_LEN_ERR (ibv_post_recv(3)).
func TestResponderInvalidRequest(t *testing.T) {
	first := func(psn uint32) wire.Headers { return request(wire.RCSendFirst, psn) }
	wfirst := func(psn, n uint32) wire.Headers {
		return withRETH(request(wire.RCRDMAWriteFirst, psn), memVA, rkeyMem, n)
	}
	noAccess := func(f verbs.AccessFlags) func(h *qpt) { return func(h *qpt) { h.q.P.Access &^= f } }
	rd := withRETH(request(wire.RCRDMAReadRequest, testRQPSN), memVA, rkeyMem, 8)
	fa := request(wire.RCFetchAdd, testRQPSN)
	fa.AtomicETH = wire.AtomicETHFields{VirtualAddress: memVA, RKey: rkeyMem}
	misaligned := fa
	misaligned.AtomicETH.VirtualAddress = memVA + 4
	const inv = wire.NAKInvalidRequest
	const remInv = verbs.WCRemInvReqErr
	none := []string{}
	inProgress := []string{"1:" + remInv.String()}
	tests := []responderError{
		{name: "SEND Middle without First", pkts: []wire.Headers{request(wire.RCSendMiddle, testRQPSN)},
			sizes: []int{testMTU}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "SEND Last without First", pkts: []wire.Headers{request(wire.RCSendLast, testRQPSN)},
			sizes: []int{8}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "WRITE Middle without First", pkts: []wire.Headers{request(wire.RCRDMAWriteMiddle, testRQPSN)},
			sizes: []int{testMTU}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "SEND First then SEND Only", pkts: []wire.Headers{first(testRQPSN), request(wire.RCSendOnly, testRQPSN+1)},
			sizes: []int{testMTU, 8}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: inProgress},
		{name: "SEND First then WRITE First", pkts: []wire.Headers{first(testRQPSN), wfirst(testRQPSN+1, 600)},
			sizes: []int{testMTU, testMTU}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: inProgress},
		{name: "SEND First then WRITE Last", pkts: []wire.Headers{first(testRQPSN), request(wire.RCRDMAWriteLast, testRQPSN+1)},
			sizes: []int{testMTU, 8}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: inProgress},
		{name: "WRITE First then SEND Last", pkts: []wire.Headers{wfirst(testRQPSN, 600), request(wire.RCSendLast, testRQPSN+1)},
			sizes: []int{testMTU, 8}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "SEND First then READ", pkts: []wire.Headers{first(testRQPSN), withRETH(request(wire.RCRDMAReadRequest, testRQPSN+1), memVA, rkeyMem, 8)},
			sizes: []int{testMTU, 0}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: inProgress},
		{name: "SEND First shorter than the MTU", pkts: []wire.Headers{first(testRQPSN)},
			sizes: []int{testMTU - 4}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "SEND Middle longer than the MTU", pkts: []wire.Headers{first(testRQPSN), request(wire.RCSendMiddle, testRQPSN+1)},
			sizes: []int{testMTU, testMTU + 4}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: inProgress},
		{name: "SEND Only longer than the MTU", pkts: []wire.Headers{request(wire.RCSendOnly, testRQPSN)},
			sizes: []int{testMTU + 4}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "SEND Last empty", pkts: []wire.Headers{first(testRQPSN), request(wire.RCSendLast, testRQPSN+1)},
			sizes: []int{testMTU, 0}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: inProgress},
		{name: "WRITE longer than its DMA length", pkts: []wire.Headers{wfirst(testRQPSN, 300), request(wire.RCRDMAWriteLast, testRQPSN+1)},
			sizes: []int{testMTU, 48}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "WRITE shorter than its DMA length", pkts: []wire.Headers{wfirst(testRQPSN, 600), request(wire.RCRDMAWriteLast, testRQPSN+1)},
			sizes: []int{testMTU, 8}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "WRITE First whose DMA length fits one packet", pkts: []wire.Headers{wfirst(testRQPSN, testMTU)},
			sizes: []int{testMTU}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "WRITE Only with DMA length beyond 2^31", pkts: []wire.Headers{withRETH(request(wire.RCRDMAWriteOnly, testRQPSN), memVA, rkeyMem, 1<<31+1)},
			sizes: []int{8}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "SEND longer than the receive buffer", pkts: []wire.Headers{first(testRQPSN), request(wire.RCSendMiddle, testRQPSN+1), request(wire.RCSendLast, testRQPSN+2)},
			sizes: []int{testMTU, testMTU, 100}, nak: inv, status: verbs.WCLocLenErr, drop: DropInvalidRequest,
			recvs: []string{"1:" + verbs.WCLocLenErr.String()}},
		{name: "WRITE without REMOTE_WRITE on the QP", setup: noAccess(verbs.AccessRemoteWrite),
			pkts:  []wire.Headers{withRETH(request(wire.RCRDMAWriteOnly, testRQPSN), memVA, rkeyMem, 8)},
			sizes: []int{8}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "READ without REMOTE_READ on the QP", setup: noAccess(verbs.AccessRemoteRead), pkts: []wire.Headers{rd},
			sizes: []int{0}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "ATOMIC without REMOTE_ATOMIC on the QP", setup: noAccess(verbs.AccessRemoteAtomic), pkts: []wire.Headers{fa},
			sizes: []int{0}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "READ with max_dest_rd_atomic 0", setup: func(h *qpt) { h.q.P.MaxDestRdAtomic = 0 }, pkts: []wire.Headers{rd},
			sizes: []int{0}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "misaligned ATOMIC", pkts: []wire.Headers{misaligned},
			sizes: []int{0}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "FLUSH (unsupported)", pkts: []wire.Headers{withRETH(request(wire.RCFlush, testRQPSN), memVA, rkeyMem, 8)},
			sizes: []int{0}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
		{name: "ATOMIC WRITE (unsupported)", pkts: []wire.Headers{withRETH(request(wire.RCAtomicWrite, testRQPSN), memVA, rkeyMem, 8)},
			sizes: []int{8}, nak: inv, status: remInv, drop: DropInvalidRequest, recvs: none},
	}
	for i := range tests {
		t.Run(tests[i].name, tests[i].run)
	}
}

// TestResponderRemoteAccessError: an R_Key that names no region, a
// region of another PD, one without the right the operation needs, or a
// range beyond the region is a remote access error: NAKed, and the QP
// goes to ERR (IBTA 9.7.5.2.6 remote access error, class C; rxe's
// check_rkey -> RESPST_ERR_RKEY_VIOLATION).
func TestResponderRemoteAccessError(t *testing.T) {
	setup := func(h *qpt) {
		h.mem.reg(0x501, testPD+1, 0x50000, 4096, verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		h.mem.reg(0x502, testPD, 0x60000, 4096, verbs.AccessRemoteRead)
		h.mem.reg(0x503, testPD, 0x70000, 4096, verbs.AccessRemoteWrite)
	}
	write := func(va uint64, rkey uint32) wire.Headers {
		return withRETH(request(wire.RCRDMAWriteOnly, testRQPSN), va, rkey, 8)
	}
	read := func(va uint64, rkey uint32) wire.Headers {
		return withRETH(request(wire.RCRDMAReadRequest, testRQPSN), va, rkey, 8)
	}
	atomicTo := func(va uint64, rkey uint32) wire.Headers {
		hd := request(wire.RCCompareSwap, testRQPSN)
		hd.AtomicETH = wire.AtomicETHFields{VirtualAddress: va, RKey: rkey}
		return hd
	}
	const acc = wire.NAKRemoteAccessError
	none := []string{}
	tests := []responderError{
		{name: "WRITE, unknown R_Key", pkts: []wire.Headers{write(memVA, 0x999)}, sizes: []int{8}},
		{name: "WRITE, another PD's region", pkts: []wire.Headers{write(0x50000, 0x501)}, sizes: []int{8}},
		{name: "WRITE, region without REMOTE_WRITE", pkts: []wire.Headers{write(0x60000, 0x502)}, sizes: []int{8}},
		{name: "WRITE, beyond the region", pkts: []wire.Headers{write(memVA+memSize-4, rkeyMem)}, sizes: []int{8}},
		{name: "WRITE, below the region", pkts: []wire.Headers{write(memVA-4, rkeyMem)}, sizes: []int{8}},
		{name: "WRITE First, DMA length beyond the region", pkts: []wire.Headers{
			withRETH(request(wire.RCRDMAWriteFirst, testRQPSN), memVA+memSize-testMTU, rkeyMem, 2*testMTU)}, sizes: []int{testMTU}},
		{name: "READ, unknown R_Key", pkts: []wire.Headers{read(memVA, 0x999)}, sizes: []int{0}},
		{name: "READ, region without REMOTE_READ", pkts: []wire.Headers{read(0x70000, 0x503)}, sizes: []int{0}},
		{name: "READ, beyond the region", pkts: []wire.Headers{read(memVA+memSize-4, rkeyMem)}, sizes: []int{0}},
		{name: "ATOMIC, unknown R_Key", pkts: []wire.Headers{atomicTo(memVA, 0x999)}, sizes: []int{0}},
		{name: "ATOMIC, region without REMOTE_ATOMIC", pkts: []wire.Headers{atomicTo(0x60000, 0x502)}, sizes: []int{0}},
		{name: "ATOMIC, another PD's region", pkts: []wire.Headers{atomicTo(0x50000, 0x501)}, sizes: []int{0}},
	}
	for i := range tests {
		tc := &tests[i]
		tc.setup, tc.nak, tc.status, tc.drop, tc.recvs = setup, acc, verbs.WCRemAccessErr, DropRemoteAccess, none
		t.Run(tc.name, tc.run)
	}
}

// TestResponderRegionGoneMidWrite: a region deregistered during a
// multi-packet WRITE fails the packet that finds it gone: a remote access
// error NAK, nothing of that packet or after it is written (rxe
// re-checks the MR per packet: rxe_recheck_mr).
func TestResponderRegionGoneMidWrite(t *testing.T) {
	h := newRC(t)
	_, _ = h.receive(withRETH(request(wire.RCRDMAWriteFirst, testRQPSN), memVA, rkeyMem, 3*testMTU), pattern(1, testMTU))
	mem := h.mem0
	h.mem.dereg(rkeyMem)
	fx, pkts := h.receive(request(wire.RCRDMAWriteMiddle, testRQPSN+1), pattern(2, testMTU))
	requireAck(t, pkts, testRQPSN+1, wire.NAKSyndrome(wire.NAKRemoteAccessError), 0)
	require.Equal(t, FailRecv, fx.Fail)
	require.Equal(t, verbs.WCRemAccessErr, fx.Status)
	require.Equal(t, pattern(1, testMTU), mem[:testMTU])
	require.Equal(t, make([]byte, 2*testMTU), mem[testMTU:3*testMTU], "nothing written after")
	h.applyFail(fx)
	_, _ = h.receive(request(wire.RCRDMAWriteLast, testRQPSN+2), pattern(3, testMTU))
	require.Equal(t, make([]byte, 2*testMTU), mem[testMTU:3*testMTU])
}

// TestResponderRegionGoneMidRead: a region deregistered while a READ is
// being answered ends the READ with a remote access error NAK at the
// response it could not build; nothing stale is sent (IBTA 9.7.5.2.6,
// rxe's read_reply: rxe_recheck_mr -> RESPST_ERR_RKEY_VIOLATION).
func TestResponderRegionGoneMidRead(t *testing.T) {
	h := newRC(t)
	_, _ = h.receive(withRETH(request(wire.RCRDMAReadRequest, testRQPSN), memVA, rkeyMem, 4*testMTU), nil)
	fx, pkts := h.runBudget(1)
	require.True(t, fx.More)
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadResponseFirst}, ops(pkts))
	h.mem.dereg(rkeyMem)
	fx, pkts = h.run()
	requireAck(t, pkts, testRQPSN+1, wire.NAKSyndrome(wire.NAKRemoteAccessError), 1)
	require.Equal(t, FailRecv, fx.Fail)
	require.Equal(t, verbs.WCRemAccessErr, fx.Status)
	require.False(t, fx.More)
	_, pkts = h.run()
	require.Empty(t, pkts)
	h.requireDrops(map[DropReason]uint64{DropRemoteAccess: 1})
}

// TestResponderHeldBehindRead: requests that arrive while a READ is
// being answered wait (Effects.Held) and are executed after it, in order
// (rxe answers a READ before it looks at the next request; IBTA 9.5
// ordering); a duplicate of that READ restarts its responses at the
// duplicate's PSN (rxe's duplicate_request on the current resource).
func TestResponderHeldBehindRead(t *testing.T) {
	h := newRC(t)
	copy(h.mem0, pattern(6, 4*testMTU))
	h.postRecv(1, 0, 64)
	rd := withRETH(request(wire.RCRDMAReadRequest, testRQPSN), memVA, rkeyMem, 4*testMTU)
	_, _ = h.receive(rd, nil)
	_, pkts := h.runBudget(1)
	require.Equal(t, []uint32{testRQPSN}, psns(pkts))
	_, pkts = h.runBudget(1)
	require.Equal(t, []uint32{testRQPSN + 1}, psns(pkts))

	send := request(wire.RCSendOnly, testRQPSN+4)
	for _, hd := range []wire.Headers{send, request(wire.RCSendOnly, testRQPSN+9)} {
		fx, pkts := h.receive(hd, pattern(1, 8))
		require.Equal(t, Effects{Held: true}, fx)
		require.Empty(t, pkts)
	}
	require.Len(t, h.rq.q, 1, "the held SEND took no receive")

	// The requester asks again from the start.
	fx, pkts := h.receive(rd, nil)
	require.True(t, fx.Run)
	require.Empty(t, pkts)
	_, pkts = h.run()
	require.Equal(t, seq(testRQPSN, 4), psns(pkts), "restarted at the duplicate's PSN")
	require.Equal(t, wire.RCRDMAReadResponseFirst, pkts[0].op())

	fx, _ = h.receive(send, pattern(1, 8))
	require.Equal(t, Effects{Run: true, Delivered: true}, fx)
	h.requireDrops(map[DropReason]uint64{DropDuplicate: 1})

	// A duplicate asking for a part restarts at its PSN.
	_, _ = h.receive(withRETH(request(wire.RCRDMAReadRequest, testRQPSN+5), memVA, rkeyMem, 4*testMTU), nil)
	_, _ = h.runBudget(1)
	fx, _ = h.receive(withRETH(request(wire.RCRDMAReadRequest, testRQPSN+7), memVA+2*testMTU, rkeyMem, 2*testMTU), nil)
	require.True(t, fx.Run)
	_, pkts = h.run()
	require.Equal(t, seq(testRQPSN+7, 2), psns(pkts))
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadResponseMiddle, wire.RCRDMAReadResponseLast}, ops(pkts))
}

// TestResponderUC: UC acknowledges nothing (IBTA 9.8); a lost or refused
// packet drops its message, later packets are dropped until a First or
// Only starts a new one (IBTA 9.8.3.1; rxe's check_psn for UC,
// drop_msg), and the receive WQE the dropped message had taken serves the
// next message. A refused WRITE raises no error.
func TestResponderUC(t *testing.T) {
	h := newQPT(t, defaultParams(verbs.QPTypeUC))
	h.postRecv(1, 0, 1024)
	h.postRecv(2, 1024, 1024)
	data := pattern(3, 600)
	_, _ = h.receive(request(wire.UCSendFirst, testRQPSN), data[:256])
	// The Middle is lost: no acknowledgement, but a CNP asks the sender
	// to slow down.
	fx, pkts := h.receive(request(wire.UCSendLast, testRQPSN+2), data[512:])
	require.Equal(t, Effects{}, fx)
	require.Equal(t, []wire.OpCode{wire.CNP}, ops(pkts))
	require.EqualValues(t, 1, h.stats.LossCNPs.Load())
	require.Empty(t, h.rcq.wcs)
	fx, _ = h.receive(request(wire.UCSendOnly, testRQPSN+3), data[:10])
	require.True(t, fx.Delivered)
	got := h.rcq.take()
	require.Equal(t, []verbs.WC{{WRID: 1, Opcode: verbs.WCRecv, ByteLen: 10, QPNum: testQPN, SrcQP: testPeerQPN}}, got,
		"the dropped message's receive serves the next")
	require.Len(t, h.rq.q, 1)

	// A WRITE with a bad R_Key: dropped with the rest of its message.
	_, pkts = h.receive(withRETH(request(wire.UCRDMAWriteFirst, testRQPSN+4), memVA, 0x999, 600), data[:256])
	require.Empty(t, pkts)
	fx, _ = h.receive(request(wire.UCRDMAWriteMiddle, testRQPSN+5), data[256:512])
	require.Equal(t, FailNone, fx.Fail)
	_, _ = h.receive(request(wire.UCRDMAWriteLast, testRQPSN+6), data[512:])
	// Multi-packet SEND and WRITE in sequence.
	_, _ = h.receive(request(wire.UCSendFirst, testRQPSN+7), data[:256])
	_, _ = h.receive(request(wire.UCSendMiddle, testRQPSN+8), data[256:512])
	fx, _ = h.receive(request(wire.UCSendLast, testRQPSN+9), data[512:])
	require.True(t, fx.Delivered)
	require.Equal(t, data, h.dst[1024:1624])
	_, _ = h.receive(withRETH(request(wire.UCRDMAWriteFirst, testRQPSN+10), memVA, rkeyMem, 600), data[:256])
	_, _ = h.receive(request(wire.UCRDMAWriteMiddle, testRQPSN+11), data[256:512])
	_, _ = h.receive(request(wire.UCRDMAWriteLast, testRQPSN+12), data[512:])
	require.Equal(t, data, h.mem0[:600])
	_, pkts = h.run()
	require.Empty(t, pkts, "UC acknowledges nothing")
	require.Len(t, h.rcq.take(), 1)
	// The lost SEND's Last, and the Middle and Last of the refused
	// WRITE, are dropped as out of sequence.
	h.requireDrops(map[DropReason]uint64{DropUCOutOfSequence: 3, DropUCInvalid: 1})

	// No receive WQE: the message is dropped, no RNR.
	_, pkts = h.receive(request(wire.UCSendOnly, testRQPSN+13), data[:8])
	require.Empty(t, pkts)
	require.Equal(t, uint64(1), h.stats.Snapshot().Drops[DropUCNoReceive])

	// A message longer than its receive buffer completes it with
	// IBV_WC_LOC_LEN_ERR and the QP goes to ERR: an error on RC and UC
	// QPs, as ibv_post_recv(3) has it and conformance/ expects (current
	// rxe drops the message instead: RESPST_ERR_LENGTH, UC class D).
	h.postRecv(3, 0, 100)
	fx, _ = h.receive(request(wire.UCSendFirst, testRQPSN+14), data[:256])
	require.Equal(t, FailRecv, fx.Fail)
	require.Equal(t, verbs.WCLocLenErr, fx.Status)
	h.applyFail(fx)
	require.Equal(t, []string{"3:" + verbs.WCLocLenErr.String()}, wcs(h.rcq.take()))
}

// TestResponderUD: a UD SEND is delivered into a receive WQE whose
// buffer holds the 40-byte GRH area and the payload, the GRH area filled
// as rxe fills it for IPv4 (20 zero bytes, then the IPv4 header); the
// completion names the source QP and has IBV_WC_GRH (IBTA 11.4.1.2,
// ibv_poll_cq(3)). A Q_Key mismatch (IBTA 10.2.5), a payload
// longer than the MTU, no receive WQE, or a receive too small for
// GRH + payload (ibv_post_recv(3)) drop the packet silently.
func TestResponderUD(t *testing.T) {
	p := defaultParams(verbs.QPTypeUD)
	p.MTU = 1024
	h := newQPT(t, p)
	ud := func(qkey uint32, imm bool) wire.Headers {
		op := wire.UDSendOnly
		if imm {
			op = wire.UDSendOnlyWithImmediate
		}
		hd := request(op, 77)
		hd.DETH = wire.DETHFields{QKey: qkey, SrcQP: 0x33}
		hd.ImmDt = 0x99
		return hd
	}
	data := pattern(8, 1024)
	h.postRecv(1, 0, 40+1024)
	h.postRecv(2, 2048, 40+100)
	h.postRecv(3, 4096, 40+100)

	fx, pkts := h.receive(ud(testQKey, false), data)
	require.Empty(t, pkts)
	require.Equal(t, Effects{Delivered: true}, fx)
	require.Equal(t, []verbs.WC{{WRID: 1, Opcode: verbs.WCRecv, ByteLen: 40 + 1024, QPNum: testQPN, SrcQP: 0x33,
		WCFlags: verbs.WCFlagGRH}}, h.rcq.take())
	require.Equal(t, data, h.dst[40:40+1024])
	grh := h.dst[:40]
	require.Equal(t, make([]byte, 20), grh[:20])
	require.Equal(t, byte(0x45), grh[20], "IPv4, 20-byte header")
	ibLen := wire.BTHSize + wire.DETHSize + 1024 + wire.ICRCSize
	require.Equal(t, uint16(20+8+ibLen), binary.BigEndian.Uint16(grh[22:]), "IPv4 total length")
	require.Equal(t, byte(17), grh[29], "UDP")
	require.Equal(t, peerAddr.AsSlice(), grh[32:36], "source")
	require.Equal(t, localAddr.AsSlice(), grh[36:40], "destination")

	_, _ = h.receive(ud(testQKey+1, false), data[:8])
	_, _ = h.receive(ud(testQKey, false), pattern(0, 1028))
	_, _ = h.receive(ud(testQKey, false), data[:101]) // 40+101 > 140
	require.Len(t, h.rq.q, 2, "a receive too small is not taken")
	fx, _ = h.receive(ud(testQKey, true), data[:100])
	require.True(t, fx.Delivered)
	require.Equal(t, []verbs.WC{{WRID: 2, Opcode: verbs.WCRecv, ByteLen: 140, QPNum: testQPN, SrcQP: 0x33,
		WCFlags: verbs.WCFlagGRH | verbs.WCFlagWithImm, ImmData: 0x99}}, h.rcq.take())
	_, _ = h.receive(ud(testQKey, false), data[:8])
	_, _ = h.receive(ud(testQKey, false), data[:8])
	h.requireDrops(map[DropReason]uint64{DropQKey: 1, DropUDTooLongForMTU: 1, DropUDTooLong: 1, DropUDNoReceive: 1})
	_, pkts = h.run()
	require.Empty(t, pkts)
}

// TestResponderErrorState: a QP moved to ERR leaves the receive WQE of a
// message in progress for TakeRecvInProgress, so that it is flushed
// first (IBTA 10.3.1 Error state: outstanding WRs complete with flush
// errors, in order); it then receives nothing (IBTA 10.3.1).
func TestResponderErrorState(t *testing.T) {
	h := newRC(t)
	h.rq.post(4, verbs.SGE{Addr: dstVA, Length: 300, LKey: lkeyDst}, verbs.SGE{Addr: dstVA + 400, Length: 300, LKey: lkeyDst})
	_, _ = h.receive(request(wire.RCSendFirst, testRQPSN), pattern(0, testMTU))
	h.q.SetState(verbs.QPStateErr, 0, 0)
	var w verbs.RecvWQE
	require.True(t, h.q.TakeRecvInProgress(&w))
	require.Equal(t, verbs.RecvWQE{WRID: 4, SGL: []verbs.SGE{{Addr: dstVA, Length: 300, LKey: lkeyDst},
		{Addr: dstVA + 400, Length: 300, LKey: lkeyDst}}}, w)
	require.False(t, h.q.TakeRecvInProgress(&w))
	fx, pkts := h.receive(request(wire.RCSendLast, testRQPSN+1), pattern(0, 8))
	require.Equal(t, Effects{}, fx)
	require.Empty(t, pkts)
	h.requireDrops(map[DropReason]uint64{DropQPState: 1})
	require.Empty(t, h.rcq.wcs)
}

// TestReceiveChecks: the packet checks before the protocol parts (IBTA
// 9.6.1): the QP state (10.3.1: RESET and INIT receive nothing), the
// P_Key (9.6.1.1, C9-42), the opcode's transport (9.6.1.2), and for RC
// and UC the peer's address (rxe's check_addr).
func TestReceiveChecks(t *testing.T) {
	h := newRC(t)
	h.postRecv(1, 0, 64)
	bad := request(wire.RCSendOnly, testRQPSN)
	bad.BTH.PKey = 0x1234
	_, _ = h.receive(bad, nil)
	_, _ = h.receive(request(wire.UCSendOnly, testRQPSN), nil)
	n := h.peerNet()
	n.Src = localAddr
	_ = h.q.Receive(h.env(), buildPacket(t, &n, request(wire.RCSendOnly, testRQPSN), nil))
	n = h.peerNet()
	n.Dst = peerAddr
	_ = h.q.Receive(h.env(), buildPacket(t, &n, request(wire.RCSendOnly, testRQPSN), nil))
	h.requireDrops(map[DropReason]uint64{DropPKey: 1, DropTransportMismatch: 1, DropAddress: 2})
	// The limited-member P_Key 0x7fff matches the default partition.
	ok := request(wire.RCSendOnly, testRQPSN)
	ok.BTH.PKey = 0x7fff
	fx, _ := h.receive(ok, nil)
	require.True(t, fx.Delivered)

	for _, s := range []verbs.QPState{verbs.QPStateReset, verbs.QPStateInit} {
		h := newRC(t)
		h.q.SetState(verbs.QPStateReset, 0, 0)
		if s == verbs.QPStateInit {
			h.q.SetState(verbs.QPStateInit, 0, 0)
		}
		_, _ = h.receive(request(wire.RCSendOnly, testRQPSN), nil)
		h.requireDrops(map[DropReason]uint64{DropQPState: 1})
	}
}

// TestResponderSendWithInvalidate: softhca has nothing an R_Key could
// invalidate, so SEND with Invalidate completes the receive with
// IBV_WC_REM_INV_REQ_ERR and the QP goes to ERR, the packet itself being
// acknowledged, as rxe does when invalidation fails (rxe_resp.c,
// RESPST_ERR_INVALIDATE_RKEY, class J).
func TestResponderSendWithInvalidate(t *testing.T) {
	h := newRC(t)
	h.postRecv(1, 0, 64)
	hd := request(wire.RCSendOnlyWithInvalidate, testRQPSN)
	hd.IETH = 0x55
	fx, pkts := h.receive(hd, pattern(0, 8))
	requireAck(t, pkts, testRQPSN, ackSyn, 0)
	require.Equal(t, FailRecv, fx.Fail)
	require.Equal(t, verbs.WCRemInvReqErr, fx.Status)
	h.applyFail(fx)
	require.Equal(t, []string{"1:" + verbs.WCRemInvReqErr.String()}, wcs(h.rcq.take()))
	require.True(t, bytes.Equal(pattern(0, 8), h.dst[:8]))
}

// TestResponderAckOwedWhenRequesterFails: a request the responder
// executed and owes a coalesced ACK for must still be acknowledged when
// the QP's own requester fails before the next Run and moves it to ERR.
// rxe acknowledges each request as it executes it (rxe_resp.c,
// RESPST_ACKNOWLEDGE) and only then can a failure move the QP to ERR, so
// the peer's request completes successfully there; here the receive has
// completed successfully (the message was delivered) and, without its
// ACK, the peer's SEND would end in IBV_WC_RETRY_EXC_ERR or a flush.
func TestResponderAckOwedWhenRequesterFails(t *testing.T) {
	for _, via := range []string{"error NAK", "retry exhausted"} {
		t.Run(via, func(t *testing.T) {
			p := defaultParams(verbs.QPTypeRC)
			p.RetryCnt = 0
			h := newQPT(t, p)
			h.sendAll(writeWR(1, 8))
			h.postRecv(1, 0, 64)
			fx, pkts := h.receive(request(wire.RCSendOnly, testRQPSN), pattern(1, 8))
			require.True(t, fx.Delivered)
			require.Empty(t, pkts, "the ACK is owed")
			if via == "error NAK" {
				fx, pkts = h.receive(nak(testSQPSN, wire.NAKRemoteAccessError), nil)
			} else {
				h.now = h.q.Deadline()
				fx, pkts = h.timer()
			}
			require.Equal(t, FailSend, fx.Fail)
			h.applyFail(fx)
			_, more := h.run()
			pkts = append(pkts, more...)
			h.q.FlushAck(h.env())
			pkts = append(pkts, h.out.take()...)
			require.Equal(t, []wire.OpCode{wire.RCAcknowledge}, ops(pkts), "the executed SEND was never acknowledged")
			requireAck(t, pkts, testRQPSN, ackSyn, 1)
		})
	}
}

// TestResponderUDBadReceiveBuffer: a UD receive WQE whose buffer fails
// its local check completes in error and, as for RC and UC here (FailRecv)
// and in rxe (send_data_in -> RESPST_ERR_MALFORMED_WQE, "All, Class A":
// do_class_ac_error, then rxe_qp_error), the QP moves to the error state
// (IBTA 10.8.3: a receive WQE completed in error other than a flush puts
// the QP in the error state).
func TestResponderUDBadReceiveBuffer(t *testing.T) {
	p := defaultParams(verbs.QPTypeUD)
	p.MTU = 1024
	h := newQPT(t, p)
	h.rq.post(1, verbs.SGE{Addr: dstVA, Length: 200, LKey: 0x999})
	hd := request(wire.UDSendOnly, 1)
	hd.DETH = wire.DETHFields{QKey: testQKey, SrcQP: 0x33}
	fx, _ := h.receive(hd, pattern(0, 8))
	got := h.rcq.take()
	require.Len(t, got, 1)
	require.NotEqual(t, verbs.WCSuccess, got[0].Status)
	require.Equal(t, FailRecv, fx.Fail, "the QP stays in RTS after a receive completed in error")
}
