package wire

import (
	"encoding/binary"
	"hash/crc32"
	"sync/atomic"
)

// The invariant CRC (IBTA 7.8.1, RoCEv2 annex A17.3.3) is CRC-32 with the
// reflected IEEE 802.3 polynomial, the same function as hash/crc32's IEEE
// checksum, computed over:
//
//	8 bytes of 0xFF           standing for the masked LRH of native IB
//	IP header                 TOS/traffic class, TTL/hop limit, IPv4
//	                          header checksum, IPv6 flow label masked to 1s
//	UDP header                checksum masked to 1s
//	BTH                       byte 4 (F, B, Resv6) masked to 1s
//	extension headers, payload, pad
//
// and stored after the pad least-significant byte first, as rxe stores it
// (rxe_icrc.c). hash/crc32 pre- and post-complements its state, so its
// checksum is exactly the complemented CRC register that rxe writes.

// icrcLRH is the hash/crc32 state after the 8 masked LRH bytes. (rxe's raw
// register there is 0xdebb20e3, the complement of this value.)
var icrcLRH = crc32.ChecksumIEEE([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// pseudoHeaderMax is the largest masked IP+UDP+BTH prefix (IPv6).
const pseudoHeaderMax = IPv6HeaderSize + UDPHeaderSize + BTHSize

// ICRC computes the invariant CRC of an InfiniBand packet ib (BTH through
// pad, without the 4 ICRC bytes) carried in the IP and UDP headers that n
// describes. The fields the ICRC masks (traffic class, hop limit, flow
// label, checksums) do not matter. ib must hold at least a BTH.
func ICRC(n *Net, ib []byte) uint32 { return icrc(nil, n, ib) }

// icrc is ICRC, with the IPv4 flow state cached in f when f is not nil.
func icrc(f *ICRCFlow, n *Net, ib []byte) uint32 {
	return crc32.Update(icrcPrefix(f, n, len(ib)+ICRCSize, ib), crc32.IEEETable, ib[BTHSize:])
}

// icrcPrefix returns the ICRC state after the masked LRH, IP and UDP
// headers and BTH of a packet of ibLen bytes (BTH through ICRC) whose BTH
// is bth[:BTHSize]. With an f, an IPv4 packet's state comes from f's
// cached flow state and the per-packet fields (icrcflow.go); otherwise, and
// for everything else, from the pseudo-header built and checksummed here.
func icrcPrefix(f *ICRCFlow, n *Net, ibLen int, bth []byte) uint32 {
	if f != nil && n.Src.Is4() {
		return f.state(n) ^ icrcIPv4Varying(n.ID, ibLen, bth)
	}
	var ph [pseudoHeaderMax]byte
	k := putPseudoHeader(ph[:], n, ibLen)
	copy(ph[k:], bth[:BTHSize])
	ph[k+bthFB] = 0xff
	return crcSmall(icrcLRH, ph[:k+BTHSize])
}

// ICRCGather is ICRC for a packet held in parts: hdr (BTH and extension
// headers), then payload, then pad zero bytes (0-3, as BTH's pad count). It lets a sender
// compute the ICRC over a payload that is sent from where it lies.
func ICRCGather(n *Net, hdr, payload []byte, pad int) uint32 {
	return icrcGather(nil, n, hdr, payload, pad)
}

// icrcGather is ICRCGather, with the IPv4 flow state cached in f when f is
// not nil.
func icrcGather(f *ICRCFlow, n *Net, hdr, payload []byte, pad int) uint32 {
	c := icrcPrefix(f, n, len(hdr)+len(payload)+pad+ICRCSize, hdr)
	c = crc32.Update(c, crc32.IEEETable, hdr[BTHSize:])
	c = crc32.Update(c, crc32.IEEETable, payload)
	return crc32.Update(c, crc32.IEEETable, zeroPad[:pad&3])
}

// zeroPad is the pad bytes ICRCGather checksums: a package array, so that
// passing it to crc32.Update does not allocate.
var zeroPad [3]byte

// crcSmall is crc32.Update for the few bytes of the pseudo-header (40
// for IPv4, 60 for IPv6). It cannot be crc32.Update itself, because that
// dispatches through a function value, which makes any buffer passed to it
// escape: a stack array there would cost an allocation per packet. A plain
// byte-at-a-time table loop costs about 2 ns a byte, as much as
// crc32.Update spends on a whole 4 KiB payload with CLMUL, so this is
// slicing-by-8 (the algorithm hash/crc32 uses for short inputs), eight
// independent table lookups per 8 bytes. The bulk of the packet still goes
// through crc32.Update (hardware CRC where the CPU has it).
func crcSmall(c uint32, b []byte) uint32 {
	t := &crcSlicing8
	c = ^c
	for len(b) >= 8 {
		c ^= binary.LittleEndian.Uint32(b)
		c = t[0][b[7]] ^ t[1][b[6]] ^ t[2][b[5]] ^ t[3][b[4]] ^
			t[4][c>>24] ^ t[5][c>>16&0xff] ^ t[6][c>>8&0xff] ^ t[7][c&0xff]
		b = b[8:]
	}
	for _, v := range b {
		c = t[0][byte(c)^v] ^ c>>8
	}
	return ^c
}

// crcSlicing8 holds the slicing-by-8 tables for crcSmall: crcSlicing8[0] is
// the IEEE table, and crcSlicing8[k][i] is the CRC register after byte i
// followed by k zero bytes.
var crcSlicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xff] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// putPseudoHeader writes the masked IP and UDP headers for an InfiniBand
// packet of ibLen bytes (ICRC included) and returns their length.
func putPseudoHeader(ph []byte, n *Net, ibLen int) int {
	udpLen := UDPHeaderSize + ibLen
	var h int
	if n.IsIPv6() {
		h = IPv6HeaderSize
		binary.BigEndian.PutUint32(ph[0:], 0x6fffffff) // version 6, tclass and flow label masked
		binary.BigEndian.PutUint16(ph[4:], uint16(udpLen))
		ph[6] = ipProtoUDP
		ph[7] = 0xff
		s, d := n.Src.As16(), n.Dst.As16()
		copy(ph[8:24], s[:])
		copy(ph[24:40], d[:])
	} else {
		h = IPv4HeaderSize
		ph[0] = ipv4Version<<4 | IPv4HeaderSize/4
		ph[1] = 0xff
		binary.BigEndian.PutUint16(ph[2:], uint16(IPv4HeaderSize+udpLen))
		binary.BigEndian.PutUint16(ph[4:], n.ID)
		var ff uint16
		if n.DontFragment {
			ff = ipv4FlagDF
		}
		binary.BigEndian.PutUint16(ph[6:], ff)
		ph[8] = 0xff
		ph[9] = ipProtoUDP
		ph[10], ph[11] = 0xff, 0xff
		// As16, not As4, which panics on the zero Addr: the receive path
		// gets n from outside, and a bad n must mean a bad ICRC, not a
		// crash. For IPv4 addresses the last 4 bytes are the address.
		s, d := n.Src.As16(), n.Dst.As16()
		copy(ph[12:16], s[12:])
		copy(ph[16:20], d[12:])
	}
	binary.BigEndian.PutUint16(ph[h:], n.SrcPort)
	binary.BigEndian.PutUint16(ph[h+2:], n.DstPort)
	binary.BigEndian.PutUint16(ph[h+4:], uint16(udpLen))
	ph[h+6], ph[h+7] = 0xff, 0xff
	return h + UDPHeaderSize
}

// StoredICRC returns the ICRC stored in the last 4 bytes of pkt.
func StoredICRC(pkt []byte) uint32 {
	return binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCSize:])
}

