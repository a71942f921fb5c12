package transport

import (
	"encoding/binary"
	"reflect"
	"testing"
	"time"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// FuzzQPReceive feeds arbitrary packets to an RC, a UC and a UD QP in
// RTS, each with work outstanding both ways (sent requests awaiting
// responses, posted receives, registered memory), and checks what must
// hold whatever arrives:
//
//   - nothing panics;
//   - every packet is either counted under exactly one drop reason or
//     handled: it changed the QP's protocol state, touched memory,
//     completed something, emitted a packet, or asked something of the
//     caller (Effects);
//   - every packet the QP emits parses, has a good ICRC (the recorder
//     checks) and fits a link buffer.
//
// The input is a sequence of frames, each a 2-byte big-endian length and
// that many bytes: a control byte (bit 0: call Run after the packet; bit
// 1: let the QP's timer expire and call Timer) and the InfiniBand packet,
// BTH through ICRC. Frames that do not parse (wire.ParseTransport) are
// skipped; the ICRC value is not checked, since the QP never sees
// packets whose ICRC is wrong.
func FuzzQPReceive(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		qps := fuzzQPs(t)
		var p wire.Packet
		for len(data) >= 2 {
			n := min(int(binary.BigEndian.Uint16(data)), len(data)-2)
			frame := data[2 : 2+n]
			data = data[2+n:]
			if len(frame) < 1 {
				continue
			}
			ctl, raw := frame[0], frame[1:]
			if wire.ParseTransport(raw, &p) != wire.DropNone {
				continue
			}
			for _, h := range qps {
				p.Net = h.peerNet()
				before := h.snapshot()
				statsBefore := h.stats.Snapshot()
				fx := h.q.Receive(h.env(), &p)
				after := h.snapshot()
				statsAfter := h.stats.Snapshot()
				dropped := statsAfter.Dropped() - statsBefore.Dropped()
				if dropped > 1 {
					t.Fatalf("%s QP: %s counted under %d drop reasons", h.q.P.Type, p.BTH.OpCode(), dropped)
				}
				// Handled means: a drop counted, an effect, a change of
				// the QP, or another counter (a CNP within
				// RateCutInterval of the last cut changes nothing but
				// CNPsReceived: DCQCN cuts once for a burst's marks).
				if dropped == 0 && fx == (Effects{}) && reflect.DeepEqual(before, after) && reflect.DeepEqual(statsBefore, statsAfter) {
					t.Fatalf("%s QP: %s PSN %d neither handled nor counted as dropped",
						h.q.P.Type, p.BTH.OpCode(), p.BTH.PSN())
				}
				h.applyFail(fx)
				if ctl&1 != 0 {
					h.applyFail(h.q.Run(h.env()))
				}
				if ctl&2 != 0 {
					if d := h.q.Deadline(); d.After(h.now) {
						h.now = d
					}
					h.applyFail(h.q.Timer(h.env()))
					h.applyFail(h.q.Run(h.env()))
				}
				h.out.take()
				h.now = h.now.Add(time.Microsecond)
			}
		}
	})
}

// qpSnapshot is what a packet may change in a QP.
type qpSnapshot struct {
	state    verbs.QPState
	req      Requester
	comp     Completer
	resp     Responder
	rate     rateControl
	wqes     []SendWQE
	rq       int
	scq, rcq int
	emitted  int
	lookups  int
}

func (h *qpt) snapshot() qpSnapshot {
	s := qpSnapshot{state: h.q.state, req: h.q.req, comp: h.q.comp, resp: h.q.resp, rate: h.q.rate,
		rq: len(h.rq.q), scq: len(h.scq.wcs), rcq: len(h.rcq.wcs), emitted: len(h.out.pkts), lookups: h.mem.lookups}
	s.resp.res = append([]resource(nil), h.q.resp.res...)
	s.resp.recv.SGL = append([]verbs.SGE(nil), h.q.resp.recv.SGL...)
	for i := range h.sq.Len() {
		s.wqes = append(s.wqes, *h.sq.At(i))
	}
	return s
}

