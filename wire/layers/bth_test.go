package layers_test

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"syscall"
	"testing"

	"github.com/google/gopacket"
	gplayers "github.com/google/gopacket/layers"
	"github.com/softhca/softhca/internal/testcaps"
	"github.com/softhca/softhca/wire"
	"github.com/softhca/softhca/wire/layers"
	"github.com/stretchr/testify/require"
)

func loadCaptures(t testing.TB) []testcaps.Capture {
	t.Helper()
	caps, err := testcaps.Load()
	require.NoError(t, err)
	require.NotEmpty(t, caps)
	return caps
}

// decode decodes an Ethernet frame with gopacket's defaults and returns the
// packet and its BTH layer, which must be there.
func decode(t *testing.T, frame []byte) (gopacket.Packet, *layers.BTH) {
	t.Helper()
	pkt := gopacket.NewPacket(frame, gplayers.LinkTypeEthernet, gopacket.Default)
	require.Nil(t, pkt.ErrorLayer(), "decode error: %v", pkt.ErrorLayer())
	l, ok := pkt.Layer(layers.LayerTypeBTH).(*layers.BTH)
	require.True(t, ok, "no BTH layer in %v", pkt)
	return pkt, l
}

func layerTypes(pkt gopacket.Packet) []gopacket.LayerType {
	var ts []gopacket.LayerType
	for _, l := range pkt.Layers() {
		ts = append(ts, l.LayerType())
	}
	return ts
}

// TestDecodeCaptures decodes every frame of every rxe capture with
// gopacket.NewPacket and compares the RoCEv2 layers with what wire.Parse
// finds in the same bytes.
func TestDecodeCaptures(t *testing.T) {
	for _, c := range loadCaptures(t) {
		t.Run(c.Name, func(t *testing.T) {
			for _, f := range c.Frames {
				var want wire.Packet
				require.Equal(t, wire.DropNone, wire.Parse(f.IP(), &want), "frame %d", f.Index)

				pkt, l := decode(t, f.Data)
				wantTypes := []gopacket.LayerType{gplayers.LayerTypeEthernet, gplayers.LayerTypeIPv4,
					gplayers.LayerTypeUDP, layers.LayerTypeBTH}
				if len(want.Payload) > 0 {
					wantTypes = append(wantTypes, gopacket.LayerTypePayload)
				}
				require.Equal(t, wantTypes, layerTypes(pkt), "frame %d", f.Index)

				op := want.BTH.OpCode()
				require.Equal(t, op, l.Headers.BTH.OpCode, "frame %d", f.Index)
				require.Equal(t, want.Headers(), l.Headers, "frame %d (%s)", f.Index, op)
				require.Equal(t, want.ICRC, l.ICRC, "frame %d (%s)", f.Index, op)
				require.Equal(t, want.Raw, l.Packet.Raw, "frame %d (%s)", f.Index, op)
				require.Equal(t, want.Raw[:op.Info().HdrLen], l.LayerContents(), "frame %d (%s)", f.Index, op)
				require.Equal(t, want.Payload, l.LayerPayload(), "frame %d (%s)", f.Index, op)
				if len(want.Payload) > 0 {
					require.Equal(t, gopacket.LayerTypePayload, l.NextLayerType())
					require.Equal(t, want.Payload, pkt.ApplicationLayer().Payload(), "frame %d (%s)", f.Index, op)
				} else {
					require.Equal(t, gopacket.LayerTypeZero, l.NextLayerType())
					require.Nil(t, pkt.ApplicationLayer(), "frame %d (%s)", f.Index, op)
				}

				// NewPacket checked the ICRC against the IPv4 and UDP layers.
				require.Equal(t, layers.ICRCGood, l.ICRCStatus, "frame %d (%s)", f.Index, op)
				require.Equal(t, want.Net, l.Packet.Net, "frame %d (%s)", f.Index, op)
				ok, err := layers.VerifyICRC(pkt)
				require.NoError(t, err)
				require.True(t, ok, "frame %d (%s)", f.Index, op)
			}
		})
	}
}

