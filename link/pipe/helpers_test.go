package pipe_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// pair returns a new pipe's endpoints, closed when the test ends.
func pair(t *testing.T, cfg pipe.Config) (a, b *pipe.Endpoint) {
	t.Helper()
	a, b = pipe.New(cfg)
	t.Cleanup(func() {
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	})
	return a, b
}

// netFrom returns the Net a packet from src shows at dst, written out from
// the addresses (as a UDP socket reports them), not from the pipe.
func netFrom(t *testing.T, src, dst *pipe.Endpoint) wire.Net {
	t.Helper()
	s, err := src.LocalAddr()
	require.NoError(t, err)
	d, err := dst.LocalAddr()
	require.NoError(t, err)
	return wire.Net{Src: s.Src, SrcPort: s.SrcPort, Dst: d.Src, DstPort: d.SrcPort, DontFragment: true}
}

// packet builds a valid RC SEND Only whose PSN is i (its index in a test),
// with a payload of 0..199 bytes that depends on i, sealed for n.
func packet(n *wire.Net, i int) []byte {
	payload := make([]byte, i*37%200)
	for k := range payload {
		payload[k] = byte(i + 7*k)
	}
	h := wire.Headers{BTH: wire.BTHFields{
		OpCode: wire.RCSendOnly,
		DestQP: 0x123,
		PSN:    wire.PSN(uint32(i) & wire.PSNMask),
	}}
	return wire.AppendPacket(nil, n, &h, payload)
}

// ack builds a valid RC Acknowledge for PSN i, sealed for n.
func ack(n *wire.Net, i int) []byte {
	h := wire.Headers{
		BTH:  wire.BTHFields{OpCode: wire.RCAcknowledge, DestQP: 0x456, PSN: wire.PSN(i)},
		AETH: wire.AETHFields{MSN: uint32(i)},
	}
	return wire.AppendPacket(nil, n, &h, nil)
}

// index returns the index packet stored in b's PSN.
func index(b []byte) int { return int(wire.BTH(b).PSN()) }

// sendEach sends the packets one Send call each.
func sendEach(t *testing.T, e *pipe.Endpoint, pkts ...[]byte) {
	t.Helper()
	for _, p := range pkts {
		require.NoError(t, e.Send([]link.Packet{{Buf: p}}))
	}
}

// sendN sends packet(n, i) for i in [from, to), in calls of 1 to 7
// packets.
func sendN(t *testing.T, e *pipe.Endpoint, n *wire.Net, from, to int) {
	t.Helper()
	batch := make([]link.Packet, 0, 7)
	for i := from; i < to; {
		batch = batch[:0]
		for k := 0; k < 1+i%7 && i < to; k++ {
			batch = append(batch, link.Packet{Buf: packet(n, i)})
			i++
		}
		require.NoError(t, e.Send(batch))
	}
}

// bufs returns k receive slots with full-size buffers.
func bufs(k int) []link.Packet {
	p := make([]link.Packet, k)
	for i := range p {
		p[i].Buf = make([]byte, 0, link.MaxPacketSize)
	}
	return p
}

// drain receives with TryRecv until nothing is receivable and returns
// copies of the packets.
func drain(t *testing.T, e *pipe.Endpoint) [][]byte {
	t.Helper()
	var got [][]byte
	for _, p := range drainNet(t, e) {
		got = append(got, p.Buf)
	}
	return got
}

// drainNet is drain with each packet's Net.
func drainNet(t *testing.T, e *pipe.Endpoint) []link.Packet {
	t.Helper()
	slots := bufs(16)
	var got []link.Packet
	for {
		n, err := e.TryRecv(slots)
		require.NoError(t, err)
		if n == 0 {
			return got
		}
		for _, p := range slots[:n] {
			got = append(got, link.Packet{Buf: bytes.Clone(p.Buf), Net: p.Net})
		}
	}
}

// recvN receives exactly n packets with the blocking Recv.
func recvN(t *testing.T, e *pipe.Endpoint, n int) [][]byte {
	t.Helper()
	slots := bufs(16)
	var got [][]byte
	for len(got) < n {
		k, err := e.Recv(slots[:min(len(slots), n-len(got))])
		require.NoError(t, err)
		require.Positive(t, k)
		for _, p := range slots[:k] {
			got = append(got, bytes.Clone(p.Buf))
		}
	}
	return got
}

// indices returns the index of every packet.
func indices(pkts [][]byte) []int {
	out := make([]int, len(pkts))
	for i, p := range pkts {
		out[i] = index(p)
	}
	return out
}

// seq returns from, from+1, ..., to-1.
func seq(from, to int) []int {
	s := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// txPart and rxPart split an endpoint's counters by side.
func txPart(s link.Stats) link.Stats {
	s.RxPackets, s.RxBytes, s.RxTruncated = 0, 0, 0
	return s
}

func rxPart(s link.Stats) link.Stats {
	return link.Stats{RxPackets: s.RxPackets, RxBytes: s.RxBytes, RxTruncated: s.RxTruncated}
}

// time0 starts the fake clocks; ms is a delay.
var time0 = time.Unix(1_000_000, 0)

const ms = time.Millisecond