// fuzzQPs returns the three QPs: an RC QP that sent a SEND, a READ, an
// ATOMIC, a WRITE and another ATOMIC (PSNs 1000-1009) and has receives
// posted; a UC QP with receives; a UD QP with receives.
func fuzzQPs(t testing.TB) []*qpt {
	const size = 4096
	rc := newQPTSized(t, defaultParams(verbs.QPTypeRC), size)
	uc := newQPTSized(t, defaultParams(verbs.QPTypeUC), size)
	udp := defaultParams(verbs.QPTypeUD)
	udp.MTU = 1024
	ud := newQPTSized(t, udp, size)
	for _, h := range []*qpt{rc, uc, ud} {
		h.postRecv(1, 0, 700)
		h.postRecv(2, 1024, 40+1024)
		h.rq.post(3, verbs.SGE{Addr: dstVA + 2100, Length: 100, LKey: lkeyDst},
			verbs.SGE{Addr: dstVA + 2300, Length: 1000, LKey: lkeyDst})
	}
	for _, w := range fuzzSends() {
		rc.post(w)
	}
	rc.q.Run(rc.env())
	rc.out.take()
	// An RC QP on a tag-matching SRQ: two tags (0 and 1) and the
	// ordinary buffers above.
	tm := newQPTSized(t, defaultParams(verbs.QPTypeRC), size)
	tq := &fakeTQ{rq: tm.rq}
	tm.q.TQ = tq
	tm.postRecv(1, 0, 700)
	tm.postRecv(2, 1024, 1000)
	tq.addTag(0, 0, 10, 2100, 500)
	tq.addTag(1, 1, 11, 2600, 1400)
	return []*qpt{rc, uc, ud, tm}
}

// fuzzSends are the RC QP's send WQEs: PSNs SEND 1000-1002, READ
// 1003-1005, FetchAdd 1006, WRITE 1007-1008, CmpSwap 1009.
func fuzzSends() []SendWQE {
	read := readWR(2, 3000, 600)
	read.SGL[0].Addr = dstVA + 3000
	return []SendWQE{
		sendWR(1, 0, 600),
		read,
		atomicWR(3, verbs.WRAtomicFetchAndAdd, 3800, 1, 0),
		writeWR(4, 300),
		atomicWR(5, verbs.WRAtomicCmpAndSwp, 3808, 1, 2),
	}
}

// frames encodes packets as fuzz input, each with control byte ctl.
func frames(ctl byte, pkts ...[]byte) []byte {
	var b []byte
	for _, p := range pkts {
		b = binary.BigEndian.AppendUint16(b, uint16(1+len(p)))
		b = append(b, ctl)
		b = append(b, p...)
	}
	return b
}

// seedPacket builds a valid packet of opcode op for the fuzz QPs.
func seedPacket(op wire.OpCode, psn uint32) []byte {
	info := op.Info()
	var hd wire.Headers
	hd.BTH = wire.BTHFields{OpCode: op, PKey: 0xffff, DestQP: testQPN, PSN: wire.MakePSN(psn), AckReq: info.Pos.Last()}
	hd.DETH = wire.DETHFields{QKey: testQKey, SrcQP: 0x33}
	hd.RETH = wire.RETHFields{VirtualAddress: memVA, RKey: rkeyMem, DMALength: 600}
	if info.Pos == wire.PosOnly {
		hd.RETH.DMALength = 100
	}
	hd.AtomicETH = wire.AtomicETHFields{VirtualAddress: memVA + 8, RKey: rkeyMem, SwapAddData: 3, CompareData: 0}
	hd.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: 1}
	hd.AtomicAckETH = 77
	hd.ImmDt, hd.IETH = 5, 6
	n := 0
	switch {
	case !info.Payload:
	case info.FixedLen > 0:
		n = info.FixedLen
	case op.Transport() == wire.TransportUD:
		n = 100
	case info.Kind == wire.KindReadResponse && info.Pos == wire.PosLast:
		n = 600 - 2*testMTU
	case info.Pos == wire.PosFirst || info.Pos == wire.PosMiddle:
		n = testMTU
	default:
		n = 100
	}
	if info.Kind == wire.KindReadRequest {
		hd.RETH.DMALength = 600
	}
	net := wire.Net{Src: peerAddr, Dst: localAddr, SrcPort: 50000, DstPort: wire.RoCEv2Port, DontFragment: true}
	return wire.AppendPacket(nil, &net, &hd, pattern(byte(op), n))
}