// TestDecodeKnownFrames checks decoded fields against the values tshark
// 4.0 prints for the same frames (tshark -V), independently of package
// wire.
func TestDecodeKnownFrames(t *testing.T) {
	frames := map[string][]testcaps.Frame{}
	for _, c := range loadCaptures(t) {
		frames[c.Name] = c.Frames
	}
	tests := []struct {
		capture    string
		frame      int
		want       wire.Headers
		icrc       uint32 // as tshark shows "Invariant CRC" (see below)
		payloadLen int
		ipID       uint16
	}{
		{"read_lat.pcap", 1, wire.Headers{
			BTH:  wire.BTHFields{OpCode: wire.RCRDMAReadRequest, PKey: 0xffff, DestQP: 0x20, AckReq: true, PSN: 4402308},
			RETH: wire.RETHFields{VirtualAddress: 0x55db489be000, RKey: 0xeba, DMALength: 64},
		}, 0xbab5fe4b, 0, 0},
		{"atomic_fadd.pcap", 1, wire.Headers{
			BTH:       wire.BTHFields{OpCode: wire.RCFetchAdd, PKey: 0xffff, DestQP: 0x21, AckReq: true, PSN: 12453421},
			AtomicETH: wire.AtomicETHFields{VirtualAddress: 0x55d631cd0000, RKey: 0xffa, SwapAddData: 1},
		}, 0x7338c5c4, 0, 0},
		{"atomic_fadd.pcap", 2, wire.Headers{
			BTH:          wire.BTHFields{OpCode: wire.RCAtomicAcknowledge, PKey: 0xffff, DestQP: 0x21, PSN: 12453421},
			AETH:         wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: 1},
			AtomicAckETH: 14745932530817722520,
		}, 0x0b7cb7d6, 0, 0},
		{"ud_pingpong.pcap", 1, wire.Headers{
			BTH:  wire.BTHFields{OpCode: wire.UDSendOnly, PKey: 0xffff, DestQP: 0x16, PSN: 8929262},
			DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 0x16},
		}, 0x7c1cca79, 512, 0},
		{"imm_rc.pcap", 1, wire.Headers{
			BTH:   wire.BTHFields{OpCode: wire.RCRDMAWriteOnlyWithImm, PKey: 0xffff, DestQP: 0x19, AckReq: true, PSN: 2058940},
			RETH:  wire.RETHFields{VirtualAddress: 0x55b6808147c0, RKey: 0x7b4, DMALength: 64},
			ImmDt: 0x11111111,
		}, 0x7cd29c1f, 64, 0x0af6},
		{"imm_rc.pcap", 2, wire.Headers{
			BTH:  wire.BTHFields{OpCode: wire.RCAcknowledge, PKey: 0xffff, DestQP: 0x19, PSN: 2058940},
			AETH: wire.AETHFields{Syndrome: wire.ACKSyndrome(wire.CreditsInvalid), MSN: 1},
		}, 0xea383436, 0, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.capture, tt.frame), func(t *testing.T) {
			fs := frames[tt.capture]
			require.Greater(t, len(fs), tt.frame-1)
			pkt, l := decode(t, fs[tt.frame-1].Data)
			require.Equal(t, tt.want, l.Headers)
			// tshark shows the 4 ICRC bytes as a big-endian number; wire
			// reads them least-significant byte first, as rxe stores the
			// CRC.
			require.Equal(t, tt.icrc, bits.ReverseBytes32(l.ICRC))
			require.Len(t, l.LayerPayload(), tt.payloadLen)
			require.Equal(t, layers.ICRCGood, l.ICRCStatus)
			if tt.ipID != 0 {
				require.Equal(t, tt.ipID, pkt.Layer(gplayers.LayerTypeIPv4).(*gplayers.IPv4).Id)
				require.Equal(t, tt.ipID, l.Packet.Net.ID)
			}
		})
	}
}

// TestDecodeOptions decodes with gopacket's lazy and no-copy options: the
// ICRC is still checked during decoding, and the packet prints.
func TestDecodeOptions(t *testing.T) {
	f := loadCaptures(t)[0].Frames[0]
	tests := []struct {
		name string
		opts gopacket.DecodeOptions
	}{
		{"default", gopacket.Default},
		{"lazy", gopacket.Lazy},
		{"no copy", gopacket.NoCopy},
		{"lazy no copy", gopacket.DecodeOptions{Lazy: true, NoCopy: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkt := gopacket.NewPacket(f.Data, gplayers.LinkTypeEthernet, tt.opts)
			l, ok := pkt.Layer(layers.LayerTypeBTH).(*layers.BTH)
			require.True(t, ok)
			require.Equal(t, layers.ICRCGood, l.ICRCStatus)
			require.Nil(t, pkt.ErrorLayer())
			s := pkt.String()
			require.Contains(t, s, "= BTH")
			require.Contains(t, s, "OpCode="+l.Headers.BTH.OpCode.String())
			require.Contains(t, s, "ICRCStatus=good")
		})
	}
}

