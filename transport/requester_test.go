package transport

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// The requester alone (IBTA 9.7.4, 9.7.6; rxe_req.c): how send WQEs
// become packets, and what stops them.

// wantPkt describes one packet a segmentation case expects.
type wantPkt struct {
	op      wire.OpCode
	payload int // payload bytes
	reth    bool
}

// TestRequesterSegmentation: IBTA 9.2 (table 38, opcodes by position),
// 9.7.1 (one PSN per packet, consecutive), 9.7.4.1.x (a First or Middle
// packet carries one path MTU; RETH on the First or Only packet of an
// RDMA WRITE and on a READ request; AtomicETH on atomics), 9.2.1 (pad to
// 4 bytes), 9.2.2 (SE only on the last packet of a message), and rxe's
// init_req_packet (AckReq on every last packet). A READ takes one PSN per
// response packet (9.7.4.1.3), so the next message's PSN skips them.
func TestRequesterSegmentation(t *testing.T) {
	const mtu = testMTU
	imm := func(w SendWQE, op verbs.WROpcode) SendWQE { w.WR.Opcode, w.WR.ImmData = op, 0xabcd; return w }
	inv := func(w SendWQE) SendWQE {
		w.WR.Opcode, w.WR.InvalidateRKey = verbs.WRSendWithInv, 0x77
		return w
	}
	solicited := func(w SendWQE) SendWQE { w.WR.SendFlags |= verbs.SendSolicited; return w }
	multiSGE := sendWR(1, 0, 0)
	multiSGE.SGL = []verbs.SGE{
		{Addr: srcVA + 10, Length: 100, LKey: lkeySrc},
		{Addr: srcVA + 5000, Length: 0, LKey: 0xdead}, // empty: never looked up
		{Addr: srcVA + 2000, Length: 300, LKey: lkeySrc},
	}
	inline := sendWR(1, 0, 0)
	inline.SGL = nil
	inline.WR.SendFlags = verbs.SendInline
	inline.Inline = []byte("inline data, 23 bytes!!")

	only := func(op wire.OpCode, n int, reth bool) []wantPkt { return []wantPkt{{op, n, reth}} }
	tests := []struct {
		name string
		w    SendWQE
		want []wantPkt
		// data is the expected payload (nil: the source region's bytes
		// the SGL names).
		data   []byte
		npsn   int // PSNs the message takes
		se     bool
		immOn  bool
		iethOn bool
	}{
		{name: "SEND 0 bytes", w: sendWR(1, 0, 0), want: only(wire.RCSendOnly, 0, false), npsn: 1},
		{name: "SEND 101 bytes (pad 3)", w: sendWR(1, 3, 101), want: only(wire.RCSendOnly, 101, false), npsn: 1},
		{name: "SEND one MTU", w: sendWR(1, 0, mtu), want: only(wire.RCSendOnly, mtu, false), npsn: 1},
		{name: "SEND 3 MTU", w: sendWR(1, 0, 3*mtu), want: []wantPkt{
			{wire.RCSendFirst, mtu, false}, {wire.RCSendMiddle, mtu, false}, {wire.RCSendLast, mtu, false}}, npsn: 3},
		{name: "SEND 601 bytes", w: sendWR(1, 1, 601), want: []wantPkt{
			{wire.RCSendFirst, mtu, false}, {wire.RCSendMiddle, mtu, false}, {wire.RCSendLast, 89, false}}, npsn: 3},
		{name: "SEND with immediate, 2 packets", w: imm(sendWR(1, 0, 300), verbs.WRSendWithImm), want: []wantPkt{
			{wire.RCSendFirst, mtu, false}, {wire.RCSendLastWithImmediate, 44, false}}, npsn: 2, immOn: true},
		{name: "SEND with immediate, Only", w: imm(sendWR(1, 0, 10), verbs.WRSendWithImm),
			want: only(wire.RCSendOnlyWithImmediate, 10, false), npsn: 1, immOn: true},
		{name: "SEND with invalidate, Only", w: inv(sendWR(1, 0, 10)),
			want: only(wire.RCSendOnlyWithInvalidate, 10, false), npsn: 1, iethOn: true},
		{name: "SEND with invalidate, 2 packets", w: inv(sendWR(1, 0, 300)), want: []wantPkt{
			{wire.RCSendFirst, mtu, false}, {wire.RCSendLastWithInvalidate, 44, false}}, npsn: 2, iethOn: true},
		{name: "SEND solicited, 3 packets (SE on the last)", w: solicited(sendWR(1, 0, 600)), want: []wantPkt{
			{wire.RCSendFirst, mtu, false}, {wire.RCSendMiddle, mtu, false}, {wire.RCSendLast, 88, false}}, npsn: 3, se: true},
		{name: "SEND over three SGEs", w: multiSGE, want: []wantPkt{
			{wire.RCSendFirst, mtu, false}, {wire.RCSendLast, 144, false}}, npsn: 2,
			data: append(srcBytes(10, 100), srcBytes(2000, 300)...)},
		{name: "SEND inline", w: inline, want: only(wire.RCSendOnly, 23, false), npsn: 1, data: inline.Inline},
		{name: "WRITE 10 bytes", w: writeWR(1, 10), want: only(wire.RCRDMAWriteOnly, 10, true), npsn: 1},
		{name: "WRITE 0 bytes", w: writeWR(1, 0), want: only(wire.RCRDMAWriteOnly, 0, true), npsn: 1},
		{name: "WRITE 600 bytes", w: writeWR(1, 600), want: []wantPkt{
			{wire.RCRDMAWriteFirst, mtu, true}, {wire.RCRDMAWriteMiddle, mtu, false}, {wire.RCRDMAWriteLast, 88, false}}, npsn: 3},
		{name: "WRITE with immediate, 3 packets", w: imm(writeWR(1, 600), verbs.WRRDMAWriteWithImm), want: []wantPkt{
			{wire.RCRDMAWriteFirst, mtu, true}, {wire.RCRDMAWriteMiddle, mtu, false}, {wire.RCRDMAWriteLastWithImm, 88, false}},
			npsn: 3, immOn: true},
		{name: "WRITE with immediate, Only", w: imm(writeWR(1, 5), verbs.WRRDMAWriteWithImm),
			want: only(wire.RCRDMAWriteOnlyWithImm, 5, true), npsn: 1, immOn: true},
		{name: "READ 600 bytes", w: readWR(1, 0, 600), want: only(wire.RCRDMAReadRequest, 0, true), npsn: 3},
		{name: "READ 0 bytes", w: readWR(1, 0, 0), want: only(wire.RCRDMAReadRequest, 0, true), npsn: 1},
		{name: "READ one MTU", w: readWR(1, 0, mtu), want: only(wire.RCRDMAReadRequest, 0, true), npsn: 1},
		{name: "CmpSwap", w: atomicWR(1, verbs.WRAtomicCmpAndSwp, 0, 5, 9), want: only(wire.RCCompareSwap, 0, false), npsn: 1},
		{name: "FetchAdd", w: atomicWR(1, verbs.WRAtomicFetchAndAdd, 0, 3, 0), want: only(wire.RCFetchAdd, 0, false), npsn: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newRC(t)
			h.post(tc.w)
			h.post(sendWR(2, 0, 0)) // a marker: its PSN follows the message's
			fx, pkts := h.run()
			require.False(t, fx.More)
			require.Equal(t, FailNone, fx.Fail)
			require.Len(t, pkts, len(tc.want)+1)
			var got []byte
			for i, w := range tc.want {
				p := &pkts[i]
				last := i == len(tc.want)-1
				require.Equal(t, w.op, p.op(), "packet %d", i)
				require.Equal(t, testSQPSN+uint32(i), p.psn(), "packet %d PSN", i)
				require.Equal(t, uint32(testPeerQPN), p.p.BTH.DestQP())
				require.Equal(t, uint16(0xffff), p.p.BTH.PKey())
				require.Equal(t, h.q.P.Path, p.dst)
				// rxe sets AckReq on the last packet of a message;
				// READ and atomic requests always ask for a response.
				require.Equal(t, last, p.p.BTH.AckReq(), "packet %d AckReq", i)
				require.Equal(t, last && tc.se, p.p.BTH.SolicitedEvent(), "packet %d SE", i)
				require.Len(t, p.p.Payload, w.payload, "packet %d payload", i)
				require.Equal(t, wire.PadFor(w.payload), p.p.BTH.PadCount(), "packet %d pad", i)
				require.Equal(t, w.reth, p.p.RETH != nil, "packet %d RETH", i)
				require.Equal(t, last && tc.immOn, p.p.ImmDt != nil, "packet %d ImmDt", i)
				if p.p.ImmDt != nil {
					require.Equal(t, uint32(0xabcd), p.p.ImmDt.Value())
				}
				require.Equal(t, last && tc.iethOn, p.p.IETH != nil, "packet %d IETH", i)
				if p.p.IETH != nil {
					require.Equal(t, uint32(0x77), p.p.IETH.RKey())
				}
				got = append(got, p.p.Payload...)
			}
			first := &pkts[0]
			switch tc.w.WR.Opcode {
			case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
				require.Equal(t, wire.RETHFields{VirtualAddress: peerVA, RKey: rkeyPeer, DMALength: tc.w.SGL[0].Length},
					first.p.RETH.Fields())
			case verbs.WRRDMARead:
				require.Equal(t, wire.RETHFields{VirtualAddress: peerVA, RKey: rkeyPeer, DMALength: tc.w.SGL[0].Length},
					first.p.RETH.Fields())
			case verbs.WRAtomicCmpAndSwp:
				// IBTA 9.3.3.2: Swap Data is the value to store,
				// Compare Data the value to compare with.
				require.Equal(t, wire.AtomicETHFields{VirtualAddress: peerVA, RKey: rkeyPeer, SwapAddData: 9, CompareData: 5},
					first.p.AtomicETH.Fields())
			case verbs.WRAtomicFetchAndAdd:
				require.Equal(t, wire.AtomicETHFields{VirtualAddress: peerVA, RKey: rkeyPeer, SwapAddData: 3},
					first.p.AtomicETH.Fields())
			default:
			}
			want := tc.data
			if want == nil && !tc.w.WR.Opcode.IsAtomic() && tc.w.WR.Opcode != verbs.WRRDMARead {
				want = srcBytes(uint32(tc.w.SGL[0].Addr-srcVA), int(tc.w.SGL[0].Length))
			}
			require.Equal(t, len(want), len(got))
			require.True(t, bytes.Equal(want, got), "payload differs from the source")
			marker := &pkts[len(pkts)-1]
			require.Equal(t, wire.RCSendOnly, marker.op())
			require.Equal(t, testSQPSN+uint32(tc.npsn), marker.psn(), "the next message's PSN")
			// RC completes on acknowledgement, not on send.
			require.Empty(t, h.scq.wcs)
			require.False(t, h.q.Deadline().IsZero(), "transport timer armed")
		})
	}
}

