package testbench

// UC and UD responders: no acknowledgements, losses drop messages, and
// every dropped packet is counted.

import (
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// IBTA 9.8 (unreliable connection): a UC responder never sends an
// acknowledgement, whatever AckReq says; SENDs and WRITEs land as on RC.
func TestUCDeliversWithoutAcknowledging(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUC(t)
	mtu := c.MTU()
	recv := tb.Mem(t, 4096, AllAccess)
	target := tb.Mem(t, 64, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 4096))
	msg := pattern(2*mtu+9, 4)
	c.Send(t, Pkt{Op: wire.UCSendFirst, AckReq: true, Payload: msg[:mtu]})
	c.Send(t, Pkt{Op: wire.UCSendMiddle, AckReq: true, Payload: msg[mtu : 2*mtu]})
	c.Send(t, Pkt{Op: wire.UCSendLastWithImmediate, AckReq: true, Imm: 42, Payload: msg[2*mtu:]})
	c.Send(t, Pkt{Op: wire.UCRDMAWriteOnly, AckReq: true, RETH: target.RETH(8, 5), Payload: []byte("write")})
	tb.ExpectNothing(t)
	wc := c.RecvCQ.Next(t)
	RequireWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	require.EqualValues(t, len(msg), wc.ByteLen)
	require.EqualValues(t, 42, wc.ImmData)
	require.Equal(t, msg, recv.Buf[:len(msg)])
	require.Equal(t, "write", string(target.Buf[8:13]))
}

// expectLossCNP takes the CNP a UC responder sends when it sees packets
// lost (a PSN gap): UC has no acknowledgement, so softhca asks the sender
// to slow down (docs/congestion.md; implementation-defined: rxe sends
// nothing).
func expectLossCNP(t *testing.T, tb *Testbench, c *RCConn) {
	t.Helper()
	op := wire.CNP
	tb.Expect(t, Match{Op: &op, DestQP: &c.TBQPN})
}

// IBTA 9.8.3 (UC responder), rxe check_psn: a missing packet drops the
// rest of its message (counted; no acknowledgement, only the loss CNP),
// nothing is completed, and the next ONLY starts afresh in the same
// receive WQE.
func TestUCMissingPacketDropsMessage(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUC(t)
	mtu := c.MTU()
	recv := tb.Mem(t, 4096, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 2048))
	c.PostRecv(t, 2, recv.SGE(2048, 2048))
	p := c.SendPSN
	c.Send(t, Pkt{Op: wire.UCSendFirst, Payload: pattern(mtu, 1)})
	// The MIDDLE at p+1 is lost.
	before := tb.Drops()
	c.Send(t, Pkt{Op: wire.UCSendLast, PSN: psnp(p.Add(2)), Payload: pattern(10, 2)})
	expectLossCNP(t, tb, c)
	tb.Barrier(t)
	require.Equal(t, map[string]uint64{DropUCOutOfSequence: 1}, tb.DropDelta(before))
	c.RecvCQ.RequireEmpty(t)
	c.Send(t, Pkt{Op: wire.UCSendOnly, PSN: psnp(p.Add(3)), Payload: []byte("fresh")})
	tb.ExpectNothing(t)
	wc := c.RecvCQ.Next(t)
	RequireWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	require.EqualValues(t, 5, wc.ByteLen)
	require.Equal(t, "fresh", string(recv.Buf[:5]))
}

// IBTA 9.8.3: after a missing packet, a FIRST (at whatever PSN) starts a
// new message: only that message's bytes are delivered.
func TestUCFirstAfterLossStartsAfresh(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUC(t)
	mtu := c.MTU()
	recv := tb.Mem(t, 4096, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 4096))
	p := c.SendPSN
	c.Send(t, Pkt{Op: wire.UCSendFirst, Payload: pattern(mtu, 1)})
	// p+1 (the rest of the first message) is lost.
	second := pattern(mtu+20, 50)
	c.Send(t, Pkt{Op: wire.UCSendFirst, PSN: psnp(p.Add(2)), Payload: second[:mtu]})
	expectLossCNP(t, tb, c)
	c.Send(t, Pkt{Op: wire.UCSendLast, PSN: psnp(p.Add(3)), Payload: second[mtu:]})
	tb.ExpectNothing(t)
	wc := c.RecvCQ.Next(t)
	RequireWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	require.EqualValues(t, len(second), wc.ByteLen)
	require.Equal(t, second, recv.Buf[:len(second)])
}

// IBTA 9.8.3, rxe RESPST_ERR_RNR for UC (class D): a UC SEND with no
// receive WQE is dropped silently and counted; nothing is sent; a later
// message is delivered once a receive is posted.
func TestUCNoReceiveDropped(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUC(t)
	tb.ExpectDropped(t, DropUCNoReceive, func() {
		c.Send(t, Pkt{Op: wire.UCSendOnly, AckReq: true, Payload: []byte("nobody")})
	})
	recv := tb.Mem(t, 64, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 64))
	c.Send(t, Pkt{Op: wire.UCSendOnly, Payload: []byte("somebody")})
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
	require.Equal(t, "somebody", string(recv.Buf[:8]))
}