// TestICRCBitFlip flips single bits of captured frames: a bit the ICRC
// covers must make it fail, a bit it masks (IPv4 TOS, TTL and checksum,
// UDP checksum, BTH FECN/BECN byte) must not.
func TestICRCBitFlip(t *testing.T) {
	// Where the headers start in an untagged Ethernet frame.
	const ipOff, udpOff, bthOff = 14, 14 + 20, 14 + 20 + 8
	tests := []struct {
		name   string
		offset func(frameLen int) int
		bit    uint8
		masked bool
	}{
		{"IPv4 identification", func(int) int { return ipOff + 5 }, 0x01, false},
		{"IPv4 DF flag", func(int) int { return ipOff + 6 }, 0x40, false},
		{"IPv4 source address", func(int) int { return ipOff + 15 }, 0x01, false},
		{"IPv4 destination address", func(int) int { return ipOff + 19 }, 0x80, false},
		{"UDP source port", func(int) int { return udpOff + 1 }, 0x01, false},
		{"BTH SE bit", func(int) int { return bthOff + 1 }, 0x80, false},
		{"BTH P_Key", func(int) int { return bthOff + 3 }, 0x01, false},
		{"BTH destination QP", func(int) int { return bthOff + 7 }, 0x01, false},
		{"BTH PSN", func(int) int { return bthOff + 11 }, 0x01, false},
		{"last byte before the ICRC", func(n int) int { return n - 5 }, 0x10, false},
		{"ICRC", func(n int) int { return n - 1 }, 0x01, false},
		{"IPv4 TOS (masked)", func(int) int { return ipOff + 1 }, 0x04, true},
		{"IPv4 TTL (masked)", func(int) int { return ipOff + 8 }, 0x01, true},
		{"IPv4 header checksum (masked)", func(int) int { return ipOff + 11 }, 0x01, true},
		{"UDP checksum (masked)", func(int) int { return udpOff + 7 }, 0x01, true},
		{"BTH FECN (masked)", func(int) int { return bthOff + 4 }, 0x80, true},
		{"BTH BECN (masked)", func(int) int { return bthOff + 4 }, 0x40, true},
	}
	for _, c := range loadCaptures(t) {
		f := c.Frames[0]
		for _, tt := range tests {
			t.Run(c.Name+"/"+tt.name, func(t *testing.T) {
				data := append([]byte(nil), f.Data...)
				data[tt.offset(len(data))] ^= tt.bit
				pkt, l := decode(t, data)
				ok, err := layers.VerifyICRC(pkt)
				require.NoError(t, err)
				require.Equal(t, tt.masked, ok)
				if tt.masked {
					require.Equal(t, layers.ICRCGood, l.ICRCStatus)
				} else {
					require.Equal(t, layers.ICRCBad, l.ICRCStatus)
				}
			})
		}
	}
}

// zeroChecksumUDP serialises a UDP header with checksum 0, as RoCEv2
// senders send it, even when the options ask for checksums.
type zeroChecksumUDP struct{ *gplayers.UDP }

func (u zeroChecksumUDP) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	opts.ComputeChecksums = false
	u.Checksum = 0
	return u.UDP.SerializeTo(b, opts)
}

