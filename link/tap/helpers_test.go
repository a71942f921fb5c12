package tap_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/wire"
)

// The host under test and its peer on the link.
var (
	hostMAC   = [6]byte{0x02, 0, 0, 0, 0, 0x01}
	peerMAC   = [6]byte{0x02, 0, 0, 0, 0, 0x02}
	otherMAC  = [6]byte{0x02, 0, 0, 0, 0, 0x03}
	host4     = netip.MustParseAddr("10.0.0.1")
	peer4     = netip.MustParseAddr("10.0.0.2")
	other4    = netip.MustParseAddr("10.0.0.3")
	host6     = netip.MustParseAddr("2001:db8::1")
	peer6     = netip.MustParseAddr("2001:db8::2")
	hostLL    = netip.MustParseAddr("fe80::ff:fe00:1") // from hostMAC
	peerLL    = netip.MustParseAddr("fe80::ff:fe00:2") // from peerMAC
	allNodes  = netip.MustParseAddr("ff02::1")
	bcastMAC  = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	t0        = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	rocePort  = layers.UDPPort(wire.RoCEv2Port)
	entropyPt = uint16(0xc0de)
)

// recorder is an Emitter that keeps copies of the frames.
type recorder struct{ frames [][]byte }

func (r *recorder) Emit(f []byte) { r.frames = append(r.frames, bytes.Clone(f)) }

// take returns the frames emitted since the last take.
func (r *recorder) take() [][]byte {
	f := r.frames
	r.frames = nil
	return f
}

// counter is an Emitter that only counts, for allocation tests.
type counter struct{ n int }

func (c *counter) Emit([]byte) { c.n++ }

// newHost returns a host with hostMAC, host4 and host6 (and its
// link-local address), the recorder it emits to, and cfg's other fields.
func newHost(t testing.TB, cfg tap.Config) (*tap.Host, *recorder) {
	t.Helper()
	if cfg.MAC == ([6]byte{}) {
		cfg.MAC = hostMAC
	}
	if cfg.Addrs == nil {
		cfg.Addrs = []netip.Addr{host4, host6}
	}
	r := &recorder{}
	h, err := tap.New(cfg, r)
	require.NoError(t, err)
	return h, r
}

func hw(m [6]byte) net.HardwareAddr { return net.HardwareAddr(m[:]) }
func ip(a netip.Addr) net.IP        { return net.IP(a.AsSlice()) }

// serialize encodes layers with gopacket, lengths and checksums computed.
func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...))
	return bytes.Clone(buf.Bytes())
}

func ethernet(src, dst [6]byte, t layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: hw(src), DstMAC: hw(dst), EthernetType: t}
}

func ipv4(src, dst netip.Addr, proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: proto, SrcIP: ip(src), DstIP: ip(dst)}
}

func ipv6(src, dst netip.Addr, next layers.IPProtocol, hop uint8) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: hop, NextHeader: next, SrcIP: ip(src), DstIP: ip(dst)}
}

// arpFrame is an ARP packet from sha/spa for tpa.
func arpFrame(t testing.TB, ethDst [6]byte, op uint16, sha [6]byte, spa netip.Addr, tha [6]byte, tpa netip.Addr) []byte {
	return serialize(t, ethernet(sha, ethDst, layers.EthernetTypeARP), &layers.ARP{
		AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: op,
		SourceHwAddress: sha[:], SourceProtAddress: spa.AsSlice(),
		DstHwAddress: tha[:], DstProtAddress: tpa.AsSlice(),
	})
}

// solicitedNode is the solicited-node group of a and its MAC.
func solicitedNode(a netip.Addr) (netip.Addr, [6]byte) {
	b := a.As16()
	s := netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
	return s, [6]byte{0x33, 0x33, 0xff, b[13], b[14], b[15]}
}

