package testbench

// Header validation (IBTA 9.6, packet transport header validation): a
// packet that fails a header check is silently dropped (no NAK, nothing
// executed, the QP unaffected) and counted.

import (
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// dropCase injects one packet at a DUT QP of the given type (which has a
// receive posted and is otherwise in a good state) and requires it to be
// dropped under name.
type dropCase struct {
	name   string
	typ    verbs.QPType
	state  *verbs.QPState // nil: RTS
	drop   string
	pkt    func() Pkt
	faults []Fault
}

func runDropCase(t *testing.T, tc dropCase) {
	t.Parallel()
	tb := New(t)
	state := verbs.QPStateRTS
	if tc.state != nil {
		state = *tc.state
	}
	recv := tb.Mem(t, 4096, AllAccess)
	fill(recv.Buf, 0xee)
	var send func(Pkt)
	var recvCQ *CQ
	var after func()
	switch tc.typ {
	case verbs.QPTypeUD:
		c := tb.NewUD(t, func(q *QPConfig) { q.State = state })
		if state >= verbs.QPStateRTR {
			c.PostRecv(t, 1, recv.SGE(0, 4096))
		}
		send = func(p Pkt) { c.Send(t, p, tc.faults...) }
		recvCQ = c.RecvCQ
		after = func() {}
	default:
		newConn := tb.NewRC
		if tc.typ == verbs.QPTypeUC {
			newConn = tb.NewUC
		}
		c := newConn(t, func(q *QPConfig) { q.State = state })
		if state >= verbs.QPStateRTR {
			c.PostRecv(t, 1, recv.SGE(0, 4096))
		}
		send = func(p Pkt) { c.Send(t, p, tc.faults...) }
		recvCQ = c.RecvCQ
		// The QP is unaffected: the request at the same PSN is executed.
		after = func() {
			if state != verbs.QPStateRTS {
				return
			}
			c.SendPSN = wire.MakePSN(c.Cfg.RQPSN)
			op := wire.RCSendOnly
			if tc.typ == verbs.QPTypeUC {
				op = wire.UCSendOnly
			}
			c.Send(t, Pkt{Op: op, Payload: []byte("good")})
			RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
			require.Equal(t, "good", string(recv.Buf[:4]))
		}
	}
	tb.ExpectDropped(t, tc.drop, func() { send(tc.pkt()) })
	recvCQ.RequireEmpty(t)
	untouched(t, recv.Buf, 0xee)
	after()
}

func sendOnly(op wire.OpCode) func() Pkt {
	return func() Pkt { return Pkt{Op: op, AckReq: true, Payload: []byte("dropped")} }
}

// IBTA 9.6.1.x and rxe_recv.c (check_type_state, check_keys, check_addr,
// rxe_rcv): the checks every received packet passes before the transport
// looks at it.
func TestHeaderValidationDrops(t *testing.T) {
	rc, uc, ud := verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD
	cases := []dropCase{
		// rxe check_addr: RC/UC packets must come from the connected
		// peer's address.
		{name: "RCFromAnotherAddress", typ: rc, drop: DropAddress, pkt: sendOnly(wire.RCSendOnly), faults: []Fault{From(DefaultOtherAddr)}},
		{name: "UCFromAnotherAddress", typ: uc, drop: DropAddress, pkt: sendOnly(wire.UCSendOnly), faults: []Fault{From(DefaultOtherAddr)}},
		// IBTA 9.2.6, 10.9 (P_Key): a P_Key that matches no table entry
		// (softhca has only the default partition) is dropped.
		{name: "RCPKeyMismatch", typ: rc, drop: DropPKey, pkt: func() Pkt {
			return Pkt{Op: wire.RCSendOnly, AckReq: true, PKey: P(uint16(0x8001)), Payload: []byte("x")}
		}},
		{name: "UDPKeyMismatch", typ: ud, drop: DropPKey, pkt: func() Pkt {
			return Pkt{PKey: P(uint16(0x1234)), Payload: []byte("x")}
		}},
		// IBTA 9.6.1.x (the opcode's transport must be the QP's service
		// type) / rxe check_type_state.
		{name: "UCOpcodeToRCQP", typ: rc, drop: DropTransportMismatch, pkt: sendOnly(wire.UCSendOnly)},
		{name: "RCOpcodeToUCQP", typ: uc, drop: DropTransportMismatch, pkt: sendOnly(wire.RCSendOnly)},
		{name: "UDOpcodeToRCQP", typ: rc, drop: DropTransportMismatch, pkt: func() Pkt {
			return Pkt{Op: wire.UDSendOnly, DETH: &wire.DETHFields{QKey: 1, SrcQP: 5}, Payload: []byte("x")}
		}},
		{name: "RCOpcodeToUDQP", typ: ud, drop: DropTransportMismatch, pkt: sendOnly(wire.RCSendOnly)},
		// IBTA 9.6.1.x: a destination QP that does not exist.
		{name: "UnknownDestinationQP", typ: rc, drop: DropUnknownQP, pkt: func() Pkt {
			return Pkt{Op: wire.RCSendOnly, AckReq: true, DestQP: P(uint32(0xabcdef)), Payload: []byte("x")}
		}},
		// IBTA 7.8.1 / annex A17.3.3 (RoCEv2 ICRC): a packet whose ICRC
		// does not verify is dropped (rxe_icrc_check).
		{name: "BadICRC", typ: rc, drop: DropBadICRC, pkt: sendOnly(wire.RCSendOnly), faults: []Fault{BadICRC()}},
		{name: "BadICRCOnUD", typ: ud, drop: DropBadICRC, pkt: func() Pkt { return Pkt{Payload: []byte("x")} }, faults: []Fault{BadICRC()}},
		// IBTA 9.2.5: a transport header version other than 0.
		{name: "TransportVersion1", typ: rc, drop: DropBadTVer, pkt: func() Pkt {
			return Pkt{Op: wire.RCSendOnly, AckReq: true, TVer: 1, Payload: []byte("x")}
		}},
		// IBTA 9.2.4 (pad count): payload and pad are a multiple of four.
		{name: "PadNotToFourBytes", typ: rc, drop: DropBadPad, pkt: sendOnly(wire.RCSendOnly), faults: []Fault{PadCount(0)}},
		{name: "PadLongerThanData", typ: rc, drop: DropBadPad, pkt: func() Pkt {
			return Pkt{Op: wire.RCRDMAReadRequest, AckReq: true, RETH: &wire.RETHFields{}}
		}, faults: []Fault{Edit(func(b []byte) { wire.BTH(b).SetPadCount(3) })}},
		// IBTA 9.4.3: an RDMA READ request carries no payload.
		{name: "PayloadOnReadRequest", typ: rc, drop: DropPayloadNotAllowed, pkt: func() Pkt {
			return Pkt{Op: wire.RCRDMAReadRequest, AckReq: true, RETH: &wire.RETHFields{}, Payload: []byte("abcd")}
		}},
		// IBTA 9.2.1 (table 38): a reserved opcode.
		{name: "ReservedOpcode", typ: rc, drop: DropReservedOpCode, pkt: sendOnly(wire.RCSendOnly),
			faults: []Fault{Edit(func(b []byte) { b[0] = 0x18 })}},
		// A packet cut short inside its headers.
		{name: "TruncatedHeaders", typ: rc, drop: DropTruncated, pkt: func() Pkt {
			return Pkt{Op: wire.RCRDMAWriteOnly, AckReq: true, RETH: &wire.RETHFields{}}
		}, faults: []Fault{Truncate(8)}},
		// IBTA 10.3.1 (a QP in RESET or INIT does not process incoming
		// packets) / rxe check_type_state.
		{name: "RCQPInInit", typ: rc, state: P(verbs.QPStateInit), drop: DropQPState, pkt: sendOnly(wire.RCSendOnly)},
		{name: "RCQPInReset", typ: rc, state: P(verbs.QPStateReset), drop: DropQPState, pkt: sendOnly(wire.RCSendOnly)},
		{name: "UDQPInInit", typ: ud, state: P(verbs.QPStateInit), drop: DropQPState, pkt: func() Pkt { return Pkt{Payload: []byte("x")} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runDropCase(t, tc) })
	}
}

// IBTA 10.9.1 (partition membership): the DUT's only P_Key is 0xFFFF
// (full member), which accepts packets from a limited member (0x7FFF).
func TestPKeyLimitedMemberAccepted(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	recv := tb.Mem(t, 64, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 64))
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, PKey: P(uint16(0x7fff)), Payload: []byte("limited")})
	c.Expect(t, ACK(psn).WithMSN(1))
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
}

// RoCEv2 senders choose the UDP source port freely (0xC000 | entropy):
// the DUT accepts its peer's packets from any source port.
func TestAnySourcePortAccepted(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	recv := tb.Mem(t, 64, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 64))
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("port")}, FromPort(0xc001))
	c.Expect(t, ACK(psn).WithMSN(1))
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
}