// srcBytes returns the bytes the test wrote into the source region.
func srcBytes(off uint32, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		j := int(off) + i
		b[i] = byte(j*7 + j>>8)
	}
	return b
}

// TestRequesterAckReqEvery64th: within a long message the requester asks
// for an acknowledgement at least every 64 packets, so the responder ACKs
// before the 128-PSN window fills (rxe_req.c: RXE_MAX_PKT_PER_ACK), and
// on the last packet.
func TestRequesterAckReqEvery64th(t *testing.T) {
	h := newRC(t).fullWindow()
	h.post(writeWR(1, 100*testMTU))
	_, pkts := h.run()
	require.Len(t, pkts, 100)
	var asked []int
	for i := range pkts {
		if pkts[i].p.BTH.AckReq() {
			asked = append(asked, i)
		}
	}
	require.Equal(t, []int{63, 99}, asked)
	require.Equal(t, seq(testSQPSN, 100), psns(pkts))
}

// TestRequesterWindow: an RC requester keeps at most 128 PSNs
// unacknowledged (rxe_req.c RXE_MAX_UNACKED_PSNS; IBTA leaves the
// limit to the implementation); an ACK opens it again.
func TestRequesterWindow(t *testing.T) {
	h := newRC(t).fullWindow()
	h.post(sendWR(1, 0, 130*testMTU))
	h.post(sendWR(2, 0, 4))
	fx, pkts := h.run()
	require.Len(t, pkts, 128)
	require.False(t, fx.More, "a full window is not a spent budget")
	require.Equal(t, seq(testSQPSN, 128), psns(pkts))
	_, pkts = h.run()
	require.Empty(t, pkts, "nothing while the window is full")

	fx, _ = h.receive(ack(testSQPSN+63, 0), nil)
	require.True(t, fx.Run)
	_, pkts = h.run()
	require.Equal(t, seq(testSQPSN+128, 3), psns(pkts))
	require.Equal(t, []wire.OpCode{wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly}, ops(pkts))
}

