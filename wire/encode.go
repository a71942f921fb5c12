package wire

import (
	"encoding/binary"
	"fmt"
	"syscall"
)

// Headers holds the values of the BTH and of every extension header. The
// opcode (BTH.OpCode) decides which extension headers Encode writes; the
// others are ignored. It is a plain value, so building a packet allocates
// nothing.
type Headers struct {
	BTH          BTHFields
	DETH         DETHFields
	FETH         FETHFields
	RETH         RETHFields
	AtomicETH    AtomicETHFields
	AETH         AETHFields
	AtomicAckETH uint64 // "Original Remote Data"
	ImmDt        uint32
	IETH         uint32 // R_Key to invalidate
}

// PadFor returns the pad that brings a payload of n bytes to a multiple of
// four.
func PadFor(n int) int { return -n & 3 }

// Len returns the length of the BTH and the extension headers the opcode
// carries.
func (h *Headers) Len() int { return opTable[h.BTH.OpCode].HdrLen }

// PacketLen returns the length of the whole InfiniBand packet (headers,
// payload, pad and ICRC) for a payload of payloadLen bytes.
func (h *Headers) PacketLen(payloadLen int) int {
	return h.Len() + payloadLen + PadFor(payloadLen) + ICRCSize
}

// Validate reports, as an error wrapping syscall.EINVAL, why the headers
// cannot be sent with a payload of payloadLen bytes: a reserved or RD
// opcode, payload on an opcode without one, a field wider than its wire
// field. Encode does not validate; callers at API boundaries do.
func (h *Headers) Validate(payloadLen int) error {
	op := h.BTH.OpCode
	info := &opTable[op]
	switch {
	case payloadLen < 0:
		return fmt.Errorf("wire: negative payload length %d: %w", payloadLen, syscall.EINVAL)
	case !info.Valid:
		return fmt.Errorf("wire: opcode %s is not defined: %w", op, syscall.EINVAL)
	case !info.Payload && payloadLen != 0:
		return fmt.Errorf("wire: %s carries no payload, got %d bytes: %w", op, payloadLen, syscall.EINVAL)
	case info.FixedLen > 0 && payloadLen != info.FixedLen:
		return fmt.Errorf("wire: %s carries exactly %d bytes of payload, got %d: %w", op, info.FixedLen, payloadLen, syscall.EINVAL)
	case h.BTH.DestQP > 0xffffff:
		return fmt.Errorf("wire: destination QP %#x exceeds 24 bits: %w", h.BTH.DestQP, syscall.EINVAL)
	case uint32(h.BTH.PSN) > PSNMask:
		return fmt.Errorf("wire: PSN %#x exceeds 24 bits: %w", uint32(h.BTH.PSN), syscall.EINVAL)
	case h.BTH.TVer > 0xf:
		return fmt.Errorf("wire: TVer %d exceeds 4 bits: %w", h.BTH.TVer, syscall.EINVAL)
	case info.Headers&HasDETH != 0 && h.DETH.SrcQP > 0xffffff:
		return fmt.Errorf("wire: source QP %#x exceeds 24 bits: %w", h.DETH.SrcQP, syscall.EINVAL)
	case info.Headers&HasAETH != 0 && h.AETH.MSN > 0xffffff:
		return fmt.Errorf("wire: MSN %#x exceeds 24 bits: %w", h.AETH.MSN, syscall.EINVAL)
	case info.Headers&HasFETH != 0 && (h.FETH.PlacementType > 0xf || h.FETH.Selectivity > 3):
		return fmt.Errorf("wire: FETH fields out of range: %w", syscall.EINVAL)
	}
	return nil
}

