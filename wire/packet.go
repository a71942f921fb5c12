package wire

// Packet is a parsed RoCEv2 packet: views into the buffer it was parsed
// from. Extension header views are nil when the opcode does not carry
// them. A Packet is meant to be reused: the parse functions overwrite every
// field.
type Packet struct {
	// Net holds the IP and UDP fields. Parse reads them from the headers;
	// ParseDatagram takes them from its arguments and fills in the IPv4
	// Identification it recovers; ParseTransport leaves Net alone.
	Net Net

	BTH          BTH
	DETH         DETH
	FETH         FETH
	RETH         RETH
	AtomicETH    AtomicETH
	AETH         AETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	CNPReserved  []byte

	// Payload is the data after the extension headers, without pad.
	Payload []byte
	// Pad is the pad after the payload (0..3 bytes).
	Pad []byte
	// ICRC is the stored invariant CRC.
	ICRC uint32
	// Raw is the whole InfiniBand packet, BTH through ICRC.
	Raw []byte
}

// Info returns the opcode table entry of the packet's opcode.
func (p *Packet) Info() *OpInfo { return p.BTH.OpCode().Info() }

// Parse parses a RoCEv2 packet that starts with its IPv4 or IPv6 header
// (as read from a TAP device or a capture, after the Ethernet header):
// IP and UDP headers, InfiniBand headers, and the ICRC over all of them.
// Bytes after the IP packet's length (Ethernet padding) are ignored.
func Parse(b []byte, p *Packet) DropReason {
	ib, r := parseIPUDP(b, &p.Net)
	if r != DropNone {
		return r
	}
	if r := ParseTransport(ib, p); r != DropNone {
		return r
	}
	if !CheckICRC(&p.Net, p.Raw) {
		return DropBadICRC
	}
	return DropNone
}

// ParseDatagram parses the payload of a UDP datagram received on the
// RoCEv2 port, given the datagram's addresses and ports in n (DstPort
// included). For IPv4, where the socket hides the Identification field
// that the ICRC covers, it recovers the field (see SolveIPv4ID) and stores
// it in p.Net.ID; n.DontFragment says which DF value to assume (RoCEv2
// senders set it). For IPv6 the ICRC is checked in full.
func ParseDatagram(b []byte, n *Net, p *Packet) DropReason {
	return ParseDatagramFlow(b, n, p, nil)
}

// ParseDatagramFlow is ParseDatagram checking the ICRC of an IPv4 packet
// through f, which caches the flow's part of it (see ICRCFlow); with a nil
// f it is ParseDatagram. Its result is ParseDatagram's in every case.
func ParseDatagramFlow(b []byte, n *Net, p *Packet, f *ICRCFlow) DropReason {
	p.Net = *n
	if r := ParseTransport(b, p); r != DropNone {
		return r
	}
	if p.Net.IsIPv6() {
		if !CheckICRC(&p.Net, p.Raw) {
			return DropBadICRC
		}
		return DropNone
	}
	id, ok := solveIPv4ID(f, &p.Net, p.Raw)
	if !ok {
		return DropBadICRC
	}
	p.Net.ID = id
	return DropNone
}

// ParseTransport parses an InfiniBand packet, BTH through ICRC (the UDP
// payload), checking everything except the ICRC value: the length against
// the opcode's headers, the transport version, reserved and unsupported
// opcodes, whether payload is allowed, and the pad. It leaves p.Net as it
// is.
func ParseTransport(b []byte, p *Packet) DropReason {
	if len(b) < BTHSize+ICRCSize {
		return DropTruncated
	}
	bth := BTH(b[:BTHSize])
	if bth.TVer() != 0 {
		return DropBadTVer
	}
	op := bth.OpCode()
	info := &opTable[op]
	if !info.Valid {
		if op.Transport() == TransportRD {
			return DropUnsupportedTransport
		}
		return DropReservedOpCode
	}
	end := len(b) - ICRCSize
	if end < info.HdrLen {
		return DropTruncated
	}
	data := end - info.HdrLen
	pad := bth.PadCount()
	if !info.Payload {
		if data != 0 {
			return DropPayloadNotAllowed
		}
		if pad != 0 {
			return DropBadPad
		}
	}
	if pad > data || data&3 != 0 {
		// IBTA 9.2: the pad brings the payload to a multiple of 4 bytes.
		return DropBadPad
	}
	if info.FixedLen > 0 && data-pad != info.FixedLen {
		return DropBadPayloadLength
	}

	p.BTH = bth
	p.DETH, p.FETH, p.RETH, p.AtomicETH = nil, nil, nil, nil
	p.AETH, p.AtomicAckETH, p.ImmDt, p.IETH, p.CNPReserved = nil, nil, nil, nil, nil
	off := BTHSize
	m := info.Headers
	take := func(bit HeaderMask, size int) []byte {
		if m&bit == 0 {
			return nil
		}
		h := b[off : off+size : off+size]
		off += size
		return h
	}
	p.DETH = take(HasDETH, DETHSize)
	p.FETH = take(HasFETH, FETHSize)
	p.RETH = take(HasRETH, RETHSize)
	p.AtomicETH = take(HasAtomicETH, AtomicETHSize)
	p.AETH = take(HasAETH, AETHSize)
	p.AtomicAckETH = take(HasAtomicAckETH, AtomicAckETHSize)
	p.ImmDt = take(HasImmDt, ImmDtSize)
	p.IETH = take(HasIETH, IETHSize)
	p.CNPReserved = take(HasCNPReserved, CNPReservedSize)
	p.Payload = b[off : end-pad : end-pad]
	p.Pad = b[end-pad : end : end]
	p.ICRC = StoredICRC(b)
	p.Raw = b
	return DropNone
}
