package wire

import "encoding/binary"

// RETH is a view of the RDMA Extended Transport Header (IBTA 9.3.3.1,
// 16 bytes), carried by the first (or only) packet of an RDMA WRITE, by an
// RDMA READ request, and by FLUSH and ATOMIC WRITE:
//
//	+---------------------------------------------------------------+
//	|                    Virtual Address (64 bits)                  |
//	+---------------------------------------------------------------+
//	|                         R_Key                                 |
//	+---------------------------------------------------------------+
//	|                      DMA Length                               |
//	+---------------------------------------------------------------+
type RETH []byte

// RETHSize is the length of the RETH.
const RETHSize = 16

// VirtualAddress returns the "Virtual Address" field.
func (r RETH) VirtualAddress() uint64 { return binary.BigEndian.Uint64(r[0:]) }

// RKey returns the "R_Key" field.
func (r RETH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// DMALength returns the "DMA Length" field: the length of the whole message.
func (r RETH) DMALength() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// RETHFields holds the RETH's values.
type RETHFields struct {
	VirtualAddress uint64
	RKey           uint32
	DMALength      uint32
}

// Encode writes the RETH.
func (r RETH) Encode(f *RETHFields) {
	binary.BigEndian.PutUint64(r[0:], f.VirtualAddress)
	binary.BigEndian.PutUint32(r[8:], f.RKey)
	binary.BigEndian.PutUint32(r[12:], f.DMALength)
}

// Fields returns the RETH's values.
func (r RETH) Fields() RETHFields {
	return RETHFields{r.VirtualAddress(), r.RKey(), r.DMALength()}
}
