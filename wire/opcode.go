package wire

// OpCode is the BTH "OpCode" field (IBTA 9.2.1, table 38): the top three
// bits select the transport service (RC, UC, RD, UD, CNP) and the low five
// bits the operation.
type OpCode uint8

// Transport is the transport-service part of an OpCode (its top three bits).
type Transport uint8

// Transport services (IBTA table 38). RD is listed for completeness; rxe and
// softhca do not implement it, and Parse drops its packets.
const (
	TransportRC  Transport = 0x00
	TransportUC  Transport = 0x20
	TransportRD  Transport = 0x40
	TransportUD  Transport = 0x60
	TransportCNP Transport = 0x80
)

// String returns the transport's IBTA abbreviation.
func (t Transport) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportUD:
		return "UD"
	case TransportCNP:
		return "CNP"
	}
	return "reserved"
}

// Transport returns the transport service of the opcode.
func (o OpCode) Transport() Transport { return Transport(o & 0xe0) }

// Operation returns the low five bits of the opcode.
func (o OpCode) Operation() uint8 { return uint8(o) & 0x1f }

// Reliable Connection opcodes (IBTA table 38), plus the IBTA 1.5 FLUSH and
// ATOMIC WRITE extensions that newer rxe kernels send.
const (
	RCSendFirst              OpCode = 0x00
	RCSendMiddle             OpCode = 0x01
	RCSendLast               OpCode = 0x02
	RCSendLastWithImmediate  OpCode = 0x03
	RCSendOnly               OpCode = 0x04
	RCSendOnlyWithImmediate  OpCode = 0x05
	RCRDMAWriteFirst         OpCode = 0x06
	RCRDMAWriteMiddle        OpCode = 0x07
	RCRDMAWriteLast          OpCode = 0x08
	RCRDMAWriteLastWithImm   OpCode = 0x09
	RCRDMAWriteOnly          OpCode = 0x0a
	RCRDMAWriteOnlyWithImm   OpCode = 0x0b
	RCRDMAReadRequest        OpCode = 0x0c
	RCRDMAReadResponseFirst  OpCode = 0x0d
	RCRDMAReadResponseMiddle OpCode = 0x0e
	RCRDMAReadResponseLast   OpCode = 0x0f
	RCRDMAReadResponseOnly   OpCode = 0x10
	RCAcknowledge            OpCode = 0x11
	RCAtomicAcknowledge      OpCode = 0x12
	RCCompareSwap            OpCode = 0x13
	RCFetchAdd               OpCode = 0x14
	RCSendLastWithInvalidate OpCode = 0x16
	RCSendOnlyWithInvalidate OpCode = 0x17
	RCFlush                  OpCode = 0x1c
	RCAtomicWrite            OpCode = 0x1d
)

// Unreliable Connection opcodes: the SEND and RDMA WRITE subset of RC.
const (
	UCSendFirst             OpCode = 0x20
	UCSendMiddle            OpCode = 0x21
	UCSendLast              OpCode = 0x22
	UCSendLastWithImmediate OpCode = 0x23
	UCSendOnly              OpCode = 0x24
	UCSendOnlyWithImmediate OpCode = 0x25
	UCRDMAWriteFirst        OpCode = 0x26
	UCRDMAWriteMiddle       OpCode = 0x27
	UCRDMAWriteLast         OpCode = 0x28
	UCRDMAWriteLastWithImm  OpCode = 0x29
	UCRDMAWriteOnly         OpCode = 0x2a
	UCRDMAWriteOnlyWithImm  OpCode = 0x2b
)

// Unreliable Datagram opcodes.
const (
	UDSendOnly              OpCode = 0x64
	UDSendOnlyWithImmediate OpCode = 0x65
)

// CNP is the RoCEv2 Congestion Notification Packet (annex A17.9.2).
const CNP OpCode = 0x81

