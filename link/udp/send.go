package udp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/link"
)

// txMeta records which packets one sendmmsg message carries.
type txMeta struct {
	first, count, bytes int
}

// txState is the reused state of Send.
type txState struct {
	// mu serialises Send. It guards every field below.
	mu sync.Mutex

	msgs  []unix.Mmsghdr
	meta  []txMeta
	names []unix.RawSockaddrInet6 // also holds RawSockaddrInet4
	ctrl  []byte                  // ctrlSize bytes per message
	iovs  []unix.Iovec
	niov  int    // iovecs used by the current batch
	icrc  []byte // rewritten ICRCs of GSO segments, 4 bytes each
	ids   idDeltas

	// stage holds copies of small packets, laid end to end so that a GSO
	// run of them is one iovec (copyMax); nstage bytes of it are in use
	// by the current batch.
	stage  []byte
	nstage int

	// The write callback's input (n messages, from off) and results.
	n, off                   int
	gsoFail                  int // message refused for GSO, or -1
	sent, sentBytes, dropped uint64

	// A one-entry cache of the last IPv6 zone name looked up.
	zone    string
	zoneIdx uint32
}

func (t *txState) init(batch int) {
	t.msgs = make([]unix.Mmsghdr, batch)
	t.meta = make([]txMeta, batch)
	t.names = make([]unix.RawSockaddrInet6, batch)
	t.ctrl = make([]byte, batch*ctrlSize)
	// A GSO run of k packets takes up to packetIovs*k iovecs; a full run
	// must fit whatever the batch size.
	niov := max(packetIovs*batch, packetIovs*gsoMaxSegs)
	t.iovs = make([]unix.Iovec, niov)
	t.icrc = make([]byte, 4*niov)
	t.stage = make([]byte, stageSize)
}

// copyMax is the largest packet Send copies into its staging buffer
// rather than handing the kernel its pieces (headers, payload, pad,
// ICRC) as iovecs of their own. The kernel copies each iovec of a
// datagram separately, at a cost per iovec that dwarfs copying a small
// packet once more in user space: for 64-byte SENDs, a run of 64 packets
// as 128 iovecs spent more time in the kernel's copy than one contiguous
// iovec does in total. Large packets keep their payload where it lies.
const copyMax = 512

// stageSize holds a full GSO run of copyMax-byte packets.
const stageSize = gsoMaxBytes + copyMax

// packetIovs is the most iovecs one packet takes: its headers, its
// Payload, its pad and its ICRC rewritten for a GSO segment's IPv4 ID.
const packetIovs = 4

// Gathers reports that Send takes packets with a Payload apart from Buf
// (link.Gatherer): the payload is an iovec of its own.
func (l *Link) Gathers() bool { return true }

// payloadOK reports whether a packet's Payload, if it has one, has a
// place in its Buf after the headers.
func payloadOK(p *link.Packet) bool {
	return len(p.Payload) == 0 || (p.PayloadAt > 0 && p.PayloadAt <= len(p.Buf))
}

// Send transmits the packets in order. Packets the link cannot send
// (no route, larger than the path MTU, a destination of the wrong family,
// an empty buffer) are dropped and counted as TxDropped. Send returns an
// error only when the link is closed.
func (l *Link) Send(pkts []link.Packet) error {
	if l.closed.Load() {
		return net.ErrClosed
	}
	t := &l.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := 0; i < len(pkts); {
		next := l.build(pkts, i)
		restart, err := l.flush()
		if err != nil {
			// The packets after this batch were not attempted either.
			l.txDropped.Add(uint64(len(pkts) - next))
			return err
		}
		if restart >= 0 {
			next = restart
		}
		i = next
	}
	return nil
}

