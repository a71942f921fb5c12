package udp

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/wire"
)

// TestIDDelta: the correction for IP ID k is exactly the difference
// between the ICRCs wire computes for ID k and for ID 0.
func TestIDDelta(t *testing.T) {
	t.Parallel()
	var d idDeltas
	for _, payload := range []int{0, 4, 100, 1084, 4096, 8000} {
		n := wire.Net{
			Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
			SrcPort: 0xc123, DstPort: wire.RoCEv2Port, DontFragment: true,
		}
		h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x11, PSN: 7}}
		pl := make([]byte, payload)
		for i := range pl {
			pl[i] = byte(i * 13)
		}
		base := wire.AppendPacket(nil, &n, &h, pl)
		for k := range 64 {
			n.ID = uint16(k)
			pk := wire.AppendPacket(nil, &n, &h, pl)
			want := wire.StoredICRC(pk) ^ wire.StoredICRC(base)
			require.Equal(t, want, d.delta(len(base), k), "payload %d id %d", payload, k)
		}
	}
}
