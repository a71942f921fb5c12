package wire

import "encoding/binary"

// ImmDt is a view of the Immediate Data Extended Transport Header (IBTA
// 9.3.4, 4 bytes) of the SEND and RDMA WRITE "with Immediate" opcodes.
// The value is opaque: it travels in network byte order, and verbs hands
// it to the receiver in that same order (ibv_wc.imm_data is __be32).
type ImmDt []byte

// ImmDtSize is the length of the ImmDt header.
const ImmDtSize = 4

// Value returns the immediate data as a big-endian number.
func (i ImmDt) Value() uint32 { return binary.BigEndian.Uint32(i) }

// SetValue writes the immediate data.
func (i ImmDt) SetValue(v uint32) { binary.BigEndian.PutUint32(i, v) }

// IETH is a view of the Invalidate Extended Transport Header (IBTA 9.3.6,
// 4 bytes) of SEND with Invalidate: the R_Key the responder invalidates.
type IETH []byte

// IETHSize is the length of the IETH.
const IETHSize = 4

// RKey returns the R_Key to invalidate.
func (i IETH) RKey() uint32 { return binary.BigEndian.Uint32(i) }

// SetRKey writes the R_Key to invalidate.
func (i IETH) SetRKey(v uint32) { binary.BigEndian.PutUint32(i, v) }

// FETH is a view of the Flush Extended Transport Header (IBTA 1.5 annex,
// 4 bytes) of RC FLUSH: the low bits carry the placement type and the
// selectivity level.
type FETH []byte

// FETHSize is the length of the FETH.
const FETHSize = 4

const (
	fethPlacementMask = 0x0f
	fethSelShift      = 4
	fethSelMask       = 0x03
)

// PlacementType returns the "Placement Type" field (global visibility or
// persistence).
func (f FETH) PlacementType() uint8 { return uint8(binary.BigEndian.Uint32(f)) & fethPlacementMask }

// Selectivity returns the "Selectivity Level" field.
func (f FETH) Selectivity() uint8 {
	return uint8(binary.BigEndian.Uint32(f)>>fethSelShift) & fethSelMask
}

// FETHFields holds the FETH's values.
type FETHFields struct {
	PlacementType uint8 // 4 bits
	Selectivity   uint8 // 2 bits
}

// Encode writes the FETH (reserved bits zero).
func (f FETH) Encode(v *FETHFields) {
	binary.BigEndian.PutUint32(f, uint32(v.PlacementType&fethPlacementMask)|
		uint32(v.Selectivity&fethSelMask)<<fethSelShift)
}

// Fields returns the FETH's values.
func (f FETH) Fields() FETHFields { return FETHFields{f.PlacementType(), f.Selectivity()} }

// CNPReservedSize is the length of the reserved block after a CNP's BTH.
const CNPReservedSize = 16