// build fills the message arrays with packets from pkts[i:] and returns
// the index of the first packet it did not take.
//
// Preconditions: l.tx.mu is held.
func (l *Link) build(pkts []link.Packet, i int) int {
	t := &l.tx
	t.n, t.niov, t.nstage = 0, 0, 0
	nicrc := 0
	var dropped uint64
	gso := l.gso.Load()
	for i < len(pkts) && t.n < len(t.msgs) && t.niov+packetIovs <= len(t.iovs) {
		p := &pkts[i]
		seg := p.Len()
		sa := &t.names[t.n]
		namelen, v4 := l.putDst(sa, p.Net.Dst, p.Net.DstPort)
		if namelen == 0 || seg == 0 || seg > maxUDPPayload || !payloadOK(p) {
			dropped++
			i++
			continue
		}
		src := p.Net.Src
		usePktinfo := l.pktinfo && src.IsValid() && !src.IsUnspecified()

		// The run: packets after p with the same destination and length,
		// the last possibly shorter.
		j, total := i+1, seg
		if gso && 2*seg <= gsoMaxBytes {
			for j < len(pkts) && j-i < gsoMaxSegs && t.niov+packetIovs*(j-i+1) <= len(t.iovs) {
				q := &pkts[j]
				ql := q.Len()
				if ql == 0 || ql > seg || total+ql > gsoMaxBytes || !payloadOK(q) ||
					q.Net.Dst != p.Net.Dst || q.Net.DstPort != p.Net.DstPort ||
					(usePktinfo && q.Net.Src != src) {
					break
				}
				total += ql
				j++
				if ql < seg {
					break
				}
			}
		}
		count := j - i

		iov0 := t.niov
		for k := range count {
			q := &pkts[i+k]
			b, n := q.Buf, q.Len()
			if n <= copyMax && t.nstage+n <= len(t.stage) {
				// Copy the packet to the end of the stage; it joins the
				// message's previous iovec when that ends where it starts.
				dst := t.stage[t.nstage : t.nstage+n]
				if len(q.Payload) > 0 {
					c := copy(dst, b[:q.PayloadAt])
					c += copy(dst[c:], q.Payload)
					copy(dst[c:], b[q.PayloadAt:])
				} else {
					copy(dst, b)
				}
				if k > 0 && v4 && n >= 4 {
					// Segment k leaves with IP ID k: rewrite its ICRC.
					c := binary.LittleEndian.Uint32(dst[n-4:]) ^ t.ids.delta(n, k)
					binary.LittleEndian.PutUint32(dst[n-4:], c)
				}
				t.nstage += n
				if t.niov > iov0 {
					if v := &t.iovs[t.niov-1]; iovEnd(v) == uintptr(unsafe.Pointer(&dst[0])) {
						v.SetLen(int(v.Len) + n)
						continue
					}
				}
				setIov(&t.iovs[t.niov], dst)
				t.niov++
				continue
			}
			if len(q.Payload) > 0 {
				// The headers, then the payload where it lies; the
				// rest of Buf (pad and ICRC) follows.
				setIov(&t.iovs[t.niov], b[:q.PayloadAt])
				setIov(&t.iovs[t.niov+1], q.Payload)
				t.niov += 2
				b = b[q.PayloadAt:]
				if len(b) == 0 {
					continue
				}
			}
			if k > 0 && v4 && len(b) >= 4 {
				// Segment k leaves with IP ID k: rewrite its ICRC.
				body := len(b) - 4
				c := binary.LittleEndian.Uint32(b[body:]) ^ t.ids.delta(n, k)
				slot := t.icrc[4*nicrc : 4*nicrc+4]
				nicrc++
				binary.LittleEndian.PutUint32(slot, c)
				if body > 0 {
					setIov(&t.iovs[t.niov], b[:body])
					t.niov++
				}
				setIov(&t.iovs[t.niov], slot)
				t.niov++
				continue
			}
			setIov(&t.iovs[t.niov], b)
			t.niov++
		}

		h := &t.msgs[t.n].Hdr
		h.Name = (*byte)(unsafe.Pointer(sa))
		h.Namelen = namelen
		h.Iov = &t.iovs[iov0]
		h.SetIovlen(t.niov - iov0)
		h.Flags = 0
		ctl := t.ctrl[t.n*ctrlSize : (t.n+1)*ctrlSize]
		cl := 0
		if count > 1 {
			d := putCmsg(ctl[cl:], unix.IPPROTO_UDP, unix.UDP_SEGMENT, 2)
			binary.NativeEndian.PutUint16(d, uint16(seg))
			cl += unix.CmsgSpace(2)
		}
		if usePktinfo {
			cl += l.putPktinfo(ctl[cl:], src)
		}
		if cl > 0 {
			h.Control = &ctl[0]
			h.SetControllen(cl)
		} else {
			h.Control = nil
			h.SetControllen(0)
		}
		t.meta[t.n] = txMeta{first: i, count: count, bytes: total}
		t.n++
		i = j
	}
	if dropped > 0 {
		l.txDropped.Add(dropped)
	}
	return i
}

// flush hands the built messages to the kernel. It returns the index of
// the packet to rebuild from when the kernel refused GSO (switching it
// off), else -1.
//
// Preconditions: l.tx.mu is held.
func (l *Link) flush() (restart int, err error) {
	t := &l.tx
	t.off, t.gsoFail = 0, -1
	t.sent, t.sentBytes, t.dropped = 0, 0, 0
	restart = -1
	if t.n > 0 {
		if werr := l.rc.Write(l.writeFn); werr != nil {
			for _, m := range t.meta[t.off:t.n] {
				t.dropped += uint64(m.count)
			}
			err = l.closedErr(werr)
		} else if t.gsoFail >= 0 {
			l.gso.Store(false)
			restart = t.meta[t.gsoFail].first
		}
	}
	// Do not keep the caller's buffers reachable.
	for i := range t.iovs[:t.niov] {
		t.iovs[i].Base = nil
	}
	if t.sent > 0 {
		l.txPackets.Add(t.sent)
		l.txBytes.Add(t.sentBytes)
	}
	if t.dropped > 0 {
		l.txDropped.Add(t.dropped)
	}
	return restart, err
}

