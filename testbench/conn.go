package testbench

import (
	"testing"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// QPConfig says how to create a DUT QP and which attributes to bring it up
// with. DefaultQPConfig gives working values; tests change what they
// test.
type QPConfig struct {
	Type verbs.QPType
	Cap  verbs.QPCap
	// SQSigAll makes every send WR signal a completion.
	SQSigAll bool
	// PD is the QP's protection domain; nil is the testbench's.
	PD *hca.PD
	// State is the state to bring the QP to: RESET (as created), INIT, RTR
	// or RTS.
	State verbs.QPState

	Access          verbs.AccessFlags // qp_access_flags (RC, UC)
	QKey            uint32            // UD
	PathMTU         verbs.MTU         // RC, UC
	RQPSN, SQPSN    uint32
	Timeout         uint8 // RC: transport timer 4.096 us * 2^Timeout
	RetryCnt        uint8 // RC
	RNRRetry        uint8 // RC
	MinRNRTimer     uint8 // RC: the timer code of the DUT's RNR NAKs
	MaxRdAtomic     uint8 // RC: READ/atomics the DUT may have outstanding
	MaxDestRdAtomic uint8 // RC: responder resources
	// PeerQPN is the testbench's QP number (the DUT QP's dest_qp_num);
	// 0 allocates one.
	PeerQPN uint32
}

// DefaultQPConfig returns the configuration tests start from: full remote
// access, path MTU 1024, distinct PSNs for the two directions, transport
// timer 14 (67 ms, which only fires when the test advances the clock),
// 7 retries, min_rnr_timer 1 (10 us), 8 READ/atomic resources.
func DefaultQPConfig(typ verbs.QPType) QPConfig {
	return QPConfig{
		Type:            typ,
		Cap:             verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64},
		SQSigAll:        true,
		State:           verbs.QPStateRTS,
		Access:          verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
		QKey:            0x11223344,
		PathMTU:         verbs.MTU1024,
		RQPSN:           0x000100,
		SQPSN:           0x00a000,
		Timeout:         14,
		RetryCnt:        7,
		RNRRetry:        7,
		MinRNRTimer:     1,
		MaxRdAtomic:     8,
		MaxDestRdAtomic: 8,
	}
}

// newQP creates a DUT QP with its own send and receive CQs and brings it
// to cfg.State. It walks the states with Modify rather than hca's
// QP.Connect: tests stop in INIT or RTR, and give attributes the value 0
// (max_dest_rd_atomic 0, for one), which Connect takes as "the default".
func (tb *Testbench) newQP(t testing.TB, cfg *QPConfig) (*hca.QP, *CQ, *CQ) {
	t.Helper()
	if cfg.PD == nil {
		cfg.PD = tb.PD
	}
	if cfg.PeerQPN == 0 {
		cfg.PeerQPN = tb.nextPeerQPN
		tb.nextPeerQPN++
	}
	scq, rcq := tb.NewCQ(t), tb.NewCQ(t)
	q, err := cfg.PD.CreateQP(&hca.QPInitAttr{SendCQ: scq.CQ, RecvCQ: rcq.CQ, QPType: cfg.Type, Cap: cfg.Cap, SQSigAll: cfg.SQSigAll})
	require.NoError(t, err)
	if cfg.State == verbs.QPStateReset {
		return q, scq, rcq
	}
	ud := cfg.Type == verbs.QPTypeUD
	init := verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QKey: cfg.QKey, QPAccessFlags: cfg.Access}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if ud {
		mask |= verbs.AttrQKey
	} else {
		mask |= verbs.AttrAccessFlags
	}
	require.NoError(t, q.Modify(&init, mask))
	if cfg.State == verbs.QPStateInit {
		return q, scq, rcq
	}
	rtr := verbs.QPAttr{
		QPState: verbs.QPStateRTR, PathMTU: cfg.PathMTU, DestQPNum: cfg.PeerQPN, RQPSN: cfg.RQPSN,
		MaxDestRdAtomic: cfg.MaxDestRdAtomic, MinRNRTimer: cfg.MinRNRTimer,
		AHAttr: tb.peerAV(),
	}
	mask = verbs.AttrState
	switch cfg.Type {
	case verbs.QPTypeRC:
		mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	case verbs.QPTypeUC:
		mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
	default: // UD: the state alone
	}
	require.NoError(t, q.Modify(&rtr, mask))
	if cfg.State == verbs.QPStateRTR {
		return q, scq, rcq
	}
	rts := verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: cfg.SQPSN, Timeout: cfg.Timeout, RetryCnt: cfg.RetryCnt,
		RNRRetry: cfg.RNRRetry, MaxRdAtomic: cfg.MaxRdAtomic}
	mask = verbs.AttrState | verbs.AttrSQPSN
	if cfg.Type == verbs.QPTypeRC {
		mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	}
	require.NoError(t, q.Modify(&rts, mask))
	return q, scq, rcq
}

