package softhca

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/internal/netpath"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/wire"
)

// The TAP link in the network, as issue 17 asks: softhca on a TAP device
// in one network namespace, joined by a bridge and a veth pair to another
// namespace (netpath with Options.Bridge):
//
//	namespace 0: br0 10.77.N.1 ── tapA (softhca host 10.77.N.10, fd77:0:0:N::10)
//	                 │        └── tapB (softhca host 10.77.N.11, fd77:0:0:N::11)
//	                 np0 ═══veth═══ np1 10.77.N.2, fd77:0:0:N::2 (namespace 1: softhca on UDP)
//
// The whole conformance suite runs over a pair of devices on them: TAP to
// UDP and TAP to TAP, over IPv4 and over IPv6, so that every RC, UC and UD
// opcode (and the error and timer cases) crosses real frames, ARP and
// neighbour discovery included. Then the kernel of namespace 1 pings the
// TAP host (ping, ping -6, arping) and its neighbour table holds the
// host's MAC. It needs root (netpath.ForTest skips without it, and fails
// with CI=true).

// tapHost4 and tapHost6 are the TAP hosts' addresses on path p (i: 0 for
// tapA, 1 for tapB).
func tapHost4(p *netpath.Path, i int) netip.Addr {
	b := p.Addr(0).As4()
	b[3] = byte(10 + i)
	return netip.AddrFrom4(b)
}

func tapHost6(p *netpath.Path, i int) netip.Addr {
	b := p.Addr6(0).As16()
	b[15] = byte(0x10 + i)
	return netip.AddrFrom16(b)
}

var tapSeq atomic.Uint32

// openTAP opens a TAP link in namespace 0 on the bridge, for host i with
// address addr.
func openTAP(p *netpath.Path, addr netip.Addr) (*tap.Link, error) {
	name := fmt.Sprintf("shtap%d", tapSeq.Add(1))
	var l *tap.Link
	err := p.Do(0, func() (err error) {
		l, err = tap.Open(tap.LinkConfig{Name: name, Host: tap.Config{Addrs: []netip.Addr{addr}, MTU: 9000}})
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := p.Join(name); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// openPeerUDP opens a UDP link in namespace 1 on addr, port 4791.
func openPeerUDP(p *netpath.Path, addr netip.Addr) (*udp.Link, error) {
	var l *udp.Link
	err := p.Do(1, func() (err error) {
		l, err = udp.Open(udp.Config{Addr: netip.AddrPortFrom(addr, wire.RoCEv2Port), ECN: true})
		return err
	})
	return l, err
}

func TestTAP(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Unshaped: true, Bridge: true, IPv6: true, MTU: 9000})
	families := []struct {
		name string
		host func(*netpath.Path, int) netip.Addr
		peer netip.Addr
	}{
		{"ipv4", tapHost4, p.Addr(1)},
		{"ipv6", tapHost6, p.Addr6(1)},
	}
	var last *tap.Link // a TAP link still open for the ping tests
	for _, fam := range families {
		t.Run(fam.name+"/tap-udp", func(t *testing.T) {
			runSofthca(t, &Target{OpenLinks: func() (link.Link, link.Link, error) {
				a, err := openTAP(p, fam.host(p, 0))
				if err != nil {
					return nil, nil, err
				}
				b, err := openPeerUDP(p, fam.peer)
				if err != nil {
					a.Close()
					return nil, nil, err
				}
				return a, b, nil
			}})
		})
		t.Run(fam.name+"/tap-tap", func(t *testing.T) {
			runSofthca(t, &Target{OpenLinks: func() (link.Link, link.Link, error) {
				a, err := openTAP(p, fam.host(p, 0))
				if err != nil {
					return nil, nil, err
				}
				b, err := openTAP(p, fam.host(p, 1))
				if err != nil {
					a.Close()
					return nil, nil, err
				}
				return a, b, nil
			}})
		})
	}

	// The kernel of namespace 1 reaches the TAP host: ARP, neighbour
	// discovery and echo.
	h4, h6 := tapHost4(p, 0), tapHost6(p, 0)
	name := fmt.Sprintf("shtap%d", tapSeq.Add(1))
	require.NoError(t, p.Do(0, func() (err error) {
		last, err = tap.Open(tap.LinkConfig{Name: name, Host: tap.Config{Addrs: []netip.Addr{h4, h6}, MTU: 9000}})
		return err
	}))
	t.Cleanup(func() { last.Close() })
	require.NoError(t, p.Join(name))
	// The addresses had other MACs in the runs above (a host's MAC comes
	// from its first address), and namespace 1 may still hold those:
	// forget them, so that the pings must resolve the host's MAC (ARP,
	// neighbour discovery) before anything else.
	for _, a := range []netip.Addr{tapHost4(p, 0), tapHost6(p, 0)} {
		_, err := p.Exec(1, "ip", "neigh", "flush", "to", a.String())
		require.NoError(t, err)
	}
	// The link answers only while someone reads it, as a device would.
	go func() {
		buf := []link.Packet{{Buf: make([]byte, link.MaxPacketSize)}}
		for {
			if _, err := last.Recv(buf); err != nil {
				return
			}
		}
	}()
	hm := tap.DefaultMAC(h4)
	mac := net.HardwareAddr(hm[:]).String()
	// Echo requests over IPv4 and IPv6 (the kernel resolves the host
	// with ARP and neighbour discovery first), sent from a raw socket so
	// that no ping binary is needed, then arping where iputils has it.
	for _, a := range []netip.Addr{h4, h6} {
		if err := p.Ping(1, a, 5*time.Second); err != nil {
			neigh, _ := p.Exec(1, "ip", "neigh", "show")
			t.Fatalf("%v\nnamespace 1's neighbours:\n%s\nthe host's counters: %+v", err, neigh, last.HostStats())
		}
	}
	arping := []string{"-c", "2", "-w", "5", "-I", p.Device(1), h4.String()}
	if _, err := exec.LookPath("arping"); err != nil {
		require.NotEqual(t, "true", os.Getenv("CI"), "CI must run arping: install iputils-arping")
		t.Logf("skipping arping %v: arping is not installed (iputils-arping); the echo requests above resolved the host with ARP", arping)
	} else {
		out, err := p.Exec(1, "arping", arping...)
		if err != nil {
			neigh, _ := p.Exec(1, "ip", "neigh", "show")
			t.Fatalf("%v\nnamespace 1's neighbours:\n%s\nthe host's counters: %+v", err, neigh, last.HostStats())
		}
		t.Logf("arping %s:\n%s", strings.Join(arping, " "), out)
		require.Contains(t, strings.ToLower(out), mac, "arping's replies come from softhca's MAC")
	}
	for _, a := range []netip.Addr{h4, h6} {
		out, err := p.Exec(1, "ip", "neigh", "show", a.String())
		require.NoError(t, err)
		require.Contains(t, strings.ToLower(out), mac, "namespace 1's neighbour entry for %s", a)
	}
	st := last.HostStats()
	require.NotZero(t, st.EchoReplies, "ICMP echo replies")
	require.NotZero(t, st.Echo6Replies, "ICMPv6 echo replies")
	require.NotZero(t, st.ARPReplies, "ARP replies")
	require.NotZero(t, st.NeighbourAdverts, "neighbour advertisements")
}