// Encode writes the BTH and the opcode's extension headers at the start of
// b and returns their length; the payload goes right after. The BTH pad
// count is set for a payload of payloadLen bytes (h.BTH.PadCount is
// ignored). b must hold h.Len() bytes.
func (h *Headers) Encode(b []byte, payloadLen int) int {
	info := &opTable[h.BTH.OpCode]
	bth := BTH(b[:BTHSize])
	bth.Encode(&h.BTH)
	bth.SetPadCount(PadFor(payloadLen))
	off := BTHSize
	m := info.Headers
	if m&HasDETH != 0 {
		DETH(b[off:]).Encode(&h.DETH)
		off += DETHSize
	}
	if m&HasFETH != 0 {
		FETH(b[off:]).Encode(&h.FETH)
		off += FETHSize
	}
	if m&HasRETH != 0 {
		RETH(b[off:]).Encode(&h.RETH)
		off += RETHSize
	}
	if m&HasAtomicETH != 0 {
		AtomicETH(b[off:]).Encode(&h.AtomicETH)
		off += AtomicETHSize
	}
	if m&HasAETH != 0 {
		AETH(b[off:]).Encode(&h.AETH)
		off += AETHSize
	}
	if m&HasAtomicAckETH != 0 {
		AtomicAckETH(b[off:]).SetOriginalRemoteData(h.AtomicAckETH)
		off += AtomicAckETHSize
	}
	if m&HasImmDt != 0 {
		ImmDt(b[off:]).SetValue(h.ImmDt)
		off += ImmDtSize
	}
	if m&HasIETH != 0 {
		IETH(b[off:]).SetRKey(h.IETH)
		off += IETHSize
	}
	if m&HasCNPReserved != 0 {
		clear(b[off : off+CNPReservedSize])
		off += CNPReservedSize
	}
	return off
}

// Seal finishes a packet built in place: pkt runs from the BTH through the
// 4 ICRC bytes, with headers written by Encode and the payload after them.
// Seal zeroes the pad the BTH announces and stores the ICRC for the IP and
// UDP headers n describes.
func Seal(n *Net, pkt []byte) { seal(nil, n, pkt) }

// seal is Seal, with the IPv4 flow state cached in f when f is not nil.
func seal(f *ICRCFlow, n *Net, pkt []byte) {
	end := len(pkt) - ICRCSize
	pad := BTH(pkt).PadCount()
	clear(pkt[end-pad : end])
	binary.LittleEndian.PutUint32(pkt[end:], icrc(f, n, pkt[:end]))
}

// AppendPacket appends a whole InfiniBand packet (headers, payload, pad,
// ICRC) to dst and returns the extended slice. It allocates only when dst
// lacks capacity.
func AppendPacket(dst []byte, n *Net, h *Headers, payload []byte) []byte {
	size := h.PacketLen(len(payload))
	start := len(dst)
	dst = growBytes(dst, size)
	pkt := dst[start : start+size]
	hl := h.Encode(pkt, len(payload))
	copy(pkt[hl:], payload)
	Seal(n, pkt)
	return dst
}

// AppendFrame appends the IP and UDP headers that n describes followed by
// the InfiniBand packet (as AppendPacket), the form Parse reads.
func AppendFrame(dst []byte, n *Net, h *Headers, payload []byte) []byte {
	ibLen := h.PacketLen(len(payload))
	start := len(dst)
	dst = growBytes(dst, n.IPHeaderSize()+UDPHeaderSize)
	EncodeIPUDP(dst[start:], n, ibLen)
	return AppendPacket(dst, n, h, payload)
}

func growBytes(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// Headers returns the values of the packet's headers, from which Encode
// rebuilds them.
func (p *Packet) Headers() Headers {
	h := Headers{BTH: p.BTH.Fields()}
	if p.DETH != nil {
		h.DETH = p.DETH.Fields()
	}
	if p.FETH != nil {
		h.FETH = p.FETH.Fields()
	}
	if p.RETH != nil {
		h.RETH = p.RETH.Fields()
	}
	if p.AtomicETH != nil {
		h.AtomicETH = p.AtomicETH.Fields()
	}
	if p.AETH != nil {
		h.AETH = p.AETH.Fields()
	}
	if p.AtomicAckETH != nil {
		h.AtomicAckETH = p.AtomicAckETH.OriginalRemoteData()
	}
	if p.ImmDt != nil {
		h.ImmDt = p.ImmDt.Value()
	}
	if p.IETH != nil {
		h.IETH = p.IETH.RKey()
	}
	return h
}