// PutICRC computes the ICRC of pkt (BTH through ICRC) and stores it in the
// last 4 bytes.
func PutICRC(n *Net, pkt []byte) {
	end := len(pkt) - ICRCSize
	binary.LittleEndian.PutUint32(pkt[end:], ICRC(n, pkt[:end]))
}

// CheckICRC reports whether the ICRC stored at the end of pkt (BTH through
// ICRC) is right for the headers n describes.
func CheckICRC(n *Net, pkt []byte) bool {
	return ICRC(n, pkt[:len(pkt)-ICRCSize]) == StoredICRC(pkt)
}

// SolveIPv4ID verifies the ICRC of an IPv4 RoCEv2 packet whose IP
// Identification field is unknown, as when it arrives through a UDP
// socket, and recovers that field. n gives everything else (addresses,
// ports, DontFragment); its ID is ignored. pkt runs from the BTH through
// the ICRC.
//
// The CRC is linear over GF(2): flipping bit i of the ID flips a fixed set
// of ICRC bits, depending only on how many bytes follow the ID. So the
// difference between the stored ICRC and the one computed with ID 0 must
// be a combination of 16 known 32-bit columns; the combination, if there
// is one, is the ID. The check keeps 16 of its 32 bits of strength: a
// corrupted packet passes with probability 2^-16 (instead of 2^-32), while
// IPv6 packets, which have no ID, keep the full 32 bits.
func SolveIPv4ID(n *Net, pkt []byte) (id uint16, ok bool) { return solveIPv4ID(nil, n, pkt) }

