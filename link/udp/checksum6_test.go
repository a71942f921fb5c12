package udp_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/link/udp"
)

// RoCEv2 senders (rxe, link/tap) send IPv6 datagrams with UDP checksum 0,
// which Linux drops on a socket that does not set UDP_NO_CHECK6_RX. The
// link must receive them. A raw socket sends one with checksum 0, then an
// ordinary socket one with a checksum: the link must get both, in that
// order (loopback keeps it).
func TestIPv6ZeroChecksumReceived(t *testing.T) {
	raw, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("a raw IPv6 socket needs CAP_NET_RAW, which CI has: %v", err)
		}
		t.Skipf("needs CAP_NET_RAW (root) for a raw IPv6 socket: %v", err)
	}
	defer unix.Close(raw)
	l := open(t, udp.Config{Addr: netip.MustParseAddrPort("[::1]:0")})
	local, err := l.LocalAddr()
	require.NoError(t, err)

	zero := []byte("zero UDP checksum")
	dgram := make([]byte, 8+len(zero))
	binary.BigEndian.PutUint16(dgram[0:], 49152)
	binary.BigEndian.PutUint16(dgram[2:], local.SrcPort)
	binary.BigEndian.PutUint16(dgram[4:], uint16(len(dgram)))
	// dgram[6:8], the checksum, stays 0.
	copy(dgram[8:], zero)
	require.NoError(t, unix.Sendto(raw, dgram, 0, &unix.SockaddrInet6{Addr: netip.IPv6Loopback().As16()}))

	c, err := net.DialUDP("udp6", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.IPv6Loopback(), local.SrcPort)))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("with checksum"))
	require.NoError(t, err)

	pkts := recvBufs(1)
	n, err := l.Recv(pkts)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, string(zero), string(pkts[0].Buf), "the datagram with checksum 0 is received first")
}
