package transport

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// The responder on a tag-matching SRQ (tagmatch.go), packet by packet,
// against a fake TagQueue: which bytes go where, which completions, and
// the rendezvous READ and FIN the QP issues itself.

// fakeTQ is a TagQueue: tags are a list of (tag, entry) matched exactly,
// earliest first; ordinary buffers come from rq.
type fakeTQ struct {
	rq    *fakeRQ
	tags  []fakeTag
	unexp int
	wcs   []verbs.WC
	ends  []uint32 // the handles the completions ended
}

type fakeTag struct {
	tag    uint64
	handle uint32
	wqe    verbs.RecvWQE
}

func (f *fakeTQ) Arrive(tag uint64, dst *verbs.RecvWQE) (TagVerdict, uint32, bool) {
	for i, e := range f.tags {
		if e.tag == tag {
			f.tags = append(f.tags[:i], f.tags[i+1:]...)
			dst.WRID, dst.SGL = e.wqe.WRID, append(dst.SGL[:0], e.wqe.SGL...)
			return TagMatched, e.handle, false
		}
	}
	if !f.rq.Take(dst) {
		return TagNone, 0, false
	}
	f.unexp++
	return TagUnexpected, 0, false
}

func (f *fakeTQ) Take(dst *verbs.RecvWQE) bool { return f.rq.Take(dst) }

func (f *fakeTQ) Complete(wc verbs.WC, _ bool, ends bool, handle uint32) {
	f.wcs = append(f.wcs, wc)
	if ends {
		f.ends = append(f.ends, handle)
	}
}

func (f *fakeTQ) take() []verbs.WC {
	w := f.wcs
	f.wcs = nil
	return w
}

// newTM returns an RC QP on a fake tag-matching SRQ.
func newTM(t testing.TB) (*qpt, *fakeTQ) {
	h := newRC(t)
	tq := &fakeTQ{rq: h.rq}
	h.q.TQ = tq
	return h, tq
}

// addTag puts an entry for tag with a buffer of n bytes at off in the
// destination region.
func (f *fakeTQ) addTag(tag uint64, handle uint32, wrID uint64, off, n uint32) {
	f.tags = append(f.tags, fakeTag{tag: tag, handle: handle,
		wqe: verbs.RecvWQE{WRID: wrID, SGL: []verbs.SGE{{Addr: dstVA + uint64(off), Length: n, LKey: lkeyDst}}}})
}

func tmh(op wire.TMOpcode, tag uint64, appCtx uint32) []byte {
	b := make([]byte, wire.TMHSize)
	wire.TMH(b).Encode(&wire.TMHFields{Opcode: op, AppCtx: appCtx, Tag: tag})
	return b
}

func rvh(va uint64, rkey, n uint32) []byte {
	b := make([]byte, wire.RVHSize)
	wire.RVH(b).Encode(&wire.RVHFields{VirtualAddress: va, RKey: rkey, Length: n})
	return b
}

// TestTMEagerAcrossPackets: a matched EAGER message of three packets: the
// TMH is dropped from the first, the rest lands in the tag's buffer, one
// completion at the last packet.
func TestTMEagerAcrossPackets(t *testing.T) {
	h, tq := newTM(t)
	tq.addTag(0x42, 3, 77, 0, 1000)
	data := pattern(9, 600)
	msg := append(tmh(wire.TMEager, 0x42, 0xc0ffee), data...) // 616 bytes: 256+256+104
	_, _ = h.receive(request(wire.RCSendFirst, testRQPSN), msg[:256])
	_, _ = h.receive(request(wire.RCSendMiddle, testRQPSN+1), msg[256:512])
	require.Empty(t, tq.wcs)
	_, _ = h.receive(request(wire.RCSendLast, testRQPSN+2), msg[512:])
	got := tq.take()
	require.Len(t, got, 1)
	require.Equal(t, verbs.WC{WRID: 77, Opcode: verbs.WCTMRecv, ByteLen: 600, QPNum: testQPN, SrcQP: testPeerQPN,
		WCFlags: verbs.WCFlagTMMatch | verbs.WCFlagTMDataValid, TMInfo: verbs.TMInfo{Tag: 0x42, Priv: 0xc0ffee}}, got[0])
	require.Equal(t, []uint32{3}, tq.ends)
	require.True(t, bytes.Equal(data, h.dst[:600]))
	require.Empty(t, h.rcq.wcs, "nothing on the QP's own receive CQ")
}

