package netpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"
)

// Ping sends ICMP echo requests (ICMPv6 for an IPv6 dst) from side's
// namespace to dst, one every pingInterval, until an echo reply from dst
// arrives or timeout passes, as `ping -c 1 -w timeout dst` does, and
// without needing iputils: the tests that check that the kernel reaches
// a TAP host (resolving it with ARP or neighbour discovery first) then
// run on a machine without the ping binary. It needs a raw socket
// (CAP_NET_RAW, as creating namespaces needs root anyway).
func (p *Path) Ping(side int, dst netip.Addr, timeout time.Duration) error {
	network, laddr, request, reply := "ip4:icmp", "0.0.0.0", byte(8), byte(0)
	if dst.Is6() && !dst.Is4In6() {
		network, laddr, request, reply = "ip6:ipv6-icmp", "::", 128, 129
	}
	var c net.PacketConn
	if err := p.Do(side, func() (err error) {
		c, err = net.ListenPacket(network, laddr)
		return err
	}); err != nil {
		return fmt.Errorf("netpath: ping %v from %s: %w", dst, p.Namespace(side), err)
	}
	defer c.Close()
	to := &net.IPAddr{IP: dst.Unmap().AsSlice(), Zone: dst.Zone()}
	id := uint16(os.Getpid())
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 1500)
	var sendErr error // the last request the kernel refused, if any
	for seq := uint16(1); time.Now().Before(deadline); seq++ {
		msg := make([]byte, 16)
		msg[0] = request
		binary.BigEndian.PutUint16(msg[4:], id)
		binary.BigEndian.PutUint16(msg[6:], seq)
		copy(msg[8:], "softhca!")
		if request == 8 {
			binary.BigEndian.PutUint16(msg[2:], icmpChecksum(msg)) // the kernel sums ICMPv6 itself
		}
		// A refused request (no neighbour yet, an address still
		// tentative) is asked again after the interval, as ping -w does.
		if _, err := c.WriteTo(msg, to); err != nil {
			sendErr = err
		}
		wait := time.Now().Add(pingInterval)
		if wait.After(deadline) {
			wait = deadline
		}
		if err := c.SetReadDeadline(wait); err != nil {
			return err
		}
		for {
			n, from, err := c.ReadFrom(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break // send the next request
			}
			if err != nil {
				return fmt.Errorf("netpath: ping %v from %s: %w", dst, p.Namespace(side), err)
			}
			src, ok := netip.AddrFromSlice(from.(*net.IPAddr).IP)
			if ok && src.Unmap() == dst.Unmap().WithZone("") && n >= 8 && buf[0] == reply &&
				binary.BigEndian.Uint16(buf[4:]) == id && binary.BigEndian.Uint16(buf[6:]) == seq {
				return nil
			}
		}
	}
	if sendErr != nil {
		return fmt.Errorf("netpath: ping %v from %s: no echo reply within %v (last send: %w)", dst, p.Namespace(side), timeout, sendErr)
	}
	return fmt.Errorf("netpath: ping %v from %s: no echo reply within %v", dst, p.Namespace(side), timeout)
}

// pingInterval is how often Ping sends a request while it has no reply.
const pingInterval = 200 * time.Millisecond

// icmpChecksum is the Internet checksum of an ICMP message whose checksum
// field is zero (RFC 1071).
func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