// fuzzSeeds are valid packets of every opcode, one per input, then
// whole exchanges: messages in sequence, READ responses, NAKs.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for i := range 256 {
		op := wire.OpCode(i)
		if !op.Valid() {
			continue
		}
		psn := uint32(testRQPSN)
		if !op.Info().Request {
			psn = testSQPSN + 2
			switch op {
			case wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseOnly:
				psn = testSQPSN + 3
			case wire.RCRDMAReadResponseMiddle:
				psn = testSQPSN + 4
			case wire.RCRDMAReadResponseLast:
				psn = testSQPSN + 5
			case wire.RCAtomicAcknowledge:
				psn = testSQPSN + 6
			default:
			}
		}
		seeds = append(seeds, frames(1, seedPacket(op, psn)))
	}
	ackH := func(psn uint32, syn wire.Syndrome) []byte {
		hd := aethPacket(wire.RCAcknowledge, psn, syn, 1)
		hd.BTH.PKey = 0xffff
		n := wire.Net{Src: peerAddr, Dst: localAddr}
		return wire.AppendPacket(nil, &n, &hd, nil)
	}
	seeds = append(seeds,
		frames(1, seedPacket(wire.RCSendFirst, testRQPSN), seedPacket(wire.RCSendMiddle, testRQPSN+1),
			seedPacket(wire.RCSendLast, testRQPSN+2), seedPacket(wire.RCRDMAReadRequest, testRQPSN+3)),
		frames(1, seedPacket(wire.UCSendFirst, testRQPSN), seedPacket(wire.UCSendLast, testRQPSN+2),
			seedPacket(wire.UCRDMAWriteFirst, testRQPSN+3), seedPacket(wire.UCRDMAWriteMiddle, testRQPSN+4),
			seedPacket(wire.UCRDMAWriteLast, testRQPSN+5)),
		frames(0, seedPacket(wire.RCRDMAReadResponseMiddle, testSQPSN+4), seedPacket(wire.RCRDMAReadResponseFirst, testSQPSN+3),
			seedPacket(wire.RCRDMAReadResponseLast, testSQPSN+5), seedPacket(wire.RCAtomicAcknowledge, testSQPSN+6),
			ackH(testSQPSN+9, wire.ACKSyndrome(wire.CreditsInvalid))),
		frames(3, ackH(testSQPSN+1, wire.NAKSyndrome(wire.NAKPSNSequenceError)),
			ackH(testSQPSN+1, wire.RNRNAKSyndrome(3)), ackH(testSQPSN+2, wire.NAKSyndrome(wire.NAKRemoteAccessError))),
		frames(2, seedPacket(wire.RCRDMAReadRequest, testRQPSN), seedPacket(wire.RCSendOnly, testRQPSN+3),
			seedPacket(wire.RCRDMAReadRequest, testRQPSN), seedPacket(wire.RCFetchAdd, testRQPSN+4),
			seedPacket(wire.RCFetchAdd, testRQPSN+4)),
		// Duplicate and stale responses, a duplicate and a future
		// request, a message out of sequence, a wrong P_Key and Q_Key.
		frames(0, ackH(testSQPSN+2, wire.ACKSyndrome(wire.CreditsInvalid)), ackH(testSQPSN+2, wire.ACKSyndrome(wire.CreditsInvalid)),
			ackH(testSQPSN-5, wire.ACKSyndrome(wire.CreditsInvalid)), ackH(testSQPSN+50, wire.ACKSyndrome(wire.CreditsInvalid))),
		frames(0, seedPacket(wire.RCRDMAReadResponseOnly, testSQPSN+3), seedPacket(wire.RCAtomicAcknowledge, testSQPSN+6),
			seedPacket(wire.RCAtomicAcknowledge, testSQPSN+6), seedPacket(wire.RCRDMAReadResponseFirst, testSQPSN+3)),
		frames(1, seedPacket(wire.RCSendOnly, testRQPSN-1), seedPacket(wire.RCSendOnly, testRQPSN+5),
			seedPacket(wire.RCSendOnly, testRQPSN+6), seedPacket(wire.RCSendMiddle, testRQPSN),
			seedPacket(wire.UCSendMiddle, testRQPSN+7), seedPacket(wire.UCSendMiddle, testRQPSN+7)),
		frames(0, withPKey(seedPacket(wire.RCSendOnly, testRQPSN), 0x1234), withQKey(seedPacket(wire.UDSendOnly, 1), 9)),
		// Tag matching (the fourth QP): EAGER to tag 0, a rendezvous to
		// tag 1 and its READ's responses, NO_TAG, FIN, an unexpected tag.
		frames(1, seedTM(wire.RCSendOnly, testRQPSN, append(tmh(wire.TMEager, 0, 1), 7, 7, 7, 7)),
			seedTM(wire.RCSendOnly, testRQPSN+1, append(tmh(wire.TMRendezvous, 1, 2), rvh(peerVA, rkeyPeer, 300)...)),
			seedTM(wire.RCRDMAReadResponseFirst, testSQPSN, make([]byte, testMTU)),
			seedTM(wire.RCRDMAReadResponseLast, testSQPSN+1, make([]byte, 300-testMTU)),
			seedTM(wire.RCSendOnly, testRQPSN+2, tmh(wire.TMNoTag, 0, 0)),
			seedTM(wire.RCSendOnly, testRQPSN+3, tmh(wire.TMFin, 1, 2)),
			seedTM(wire.RCSendOnly, testRQPSN+4, tmh(wire.TMEager, 99, 0))),
	)
	return seeds
}

// seedTM is an RC packet from the peer with the payload given (and an
// AETH for a READ response).
func seedTM(op wire.OpCode, psn uint32, payload []byte) []byte {
	var hd wire.Headers
	hd.BTH = wire.BTHFields{OpCode: op, PKey: 0xffff, DestQP: testQPN, PSN: wire.MakePSN(psn), AckReq: op.Info().Pos.Last()}
	hd.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: 1}
	n := wire.Net{Src: peerAddr, Dst: localAddr}
	return wire.AppendPacket(nil, &n, &hd, payload)
}

// withPKey sets a packet's P_Key.
func withPKey(raw []byte, pkey uint16) []byte {
	binary.BigEndian.PutUint16(raw[2:], pkey)
	return raw
}

// withQKey sets a UD packet's Q_Key.
func withQKey(raw []byte, qkey uint32) []byte {
	binary.BigEndian.PutUint32(raw[wire.BTHSize:], qkey)
	return raw
}

// TestFuzzSeeds checks that every frame of the fuzz target's seeds
// parses, so that the seeds reach the protocol.
func TestFuzzSeeds(t *testing.T) {
	for i, s := range fuzzSeeds(t) {
		for len(s) > 0 {
			n := int(binary.BigEndian.Uint16(s))
			var p wire.Packet
			if d := wire.ParseTransport(s[3:2+n], &p); d != wire.DropNone {
				t.Fatalf("seed %d: a frame does not parse: %v", i, d)
			}
			s = s[2+n:]
		}
	}
}
