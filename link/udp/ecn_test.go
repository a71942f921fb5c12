package udp_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/wire"
)

var (
	any4 = netip.MustParseAddrPort("0.0.0.0:0")
	any6 = netip.MustParseAddrPort("[::]:0")
)

// plainSocket opens an ordinary UDP socket on addr (IPv4 or IPv6 only)
// whose datagrams leave with traffic class tc and which reports the
// traffic class of those it receives (IP_RECVTOS / IPV6_RECVTCLASS): a
// view of the real IP header that does not depend on the link.
func plainSocket(t *testing.T, addr netip.AddrPort, tc int) *net.UDPConn {
	t.Helper()
	v4 := addr.Addr().Is4()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if v4 {
				serr = errors.Join(
					unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tc),
					unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1))
			} else {
				serr = errors.Join(
					unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1),
					unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tc),
					unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1))
			}
		})
		return errors.Join(err, serr)
	}}
	network := map[bool]string{true: "udp4", false: "udp6"}[v4]
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	require.NoError(t, err)
	t.Cleanup(func() { pc.Close() })
	return pc.(*net.UDPConn)
}

// readTC reads one datagram from c and returns its length and the traffic
// class its IP header carried.
func readTC(t *testing.T, c *net.UDPConn) (int, uint8) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(watchdog)))
	buf, oob := make([]byte, 65536), make([]byte, 128)
	n, oobn, _, _, err := c.ReadMsgUDPAddrPort(buf, oob)
	require.NoError(t, err)
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	require.NoError(t, err)
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
			return n, m.Data[0]
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS && len(m.Data) >= 4:
			return n, uint8(binary.NativeEndian.Uint32(m.Data))
		}
	}
	require.Fail(t, "no traffic class control message")
	return 0, 0
}

// ecnPath is a sender bound to from sending to a receiver bound to to,
// over the loopback address dst (to's own address unless to is a
// wildcard).
type ecnPath struct {
	name     string
	from, to netip.AddrPort
	dst      netip.Addr
}

var ecnPaths = []ecnPath{
	{"ipv4", lo4, lo4, lo4.Addr()},
	{"ipv6", lo6, lo6, lo6.Addr()},
	{"ipv4 to wildcard", lo4, any4, lo4.Addr()},
	{"ipv4 to dual-stack", lo4, any6, lo4.Addr()},
	{"ipv6 to dual-stack", lo6, any6, lo6.Addr()},
	{"wildcard to ipv4", any4, lo4, lo4.Addr()},
	{"dual-stack to ipv4", any6, lo4, lo4.Addr()},
	{"dual-stack to ipv6", any6, lo6, lo6.Addr()},
}

// srcFor returns the source address of packets from a link bound to from
// to dst: the bound address, or dst's loopback address for a wildcard.
func srcFor(from netip.AddrPort, dst netip.Addr) netip.Addr {
	if from.Addr().IsUnspecified() {
		return dst
	}
	return from.Addr()
}

// TestECNSend: a link with ECN sends every packet with ECT(0), a link
// without with 0, whatever the socket (IPv4, IPv6, wildcard, dual-stack
// to either family), with GSO and without. Another link reports it in
// Net.TrafficClass, with GRO (the segments of a coalesced datagram) and
// without, on specific, wildcard and dual-stack binds; a plain socket
// with IP_RECVTOS / IPV6_RECVTCLASS sees it in the real IP header.
func TestECNSend(t *testing.T) {
	t.Parallel()
	for _, path := range ecnPaths {
		for _, o := range []struct {
			name     string
			gso, gro bool
		}{offloads[0], offloads[3]} {
			for _, ecn := range []bool{true, false} {
				name := path.name + "/" + o.name + map[bool]string{true: "/ecn", false: "/no ecn"}[ecn]
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					want := uint8(0)
					if ecn {
						want = 2
					}
					a := open(t, udp.Config{Addr: path.from, GSO: o.gso, ECN: ecn})
					require.Equal(t, ecn, a.Info().ECN)
					al, err := a.LocalAddr()
					require.NoError(t, err)
					src := srcFor(path.from, path.dst)

					// To a link: five equal packets, one GSO super-packet,
					// coalesced again by GRO on loopback, and an ACK.
					b := open(t, udp.Config{Addr: path.to, GRO: o.gro})
					require.False(t, b.Info().ECN)
					bl, err := b.LocalAddr()
					require.NoError(t, err)
					n := wire.Net{Src: src, SrcPort: al.SrcPort, Dst: path.dst, DstPort: bl.SrcPort, DontFragment: true}
					var pkts []link.Packet
					for i := range 5 {
						pkts = append(pkts, sized(&n, 1, i, 1000))
					}
					pkts = append(pkts, packet(&n, 1, 5, -1))
					require.NoError(t, a.Send(pkts))
					for i, g := range receive(t, b, len(pkts), 4) {
						require.Equal(t, i, g.psn)
						require.Equal(t, path.dst, g.net.Dst)
						require.Equal(t, want, g.net.TrafficClass, "packet %d", i)
						// The hop limit it arrived with (loopback does not
						// decrement it; Linux's default is 64).
						require.Equal(t, uint8(64), g.net.HopLimit, "packet %d", i)
					}

					// To a plain socket: the real header.
					c := plainSocket(t, netip.AddrPortFrom(path.dst, 0), 0)
					cl := c.LocalAddr().(*net.UDPAddr).AddrPort()
					n.Dst, n.DstPort = cl.Addr(), cl.Port()
					pkts = pkts[:0]
					for i := range 3 {
						pkts = append(pkts, sized(&n, 1, i, 1000))
					}
					require.NoError(t, a.Send(pkts))
					for range pkts {
						size, tc := readTC(t, c)
						require.Equal(t, 1000, size)
						require.Equal(t, want, tc)
					}
					require.Zero(t, a.Stats().TxDropped)
				})
			}
		}
	}
}

// TestECNReceive: a datagram that arrives with CE (and DSCP 46: traffic
// class 0xbb), sent by a plain socket, is reported with that traffic class
// by a link without ECN, on every kind of bind, with GRO and without; and
// a Not-ECT one with 0.
func TestECNReceive(t *testing.T) {
	t.Parallel()
	for _, path := range ecnPaths {
		if path.from.Addr().IsUnspecified() {
			continue // the sender is a plain socket
		}
		for _, gro := range []bool{false, true} {
			for _, tc := range []uint8{0xbb, 0} {
				name := path.name + map[bool]string{false: "", true: "/gro"}[gro] + map[uint8]string{0xbb: "/ce", 0: "/not-ect"}[tc]
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					c := plainSocket(t, path.from, int(tc))
					cl := c.LocalAddr().(*net.UDPAddr).AddrPort()
					b := open(t, udp.Config{Addr: path.to, GRO: gro})
					bl, err := b.LocalAddr()
					require.NoError(t, err)
					// The ICRC is computed for the fields the link reports.
					n := wire.Net{Src: cl.Addr(), SrcPort: cl.Port(), Dst: path.dst, DstPort: bl.SrcPort, DontFragment: true}
					to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(path.dst, bl.SrcPort))
					for i := range 3 {
						_, err := c.WriteToUDP(packet(&n, 2, i, 100*i).Buf, to)
						require.NoError(t, err)
					}
					for i, g := range receive(t, b, 3, 2) {
						require.Equal(t, i, g.psn)
						require.Equal(t, path.dst, g.net.Dst)
						require.Equal(t, tc, g.net.TrafficClass, "packet %d", i)
					}
				})
			}
		}
	}
}
