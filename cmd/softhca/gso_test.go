package main

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/wire"
)

// gsoLoopbackPcap was captured with dumpcap -i lo -f "udp port 4791"
// while "softhca pingpong rc -g 1" ran twice on 127.0.0.1 (server) and
// 127.0.0.2 (client) with the link's default GSO: once with -s 100 -n 2
// (frames 4 and 5 are a SEND and an ACK in one datagram), once with
// -s 600 -m 256 -n 1 (frames 7 and 8 are a message's three packets in
// one datagram). Before decode knew super-datagrams, it called those four
// frames ICRC mismatches.
var gsoLoopbackPcap = filepath.Join("testdata", "gso-loopback.pcap")

// TestDecodeGSOLoopbackCapture: decode splits the super-datagrams of a
// real loopback capture into their packets, each verified, one line each.
func TestDecodeGSOLoopbackCapture(t *testing.T) {
	code, stdout, stderr := runCmd(t, "decode", gsoLoopbackPcap)
	require.Empty(t, stderr)
	require.Equal(t, []string{
		"frame 1: 0.000000 127.0.0.2:4791 -> 127.0.0.1:4791: RC Send Only qp=0x11 psn=10438425 ackreq len=100 icrc ok",
		"frame 2: 0.001088 127.0.0.1:4791 -> 127.0.0.2:4791: RC Acknowledge qp=0x11 psn=10438425 aeth{ACK syn=0x1f msn=1} len=0 icrc ok",
		"frame 3: 0.001443 127.0.0.1:4791 -> 127.0.0.2:4791: RC Send Only qp=0x11 psn=8745029 ackreq len=100 icrc ok",
		"frame 4: 0.001502 127.0.0.2:4791 -> 127.0.0.1:4791: gso 1/2 RC Send Only qp=0x11 psn=10438426 ackreq len=100 icrc ok",
		"frame 4: 0.001502 127.0.0.2:4791 -> 127.0.0.1:4791: gso 2/2 RC Acknowledge qp=0x11 psn=8745029 aeth{ACK syn=0x1f msn=1} len=0 icrc ok",
		"frame 5: 0.001575 127.0.0.1:4791 -> 127.0.0.2:4791: gso 1/2 RC Send Only qp=0x11 psn=8745030 ackreq len=100 icrc ok",
		"frame 5: 0.001575 127.0.0.1:4791 -> 127.0.0.2:4791: gso 2/2 RC Acknowledge qp=0x11 psn=10438426 aeth{ACK syn=0x1f msn=2} len=0 icrc ok",
		"frame 6: 0.001627 127.0.0.2:4791 -> 127.0.0.1:4791: RC Acknowledge qp=0x11 psn=8745030 aeth{ACK syn=0x1f msn=2} len=0 icrc ok",
		"frame 7: 0.638136 127.0.0.2:4791 -> 127.0.0.1:4791: gso 1/3 RC Send First qp=0x11 psn=2716536 len=256 icrc ok",
		"frame 7: 0.638136 127.0.0.2:4791 -> 127.0.0.1:4791: gso 2/3 RC Send Middle qp=0x11 psn=2716537 len=256 icrc ok",
		"frame 7: 0.638136 127.0.0.2:4791 -> 127.0.0.1:4791: gso 3/3 RC Send Last qp=0x11 psn=2716538 ackreq len=88 icrc ok",
		"frame 8: 0.639413 127.0.0.1:4791 -> 127.0.0.2:4791: gso 1/3 RC Send First qp=0x11 psn=11163206 len=256 icrc ok",
		"frame 8: 0.639413 127.0.0.1:4791 -> 127.0.0.2:4791: gso 2/3 RC Send Middle qp=0x11 psn=11163207 len=256 icrc ok",
		"frame 8: 0.639413 127.0.0.1:4791 -> 127.0.0.2:4791: gso 3/3 RC Send Last qp=0x11 psn=11163208 ackreq len=88 icrc ok",
		"frame 9: 0.639498 127.0.0.2:4791 -> 127.0.0.1:4791: RC Acknowledge qp=0x11 psn=11163208 aeth{ACK syn=0x1f msn=1} len=0 icrc ok",
		"frame 10: 0.639510 127.0.0.1:4791 -> 127.0.0.2:4791: RC Acknowledge qp=0x11 psn=2716538 aeth{ACK syn=0x1f msn=1} len=0 icrc ok",
		gsoLoopbackPcap + ": 10 packets, 10 RoCEv2 (4 GSO super-datagrams of 10 packets), 16 ok, 0 bad, 0 not RoCEv2",
	}, lines(stdout))
	require.Equal(t, exitOK, code)

	// -v shows each segment's own IP Identification: the kernel numbers
	// them 0, 1, ... and link/udp computed each ICRC for it.
	code, stdout, _ = runCmd(t, "decode", "-v", gsoLoopbackPcap)
	require.Equal(t, exitOK, code)
	ls := lines(stdout)
	require.Contains(t, ls[3], " gso 1/2 RC Send Only ")
	require.Contains(t, ls[3], " ip{id=0x0000 tos=0x02 ttl=64 df} icrc ok (0x")
	require.Contains(t, ls[4], " gso 2/2 RC Acknowledge ")
	require.Contains(t, ls[4], " ip{id=0x0001 tos=0x02 ttl=64 df} icrc ok (0x")
}

