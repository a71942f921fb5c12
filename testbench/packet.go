package testbench

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"

	"github.com/softhca/softhca/wire"
)

// Pkt is a packet for the testbench to inject, partially specified: a
// field left zero or nil takes the connection's default (the DUT QP's
// number, the next PSN, P_Key 0xFFFF, and so on). Only the extension
// headers the opcode carries are encoded; the others are ignored.
type Pkt struct {
	Op wire.OpCode
	// PSN nil: the connection's next request PSN (RCConn.SendPSN), which
	// Send then advances past the packet. Set: exactly this PSN, and the
	// connection's PSN is left alone.
	PSN       *wire.PSN
	AckReq    bool
	Solicited bool
	PKey      *uint16 // nil: 0xFFFF
	DestQP    *uint32 // nil: the DUT QP
	TVer      uint8

	RETH      *wire.RETHFields
	AtomicETH *wire.AtomicETHFields
	AETH      *wire.AETHFields // nil on an opcode with an AETH: an ACK syndrome, MSN 0
	AtomicAck uint64
	Imm       uint32
	IETH      uint32
	DETH      *wire.DETHFields // nil on UD: the QP's Q_Key and the testbench QPN

	Payload []byte
}

// Fault changes how a packet is put on the wire: a wrong ICRC, pad count
// or length, another source address.
type Fault func(*injection)

type injection struct {
	net      wire.Net
	pad      int // -1: the right pad for the payload
	badICRC  bool
	truncate int
	edit     func(pkt []byte)
}

// BadICRC corrupts the ICRC (after computing it).
func BadICRC() Fault { return func(i *injection) { i.badICRC = true } }

// PadCount sets the BTH pad count to n and puts exactly n pad bytes after
// the payload, whatever the payload's length (so payload plus pad may not
// be a multiple of four). The ICRC is computed over the result.
func PadCount(n int) Fault { return func(i *injection) { i.pad = n } }

// Truncate removes the last n bytes of the finished packet (ICRC
// included).
func Truncate(n int) Fault { return func(i *injection) { i.truncate = n } }

// From injects the packet with another IP source address (the ICRC is
// computed for it, so only the address is wrong).
func From(addr netip.Addr) Fault { return func(i *injection) { i.net.Src = addr } }

// FromPort injects the packet with another UDP source port.
func FromPort(port uint16) Fault { return func(i *injection) { i.net.SrcPort = port } }

// Edit lets the test change the packet's bytes (BTH through ICRC) before
// the ICRC is computed.
func Edit(f func(pkt []byte)) Fault { return func(i *injection) { i.edit = f } }

// TrafficClass sets the IP header's traffic class (IPv4 TOS) the packet
// arrives with: its low two bits are the ECN field (0b11: CE, a queue on
// the way marked it).
func TrafficClass(tc uint8) Fault { return func(i *injection) { i.net.TrafficClass = tc } }

// build encodes p for the network fields n with the faults applied.
func build(p *Pkt, n wire.Net, faults []Fault) ([]byte, wire.Net) {
	inj := injection{net: n, pad: -1}
	for _, f := range faults {
		f(&inj)
	}
	h := p.headers()
	var pkt []byte
	if inj.pad < 0 {
		pkt = wire.AppendPacket(nil, &inj.net, &h, p.Payload)
	} else {
		hl := h.Len()
		pkt = make([]byte, hl+len(p.Payload)+inj.pad+wire.ICRCSize)
		h.Encode(pkt, len(p.Payload))
		wire.BTH(pkt).SetPadCount(inj.pad)
		copy(pkt[hl:], p.Payload)
	}
	if inj.edit != nil {
		inj.edit(pkt)
	}
	wire.PutICRC(&inj.net, pkt)
	if inj.badICRC {
		pkt[len(pkt)-1] ^= 0xa5
	}
	if inj.truncate > 0 {
		pkt = pkt[:max(0, len(pkt)-inj.truncate)]
	}
	return pkt, inj.net
}

func (p *Pkt) headers() wire.Headers {
	var h wire.Headers
	h.BTH = wire.BTHFields{
		OpCode:         p.Op,
		SolicitedEvent: p.Solicited,
		TVer:           p.TVer,
		PKey:           0xffff,
		AckReq:         p.AckReq,
	}
	if p.PSN != nil {
		h.BTH.PSN = *p.PSN
	}
	if p.PKey != nil {
		h.BTH.PKey = *p.PKey
	}
	if p.DestQP != nil {
		h.BTH.DestQP = *p.DestQP
	}
	if p.RETH != nil {
		h.RETH = *p.RETH
	}
	if p.AtomicETH != nil {
		h.AtomicETH = *p.AtomicETH
	}
	if p.AETH != nil {
		h.AETH = *p.AETH
	} else {
		h.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid)}
	}
	if p.DETH != nil {
		h.DETH = *p.DETH
	}
	h.AtomicAckETH = p.AtomicAck
	h.ImmDt = p.Imm
	h.IETH = p.IETH
	return h
}