// nsFrame is a neighbour solicitation from src (peerMAC) for target,
// sent to target's solicited-node group, with a source link-layer
// address option unless src is unspecified.
func nsFrame(t testing.TB, src, target netip.Addr) []byte {
	dst, dstMAC := solicitedNode(target)
	ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: ip(target)}
	if !src.IsUnspecified() {
		ns.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: peerMAC[:]}}
	}
	return icmp6Frame(t, peerMAC, dstMAC, src, dst, 255, layers.ICMPv6TypeNeighborSolicitation, ns)
}

// naFrame is a neighbour advertisement from peerMAC for target, to dst,
// with a target link-layer address option when tlla is not zero.
func naFrame(t testing.TB, ethDst [6]byte, src, dst, target netip.Addr, flags uint8, tlla [6]byte) []byte {
	na := &layers.ICMPv6NeighborAdvertisement{Flags: flags, TargetAddress: ip(target)}
	if tlla != ([6]byte{}) {
		na.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: tlla[:]}}
	}
	return icmp6Frame(t, peerMAC, ethDst, src, dst, 255, layers.ICMPv6TypeNeighborAdvertisement, na)
}

func icmp6Frame(t testing.TB, ethSrc, ethDst [6]byte, src, dst netip.Addr, hop uint8, typ uint8, body gopacket.SerializableLayer) []byte {
	ip6 := ipv6(src, dst, layers.IPProtocolICMPv6, hop)
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	require.NoError(t, icmp.SetNetworkLayerForChecksum(ip6))
	return serialize(t, ethernet(ethSrc, ethDst, layers.EthernetTypeIPv6), ip6, icmp, body)
}

// echo4Frame is an ICMP echo request from peer4 to dst.
func echo4Frame(t testing.TB, dst netip.Addr, id, seq uint16, data []byte) []byte {
	return serialize(t, ethernet(peerMAC, hostMAC, layers.EthernetTypeIPv4), ipv4(peer4, dst, layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: id, Seq: seq},
		gopacket.Payload(data))
}

// echo6Frame is an ICMPv6 echo request from peer6 to dst.
func echo6Frame(t testing.TB, dst netip.Addr, id, seq uint16, data []byte) []byte {
	ip6 := ipv6(peer6, dst, layers.IPProtocolICMPv6, 64)
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(layers.ICMPv6TypeEchoRequest, 0)}
	require.NoError(t, icmp.SetNetworkLayerForChecksum(ip6))
	return serialize(t, ethernet(peerMAC, hostMAC, layers.EthernetTypeIPv6), ip6, icmp,
		&layers.ICMPv6Echo{Identifier: id, SeqNumber: seq}, gopacket.Payload(data))
}

// ibPacket builds a valid RC SEND Only with a payload of size bytes whose
// ICRC is sealed for n.
func ibPacket(n *wire.Net, psn uint32, size int) []byte {
	payload := make([]byte, size)
	for k := range payload {
		payload[k] = byte(int(psn) + 7*k)
	}
	h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, DestQP: 0x123, PSN: wire.PSN(psn & wire.PSNMask)}}
	return wire.AppendPacket(nil, n, &h, payload)
}

// netTo is the Net of a packet from the peer's address to the host's
// (IPv4 or IPv6 as a is), as the ICRC is computed for it.
func netFromPeer(v6 bool) wire.Net {
	if v6 {
		return wire.Net{Src: peer6, Dst: host6, SrcPort: entropyPt, DstPort: wire.RoCEv2Port, TrafficClass: 0x8a, HopLimit: 60, FlowLabel: 0x12345}
	}
	return wire.Net{Src: peer4, Dst: host4, SrcPort: entropyPt, DstPort: wire.RoCEv2Port, TrafficClass: 0x8a, HopLimit: 60, ID: 0xbeef, DontFragment: true}
}

