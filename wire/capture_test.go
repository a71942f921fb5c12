package wire_test

import (
	"bytes"
	"testing"

	"github.com/softhca/softhca/internal/testcaps"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// TestCapturesRoundTrip walks every frame of every rxe capture: it must
// parse, its ICRC must verify, and encoding the parsed fields again must
// give back the same bytes from the IP header to the ICRC. Then the same
// packet is verified as a UDP socket would deliver it, with the IPv4
// Identification hidden, and the recovered ID must be the real one.
func TestCapturesRoundTrip(t *testing.T) {
	caps, err := testcaps.Load()
	require.NoError(t, err)
	seen := map[wire.OpCode]int{}
	total := 0
	for _, c := range caps {
		t.Run(c.Name, func(t *testing.T) {
			require.NotEmpty(t, c.Frames)
			for _, f := range c.Frames {
				ip := f.IP()
				require.NotNil(t, ip, "frame %d is not IP", f.Index)
				var p wire.Packet
				r := wire.Parse(ip, &p)
				require.Equal(t, wire.DropNone, r, "frame %d: %s", f.Index, r)
				seen[p.BTH.OpCode()]++
				total++

				// Re-encode from the parsed fields.
				h := p.Headers()
				require.NoError(t, h.Validate(len(p.Payload)))
				out := wire.AppendFrame(nil, &p.Net, &h, p.Payload)
				ipLen := len(out)
				require.True(t, bytes.Equal(ip[:ipLen], out),
					"frame %d (%s): re-encoding differs\n got %x\nwant %x", f.Index, p.BTH.OpCode(), out, ip[:ipLen])

				// As a UDP socket sees it: no IP header, so no ID.
				n := p.Net
				n.ID = 0
				var q wire.Packet
				r = wire.ParseDatagram(p.Raw, &n, &q)
				require.Equal(t, wire.DropNone, r, "frame %d as datagram: %s", f.Index, r)
				require.Equal(t, p.Net.ID, q.Net.ID, "frame %d: recovered IPv4 ID", f.Index)
				require.NotZero(t, p.Net.ID, "rxe sends non-zero IDs; a zero ID would make the solve trivial")
			}
		})
	}
	// The captures cover every opcode family the issue lists.
	for _, op := range []wire.OpCode{
		wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendLastWithImmediate,
		wire.RCSendOnlyWithImmediate, wire.RCRDMAWriteFirst, wire.RCRDMAWriteMiddle,
		wire.RCRDMAWriteLast, wire.RCRDMAWriteLastWithImm,
		wire.RCRDMAWriteOnly, wire.RCRDMAWriteOnlyWithImm, wire.RCRDMAReadRequest,
		wire.RCRDMAReadResponseFirst, wire.RCRDMAReadResponseLast, wire.RCRDMAReadResponseOnly,
		wire.RCAcknowledge, wire.RCAtomicAcknowledge, wire.RCFetchAdd,
		wire.UCSendFirst, wire.UCSendLast, wire.UDSendOnly,
	} {
		require.NotZero(t, seen[op], "no %s packet in the captures", op)
	}
	t.Logf("%d packets, %d opcodes", total, len(seen))
}
