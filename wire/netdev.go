package wire

import (
	"encoding/binary"
	"net/netip"
)

// What Linux rdma_rxe derives from the network device it runs on: the
// node GUID and the link-local GID from the device's MAC address, and the
// active path MTU from the device's MTU. hca (for a device on a UDP
// socket) and link/tap (a host with a MAC of its own) both need them, and
// both may import wire.

// NetdevHeaderBytes is what rxe subtracts from its network device's MTU
// before rounding down to an InfiniBand MTU (RXE_MAX_HDR_LENGTH in
// rxe_set_mtu): room for the Ethernet, IP, UDP and InfiniBand headers.
const NetdevHeaderBytes = 80

// NetdevPathMTU is the active path MTU in bytes (256, 512, 1024, 2048 or
// 4096) that rxe gives a port on a network device whose MTU is ifMTU:
// ifMTU less NetdevHeaderBytes, rounded down to an InfiniBand MTU, and 256
// when that is less than 256 (rxe_set_mtu). A 1500-byte Ethernet gives
// 1024, a 9000-byte one or loopback 4096.
func NetdevPathMTU(ifMTU int) int {
	n := ifMTU - NetdevHeaderBytes
	m := 4096
	for m > 256 && m > n {
		m >>= 1
	}
	return m
}

// GUIDFromMAC is the modified EUI-64 of a MAC address (RFC 4291 appendix
// A: ff:fe in the middle, the universal/local bit flipped), which rxe
// takes as its node and port GUID (addrconf_addr_eui48).
func GUIDFromMAC(mac [6]byte) uint64 {
	eui := [8]byte{mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	return binary.BigEndian.Uint64(eui[:])
}

// LinkLocalFromGUID is fe80::/64 with guid as the interface identifier:
// the default GID that the RDMA core puts at index 0 of a RoCE port's GID
// table, and, with a GUID from GUIDFromMAC, the IPv6 link-local address
// the kernel gives the network device.
func LinkLocalFromGUID(guid uint64) netip.Addr {
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(a[8:], guid)
	return netip.AddrFrom16(a)
}

// MACFromAddr is the locally administered MAC softhca gives a host that
// has no MAC of its own: 02:00 and the last four bytes of its address
// (an IPv4 address whole). hca derives a device's default node GUID from
// it (GUIDFromMAC), and link/tap uses it as a TAP host's default MAC, so
// that the two agree.
func MACFromAddr(addr netip.Addr) [6]byte {
	b := addr.As16()
	return [6]byte{0x02, 0x00, b[12], b[13], b[14], b[15]}
}