// peerAV is an address vector naming the testbench (GID index 1 is the
// DUT's IPv4 address, as with rxe).
func (tb *Testbench) peerAV() verbs.AHAttr {
	return verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(tb.Cfg.Peer), SGIDIndex: 1, HopLimit: 64}}
}

// RCConn is the testbench's end of a connection with a DUT QP of type RC
// or UC, in the packetimpact style: it knows both QP numbers and tracks
// the PSN the testbench sends next and the PSN it expects from the DUT.
type RCConn struct {
	tb     *Testbench
	QP     *hca.QP
	Cfg    QPConfig
	SendCQ *CQ
	RecvCQ *CQ
	// DUTQPN is the DUT QP's number; TBQPN the testbench's.
	DUTQPN, TBQPN uint32
	// SendPSN is the PSN of the next request the testbench sends: the
	// DUT's expected PSN as long as the test stays in sequence.
	SendPSN wire.PSN
	// ExpectPSN is the PSN of the next request expected from the DUT.
	ExpectPSN wire.PSN
	// RespMSN is the MSN the testbench puts in its acknowledgements.
	RespMSN uint32
}

// NewRC creates a DUT RC QP with DefaultQPConfig changed by opts and
// brings it to RTS (or opts' State), pointed at the testbench.
func (tb *Testbench) NewRC(t testing.TB, opts ...func(*QPConfig)) *RCConn {
	t.Helper()
	return tb.newConn(t, verbs.QPTypeRC, opts)
}

// NewUC is NewRC for a UC QP.
func (tb *Testbench) NewUC(t testing.TB, opts ...func(*QPConfig)) *RCConn {
	t.Helper()
	return tb.newConn(t, verbs.QPTypeUC, opts)
}

func (tb *Testbench) newConn(t testing.TB, typ verbs.QPType, opts []func(*QPConfig)) *RCConn {
	t.Helper()
	cfg := DefaultQPConfig(typ)
	for _, o := range opts {
		o(&cfg)
	}
	q, scq, rcq := tb.newQP(t, &cfg)
	return &RCConn{
		tb: tb, QP: q, Cfg: cfg, SendCQ: scq, RecvCQ: rcq,
		DUTQPN: q.Num(), TBQPN: cfg.PeerQPN,
		SendPSN:   wire.MakePSN(cfg.RQPSN),
		ExpectPSN: wire.MakePSN(cfg.SQPSN),
	}
}

// MTU returns the connection's path MTU in bytes.
func (c *RCConn) MTU() int { return c.Cfg.PathMTU.Bytes() }

// Send injects a packet for the DUT QP (see Pkt for the defaults). With
// p.PSN nil it uses SendPSN and advances it past the packet (for an RDMA
// READ request, past every response PSN).
func (c *RCConn) Send(t testing.TB, p Pkt, faults ...Fault) {
	t.Helper()
	if p.DestQP == nil {
		p.DestQP = &c.DUTQPN
	}
	if p.PSN == nil {
		psn := c.SendPSN
		p.PSN = &psn
		c.SendPSN = psn.Add(p.span(c.MTU()))
	}
	c.tb.Inject(t, &p, faults...)
}