// span returns how many PSNs a request takes: one per packet, and for an
// RDMA READ request one per response packet (IBTA 9.7.1).
func (p *Pkt) span(mtu int) uint32 {
	if p.Op == wire.RCRDMAReadRequest && p.RETH != nil && p.RETH.DMALength > 0 {
		return (p.RETH.DMALength + uint32(mtu) - 1) / uint32(mtu)
	}
	return 1
}

// Packet is a packet the DUT sent, parsed: P holds views into Raw.
type Packet struct {
	Net wire.Net
	Raw []byte
	P   wire.Packet
}

// parseCaptured parses a captured packet and checks what every packet the
// DUT sends must satisfy: it parses, its ICRC is right for the network
// fields it was sent with, and its pad bytes are zero.
func parseCaptured(c Captured) (*Packet, error) {
	pk := &Packet{Net: c.Net, Raw: c.Buf}
	if r := wire.ParseTransport(c.Buf, &pk.P); r != wire.DropNone {
		return pk, fmt.Errorf("the DUT sent a malformed packet (%s): % x", r, c.Buf)
	}
	pk.P.Net = c.Net
	if !wire.CheckICRC(&c.Net, c.Buf) {
		return pk, fmt.Errorf("the DUT sent a packet with a bad ICRC: %s", pk)
	}
	for _, b := range pk.P.Pad {
		if b != 0 {
			return pk, fmt.Errorf("the DUT sent non-zero pad bytes: %s", pk)
		}
	}
	if want := wire.PadFor(len(pk.P.Payload)); len(pk.P.Pad) != want {
		return pk, fmt.Errorf("the DUT sent pad count %d for %d bytes of payload (want %d): %s", len(pk.P.Pad), len(pk.P.Payload), want, pk)
	}
	return pk, nil
}

// Op returns the packet's opcode.
func (pk *Packet) Op() wire.OpCode { return pk.P.BTH.OpCode() }

// PSN returns the packet's PSN.
func (pk *Packet) PSN() wire.PSN { return pk.P.BTH.PSN() }

