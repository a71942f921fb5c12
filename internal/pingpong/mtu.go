package pingpong

import (
	"net"
	"net/netip"
	"unsafe"

	"github.com/softhca/softhca/verbs"
)

// rxeHeaderBytes is what rxe subtracts from its netdev's MTU before
// rounding down to an InfiniBand MTU (RXE_MAX_HDR_LENGTH, rxe_set_mtu).
const rxeHeaderBytes = 80

// PortMTUFromInterface is the active MTU rxe gives a port on a netdev
// with MTU ifMTU: ifMTU minus 80 bytes of headers, rounded down to an IB
// MTU, between 256 and 4096.
func PortMTUFromInterface(ifMTU int) verbs.MTU {
	m := verbs.MTUFromBytes(ifMTU - rxeHeaderBytes)
	if m == 0 {
		return verbs.MTU256
	}
	return min(m, verbs.MTU4096)
}

// portMTUFor is the active MTU for a device on addr: from the MTU of the
// interface that holds addr (or whose network contains it, as loopback's
// 127.0.0.0/8 holds 127.0.0.2), or rxe's usual 1024 when there is none.
func portMTUFor(addr netip.Addr) verbs.MTU {
	ifs, err := net.Interfaces()
	if err != nil {
		return verbs.MTU1024
	}
	best := -1
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			pfx := netip.PrefixFrom(ip.Unmap(), ones)
			switch {
			case ip.Unmap() == addr:
				return PortMTUFromInterface(ifc.MTU)
			case pfx.Contains(addr) && best < 0:
				best = ifc.MTU
			}
		}
	}
	if best < 0 {
		return verbs.MTU1024
	}
	return PortMTUFromInterface(best)
}

// uintptrOf is the address of b's first byte.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