// TestRequesterMaxRdAtomic: at most max_rd_atomic READ and ATOMIC
// requests are outstanding (IBTA 9.7.7.x, ibv_modify_qp(3); rxe_req.c: rd_atomic); later
// WQEs, of any kind, wait behind the one held (the send queue is
// processed in order).
func TestRequesterMaxRdAtomic(t *testing.T) {
	p := defaultParams(verbs.QPTypeRC)
	p.MaxRdAtomic = 2
	h := newQPT(t, p)
	h.post(readWR(1, 0, 8))
	h.post(atomicWR(2, verbs.WRAtomicFetchAndAdd, 8, 1, 0))
	h.post(readWR(3, 16, 8))
	h.post(sendWR(4, 0, 8))
	_, pkts := h.run()
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadRequest, wire.RCFetchAdd}, ops(pkts))

	// The READ's response completes it; the third READ may go.
	fx, _ := h.receive(readResp(wire.RCRDMAReadResponseOnly, testSQPSN), pattern(1, 8))
	require.True(t, fx.Run)
	require.Equal(t, []string{"1:success"}, wcs(h.scq.take()))
	_, pkts = h.run()
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadRequest, wire.RCSendOnly}, ops(pkts))
	require.Equal(t, []uint32{testSQPSN + 2, testSQPSN + 3}, psns(pkts))

	// max_rd_atomic 0 still lets one through.
	p.MaxRdAtomic = 0
	h = newQPT(t, p)
	h.post(readWR(1, 0, 8))
	h.post(readWR(2, 8, 8))
	_, pkts = h.run()
	require.Len(t, pkts, 1)
}

