package wire

import "net/netip"

// The ICRC of an IPv4 packet starts with 40 bytes of pseudo-header after
// the masked LRH (icrcPrefix): the masked IPv4 header, the UDP header and
// the BTH with byte 4 masked. Most of them are the same for every packet
// of a flow (addresses, ports, DF, the masked bytes); only the IPv4 total
// length and Identification, the UDP length and the BTH (but its masked
// byte 4) change from packet to packet.
//
// For a fixed starting state and input length, CRC-32 is affine over
// GF(2): the state after a prefix P is the state after C, P with its
// varying bytes zeroed, XOR the contribution of each varying byte, a
// linear function of that byte alone (and of how many bytes follow it).
// hash/crc32's pre- and post-complement do not change this: they
// complement the register on the way in and out, so they cancel in the
// difference. ICRCFlow caches the state after C per flow, and
// icrcIPv4Varying adds the varying bytes with one table lookup each.

// ICRCFlow caches the ICRC state of an IPv4 flow's constant pseudo-header
// fields (addresses, ports, DF), so that the ICRC of each of its packets
// costs a table lookup per varying header byte instead of a CRC over the
// whole pseudo-header. A QP keeps one for the packets it sends; the
// engine checks the packets it receives through an ICRCFlows. Its
// methods give the results of the package functions of the same names
// for any n: they check n's flow against the cached one and recompute the
// cache when it differs (without allocating), and they take the package
// functions' path for IPv6 and for an n whose source is not an IPv4
// address (as a bad n from the receive path may be).
//
// The zero value is ready to use. An ICRCFlow is not safe for concurrent
// use: its owner serialises the calls.
type ICRCFlow struct {
	src, dst         netip.Addr
	srcPort, dstPort uint16
	df               bool
	// c is the ICRC state after the masked LRH and the pseudo-header of
	// the flow with its varying bytes zero.
	c uint32
}

// ICRC is ICRC(n, ib).
func (f *ICRCFlow) ICRC(n *Net, ib []byte) uint32 { return icrc(f, n, ib) }

// ICRCGather is ICRCGather(n, hdr, payload, pad).
func (f *ICRCFlow) ICRCGather(n *Net, hdr, payload []byte, pad int) uint32 {
	return icrcGather(f, n, hdr, payload, pad)
}

// Seal is Seal(n, pkt).
func (f *ICRCFlow) Seal(n *Net, pkt []byte) { seal(f, n, pkt) }

// SolveIPv4ID is SolveIPv4ID(n, pkt).
func (f *ICRCFlow) SolveIPv4ID(n *Net, pkt []byte) (uint16, bool) { return solveIPv4ID(f, n, pkt) }

// state returns the cached state of n's flow, loading it first if the
// cache holds another. n.Src is an IPv4 address, so it never matches the
// zero ICRCFlow's src, the zero Addr: the zero ICRCFlow holds no flow.
func (f *ICRCFlow) state(n *Net) uint32 {
	if n.Src != f.src || n.Dst != f.dst || n.SrcPort != f.srcPort ||
		n.DstPort != f.dstPort || n.DontFragment != f.df {
		f.load(n)
	}
	return f.c
}

// load computes the state of n's flow: the pseudo-header as icrcPrefix
// builds it, with the lengths, the ID and the BTH (but its masked byte)
// left zero for icrcIPv4Varying.
func (f *ICRCFlow) load(n *Net) {
	var ph [pseudoHeaderMax]byte
	k := putPseudoHeader(ph[:], n, 0)
	clear(ph[2:6])       // IPv4 total length and Identification
	clear(ph[k-4 : k-2]) // UDP length
	ph[k+bthFB] = 0xff
	*f = ICRCFlow{
		src: n.Src, dst: n.Dst, srcPort: n.SrcPort, dstPort: n.DstPort, df: n.DontFragment,
		c: crcSmall(icrcLRH, ph[:k+BTHSize]),
	}
}

