package hca

import (
	"net"
	"net/netip"
	"slices"
	"syscall"

	"github.com/softhca/softhca/link"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// NetdevActiveMTU is the active MTU rxe gives a port on a network
// interface whose MTU is ifMTU: ifMTU less 80 bytes of headers, rounded
// down to an InfiniBand MTU, between 256 and 4096 (1500 gives 1024, a
// 9000-byte or loopback interface 4096): wire.NetdevPathMTU as a code.
func NetdevActiveMTU(ifMTU int) verbs.MTU {
	return verbs.MTUFromBytes(wire.NetdevPathMTU(ifMTU))
}

// ActiveMTUFor is the active MTU rxe would give a port on the interface
// that holds addr (NetdevActiveMTU of its MTU): the interface with addr
// itself, else one whose network contains it (loopback lists 127.0.0.1/8
// and holds 127.0.0.2 too). Without such an interface it is rxe's usual
// 1024. Set Config.PortAttr.ActiveMTU to it to open a device whose port
// MTU follows the network as rxe's does.
func ActiveMTUFor(addr netip.Addr) verbs.MTU {
	addr = addr.Unmap()
	ifs, err := net.Interfaces()
	if err != nil {
		return verbs.MTU1024
	}
	containing := -1
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
			ip = ip.Unmap()
			ones, _ := ipn.Mask.Size()
			switch {
			case ip == addr:
				return NetdevActiveMTU(ifc.MTU)
			case containing < 0 && netip.PrefixFrom(ip, ones).Contains(addr):
				containing = ifc.MTU
			}
		}
	}
	if containing < 0 {
		return verbs.MTU1024
	}
	return NetdevActiveMTU(containing)
}

// interfaceConfig fills what a device on a network interface of its own
// (a link.Interface: link/tap) takes from it, as rxe takes it from its
// netdev: the addresses (GID 1 onwards: the interface's, the link-local
// one aside, unless Config.Addrs picks some of them), the node GUID (from
// the MAC, so that GID 0 is the interface's link-local address) and the
// active MTU (NetdevActiveMTU of the interface's MTU). Fields already set
// are kept; addresses the interface does not have are an error.
func interfaceConfig(cfg Config, ifc link.Interface) (Config, error) {
	addrs := ifc.Addrs()
	ll := wire.LinkLocalFromGUID(wire.GUIDFromMAC(ifc.MAC()))
	if len(cfg.Addrs) == 0 {
		for _, a := range addrs {
			if a != ll {
				cfg.Addrs = append(cfg.Addrs, a)
			}
		}
	}
	for _, a := range cfg.Addrs {
		if !slices.Contains(addrs, a.Unmap()) {
			return cfg, verbs.Errorf("open_device", syscall.EINVAL, "address %s is not one of the link's (%v)", a, addrs)
		}
	}
	if cfg.Attr.NodeGUID == 0 {
		cfg.Attr.NodeGUID = wire.GUIDFromMAC(ifc.MAC())
	}
	if cfg.PortAttr.ActiveMTU == 0 {
		cfg.PortAttr.ActiveMTU = NetdevActiveMTU(ifc.MTU())
	}
	return cfg, nil
}
