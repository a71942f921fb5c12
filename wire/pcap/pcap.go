// Package pcap writes softhca's RoCEv2 traffic to pcap files that
// Wireshark and tshark decode as InfiniBand (their RRoCE dissector, on UDP
// port 4791).
//
// softhca's UDP link sends and receives bare InfiniBand packets through a
// UDP socket, without the IP and UDP headers that the ICRC covers and that
// a capture shows. Writer.WritePacket puts back the headers a capture on
// the wire would have shown: an Ethernet header with made-up addresses,
// then the IP and UDP headers that wire.EncodeIPUDP builds from a wire.Net.
// The InfiniBand packet is written as it is, ICRC included: a packet with a
// bad ICRC stays bad in the capture. The TAP link already has the IP
// header; Writer.WriteIPFrame adds only the Ethernet header.
//
// The Ethernet addresses are locally administered unicast addresses
// derived from the IP addresses (see MACFor): nothing resolves them, they
// only let Wireshark's conversation views pair the hosts. Frames shorter
// than Ethernet's 60-byte minimum are padded with zeros, as on a wire.
//
// # Ownership and threading
//
// A Writer is safe for concurrent use: a mutex serialises the packets, so
// each is written whole. It copies each packet into a scratch buffer that
// it reuses, so callers may reuse their buffers as soon as a call returns,
// and writing allocates nothing once the buffer has grown to the largest
// packet. The Writer does not buffer or close the underlying io.Writer;
// wrap a file in a bufio.Writer and flush it as the application needs.
package pcap

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/google/gopacket"
	gplayers "github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/softhca/softhca/wire"
)

// SnapLen is the snapshot length written in the file header: larger than
// any frame the writer writes (a UDP datagram of 65535 bytes in IPv6 and
// Ethernet), so packets are never cut.
const SnapLen = 262144

// DefaultHopLimit is the IPv4 TTL or IPv6 hop limit WritePacket writes
// when the wire.Net it is given has none.
const DefaultHopLimit = 64

// Writer writes RoCEv2 packets to a pcap file with the Ethernet link type
// and nanosecond timestamps.
type Writer struct {
	// mu serialises writes; every field below is protected by it.
	mu  sync.Mutex
	pw  *pcapgo.Writer
	buf gopacket.SerializeBuffer
	eth gplayers.Ethernet
	// src and dst back eth.SrcMAC and eth.DstMAC.
	src, dst [6]byte
	net      wire.Net
}

// NewWriter writes the pcap file header to w and returns a Writer that
// writes packets after it.
func NewWriter(w io.Writer) (*Writer, error) {
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(SnapLen, gplayers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("pcap: writing the file header: %w", err)
	}
	pcw := &Writer{
		pw:  pw,
		buf: gopacket.NewSerializeBufferExpectedSize(ethernetHeaderSize, 2048),
	}
	pcw.eth.SrcMAC = pcw.src[:]
	pcw.eth.DstMAC = pcw.dst[:]
	return pcw, nil
}

const (
	ethernetHeaderSize = 14
	maxIPPacket        = 65535
)

// WritePacket writes an InfiniBand packet ib (BTH through ICRC) that went
// through a UDP socket, with the IP and UDP headers that n describes
// (addresses, ports, IPv4 Identification and DontFragment, traffic class,
// flow label, hop limit) and an Ethernet header. A zero n.HopLimit is
// written as DefaultHopLimit. The IPv4 header checksum is computed and the
// UDP checksum is 0, as RoCEv2 senders send it. ts is the packet's time;
// the zero time means now.
func (w *Writer) WritePacket(ts time.Time, n *wire.Net, ib []byte) error {
	if err := checkNet(n); err != nil {
		return err
	}
	ipLen := n.IPHeaderSize() + wire.UDPHeaderSize + len(ib)
	limit := maxIPPacket // the IPv4 total length
	if n.IsIPv6() {
		limit += wire.IPv6HeaderSize // the IPv6 payload length
	}
	if ipLen > limit {
		return fmt.Errorf("pcap: a %d-byte InfiniBand packet does not fit in a UDP datagram", len(ib))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.buf.Clear(); err != nil {
		return err
	}
	b, err := w.buf.AppendBytes(ipLen)
	if err != nil {
		return err
	}
	w.net = *n
	if w.net.HopLimit == 0 {
		w.net.HopLimit = DefaultHopLimit
	}
	k := wire.EncodeIPUDP(b, &w.net, len(ib))
	copy(b[k:], ib)
	return w.writeLocked(ts, n.Src, n.Dst)
}

// WriteIPFrame writes a frame that starts at its IPv4 or IPv6 header, as
// read from or written to a TAP device, with an Ethernet header in front.
// The frame is written as it is. ts is the packet's time; the zero time
// means now.
func (w *Writer) WriteIPFrame(ts time.Time, ip []byte) error {
	var src, dst netip.Addr
	switch {
	case len(ip) >= wire.IPv4HeaderSize && ip[0]>>4 == 4:
		src = netip.AddrFrom4([4]byte(ip[12:16]))
		dst = netip.AddrFrom4([4]byte(ip[16:20]))
	case len(ip) >= wire.IPv6HeaderSize && ip[0]>>4 == 6:
		src = netip.AddrFrom16([16]byte(ip[8:24]))
		dst = netip.AddrFrom16([16]byte(ip[24:40]))
	default:
		return errors.New("pcap: the frame does not start with an IPv4 or IPv6 header")
	}
	if len(ip) > SnapLen-ethernetHeaderSize {
		return fmt.Errorf("pcap: a %d-byte frame is longer than the snapshot length", len(ip))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.buf.Clear(); err != nil {
		return err
	}
	b, err := w.buf.AppendBytes(len(ip))
	if err != nil {
		return err
	}
	copy(b, ip)
	return w.writeLocked(ts, src, dst)
}

// writeLocked puts the Ethernet header for src and dst in front of the IP
// packet in w.buf and writes the frame.
//
// Preconditions: w.mu is held.
func (w *Writer) writeLocked(ts time.Time, src, dst netip.Addr) error {
	w.src = MACFor(src)
	w.dst = MACFor(dst)
	w.eth.EthernetType = gplayers.EthernetTypeIPv4
	if src.Is6() {
		w.eth.EthernetType = gplayers.EthernetTypeIPv6
	}
	if err := w.eth.SerializeTo(w.buf, gopacket.SerializeOptions{}); err != nil {
		return err
	}
	frame := w.buf.Bytes()
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(frame), Length: len(frame)}
	return w.pw.WritePacket(ci, frame)
}

// MACFor returns the Ethernet address the Writer shows for an IP address:
// a locally administered unicast address, 02:00 followed by the four bytes
// of an IPv4 address, or 06 followed by the last five bytes of an IPv6
// address (so IPv6 addresses that differ only above their last five bytes
// share an Ethernet address). The zero Addr gives 02:00:00:00:00:00.
func MACFor(a netip.Addr) [6]byte {
	switch {
	case !a.IsValid():
		return [6]byte{0x02}
	case a.Is4():
		b := a.As4()
		return [6]byte{0x02, 0x00, b[0], b[1], b[2], b[3]}
	}
	b := a.As16()
	return [6]byte{0x06, b[11], b[12], b[13], b[14], b[15]}
}

// checkNet reports whether n's addresses can make an IP header.
func checkNet(n *wire.Net) error {
	if n.Src.Is4() && n.Dst.Is4() || n.Src.Is6() && n.Dst.Is6() {
		return nil
	}
	return fmt.Errorf("pcap: source %v and destination %v are not both IPv4 or both IPv6", n.Src, n.Dst)
}
