package udp_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/wire"
)

var (
	lo4 = netip.MustParseAddrPort("127.0.0.1:0")
	lo6 = netip.MustParseAddrPort("[::1]:0")
)

// offloads are the GSO/GRO combinations the tests run with.
var offloads = []struct {
	name     string
	gso, gro bool
}{
	{"plain", false, false},
	{"gso", true, false},
	{"gro", false, true},
	{"gso+gro", true, true},
}

// watchdog is how long a test may wait for packets before it closes the
// receiving link, turning a lost packet into a failure instead of a hang.
// It bounds a wait; no assertion depends on it.
const watchdog = 15 * time.Second

func open(t testing.TB, cfg udp.Config) *udp.Link {
	t.Helper()
	l, err := udp.Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

// netFor returns the IP/UDP fields of packets from one link to another,
// both bound to specific addresses: what the ICRC is computed with.
func netFor(t testing.TB, from, to *udp.Link) wire.Net {
	t.Helper()
	s, err := from.LocalAddr()
	require.NoError(t, err)
	d, err := to.LocalAddr()
	require.NoError(t, err)
	return wire.Net{Src: s.Src, SrcPort: s.SrcPort, Dst: d.Src, DstPort: d.SrcPort, DontFragment: true}
}

// payloadByte is the content of byte i of the payload of packet psn.
func payloadByte(qp uint32, psn, i int) byte { return byte(int(qp)*31 + psn*7 + i) }

// packet builds a real RoCEv2 packet (ICRC included) for n: an RC SEND
// ONLY with the given payload size, or an ACK when payload < 0.
func packet(n *wire.Net, qp uint32, psn, payload int) link.Packet {
	h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff, DestQP: qp, PSN: wire.PSN(psn)}}
	var pl []byte
	if payload < 0 {
		h.BTH.OpCode = wire.RCAcknowledge
		h.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(0x1f), MSN: uint32(psn)}
	} else {
		pl = make([]byte, payload)
		for i := range pl {
			pl[i] = payloadByte(qp, psn, i)
		}
	}
	return link.Packet{Buf: wire.AppendPacket(nil, n, &h, pl), Net: *n}
}

// sized returns a packet whose whole InfiniBand packet (BTH through ICRC)
// is size bytes: a SEND ONLY with size-16 bytes of payload.
func sized(n *wire.Net, qp uint32, psn, size int) link.Packet {
	return packet(n, qp, psn, size-wire.BTHSize-wire.ICRCSize)
}

// payloadApart returns p (a SEND ONLY) as a link.Gatherer caller hands it
// over: its headers (the BTH) and its ICRC in Buf, its payload apart.
func payloadApart(p link.Packet) link.Packet {
	body := len(p.Buf) - wire.ICRCSize
	return link.Packet{Buf: append(bytes.Clone(p.Buf[:wire.BTHSize]), p.Buf[body:]...), Net: p.Net,
		Payload: bytes.Clone(p.Buf[wire.BTHSize:body]), PayloadAt: wire.BTHSize}
}

// got is one received and parsed packet.
type got struct {
	net     wire.Net // as Recv filled it
	id      uint16   // the IPv4 ID the ICRC was computed with
	qp      uint32
	psn     int
	op      wire.OpCode
	size    int
	payload []byte
}

func recvBufs(n int) []link.Packet {
	pkts := make([]link.Packet, n)
	for i := range pkts {
		pkts[i].Buf = make([]byte, link.MaxPacketSize)
	}
	return pkts
}

// receive reads n packets from l with batches of batch packets, checks
// that each parses with a good ICRC, and returns them in arrival order.
func receive(t testing.TB, l *udp.Link, n, batch int) []got {
	t.Helper()
	guard := time.AfterFunc(watchdog, func() { l.Close() })
	defer guard.Stop()
	pkts := recvBufs(batch)
	var out []got
	var p wire.Packet
	for len(out) < n {
		k, err := l.Recv(pkts)
		require.NoError(t, err, "after %d of %d packets", len(out), n)
		require.Positive(t, k)
		for i := range k {
			lp := &pkts[i]
			require.LessOrEqual(t, len(lp.Buf), link.MaxPacketSize)
			nn := lp.Net
			require.Equal(t, wire.DropNone, wire.ParseDatagram(lp.Buf, &nn, &p), "packet %d: %+v", len(out), lp.Net)
			out = append(out, got{
				net: lp.Net, id: p.Net.ID, qp: p.BTH.DestQP(), psn: int(p.BTH.PSN()),
				op: p.BTH.OpCode(), size: len(lp.Buf), payload: append([]byte(nil), p.Payload...),
			})
		}
	}
	require.Len(t, out, n, "more packets than sent")
	return out
}

// checkPayload checks a SEND ONLY's payload content.
func checkPayload(t testing.TB, g got) {
	t.Helper()
	if g.op != wire.RCSendOnly {
		return
	}
	for i, b := range g.payload {
		if b != payloadByte(g.qp, g.psn, i) {
			require.Failf(t, "payload corrupt", "qp %d psn %d byte %d", g.qp, g.psn, i)
		}
	}
}

func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }
