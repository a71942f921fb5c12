package tap

import (
	"encoding/binary"
	"net/netip"
)

// Byte offsets of the headers the host reads and writes. Each block cites
// the header's definition.

// Ethernet II (IEEE 802.3 clause 3, no FCS: a TAP device carries none).
//
//	0        6        12   14
//	+--------+--------+----+
//	|  dst   |  src   |type|
//	+--------+--------+----+
const (
	ethDst    = 0
	ethSrc    = 6
	ethType   = 12
	ethHdrLen = 14

	etherTypeIPv4 = 0x0800
	etherTypeARP  = 0x0806
	etherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100 // 802.1Q
	etherTypeQinQ = 0x88a8 // 802.1ad
	etherTypeQ91  = 0x9100 // pre-standard double tagging
)

// ARP for IPv4 over Ethernet (RFC 826).
//
//	0     2     4  5  6     8      14     18     24     28
//	+-----+-----+--+--+-----+------+------+------+------+
//	|htype|ptype|hl|pl| op  | sha  | spa  | tha  | tpa  |
//	+-----+-----+--+--+-----+------+------+------+------+
const (
	arpHType  = 0
	arpPType  = 2
	arpHLen   = 4
	arpPLen   = 5
	arpOp     = 6
	arpSHA    = 8
	arpSPA    = 14
	arpTHA    = 18
	arpTPA    = 24
	arpLen    = 28
	arpHWEth  = 1
	arpOpReq  = 1
	arpOpRepl = 2
)

// IPv4 (RFC 791) and IPv6 (RFC 8200) header fields the host reads; the
// rest are written by wire.EncodeIPUDP or putIPv4/putIPv6.
const (
	ipv4MinHdr    = 20
	ipv4TotalLen  = 2
	ipv4FlagsFrag = 6
	ipv4TTL       = 8
	ipv4Proto     = 9
	ipv4Checksum  = 10
	ipv4Src       = 12
	ipv4Dst       = 16
	ipv4FlagDF    = 0x4000
	ipv4FlagMF    = 0x2000
	ipv4FragOff   = 0x1fff

	ipv6HdrLen     = 40
	ipv6PayloadLen = 4
	ipv6NextHeader = 6
	ipv6HopLimit   = 7
	ipv6Src        = 8
	ipv6Dst        = 24

	protoICMP     = 1
	protoUDP      = 17
	protoICMPv6   = 58
	protoHopByHop = 0
	protoRouting  = 43
	protoFragment = 44
	protoESP      = 50
	protoAH       = 51
	protoDestOpts = 60
	protoMobility = 135
	protoHIP      = 139
	protoShim6    = 140

	// defaultHopLimit is the TTL / hop limit of what the host sends when
	// nothing says otherwise (Linux's default).
	defaultHopLimit = 64
	// ndHopLimit is the hop limit of every neighbour discovery message
	// (RFC 4861 7.1).
	ndHopLimit = 255
)

// UDP (RFC 768).
const (
	udpHdrLen   = 8
	udpDstPort  = 2
	udpLength   = 4
	udpChecksum = 6
)

// ICMP (RFC 792) and ICMPv6 (RFC 4443) echo, neighbour solicitation and
// advertisement (RFC 4861 4.3, 4.4):
//
//	0    1    2    4             8                        24
//	+----+----+----+-------------+------------------------+---------
//	|type|code|csum| id | seq    |                        |  (echo data)
//	|type|code|csum| reserved    |  target address        | options
//	|type|code|csum|R S O| rsvd  |  target address        | options
//	+----+----+----+-------------+------------------------+---------
const (
	icmpType     = 0
	icmpCode     = 1
	icmpChecksum = 2
	icmpHdrLen   = 8

	icmpEchoReply    = 0
	icmpEchoRequest  = 8
	icmp6EchoRequest = 128
	icmp6EchoReply   = 129
	icmp6NS          = 135
	icmp6NA          = 136

	ndFlags        = 4
	ndTarget       = 8
	ndFixedLen     = 24
	ndFlagSolicit  = 0x40
	ndFlagOverride = 0x20
	ndOptSLLA      = 1 // source link-layer address
	ndOptTLLA      = 2 // target link-layer address
	ndOptLLALen    = 8 // a link-layer address option for Ethernet
	ndMsgLen       = ndFixedLen + ndOptLLALen
)

var broadcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ipv6AllNodes is ff02::1.
var ipv6AllNodes = [16]byte{0: 0xff, 1: 0x02, 15: 0x01}

// isMulticastMAC reports whether the group bit of a MAC address is set
// (broadcast included).
func isMulticastMAC(m []byte) bool { return m[0]&1 != 0 }

// solicitedNode is the solicited-node multicast address of a (RFC 4291
// 2.7.1): ff02::1:ff00:0/104 and a's low 24 bits.
func solicitedNode(a [16]byte) [16]byte {
	s := [16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff}
	copy(s[13:], a[13:])
	return s
}

// multicastMAC is the Ethernet address an IP multicast group maps to:
// 01:00:5e and the group's low 23 bits for IPv4 (RFC 1112 6.4), 33:33 and
// its low 32 bits for IPv6 (RFC 2464 7). The limited broadcast
// 255.255.255.255 goes to the broadcast address.
func multicastMAC(a netip.Addr) [6]byte {
	if a.Is4() {
		b := a.As4()
		if b == [4]byte{255, 255, 255, 255} {
			return broadcastMAC
		}
		return [6]byte{0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]}
	}
	b := a.As16()
	return [6]byte{0x33, 0x33, b[12], b[13], b[14], b[15]}
}

// putEth writes an Ethernet header.
func putEth(b []byte, dst, src [6]byte, etherType uint16) {
	copy(b[ethDst:], dst[:])
	copy(b[ethSrc:], src[:])
	binary.BigEndian.PutUint16(b[ethType:], etherType)
}

// putIPv4 writes a 20-byte IPv4 header with DF set and ID 0 (an atomic
// datagram, RFC 6864) and its checksum.
func putIPv4(b []byte, tos uint8, total int, proto uint8, src, dst [4]byte) {
	b[0] = 4<<4 | ipv4MinHdr/4
	b[1] = tos
	binary.BigEndian.PutUint16(b[ipv4TotalLen:], uint16(total))
	binary.BigEndian.PutUint32(b[4:], ipv4FlagDF) // ID 0, DF, offset 0
	b[ipv4TTL] = defaultHopLimit
	b[ipv4Proto] = proto
	b[ipv4Checksum], b[ipv4Checksum+1] = 0, 0
	copy(b[ipv4Src:], src[:])
	copy(b[ipv4Dst:], dst[:])
	binary.BigEndian.PutUint16(b[ipv4Checksum:], ^fold(sum(b[:ipv4MinHdr], 0)))
}

// putIPv6 writes an IPv6 header with flow label 0.
func putIPv6(b []byte, tclass uint8, payload int, next, hop uint8, src, dst [16]byte) {
	binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(tclass)<<20)
	binary.BigEndian.PutUint16(b[ipv6PayloadLen:], uint16(payload))
	b[ipv6NextHeader] = next
	b[ipv6HopLimit] = hop
	copy(b[ipv6Src:], src[:])
	copy(b[ipv6Dst:], dst[:])
}

// sum adds b to the one's complement sum acc (RFC 1071), 32 bits at a
// time: the carries collect in the upper half of the uint64 and fold
// later, which gives the same result as adding 16-bit words. b is taken to
// start at an even offset of the checksummed data.
func sum(b []byte, acc uint64) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		acc += v>>32 + v&0xffffffff
		b = b[8:]
	}
	if len(b) >= 4 {
		acc += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

// fold folds a one's complement sum to 16 bits.
func fold(acc uint64) uint16 {
	for acc>>16 != 0 {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}

// pseudoSum is the sum of the IPv4 or IPv6 pseudo-header (RFC 768, RFC
// 8200 8.1) for an upper-layer message of n bytes: src and dst are the
// header's address fields (4 or 16 bytes each).
func pseudoSum(src, dst []byte, proto uint8, n int) uint64 {
	return sum(dst, sum(src, 0)) + uint64(proto) + uint64(n)
}
