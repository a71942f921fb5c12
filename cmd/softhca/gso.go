package main

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/softhca/softhca/wire"
)

// This file recognises GSO super-datagrams in captures.
//
// softhca's UDP link (link/udp) sends a run of packets with the same
// destination and the same length, the last possibly shorter, as one
// UDP datagram with a UDP_SEGMENT control message: the InfiniBand packets
// back to back, each whole (BTH through ICRC), the segment size being the
// first packet's length. The kernel splits it into one datagram per
// packet, but a capture on loopback (tcpdump -i lo) sees it before the
// split: one IP packet and one UDP header around all of them, with the
// lengths of the whole. For IPv4 the kernel numbers the Identification of
// the segments of a DF super-datagram from the super-datagram's own
// (0, 1, 2, ...), and link/udp computes segment k's ICRC for that ID.
//
// Nothing in a RoCEv2 packet gives its length, so the segment size is
// found by trying every multiple of 4 in turn until the first packet's
// ICRC verifies: a 2^-32 chance for a wrong size. Computing each ICRC
// afresh would cost time quadratic in the datagram's size (a 64 KB
// datagram tries 16000 sizes); instead the CRC of the growing packet body
// is carried from one size to the next and combined with the CRC of the
// IP and UDP headers for that size, as zlib's crc32_combine does.

// crcPoly is the IEEE CRC-32 polynomial in hash/crc32's reflected bit
// order (bit 31 is the coefficient of x^0).
const crcPoly = 0xedb88320

// mulModP returns a*b modulo the CRC polynomial, both in the reflected
// bit order of crcPoly.
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// crcX32 is x^32 modulo the CRC polynomial: appending 4 zero bytes
// multiplies the CRC register by it.
var crcX32 = func() uint32 {
	b := uint32(1) << 31 // x^0
	for range 32 {
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return b
}()

// crcCombine returns the CRC-32 (hash/crc32's IEEE checksum) of A
// followed by B from crcA, crcB and shift, which is x^(8*len(B)) modulo
// the polynomial.
func crcCombine(crcA, crcB, shift uint32) uint32 { return mulModP(shift, crcA) ^ crcB }

// crcLinear is the CRC register after msg when it starts at 0, without
// hash/crc32's complements: the part of a CRC that depends on msg alone,
// so that the checksum of two equal-length messages XORed is
// crc(A^B) = crc(A) ^ crcLinear(B).
func crcLinear(msg []byte) uint32 { return ^crc32.Update(0xffffffff, crc32.IEEETable, msg) }

// headerDelta is what changes in the ICRC of a packet's IP, UDP and
// BTH prefix when the packet (BTH through ICRC) is size bytes long
// instead of minPacket: the IP and UDP length fields are covered by the
// ICRC. The prefix is 8 masked LRH bytes, the IP header, the UDP header
// and the BTH (see wire.ICRC).
func headerDelta(ipv6 bool, size int) uint32 {
	const lrh = 8
	var buf [lrh + wire.IPv6HeaderSize + wire.UDPHeaderSize + wire.BTHSize]byte
	ipHdr, ipLenAt, ipLen, ipLenMin := wire.IPv4HeaderSize, 2, wire.IPv4HeaderSize+wire.UDPHeaderSize+size, wire.IPv4HeaderSize+wire.UDPHeaderSize+minPacket
	if ipv6 {
		// The IPv6 payload length counts the UDP header and payload.
		ipHdr, ipLenAt, ipLen, ipLenMin = wire.IPv6HeaderSize, 4, wire.UDPHeaderSize+size, wire.UDPHeaderSize+minPacket
	}
	msg := buf[:lrh+ipHdr+wire.UDPHeaderSize+wire.BTHSize]
	binary.BigEndian.PutUint16(msg[lrh+ipLenAt:], uint16(ipLen^ipLenMin))
	binary.BigEndian.PutUint16(msg[lrh+ipHdr+4:], uint16((wire.UDPHeaderSize+size)^(wire.UDPHeaderSize+minPacket)))
	return crcLinear(msg)
}

// minPacket is the shortest InfiniBand packet: a BTH and the ICRC.
const minPacket = wire.BTHSize + wire.ICRCSize

// gsoSegmentSize returns the segment size of ib, the UDP payload of a
// datagram with the IP and UDP fields n, if ib is a GSO super-datagram:
// the smallest size (a multiple of 4, leaving at least one more packet)
// at which the packet ib starts with is whole, its ICRC verifying with
// n (n.ID is segment 0's). It returns 0 when there is none.
func gsoSegmentSize(n *wire.Net, ib []byte) int {
	if len(ib) < 2*minPacket {
		return 0
	}
	ipv6 := n.IsIPv6()
	c16 := wire.ICRC(n, ib[:wire.BTHSize]) // the ICRC of a bare BTH
	var body uint32                        // CRC-32 of ib[BTHSize : s-ICRCSize]
	shift := uint32(1) << 31               // x^(8*(s-minPacket))
	var p wire.Packet
	for s := minPacket; s+minPacket <= len(ib); s += 4 {
		if s > minPacket {
			body = crc32.Update(body, crc32.IEEETable, ib[s-2*wire.ICRCSize:s-wire.ICRCSize])
			shift = mulModP(shift, crcX32)
		}
		icrc := crcCombine(c16^headerDelta(ipv6, s), body, shift)
		if icrc != wire.StoredICRC(ib[:s]) {
			continue
		}
		if wire.ParseTransport(ib[:s], &p) == wire.DropNone && wire.CheckICRC(n, ib[:s]) {
			return s
		}
	}
	return 0
}

// splitGSO returns the packets of a GSO super-datagram, ip being its IP
// packet and n its IP and UDP fields as wire.Parse read them, each as an
// IP packet of its own, as the kernel would have sent it: the same
// headers with the lengths of the segment and, for IPv4, segment k's
// Identification (the super-datagram's plus k). It returns nil when ip
// does not hold several packets.
func splitGSO(ip []byte, n *wire.Net) [][]byte {
	hdr := n.IPHeaderSize() + wire.UDPHeaderSize
	var end int
	if n.IsIPv6() {
		end = wire.IPv6HeaderSize + int(binary.BigEndian.Uint16(ip[4:]))
	} else {
		end = int(binary.BigEndian.Uint16(ip[2:]))
	}
	if len(ip) < hdr || end < hdr || end > len(ip) {
		return nil
	}
	ib := ip[hdr:end]
	seg := gsoSegmentSize(n, ib)
	if seg == 0 {
		return nil
	}
	var out [][]byte
	for k, off := 0, 0; off < len(ib); k, off = k+1, off+seg {
		chunk := ib[off:min(off+seg, len(ib))]
		b := make([]byte, hdr+len(chunk))
		copy(b, ip[:hdr])
		copy(b[hdr:], chunk)
		udpLen := wire.UDPHeaderSize + len(chunk)
		if n.IsIPv6() {
			binary.BigEndian.PutUint16(b[4:], uint16(udpLen))
		} else {
			binary.BigEndian.PutUint16(b[2:], uint16(wire.IPv4HeaderSize+udpLen))
			binary.BigEndian.PutUint16(b[4:], n.ID+uint16(k))
			binary.BigEndian.PutUint16(b[10:], 0)
			binary.BigEndian.PutUint16(b[10:], wire.IPv4Checksum(b[:wire.IPv4HeaderSize]))
		}
		binary.BigEndian.PutUint16(b[hdr-4:], uint16(udpLen))
		out = append(out, b)
	}
	return out
}
