package testbench

// Answering RDMA READs: the responses of a long READ are built a budget
// at a time, sharing the link with every other QP, and duplicates of a
// READ being answered restart it rather than add streams (issue 11: one
// 256 MiB READ used to build its whole answer in one worker pass, stalling
// every other QP of the worker, and each duplicate added a whole answer).

import (
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

const bigRead = 4 << 20 // 1024 responses at MTU 4096

// IBTA 9.7.5.1.3 does not let a READ hold the responder's other QPs: a
// SEND to another QP that arrives together with a 4 MiB READ is
// acknowledged long before the READ's last response (after one Run budget
// of it), because responses are built a budget at a time, round robin
// among the worker's QPs.
func TestReadReplySharesTheWorker(t *testing.T) {
	t.Parallel()
	tb := New(t, WithPortMTU(verbs.MTU4096))
	mtu4k := func(q *QPConfig) { q.PathMTU = verbs.MTU4096 }
	a := tb.NewRC(t, mtu4k)
	b := tb.NewRC(t, mtu4k)
	mem := tb.Mem(t, bigRead, AllAccess)
	recv := tb.Mem(t, 64, AllAccess)
	b.PostRecv(t, 1, recv.SGE(0, 64))
	readPSN, sendPSN := a.SendPSN, b.SendPSN

	tb.Link.Hold()
	a.Send(t, Pkt{Op: wire.RCRDMAReadRequest, AckReq: true, RETH: mem.RETH(0, bigRead)})
	b.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("not stalled")})
	tb.Link.Release()

	responses := 0
	for {
		pk := tb.Next(t)
		if pk.P.BTH.DestQP() == b.Cfg.PeerQPN {
			require.Equal(t, wire.RCAcknowledge, pk.Op(), "the other QP's answer: %s", pk)
			require.Equal(t, sendPSN, pk.PSN())
			break
		}
		require.Equal(t, readPSN.Add(uint32(responses)), pk.PSN(), "READ responses in order")
		responses++
	}
	t.Logf("the other QP's ACK came after %d of the READ's %d responses", responses, bigRead/4096)
	require.Less(t, responses, bigRead/4096/4, "the ACK waits for at most a fraction of the READ")
	RequireWC(t, b.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
	for responses < bigRead/4096 {
		pk := tb.Next(t)
		require.Equal(t, readPSN.Add(uint32(responses)), pk.PSN())
		responses++
	}
	tb.ExpectNothing(t)
}

// IBTA 9.7.5.1.3: a duplicate READ is answered again, but duplicates of
// the READ being answered restart its responses where they ask (rxe's
// duplicate_request) instead of adding whole answers: ten duplicates that
// arrive with the request cost nothing more than the one answer.
func TestReadReplyDuplicatesDoNotMultiply(t *testing.T) {
	t.Parallel()
	tb := New(t, WithPortMTU(verbs.MTU4096))
	a := tb.NewRC(t, func(q *QPConfig) { q.PathMTU = verbs.MTU4096 })
	const size = 1 << 20
	mem := tb.Mem(t, size, AllAccess)
	copy(mem.Buf, pattern(size, 5))
	psn := a.SendPSN
	req := Pkt{Op: wire.RCRDMAReadRequest, AckReq: true, RETH: mem.RETH(0, size)}

	tb.Link.Hold()
	a.Send(t, req)
	for range 10 {
		req.PSN = psnp(psn)
		a.Send(t, req)
	}
	tb.Link.Release()

	for i := range size / 4096 {
		a.Expect(t, Match{PSN: P(psn.Add(uint32(i))), Payload: mem.Buf[i*4096 : (i+1)*4096]})
	}
	tb.ExpectNothing(t)
	require.EqualValues(t, 10, tb.Drops()[DropDuplicate], "every duplicate counted")
}

// IBTA 9.7.5.1.3 (a duplicate READ is answered again from the responder
// resource it repeats) and rxe's duplicate_request: the duplicate must ask
// for the region (R_Key) and a part of the range the remembered READ
// named; one that asks for another region, or more than the original, is
// not answered (class D: dropped, counted as a duplicate).
func TestReadDuplicateForAnotherRegionDropped(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mtu := c.MTU()
	mem := tb.Mem(t, 4096, AllAccess)
	other := tb.Mem(t, 4096, AllAccess)
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, AckReq: true, RETH: mem.RETH(0, mtu)})
	c.Expect(t, Match{Op: P(wire.RCRDMAReadResponseOnly), PSN: P(psn)})
	tb.ExpectDropped(t, DropDuplicate, func() {
		c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, PSN: psnp(psn), AckReq: true, RETH: other.RETH(0, mtu)})
	})
	tb.ExpectDropped(t, DropDuplicate, func() {
		c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, PSN: psnp(psn), AckReq: true, RETH: mem.RETH(0, 2*mtu)})
	})
	// The duplicate of the READ itself is answered.
	c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, PSN: psnp(psn), AckReq: true, RETH: mem.RETH(0, mtu)})
	c.Expect(t, Match{Op: P(wire.RCRDMAReadResponseOnly), PSN: P(psn), Payload: mem.Buf[:mtu]})
	tb.ExpectNothing(t)
}
