package layers

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/google/gopacket"
	gplayers "github.com/google/gopacket/layers"
	"github.com/softhca/softhca/wire"
)

// ICRCStatus says whether a decoded BTH layer's ICRC was checked.
type ICRCStatus uint8

// ICRC statuses.
const (
	// ICRCUnchecked: the IP and UDP headers were not available (a
	// DecodingLayerParser before CheckICRC), or they were of a kind the
	// ICRC cannot be computed for.
	ICRCUnchecked ICRCStatus = iota
	// ICRCGood: the stored ICRC matches the packet and its headers.
	ICRCGood
	// ICRCBad: the stored ICRC does not match; a receiver drops the
	// packet (wire.DropBadICRC).
	ICRCBad
)

// String names the status.
func (s ICRCStatus) String() string {
	switch s {
	case ICRCUnchecked:
		return "unchecked"
	case ICRCGood:
		return "good"
	case ICRCBad:
		return "bad"
	}
	return fmt.Sprintf("ICRCStatus(%d)", uint8(s))
}

// CheckICRC checks the decoded packet's ICRC against the IP layer
// (*layers.IPv4 or *layers.IPv6) and the UDP layer it was decoded from, as
// wire.CheckICRC does, and records the result in ICRCStatus and the
// headers' fields in Packet.Net. It also remembers the two layers for
// SerializeTo, as SetNetworkLayerForICRC would. It does not allocate unless
// it fails.
//
// It returns an error, leaving ICRCStatus unchecked, when the layers cannot
// be what the packet was carried in (their lengths disagree with it), or
// describe headers the ICRC is not defined for here: IPv4 options or
// fragments, IPv6 extension headers, a protocol other than UDP.
func (l *BTH) CheckICRC(ip gopacket.NetworkLayer, udp *gplayers.UDP) (bool, error) {
	l.ICRCStatus = ICRCUnchecked
	if l.Packet.Raw == nil {
		return false, errors.New("rocev2: CheckICRC on a layer that was not decoded")
	}
	n, err := netFromLayers(ip, udp, len(l.Packet.Raw), true)
	if err != nil {
		return false, err
	}
	l.Packet.Net = n
	l.icrcIP, l.icrcUDP = ip, udp
	if !wire.CheckICRC(&n, l.Packet.Raw) {
		l.ICRCStatus = ICRCBad
		return false, nil
	}
	l.ICRCStatus = ICRCGood
	return true, nil
}

// VerifyICRC finds the BTH layer in a decoded packet and checks its ICRC
// against the IP and UDP layers decoded right before it (so, in a tunnel,
// the inner ones). It returns an error when the packet has no BTH layer or
// when CheckICRC does.
func VerifyICRC(pkt gopacket.Packet) (bool, error) {
	ls := pkt.Layers()
	for i, ly := range ls {
		l, ok := ly.(*BTH)
		if !ok {
			continue
		}
		ip, udp := ipUDPBefore(ls, i)
		if ip == nil {
			return false, errors.New("rocev2: the BTH layer does not follow IPv4 or IPv6 and UDP layers")
		}
		return l.CheckICRC(ip, udp)
	}
	return false, errors.New("rocev2: no BTH layer in the packet")
}

// ipUDPBefore returns the IP and UDP layers at ls[i-2] and ls[i-1], or nil
// if they are not there.
func ipUDPBefore(ls []gopacket.Layer, i int) (gopacket.NetworkLayer, *gplayers.UDP) {
	if i < 2 {
		return nil, nil
	}
	udp, ok := ls[i-1].(*gplayers.UDP)
	if !ok {
		return nil, nil
	}
	switch ip := ls[i-2].(type) {
	case *gplayers.IPv4:
		return ip, udp
	case *gplayers.IPv6:
		return ip, udp
	}
	return nil, nil
}

