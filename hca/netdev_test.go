package hca_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
)

func TestNetdevActiveMTU(t *testing.T) {
	for ifMTU, want := range map[int]verbs.MTU{
		1500: verbs.MTU1024, 9000: verbs.MTU4096, 65536: verbs.MTU4096,
		1104: verbs.MTU1024, 1103: verbs.MTU512, 4176: verbs.MTU4096, 4175: verbs.MTU2048,
		576: verbs.MTU256, 68: verbs.MTU256,
	} {
		require.Equal(t, want, hca.NetdevActiveMTU(ifMTU), "interface MTU %d", ifMTU)
	}
	require.Equal(t, verbs.MTU4096, hca.ActiveMTUFor(netip.MustParseAddr("127.0.0.1")), "loopback")
	require.Equal(t, verbs.MTU4096, hca.ActiveMTUFor(netip.MustParseAddr("127.0.0.2")), "loopback network")
	require.Equal(t, verbs.MTU1024, hca.ActiveMTUFor(netip.MustParseAddr("192.0.2.77")), "no interface: rxe's usual 1024")
}
