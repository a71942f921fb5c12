package transport

import (
	"testing"
	"time"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// Congestion control (cc.go), driven with the test's clock: the window,
// the device window, the DCQCN rate and the CNPs.

// ackAll acknowledges everything the requester sent.
func (h *qpt) ackAll(msn uint32) {
	h.t.Helper()
	fx, _ := h.receive(ack(uint32(h.q.req.maxPSN.Sub(1)), msn), nil)
	require.Equal(h.t, FailNone, fx.Fail)
}

// TestWindowGrowsAndHalves: the window starts at InitialWindow, grows by
// what each ACK covers (slow start), halves on a sequence NAK once per
// window of packets, never drops below MinWindow, and never exceeds the
// 128 PSNs IBTA allows.
func TestWindowGrowsAndHalves(t *testing.T) {
	h := newRC(t)
	h.cc = NewCongestion(CCConfig{InitialWindow: 4, MinWindow: 2, DeviceWindow: -1})
	h.post(sendWR(1, 0, 64*testMTU))
	_, pkts := h.run()
	require.Len(t, pkts, 4, "the initial window")
	require.True(t, pkts[3].p.BTH.AckReq(), "the packet that fills the window asks for an ACK")
	h.ackAll(0)
	require.Equal(t, 8, h.q.Window(), "slow start: the window grows by the packets acknowledged")
	_, pkts = h.run()
	require.Len(t, pkts, 8)

	// A sequence NAK for the first of them: halved once.
	first := pkts[0].psn()
	fx, _ := h.receive(nak(first, wire.NAKPSNSequenceError), nil)
	require.True(t, fx.Run)
	require.Equal(t, 4, h.q.Window())
	// A second NAK within the same window does not cut again.
	_, _ = h.receive(nak(first+2, wire.NAKPSNSequenceError), nil)
	require.Equal(t, 4, h.q.Window(), "one cut per window of packets")
	require.EqualValues(t, 1, h.stats.WindowCuts.Load())
	_, pkts = h.run()
	require.Equal(t, []uint32{first + 2, first + 3, first + 4, first + 5}, psns(pkts), "the go-back resends within the halved window")

	// Timeouts halve down to the floor, never below.
	for range 4 {
		h.advance(time.Second)
		fx, _ = h.timer()
		require.Equal(t, FailNone, fx.Fail)
		h.q.ParamsChanged() // a fresh retry budget: only the window is under test
	}
	require.Equal(t, 2, h.q.Window(), "MinWindow")

	// Growth stops at 128.
	h2 := newRC(t)
	h2.cc = NewCongestion(CCConfig{InitialWindow: 100, DeviceWindow: -1})
	h2.post(sendWR(1, 0, 60000))
	_, _ = h2.run()
	h2.ackAll(0)
	require.Equal(t, maxUnackedPSNs, h2.q.Window())
}

// TestWindowDuplicateAcks: three repeats of the last acknowledgement
// while packets are outstanding cut the window (the peer received
// packets twice).
func TestWindowDuplicateAcks(t *testing.T) {
	h := newRC(t)
	h.cc = NewCongestion(CCConfig{InitialWindow: 8, MinWindow: 2, DeviceWindow: -1})
	h.post(sendWR(1, 0, 20*testMTU))
	_, _ = h.run()
	_, _ = h.receive(ack(testSQPSN+1, 0), nil)
	w := h.q.Window()
	for i := range 3 {
		_, _ = h.receive(ack(testSQPSN+1, 0), nil)
		if i < 2 {
			require.Equal(t, w, h.q.Window(), "not yet")
		}
	}
	require.Equal(t, w/2, h.q.Window())
	require.EqualValues(t, 3, h.drops()[DropDuplicateAck.String()])
}

// TestDeviceWindow: the QPs of a device together keep at most
// DeviceWindow packets in flight; a QP the device window stops says so
// (Effects.DeviceWait: the scheduler runs it again when there is room)
// and keeps no short timer of its own; acknowledgements and leaving RTS
// give the room back.
func TestDeviceWindow(t *testing.T) {
	cc := NewCongestion(CCConfig{InitialWindow: 16, DeviceWindow: 20})
	a, b := newRC(t), newRC(t)
	a.cc, b.cc = cc, cc
	a.post(sendWR(1, 0, 16*testMTU))
	b.post(sendWR(1, 0, 16*testMTU))
	fx, pa := a.run()
	require.Len(t, pa, 16)
	require.False(t, fx.DeviceWait)
	fx, pb := b.run()
	require.Len(t, pb, 4, "the device window's rest")
	require.True(t, fx.DeviceWait, "the scheduler must run the QP again when there is room")
	require.True(t, pb[3].p.BTH.AckReq(), "the last packet before the device window stops the QP asks for an ACK")
	require.False(t, pb[2].p.BTH.AckReq())
	require.Equal(t, 20, cc.InFlight())
	require.Equal(t, 0, cc.room())
	require.EqualValues(t, 1, b.stats.DeviceWaits.Load())
	require.Equal(t, b.now.Add(timeoutDuration(b.q.P.Timeout)), b.q.Deadline(), "only the transport timer runs")

	fx, pb = b.run()
	require.Empty(t, pb, "still no room")
	require.True(t, fx.DeviceWait)

	a.ackAll(1)
	require.Equal(t, 4, cc.InFlight(), "the ACK gave the room back")
	fx, pb = b.run()
	require.Len(t, pb, 12)
	require.False(t, fx.DeviceWait)
	require.Equal(t, 16, cc.InFlight())

	b.q.SetState(verbs.QPStateErr, 0, 0)
	require.Equal(t, 0, cc.InFlight(), "a QP that stops gives its room back")
	a.post(sendWR(2, 0, testMTU))
	_, _ = a.run()
	a.q.SetState(verbs.QPStateReset, 0, 0)
	require.Equal(t, 0, cc.InFlight(), "RESET gives the room back too")
}

// TestCNPAnswersCE: a packet marked CE is answered with a CNP to the
// peer QP (RoCEv2 annex A17.9.2: opcode 0x81, BECN set, the originator's
// QP number, 16 reserved bytes), at most one per CNPInterval.
func TestCNPAnswersCE(t *testing.T) {
	h := newRC(t)
	h.q.P.Type = verbs.QPTypeRC
	send := func(psn uint32, tc uint8) []sent {
		var hd wire.Headers
		hd.BTH = wire.BTHFields{OpCode: wire.RCSendOnly, DestQP: testQPN, PSN: wire.MakePSN(psn)}
		p := h.packet(hd, pattern(1, 8))
		p.Net.TrafficClass = tc
		h.postRecv(uint64(psn), 0, 100)
		_ = h.q.Receive(h.env(), p)
		return h.out.take()
	}
	pkts := send(testRQPSN, 0x02) // ECT(0): nothing
	require.Empty(t, pkts)
	pkts = send(testRQPSN+1, 0x03) // CE
	require.Len(t, pkts, 1)
	cnp := pkts[0]
	require.Equal(t, wire.CNP, cnp.op())
	require.True(t, cnp.p.BTH.BECN())
	require.Equal(t, h.q.P.DestQPN, cnp.p.BTH.DestQP())
	require.Len(t, cnp.p.CNPReserved, wire.CNPReservedSize)
	require.Equal(t, h.q.P.Path, cnp.dst)
	pkts = send(testRQPSN+2, 0x03)
	require.Empty(t, pkts, "within CNPInterval: no second CNP")
	h.advance(50 * time.Microsecond)
	pkts = send(testRQPSN+3, 0x03)
	require.Len(t, pkts, 1)
	require.EqualValues(t, 3, h.stats.CEReceived.Load())
	require.EqualValues(t, 2, h.stats.CNPsSent.Load())
}

// TestCNPCutsRate: a CNP starts pacing at the rate the QP was sending
// at (here LineRate) and cuts it as DCQCN does; the pacer stops Run when
// the token bucket is empty and Deadline says when it refills; with no
// further CNP the rate recovers and pacing ends.
func TestCNPCutsRate(t *testing.T) {
	h := newQPT(t, defaultParams(verbs.QPTypeUC))
	h.cc = NewCongestion(CCConfig{LineRate: 8e9, RateBurst: 4 * testMTU, DeviceWindow: -1}) // 1 GB/s
	require.Zero(t, h.q.Rate(), "unpaced")
	var hd wire.Headers
	hd.BTH = wire.BTHFields{OpCode: wire.CNP, BECN: true, DestQP: testQPN}
	fx, _ := h.receive(hd, nil)
	require.Equal(t, Effects{}, fx)
	require.EqualValues(t, 1, h.stats.CNPsReceived.Load())
	require.EqualValues(t, 1, h.stats.RateCuts.Load())
	require.InDelta(t, 4e9, h.q.Rate(), 1, "alpha starts at 1: the first cut halves")

	h.post(sendWR(1, 0, 32*testMTU))
	_, pkts := h.run()
	require.NotEmpty(t, pkts)
	require.Less(t, len(pkts), 32, "the bucket holds RateBurst bytes")
	require.EqualValues(t, 1, h.stats.PacerWaits.Load())
	d := h.q.Deadline()
	require.True(t, d.After(h.now))
	h.now = d
	fx, _ = h.timer()
	require.True(t, fx.Run, "the pacer lets the QP go on")
	_, more := h.run()
	require.NotEmpty(t, more)

	// A second CNP right away asks for the same cut: none; one a period
	// later cuts again.
	r := h.q.Rate()
	_, _ = h.receive(hd, nil)
	require.Equal(t, r, h.q.Rate(), "at most one cut a period")
	require.EqualValues(t, 1, h.stats.RateCuts.Load())
	h.advance(300 * time.Microsecond)
	_, _ = h.receive(hd, nil)
	require.EqualValues(t, 2, h.stats.RateCuts.Load())
	require.Less(t, h.q.Rate(), 4e9)
	// A quiet second earns no more than the 10 periods after the last
	// packet: the QP learned nothing of the path meanwhile.
	h.advance(time.Second)
	h.post(sendWR(2, 0, testMTU))
	_, _ = h.run()
	require.EqualValues(t, quietPeriods, h.stats.RateIncreases.Load(), "no increase for time spent quiet")
	// Sending without CNPs, the rate climbs back to the line rate,
	// where it stays paced (a configured line rate is the rate to pace
	// at).
	h.sendFor(time.Second)
	require.InDelta(t, 8e9, h.q.Rate(), 1)
	require.NotZero(t, h.stats.RateIncreases.Load())
	require.Zero(t, h.stats.RateUnpaced.Load())
}

// TestCNPUnknownLineRate: without a configured line rate, pacing starts
// at the rate the QP was sending at, and ends once the rate has
// recovered to it.
func TestCNPUnknownLineRate(t *testing.T) {
	h := newQPT(t, defaultParams(verbs.QPTypeUC))
	h.cc = NewCongestion(CCConfig{DeviceWindow: -1})
	// 64 KiB in 100 us, then more: 5.24 Gbit/s measured.
	for range 3 {
		h.post(sendWR(1, 0, 256*testMTU))
		_, _ = h.run()
		h.advance(100 * time.Microsecond)
	}
	var hd wire.Headers
	hd.BTH = wire.BTHFields{OpCode: wire.CNP, BECN: true, DestQP: testQPN}
	_, _ = h.receive(hd, nil)
	require.Greater(t, h.q.Rate(), 1e9, "about half the measured rate")
	require.Less(t, h.q.Rate(), 256*testMTU*8/100e-6)
	h.sendFor(time.Second)
	require.Zero(t, h.q.Rate(), "recovered: unpaced")
	require.EqualValues(t, 1, h.stats.RateUnpaced.Load())
}

// sendFor keeps the QP sending for d of test time (a packet or more
// every 100 us, as the pacer allows).
func (h *qpt) sendFor(d time.Duration) {
	h.t.Helper()
	for end := h.now.Add(d); h.now.Before(end); h.advance(100 * time.Microsecond) {
		if h.sq.Len() < 2 {
			h.post(sendWR(9, 0, 4*testMTU))
		}
		if dl := h.q.Deadline(); !dl.IsZero() && !dl.After(h.now) {
			_, _ = h.timer()
		}
		_, _ = h.runBudget(2 * testMTU)
	}
}

// TestCNPFromElsewhere: a CNP for a connected QP from another address
// than its peer's is dropped and counted (as every such packet).
func TestCNPFromElsewhere(t *testing.T) {
	h := newRC(t)
	var hd wire.Headers
	hd.BTH = wire.BTHFields{OpCode: wire.CNP, BECN: true, DestQP: testQPN}
	p := h.packet(hd, nil)
	p.Net.Src = p.Net.Dst
	_ = h.q.Receive(h.env(), p)
	require.Zero(t, h.stats.CNPsReceived.Load())
	h.requireDrops(map[DropReason]uint64{DropAddress: 1})
}

// TestReadInParts: a READ longer than the window is asked for a window
// of responses at a time; each part is a READ request of its own whose
// RETH starts where the previous part ended; a response lost within a
// part is asked for again only up to that part's end (IBTA 9.7.6.1.4:
// what the responder remembers).
func TestReadInParts(t *testing.T) {
	h := newRC(t)
	h.cc = NewCongestion(CCConfig{InitialWindow: 8, MinWindow: 8, DeviceWindow: -1})
	const n = 20 * testMTU
	data := pattern(7, n)
	part := func(i uint32) []byte { return data[i*testMTU : (i+1)*testMTU] }
	pkts := h.sendAll(readWR(1, 0, n))
	require.Len(t, pkts, 1)
	require.Equal(t, wire.RETHFields{VirtualAddress: peerVA, RKey: rkeyPeer, DMALength: 8 * testMTU}, pkts[0].p.RETH.Fields())

	// Responses 0..7 but 5: the last one of the part shows 5 missing.
	for i := uint32(0); i < 8; i++ {
		if i == 5 {
			continue
		}
		op := wire.RCRDMAReadResponseMiddle
		if i == 0 {
			op = wire.RCRDMAReadResponseFirst
		}
		_, _ = h.receive(readResp(op, testSQPSN+i), part(i))
	}
	_, pkts = h.run()
	require.Len(t, pkts, 1)
	require.Equal(t, uint32(testSQPSN+5), pkts[0].psn())
	require.Equal(t, wire.RETHFields{VirtualAddress: peerVA + 5*testMTU, RKey: rkeyPeer, DMALength: 3 * testMTU},
		pkts[0].p.RETH.Fields(), "again, up to the part's end only")

	fx, _ := h.receive(readResp(wire.RCRDMAReadResponseMiddle, testSQPSN+5), part(5))
	require.True(t, fx.Run, "the part arrived: the next may be asked for")
	// The rest, part by part: each part starts where the last ended and
	// is no longer than the window.
	asked, got, parts := uint32(8), uint32(8), 1
	for got < 20 {
		_, pkts = h.run()
		for _, p := range pkts {
			require.Equal(t, wire.RCRDMAReadRequest, p.op())
			require.Equal(t, testSQPSN+asked, p.psn(), "the next part starts where the last ended")
			require.EqualValues(t, peerVA+uint64(asked)*testMTU, p.p.RETH.VirtualAddress())
			k := p.p.RETH.DMALength() / testMTU
			require.LessOrEqual(t, int(k), h.q.Window())
			asked += k
			parts++
		}
		require.Greater(t, asked, got, "a part was asked for")
		for ; got < asked; got++ {
			op := wire.RCRDMAReadResponseMiddle
			if got == 19 {
				op = wire.RCRDMAReadResponseLast
			}
			_, _ = h.receive(readResp(op, testSQPSN+got), part(got))
		}
	}
	require.GreaterOrEqual(t, parts, 2)
	require.Equal(t, []string{"1:success"}, wcs(h.scq.take()))
	require.Equal(t, data, h.dst[:n])
}

// TestReadResponderLossCutsRate: a duplicate READ asking again for
// responses the responder sent means they were lost: the responder's rate
// is cut to what the path delivered, and its responses are paced.
func TestReadResponderLossCutsRate(t *testing.T) {
	h := newRC(t)
	h.cc = NewCongestion(CCConfig{RateBurst: 2 * testMTU, DeviceWindow: -1})
	const n = 10 * testMTU
	read := func(psn, off, length uint32) wire.Headers {
		var hd wire.Headers
		hd.BTH = wire.BTHFields{OpCode: wire.RCRDMAReadRequest, DestQP: testQPN, PSN: wire.MakePSN(psn), AckReq: true}
		hd.RETH = wire.RETHFields{VirtualAddress: memVA + uint64(off), RKey: rkeyMem, DMALength: length}
		return hd
	}
	_, _ = h.receive(read(testRQPSN, 0, n), nil)
	// The responses leave 10 us apart.
	for i := range 10 {
		if i > 0 {
			h.advance(10 * time.Microsecond)
		}
		_, pkts := h.runBudget(1)
		require.Len(t, pkts, 1)
	}
	require.Zero(t, h.q.Rate())
	h.advance(time.Millisecond)
	// Responses 4.. were lost: the requester asks again from 4, after
	// its timer; 4 of the 10 responses sent in 90 us got through.
	_, _ = h.receive(read(testRQPSN+4, 4*testMTU, 6*testMTU), nil)
	require.EqualValues(t, 1, h.stats.RateCuts.Load())
	require.InDelta(t, 4*testMTU*8/90e-6, h.q.Rate(), 1, "the delivered rate, in bits per second")
	_, pkts := h.run()
	require.Len(t, pkts, 2, "paced: the bucket's RateBurst")
	require.EqualValues(t, 2, h.stats.RetxPackets.Load())
}

// TestReadPartAcknowledgedWithoutResponses: an ACK whose PSN lies in a
// READ part whose responses have not arrived (a responder answering a
// duplicate request acknowledges up to its expected PSN) is an implied
// NAK: the part is asked for again, and the READ's PSNs count as
// acknowledged only up to its first missing response, so the transport
// timer keeps running. Before, the requester took the whole part as
// acknowledged and, with nothing outstanding, waited forever.
func TestReadPartAcknowledgedWithoutResponses(t *testing.T) {
	h := newRC(t)
	h.cc = NewCongestion(CCConfig{InitialWindow: 8, MinWindow: 8, DeviceWindow: -1})
	pkts := h.sendAll(readWR(1, 0, 20*testMTU))
	require.Len(t, pkts, 1)
	fx, _ := h.receive(ack(testSQPSN+7, 1), nil)
	require.True(t, fx.Run)
	require.False(t, h.q.Deadline().IsZero(), "the transport timer runs")
	_, pkts = h.run()
	require.Len(t, pkts, 1)
	require.Equal(t, uint32(testSQPSN), pkts[0].psn())
	require.Equal(t, wire.RETHFields{VirtualAddress: peerVA, RKey: rkeyPeer, DMALength: 8 * testMTU}, pkts[0].p.RETH.Fields())
}

// TestPacedQPRunsAfterCNP: a QP the pacer stopped is run when its wait
// ends even if a CNP meanwhile restarted its pacing (the timer armed for
// the wait must still find a reason to run it). Before, the CNP cleared
// the wait and the QP, its timer finding nothing due, never sent again.
func TestPacedQPRunsAfterCNP(t *testing.T) {
	h := newQPT(t, defaultParams(verbs.QPTypeUC))
	h.cc = NewCongestion(CCConfig{RateBurst: 2 * testMTU, DeviceWindow: -1})
	var cnp wire.Headers
	cnp.BTH = wire.BTHFields{OpCode: wire.CNP, BECN: true, DestQP: testQPN}
	_, _ = h.receive(cnp, nil)
	h.post(sendWR(1, 0, 32*testMTU))
	_, pkts := h.run()
	require.NotEmpty(t, pkts)
	d := h.q.Deadline()
	require.False(t, d.IsZero(), "stopped by the pacer")
	// Much later (the rate has recovered), a CNP, then the timer armed
	// for d fires.
	h.advance(time.Second)
	_, _ = h.receive(cnp, nil)
	fx, _ := h.timer()
	require.True(t, fx.Run, "the QP runs again")
	_, pkts = h.run()
	require.NotEmpty(t, pkts)
}

// TestDeviceRate: with CCConfig.DeviceRate, the device's QPs together
// send a burst of RateBurst bytes, then at the rate: two UC QPs that
// always have something to send, run whenever their deadlines come over
// 50 ms of the test's clock, send the rate's bytes (within one packet of
// the burst), each waiting its turn.
func TestDeviceRate(t *testing.T) {
	const rate = 10e6 // bit/s: 62.5 KB in 50 ms, less than the 128 KiB posted
	const burst = 8 * testMTU
	cc := NewCongestion(CCConfig{DeviceRate: rate, RateBurst: burst, DeviceWindow: -1})
	qps := []*qpt{newQPT(t, defaultParams(verbs.QPTypeUC)), newQPT(t, defaultParams(verbs.QPTypeUC))}
	start := qps[0].now
	for _, h := range qps {
		h.cc, h.now = cc, start
		for i := range 4 {
			h.post(sendWR(uint64(i), 0, 64*testMTU))
		}
	}
	bytes, pkts := 0, 0
	perQP := [2]int{}
	count := func(i int, out []sent) {
		for _, s := range out {
			bytes += len(s.raw)
			perQP[i] += len(s.raw)
			pkts++
		}
	}
	// At the start: one burst between them.
	_, out := qps[0].run()
	count(0, out)
	first := len(out)
	require.Positive(t, first)
	require.Less(t, first, 64, "the first QP stopped within its message")
	_, out = qps[1].run()
	require.Empty(t, out, "the burst is the device's, not each QP's")
	pktSize := bytes / first
	require.Equal(t, burst/pktSize+1, first, "a packet leaves while at most RateBurst bytes are ahead of the rate")

	end := start.Add(50 * time.Millisecond)
	now := start
	for {
		next := time.Time{}
		for _, h := range qps {
			if d := h.q.Deadline(); !d.IsZero() && (next.IsZero() || d.Before(next)) {
				next = d
			}
		}
		require.False(t, next.IsZero(), "a QP the device rate stopped has a deadline")
		if next.After(end) {
			break
		}
		now = next
		for i, h := range qps {
			h.now = now
			if d := h.q.Deadline(); !d.IsZero() && !now.Before(d) {
				fx, _ := h.timer()
				if fx.Run {
					_, out := h.run()
					count(i, out)
				}
			}
		}
	}
	want := rate / 8 * end.Sub(start).Seconds()
	require.InDelta(t, want+burst, float64(bytes), float64(2*pktSize), "sent: the burst and 50 ms at the rate")
	require.Positive(t, qps[0].stats.DeviceRateWaits.Load()+qps[1].stats.DeviceRateWaits.Load())
	// The QPs take turns in the order the rate stopped them: qps[0], run
	// first whenever both are due, does not take every turn.
	require.InDelta(t, perQP[0], perQP[1], float64(burst+2*pktSize), "each QP's bytes %v", perQP)
	for _, h := range qps {
		require.NotEmpty(t, h.scq.wcs, "messages of both completed")
	}
}

// readRespOp is the opcode of response i of a READ of n responses.
func readRespOp(i, n uint32) wire.OpCode {
	switch {
	case n == 1:
		return wire.RCRDMAReadResponseOnly
	case i == 0:
		return wire.RCRDMAReadResponseFirst
	case i == n-1:
		return wire.RCRDMAReadResponseLast
	}
	return wire.RCRDMAReadResponseMiddle
}

// TestReadWaitsForRoom: a READ the window could take whole but whose
// room is short waits for the room instead of asking for a fragment of
// itself now (whose rest it could ask for only once the fragment's
// responses arrived, with every request behind it waiting as long); once
// the responses before it arrive, it is asked for whole. ib_read_bw with
// 64 KiB READs and a deep send queue asked for one READ in eight in two
// parts before, and lost about a fifth of its bandwidth.
func TestReadWaitsForRoom(t *testing.T) {
	h := newRC(t)
	h.cc = NewCongestion(CCConfig{InitialWindow: 8, MinWindow: 8, DeviceWindow: -1})
	const n = 5 * testMTU
	data := pattern(3, 2*n)
	pkts := h.sendAll(readWR(1, 0, n), readWR(2, n, n))
	require.Len(t, pkts, 1, "the second READ does not fit the 3 PSNs left: it waits")
	require.Equal(t, wire.RETHFields{VirtualAddress: peerVA, RKey: rkeyPeer, DMALength: n}, pkts[0].p.RETH.Fields())

	var fx Effects
	for i := uint32(0); i < 5; i++ {
		fx, _ = h.receive(readResp(readRespOp(i, 5), testSQPSN+i), data[i*testMTU:(i+1)*testMTU])
	}
	require.True(t, fx.Run, "the room opened: the scheduler runs the QP again")
	_, pkts = h.run()
	require.Len(t, pkts, 1)
	require.Equal(t, wire.RCRDMAReadRequest, pkts[0].op())
	require.Equal(t, uint32(testSQPSN+5), pkts[0].psn())
	require.Equal(t, wire.RETHFields{VirtualAddress: peerVA, RKey: rkeyPeer, DMALength: n},
		pkts[0].p.RETH.Fields(), "asked for whole")
	for i := uint32(0); i < 5; i++ {
		_, _ = h.receive(readResp(readRespOp(i, 5), testSQPSN+5+i), data[n+i*testMTU:n+(i+1)*testMTU])
	}
	require.Equal(t, []string{"1:success", "2:success"}, wcs(h.scq.take()))
	require.Equal(t, data, h.dst[:2*n])
}

// TestReadPartsPipelined: a READ longer than the window is asked for in
// parts of readPartPSNs responses, as many as the window and
// max_rd_atomic allow at once (each part is a READ the responder holds a
// resource for), and the next part as soon as a part's responses arrived,
// not once all asked for did; a response lost asks again for the rest of
// its part and then for the parts after it, each as it was asked (a
// duplicate of the request the responder is answering would restart
// it). With max_rd_atomic 1, one part at a time.
func TestReadPartsPipelined(t *testing.T) {
	const k = readPartPSNs
	const n = 8 * k * testMTU // longer than the 128-PSN window
	data := pattern(9, n)
	resp := func(h *qpt, i uint32) Effects {
		fx, _ := h.receive(readResp(readRespOp(i, 8*k), testSQPSN+i), data[i*testMTU:(i+1)*testMTU])
		return fx
	}
	parts := func(pkts []sent) (out [][2]uint32) {
		for _, p := range pkts {
			require.Equal(t, wire.RCRDMAReadRequest, p.op())
			off := p.psn() - testSQPSN
			require.EqualValues(t, peerVA+uint64(off)*testMTU, p.p.RETH.VirtualAddress(), "part %d's RETH", off)
			out = append(out, [2]uint32{off, p.p.RETH.DMALength() / testMTU})
		}
		return out
	}

	h := newRC(t).fullWindow()
	require.Equal(t, [][2]uint32{{0, k}, {k, k}, {2 * k, k}, {3 * k, k}}, parts(h.sendAll(readWR(1, 0, n))),
		"four parts fill the window (max_rd_atomic 4)")
	var fx Effects
	for i := uint32(0); i < k; i++ {
		fx = resp(h, i)
	}
	require.True(t, fx.Run, "a part arrived: the next may be asked for")
	_, pkts := h.run()
	require.Equal(t, [][2]uint32{{4 * k, k}}, parts(pkts))

	// The second part loses its sixth response: once readReorderTolerance
	// later ones came, the rest of that part is asked for again, then the
	// parts after it as they were.
	for i := uint32(k); i < k+5; i++ {
		resp(h, i)
	}
	for i := uint32(k + 6); i <= k+5+readReorderTolerance; i++ {
		fx = resp(h, i)
	}
	require.True(t, fx.Run)
	_, pkts = h.run()
	require.Equal(t, [][2]uint32{{k + 5, k - 5}, {2 * k, k}, {3 * k, k}, {4 * k, k}}, parts(pkts))
	for i := uint32(k + 5); i < 8*k; i++ {
		if fx = resp(h, i); fx.Run {
			_, pkts = h.run()
			for _, p := range parts(pkts) {
				require.Zero(t, p[0]%k, "parts start at multiples of readPartPSNs")
				require.Greater(t, p[0], uint32(4*k), "only new parts")
			}
		}
	}
	require.Equal(t, []string{"1:success"}, wcs(h.scq.take()))
	require.Equal(t, data, h.dst[:n])

	// max_rd_atomic 1: one part outstanding at a time.
	p := defaultParams(verbs.QPTypeRC)
	p.MaxRdAtomic = 1
	h1 := newQPT(t, p).fullWindow()
	require.Equal(t, [][2]uint32{{0, k}}, parts(h1.sendAll(readWR(1, 0, n))))
	for i := uint32(0); i < k-1; i++ {
		resp(h1, i)
	}
	_, pkts = h1.run()
	require.Empty(t, pkts)
	resp(h1, k-1)
	_, pkts = h1.run()
	require.Equal(t, [][2]uint32{{k, k}}, parts(pkts))
}

// TestReadPartsCountAgainstMaxRdAtomic: a READ does not start while the
// parts of an earlier one already take max_rd_atomic. Counted per work
// request, it started: the responder then had more READs outstanding
// than it remembers, forgot the oldest part, and a response of that part
// lost could never be asked for again (TestPairLossyLong with seed 350 of
// 4,000 made no progress with retries forever).
func TestReadPartsCountAgainstMaxRdAtomic(t *testing.T) {
	const k = readPartPSNs
	p := defaultParams(verbs.QPTypeRC)
	p.MaxRdAtomic = 2
	h := newQPT(t, p).fullWindow()
	data := pattern(2, 5*k*testMTU)
	pkts := h.sendAll(readWR(1, 0, 5*k*testMTU), readWR(2, 0, testMTU))
	require.Equal(t, []uint32{testSQPSN, testSQPSN + k}, psns(pkts), "two parts: max_rd_atomic")
	// Each part that arrives lets the next be asked for, until the first
	// READ has all its parts asked for, two of them outstanding.
	for part := uint32(0); part < 3; part++ {
		for i := part * k; i < (part+1)*k; i++ {
			_, _ = h.receive(readResp(readRespOp(i, 5*k), testSQPSN+i), data[i*testMTU:(i+1)*testMTU])
		}
		_, pkts = h.run()
		require.Equal(t, []uint32{testSQPSN + (part+2)*k}, psns(pkts),
			"after part %d: the next part only, not the second READ", part)
	}
}

// TestReadWholeCountsOnce: a READ asked for whole is one request against
// max_rd_atomic however many blocks of readPartPSNs it spans; counted per
// block, a 40-response READ took both of max_rd_atomic 2 and the next
// READ waited for nothing.
func TestReadWholeCountsOnce(t *testing.T) {
	p := defaultParams(verbs.QPTypeRC)
	p.MaxRdAtomic = 2
	h := newQPT(t, p).fullWindow()
	pkts := h.sendAll(readWR(1, 0, 40*testMTU), readWR(2, 40*testMTU, testMTU))
	require.Equal(t, []uint32{testSQPSN, testSQPSN + 40}, psns(pkts), "both READs asked for")
	require.EqualValues(t, 40*testMTU, pkts[0].p.RETH.DMALength(), "the first whole")
}
