package tap_test

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/wire"
)

// BenchmarkReceive: a 4 KiB RoCEv2 frame to the host, IPv4 (UDP checksum
// 0) and IPv6 (with a UDP checksum, as a Linux UDP socket sends it).
func BenchmarkReceive(b *testing.B) {
	for _, tc := range []struct {
		name   string
		v6     bool
		udpSum bool
	}{{"IPv4", false, false}, {"IPv6+checksum", true, true}} {
		b.Run(tc.name, func(b *testing.B) {
			h, err := tap.New(tap.Config{MAC: hostMAC, Addrs: []netip.Addr{host4, host6}, MTU: 9000}, &counter{})
			if err != nil {
				b.Fatal(err)
			}
			n := netFromPeer(tc.v6)
			f := roceFrame(b, n, ibPacket(&n, 1, 4096), tc.udpSum)
			var p link.Packet
			b.ReportAllocs()
			b.SetBytes(int64(len(f)))
			for b.Loop() {
				if o, r := h.Receive(t0, f, &p); o != tap.Delivered {
					b.Fatal(r)
				}
			}
		})
	}
}

// BenchmarkSend: a 4 KiB RoCEv2 packet to a resolved neighbour.
func BenchmarkSend(b *testing.B) {
	h, err := tap.New(tap.Config{MAC: hostMAC, Addrs: []netip.Addr{host4}, MTU: 9000}, &counter{})
	if err != nil {
		b.Fatal(err)
	}
	var p link.Packet
	h.Receive(t0, arpFrame(b, bcastMAC, layers.ARPRequest, peerMAC, peer4, [6]byte{}, host4), &p)
	h.Receive(t0, arpFrame(b, hostMAC, layers.ARPReply, peerMAC, peer4, hostMAC, host4), &p)
	n := wire.Net{Src: host4, Dst: peer4, SrcPort: entropyPt, DstPort: wire.RoCEv2Port, DontFragment: true}
	pkts := []link.Packet{{Buf: ibPacket(&n, 1, 4096), Net: n}}
	b.ReportAllocs()
	b.SetBytes(int64(len(pkts[0].Buf)))
	for b.Loop() {
		h.Send(t0, pkts)
	}
}
