package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softhca/softhca/wire"
)

// This file reads capture files and digs the IP packet and the UDP
// datagram out of each frame. It is shared by the commands that read
// captures.

// frame is one captured frame.
type frame struct {
	num      int // 1-based, as Wireshark numbers frames
	time     time.Time
	linkType layers.LinkType
	data     []byte
	origLen  int // the frame's length on the wire; len(data) may be less
}

// captureReader reads the frames of a pcap or pcapng file.
type captureReader struct {
	pcap *pcapgo.Reader   // set for a pcap file
	ng   *pcapgo.NgReader // set for a pcapng file
	n    int              // frames read so far
}

// pcapngMagic is the block type of a pcapng Section Header Block, the
// first four bytes of every pcapng file (the same in both byte orders).
var pcapngMagic = []byte{0x0a, 0x0d, 0x0d, 0x0a}

// openCapture reads the file header from r and returns a reader for its
// frames. It accepts pcap (optionally gzip-compressed) and pcapng; a pcap
// file must have a link type that linkPayload understands.
func openCapture(r io.Reader) (*captureReader, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("not a pcap or pcapng file: too short")
		}
		return nil, err
	}
	if bytes.Equal(magic, pcapngMagic) {
		ng, err := pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("bad pcapng file: %w", err)
		}
		return &captureReader{ng: ng}, nil
	}
	// gopacket's LinkType is a uint8, so pcapgo truncates the file
	// header's 32-bit link type (276 reads as 20). Look at the real value
	// when the header is there to see (not gzip-compressed).
	if hdr, err := br.Peek(pcapHeaderSize); err == nil {
		if lt, ok := pcapLinkType(hdr); ok && lt > 0xff {
			return nil, fmt.Errorf("unsupported link type %d", lt)
		}
	}
	p, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, fmt.Errorf("not a pcap or pcapng file: %w", err)
	}
	if !supportedLinkType(p.LinkType()) {
		return nil, fmt.Errorf("unsupported link type %d (%s)", int(p.LinkType()), p.LinkType())
	}
	return &captureReader{pcap: p}, nil
}

// pcapHeaderSize is the size of a pcap file header.
const pcapHeaderSize = 24

// pcapLinkType returns the link type of a pcap file header, in the byte
// order its magic number (microsecond or nanosecond) says; ok is false
// when hdr does not start with a pcap magic number.
func pcapLinkType(hdr []byte) (lt uint32, ok bool) {
	switch binary.LittleEndian.Uint32(hdr) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		return binary.LittleEndian.Uint32(hdr[20:]), true
	}
	switch binary.BigEndian.Uint32(hdr) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		return binary.BigEndian.Uint32(hdr[20:]), true
	}
	return 0, false
}

// next returns the next frame, or io.EOF after the last one. Any other
// error means the file is damaged (a truncated last record, say).
func (c *captureReader) next() (frame, error) {
	var f frame
	if c.pcap != nil {
		data, ci, err := c.pcap.ReadPacketData()
		switch {
		case errors.Is(err, io.EOF) && ci.CaptureLength > 0:
			// The record header was read but its data is missing.
			return f, fmt.Errorf("frame %d: %w", c.n+1, io.ErrUnexpectedEOF)
		case errors.Is(err, io.EOF):
			return f, io.EOF
		case err != nil:
			return f, fmt.Errorf("frame %d: %w", c.n+1, err)
		}
		c.n++
		return frame{c.n, ci.Timestamp, c.pcap.LinkType(), data, ci.Length}, nil
	}
	// pcapgo's NgReader reports a block cut short at the end of the file
	// as a plain io.EOF, so a truncated pcapng file reads as complete up to
	// its last whole packet.
	data, ci, err := c.ng.ReadPacketData()
	switch {
	case errors.Is(err, io.EOF):
		return f, io.EOF
	case err != nil:
		return f, fmt.Errorf("frame %d: %w", c.n+1, err)
	}
	lt, ok := ci.AncillaryData[0].(layers.LinkType)
	if !ok {
		return f, fmt.Errorf("frame %d: pcapng reader gave no link type", c.n+1)
	}
	c.n++
	return frame{c.n, ci.Timestamp, lt, data, ci.Length}, nil
}

// LINKTYPE_RAW is 101 in files, but some systems write their DLT_RAW
// value, 12 or 14, instead. (Linux cooked capture v2, 276, does not fit in
// gopacket's 8-bit LinkType.)
const (
	linkTypeRawDLT12 layers.LinkType = 12
	linkTypeRawDLT14 layers.LinkType = 14
)

func supportedLinkType(lt layers.LinkType) bool {
	switch lt {
	case layers.LinkTypeEthernet,
		layers.LinkTypeRaw, linkTypeRawDLT12, linkTypeRawDLT14,
		layers.LinkTypeIPv4, layers.LinkTypeIPv6,
		layers.LinkTypeLinuxSLL,
		layers.LinkTypeNull, layers.LinkTypeLoop:
		return true
	}
	return false
}

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	etherTypeARP  = 0x0806
	// VLAN tags: 802.1Q, 802.1ad and the old QinQ value.
	etherTypeVLAN  = 0x8100
	etherTypeQinQ  = 0x88a8
	etherTypeQinQ9 = 0x9100

	ethernetHeaderSize = 14
	vlanTagSize        = 4
	sllHeaderSize      = 16 // protocol type in the last 2 bytes
	loopHeaderSize     = 4  // address family, in host or network order
)