// gsoDatagram builds an Ethernet frame holding a GSO super-datagram as a
// loopback capture shows it: the packets back to back in one UDP
// datagram with n's headers, packet k's ICRC computed for IPv4
// Identification n.ID+k.
func gsoDatagram(n wire.Net, pkts []gsoPkt) []byte {
	n.DstPort = wire.RoCEv2Port
	n.HopLimit = 64
	n.DontFragment = !n.IsIPv6()
	var ib []byte
	for k, p := range pkts {
		nk := n
		nk.ID = n.ID + uint16(k)
		h := wire.Headers{BTH: wire.BTHFields{OpCode: p.op, PKey: 0xffff, DestQP: 0x11, PSN: wire.PSN(100 + k)}}
		if p.op.Info().Headers&wire.HasAETH != 0 {
			h.AETH = wire.AETHFields{Syndrome: wire.ACKSyndrome(0x1f), MSN: 1}
		}
		ib = wire.AppendPacket(ib, &nk, &h, p.payload)
	}
	b := make([]byte, n.IPHeaderSize()+wire.UDPHeaderSize+len(ib))
	k := wire.EncodeIPUDP(b, &n, len(ib))
	copy(b[k:], ib)
	et := uint16(etherTypeIPv4)
	if n.IsIPv6() {
		et = etherTypeIPv6
	}
	return ether(et, b)
}

type gsoPkt struct {
	op      wire.OpCode
	payload []byte
}

