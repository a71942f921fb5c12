package testbench

// Tests of the testbench itself (not of the DUT).

import (
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// parseAsDUT parses an injected datagram the way the DUT does.
func parseAsDUT(pkt []byte, n wire.Net) wire.DropReason {
	var p wire.Packet
	n.ID = 0
	n.DontFragment = true
	return wire.ParseDatagram(pkt, &n, &p)
}

func TestBuildAndFaults(t *testing.T) {
	tb := &Testbench{Cfg: Config{DUT: DefaultDUTAddr, Peer: DefaultPeerAddr, PeerPort: DefaultPeerPort}}
	base := tb.PeerNet()
	p := Pkt{Op: wire.RCSendOnly, PSN: psnp(7), DestQP: P(uint32(0x11)), AckReq: true, Payload: []byte("12345")}
	for _, tc := range []struct {
		name   string
		faults []Fault
		want   wire.DropReason
	}{
		{"Valid", nil, wire.DropNone},
		{"BadICRC", []Fault{BadICRC()}, wire.DropBadICRC},
		{"PadCount0", []Fault{PadCount(0)}, wire.DropBadPad},
		{"PadCount3", []Fault{PadCount(3)}, wire.DropNone},
		{"Truncate1", []Fault{Truncate(1)}, wire.DropBadPad},
		{"Truncate4", []Fault{Truncate(4)}, wire.DropBadICRC},
		{"TruncateHeaders", []Fault{Truncate(10)}, wire.DropTruncated},
		{"From", []Fault{From(DefaultOtherAddr)}, wire.DropNone},
		{"EditIsCoveredByICRC", []Fault{Edit(func(b []byte) { b[1] |= 0x80 })}, wire.DropNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkt, n := build(&p, base, tc.faults)
			require.Equal(t, tc.want.String(), parseAsDUT(pkt, n).String())
		})
	}
	pkt, n := build(&p, base, []Fault{From(DefaultOtherAddr)})
	require.Equal(t, DefaultOtherAddr, n.Src)
	// The ICRC covers the source address: with the usual one it fails.
	require.Equal(t, wire.DropBadICRC.String(), parseAsDUT(pkt, base).String())
}

func TestMatch(t *testing.T) {
	h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAcknowledge, PKey: 0xffff, DestQP: 5, PSN: 9},
		AETH: wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKInvalidRequest), MSN: 3}}
	n := wire.Net{Src: DefaultDUTAddr, Dst: DefaultPeerAddr, DontFragment: true}
	pk, err := parseCaptured(Captured{Buf: wire.AppendPacket(nil, &n, &h, nil), Net: n})
	require.NoError(t, err)
	m := NAK(wire.NAKInvalidRequest, 9).WithMSN(3)
	m.DestQP = P(uint32(5))
	require.Empty(t, m.mismatches(pk))
	for _, tc := range []struct {
		m   Match
		bad int
	}{
		{ACK(9), 1},
		{NAK(wire.NAKRemoteAccessError, 8).WithMSN(1), 3},
		{Match{Payload: []byte{}}, 0},
		{Match{Payload: []byte{1}}, 1},
		{Op(wire.RCAcknowledge), 0},
	} {
		require.Len(t, tc.m.mismatches(pk), tc.bad, "%+v", tc.m)
	}
}

func TestParseCapturedRejectsBadPackets(t *testing.T) {
	h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff}}
	n := wire.Net{Src: DefaultDUTAddr, Dst: DefaultPeerAddr, DontFragment: true}
	good := wire.AppendPacket(nil, &n, &h, []byte("abc"))
	_, err := parseCaptured(Captured{Buf: good, Net: n})
	require.NoError(t, err)
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 1
	_, err = parseCaptured(Captured{Buf: bad, Net: n})
	require.ErrorContains(t, err, "ICRC")
	pad := append([]byte(nil), good...)
	pad[len(pad)-5] = 1 // the pad byte
	wire.PutICRC(&n, pad)
	_, err = parseCaptured(Captured{Buf: pad, Net: n})
	require.ErrorContains(t, err, "pad")
}