// TestTMUnexpectedAndNoTag: whole messages, TMH included, to ordinary
// buffers; a message too short for a TMH is a NO_TAG message.
func TestTMUnexpectedAndNoTag(t *testing.T) {
	h, tq := newTM(t)
	h.postRecv(1, 0, 200)
	h.postRecv(2, 200, 200)
	h.postRecv(3, 400, 200)
	eager := append(tmh(wire.TMEager, 5, 0), 1, 2, 3)
	_, _ = h.receive(request(wire.RCSendOnly, testRQPSN), eager)
	noTag := append(tmh(wire.TMNoTag, 5, 0), 4, 5)
	_, _ = h.receive(request(wire.RCSendOnly, testRQPSN+1), noTag)
	short := []byte{byte(wire.TMEager), 0, 0}
	_, _ = h.receive(request(wire.RCSendOnly, testRQPSN+2), short)
	got := tq.take()
	require.Len(t, got, 3)
	require.Equal(t, verbs.WC{WRID: 1, Opcode: verbs.WCTMRecv, ByteLen: uint32(len(eager)), QPNum: testQPN, SrcQP: testPeerQPN}, got[0])
	require.Equal(t, verbs.WCTMNoTag, got[1].Opcode)
	require.Equal(t, uint64(2), got[1].WRID)
	require.Equal(t, verbs.WCTMNoTag, got[2].Opcode, "no room for a TMH: not a tagged message")
	require.True(t, bytes.Equal(eager, h.dst[:len(eager)]))
	require.True(t, bytes.Equal(noTag, h.dst[200:200+len(noTag)]))
	require.Equal(t, 1, tq.unexp)
	require.Empty(t, tq.ends)
}

// TestTMNoBufferRNR: an unexpected message without an ordinary buffer is
// RNR-NAKed and changes nothing; sent again, it is taken.
func TestTMNoBufferRNR(t *testing.T) {
	h, tq := newTM(t)
	msg := append(tmh(wire.TMEager, 5, 0), 1)
	_, pkts := h.receive(request(wire.RCSendOnly, testRQPSN), msg)
	require.Len(t, pkts, 1)
	require.True(t, pkts[0].syn().Kind() == wire.AckKindRNRNAK)
	require.Zero(t, tq.unexp)
	h.postRecv(1, 0, 100)
	_, _ = h.receive(request(wire.RCSendOnly, testRQPSN), msg)
	require.Len(t, tq.take(), 1)
	require.Equal(t, 1, tq.unexp)
}

// TestTMRendezvous: a matched RNDV: the MATCH completion at the request's
// last packet, the QP's own READ of the RVH's buffer, the data placed in
// the tag's buffer, DATA_VALID, and the FIN sent to the peer.
func TestTMRendezvous(t *testing.T) {
	h, tq := newTM(t)
	tq.addTag(0x77, 9, 55, 0, 4096)
	req := append(append(tmh(wire.TMRendezvous, 0x77, 0xabc), rvh(peerVA, rkeyPeer, 300)...), []byte("meta")...)
	fx, pkts := h.receive(request(wire.RCSendOnly, testRQPSN), req)
	require.True(t, fx.Run, "the READ waits for Run")
	require.Empty(t, pkts, "the ACK is coalesced")
	got := tq.take()
	require.Len(t, got, 1)
	require.Equal(t, verbs.WC{WRID: 55, Opcode: verbs.WCTMRecv, ByteLen: 300, QPNum: testQPN, SrcQP: testPeerQPN,
		WCFlags: verbs.WCFlagTMMatch, TMInfo: verbs.TMInfo{Tag: 0x77, Priv: 0xabc}}, got[0])
	require.Empty(t, tq.ends, "the entry is not done yet")
	require.Equal(t, 1, h.q.Internal())

	_, pkts = h.run()
	require.Len(t, pkts, 2, "%v", ops(pkts))
	require.Equal(t, wire.RCRDMAReadRequest, pkts[0].op())
	require.Equal(t, uint64(peerVA), pkts[0].p.RETH.VirtualAddress())
	require.Equal(t, uint32(rkeyPeer), pkts[0].p.RETH.RKey())
	require.Equal(t, uint32(300), pkts[0].p.RETH.DMALength())
	require.Equal(t, wire.RCAcknowledge, pkts[1].op())

	data := pattern(4, 300)
	fx, _ = h.receive(readResp(wire.RCRDMAReadResponseFirst, testSQPSN), data[:256])
	_, _ = h.receive(readResp(wire.RCRDMAReadResponseLast, testSQPSN+1), data[256:])
	got = tq.take()
	require.Len(t, got, 1)
	require.Equal(t, verbs.WC{WRID: 55, Opcode: verbs.WCTMRecv, ByteLen: 300, QPNum: testQPN, SrcQP: testPeerQPN,
		WCFlags: verbs.WCFlagTMDataValid, TMInfo: verbs.TMInfo{Tag: 0x77, Priv: 0xabc}}, got[0])
	require.Equal(t, []uint32{9}, tq.ends)
	require.True(t, bytes.Equal(data, h.dst[:300]))
	require.Empty(t, h.scq.wcs, "the QP's own requests complete nowhere")

	_, pkts = h.run()
	require.Len(t, pkts, 1)
	require.Equal(t, wire.RCSendOnly, pkts[0].op(), "the FIN")
	require.Equal(t, wire.TMHFields{Opcode: wire.TMFin, AppCtx: 0xabc, Tag: 0x77}, wire.TMH(pkts[0].p.Payload).Fields())
	_, _ = h.receive(ack(testSQPSN+2, 1), nil)
	require.Zero(t, h.q.Internal())
}

// TestTMRendezvousFlushedAndReset: a QP entering the error state flushes
// a rendezvous READ, and the tag's last completion says so; a QP reset
// with a rendezvous in progress does the same, so no handle is lost.
func TestTMRendezvousFlushedAndReset(t *testing.T) {
	for _, reset := range []bool{false, true} {
		h, tq := newTM(t)
		tq.addTag(1, 4, 10, 0, 4096)
		req := append(tmh(wire.TMRendezvous, 1, 0), rvh(peerVA, rkeyPeer, 100)...)
		_, _ = h.receive(request(wire.RCSendOnly, testRQPSN), req)
		_, _ = h.run()
		tq.take()
		if reset {
			h.q.SetState(verbs.QPStateReset, 0, 0)
		} else {
			h.q.SetState(verbs.QPStateErr, 0, 0)
			h.q.FlushSend()
		}
		got := tq.take()
		require.Len(t, got, 1, "reset=%v", reset)
		require.Equal(t, verbs.WCWRFlushErr, got[0].Status)
		require.Equal(t, uint64(10), got[0].WRID)
		require.Equal(t, []uint32{4}, tq.ends)
	}
}

// TestTMRendezvousSlots: a rendezvous that finds every slot taken is
// RNR-NAKed before it is matched: the tag stays for its retry.
func TestTMRendezvousSlots(t *testing.T) {
	h, tq := newTM(t)
	for i := range rndvSlots + 1 {
		tq.addTag(uint64(i), uint32(i), uint64(i), uint32(i)*100, 100)
	}
	for i := range rndvSlots {
		req := append(tmh(wire.TMRendezvous, uint64(i), 0), rvh(peerVA, rkeyPeer, 10)...)
		_, _ = h.receive(request(wire.RCSendOnly, testRQPSN+uint32(i)), req)
	}
	require.Len(t, tq.take(), rndvSlots)
	req := append(tmh(wire.TMRendezvous, rndvSlots, 0), rvh(peerVA, rkeyPeer, 10)...)
	_, pkts := h.receive(request(wire.RCSendOnly, testRQPSN+rndvSlots), req)
	require.NotEmpty(t, pkts)
	require.True(t, pkts[len(pkts)-1].syn().Kind() == wire.AckKindRNRNAK)
	require.Len(t, tq.tags, 1, "not matched")
}