// TestRequesterFence: a WQE with IBV_SEND_FENCE waits until every earlier
// READ and ATOMIC has completed (IBTA 10.8.3.3 "fence indicator",
// ibv_post_send(3)); a WQE without it does not.
func TestRequesterFence(t *testing.T) {
	h := newRC(t)
	h.post(readWR(1, 0, 8))
	h.post(sendWR(2, 0, 8))
	fenced := sendWR(3, 0, 8)
	fenced.WR.SendFlags |= verbs.SendFence
	h.post(fenced)
	h.post(sendWR(4, 0, 8))
	_, pkts := h.run()
	require.Equal(t, []wire.OpCode{wire.RCRDMAReadRequest, wire.RCSendOnly}, ops(pkts))

	_, pkts = h.run()
	require.Empty(t, ops(pkts), "the fenced WQE waits for the READ")

	// The READ's response completes it (and acknowledges nothing
	// after it): the fence opens.
	_, _ = h.receive(readResp(wire.RCRDMAReadResponseOnly, testSQPSN), pattern(1, 8))
	require.Equal(t, []string{"1:success"}, wcs(h.scq.take()))
	_, pkts = h.run()
	require.Equal(t, []uint32{testSQPSN + 2, testSQPSN + 3}, psns(pkts))

	// A fence with no READ or ATOMIC outstanding does not wait.
	h = newRC(t)
	h.post(writeWR(1, 8))
	h.post(fenced)
	_, pkts = h.run()
	require.Len(t, pkts, 2)
}

// TestRequesterBudget: Run builds at most Env.Budget bytes (the
// scheduler's round robin between QPs), reports More when it stopped for
// it, and the next Run continues exactly where it stopped: the packets
// built one per Run are those one unlimited Run builds.
func TestRequesterBudget(t *testing.T) {
	post := func(h *qpt) {
		h.post(sendWR(1, 0, 3*testMTU-5))
		h.post(writeWR(2, 2*testMTU))
		h.post(readWR(3, 0, 1000))
		h.post(atomicWR(4, verbs.WRAtomicCmpAndSwp, 1000, 1, 2))
		h.post(sendWR(5, 7, 9))
	}
	ref := newRC(t)
	post(ref)
	_, want := ref.run()
	require.Len(t, want, 8)

	for _, budget := range []int{1, 300} {
		h := newRC(t)
		post(h)
		var got []sent
		for i := 0; ; i++ {
			require.Less(t, i, 20)
			fx, pkts := h.runBudget(budget)
			if budget == 1 {
				require.Len(t, pkts, 1, "a budget of one byte builds one packet")
			}
			got = append(got, pkts...)
			if !fx.More {
				break
			}
		}
		require.Len(t, got, len(want), "budget %d", budget)
		for i := range want {
			require.Equal(t, want[i].raw, got[i].raw, "budget %d: packet %d", budget, i)
		}
		_, pkts := h.run()
		require.Empty(t, pkts)
	}
}

