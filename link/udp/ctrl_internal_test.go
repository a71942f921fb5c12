package udp

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestCtrlSize: a message's control space holds the most the kernel sends
// with one datagram and the most Send passes.
func TestCtrlSize(t *testing.T) {
	pktinfo6 := unix.CmsgSpace(unix.SizeofInet6Pktinfo)
	require.Greater(t, pktinfo6, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
	// An IPv6 datagram: UDP_GRO, IPV6_PKTINFO, IPV6_TCLASS,
	// IPV6_HOPLIMIT (ints).
	v6 := unix.CmsgSpace(4) + pktinfo6 + unix.CmsgSpace(4) + unix.CmsgSpace(4)
	// An IPv4 datagram on a dual-stack socket: UDP_GRO, IPV6_PKTINFO (a
	// mapped address), IP_TOS (a byte), IP_TTL (an int).
	dual4 := unix.CmsgSpace(4) + pktinfo6 + unix.CmsgSpace(1) + unix.CmsgSpace(4)
	// An IPv4 datagram on an IPv4 socket: UDP_GRO, IP_PKTINFO, IP_TOS,
	// IP_TTL.
	v4 := unix.CmsgSpace(4) + unix.CmsgSpace(unix.SizeofInet4Pktinfo) + unix.CmsgSpace(1) + unix.CmsgSpace(4)
	// Send: UDP_SEGMENT (a u16) and a PKTINFO.
	send := unix.CmsgSpace(2) + pktinfo6
	require.GreaterOrEqual(t, ctrlSize, max(v6, dual4, v4, send))
}
