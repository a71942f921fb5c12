package wire

import "encoding/binary"

// BTH is a view of the Base Transport Header (IBTA 9.2, 12 bytes):
//
//	 0               1               2               3
//	 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad| TVer  |        Partition Key          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|  Resv6    |            Destination QP                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|   Resv7     |        Packet Sequence Number                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// S is Solicited Event, M is MigReq, A is AckReq; F and B are FECN and BECN
// (RoCEv2 congestion bits). Byte 4 (F, B, Resv6) is masked to ones by the
// ICRC.
type BTH []byte

// BTHSize is the length of the BTH.
const BTHSize = 12

const (
	bthOpCode   = 0
	bthFlags    = 1
	bthPKey     = 2
	bthFB       = 4
	bthDestQP   = 4 // 32-bit word whose low 24 bits are the QPN
	bthAckPSN   = 8 // 32-bit word: A, Resv7, PSN
	bthSE       = 0x80
	bthMig      = 0x40
	bthPadShift = 4
	bthTVerMask = 0x0f
	bthFECN     = 0x80
	bthBECN     = 0x40
	bthAckReq   = 0x80000000
)

// OpCode returns the "OpCode" field.
func (b BTH) OpCode() OpCode { return OpCode(b[bthOpCode]) }

// SolicitedEvent returns the "SE" bit.
func (b BTH) SolicitedEvent() bool { return b[bthFlags]&bthSE != 0 }

// MigReq returns the "M" bit.
func (b BTH) MigReq() bool { return b[bthFlags]&bthMig != 0 }

// PadCount returns the "PadCnt" field: bytes of pad after the payload.
func (b BTH) PadCount() int { return int(b[bthFlags]>>bthPadShift) & 3 }

// TVer returns the "TVer" (transport header version) field; 0 today.
func (b BTH) TVer() uint8 { return b[bthFlags] & bthTVerMask }

// PKey returns the "Partition Key" field.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthFB]&bthFECN != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthFB]&bthBECN != 0 }

// DestQP returns the "Destination QP" field.
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[bthDestQP:]) & 0xffffff }

// AckReq returns the "A" bit: the requester asks for an acknowledgement.
func (b BTH) AckReq() bool { return binary.BigEndian.Uint32(b[bthAckPSN:])&bthAckReq != 0 }

// PSN returns the "Packet Sequence Number" field.
func (b BTH) PSN() PSN { return PSN(binary.BigEndian.Uint32(b[bthAckPSN:]) & PSNMask) }

// SetPadCount sets the "PadCnt" field (0..3).
func (b BTH) SetPadCount(n int) {
	b[bthFlags] = b[bthFlags]&^(3<<bthPadShift) | uint8(n&3)<<bthPadShift
}

// SetPSN sets the "Packet Sequence Number" field, keeping the A bit.
func (b BTH) SetPSN(p PSN) {
	w := binary.BigEndian.Uint32(b[bthAckPSN:])
	binary.BigEndian.PutUint32(b[bthAckPSN:], w&0xff000000|uint32(p)&PSNMask)
}

// SetAckReq sets the "A" bit.
func (b BTH) SetAckReq(v bool) {
	if v {
		b[bthAckPSN] |= 0x80
	} else {
		b[bthAckPSN] &^= 0x80
	}
}

// SetDestQP sets the "Destination QP" field, keeping byte 4.
func (b BTH) SetDestQP(qpn uint32) {
	w := binary.BigEndian.Uint32(b[bthDestQP:])
	binary.BigEndian.PutUint32(b[bthDestQP:], w&0xff000000|qpn&0xffffff)
}

// BTHFields holds the BTH's values for Encode.
type BTHFields struct {
	OpCode         OpCode
	SolicitedEvent bool
	MigReq         bool
	PadCount       int // 0..3; Headers.Encode computes it from the payload
	TVer           uint8
	PKey           uint16
	FECN, BECN     bool
	DestQP         uint32 // 24 bits
	AckReq         bool
	PSN            PSN
}

// Encode writes every BTH field (reserved bits zero). Values wider than
// their field are truncated; Headers.Validate reports them.
func (b BTH) Encode(f *BTHFields) {
	b[bthOpCode] = uint8(f.OpCode)
	fl := uint8(f.PadCount&3)<<bthPadShift | f.TVer&bthTVerMask
	if f.SolicitedEvent {
		fl |= bthSE
	}
	if f.MigReq {
		fl |= bthMig
	}
	b[bthFlags] = fl
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	qp := f.DestQP & 0xffffff
	if f.FECN {
		qp |= bthFECN << 24
	}
	if f.BECN {
		qp |= bthBECN << 24
	}
	binary.BigEndian.PutUint32(b[bthDestQP:], qp)
	ap := uint32(f.PSN) & PSNMask
	if f.AckReq {
		ap |= bthAckReq
	}
	binary.BigEndian.PutUint32(b[bthAckPSN:], ap)
}

// Fields returns the BTH's values.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		OpCode:         b.OpCode(),
		SolicitedEvent: b.SolicitedEvent(),
		MigReq:         b.MigReq(),
		PadCount:       b.PadCount(),
		TVer:           b.TVer(),
		PKey:           b.PKey(),
		FECN:           b.FECN(),
		BECN:           b.BECN(),
		DestQP:         b.DestQP(),
		AckReq:         b.AckReq(),
		PSN:            b.PSN(),
	}
}