// IBTA 9.8.3, 9.9.3 (UC responder errors are class D: the message is
// dropped, the QP stays usable) / rxe RESPST_ERR_RKEY_VIOLATION for UC:
// a UC WRITE with an invalid R_Key is dropped silently, writes nothing,
// and is counted like every dropped packet; the next WRITE lands.
func TestUCWriteBadRKeyDropped(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUC(t)
	target := tb.Mem(t, 64, AllAccess)
	fill(target.Buf, 0xee)
	tb.ExpectDropped(t, "", func() {
		c.Send(t, Pkt{Op: wire.UCRDMAWriteOnly, RETH: &wire.RETHFields{VirtualAddress: target.VA(0), RKey: target.RKey() + 0x100, DMALength: 4}, Payload: []byte("evil")})
	})
	untouched(t, target.Buf, 0xee)
	require.Equal(t, verbs.QPStateRTS.String(), c.State().String())
	c.Send(t, Pkt{Op: wire.UCRDMAWriteOnly, RETH: target.RETH(0, 4), Payload: []byte("good")})
	tb.ExpectNothing(t)
	require.Equal(t, "good", string(target.Buf[:4]))
}

// IBTA 9.8.4 (UD), 11.4.1.2 / ibv_post_recv(3): a UD message lands after
// the 40-byte GRH area of the receive buffer, which for an IPv4 packet
// holds 20 zero bytes and the IPv4 header (as rxe fills it); the WC has
// IBV_WC_GRH, the sender's QPN and a byte_len that counts the 40 bytes;
// immediate data is reported.
func TestUDDeliversAfterGRHArea(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUD(t)
	recv := tb.Mem(t, 40+64, AllAccess)
	fill(recv.Buf, 0xee)
	c.PostRecv(t, 1, recv.SGE(0, 40+64))
	msg := pattern(21, 6)
	c.Send(t, Pkt{Op: wire.UDSendOnlyWithImmediate, Imm: 0xfeed, Payload: msg})
	wc := c.RecvCQ.Next(t)
	RequireWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	require.EqualValues(t, 40+len(msg), wc.ByteLen)
	require.NotZero(t, wc.WCFlags&verbs.WCFlagGRH, "IBV_WC_GRH")
	require.NotZero(t, wc.WCFlags&verbs.WCFlagWithImm, "IBV_WC_WITH_IMM")
	require.EqualValues(t, 0xfeed, wc.ImmData)
	require.Equal(t, c.TBQPN, wc.SrcQP)

	// The IPv4 header of the datagram as it was on the wire.
	n := tb.PeerNet()
	p := Pkt{Op: wire.UDSendOnlyWithImmediate}
	h := p.headers()
	ibLen := h.PacketLen(len(msg))
	var hdr [wire.IPv4HeaderSize + wire.UDPHeaderSize]byte
	wire.EncodeIPUDP(hdr[:], &n, ibLen)
	require.Equal(t, make([]byte, 20), recv.Buf[:20], "GRH area: 20 zero bytes")
	require.Equal(t, hdr[:20], recv.Buf[20:40], "GRH area: the IPv4 header")
	require.Equal(t, msg, recv.Buf[40:40+len(msg)])
	untouched(t, recv.Buf[40+len(msg):], 0xee)
}

// IBTA 9.6.x (Q_Key check, C9-...: a UD packet whose Q_Key differs from
// the QP's is silently dropped) / rxe check_keys: dropped, counted, and
// the receive WQE stays for the next datagram.
func TestUDQKeyMismatchDropped(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUD(t)
	recv := tb.Mem(t, 128, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 128))
	tb.ExpectDropped(t, DropQKey, func() {
		c.Send(t, Pkt{DETH: &wire.DETHFields{QKey: c.Cfg.QKey ^ 1, SrcQP: c.TBQPN}, Payload: []byte("wrong key")})
	})
	c.RecvCQ.RequireEmpty(t)
	c.Send(t, Pkt{Payload: []byte("right key")})
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
}

// IBTA 9.8.4 / C10-93.1.1's receive side, rxe check_length ("only"
// packets: payload > mtu is RESPST_ERR_LENGTH, class D for UD): a UD
// datagram longer than the port MTU is dropped and counted even when the
// receive buffer could hold it; the WQE stays for the next datagram.
func TestUDPayloadLongerThanPortMTUDropped(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUD(t)
	recv := tb.Mem(t, 40+4096, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 40+4096))
	tb.ExpectDropped(t, "", func() {
		c.Send(t, Pkt{Payload: pattern(1024+4, 1)})
	})
	c.RecvCQ.RequireEmpty(t)
	c.Send(t, Pkt{Payload: pattern(1024, 2)})
	wc := c.RecvCQ.Next(t)
	RequireWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	require.EqualValues(t, 40+1024, wc.ByteLen)
}

// ibv_post_recv(3) ("a message longer than the buffer: UD drops it"),
// rxe send_data_in -> RESPST_ERR_LENGTH, class D: a UD message that does
// not fit the receive buffer (GRH area included) is dropped and counted;
// the receive WQE stays for the next datagram that fits.
func TestUDMessageLongerThanReceiveBufferDropped(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUD(t)
	recv := tb.Mem(t, 40+16, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 40+16))
	tb.ExpectDropped(t, DropUDTooLong, func() {
		c.Send(t, Pkt{Payload: pattern(17, 1)})
	})
	c.RecvCQ.RequireEmpty(t)
	c.Send(t, Pkt{Payload: pattern(16, 2)})
	RequireWC(t, c.RecvCQ.Next(t), 1, verbs.WCSuccess, verbs.WCRecv)
}

// IBTA 9.8.4, rxe RESPST_ERR_RNR for UD (class D): a datagram with no
// receive WQE posted is dropped and counted.
func TestUDNoReceiveDropped(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewUD(t)
	tb.ExpectDropped(t, DropUDNoReceive, func() {
		c.Send(t, Pkt{Payload: []byte("nobody")})
	})
}