// TestRequesterSQD: in SQD the requester starts no new WQE but finishes
// those it started (IBTA 11.6.3.1 "Send Queue Drain", 10.3.1: SQD); with
// notification, SQDrained is raised once the started ones completed.
func TestRequesterSQD(t *testing.T) {
	h := newRC(t)
	h.post(sendWR(1, 0, 3*testMTU))
	h.post(sendWR(2, 0, 10))
	_, pkts := h.runBudget(1)
	require.Len(t, pkts, 1)

	h.q.SetState(verbs.QPStateSQD, 0, 0)
	require.False(t, h.q.SQDrainNotify(), "a started WQE is outstanding")
	_, pkts = h.run()
	require.Equal(t, []wire.OpCode{wire.RCSendMiddle, wire.RCSendLast}, ops(pkts), "the started WQE finishes")

	fx, _ := h.receive(ack(testSQPSN+2, 1), nil)
	require.True(t, fx.SQDrained)
	require.Equal(t, []string{"1:success"}, wcs(h.scq.take()))
	_, pkts = h.run()
	require.Empty(t, pkts, "SQD starts no new WQE")

	h.q.SetState(verbs.QPStateRTS, 0, 0)
	_, pkts = h.run()
	require.Equal(t, []uint32{testSQPSN + 3}, psns(pkts))

	// Nothing started: drained at once.
	h = newRC(t)
	h.post(sendWR(1, 0, 10))
	h.q.SetState(verbs.QPStateSQD, 0, 0)
	require.True(t, h.q.SQDrainNotify())
	_, pkts = h.run()
	require.Empty(t, pkts)
}

// TestRequesterSQDAfterBudget: a Run that spends its budget on the last
// packet of one WQE must not start the next: nothing of it has been
// sent, so after RTS to SQD it is a new WQE that SQD must not start
// (IBTA 11.6.3.1), and SQDrainNotify must count it as not started. The
// same holds when the window, not the budget, stopped the Run.
func TestRequesterSQDAfterBudget(t *testing.T) {
	t.Run("window", func(t *testing.T) {
		h := newRC(t).fullWindow()
		h.post(sendWR(1, 0, maxUnackedPSNs*testMTU))
		h.post(sendWR(2, 0, 10))
		_, pkts := h.run()
		require.Len(t, pkts, maxUnackedPSNs)
		h.q.SetState(verbs.QPStateSQD, 0, 0)
		require.False(t, h.q.SQDrainNotify())
		fx, _ := h.receive(ack(testSQPSN+maxUnackedPSNs-1, 1), nil)
		require.True(t, fx.SQDrained, "only WQE 1 had started")
		_, pkts = h.run()
		require.Empty(t, ops(pkts), "SQD sent a WQE that had not started")
	})
	h := newRC(t)
	h.post(sendWR(1, 0, 10))
	h.post(sendWR(2, 0, 10))
	fx, pkts := h.runBudget(1)
	require.Len(t, pkts, 1)
	require.True(t, fx.More)

	h.q.SetState(verbs.QPStateSQD, 0, 0)
	require.False(t, h.q.SQDrainNotify(), "WQE 1 is outstanding")
	_, pkts = h.run()
	require.Empty(t, ops(pkts), "SQD sent a WQE that had not started")
	fx, _ = h.receive(ack(testSQPSN, 1), nil)
	require.True(t, fx.SQDrained, "only WQE 1 had started")
	require.Equal(t, WQEPosted, h.sq.At(0).State())
}

// TestRequesterLocalFailure: a WQE whose local memory check fails (an
// L_Key that names nothing, another PD's region, a READ into memory
// without LOCAL_WRITE, a range beyond the region, unreadable inline data)
// is not sent and nothing after it is; it completes with
// IBV_WC_LOC_PROT_ERR only when every WQE before it has completed, in
// order (rxe_req.c marks the WQE, rxe_comp.c completes it at the head;
// IBTA 10.8.3.3: completions in order).
func TestRequesterLocalFailure(t *testing.T) {
	tests := []struct {
		name string
		w    func() SendWQE
	}{
		{"unknown L_Key", func() SendWQE { w := sendWR(2, 0, 10); w.SGL[0].LKey = 0x999; return w }},
		{"another PD's region", func() SendWQE { w := sendWR(2, 0, 10); w.SGL[0].LKey = 0x500; w.SGL[0].Addr = 0x50000; return w }},
		{"READ into read-only memory", func() SendWQE { w := readWR(2, 0, 10); w.SGL[0].LKey = lkeySrc; w.SGL[0].Addr = srcVA; return w }},
		{"ATOMIC into read-only memory", func() SendWQE {
			w := atomicWR(2, verbs.WRAtomicFetchAndAdd, 0, 1, 0)
			w.SGL[0].LKey, w.SGL[0].Addr = lkeySrc, srcVA
			return w
		}},
		{"range beyond the region", func() SendWQE { w := sendWR(2, memSize-4, 10); return w }},
		{"unreadable inline data", func() SendWQE {
			w := sendWR(2, 0, 0)
			w.WR.SendFlags |= verbs.SendInline
			w.InlineBad = true
			return w
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newRC(t)
			h.mem.reg(0x500, testPD+1, 0x50000, 4096, verbs.AccessLocalWrite)
			h.post(sendWR(1, 0, 10))
			h.post(tc.w())
			h.post(sendWR(3, 0, 10))
			fx, pkts := h.run()
			require.Equal(t, FailNone, fx.Fail, "not at the head yet")
			require.Len(t, pkts, 1, "nothing after the failed WQE is sent")
			fx, _ = h.run()
			require.Equal(t, FailNone, fx.Fail)

			fx, _ = h.receive(ack(testSQPSN, 1), nil)
			require.Equal(t, FailSend, fx.Fail)
			require.Equal(t, verbs.WCLocProtErr, fx.Status)
			h.applyFail(fx)
			require.Equal(t, []string{"1:success", "2:local protection error"}, wcs(h.scq.take()))
			require.Equal(t, RequesterInactive, h.q.Requester())
		})
	}

	// At the head already: reported by the Run that found it.
	h := newRC(t)
	w := sendWR(1, 0, 10)
	w.SGL[0].LKey = 0x999
	h.post(w)
	fx, pkts := h.run()
	require.Empty(t, pkts)
	require.Equal(t, FailSend, fx.Fail)
	require.Equal(t, verbs.WCLocProtErr, fx.Status)
}

