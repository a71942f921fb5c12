package wire_test

import (
	"fmt"
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// TestZeroAllocs: the per-packet paths allocate nothing (style §3.6).
func TestZeroAllocs(t *testing.T) {
	r := newRand(40)
	for _, v6 := range []bool{false, true} {
		tp := randPacket(r, wire.RCRDMAWriteFirst, v6, 0)
		for len(tp.payload) < 1000 {
			tp = randPacket(r, wire.RCRDMAWriteFirst, v6, 4096)
		}
		frame := tp.frame()
		var p wire.Packet
		n := tp.net
		// Warm the ID decoder cache for this length.
		require.Equal(t, wire.DropNone, wire.ParseDatagram(tp.ib, &n, &p))
		buf := make([]byte, len(tp.ib))
		var fl wire.ICRCFlow // holds the flow after its first call
		hl := tp.hdr.Len()

		for _, tc := range []struct {
			name string
			f    func()
		}{
			{"Parse", func() {
				if wire.Parse(frame, &p) != wire.DropNone {
					panic("parse")
				}
			}},
			{"ParseDatagram", func() {
				if wire.ParseDatagram(tp.ib, &n, &p) != wire.DropNone {
					panic("parse")
				}
			}},
			{"ParseTransport", func() {
				if wire.ParseTransport(tp.ib, &p) != wire.DropNone {
					panic("parse")
				}
			}},
			{"Encode+Seal", func() {
				hl := tp.hdr.Encode(buf, len(tp.payload))
				copy(buf[hl:], tp.payload)
				wire.Seal(&n, buf)
			}},
			{"ICRC", func() { wire.ICRC(&n, tp.ib[:len(tp.ib)-4]) }},
			{"CheckICRC", func() { wire.CheckICRC(&n, tp.ib) }},
			{"SolveIPv4ID", func() { wire.SolveIPv4ID(&n, tp.ib) }},
			{"ParseDatagramFlow", func() {
				if wire.ParseDatagramFlow(tp.ib, &n, &p, &fl) != wire.DropNone {
					panic("parse")
				}
			}},
			{"ICRCFlow.Seal", func() {
				hl := tp.hdr.Encode(buf, len(tp.payload))
				copy(buf[hl:], tp.payload)
				fl.Seal(&n, buf)
			}},
			{"ICRCFlow.ICRC", func() { fl.ICRC(&n, tp.ib[:len(tp.ib)-4]) }},
			{"ICRCFlow.ICRCGather", func() { fl.ICRCGather(&n, tp.ib[:hl], tp.payload, 0) }},
			{"ICRCFlow.SolveIPv4ID", func() { fl.SolveIPv4ID(&n, tp.ib) }},
			{"AppendPacket with room", func() { wire.AppendPacket(buf[:0], &n, &tp.hdr, tp.payload) }},
			{"Headers", func() { _ = p.Headers() }},
		} {
			t.Run(fmt.Sprintf("%s/v6=%v", tc.name, v6), func(t *testing.T) {
				require.Zero(t, testing.AllocsPerRun(100, tc.f))
			})
		}
		require.Equal(t, tp.ib, buf)
	}
}