// linkPayload returns the IP packet in a frame of the given link type, or,
// when there is none, a short description of what the frame holds.
func linkPayload(lt layers.LinkType, b []byte) (ip []byte, what string) {
	var proto uint16
	switch lt {
	case layers.LinkTypeEthernet:
		if len(b) < ethernetHeaderSize {
			return nil, "truncated Ethernet header"
		}
		off := ethernetHeaderSize
		proto = binary.BigEndian.Uint16(b[off-2:])
		for proto == etherTypeVLAN || proto == etherTypeQinQ || proto == etherTypeQinQ9 {
			if len(b) < off+vlanTagSize {
				return nil, "truncated VLAN tag"
			}
			off += vlanTagSize
			proto = binary.BigEndian.Uint16(b[off-2:])
		}
		b = b[off:]
	case layers.LinkTypeLinuxSLL:
		if len(b) < sllHeaderSize {
			return nil, "truncated Linux cooked header"
		}
		proto = binary.BigEndian.Uint16(b[sllHeaderSize-2:])
		b = b[sllHeaderSize:]
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		// The address family values for IPv6 differ between systems; the
		// IP version nibble says enough.
		if len(b) < loopHeaderSize {
			return nil, "truncated loopback header"
		}
		return ipVersionCheck(b[loopHeaderSize:])
	case layers.LinkTypeRaw, linkTypeRawDLT12, linkTypeRawDLT14, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		return ipVersionCheck(b)
	default:
		return nil, fmt.Sprintf("unsupported link type %d", int(lt))
	}
	switch proto {
	case etherTypeIPv4, etherTypeIPv6:
		return b, ""
	case etherTypeARP:
		return nil, "ARP"
	}
	return nil, fmt.Sprintf("ethertype 0x%04x", proto)
}

func ipVersionCheck(b []byte) ([]byte, string) {
	if len(b) == 0 || (b[0]>>4 != 4 && b[0]>>4 != 6) {
		return nil, "not IP"
	}
	return b, ""
}

// datagram is a UDP datagram found in an IP packet.
type datagram struct {
	src, dst netip.AddrPort
	// payload is the UDP payload, bounded by the IP and UDP lengths when
	// they fit in the captured bytes.
	payload []byte
}

// isRoCEv2 reports whether the datagram goes to the RoCEv2 port.
func (d *datagram) isRoCEv2() bool { return d.dst.Port() == wire.RoCEv2Port }

// findUDP returns the UDP datagram in an IP packet. ok is false when the
// packet does not hold the start of a UDP datagram (another protocol, a
// non-first fragment, headers cut short); what then describes the packet.
// Unlike wire.Parse it accepts anything it can read, so that a RoCEv2
// packet with a bad IP header is still recognised, and reported.
func findUDP(ip []byte) (d datagram, ok bool, what string) {
	if len(ip) == 0 {
		return d, false, "empty IP packet"
	}
	var src, dst netip.Addr
	var proto uint8
	var l4 []byte
	switch ip[0] >> 4 {
	case 4:
		hl := int(ip[0]&0x0f) * 4
		if hl < wire.IPv4HeaderSize || len(ip) < hl {
			return d, false, "bad or truncated IPv4 header"
		}
		src = netip.AddrFrom4([4]byte(ip[12:16]))
		dst = netip.AddrFrom4([4]byte(ip[16:20]))
		proto = ip[9]
		if total := int(binary.BigEndian.Uint16(ip[2:])); total >= hl && total <= len(ip) {
			ip = ip[:total] // drop Ethernet padding
		}
		if binary.BigEndian.Uint16(ip[6:])&0x1fff != 0 {
			return d, false, fmt.Sprintf("IPv4 fragment %s -> %s", src, dst)
		}
		l4 = ip[hl:]
	case 6:
		if len(ip) < wire.IPv6HeaderSize {
			return d, false, "truncated IPv6 header"
		}
		src = netip.AddrFrom16([16]byte(ip[8:24]))
		dst = netip.AddrFrom16([16]byte(ip[24:40]))
		proto = ip[6]
		if total := wire.IPv6HeaderSize + int(binary.BigEndian.Uint16(ip[4:])); total <= len(ip) {
			ip = ip[:total]
		}
		l4 = ip[wire.IPv6HeaderSize:]
	default:
		return d, false, "not IP"
	}
	if proto != 17 {
		return d, false, fmt.Sprintf("%s %s -> %s", ipProtoName(proto), src, dst)
	}
	if len(l4) < wire.UDPHeaderSize {
		return d, false, fmt.Sprintf("truncated UDP header %s -> %s", src, dst)
	}
	d.src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4[0:]))
	d.dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:]))
	if n := int(binary.BigEndian.Uint16(l4[4:])); n >= wire.UDPHeaderSize && n <= len(l4) {
		l4 = l4[:n]
	}
	d.payload = l4[wire.UDPHeaderSize:]
	return d, true, ""
}

func ipProtoName(p uint8) string {
	switch p {
	case 1:
		return "ICMP"
	case 6:
		return "TCP"
	case 58:
		return "ICMPv6"
	}
	return fmt.Sprintf("IP protocol %d", p)
}