// roceFrame frames the InfiniBand packet ib (sealed for n) with gopacket,
// from peerMAC to hostMAC, with a UDP checksum when udpSum is set (0,
// RoCEv2's, otherwise).
func roceFrame(t testing.TB, n wire.Net, ib []byte, udpSum bool) []byte {
	udp := &layers.UDP{SrcPort: layers.UDPPort(n.SrcPort), DstPort: layers.UDPPort(n.DstPort)}
	var l3 gopacket.NetworkLayer
	var ls []gopacket.SerializableLayer
	if n.IsIPv6() {
		l := &layers.IPv6{Version: 6, TrafficClass: n.TrafficClass, FlowLabel: n.FlowLabel, HopLimit: n.HopLimit,
			NextHeader: layers.IPProtocolUDP, SrcIP: ip(n.Src), DstIP: ip(n.Dst)}
		l3 = l
		ls = append(ls, ethernet(peerMAC, hostMAC, layers.EthernetTypeIPv6), l)
	} else {
		l := &layers.IPv4{Version: 4, IHL: 5, TOS: n.TrafficClass, TTL: n.HopLimit, Id: n.ID,
			Protocol: layers.IPProtocolUDP, SrcIP: ip(n.Src), DstIP: ip(n.Dst)}
		if n.DontFragment {
			l.Flags = layers.IPv4DontFragment
		}
		l3 = l
		ls = append(ls, ethernet(peerMAC, hostMAC, layers.EthernetTypeIPv4), l)
	}
	require.NoError(t, udp.SetNetworkLayerForChecksum(l3))
	f := serialize(t, append(ls, udp, gopacket.Payload(ib))...)
	if !udpSum {
		off := 14 + n.IPHeaderSize() + 6
		f[off], f[off+1] = 0, 0
	}
	return f
}

// decode decodes a frame with gopacket and fails on a decoding error.
func decode(t testing.TB, f []byte) gopacket.Packet {
	t.Helper()
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	require.Nil(t, p.ErrorLayer(), "gopacket decodes % x", f)
	return p
}

// requireIsomorphic checks a frame the host emitted against gopacket:
// decoding it and encoding the layers again with checksums computed gives
// the same bytes (gopacket pads Ethernet frames to 60 bytes; the host
// does not, a TAP device needs no padding). So every checksum in the
// frame is right.
func requireIsomorphic(t testing.TB, f []byte) gopacket.Packet {
	t.Helper()
	p := decode(t, f)
	var ls []gopacket.SerializableLayer
	var l3 gopacket.NetworkLayer
	for _, l := range p.Layers() {
		switch v := l.(type) {
		case *layers.IPv4:
			l3 = v
		case *layers.IPv6:
			l3 = v
		case *layers.ICMPv6:
			require.NoError(t, v.SetNetworkLayerForChecksum(l3))
		case *layers.UDP:
			require.NoError(t, v.SetNetworkLayerForChecksum(l3))
		}
		s, ok := l.(gopacket.SerializableLayer)
		require.True(t, ok, "layer %v", l.LayerType())
		ls = append(ls, s)
		if _, ok := l.(*layers.ICMPv6Echo); ok {
			// gopacket's ICMPv6Echo drops the echo data.
			ls = append(ls, gopacket.Payload(echo6Data(p)))
		}
	}
	buf := gopacket.NewSerializeBuffer()
	require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, ls...))
	got := buf.Bytes()
	require.GreaterOrEqual(t, len(got), len(f))
	require.Equal(t, f, got[:len(f)], "the frame re-encoded by gopacket")
	require.Equal(t, make([]byte, len(got)-len(f)), got[len(f):], "gopacket's Ethernet padding")
	return p
}

// echo6Data is the data of an ICMPv6 echo message, which gopacket's
// ICMPv6Echo layer does not keep.
func echo6Data(p gopacket.Packet) []byte {
	return p.Layer(layers.LayerTypeICMPv6).LayerPayload()[4:]
}

// fixChecksum recomputes a checksum at sum over b (RFC 1071) with the
// pseudo-header sum ph, in a way of its own.
func fixChecksum(b []byte, at int, ph uint32) {
	b[at], b[at+1] = 0, 0
	s := ph
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	b[at], b[at+1] = byte(^s>>8), byte(^s)
}

// fix4 recomputes the IPv4 header checksum of a frame.
func fix4(f []byte) { fixChecksum(f[14:34], 10, 0) }