// String describes the packet for failure messages.
func (pk *Packet) String() string {
	if pk == nil {
		return "<none>"
	}
	p := &pk.P
	if p.BTH == nil {
		return fmt.Sprintf("unparsed % x", pk.Raw)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s psn=%#x dqp=%#x", p.BTH.OpCode(), uint32(p.BTH.PSN()), p.BTH.DestQP())
	if p.BTH.AckReq() {
		b.WriteString(" A")
	}
	if p.BTH.SolicitedEvent() {
		b.WriteString(" SE")
	}
	if p.BTH.PKey() != 0xffff {
		fmt.Fprintf(&b, " pkey=%#x", p.BTH.PKey())
	}
	if p.AETH != nil {
		fmt.Fprintf(&b, " [%s msn=%d]", p.AETH.Syndrome(), p.AETH.MSN())
	}
	if p.RETH != nil {
		fmt.Fprintf(&b, " RETH{va=%#x rkey=%#x len=%d}", p.RETH.VirtualAddress(), p.RETH.RKey(), p.RETH.DMALength())
	}
	if p.AtomicETH != nil {
		f := p.AtomicETH.Fields()
		fmt.Fprintf(&b, " AtomicETH{va=%#x rkey=%#x swapadd=%#x cmp=%#x}", f.VirtualAddress, f.RKey, f.SwapAddData, f.CompareData)
	}
	if p.AtomicAckETH != nil {
		fmt.Fprintf(&b, " orig=%#x", p.AtomicAckETH.OriginalRemoteData())
	}
	if p.DETH != nil {
		fmt.Fprintf(&b, " DETH{qkey=%#x sqp=%#x}", p.DETH.QKey(), p.DETH.SrcQP())
	}
	if p.ImmDt != nil {
		fmt.Fprintf(&b, " imm=%#x", p.ImmDt.Value())
	}
	if p.IETH != nil {
		fmt.Fprintf(&b, " ieth=%#x", p.IETH.RKey())
	}
	fmt.Fprintf(&b, " payload=%dB pad=%d to %v", len(p.Payload), len(p.Pad), pk.Net.Dst)
	return b.String()
}

// Match is a partially specified packet: nil fields are "don't care".
// Payload nil is "don't care"; non-nil (even empty) must equal the
// payload exactly.
type Match struct {
	Op        *wire.OpCode
	PSN       *wire.PSN
	AckReq    *bool
	Solicited *bool
	DestQP    *uint32
	Syndrome  *wire.Syndrome
	AckKind   *wire.AckKind
	MSN       *uint32
	RETH      *wire.RETHFields
	AtomicETH *wire.AtomicETHFields
	AtomicAck *uint64
	Imm       *uint32
	IETH      *uint32
	DETH      *wire.DETHFields
	Payload   []byte
	// PayloadLen is checked when set (useful for long payloads).
	PayloadLen *int
	// Dst is the IP destination address.
	Dst *netip.Addr
}

// P returns a pointer to v, for Match and Pkt fields.
func P[T any](v T) *T { return &v }

// Op matches an opcode.
func Op(o wire.OpCode) Match { return Match{Op: &o} }

// ACK matches an ACK (any credit count) of psn.
func ACK(psn wire.PSN) Match {
	return Match{Op: P(wire.RCAcknowledge), PSN: &psn, AckKind: P(wire.AckKindACK)}
}

// NAK matches a NAK with code for psn.
func NAK(code wire.NAKCode, psn wire.PSN) Match {
	return Match{Op: P(wire.RCAcknowledge), PSN: &psn, Syndrome: P(wire.NAKSyndrome(code))}
}

// RNRNAK matches an RNR NAK with the timer code for psn.
func RNRNAK(timer uint8, psn wire.PSN) Match {
	return Match{Op: P(wire.RCAcknowledge), PSN: &psn, Syndrome: P(wire.RNRNAKSyndrome(timer))}
}

// WithMSN returns m that also requires the AETH's MSN.
func (m Match) WithMSN(msn uint32) Match { m.MSN = &msn; return m }

// WithPayload returns m that also requires the payload.
func (m Match) WithPayload(b []byte) Match {
	if b == nil {
		b = []byte{}
	}
	m.Payload = b
	return m
}

// mismatches lists how pk differs from m.
func (m *Match) mismatches(pk *Packet) []string {
	p := &pk.P
	var bad []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	if m.Op != nil {
		check(p.BTH.OpCode() == *m.Op, "opcode %s, want %s", p.BTH.OpCode(), *m.Op)
	}
	if m.PSN != nil {
		check(p.BTH.PSN() == *m.PSN, "PSN %#x, want %#x", uint32(p.BTH.PSN()), uint32(*m.PSN))
	}
	if m.AckReq != nil {
		check(p.BTH.AckReq() == *m.AckReq, "AckReq %v, want %v", p.BTH.AckReq(), *m.AckReq)
	}
	if m.Solicited != nil {
		check(p.BTH.SolicitedEvent() == *m.Solicited, "SE %v, want %v", p.BTH.SolicitedEvent(), *m.Solicited)
	}
	if m.DestQP != nil {
		check(p.BTH.DestQP() == *m.DestQP, "destination QP %#x, want %#x", p.BTH.DestQP(), *m.DestQP)
	}
	if m.Dst != nil {
		check(pk.Net.Dst == *m.Dst, "IP destination %v, want %v", pk.Net.Dst, *m.Dst)
	}
	if m.Syndrome != nil || m.AckKind != nil || m.MSN != nil {
		if p.AETH == nil {
			bad = append(bad, "no AETH")
		} else {
			if m.Syndrome != nil {
				check(p.AETH.Syndrome() == *m.Syndrome, "syndrome %s, want %s", p.AETH.Syndrome(), *m.Syndrome)
			}
			if m.AckKind != nil {
				check(p.AETH.Syndrome().Kind() == *m.AckKind, "syndrome %s, want kind %d", p.AETH.Syndrome(), *m.AckKind)
			}
			if m.MSN != nil {
				check(p.AETH.MSN() == *m.MSN, "MSN %d, want %d", p.AETH.MSN(), *m.MSN)
			}
		}
	}
	if m.RETH != nil {
		if p.RETH == nil {
			bad = append(bad, "no RETH")
		} else {
			check(p.RETH.Fields() == *m.RETH, "RETH %+v, want %+v", p.RETH.Fields(), *m.RETH)
		}
	}
	if m.AtomicETH != nil {
		if p.AtomicETH == nil {
			bad = append(bad, "no AtomicETH")
		} else {
			check(p.AtomicETH.Fields() == *m.AtomicETH, "AtomicETH %+v, want %+v", p.AtomicETH.Fields(), *m.AtomicETH)
		}
	}
	if m.AtomicAck != nil {
		if p.AtomicAckETH == nil {
			bad = append(bad, "no AtomicAckETH")
		} else {
			check(p.AtomicAckETH.OriginalRemoteData() == *m.AtomicAck, "original remote data %#x, want %#x", p.AtomicAckETH.OriginalRemoteData(), *m.AtomicAck)
		}
	}
	if m.Imm != nil {
		if p.ImmDt == nil {
			bad = append(bad, "no ImmDt")
		} else {
			check(p.ImmDt.Value() == *m.Imm, "immediate %#x, want %#x", p.ImmDt.Value(), *m.Imm)
		}
	}
	if m.IETH != nil {
		if p.IETH == nil {
			bad = append(bad, "no IETH")
		} else {
			check(p.IETH.RKey() == *m.IETH, "IETH %#x, want %#x", p.IETH.RKey(), *m.IETH)
		}
	}
	if m.DETH != nil {
		if p.DETH == nil {
			bad = append(bad, "no DETH")
		} else {
			check(p.DETH.Fields() == *m.DETH, "DETH %+v, want %+v", p.DETH.Fields(), *m.DETH)
		}
	}
	if m.PayloadLen != nil {
		check(len(p.Payload) == *m.PayloadLen, "payload length %d, want %d", len(p.Payload), *m.PayloadLen)
	}
	if m.Payload != nil {
		check(bytes.Equal(p.Payload, m.Payload), "payload % x, want % x", head(p.Payload), head(m.Payload))
	}
	return bad
}

func head(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}
