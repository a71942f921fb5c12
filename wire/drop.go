package wire

// DropReason says why a received packet must be dropped. DropNone means
// the packet is good. Every reason has a name (String) so that counters and
// traces can say it.
type DropReason uint8

// Drop reasons returned by Parse, ParseDatagram and ParseTransport.
const (
	DropNone DropReason = iota
	// DropTruncated: the packet ends before the headers its opcode needs,
	// or before the ICRC.
	DropTruncated
	// DropNotIP: the frame is neither IPv4 nor IPv6.
	DropNotIP
	// DropIPHeader: the IP header is malformed (bad version or length,
	// IPv4 options, a fragment, the reserved IPv4 flag set, total length
	// beyond the frame).
	DropIPHeader
	// DropNotUDP: the IP payload is not UDP.
	DropNotUDP
	// DropNotRoCEv2: the UDP destination port is not 4791.
	DropNotRoCEv2
	// DropUDPLength: the UDP length disagrees with the IP length.
	DropUDPLength
	// DropBadTVer: the BTH transport header version is not 0.
	DropBadTVer
	// DropReservedOpCode: the opcode is reserved.
	DropReservedOpCode
	// DropUnsupportedTransport: the opcode belongs to RD, which rxe and
	// softhca do not implement.
	DropUnsupportedTransport
	// DropPayloadNotAllowed: bytes follow the headers of an opcode that
	// carries no payload (ACK, READ request, atomics, CNP).
	DropPayloadNotAllowed
	// DropBadPayloadLength: an opcode with a fixed payload length (ATOMIC
	// WRITE) carries another length.
	DropBadPayloadLength
	// DropBadPad: the pad count is larger than the data that follows the
	// headers, or non-zero on an opcode without payload, or payload and pad
	// together are not a multiple of 4 bytes.
	DropBadPad
	// DropBadICRC: the invariant CRC does not match.
	DropBadICRC
	numDropReasons
)

// NumDropReasons is the number of drop reasons, DropNone included, for
// arrays of counters indexed by DropReason.
const NumDropReasons = int(numDropReasons)

var dropNames = [...]string{
	DropNone:                 "none",
	DropTruncated:            "truncated",
	DropNotIP:                "not IP",
	DropIPHeader:             "bad IP header",
	DropNotUDP:               "not UDP",
	DropNotRoCEv2:            "not RoCEv2 port",
	DropUDPLength:            "bad UDP length",
	DropBadTVer:              "bad TVer",
	DropReservedOpCode:       "reserved opcode",
	DropUnsupportedTransport: "unsupported transport",
	DropPayloadNotAllowed:    "payload not allowed for opcode",
	DropBadPayloadLength:     "bad payload length for opcode",
	DropBadPad:               "bad pad count",
	DropBadICRC:              "ICRC mismatch",
}

// String names the reason.
func (r DropReason) String() string {
	if int(r) < len(dropNames) {
		return dropNames[r]
	}
	return "drop reason " + itoa(int(r))
}