// HeaderMask says which extension headers follow the BTH, one bit each, in
// the order they appear on the wire (IBTA 9.2: RDETH, DETH, RETH,
// AtomicETH, AETH, AtomicAckETH, ImmDt, IETH; FETH precedes RETH).
type HeaderMask uint16

// Extension header bits, in wire order.
const (
	HasDETH HeaderMask = 1 << iota
	HasFETH
	HasRETH
	HasAtomicETH
	HasAETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	// HasCNPReserved marks the 16 reserved bytes that follow the BTH of a
	// CNP (A17.9.2); they are kept as a header so that a CNP never has
	// payload.
	HasCNPReserved
)

// Position of a packet within a message.
type Position uint8

// Positions: a message is one Only packet, or First, Middle..., Last.
const (
	PosOnly Position = iota
	PosFirst
	PosMiddle
	PosLast
)

// Kind is the message class of an opcode: what the packet is part of.
type Kind uint8

// Kinds of packets.
const (
	KindSend Kind = iota + 1
	KindWrite
	KindReadRequest
	KindReadResponse
	KindAck
	KindAtomicAck
	KindCompareSwap
	KindFetchAdd
	KindFlush
	KindAtomicWrite
	KindCNP
)

// OpInfo is the opcode table entry: everything the codec and the engine
// need to know about an opcode without a switch.
type OpInfo struct {
	Name     string     // the opcode name as Wireshark prints it
	Valid    bool       // false for reserved opcodes
	Headers  HeaderMask // extension headers that follow the BTH
	HdrLen   int        // BTH plus extension header bytes
	Payload  bool       // whether payload may follow the headers
	FixedLen int        // if > 0, the payload must be exactly this long
	Kind     Kind
	Pos      Position
	// Request is true for requester-to-responder packets, false for
	// responses (ACK, atomic ACK, READ responses) and CNP.
	Request bool
}

// Info returns the table entry for the opcode. Reserved opcodes have
// Valid == false.
func (o OpCode) Info() *OpInfo { return &opTable[o] }

// Valid reports whether the opcode is defined (not reserved).
func (o OpCode) Valid() bool { return opTable[o].Valid }

// String returns the opcode's name as Wireshark's InfiniBand dissector
// prints it ("RC Send Only"), or "reserved 0xNN".
func (o OpCode) String() string {
	if n := opTable[o].Name; n != "" {
		return n
	}
	return "reserved 0x" + hex8(uint8(o))
}

func hex8(v uint8) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>4], digits[v&0xf]})
}

// opTable is indexed by opcode (the gopacket port-table technique: no map
// and no switch on the hot path). It is filled once at init.
var opTable [256]OpInfo

type opDef struct {
	op      OpCode
	name    string
	hdr     HeaderMask
	payload bool
	fixed   int
	kind    Kind
	pos     Position
	request bool
}