// TestRequesterSourceGone: a source region deregistered while its
// message is being sent fails the WQE with IBV_WC_LOC_PROT_ERR (rxe:
// copy_data fails, wqe->status = IB_WC_LOC_PROT_ERR) and nothing of the
// packet is sent.
func TestRequesterSourceGone(t *testing.T) {
	h := newRC(t)
	h.post(sendWR(1, 0, 3*testMTU))
	_, pkts := h.runBudget(1)
	require.Len(t, pkts, 1)
	h.mem.dereg(lkeySrc)
	fx, pkts := h.run()
	require.Empty(t, pkts)
	require.Equal(t, FailSend, fx.Fail)
	require.Equal(t, verbs.WCLocProtErr, fx.Status)
	require.Equal(t, WQEFailed, h.sq.At(0).State())
}

// TestRequesterUD: a UD message is one packet (UD Send Only, with
// immediate), with a DETH naming the QP as source and the WR's Q_Key, or
// the QP's own when the WR's has its high bit set (IBTA 10.2.5);
// it goes to the address handle's destination and completes when sent
// (IBTA 10.8.3.1: unreliable services complete on send; rxe).
func TestRequesterUD(t *testing.T) {
	p := defaultParams(verbs.QPTypeUD)
	p.MTU = 1024
	h := newQPT(t, p)
	dst := wire.Net{Src: localAddr, Dst: netip.MustParseAddr("10.0.0.9"), SrcPort: 49999, DstPort: wire.RoCEv2Port, DontFragment: true}
	ud := func(wrid uint64, qkey uint32, n uint32) SendWQE {
		w := sendWR(wrid, 0, n)
		w.WR.UD = verbs.UDInfo{RemoteQPN: 0x33, RemoteQKey: qkey}
		w.Dst = dst
		return w
	}
	h.post(ud(1, 0x55, 1024))
	h.post(ud(2, 0x80000000, 3))
	w3 := ud(3, 0x80001234, 0)
	w3.WR.Opcode, w3.WR.ImmData = verbs.WRSendWithImm, 42
	w3.WR.SendFlags |= verbs.SendSolicited
	w3.Signaled = false
	h.post(w3)
	fx, pkts := h.run()
	require.False(t, fx.More)
	require.Equal(t, []wire.OpCode{wire.UDSendOnly, wire.UDSendOnly, wire.UDSendOnlyWithImmediate}, ops(pkts))
	require.Equal(t, seq(testSQPSN, 3), psns(pkts))
	for i, want := range []uint32{0x55, testQKey, testQKey} {
		require.Equal(t, wire.DETHFields{QKey: want, SrcQP: testQPN}, pkts[i].p.DETH.Fields())
		require.Equal(t, uint32(0x33), pkts[i].p.BTH.DestQP())
		require.Equal(t, dst, pkts[i].dst)
		require.False(t, pkts[i].p.BTH.AckReq(), "UD asks for no acknowledgement")
	}
	require.True(t, pkts[2].p.BTH.SolicitedEvent())
	require.Len(t, pkts[0].p.Payload, 1024)
	require.Equal(t, []string{"1:success", "2:success"}, wcs(h.scq.take()), "signaled ones complete on send")
	require.Zero(t, h.sq.Len())
	require.True(t, h.q.Deadline().IsZero(), "UD has no transport timer")
}

