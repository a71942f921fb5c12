package wire

import "encoding/binary"

// DETH is a view of the Datagram Extended Transport Header (IBTA 9.3.2,
// 8 bytes), carried by every UD packet:
//
//	+---------------------------------------------------------------+
//	|                          Q_Key                                |
//	+---------------+-----------------------------------------------+
//	|   Reserved    |             Source QP                         |
//	+---------------+-----------------------------------------------+
type DETH []byte

// DETHSize is the length of the DETH.
const DETHSize = 8

// QKey returns the "Queue Key" field.
func (d DETH) QKey() uint32 { return binary.BigEndian.Uint32(d[0:]) }

// SrcQP returns the "Source QP" field.
func (d DETH) SrcQP() uint32 { return binary.BigEndian.Uint32(d[4:]) & 0xffffff }

// DETHFields holds the DETH's values.
type DETHFields struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

// Encode writes the DETH (reserved byte zero).
func (d DETH) Encode(f *DETHFields) {
	binary.BigEndian.PutUint32(d[0:], f.QKey)
	binary.BigEndian.PutUint32(d[4:], f.SrcQP&0xffffff)
}

// Fields returns the DETH's values.
func (d DETH) Fields() DETHFields { return DETHFields{d.QKey(), d.SrcQP()} }