// defineOps lists every defined opcode once. UC repeats RC's SEND and
// WRITE rows, so they are generated from one list.
func defineOps() []opDef {
	var defs []opDef
	sendWrite := []struct {
		low  uint8
		name string
		hdr  HeaderMask
		kind Kind
		pos  Position
	}{
		{0x00, "Send First", 0, KindSend, PosFirst},
		{0x01, "Send Middle", 0, KindSend, PosMiddle},
		{0x02, "Send Last", 0, KindSend, PosLast},
		{0x03, "Send Last Immediate", HasImmDt, KindSend, PosLast},
		{0x04, "Send Only", 0, KindSend, PosOnly},
		{0x05, "Send Only Immediate", HasImmDt, KindSend, PosOnly},
		{0x06, "RDMA Write First", HasRETH, KindWrite, PosFirst},
		{0x07, "RDMA Write Middle", 0, KindWrite, PosMiddle},
		{0x08, "RDMA Write Last", 0, KindWrite, PosLast},
		{0x09, "RDMA Write Last Immediate", HasImmDt, KindWrite, PosLast},
		{0x0a, "RDMA Write Only", HasRETH, KindWrite, PosOnly},
		{0x0b, "RDMA Write Only Immediate", HasRETH | HasImmDt, KindWrite, PosOnly},
	}
	for _, t := range []Transport{TransportRC, TransportUC} {
		for _, s := range sendWrite {
			defs = append(defs, opDef{OpCode(uint8(t) | s.low), t.String() + " " + s.name,
				s.hdr, true, 0, s.kind, s.pos, true})
		}
	}
	defs = append(defs,
		opDef{RCRDMAReadRequest, "RC RDMA Read Request", HasRETH, false, 0, KindReadRequest, PosOnly, true},
		opDef{RCRDMAReadResponseFirst, "RC RDMA Read Response First", HasAETH, true, 0, KindReadResponse, PosFirst, false},
		opDef{RCRDMAReadResponseMiddle, "RC RDMA Read Response Middle", 0, true, 0, KindReadResponse, PosMiddle, false},
		opDef{RCRDMAReadResponseLast, "RC RDMA Read Response Last", HasAETH, true, 0, KindReadResponse, PosLast, false},
		opDef{RCRDMAReadResponseOnly, "RC RDMA Read Response Only", HasAETH, true, 0, KindReadResponse, PosOnly, false},
		opDef{RCAcknowledge, "RC Acknowledge", HasAETH, false, 0, KindAck, PosOnly, false},
		opDef{RCAtomicAcknowledge, "RC Atomic Acknowledge", HasAETH | HasAtomicAckETH, false, 0, KindAtomicAck, PosOnly, false},
		opDef{RCCompareSwap, "RC Compare Swap", HasAtomicETH, false, 0, KindCompareSwap, PosOnly, true},
		opDef{RCFetchAdd, "RC Fetch Add", HasAtomicETH, false, 0, KindFetchAdd, PosOnly, true},
		opDef{RCSendLastWithInvalidate, "RC Send Last Invalidate", HasIETH, true, 0, KindSend, PosLast, true},
		opDef{RCSendOnlyWithInvalidate, "RC Send Only Invalidate", HasIETH, true, 0, KindSend, PosOnly, true},
		opDef{RCFlush, "RC Flush", HasFETH | HasRETH, false, 0, KindFlush, PosOnly, true},
		opDef{RCAtomicWrite, "RC Atomic Write", HasRETH, true, 8, KindAtomicWrite, PosOnly, true},
		opDef{UDSendOnly, "UD Send Only", HasDETH, true, 0, KindSend, PosOnly, true},
		opDef{UDSendOnlyWithImmediate, "UD Send Only Immediate", HasDETH | HasImmDt, true, 0, KindSend, PosOnly, true},
		opDef{CNP, "CNP", HasCNPReserved, false, 0, KindCNP, PosOnly, false},
	)
	return defs
}

func init() {
	for _, d := range defineOps() {
		opTable[d.op] = OpInfo{
			Name:     d.name,
			Valid:    true,
			Headers:  d.hdr,
			HdrLen:   BTHSize + d.hdr.Len(),
			Payload:  d.payload,
			FixedLen: d.fixed,
			Kind:     d.kind,
			Pos:      d.pos,
			Request:  d.request,
		}
	}
}

// headerSizes is indexed by the bit number of a HeaderMask bit.
var headerSizes = [...]int{
	DETHSize, FETHSize, RETHSize, AtomicETHSize, AETHSize, AtomicAckETHSize,
	ImmDtSize, IETHSize, CNPReservedSize,
}

// Len returns the total size of the extension headers in the mask.
func (m HeaderMask) Len() int {
	n := 0
	for i, s := range headerSizes {
		if m&(1<<i) != 0 {
			n += s
		}
	}
	return n
}

// First reports whether the packet starts a message (First or Only).
func (p Position) First() bool { return p == PosFirst || p == PosOnly }

// Last reports whether the packet ends a message (Last or Only).
func (p Position) Last() bool { return p == PosLast || p == PosOnly }