// write is the RawConn.Write callback: sendmmsg until every message is
// sent or dropped, or the socket buffer is full (false: wait and call
// again).
func (l *Link) write(fd uintptr) bool {
	t := &l.tx
	for t.off < t.n {
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd,
			uintptr(unsafe.Pointer(&t.msgs[t.off])), uintptr(t.n-t.off), 0, 0, 0)
		switch {
		case e == 0 && r > 0:
			for _, m := range t.meta[t.off : t.off+int(r)] {
				t.sent += uint64(m.count)
				t.sentBytes += uint64(m.bytes)
			}
			t.off += int(r)
			continue
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return false
		case e == unix.EIO && t.meta[t.off].count > 1:
			// udp_send_skb: the device cannot checksum a GSO packet.
			t.gsoFail = t.off
			return true
		}
		// EMSGSIZE (beyond the path MTU), ENETUNREACH, EPERM (a
		// firewall), ...: drop the message and go on.
		t.dropped += uint64(t.meta[t.off].count)
		t.off++
	}
	return true
}

// putDst writes the socket address of dst:port into sa. It returns the
// address length, 0 when the socket cannot reach dst, and whether the
// datagram will be IPv4.
func (l *Link) putDst(sa *unix.RawSockaddrInet6, dst netip.Addr, port uint16) (uint32, bool) {
	if port == 0 {
		port = l.remotePort
	}
	if !l.v6 {
		dst = dst.Unmap()
		if !dst.Is4() {
			return 0, false
		}
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		s4.Family = unix.AF_INET
		putPort(&s4.Port, port)
		s4.Addr = dst.As4()
		return unix.SizeofSockaddrInet4, true
	}
	v4 := dst.Is4() || dst.Is4In6()
	if !dst.IsValid() || v4 && !l.dual {
		return 0, false
	}
	sa.Family = unix.AF_INET6
	putPort(&sa.Port, port)
	sa.Flowinfo = 0
	sa.Addr = dst.As16() // IPv4-mapped for IPv4
	sa.Scope_id = 0
	if !v4 && (dst.IsLinkLocalUnicast() || dst.IsLinkLocalMulticast()) {
		sa.Scope_id = l.zoneIndex(dst.Zone())
	}
	return unix.SizeofSockaddrInet6, v4
}

// zoneIndex returns the interface index of an IPv6 zone ("" means the
// bound address's).
//
// Preconditions: l.tx.mu is held.
func (l *Link) zoneIndex(zone string) uint32 {
	t := &l.tx
	switch zone {
	case "":
		return l.scope
	case t.zone:
		return t.zoneIdx
	}
	idx := uint32(0)
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		idx = uint32(n)
	} else if ifi, err := net.InterfaceByName(zone); err == nil {
		idx = uint32(ifi.Index)
	}
	t.zone, t.zoneIdx = zone, idx
	return idx
}

// putPktinfo writes the control message that makes the kernel send from
// src and returns its space.
func (l *Link) putPktinfo(b []byte, src netip.Addr) int {
	if !l.v6 {
		d := putCmsg(b, unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)
		pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&d[0]))
		*pi = unix.Inet4Pktinfo{Spec_dst: src.Unmap().As4()}
		return unix.CmsgSpace(unix.SizeofInet4Pktinfo)
	}
	d := putCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)
	pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&d[0]))
	*pi = unix.Inet6Pktinfo{Addr: src.As16()}
	return unix.CmsgSpace(unix.SizeofInet6Pktinfo)
}

// putCmsg writes a control message header at the start of b and returns
// the message's data bytes.
func putCmsg(b []byte, level, typ int32, dataLen int) []byte {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(dataLen))
	return b[unix.CmsgLen(0):unix.CmsgLen(dataLen)]
}

// iovEnd returns the address just past v's bytes.
func iovEnd(v *unix.Iovec) uintptr {
	return uintptr(unsafe.Pointer(v.Base)) + uintptr(v.Len)
}

func setIov(v *unix.Iovec, b []byte) {
	v.Base = &b[0]
	v.SetLen(len(b))
}

// putPort stores a port in network byte order into a sockaddr field.
func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

// getPort reads a port stored in network byte order.
func getPort(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}