// fixICMPv6 recomputes the ICMPv6 checksum of a frame.
func fixICMPv6(f []byte) {
	var ph uint32
	for i := 22; i < 54; i += 2 {
		ph += uint32(f[i])<<8 | uint32(f[i+1])
	}
	fixChecksum(f[54:], 2, ph+uint32(len(f)-54)+58)
}

// requireRoCE checks a RoCEv2 frame the host emitted: to mac, the IP and
// UDP headers as n says (ID 0 and DF for IPv4, UDP checksum 0), and the
// InfiniBand packet ib, whose ICRC wire.Parse verifies over the real
// headers.
func requireRoCE(t testing.TB, f []byte, mac [6]byte, n wire.Net, ib []byte) {
	t.Helper()
	p := decode(t, f)
	e := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	require.Equal(t, hw(mac), e.DstMAC)
	require.Equal(t, hw(hostMAC), e.SrcMAC)
	if n.IsIPv6() {
		l := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		require.Equal(t, ip(n.Src), l.SrcIP)
		require.Equal(t, ip(n.Dst), l.DstIP)
		require.Equal(t, n.TrafficClass, l.TrafficClass)
		require.Equal(t, n.FlowLabel, l.FlowLabel)
		require.Equal(t, n.HopLimit, l.HopLimit)
	} else {
		l := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		require.Equal(t, ip(n.Src), l.SrcIP.To4())
		require.Equal(t, ip(n.Dst), l.DstIP.To4())
		require.Equal(t, n.TrafficClass, l.TOS)
		require.Equal(t, n.HopLimit, l.TTL)
		require.Equal(t, uint16(0), l.Id)
		require.Equal(t, layers.IPv4DontFragment, l.Flags)
	}
	u := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
	require.Equal(t, layers.UDPPort(n.SrcPort), u.SrcPort)
	require.Equal(t, layers.UDPPort(n.DstPort), u.DstPort)
	require.Equal(t, uint16(0), u.Checksum)
	requireIsomorphicIP(t, f)

	var wp wire.Packet
	require.Equal(t, wire.DropNone, wire.Parse(f[14:], &wp), "wire.Parse, ICRC included")
	require.Equal(t, ib, wp.Raw)
}

// requireIsomorphicIP checks the IPv4 header checksum of a RoCEv2 frame
// (the UDP checksum is 0, which gopacket would compute).
func requireIsomorphicIP(t testing.TB, f []byte) {
	t.Helper()
	if f[12] != 0x08 || f[13] != 0x00 {
		return
	}
	p := decode(t, f)
	l := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	buf := gopacket.NewSerializeBuffer()
	require.NoError(t, l.SerializeTo(buf, gopacket.SerializeOptions{ComputeChecksums: true}))
	require.Equal(t, f[14:34], buf.Bytes(), "the IPv4 header re-encoded by gopacket")
}

// sendTo sends one packet of size payload bytes from the host to dst,
// and returns the InfiniBand packet and the Net that goes on the wire.
func sendTo(h *tap.Host, now time.Time, dst netip.Addr, psn uint32, size int) ([]byte, wire.Net) {
	src := host4
	if dst.Is6() {
		src = host6
		if dst.IsLinkLocalUnicast() {
			src = hostLL
		}
	}
	n := wire.Net{Src: src, Dst: dst, SrcPort: entropyPt, DstPort: wire.RoCEv2Port, TrafficClass: 2, HopLimit: 64, DontFragment: true}
	ib := ibPacket(&n, psn, size)
	h.Send(now, []link.Packet{{Buf: ib, Net: n}})
	return ib, n
}

// requireCounted checks that the counters add up: every frame given to
// Receive is delivered, answered, learned or dropped for one reason, and
// wire's reasons add up to DropRoCE.
func requireCounted(t testing.TB, s tap.Stats) {
	t.Helper()
	require.Equal(t, s.RxFrames, s.RxDelivered+s.Answered()+s.RxLearned+s.Dropped(), "%+v", s)
	var roce uint64
	for _, v := range s.RxRoCE {
		roce += v
	}
	require.Equal(t, s.RxDropped[tap.DropRoCE], roce)
}