// rebuild makes fresh layers from the fields of a decoded packet, with
// every checksum and length zeroed, ready to be serialised with
// FixLengths and ComputeChecksums.
func rebuild(t *testing.T, pkt gopacket.Packet) []gopacket.SerializableLayer {
	t.Helper()
	e := pkt.Layer(gplayers.LayerTypeEthernet).(*gplayers.Ethernet)
	eth := &gplayers.Ethernet{SrcMAC: e.SrcMAC, DstMAC: e.DstMAC, EthernetType: e.EthernetType}
	u := pkt.Layer(gplayers.LayerTypeUDP).(*gplayers.UDP)
	udp := &gplayers.UDP{SrcPort: u.SrcPort, DstPort: u.DstPort}
	var ip gopacket.SerializableLayer
	var ipn gopacket.NetworkLayer
	switch d := pkt.NetworkLayer().(type) {
	case *gplayers.IPv4:
		ip4 := &gplayers.IPv4{Version: 4, TOS: d.TOS, Id: d.Id, Flags: d.Flags, TTL: d.TTL,
			Protocol: d.Protocol, SrcIP: d.SrcIP, DstIP: d.DstIP}
		ip, ipn = ip4, ip4
	case *gplayers.IPv6:
		ip6 := &gplayers.IPv6{Version: 6, TrafficClass: d.TrafficClass, FlowLabel: d.FlowLabel,
			NextHeader: d.NextHeader, HopLimit: d.HopLimit, SrcIP: d.SrcIP, DstIP: d.DstIP}
		ip, ipn = ip6, ip6
	default:
		t.Fatalf("network layer %v", pkt.NetworkLayer())
	}
	d := pkt.Layer(layers.LayerTypeBTH).(*layers.BTH)
	bth := &layers.BTH{Headers: d.Headers}
	require.NoError(t, bth.SetNetworkLayerForICRC(ipn, udp))
	ls := []gopacket.SerializableLayer{eth, ip, zeroChecksumUDP{udp}, bth}
	if len(d.LayerPayload()) > 0 {
		ls = append(ls, gopacket.Payload(d.LayerPayload()))
	}
	return ls
}

// TestSerializeCaptures round-trips every captured frame through gopacket:
// decode, then SerializeLayers must give back exactly the captured bytes,
// both from the decoded layers as they are and from fresh layers that
// recompute every length, the IPv4 checksum and the ICRC.
func TestSerializeCaptures(t *testing.T) {
	buf := gopacket.NewSerializeBuffer()
	for _, c := range loadCaptures(t) {
		t.Run(c.Name, func(t *testing.T) {
			for _, f := range c.Frames {
				pkt, l := decode(t, f.Data)
				op := l.Headers.BTH.OpCode

				// As decoded: every field, checksum and the ICRC as stored.
				var ls []gopacket.SerializableLayer
				for _, ly := range pkt.Layers() {
					ls = append(ls, ly.(gopacket.SerializableLayer))
				}
				require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, ls...))
				require.Equal(t, f.Data, buf.Bytes(), "frame %d (%s) as decoded", f.Index, op)

				// Rebuilt: lengths, IPv4 checksum and ICRC computed.
				ls = rebuild(t, pkt)
				opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
				require.NoError(t, gopacket.SerializeLayers(buf, opts, ls...))
				require.Equal(t, f.Data, buf.Bytes(), "frame %d (%s) rebuilt", f.Index, op)
				require.Equal(t, l.ICRC, ls[3].(*layers.BTH).ICRC, "frame %d (%s): computed ICRC", f.Index, op)
			}
		})
	}
}

var (
	v4a = netip.MustParseAddr("192.0.2.1")
	v4b = netip.MustParseAddr("192.0.2.2")
	v6a = netip.MustParseAddr("2001:db8::1")
	v6b = netip.MustParseAddr("2001:db8::2")
)

// ethFrame returns an Ethernet frame around the IP packet that wire builds
// for n, h and payload.
func ethFrame(n *wire.Net, h *wire.Headers, payload []byte) []byte {
	frame := []byte{0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00}
	if n.IsIPv6() {
		frame[12], frame[13] = 0x86, 0xdd
	}
	return wire.AppendFrame(frame, n, h, payload)
}