// Expect returns the next packet the DUT sends, which must match m and be
// addressed to the testbench's QP and address (unless m says otherwise).
func (c *RCConn) Expect(t testing.TB, m Match) *Packet {
	t.Helper()
	if m.DestQP == nil {
		m.DestQP = &c.TBQPN
	}
	if m.Dst == nil {
		m.Dst = &c.tb.Cfg.Peer
	}
	return c.tb.Expect(t, m)
}

// ExpectReq expects the DUT's next request: m.PSN defaults to ExpectPSN,
// which then advances past the request.
func (c *RCConn) ExpectReq(t testing.TB, m Match) *Packet {
	t.Helper()
	if m.PSN == nil {
		psn := c.ExpectPSN
		m.PSN = &psn
	}
	pk := c.Expect(t, m)
	span := uint32(1)
	if pk.Op() == wire.RCRDMAReadRequest {
		if n := pk.P.RETH.DMALength(); n > 0 {
			span = (n + uint32(c.MTU()) - 1) / uint32(c.MTU())
		}
	}
	c.ExpectPSN = pk.PSN().Add(span)
	return pk
}

// Barrier injects a duplicate of the last request (a zero-length SEND ONLY
// with PSN SendPSN-1 and AckReq), which the DUT's responder answers with
// an ACK of SendPSN-1 without executing anything (IBTA 9.7.5.1.3), and
// requires that ACK to be the next packet the DUT sends. It needs a QP
// that accepts packets and a testbench in sequence with it. The duplicate
// counts as a dropped "duplicate request", and its ACK names the same PSN
// a coalesced ACK would: use Testbench.Barrier to show that a packet was
// not acknowledged.
func (c *RCConn) Barrier(t testing.TB) {
	t.Helper()
	psn := c.SendPSN.Sub(1)
	c.Send(t, Pkt{Op: wire.RCSendOnly, PSN: &psn, AckReq: true})
	pk := c.tb.Next(t)
	m := ACK(psn)
	m.DestQP = &c.TBQPN
	if bad := m.mismatches(pk); len(bad) > 0 {
		t.Fatalf("the DUT sent %s before the ACK of the duplicate PSN %#x", pk, uint32(psn))
	}
}

// Ack injects an ACK of psn (the testbench acting as responder).
func (c *RCConn) Ack(t testing.TB, psn wire.PSN) {
	t.Helper()
	c.Send(t, Pkt{Op: wire.RCAcknowledge, PSN: &psn, AETH: &wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: c.RespMSN}})
}

// NAK injects a NAK with code for psn.
func (c *RCConn) NAK(t testing.TB, code wire.NAKCode, psn wire.PSN) {
	t.Helper()
	c.Send(t, Pkt{Op: wire.RCAcknowledge, PSN: &psn, AETH: &wire.AETHFields{Syndrome: wire.NAKSyndrome(code), MSN: c.RespMSN}})
}

// RNRNAK injects an RNR NAK with the timer code for psn.
func (c *RCConn) RNRNAK(t testing.TB, timer uint8, psn wire.PSN) {
	t.Helper()
	c.Send(t, Pkt{Op: wire.RCAcknowledge, PSN: &psn, AETH: &wire.AETHFields{Syndrome: wire.RNRNAKSyndrome(timer), MSN: c.RespMSN}})
}

// ReadResponse injects an RDMA READ response packet.
func (c *RCConn) ReadResponse(t testing.TB, op wire.OpCode, psn wire.PSN, payload []byte) {
	t.Helper()
	c.Send(t, Pkt{Op: op, PSN: &psn, Payload: payload, AETH: &wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: c.RespMSN}})
}

// AtomicAck injects an ATOMIC acknowledge carrying the original value.
func (c *RCConn) AtomicAck(t testing.TB, psn wire.PSN, orig uint64) {
	t.Helper()
	c.Send(t, Pkt{Op: wire.RCAtomicAcknowledge, PSN: &psn, AtomicAck: orig, AETH: &wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: c.RespMSN}})
}

