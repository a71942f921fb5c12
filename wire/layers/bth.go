package layers

import (
	"encoding/binary"
	"errors"

	"github.com/google/gopacket"
	gplayers "github.com/google/gopacket/layers"
	"github.com/softhca/softhca/wire"
)

// LayerTypeBTH is the gopacket layer type of BTH. The number is in the
// range gopacket leaves to applications (1000-1999); 1791 echoes port 4791.
var LayerTypeBTH = gopacket.RegisterLayerType(1791, gopacket.LayerTypeMetadata{
	Name:    "BTH",
	Decoder: gopacket.DecodeFunc(decodeBTH),
})

func init() {
	gplayers.RegisterUDPPortLayerType(wire.RoCEv2Port, LayerTypeBTH)
}

// BTH is the InfiniBand transport part of a RoCEv2 packet, the UDP payload
// on port 4791: the Base Transport Header, the extension headers its
// opcode calls for, then (after the payload) the pad and the ICRC.
//
// LayerContents is the BTH and the extension headers; LayerPayload is the
// payload without the pad. The pad and the ICRC belong to neither; they are
// in Packet.Pad and ICRC.
type BTH struct {
	gplayers.BaseLayer

	// Headers holds the values of the BTH and the extension headers.
	// DecodeFromBytes fills it; SerializeTo writes it, setting the pad
	// count from the payload (Headers.BTH.PadCount is ignored).
	Headers wire.Headers

	// ICRC is the invariant CRC. DecodeFromBytes reads it; SerializeTo
	// writes it as it is, or computes it (and stores it here) when the
	// options ask for checksums.
	ICRC uint32

	// ICRCStatus says whether the ICRC was checked against the IP and UDP
	// headers and with what result. DecodeFromBytes resets it;
	// gopacket.NewPacket, CheckICRC and VerifyICRC set it.
	ICRCStatus ICRCStatus

	// Packet holds the views wire.ParseTransport made into the decoded
	// bytes (extension headers, payload, pad, the whole InfiniBand packet
	// in Packet.Raw). Packet.Net is filled when the ICRC is checked, and
	// is the zero Net otherwise. SerializeTo ignores Packet.
	Packet wire.Packet

	// The IP and UDP layers whose fields SerializeTo uses for the ICRC:
	// set by SetNetworkLayerForICRC and by CheckICRC.
	icrcIP  gopacket.NetworkLayer
	icrcUDP *gplayers.UDP
}

// DropError is the error DecodeFromBytes returns for bytes that
// wire.ParseTransport rejects; Reason says why a receiver would drop them.
type DropError struct {
	Reason wire.DropReason
}

// Error implements error.
func (e DropError) Error() string { return "rocev2: invalid packet: " + e.Reason.String() }

// LayerType returns LayerTypeBTH.
func (l *BTH) LayerType() gopacket.LayerType { return LayerTypeBTH }

// CanDecode returns LayerTypeBTH.
func (l *BTH) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// NextLayerType returns gopacket.LayerTypePayload when the packet carries
// payload, and gopacket.LayerTypeZero when it does not.
func (l *BTH) NextLayerType() gopacket.LayerType {
	if len(l.Payload) > 0 {
		return gopacket.LayerTypePayload
	}
	return gopacket.LayerTypeZero
}

// DecodeFromBytes decodes an InfiniBand packet, BTH through ICRC, in place
// and without allocating: it checks everything wire.ParseTransport checks
// (and returns a DropError when that fails), but not the ICRC, which needs
// the IP and UDP headers (see CheckICRC).
func (l *BTH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	l.ICRCStatus = ICRCUnchecked
	if r := wire.ParseTransport(data, &l.Packet); r != wire.DropNone {
		if r == wire.DropTruncated {
			df.SetTruncated()
		}
		l.BaseLayer = gplayers.BaseLayer{}
		return DropError{r}
	}
	l.Packet.Net = wire.Net{}
	l.Contents = data[:l.Packet.Info().HdrLen]
	l.Payload = l.Packet.Payload
	l.Headers = l.Packet.Headers()
	l.ICRC = l.Packet.ICRC
	return nil
}

// decodeBTH is LayerTypeBTH's gopacket.Decoder. When the packet builder
// can list the layers decoded so far (gopacket's own packets can), the
// ICRC is checked against the IP and UDP layers right before the BTH.
func decodeBTH(data []byte, p gopacket.PacketBuilder) error {
	l := &BTH{}
	if err := l.DecodeFromBytes(data, p); err != nil {
		return err
	}
	if lp, ok := p.(interface{ Layers() []gopacket.Layer }); ok {
		before := lp.Layers()
		if ip, udp := ipUDPBefore(before, len(before)); ip != nil {
			// An IP header the ICRC cannot describe (IPv4 options, say)
			// leaves the status unchecked; VerifyICRC reports why.
			_, _ = l.CheckICRC(ip, udp)
		}
	}
	p.AddLayer(l)
	if len(l.Payload) == 0 {
		return nil
	}
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// SetNetworkLayerForICRC gives SerializeTo the IP layer (*layers.IPv4 or
// *layers.IPv6) and the UDP layer that the packet will be sent in, for
// computing the ICRC when SerializeOptions.ComputeChecksums is set. The
// layers' fields are read when SerializeTo runs, so they may be filled in
// after this call.
func (l *BTH) SetNetworkLayerForICRC(ip gopacket.NetworkLayer, udp *gplayers.UDP) error {
	switch ip.(type) {
	case *gplayers.IPv4, *gplayers.IPv6:
	default:
		return errors.New("rocev2: the ICRC needs an *layers.IPv4 or *layers.IPv6 network layer")
	}
	if udp == nil {
		return errors.New("rocev2: the ICRC needs the UDP layer")
	}
	l.icrcIP, l.icrcUDP = ip, udp
	return nil
}

// SerializeTo writes the BTH and the extension headers that Headers
// describes in front of the payload already in b, and appends the zero pad
// and the ICRC. It returns an error, writing nothing, when the headers
// cannot be sent with that payload (wire.Headers.Validate).
//
// With opts.ComputeChecksums the ICRC is computed from the layers given to
// SetNetworkLayerForICRC (an error if there are none) and stored in ICRC;
// otherwise ICRC is written as it is. The IP and UDP lengths the ICRC
// covers are those of the packet being built; without opts.FixLengths the
// layers' Length fields must already agree with them.
func (l *BTH) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	h := &l.Headers
	payloadLen := len(b.Bytes())
	if err := h.Validate(payloadLen); err != nil {
		return err
	}
	ibLen := h.PacketLen(payloadLen)
	var n wire.Net
	if opts.ComputeChecksums {
		if l.icrcIP == nil {
			return errors.New("rocev2: cannot compute the ICRC without the IP and UDP layers: call SetNetworkLayerForICRC")
		}
		var err error
		if n, err = netFromLayers(l.icrcIP, l.icrcUDP, ibLen, !opts.FixLengths); err != nil {
			return err
		}
	}
	pad := wire.PadFor(payloadLen)
	tail, err := b.AppendBytes(pad + wire.ICRCSize)
	if err != nil {
		return err
	}
	clear(tail)
	hdr, err := b.PrependBytes(h.Len())
	if err != nil {
		return err
	}
	h.Encode(hdr, payloadLen)
	h.BTH.PadCount = pad
	pkt := b.Bytes()[:ibLen]
	if opts.ComputeChecksums {
		wire.PutICRC(&n, pkt)
		l.ICRC = wire.StoredICRC(pkt)
	} else {
		binary.LittleEndian.PutUint32(pkt[ibLen-wire.ICRCSize:], l.ICRC)
	}
	return nil
}