// TestSyntheticPackets covers what the captures do not: IPv6, and opcodes
// rxe did not send in them. Each packet is built by wire, decoded by
// gopacket and serialised again.
func TestSyntheticPackets(t *testing.T) {
	nets := []wire.Net{
		{Src: v4a, Dst: v4b, SrcPort: 0xc123, DstPort: wire.RoCEv2Port, HopLimit: 64, ID: 0x1234, DontFragment: true, TrafficClass: 0x02},
		{Src: v6a, Dst: v6b, SrcPort: 0xc456, DstPort: wire.RoCEv2Port, HopLimit: 255, TrafficClass: 0x88, FlowLabel: 0xabcde},
	}
	reth := wire.RETHFields{VirtualAddress: 0x1122334455667788, RKey: 0x99aabbcc, DMALength: 4096}
	tests := []struct {
		name    string
		h       wire.Headers
		payload int
	}{
		{"RC Send Only", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x11, AckReq: true, PSN: 7}}, 5},
		{"RC Send Only empty", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x11, PSN: 8}}, 0},
		{"RC Send Only Invalidate", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnlyWithInvalidate, PKey: 0xffff, DestQP: 0x11}, IETH: 0xdeadbeef}, 64},
		{"RC RDMA Write First", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCRDMAWriteFirst, PKey: 0xffff, DestQP: 0x12, PSN: 0xffffff}, RETH: reth}, 1024},
		{"RC Compare Swap", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCCompareSwap, PKey: 0xffff, DestQP: 0x13, AckReq: true},
			AtomicETH: wire.AtomicETHFields{VirtualAddress: 0x1000, RKey: 0x42, SwapAddData: 7, CompareData: 3}}, 0},
		{"RC Acknowledge NAK", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAcknowledge, PKey: 0xffff, DestQP: 0x14, PSN: 9},
			AETH: wire.AETHFields{Syndrome: wire.NAKSyndrome(wire.NAKRemoteAccessError), MSN: 0xabcdef}}, 0},
		{"RC Flush", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCFlush, PKey: 0xffff, DestQP: 0x15},
			FETH: wire.FETHFields{PlacementType: 1, Selectivity: 1}, RETH: reth}, 0},
		{"RC Atomic Write", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAtomicWrite, PKey: 0xffff, DestQP: 0x16}, RETH: reth}, 8},
		{"UC RDMA Write Only Immediate", wire.Headers{BTH: wire.BTHFields{OpCode: wire.UCRDMAWriteOnlyWithImm, PKey: 0xffff, DestQP: 0x17, SolicitedEvent: true},
			RETH: reth, ImmDt: 0x01020304}, 3},
		{"UD Send Only Immediate", wire.Headers{BTH: wire.BTHFields{OpCode: wire.UDSendOnlyWithImmediate, PKey: 0xffff, DestQP: 0x18, FECN: true},
			DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 0x19}, ImmDt: 0xcafe}, 256},
		{"CNP", wire.Headers{BTH: wire.BTHFields{OpCode: wire.CNP, PKey: 0xffff, DestQP: 0x1a, BECN: true}}, 0},
	}
	buf := gopacket.NewSerializeBuffer()
	for _, n := range nets {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/IPv%d", tt.name, map[bool]int{false: 4, true: 6}[n.IsIPv6()]), func(t *testing.T) {
				payload := make([]byte, tt.payload)
				for i := range payload {
					payload[i] = byte(i*7 + 1)
				}
				h := tt.h
				h.BTH.PadCount = wire.PadFor(len(payload))
				frame := ethFrame(&n, &h, payload)

				pkt, l := decode(t, frame)
				require.Equal(t, h, l.Headers)
				require.Equal(t, payload, l.LayerPayload())
				require.Equal(t, layers.ICRCGood, l.ICRCStatus)
				require.Equal(t, n, l.Packet.Net)

				ls := rebuild(t, pkt)
				opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
				require.NoError(t, gopacket.SerializeLayers(buf, opts, ls...))
				if len(frame) < 60 {
					// gopacket's Ethernet layer pads to the minimum frame.
					frame = append(frame, make([]byte, 60-len(frame))...)
				}
				require.Equal(t, frame, buf.Bytes())
			})
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	n := wire.Net{Src: v4a, Dst: v4b, SrcPort: 0xc000, DstPort: wire.RoCEv2Port, HopLimit: 64, ID: 1, DontFragment: true}
	good := ethFrame(&n, &wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff}}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	const bthOff = 14 + 20 + 8
	tests := []struct {
		name   string
		mutate func(b []byte) []byte
		reason wire.DropReason
	}{
		{"reserved opcode", func(b []byte) []byte { b[bthOff] = 0x1f; return b }, wire.DropReservedOpCode},
		{"RD opcode", func(b []byte) []byte { b[bthOff] = 0x44; return b }, wire.DropUnsupportedTransport},
		{"TVer 1", func(b []byte) []byte { b[bthOff+1] |= 1; return b }, wire.DropBadTVer},
		{"ACK with payload", func(b []byte) []byte { b[bthOff] = byte(wire.RCAcknowledge); return b }, wire.DropPayloadNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := tt.mutate(append([]byte(nil), good...))
			pkt := gopacket.NewPacket(frame, gplayers.LinkTypeEthernet, gopacket.Default)
			require.Nil(t, pkt.Layer(layers.LayerTypeBTH))
			el := pkt.ErrorLayer()
			require.NotNil(t, el)
			var de layers.DropError
			require.True(t, errors.As(el.Error(), &de), "error %v", el.Error())
			require.Equal(t, tt.reason, de.Reason)

			var l layers.BTH
			err := l.DecodeFromBytes(frame[bthOff:], gopacket.NilDecodeFeedback)
			require.Equal(t, layers.DropError{Reason: tt.reason}, err)
		})
	}
	t.Run("truncated", func(t *testing.T) {
		var l layers.BTH
		var fb truncFeedback
		err := l.DecodeFromBytes(good[bthOff:bthOff+wire.BTHSize], &fb)
		require.Equal(t, layers.DropError{Reason: wire.DropTruncated}, err)
		require.True(t, bool(fb))
	})
}

// otherNetwork is a network layer that is neither IPv4 nor IPv6.
type otherNetwork struct{ gopacket.Payload }

func (otherNetwork) NetworkFlow() gopacket.Flow { return gopacket.Flow{} }

type truncFeedback bool

func (f *truncFeedback) SetTruncated() { *f = true }

func TestICRCErrors(t *testing.T) {
	n := wire.Net{Src: v4a, Dst: v4b, SrcPort: 0xc000, DstPort: wire.RoCEv2Port, HopLimit: 64, ID: 1, DontFragment: true}
	frame := ethFrame(&n, &wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff}}, []byte{1, 2, 3, 4})

	t.Run("CheckICRC", func(t *testing.T) {
		tests := []struct {
			name   string
			mutate func(ip *gplayers.IPv4, udp *gplayers.UDP)
		}{
			{"IPv4 options", func(ip *gplayers.IPv4, _ *gplayers.UDP) {
				ip.Options = []gplayers.IPv4Option{{OptionType: 1}}
			}},
			{"IPv4 fragment", func(ip *gplayers.IPv4, _ *gplayers.UDP) { ip.Flags |= gplayers.IPv4MoreFragments }},
			{"IPv4 length", func(ip *gplayers.IPv4, _ *gplayers.UDP) { ip.Length++ }},
			{"UDP length", func(_ *gplayers.IPv4, udp *gplayers.UDP) { udp.Length-- }},
			{"not UDP", func(ip *gplayers.IPv4, _ *gplayers.UDP) { ip.Protocol = gplayers.IPProtocolTCP }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				pkt, l := decode(t, frame)
				ip := pkt.Layer(gplayers.LayerTypeIPv4).(*gplayers.IPv4)
				udp := pkt.Layer(gplayers.LayerTypeUDP).(*gplayers.UDP)
				require.Equal(t, layers.ICRCGood, l.ICRCStatus)
				tt.mutate(ip, udp)
				ok, err := l.CheckICRC(ip, udp)
				require.Error(t, err)
				require.False(t, ok)
				require.Equal(t, layers.ICRCUnchecked, l.ICRCStatus)
			})
		}
	})

	t.Run("VerifyICRC without BTH", func(t *testing.T) {
		pkt := gopacket.NewPacket(frame[:14+20], gplayers.LinkTypeEthernet, gopacket.Default)
		_, err := layers.VerifyICRC(pkt)
		require.Error(t, err)
	})

	t.Run("VerifyICRC without IP", func(t *testing.T) {
		pkt := gopacket.NewPacket(frame[14+20+8:], layers.LayerTypeBTH, gopacket.Default)
		l := pkt.Layer(layers.LayerTypeBTH).(*layers.BTH)
		require.Equal(t, layers.ICRCUnchecked, l.ICRCStatus)
		_, err := layers.VerifyICRC(pkt)
		require.Error(t, err)
	})
}