// netFromLayers returns the wire.Net the ICRC of an InfiniBand packet of
// ibLen bytes (BTH through ICRC) is computed with, from the IP and UDP
// layers it is carried in. With checkLengths, the layers' length fields
// (and the IPv4 header length) must be those of such a packet; without,
// they are assumed to be fixed when the layers are serialised.
func netFromLayers(ip gopacket.NetworkLayer, udp *gplayers.UDP, ibLen int, checkLengths bool) (wire.Net, error) {
	if udp == nil {
		return wire.Net{}, errors.New("rocev2: the ICRC needs the UDP layer")
	}
	n := wire.Net{SrcPort: uint16(udp.SrcPort), DstPort: uint16(udp.DstPort)}
	udpLen := wire.UDPHeaderSize + ibLen
	if checkLengths && int(udp.Length) != udpLen {
		return wire.Net{}, fmt.Errorf("rocev2: UDP length %d, want %d for a %d-byte InfiniBand packet", udp.Length, udpLen, ibLen)
	}
	switch ip := ip.(type) {
	case *gplayers.IPv4:
		switch {
		case ip == nil:
			return wire.Net{}, errors.New("rocev2: nil IPv4 layer")
		case ip.Version != 4:
			return wire.Net{}, fmt.Errorf("rocev2: IPv4 layer with version %d", ip.Version)
		case len(ip.Options) != 0 || checkLengths && ip.IHL != wire.IPv4HeaderSize/4:
			return wire.Net{}, errors.New("rocev2: the ICRC is not defined here for IPv4 headers with options")
		case ip.Flags&(gplayers.IPv4MoreFragments|gplayers.IPv4EvilBit) != 0 || ip.FragOffset != 0:
			return wire.Net{}, fmt.Errorf("rocev2: IPv4 flags %v, fragment offset %d: the ICRC covers unfragmented packets", ip.Flags, ip.FragOffset)
		case ip.Protocol != gplayers.IPProtocolUDP:
			return wire.Net{}, fmt.Errorf("rocev2: IPv4 protocol %v, want UDP", ip.Protocol)
		case checkLengths && int(ip.Length) != wire.IPv4HeaderSize+udpLen:
			return wire.Net{}, fmt.Errorf("rocev2: IPv4 total length %d, want %d", ip.Length, wire.IPv4HeaderSize+udpLen)
		}
		src, ok1 := addr4(ip.SrcIP)
		dst, ok2 := addr4(ip.DstIP)
		if !ok1 || !ok2 {
			return wire.Net{}, fmt.Errorf("rocev2: IPv4 addresses %v and %v", ip.SrcIP, ip.DstIP)
		}
		n.Src, n.Dst = src, dst
		n.TrafficClass = ip.TOS
		n.HopLimit = ip.TTL
		n.ID = ip.Id
		n.DontFragment = ip.Flags&gplayers.IPv4DontFragment != 0
	case *gplayers.IPv6:
		switch {
		case ip == nil:
			return wire.Net{}, errors.New("rocev2: nil IPv6 layer")
		case ip.Version != 6:
			return wire.Net{}, fmt.Errorf("rocev2: IPv6 layer with version %d", ip.Version)
		case ip.HopByHop != nil || ip.NextHeader != gplayers.IPProtocolUDP:
			return wire.Net{}, fmt.Errorf("rocev2: IPv6 next header %v: the ICRC is defined here for UDP right after the IPv6 header", ip.NextHeader)
		case checkLengths && int(ip.Length) != udpLen:
			return wire.Net{}, fmt.Errorf("rocev2: IPv6 payload length %d, want %d", ip.Length, udpLen)
		}
		src, ok1 := addr16(ip.SrcIP)
		dst, ok2 := addr16(ip.DstIP)
		if !ok1 || !ok2 {
			return wire.Net{}, fmt.Errorf("rocev2: IPv6 addresses %v and %v", ip.SrcIP, ip.DstIP)
		}
		n.Src, n.Dst = src, dst
		n.TrafficClass = ip.TrafficClass
		n.FlowLabel = ip.FlowLabel
		n.HopLimit = ip.HopLimit
	default:
		return wire.Net{}, errors.New("rocev2: the ICRC needs an *layers.IPv4 or *layers.IPv6 network layer")
	}
	return n, nil
}

func addr4(ip net.IP) (netip.Addr, bool) {
	if ip4 := ip.To4(); ip4 != nil {
		return netip.AddrFrom4([4]byte(ip4)), true
	}
	return netip.Addr{}, false
}

func addr16(ip net.IP) (netip.Addr, bool) {
	if len(ip) != net.IPv6len {
		return netip.Addr{}, false
	}
	return netip.AddrFrom16([16]byte(ip)), true
}
