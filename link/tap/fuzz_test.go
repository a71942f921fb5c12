package tap_test

import (
	"net/netip"
	"testing"

	"github.com/google/gopacket/layers"
	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/wire"
)

// FuzzHostReceive feeds frames to a host that has packets waiting for two
// neighbours. Receive must not panic, and every frame must have exactly
// one outcome, counted once: delivered (a RoCEv2 packet whose ICRC
// checks), answered (exactly one answer, which gopacket decodes and
// re-encodes to the same bytes), learned, or dropped for one reason; the
// only other frames emitted are waiting RoCEv2 packets, valid ones, set
// free by what the frame taught the host.
func FuzzHostReceive(f *testing.F) {
	n4, n6 := netFromPeer(false), netFromPeer(true)
	for _, s := range [][]byte{
		arpFrame(f, bcastMAC, layers.ARPRequest, peerMAC, peer4, [6]byte{}, host4),
		arpFrame(f, hostMAC, layers.ARPReply, peerMAC, peer4, hostMAC, host4),
		arpFrame(f, bcastMAC, layers.ARPRequest, otherMAC, peer4, [6]byte{}, peer4),
		nsFrame(f, peerLL, host6),
		nsFrame(f, peer6, hostLL),
		nsFrame(f, netip.IPv6Unspecified(), host6),
		naFrame(f, hostMAC, peer6, host6, peer6, 0x60, peerMAC),
		naFrame(f, bcastMAC, peer6, allNodes, peer6, 0x20, otherMAC),
		echo4Frame(f, host4, 1, 2, []byte("ping")),
		echo6Frame(f, host6, 1, 2, []byte("ping6")),
		roceFrame(f, n4, ibPacket(&n4, 1, 40), false),
		roceFrame(f, n6, ibPacket(&n6, 1, 40), true),
		{},
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		h, out := newHost(t, tap.Config{NeighbourCache: 4, QueuePerNeighbour: 2, QueueTotal: 3})
		sendTo(h, t0, peer4, 1, 8)
		sendTo(h, t0, peer6, 2, 8)
		sendTo(h, t0, peer6, 3, 8)
		out.take()
		before := h.Stats()
		var p link.Packet
		o, r := h.Receive(t0, frame, &p)
		s := h.Stats()
		requireCounted(t, s)
		require.Equal(t, before.RxFrames+1, s.RxFrames)
		moved := map[tap.Outcome]uint64{
			tap.Delivered: s.RxDelivered - before.RxDelivered,
			tap.Answered:  s.Answered() - before.Answered(),
			tap.Learned:   s.RxLearned - before.RxLearned,
			tap.Dropped:   s.Dropped() - before.Dropped(),
		}
		for k, v := range moved {
			if k == o {
				require.Equal(t, uint64(1), v, "%v", k)
			} else {
				require.Zero(t, v, "%v moved for a frame %v", k, o)
			}
		}
		if o == tap.Dropped {
			require.NotEqual(t, tap.DropNone, r)
			require.Equal(t, before.RxDropped[r]+1, s.RxDropped[r])
		} else {
			require.Equal(t, tap.DropNone, r)
		}

		frames := out.take()
		if o == tap.Answered {
			require.NotEmpty(t, frames)
			requireIsomorphic(t, frames[len(frames)-1])
			frames = frames[:len(frames)-1]
		}
		require.Equal(t, s.TxPackets-before.TxPackets, uint64(len(frames)), "frames emitted besides the answer are waiting packets")
		for _, e := range frames {
			var wp wire.Packet
			require.Equal(t, wire.DropNone, wire.Parse(e[14:], &wp))
		}
		if o == tap.Delivered {
			var wp wire.Packet
			require.Equal(t, wire.DropNone, wire.ParseTransport(p.Buf, &wp))
			require.True(t, wire.CheckICRC(&p.Net, p.Buf))
			require.Equal(t, uint64(len(p.Buf)), s.RxBytes-before.RxBytes)
		}
	})
}