// TestDecodeGSOSynthetic: super-datagrams over IPv4 (with an
// Identification other than 0) and IPv6, payloads of zeros (which look
// like BTHs everywhere), a run with a shorter last packet, a run of 64
// packets of 1 KiB; a segment with a flipped bit is reported bad on its
// own, and a datagram that holds no run of packets stays one bad packet.
func TestDecodeGSOSynthetic(t *testing.T) {
	n4 := wire.Net{Src: testSrc4, Dst: testDst4, SrcPort: 0xc001, ID: 0x1234}
	n6 := wire.Net{Src: testSrc6, Dst: testDst6, SrcPort: 0xc002}
	zeros := make([]byte, 1024)
	random := make([]byte, 1000)
	for i := range random {
		random[i] = byte(rand.Uint32())
	}
	// Packets of one length, the last possibly shorter: a SEND's three
	// packets; a WRITE's first packet, with its RETH, and its second.
	send3 := []gsoPkt{{wire.RCSendFirst, zeros}, {wire.RCSendMiddle, zeros}, {wire.RCSendLast, zeros[:10]}}
	write2 := []gsoPkt{{wire.RCRDMAWriteFirst, zeros}, {wire.RCRDMAWriteMiddle, zeros}}
	var run64 []gsoPkt
	for range 64 {
		run64 = append(run64, gsoPkt{wire.RCSendMiddle, random})
	}
	corrupt := gsoDatagram(n4, send3)
	// A bit in the second packet's payload (the last packet is 28 bytes
	// long): its ICRC fails, the others still verify.
	corrupt[len(corrupt)-28-500] ^= 0x04
	// A lone packet with a bad ICRC is no super-datagram.
	lone := roce(n4, wire.RCSendOnly, 0x11, 5, []byte("hello, world"))
	lone[len(lone)-1] ^= 0x80

	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	frames := [][]byte{
		gsoDatagram(n4, send3),
		gsoDatagram(n6, write2),
		gsoDatagram(n6, []gsoPkt{{wire.RCSendOnly, []byte("hello")}, {wire.RCAcknowledge, nil}}),
		gsoDatagram(n4, run64),
		corrupt,
		lone,
	}
	recs := make([]rec, len(frames))
	for i, f := range frames {
		recs[i] = rec{time: base.Add(time.Duration(i) * time.Millisecond), data: f}
	}
	path := writeEtherPcap(t, "gso.pcap", recs)
	code, stdout, stderr := runCmd(t, "decode", path)
	require.Empty(t, stderr)
	require.Equal(t, exitFailure, code, "two bad packets")
	ls := lines(stdout)
	require.Len(t, ls, 3+2+2+64+3+1+1)
	for i, want := range []string{
		"frame 1: 0.000000 10.0.0.1:49153 -> 10.0.0.2:4791: gso 1/3 RC Send First qp=0x11 psn=100 len=1024 icrc ok",
		"frame 1: 0.000000 10.0.0.1:49153 -> 10.0.0.2:4791: gso 2/3 RC Send Middle qp=0x11 psn=101 len=1024 icrc ok",
		"frame 1: 0.000000 10.0.0.1:49153 -> 10.0.0.2:4791: gso 3/3 RC Send Last qp=0x11 psn=102 len=10 icrc ok",
		"frame 2: 0.001000 [fe80::1]:49154 -> [fe80::2]:4791: gso 1/2 RC RDMA Write First qp=0x11 psn=100 reth{va=0x0 rkey=0x0 dlen=0} len=1024 icrc ok",
		"frame 2: 0.001000 [fe80::1]:49154 -> [fe80::2]:4791: gso 2/2 RC RDMA Write Middle qp=0x11 psn=101 len=1024 icrc ok",
		"frame 3: 0.002000 [fe80::1]:49154 -> [fe80::2]:4791: gso 1/2 RC Send Only qp=0x11 psn=100 len=5 icrc ok",
		"frame 3: 0.002000 [fe80::1]:49154 -> [fe80::2]:4791: gso 2/2 RC Acknowledge qp=0x11 psn=101 aeth{ACK syn=0x1f msn=1} len=0 icrc ok",
	} {
		require.Equal(t, want, ls[i])
	}
	for k := range 64 {
		l := ls[7+k]
		require.True(t, strings.HasPrefix(l, fmt.Sprintf("frame 4: 0.003000 10.0.0.1:49153 -> 10.0.0.2:4791: gso %d/64 RC Send Middle ", k+1)), l)
		require.True(t, strings.HasSuffix(l, " len=1000 icrc ok"), l)
	}
	c := ls[7+64:]
	require.True(t, strings.HasSuffix(c[0], "gso 1/3 RC Send First qp=0x11 psn=100 len=1024 icrc ok"), c[0])
	require.Contains(t, c[1], "gso 2/3 RC Send Middle qp=0x11 psn=101 len=1024 icrc BAD (stored ")
	require.True(t, strings.HasSuffix(c[1], " DROP ICRC mismatch"), c[1])
	require.True(t, strings.HasSuffix(c[2], "gso 3/3 RC Send Last qp=0x11 psn=102 len=10 icrc ok"), c[2])
	require.True(t, strings.HasPrefix(c[3], "frame 6: 0.005000 10.0.0.1:49153 -> 10.0.0.2:4791: RC Send Only qp=0x11 psn=5 ackreq len=12 icrc BAD (stored "), c[3])
	require.Equal(t, path+": 6 packets, 6 RoCEv2 (5 GSO super-datagrams of 74 packets), 73 ok, 2 bad, 0 not RoCEv2", c[4])
}

// TestCRCCombine: the CRC arithmetic gsoSegmentSize relies on agrees with
// hash/crc32.
func TestCRCCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		a := make([]byte, r.IntN(100))
		b := make([]byte, 4*r.IntN(1000))
		for i := range a {
			a[i] = byte(r.Uint32())
		}
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		shift := uint32(1) << 31 // x^0
		for range len(b) / 4 {
			shift = mulModP(shift, crcX32)
		}
		whole := crc32.ChecksumIEEE(append(append([]byte(nil), a...), b...))
		require.Equal(t, whole, crcCombine(crc32.ChecksumIEEE(a), crc32.ChecksumIEEE(b), shift))
	}
}

// TestGSOSegmentSizeSingle: a datagram with one packet (a good one) has
// no segment size; two packets of the same size give that size.
func TestGSOSegmentSizeSingle(t *testing.T) {
	for _, n := range []wire.Net{
		{Src: testSrc4, Dst: testDst4, SrcPort: 0xc001, DstPort: wire.RoCEv2Port, DontFragment: true, ID: 7},
		{Src: testSrc6, Dst: testDst6, SrcPort: 0xc001, DstPort: wire.RoCEv2Port},
	} {
		h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x11}}
		one := wire.AppendPacket(nil, &n, &h, []byte("payload"))
		require.Zero(t, gsoSegmentSize(&n, one))
		n2 := n
		n2.ID++
		two := wire.AppendPacket(bytes.Clone(one), &n2, &h, []byte("payload"))
		require.Equal(t, len(one), gsoSegmentSize(&n, two))
	}
}