func TestSerializeErrors(t *testing.T) {
	ip := &gplayers.IPv4{Version: 4, Protocol: gplayers.IPProtocolUDP, TTL: 64,
		SrcIP: v4a.AsSlice(), DstIP: v4b.AsSlice(), Flags: gplayers.IPv4DontFragment}
	udp := &gplayers.UDP{SrcPort: 0xc000, DstPort: wire.RoCEv2Port}
	ack := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAcknowledge, PKey: 0xffff}}
	buf := gopacket.NewSerializeBuffer()
	checksums := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}

	t.Run("no network layer", func(t *testing.T) {
		l := &layers.BTH{Headers: ack}
		err := gopacket.SerializeLayers(buf, checksums, ip, udp, l)
		require.ErrorContains(t, err, "SetNetworkLayerForICRC")
		// Without checksums, the stored ICRC is written as it is.
		l.ICRC = 0x01020304
		require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, l))
		require.Equal(t, []byte{4, 3, 2, 1}, buf.Bytes()[wire.BTHSize+wire.AETHSize:])
	})
	t.Run("payload on an ACK", func(t *testing.T) {
		l := &layers.BTH{Headers: ack}
		require.NoError(t, l.SetNetworkLayerForICRC(ip, udp))
		err := gopacket.SerializeLayers(buf, checksums, ip, udp, l, gopacket.Payload{1, 2, 3, 4})
		require.ErrorIs(t, err, syscall.EINVAL)
	})
	t.Run("not an IP layer", func(t *testing.T) {
		l := &layers.BTH{Headers: ack}
		require.Error(t, l.SetNetworkLayerForICRC(otherNetwork{}, udp))
		require.Error(t, l.SetNetworkLayerForICRC(nil, udp))
		require.Error(t, l.SetNetworkLayerForICRC(ip, nil))
	})
	t.Run("lengths not fixed", func(t *testing.T) {
		l := &layers.BTH{Headers: ack}
		require.NoError(t, l.SetNetworkLayerForICRC(ip, udp))
		ip.Length, udp.Length = 0, 0
		err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, ip, udp, l)
		require.ErrorContains(t, err, "length")
		// With the right lengths it works, and the result parses.
		ip.IHL = 5
		ip.Length = 20 + 8 + wire.BTHSize + wire.AETHSize + wire.ICRCSize
		udp.Length = ip.Length - 20
		require.NoError(t, gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, ip, zeroChecksumUDP{udp}, l))
		var p wire.Packet
		require.Equal(t, wire.DropNone, wire.Parse(buf.Bytes(), &p))
		require.Equal(t, l.ICRC, p.ICRC)
	})
}

// newParser returns a DecodingLayerParser over preallocated layers.
func newParser() (*gopacket.DecodingLayerParser, *gplayers.IPv4, *gplayers.UDP, *layers.BTH) {
	var (
		eth     gplayers.Ethernet
		ip4     gplayers.IPv4
		ip6     gplayers.IPv6
		udp     gplayers.UDP
		bth     layers.BTH
		payload gopacket.Payload
	)
	p := gopacket.NewDecodingLayerParser(gplayers.LayerTypeEthernet, &eth, &ip4, &ip6, &udp, &bth, &payload)
	return p, &ip4, &udp, &bth
}

// TestDecodingLayerParser decodes every captured frame with a
// DecodingLayerParser and checks the ICRC, without allocating.
func TestDecodingLayerParser(t *testing.T) {
	parser, ip4, udp, bth := newParser()
	decoded := make([]gopacket.LayerType, 0, 8)
	want := []gopacket.LayerType{gplayers.LayerTypeEthernet, gplayers.LayerTypeIPv4, gplayers.LayerTypeUDP, layers.LayerTypeBTH}
	for _, c := range loadCaptures(t) {
		for _, f := range c.Frames {
			require.NoError(t, parser.DecodeLayers(f.Data, &decoded), "%s frame %d", c.Name, f.Index)
			w := want
			if len(bth.Packet.Payload) > 0 {
				w = append(w, gopacket.LayerTypePayload)
			}
			require.Equal(t, w, decoded)
			require.Equal(t, layers.ICRCUnchecked, bth.ICRCStatus)
			ok, err := bth.CheckICRC(ip4, udp)
			require.NoError(t, err)
			require.True(t, ok, "%s frame %d", c.Name, f.Index)

			allocs := testing.AllocsPerRun(10, func() {
				_ = parser.DecodeLayers(f.Data, &decoded)
				_, _ = bth.CheckICRC(ip4, udp)
			})
			require.Zero(t, allocs, "%s frame %d", c.Name, f.Index)
			require.Equal(t, layers.ICRCGood, bth.ICRCStatus)
		}
	}
}

func BenchmarkDecodingLayerParser(b *testing.B) {
	caps := loadCaptures(b)
	var frame []byte
	for _, c := range caps {
		if c.Name == "write_bw.pcap" {
			frame = c.Frames[0].Data
		}
	}
	require.NotNil(b, frame)
	parser, ip4, udp, bth := newParser()
	decoded := make([]gopacket.LayerType, 0, 8)
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if err := parser.DecodeLayers(frame, &decoded); err != nil {
			b.Fatal(err)
		}
		if ok, err := bth.CheckICRC(ip4, udp); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
