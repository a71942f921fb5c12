package testbench

// RoCEv2 congestion notification (annex A17.9): a responder answers a
// packet a queue marked CE with a CNP to the originator of the flow.

import (
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// RoCEv2 A17.9.2: a request that arrives marked CE (ECN 0b11) is executed
// and acknowledged as any other, and the DUT sends a CNP (BTH opcode
// 0x81, BECN set, destination QP the requester's, 16 reserved bytes)
// before the ACK; an ECN-capable request that is not marked (ECT(0))
// brings no CNP.
func TestCEMarkedRequestBringsCNP(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	recv := tb.Mem(t, 64, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 64))
	c.PostRecv(t, 2, recv.SGE(0, 64))

	p := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("ect")}, TrafficClass(0b10))
	tb.Expect(t, ACK(p))

	p = c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("marked")}, TrafficClass(0b11))
	op := wire.CNP
	cnp := tb.Expect(t, Match{Op: &op, DestQP: &c.TBQPN})
	require.True(t, cnp.P.BTH.BECN(), "a CNP has BECN set")
	require.Len(t, cnp.P.CNPReserved, wire.CNPReservedSize)
	tb.Expect(t, ACK(p))

	require.Len(t, c.RecvCQ.Wait(t, 2), 2, "both SENDs delivered")
}