// ipv4PrefixLen is the length of the IPv4 pseudo-header with the BTH.
const ipv4PrefixLen = IPv4HeaderSize + UDPHeaderSize + BTHSize

// Indexes in icrcIPv4Tab, in the order of the bytes in the pseudo-header.
const (
	tabTotalHi = iota
	tabTotalLo
	tabIDHi
	tabIDLo
	tabUDPLenHi
	tabUDPLenLo
	tabBTH0     // BTH bytes 0-3; bytes 5-11 are the last 7 of the prefix, whose tables are crcSlicing8's
	numIPv4Tabs = tabBTH0 + 4
)

// icrcIPv4Tab[i][v] is the linear contribution to the ICRC state after
// the IPv4 pseudo-header of byte v at the position of varying byte i: the
// CRC register, from zero, after v and the bytes that follow it in the
// prefix as zeros. crcSlicing8[k][v] is the same for a byte followed by k
// zero bytes, which covers the BTH from byte 4 on.
var icrcIPv4Tab = func() (t [numIPv4Tabs][256]uint32) {
	pos := [numIPv4Tabs]int{2, 3, 4, 5, IPv4HeaderSize + 4, IPv4HeaderSize + 5}
	for i := range 4 {
		pos[tabBTH0+i] = IPv4HeaderSize + UDPHeaderSize + i
	}
	tab := &crcSlicing8[0]
	for i, p := range pos {
		for v := range 256 {
			c := tab[v]
			for range ipv4PrefixLen - 1 - p {
				c = tab[c&0xff] ^ c>>8
			}
			t[i][v] = c
		}
	}
	return t
}()

// icrcIPv4Varying returns the contribution of the varying bytes of an
// IPv4 pseudo-header to the state after it: the ID, the lengths for a
// packet of ibLen bytes (BTH through ICRC), and the BTH bth[:BTHSize]
// without its masked byte 4.
func icrcIPv4Varying(id uint16, ibLen int, bth []byte) uint32 {
	t, s := &icrcIPv4Tab, &crcSlicing8
	udpLen := UDPHeaderSize + ibLen
	total := IPv4HeaderSize + udpLen
	_ = bth[BTHSize-1]
	return t[tabTotalHi][byte(total>>8)] ^ t[tabTotalLo][byte(total)] ^
		t[tabIDHi][byte(id>>8)] ^ t[tabIDLo][byte(id)] ^
		t[tabUDPLenHi][byte(udpLen>>8)] ^ t[tabUDPLenLo][byte(udpLen)] ^
		t[tabBTH0][bth[0]] ^ t[tabBTH0+1][bth[1]] ^ t[tabBTH0+2][bth[2]] ^ t[tabBTH0+3][bth[3]] ^
		s[6][bth[5]] ^ s[5][bth[6]] ^ s[4][bth[7]] ^ s[3][bth[8]] ^
		s[2][bth[9]] ^ s[1][bth[10]] ^ s[0][bth[11]]
}

// ICRCFlows holds an ICRCFlow for each of a few flows, for a receiver
// whose arrivals come on several flows interleaved: from several peers,
// or from one rxe peer, which sends each QP's packets from a UDP source
// port of its own. A single ICRCFlow would reload its state on nearly
// every packet there, which costs more than no cache. For picks the
// ICRCFlow a flow hashes to, so that alternating flows keep theirs.
//
// The zero value is ready to use. ICRCFlows is not safe for concurrent
// use: its owner serialises the calls.
type ICRCFlows [icrcFlowSlots]ICRCFlow

// icrcFlowSlots is how many flows an ICRCFlows keeps (a power of two).
const icrcFlowSlots = 8

// For returns the ICRCFlow for n's flow: the slot its source port and the
// last byte of its source address hash to.
func (fs *ICRCFlows) For(n *Net) *ICRCFlow {
	a := n.Src.As16() // the zero Addr gives zeros
	h := uint(n.SrcPort) ^ uint(n.SrcPort)>>8 ^ uint(a[15])
	return &fs[h%icrcFlowSlots]
}