// TestRequesterUDOversize: a UD message longer than the port MTU is not
// sent. IBTA C10-93.1.1 and rxe complete it successfully ("the CI shall
// not generate an error due to this condition"); Params.UDOversizeError
// completes it with IBV_WC_LOC_LEN_ERR instead, and the QP moves to SQE.
func TestRequesterUDOversize(t *testing.T) {
	for _, asError := range []bool{false, true} {
		p := defaultParams(verbs.QPTypeUD)
		p.MTU = 1024
		p.UDOversizeError = asError
		h := newQPT(t, p)
		for i, n := range []uint32{8, 1025, 9} {
			w := sendWR(uint64(i+1), 0, n)
			w.WR.UD = verbs.UDInfo{RemoteQPN: 0x33, RemoteQKey: 1}
			w.Dst = h.q.P.Path
			h.post(w)
		}
		fx, pkts := h.run()
		if !asError {
			require.Equal(t, FailNone, fx.Fail)
			require.Len(t, pkts, 2)
			require.Len(t, pkts[1].p.Payload, 9)
			require.Equal(t, []string{"1:success", "2:success", "3:success"}, wcs(h.scq.take()))
			continue
		}
		require.Len(t, pkts, 1)
		require.Equal(t, FailSend, fx.Fail)
		require.Equal(t, verbs.WCLocLenErr, fx.Status)
		h.applyFail(fx)
		require.Equal(t, []string{"1:success", "2:local length error"}, wcs(h.scq.take()))
		require.Equal(t, verbs.QPStateSQE, h.q.State())
	}
}

// TestRequesterUC: UC segments like RC with UC opcodes (IBTA table 38),
// asks for no acknowledgement, runs no timer, and completes each WQE when
// its last packet is sent (IBTA 9.8.2; rxe).
func TestRequesterUC(t *testing.T) {
	h := newQPT(t, defaultParams(verbs.QPTypeUC))
	h.post(sendWR(1, 0, 600))
	w := writeWR(2, 300)
	w.WR.Opcode, w.WR.ImmData = verbs.WRRDMAWriteWithImm, 5
	h.post(w)
	unsignaled := sendWR(3, 0, 1)
	unsignaled.Signaled = false
	h.post(unsignaled)
	_, pkts := h.runBudget(1)
	require.Len(t, pkts, 1)
	require.Empty(t, h.scq.wcs, "UC completes on the last packet")
	_, more := h.run()
	pkts = append(pkts, more...)
	require.Equal(t, []wire.OpCode{wire.UCSendFirst, wire.UCSendMiddle, wire.UCSendLast,
		wire.UCRDMAWriteFirst, wire.UCRDMAWriteLastWithImm, wire.UCSendOnly}, ops(pkts))
	require.Equal(t, seq(testSQPSN, 6), psns(pkts))
	for i := range pkts {
		require.False(t, pkts[i].p.BTH.AckReq())
	}
	require.NotNil(t, pkts[3].p.RETH)
	require.Equal(t, []string{"1:success", "2:success"}, wcs(h.scq.take()))
	require.Zero(t, h.sq.Len())
	require.True(t, h.q.Deadline().IsZero())
}

// TestRequesterSQDrainedOnlyInSQD: the SQ Drained event belongs to the
// drain it was asked for (IBTA 11.6.3.1: raised when a QP in SQD has no
// outstanding WQE); a QP moved back to RTS before its started WQEs
// completed ended that drain, and must not raise it later, in RTS (rxe
// raises IB_EVENT_SQ_DRAINED only from its QP_STATE_DRAIN, which the
// move to RTS leaves).
func TestRequesterSQDrainedOnlyInSQD(t *testing.T) {
	h := newRC(t)
	h.sendAll(sendWR(1, 0, 10))
	h.q.SetState(verbs.QPStateSQD, 0, 0)
	require.False(t, h.q.SQDrainNotify())
	h.q.SetState(verbs.QPStateRTS, 0, 0)
	fx, _ := h.receive(ack(testSQPSN, 1), nil)
	require.False(t, fx.SQDrained, "SQ Drained raised in RTS")
}

