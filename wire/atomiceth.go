package wire

import "encoding/binary"

// AtomicETH is a view of the Atomic Extended Transport Header (IBTA
// 9.3.3.2, 28 bytes), carried by CmpSwap and FetchAdd requests:
//
//	+---------------------------------------------------------------+
//	|                    Virtual Address (64 bits)                  |
//	+---------------------------------------------------------------+
//	|                         R_Key                                 |
//	+---------------------------------------------------------------+
//	|               Swap (or Add) Data (64 bits)                    |
//	+---------------------------------------------------------------+
//	|                  Compare Data (64 bits)                       |
//	+---------------------------------------------------------------+
type AtomicETH []byte

// AtomicETHSize is the length of the AtomicETH.
const AtomicETHSize = 28

// VirtualAddress returns the "Virtual Address" field.
func (a AtomicETH) VirtualAddress() uint64 { return binary.BigEndian.Uint64(a[0:]) }

// RKey returns the "R_Key" field.
func (a AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(a[8:]) }

// SwapAddData returns the "Swap (or Add) Data" field.
func (a AtomicETH) SwapAddData() uint64 { return binary.BigEndian.Uint64(a[12:]) }

// CompareData returns the "Compare Data" field.
func (a AtomicETH) CompareData() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// AtomicETHFields holds the AtomicETH's values.
type AtomicETHFields struct {
	VirtualAddress uint64
	RKey           uint32
	SwapAddData    uint64
	CompareData    uint64
}

// Encode writes the AtomicETH.
func (a AtomicETH) Encode(f *AtomicETHFields) {
	binary.BigEndian.PutUint64(a[0:], f.VirtualAddress)
	binary.BigEndian.PutUint32(a[8:], f.RKey)
	binary.BigEndian.PutUint64(a[12:], f.SwapAddData)
	binary.BigEndian.PutUint64(a[20:], f.CompareData)
}

// Fields returns the AtomicETH's values.
func (a AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{a.VirtualAddress(), a.RKey(), a.SwapAddData(), a.CompareData()}
}

// AtomicAckETH is a view of the Atomic Acknowledge Extended Transport
// Header (IBTA 9.5.3, 8 bytes): the value the target held before the
// atomic operation.
type AtomicAckETH []byte

// AtomicAckETHSize is the length of the AtomicAckETH.
const AtomicAckETHSize = 8

// OriginalRemoteData returns the "Original Remote Data" field.
func (a AtomicAckETH) OriginalRemoteData() uint64 { return binary.BigEndian.Uint64(a[0:]) }

// SetOriginalRemoteData sets the "Original Remote Data" field.
func (a AtomicAckETH) SetOriginalRemoteData(v uint64) { binary.BigEndian.PutUint64(a[0:], v) }