// solveIPv4ID is SolveIPv4ID, with the flow state cached in f when f is not
// nil.
func solveIPv4ID(f *ICRCFlow, n *Net, pkt []byte) (id uint16, ok bool) {
	if n.IsIPv6() || len(pkt) < BTHSize+ICRCSize {
		return 0, false
	}
	probe := *n
	probe.ID = 0
	diff := icrc(f, &probe, pkt[:len(pkt)-ICRCSize]) ^ StoredICRC(pkt)
	return idDecoderFor(len(pkt)).solve(diff)
}

// Where the IPv4 Identification sits in the ICRC input: after the 8 LRH
// bytes and 4 bytes of IP header; it is followed by the rest of the IPv4
// header, the UDP header and the InfiniBand packet with its ICRC removed.
const idTrailer = IPv4HeaderSize - 6 + UDPHeaderSize - ICRCSize

// idDecoder solves diff = sum of id_i * column_i for one packet length.
// Its vectors are the columns in reduced echelon form: vec[j] has bit
// pivot[j] set and every other pivot bit clear; comb[j] records which ID
// bits vec[j] combines.
type idDecoder struct {
	vec, pivot [16]uint32
	comb       [16]uint16
}

func (d *idDecoder) solve(diff uint32) (uint16, bool) {
	var id uint16
	var sum uint32
	for j := range d.vec {
		if diff&d.pivot[j] != 0 {
			sum ^= d.vec[j]
			id ^= d.comb[j]
		}
	}
	return id, sum == diff
}

// maxIDPacket bounds the packet lengths the decoder cache covers: the
// largest UDP payload.
const maxIDPacket = 1 << 16

var idDecoders [maxIDPacket]atomic.Pointer[idDecoder]

var zeroBytes [4096]byte

func idDecoderFor(pktLen int) *idDecoder {
	if pktLen >= maxIDPacket {
		return newIDDecoder(pktLen)
	}
	if d := idDecoders[pktLen].Load(); d != nil {
		return d
	}
	d := newIDDecoder(pktLen)
	idDecoders[pktLen].Store(d)
	return d
}

// newIDDecoder computes the 16 ICRC columns of the ID bits for a packet of
// pktLen bytes (BTH through ICRC) and reduces them.
//
// hash/crc32 complements its state on entry and exit, so the linear part of
// the CRC of data x is ^crc32.Update(0xffffffff, x): that is what a single
// set bit followed by the trailing zero bytes contributes.
func newIDDecoder(pktLen int) *idDecoder {
	trailer := idTrailer + pktLen
	var d idDecoder
	for i := range 16 {
		var b [2]byte
		binary.BigEndian.PutUint16(b[:], 1<<i)
		c := crc32.Update(0xffffffff, crc32.IEEETable, b[:])
		for rem := trailer; rem > 0; {
			k := min(rem, len(zeroBytes))
			c = crc32.Update(c, crc32.IEEETable, zeroBytes[:k])
			rem -= k
		}
		d.vec[i] = ^c
		d.comb[i] = 1 << i
	}
	for j := range d.vec {
		// The columns are independent (multiplying by x^k modulo the CRC
		// polynomial is invertible), so every vector has a pivot.
		p := d.vec[j] & -d.vec[j]
		d.pivot[j] = p
		for k := range d.vec {
			if k != j && d.vec[k]&p != 0 {
				d.vec[k] ^= d.vec[j]
				d.comb[k] ^= d.comb[j]
			}
		}
	}
	return &d
}
