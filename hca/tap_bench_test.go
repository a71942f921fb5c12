package hca_test

import (
	"net/netip"
	"testing"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/internal/netpath"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// BenchmarkTAPWrite64K: RC RDMA WRITE of 64 KiB (path MTU 1024, 16 in
// flight) from a device in one network namespace to a device on a UDP
// socket (GSO and GRO) in another, across a bridge and a veth pair of
// MTU 1500 (netpath, unshaped). The writer is on a TAP device on the
// bridge ("tap") or on a UDP socket bound to the bridge's address
// ("udp"); everything else is the same, so the ratio is the TAP link's
// cost against the UDP link's. Needs root (skipped without it).
func BenchmarkTAPWrite64K(b *testing.B) {
	p := netpath.ForTest(b, netpath.Options{Unshaped: true, Bridge: true})
	host := p.Addr(0).As4()
	host[3] = 10
	for _, kind := range []string{"udp", "tap"} {
		b.Run(kind, func(b *testing.B) {
			var la link.Link
			err := p.Do(0, func() (err error) {
				if kind == "tap" {
					la, err = tap.Open(tap.LinkConfig{Name: "shbench", Host: tap.Config{Addrs: []netip.Addr{netip.AddrFrom4(host)}}})
				} else {
					la, err = udp.Open(udp.Config{Addr: netip.AddrPortFrom(p.Addr(0), wire.RoCEv2Port), GSO: true, GRO: true, ECN: true})
				}
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			if kind == "tap" {
				if err := p.Join("shbench"); err != nil {
					la.Close()
					b.Fatal(err)
				}
			}
			var lb *udp.Link
			if err := p.Do(1, func() (err error) {
				lb, err = udp.Open(udp.Config{Addr: netip.AddrPortFrom(p.Addr(1), wire.RoCEv2Port), GSO: true, GRO: true, ECN: true})
				return err
			}); err != nil {
				la.Close()
				b.Fatal(err)
			}
			x := openSideConfig(b, hca.Config{Link: la}, 4<<20)
			y := openSideConfig(b, hca.Config{Link: lb}, 4<<20)
			connect(b, x, y, verbs.QPTypeRC, verbs.MTU1024)
			benchWrite64K(b, x, y)
		})
	}
}