// TestRequesterAckAfterGoBack: an acknowledgement of packets sent before
// a go-back counts, even when it arrives while the requester has resent
// only part of them: the requester takes ACKs for any PSN it ever sent
// (IBTA 9.7.5.1.1: an ACK acknowledges every request up to its PSN) and
// moves past what it covers instead of resending it. Before, an ACK
// beyond the rewound PSN was dropped as stale, and with a small window
// the requester could resend the same packets forever.
func TestRequesterAckAfterGoBack(t *testing.T) {
	h := newRC(t)
	h.sendAll(sendWR(1, 0, 4*testMTU), sendWR(2, 0, 10))
	h.advance(1 << 30)
	fx, _ := h.timer()
	require.True(t, fx.Run, "the transport timer goes back")
	h.budget = 1 // the go-back resends one packet, then the budget is spent
	_, pkts := h.run()
	require.Equal(t, []uint32{testSQPSN}, psns(pkts))
	h.budget = Unlimited

	// The ACK of the first message's last packet, sent before the
	// timeout, arrives now.
	_, _ = h.receive(ack(testSQPSN+3, 1), nil)
	require.Equal(t, []string{"1:success"}, wcs(h.scq.take()))
	require.Empty(t, h.drops(), "nothing dropped as stale")
	_, pkts = h.run()
	require.Equal(t, []uint32{testSQPSN + 4}, psns(pkts), "only the second message is sent again")
}

// TestRequesterInPlace: with an emitter that takes payloads where they lie
// (Env.Gather), a packet whose payload is at least gatherMin bytes within
// one SGE is emitted with that payload as a slice of the region, not
// copied; a short payload, one that spans two SGEs, and inline data are
// copied as before. Every packet is byte-exact with a good ICRC either
// way (the recorder checks the ICRC of the assembled packet).
func TestRequesterInPlace(t *testing.T) {
	p := defaultParams(verbs.QPTypeRC)
	p.MTU = 4096
	h := newQPT(t, p)
	h.gather = true
	// A WRITE of 2.5 packets: two in place, the last 2048 bytes too.
	h.post(writeWR(1, 2*4096+2048))
	// A SEND whose 4096+1500 bytes lie in two SGEs of 3000 and 2596: the
	// first packet spans both (copied), the second lies in the second.
	two := sendWR(2, 0, 3000)
	two.SGL = append(two.SGL, verbs.SGE{Addr: srcVA + 8000, Length: 2596, LKey: lkeySrc})
	h.post(two)
	// A SEND of 1000 bytes: below gatherMin.
	h.post(sendWR(3, 100, 1000))
	// An inline SEND.
	in := sendWR(4, 0, 0)
	in.SGL = nil
	in.WR.SendFlags = verbs.SendInline
	in.Inline = bytes.Repeat([]byte{0xab}, 64)
	h.post(in)
	_, pkts := h.run()
	require.Len(t, pkts, 3+2+1+1)

	// A slice of the region shares its backing array's end.
	end := h.src[:cap(h.src)]
	inRegion := func(b []byte) bool { b = b[:cap(b)]; return &b[len(b)-1] == &end[len(end)-1] }
	for i, want := range []struct {
		inPlace bool
		payload []byte
	}{
		{true, h.src[0:4096]},
		{true, h.src[4096:8192]},
		{true, h.src[8192:10240]},
		{false, append(bytes.Clone(h.src[0:3000]), h.src[8000:9096]...)},
		{true, h.src[9096:10596]},
		{false, h.src[100:1100]},
		{false, in.Inline},
	} {
		s := pkts[i]
		require.Equal(t, want.payload, s.p.Payload, "packet %d's payload", i)
		require.Equal(t, want.inPlace, s.inPlace != nil, "packet %d sent in place", i)
		if want.inPlace {
			require.True(t, inRegion(s.inPlace), "packet %d's payload is the region's own bytes", i)
		}
	}

	// Without Env.Gather every packet is built whole.
	h2 := newQPT(t, p)
	h2.post(writeWR(1, 4096))
	_, pkts = h2.run()
	require.Len(t, pkts, 1)
	require.Nil(t, pkts[0].inPlace)
}

// TestRequesterInPlaceOnlyRC: a UC or UD send completes when its last
// packet is built, before the batch leaves, and the application may then
// reuse or free its buffer; so their payloads are copied even when the
// emitter could take them where they lie. (An RC send completes on its
// ACK, after the packet has left.)
func TestRequesterInPlaceOnlyRC(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.QPTypeUC, verbs.QPTypeUD} {
		p := defaultParams(typ)
		p.MTU = 4096
		h := newQPT(t, p)
		h.gather = true
		w := sendWR(1, 0, 4096)
		if typ == verbs.QPTypeUD {
			w.WR.UD = verbs.UDInfo{RemoteQPN: testPeerQPN, RemoteQKey: testQKey}
			w.Dst = p.Path
		}
		h.post(w)
		_, pkts := h.run()
		require.Len(t, pkts, 1, "%v", typ)
		require.True(t, pkts[0].inPlace == nil, "%v: the payload is copied, not sent from the region", typ)
		require.Equal(t, h.src[:4096], pkts[0].p.Payload)
		require.Len(t, h.scq.wcs, 1, "%v completes when the packet is built", typ)
	}
}
