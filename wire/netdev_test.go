package wire_test

import (
	"net/netip"
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// TestNetdevPathMTU: rxe_set_mtu's rule, netdev MTU less 80 rounded down
// to an InfiniBand MTU, 256 at the least.
func TestNetdevPathMTU(t *testing.T) {
	for ifMTU, want := range map[int]int{
		1500: 1024, 9000: 4096, 65536: 4096, 1104: 1024, 1103: 512,
		4176: 4096, 4175: 2048, 2128: 2048, 2127: 1024, 576: 256, 68: 256, 0: 256,
	} {
		require.Equal(t, want, wire.NetdevPathMTU(ifMTU), "interface MTU %d", ifMTU)
	}
}

// TestGUIDFromMAC: the rxe guest of the captures (ibv_devinfo -v in
// /work/shared/rxe/captures): MAC 52:54:00:77:00:02, node_guid
// 5054:00ff:fe77:0002, GID[0] fe80::5054:ff:fe77:2.
func TestGUIDFromMAC(t *testing.T) {
	guid := wire.GUIDFromMAC([6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x02})
	require.Equal(t, uint64(0x505400fffe770002), guid)
	require.Equal(t, netip.MustParseAddr("fe80::5054:ff:fe77:2"), wire.LinkLocalFromGUID(guid))
	// The universal/local bit is flipped both ways.
	require.Equal(t, uint64(0x0200_00ff_fe00_0001), wire.GUIDFromMAC([6]byte{0, 0, 0, 0, 0, 1}))
}

func TestMACFromAddr(t *testing.T) {
	require.Equal(t, [6]byte{0x02, 0, 10, 77, 101, 10}, wire.MACFromAddr(netip.MustParseAddr("10.77.101.10")))
	require.Equal(t, [6]byte{0x02, 0, 0xbe, 0xef, 0, 0x10}, wire.MACFromAddr(netip.MustParseAddr("fd77::beef:10")))
}