// PostRecv posts a receive WR to the DUT QP.
func (c *RCConn) PostRecv(t testing.TB, wrid uint64, sges ...verbs.SGE) {
	t.Helper()
	_, err := c.QP.PostRecv(&verbs.RecvWR{WRID: wrid, SGList: sges})
	require.NoError(t, err)
}

// PostSend posts a send WR to the DUT QP.
func (c *RCConn) PostSend(t testing.TB, wr *verbs.SendWR) {
	t.Helper()
	_, err := c.QP.PostSend(wr)
	require.NoError(t, err)
}

// State returns the DUT QP's state.
func (c *RCConn) State() verbs.QPState { return c.QP.State() }

// UDConn is the testbench's end of datagram traffic with a DUT UD QP.
type UDConn struct {
	tb     *Testbench
	QP     *hca.QP
	Cfg    QPConfig
	SendCQ *CQ
	RecvCQ *CQ
	DUTQPN uint32
	// TBQPN is the source QP of what the testbench sends.
	TBQPN uint32
	// AH addresses the testbench, for the DUT's sends.
	AH *hca.AH
	// SendPSN is the PSN of the next datagram (UD receivers ignore it).
	SendPSN wire.PSN
}

// NewUD creates a DUT UD QP and brings it to RTS (or opts' State).
func (tb *Testbench) NewUD(t testing.TB, opts ...func(*QPConfig)) *UDConn {
	t.Helper()
	cfg := DefaultQPConfig(verbs.QPTypeUD)
	for _, o := range opts {
		o(&cfg)
	}
	q, scq, rcq := tb.newQP(t, &cfg)
	ah, err := cfg.PD.CreateAH(tb.peerAV())
	require.NoError(t, err)
	return &UDConn{tb: tb, QP: q, Cfg: cfg, SendCQ: scq, RecvCQ: rcq, DUTQPN: q.Num(), TBQPN: cfg.PeerQPN, AH: ah, SendPSN: 0x77}
}

// Send injects a datagram for the DUT QP: Op defaults to UD SEND ONLY and
// the DETH to the QP's Q_Key and the testbench's QPN.
func (c *UDConn) Send(t testing.TB, p Pkt, faults ...Fault) {
	t.Helper()
	if p.Op == 0 {
		p.Op = wire.UDSendOnly
	}
	if p.DestQP == nil {
		p.DestQP = &c.DUTQPN
	}
	if p.DETH == nil {
		p.DETH = &wire.DETHFields{QKey: c.Cfg.QKey, SrcQP: c.TBQPN}
	}
	if p.PSN == nil {
		psn := c.SendPSN
		p.PSN = &psn
		c.SendPSN = psn.Add(1)
	}
	c.tb.Inject(t, &p, faults...)
}

// Expect returns the DUT's next packet, which must match m and be
// addressed to the testbench.
func (c *UDConn) Expect(t testing.TB, m Match) *Packet {
	t.Helper()
	if m.DestQP == nil {
		m.DestQP = &c.TBQPN
	}
	if m.Dst == nil {
		m.Dst = &c.tb.Cfg.Peer
	}
	return c.tb.Expect(t, m)
}

// PostRecv posts a receive WR to the DUT QP.
func (c *UDConn) PostRecv(t testing.TB, wrid uint64, sges ...verbs.SGE) {
	t.Helper()
	_, err := c.QP.PostRecv(&verbs.RecvWR{WRID: wrid, SGList: sges})
	require.NoError(t, err)
}

// PostSend posts a UD send to the testbench's QP: wr.UD is filled in.
func (c *UDConn) PostSend(t testing.TB, wr *verbs.SendWR) {
	t.Helper()
	wr.UD = verbs.UDInfo{AH: c.AH, RemoteQPN: c.TBQPN, RemoteQKey: c.Cfg.QKey}
	_, err := c.QP.PostSend(wr)
	require.NoError(t, err)
}