// TestTMRendezvousTooLong: an RVH longer than the tag's buffer, or than a
// message may be, completes the tag with LOC_LEN_ERR without a READ; the
// FIN is still sent.
func TestTMRendezvousTooLong(t *testing.T) {
	for _, c := range []struct {
		buf, rvh uint32
	}{{100, 101}, {0xffffffff, 1<<31 + 1}} {
		h, tq := newTM(t)
		tq.addTag(1, 2, 3, 0, c.buf)
		// Without AckReq no acknowledgement is owed: only the FIN
		// needs Run.
		req := request(wire.RCSendOnly, testRQPSN)
		req.BTH.AckReq = false
		fx, _ := h.receive(req, append(tmh(wire.TMRendezvous, 1, 0), rvh(peerVA, rkeyPeer, c.rvh)...))
		require.True(t, fx.Run, "the FIN waits for Run")
		got := tq.take()
		require.Len(t, got, 2)
		require.Equal(t, verbs.WCTMRecv, got[1].Opcode)
		require.Equal(t, verbs.WCLocLenErr, got[1].Status, "buffer %d, RVH %d", c.buf, c.rvh)
		require.Equal(t, []uint32{2}, tq.ends)
		_, pkts := h.run()
		require.Equal(t, []wire.OpCode{wire.RCSendOnly}, ops(pkts), "the FIN, no READ")
	}
}

// TestTMRendezvousSlotFreedAtREADEnd: a rendezvous gives its slot back
// when its READ completes, not when its FIN is acknowledged; the FIN takes
// the READ's internal request slot. With four FINs awaiting their ACKs,
// four more rendezvous are taken. Before, each held a slot (of four) until
// its FIN's ACK, and these were RNR-NAKed (BenchmarkTMThroughput showed 53
// RNR NAKs in 300 messages).
func TestTMRendezvousSlotFreedAtREADEnd(t *testing.T) {
	const half = InternalSlots / 2
	h, tq := newTM(t)
	h.fullWindow()
	h.q.P.MaxRdAtomic = InternalSlots // every READ may be outstanding at once
	for i := range 2 * half {
		tq.addTag(uint64(i), uint32(i), uint64(i), uint32(i)*100, 100)
	}
	rndv := func(i int) []sent {
		req := append(tmh(wire.TMRendezvous, uint64(i), 0), rvh(peerVA, rkeyPeer, 10)...)
		_, pkts := h.receive(request(wire.RCSendOnly, testRQPSN+uint32(i)), req)
		return pkts
	}
	for i := range half {
		rndv(i)
	}
	_, pkts := h.run()
	require.Len(t, pkts, half+1, "the READs and the ACK of the requests: %v", ops(pkts))
	for i := range half {
		_, _ = h.receive(readResp(wire.RCRDMAReadResponseOnly, testSQPSN+uint32(i)), make([]byte, 10))
	}
	_, pkts = h.run()
	require.Len(t, pkts, half, "the FINs, not acknowledged yet: %v", ops(pkts))
	require.Equal(t, half, h.q.Internal())
	tq.take()

	for i := half; i < 2*half; i++ {
		for _, p := range rndv(i) {
			require.NotEqual(t, wire.AckKindRNRNAK, p.syn().Kind(), "rendezvous %d: a slot is free once its READ ended", i)
		}
	}
	require.Len(t, tq.take(), half, "all matched")
	require.Equal(t, 2*half, h.q.Internal(), "four FINs and four READs")
}
