package wire

import (
	"encoding/binary"
	"net/netip"
)

// RoCEv2Port is the IANA UDP destination port of RoCEv2 (annex A17.2.1).
const RoCEv2Port = 4791

// Sizes of the IP and UDP headers that RoCEv2 packets carry. softhca sends
// IPv4 headers without options and accepts no others (as rxe's ICRC covers
// only a 20-byte IPv4 header).
const (
	IPv4HeaderSize = 20
	IPv6HeaderSize = 40
	UDPHeaderSize  = 8
	// ICRCSize is the length of the invariant CRC at the end of a packet.
	ICRCSize = 4
)

const (
	ipv4FlagDF   = 0x4000
	ipProtoUDP   = 17
	ipv4Version  = 4
	ipv6Version  = 6
	ipv4FlagMF   = 0x2000
	ipv4FlagRsv  = 0x8000
	ipv4FragMask = 0x1fff
)

// Net holds the IP and UDP fields that surround an InfiniBand packet: what
// the ICRC covers besides the packet itself, and what Parse reads and
// EncodeIPUDP writes. Src and Dst are both IPv4 (4-byte form, never
// IPv4-mapped) or both IPv6.
type Net struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	// TrafficClass is the IPv4 TOS byte or the IPv6 traffic class.
	TrafficClass uint8
	// HopLimit is the IPv4 TTL or the IPv6 hop limit.
	HopLimit uint8
	// FlowLabel is the IPv6 flow label (20 bits).
	FlowLabel uint32
	// ID is the IPv4 Identification field.
	ID uint16
	// DontFragment is the IPv4 DF flag. RoCEv2 senders set it.
	DontFragment bool
}

// IsIPv6 reports whether the addresses are IPv6.
func (n *Net) IsIPv6() bool { return n.Src.Is6() }

// IPHeaderSize returns the size of the IP header for n's family.
func (n *Net) IPHeaderSize() int {
	if n.IsIPv6() {
		return IPv6HeaderSize
	}
	return IPv4HeaderSize
}

// EncodeIPUDP writes the IP and UDP headers for a UDP payload of
// udpPayloadLen bytes (the InfiniBand packet, ICRC included) at the start
// of b and returns their length. The IPv4 header checksum is computed; the
// UDP checksum is 0, as RoCEv2 senders send it (A17.2.3).
func EncodeIPUDP(b []byte, n *Net, udpPayloadLen int) int {
	udpLen := UDPHeaderSize + udpPayloadLen
	var h int
	if n.IsIPv6() {
		h = IPv6HeaderSize
		binary.BigEndian.PutUint32(b[0:], ipv6Version<<28|uint32(n.TrafficClass)<<20|n.FlowLabel&0xfffff)
		binary.BigEndian.PutUint16(b[4:], uint16(udpLen))
		b[6] = ipProtoUDP
		b[7] = n.HopLimit
		s, d := n.Src.As16(), n.Dst.As16()
		copy(b[8:24], s[:])
		copy(b[24:40], d[:])
	} else {
		h = IPv4HeaderSize
		b[0] = ipv4Version<<4 | IPv4HeaderSize/4
		b[1] = n.TrafficClass
		binary.BigEndian.PutUint16(b[2:], uint16(IPv4HeaderSize+udpLen))
		binary.BigEndian.PutUint16(b[4:], n.ID)
		var ff uint16
		if n.DontFragment {
			ff = ipv4FlagDF
		}
		binary.BigEndian.PutUint16(b[6:], ff)
		b[8] = n.HopLimit
		b[9] = ipProtoUDP
		b[10], b[11] = 0, 0
		s, d := n.Src.As4(), n.Dst.As4()
		copy(b[12:16], s[:])
		copy(b[16:20], d[:])
		binary.BigEndian.PutUint16(b[10:], IPv4Checksum(b[:IPv4HeaderSize]))
	}
	u := b[h:]
	binary.BigEndian.PutUint16(u[0:], n.SrcPort)
	binary.BigEndian.PutUint16(u[2:], n.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0
	return h + UDPHeaderSize
}

// IPv4Checksum is the RFC 791 header checksum of h (with its checksum
// field zero).
func IPv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// parseIPUDP reads the IP and UDP headers at the start of b into n and
// returns the UDP payload.
func parseIPUDP(b []byte, n *Net) ([]byte, DropReason) {
	if len(b) < 1 {
		return nil, DropTruncated
	}
	var udp []byte
	switch b[0] >> 4 {
	case ipv4Version:
		if len(b) < IPv4HeaderSize {
			return nil, DropTruncated
		}
		if b[0]&0x0f != IPv4HeaderSize/4 {
			return nil, DropIPHeader
		}
		total := int(binary.BigEndian.Uint16(b[2:]))
		if total < IPv4HeaderSize || total > len(b) {
			return nil, DropIPHeader
		}
		ff := binary.BigEndian.Uint16(b[6:])
		// The ICRC is checked over headers rebuilt from Net, which has no
		// room for the reserved flag: a packet with it set would verify
		// without the flag being covered (or fail for the wrong reason).
		if ff&(ipv4FlagRsv|ipv4FlagMF|ipv4FragMask) != 0 {
			return nil, DropIPHeader
		}
		if b[9] != ipProtoUDP {
			return nil, DropNotUDP
		}
		*n = Net{
			Src:          netip.AddrFrom4([4]byte(b[12:16])),
			Dst:          netip.AddrFrom4([4]byte(b[16:20])),
			TrafficClass: b[1],
			HopLimit:     b[8],
			ID:           binary.BigEndian.Uint16(b[4:]),
			DontFragment: ff&ipv4FlagDF != 0,
		}
		udp = b[IPv4HeaderSize:total]
	case ipv6Version:
		if len(b) < IPv6HeaderSize {
			return nil, DropTruncated
		}
		plen := int(binary.BigEndian.Uint16(b[4:]))
		if IPv6HeaderSize+plen > len(b) {
			return nil, DropIPHeader
		}
		if b[6] != ipProtoUDP {
			return nil, DropNotUDP
		}
		w := binary.BigEndian.Uint32(b[0:])
		*n = Net{
			Src:          netip.AddrFrom16([16]byte(b[8:24])),
			Dst:          netip.AddrFrom16([16]byte(b[24:40])),
			TrafficClass: uint8(w >> 20),
			FlowLabel:    w & 0xfffff,
			HopLimit:     b[7],
		}
		udp = b[IPv6HeaderSize : IPv6HeaderSize+plen]
	default:
		return nil, DropNotIP
	}
	if len(udp) < UDPHeaderSize {
		return nil, DropTruncated
	}
	n.SrcPort = binary.BigEndian.Uint16(udp[0:])
	n.DstPort = binary.BigEndian.Uint16(udp[2:])
	if n.DstPort != RoCEv2Port {
		return nil, DropNotRoCEv2
	}
	if int(binary.BigEndian.Uint16(udp[4:])) != len(udp) {
		return nil, DropUDPLength
	}
	return udp[UDPHeaderSize:], DropNone
}
