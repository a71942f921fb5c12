package wire

import "encoding/binary"

// TMH is a view of the tag-matching header (rdma-core struct ibv_tmh,
// 16 bytes) at the start of a SEND payload on a tag-matching SRQ:
//
//	+---------------+-----------------------------------------------+
//	|    Opcode     |                Reserved                       |
//	+---------------+-----------------------------------------------+
//	|                 Application Context                           |
//	+---------------------------------------------------------------+
//	|                       Tag (64 bits)                           |
//	+---------------------------------------------------------------+
type TMH []byte

// TMHSize is the length of the TMH.
const TMHSize = 16

// TMOpcode is the TMH opcode (enum ibv_tmh_op).
type TMOpcode uint8

// TMH opcodes.
const (
	TMNoTag      TMOpcode = 0
	TMRendezvous TMOpcode = 1
	TMFin        TMOpcode = 2
	TMEager      TMOpcode = 3
)

// String names the TMH opcode as rdma-core does.
func (o TMOpcode) String() string {
	switch o {
	case TMNoTag:
		return "NO_TAG"
	case TMRendezvous:
		return "RNDV"
	case TMFin:
		return "FIN"
	case TMEager:
		return "EAGER"
	}
	return "reserved " + itoa(int(o))
}

// Opcode returns the TMH opcode.
func (t TMH) Opcode() TMOpcode { return TMOpcode(t[0]) }

// AppCtx returns the application context.
func (t TMH) AppCtx() uint32 { return binary.BigEndian.Uint32(t[4:]) }

// Tag returns the 64-bit tag.
func (t TMH) Tag() uint64 { return binary.BigEndian.Uint64(t[8:]) }

// TMHFields holds the TMH's values.
type TMHFields struct {
	Opcode TMOpcode
	AppCtx uint32
	Tag    uint64
}

// Encode writes the TMH (reserved bytes zero).
func (t TMH) Encode(f *TMHFields) {
	t[0], t[1], t[2], t[3] = uint8(f.Opcode), 0, 0, 0
	binary.BigEndian.PutUint32(t[4:], f.AppCtx)
	binary.BigEndian.PutUint64(t[8:], f.Tag)
}

// Fields returns the TMH's values.
func (t TMH) Fields() TMHFields { return TMHFields{t.Opcode(), t.AppCtx(), t.Tag()} }

// RVH is a view of the rendezvous header (rdma-core struct ibv_rvh,
// 16 bytes) that follows a TMH whose opcode is RNDV: where the sender's
// data can be read from.
type RVH []byte

// RVHSize is the length of the RVH.
const RVHSize = 16

// VirtualAddress returns the remote buffer's address.
func (r RVH) VirtualAddress() uint64 { return binary.BigEndian.Uint64(r[0:]) }

// RKey returns the remote buffer's R_Key.
func (r RVH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// Length returns the remote buffer's length.
func (r RVH) Length() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// RVHFields holds the RVH's values.
type RVHFields struct {
	VirtualAddress uint64
	RKey           uint32
	Length         uint32
}

// Encode writes the RVH.
func (r RVH) Encode(f *RVHFields) {
	binary.BigEndian.PutUint64(r[0:], f.VirtualAddress)
	binary.BigEndian.PutUint32(r[8:], f.RKey)
	binary.BigEndian.PutUint32(r[12:], f.Length)
}

// Fields returns the RVH's values.
func (r RVH) Fields() RVHFields { return RVHFields{r.VirtualAddress(), r.RKey(), r.Length()} }

// ParseTMH returns the TMH (and, for RNDV, the RVH) at the start of a SEND
// payload, and the application data after them. ok is false when the
// payload is too short for the headers its opcode needs.
func ParseTMH(payload []byte) (tmh TMH, rvh RVH, data []byte, ok bool) {
	if len(payload) < TMHSize {
		return nil, nil, nil, false
	}
	tmh = TMH(payload[:TMHSize])
	data = payload[TMHSize:]
	if tmh.Opcode() == TMRendezvous {
		if len(data) < RVHSize {
			return nil, nil, nil, false
		}
		rvh = RVH(data[:RVHSize])
		data = data[RVHSize:]
	}
	return tmh, rvh, data, true
}
