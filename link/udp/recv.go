package udp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// rxPending is a received datagram (GRO: possibly several coalesced) whose
// segments have not all been handed to the caller.
type rxPending struct {
	buf           int // index of the internal buffer
	off, end, seg int
	net           wire.Net
}

// rxState is the reused state of Recv.
type rxState struct {
	// mu serialises Recv (callers call it from one goroutine at a time;
	// the mutex makes misuse harmless). It guards every field below.
	mu sync.Mutex

	msgs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	ctrl  []byte // ctrlSize bytes per message

	// GRO: datagrams land in bufs (groBufSize each) and wait in
	// pend[ph:pn] until copied out.
	gro    bool
	bufs   []byte
	pend   []rxPending
	ph, pn int

	// The read callback's input and results.
	want, got int
	block     bool
	errno     syscall.Errno
	// try: the read is TryRecv's, which never waits.
	try bool
	// stale: messages [0, stale) may have been changed by recvmmsg
	// since reset prepared them.
	stale int
	// lent: the iovecs of messages [0, lent) point at buffers a
	// TryRecvBulk caller lent (lendIovs), not at the link's own.
	lent int
}

func (r *rxState) init(batch int, gro bool) {
	r.msgs = make([]unix.Mmsghdr, batch)
	r.iovs = make([]unix.Iovec, batch)
	r.names = make([]unix.RawSockaddrInet6, batch)
	r.ctrl = make([]byte, batch*ctrlSize)
	r.gro = gro
	if gro {
		r.bufs = make([]byte, batch*groBufSize)
		r.pend = make([]rxPending, batch)
		for i := range r.iovs {
			setIov(&r.iovs[i], r.bufs[i*groBufSize:(i+1)*groBufSize])
		}
	}
	for i := range r.msgs {
		h := &r.msgs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Iov = &r.iovs[i]
		h.SetIovlen(1)
	}
	r.stale = batch
	r.reset()
}

// reset prepares every message for recvmmsg, which overwrites the
// lengths and flags of the messages it fills, and only those: reset
// prepares again just the messages filled since it last ran (a busy
// poller calls with nothing to read a million times a second).
func (r *rxState) reset() {
	for i := range r.msgs[:r.stale] {
		h := &r.msgs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.Flags = 0
		h.Control = &r.ctrl[i*ctrlSize]
		h.SetControllen(ctrlSize)
	}
	r.stale = 0
}

// Recv blocks until at least one packet arrives, then stores up to
// len(pkts) packets in the callers' buffers (each resliced to the
// packet's length, Net filled) and returns how many. A datagram larger
// than its buffer's capacity is dropped and counted as RxTruncated.
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	r := &l.rx
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	if r.gro {
		return l.recvGRO(pkts)
	}
	return l.recvDirect(pkts)
}

// TryRecv is Recv without the wait (link.Poller): it returns what is
// queued, up to len(pkts), or 0 at once when nothing is. It also returns
// 0 when another goroutine is in Recv or TryRecv. It uses the socket
// without Go's poller, so it neither waits for nor consumes a readiness
// notification: a goroutine in WaitReadable is woken by every datagram
// that arrives, whoever reads it.
func (l *Link) TryRecv(pkts []link.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	r := &l.rx
	if !r.mu.TryLock() {
		return 0, nil
	}
	defer r.mu.Unlock()
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	r.try = true
	defer func() { r.try = false }()
	// Read until pkts is full or a read found the socket empty, so that
	// fewer than len(pkts) means nothing more was queued (link.Poller).
	total := 0
	for total < len(pkts) {
		var k int
		var err error
		if r.gro {
			k, err = l.recvGRO(pkts[total:])
		} else {
			k, err = l.recvDirect(pkts[total:])
		}
		total += k
		if err != nil {
			if total > 0 {
				return total, nil // the error comes back on the next call
			}
			return 0, err
		}
		// The last recvmmsg filled every message it offered (a run of
		// truncated datagrams, or segments left to hand out): there may
		// be more.
		if r.got < r.want && r.ph >= r.pn {
			break
		}
	}
	return total, nil
}

// Coalesces reports whether the socket receives with GRO, so that a
// datagram may carry several packets (link.BulkReceiver).
func (l *Link) Coalesces() bool { return l.gro }

// TryRecvBulk is TryRecv into the caller's buffers (link.BulkReceiver):
// recvmmsg writes each datagram, coalesced or not, into the next of bufs,
// and its segments are handed out as slices of it, not copied. A segment
// longer than link.MaxPacketSize is dropped and counted as RxTruncated,
// as Recv drops one that does not fit the caller's buffer. Segments
// left over from an earlier Recv or TryRecv are copied into the first
// buffers, before anything new is read.
func (l *Link) TryRecvBulk(bufs [][]byte, pkts []link.Packet, in []int) (int, int, error) {
	r := &l.rx
	if len(bufs) == 0 || len(pkts) == 0 || !r.mu.TryLock() {
		return 0, 0, nil
	}
	defer r.mu.Unlock()
	if l.closed.Load() {
		return 0, 0, net.ErrClosed
	}
	r.try = true
	defer func() { r.try = false }()
	nb, np := l.drainBulk(bufs, pkts, in)
	for nb < len(bufs) && len(pkts)-np >= link.MaxBulkSegments {
		want := min(len(bufs)-nb, (len(pkts)-np)/link.MaxBulkSegments, len(r.msgs))
		l.lendIovs(bufs[nb : nb+want])
		r.reset()
		err := l.recvmmsg(want, false)
		if err != nil {
			if nb > 0 {
				break // the error comes back on the next call
			}
			return 0, 0, err
		}
		bytes, trunc, n0 := 0, 0, np
		for i := range r.got {
			h := &r.msgs[i]
			if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
				trunc++
				continue
			}
			var nt wire.Net
			seg := l.parseMsg(i, &nt)
			b := bufs[nb+i][:h.Len]
			if seg <= 0 {
				seg = len(b)
			}
			for off := 0; off < len(b); off += seg {
				if np == len(pkts) {
					trunc++ // more segments than the kernel coalesces
					break
				}
				p := b[off:min(off+seg, len(b))]
				if len(p) > link.MaxPacketSize {
					trunc++ // no InfiniBand packet is this long
					continue
				}
				pkts[np] = link.Packet{Buf: p, Net: nt}
				in[np] = nb + i
				np++
				bytes += len(p)
			}
		}
		l.countRx(np-n0, bytes, trunc)
		nb += r.got
		if r.got < want {
			break // nothing more queued
		}
	}
	return nb, np, nil
}

// lendIovs points the first len(bufs) messages at the caller's buffers
// for TryRecvBulk. They stay lent after the read (a busy poller calls
// TryRecvBulk again and again with the same buffers, and pointing 16
// iovecs there and back cost more than the empty read); recvGRO takes
// them back (restoreIovs) before it reads into the link's own buffers.
//
// Preconditions: l.rx.mu is held.
func (l *Link) lendIovs(bufs [][]byte) {
	r := &l.rx
	iovs := r.iovs[:len(bufs)]
	for k := range iovs {
		// An iovec whose base is the buffer's was lent it at
		// BulkBufSize bytes: restoreIovs points only at the link's own
		// buffers, never at a caller's.
		if iovs[k].Base != unsafe.SliceData(bufs[k]) {
			setIov(&iovs[k], bufs[k][:link.BulkBufSize])
		}
	}
	r.lent = max(r.lent, len(bufs))
}

// restoreIovs points the messages TryRecvBulk lent back at the link's
// own GRO buffers.
//
// Preconditions: l.rx.mu is held.
func (l *Link) restoreIovs() {
	r := &l.rx
	for i := range r.lent {
		if r.gro {
			setIov(&r.iovs[i], r.bufs[i*groBufSize:(i+1)*groBufSize])
		} else {
			r.iovs[i] = unix.Iovec{}
		}
	}
	r.lent = 0
}

// drainBulk copies the segments an earlier Recv or TryRecv left pending
// into bufs, packed, and returns how many buffers and packets it used.
//
// Preconditions: l.rx.mu is held.
func (l *Link) drainBulk(bufs [][]byte, pkts []link.Packet, in []int) (int, int) {
	r := &l.rx
	nb, np, off, bytes, trunc := 0, 0, 0, 0, 0
	for np < len(pkts) {
		seg, p := r.nextPending()
		if p == nil {
			break
		}
		if len(seg) > link.MaxPacketSize {
			r.takePending(p, len(seg))
			trunc++ // no InfiniBand packet is this long
			continue
		}
		if off+len(seg) > link.BulkBufSize {
			if nb+1 == len(bufs) {
				break // every buffer is full
			}
			nb, off = nb+1, 0
		}
		r.takePending(p, len(seg))
		dst := bufs[nb][off : off+len(seg)]
		copy(dst, seg)
		pkts[np] = link.Packet{Buf: dst, Net: p.net}
		in[np] = nb
		np++
		off += len(seg)
		bytes += len(seg)
	}
	if off > 0 {
		nb++
	}
	l.countRx(np, bytes, trunc)
	return nb, np
}

// nextPending returns the next segment an earlier read left pending and
// the datagram it is in, or nil, nil when none is.
//
// Preconditions: l.rx.mu is held.
func (r *rxState) nextPending() ([]byte, *rxPending) {
	if r.ph >= r.pn {
		return nil, nil
	}
	p := &r.pend[r.ph]
	end := p.end
	if p.seg > 0 && p.off+p.seg < end {
		end = p.off + p.seg
	}
	return r.bufs[p.buf*groBufSize+p.off : p.buf*groBufSize+end], p
}

// takePending consumes n bytes, the segment nextPending returned, of
// pending datagram p.
//
// Preconditions: l.rx.mu is held.
func (r *rxState) takePending(p *rxPending, n int) {
	p.off += n
	if p.off >= p.end {
		r.ph++
	}
}

// WaitReadable calls ready whenever datagrams may be queued on the socket
// (or segments of a coalesced datagram an earlier read took wait to be
// handed out): once at once, then after each notification from Go's
// poller. It returns when ready returns true, or with net.ErrClosed when
// the link is closed (link.Poller). ready typically calls TryRecv. One
// goroutine waits at a time.
//
// No datagram is missed: the poller forgets earlier notifications when
// the wait starts, and ready runs before the goroutine is first parked,
// so anything that arrives after ready last read the socket notifies it.
// A ready that leaves datagrams queued (a full batch) must read again
// before returning false.
func (l *Link) WaitReadable(ready func() bool) error {
	l.waitMu.Lock()
	defer l.waitMu.Unlock()
	if l.closed.Load() {
		return net.ErrClosed
	}
	l.ready = ready
	defer func() { l.ready = nil }()
	if err := l.rc.Read(l.readableFn); err != nil {
		return l.closedErr(err)
	}
	return nil
}

// readable is WaitReadable's RawConn.Read callback.
func (l *Link) readable(uintptr) bool { return l.ready() }

// recvDirect receives with recvmmsg straight into the caller's buffers.
//
// Preconditions: l.rx.mu is held.
func (l *Link) recvDirect(pkts []link.Packet) (int, error) {
	r := &l.rx
	want := min(len(pkts), len(r.msgs))
	for {
		for i := range want {
			b := pkts[i].Buf[:cap(pkts[i].Buf)]
			if len(b) == 0 {
				r.iovs[i] = unix.Iovec{}
			} else {
				setIov(&r.iovs[i], b)
			}
		}
		r.reset()
		if err := l.recvmmsg(want, true); err != nil {
			return 0, err
		}
		n, bytes, trunc := 0, 0, 0
		for i := range r.got {
			h := &r.msgs[i]
			size := int(h.Len)
			if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
				trunc++
				continue
			}
			b := pkts[i].Buf[:size]
			if n != i {
				// An earlier datagram was dropped: move this one up, so
				// that the packets stay contiguous and every buffer stays
				// in the caller's slot.
				dst := pkts[n].Buf[:cap(pkts[n].Buf)]
				if size > len(dst) {
					trunc++
					continue
				}
				b = dst[:copy(dst, b)]
			}
			pkts[n].Buf = b
			l.parseMsg(i, &pkts[n].Net)
			n++
			bytes += size
		}
		for i := range r.iovs[:want] {
			r.iovs[i].Base = nil
		}
		l.countRx(n, bytes, trunc)
		if n > 0 || r.try {
			return n, nil
		}
	}
}

// recvGRO receives into the link's buffers and copies segments out.
//
// Preconditions: l.rx.mu is held.
func (l *Link) recvGRO(pkts []link.Packet) (int, error) {
	r := &l.rx
	if r.lent > 0 {
		l.restoreIovs()
	}
	n := l.drain(pkts, 0)
	for n < len(pkts) {
		// Every pending segment has been copied out: all buffers are free.
		want := min(len(pkts)-n, len(r.msgs))
		r.reset()
		if err := l.recvmmsg(want, n == 0); err != nil {
			if n > 0 {
				break // the error comes back on the next call
			}
			return 0, err
		}
		if r.got == 0 {
			break // nothing more without blocking
		}
		r.ph, r.pn = 0, 0
		trunc := 0
		for i := range r.got {
			h := &r.msgs[i]
			if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
				trunc++
				continue
			}
			p := &r.pend[r.pn]
			r.pn++
			p.buf, p.off, p.end = i, 0, int(h.Len)
			p.seg = l.parseMsg(i, &p.net)
		}
		l.countRx(0, 0, trunc)
		n = l.drain(pkts, n)
		if n > 0 {
			break
		}
	}
	return n, nil
}

// drain copies pending segments into pkts[n:] and returns the new n.
//
// Preconditions: l.rx.mu is held.
func (l *Link) drain(pkts []link.Packet, n int) int {
	r := &l.rx
	bytes, trunc, n0 := 0, 0, n
	for n < len(pkts) {
		seg, p := r.nextPending()
		if p == nil {
			break
		}
		r.takePending(p, len(seg))
		dst := pkts[n].Buf[:cap(pkts[n].Buf)]
		if len(seg) > len(dst) {
			trunc++
			continue
		}
		pkts[n].Buf = dst[:copy(dst, seg)]
		pkts[n].Net = p.net
		n++
		bytes += len(seg)
	}
	l.countRx(n-n0, bytes, trunc)
	return n
}

func (l *Link) countRx(n, bytes, trunc int) {
	if n > 0 {
		l.rxPackets.Add(uint64(n))
		l.rxBytes.Add(uint64(bytes))
	}
	if trunc > 0 {
		l.rxTruncate.Add(uint64(trunc))
	}
}

// recvmmsg receives up to want messages into the prepared arrays,
// waiting for the first one if block is set.
//
// Preconditions: l.rx.mu is held.
func (l *Link) recvmmsg(want int, block bool) error {
	r := &l.rx
	r.want, r.block, r.got, r.errno = want, block && !r.try, 0, 0
	if r.try {
		// Straight on the descriptor, bypassing Go's poller (whose read
		// lock a waiting WaitReadable holds); Control keeps the
		// descriptor open meanwhile.
		if err := l.rc.Control(l.tryReadFn); err != nil {
			return l.closedErr(err)
		}
	} else if err := l.rc.Read(l.readFn); err != nil {
		return l.closedErr(err)
	}
	if r.errno != 0 {
		return fmt.Errorf("link/udp: recvmmsg: %w", r.errno)
	}
	return nil
}

// read is the RawConn.Read callback.
func (l *Link) read(fd uintptr) bool {
	r := &l.rx
	for {
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd,
			uintptr(unsafe.Pointer(&r.msgs[0])), uintptr(r.want), 0, 0, 0)
		switch e {
		case 0:
			r.got = int(n)
			r.stale = max(r.stale, r.got)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return !r.block
		default:
			r.errno = e
			return true
		}
	}
}

// tryRead is TryRecv's RawConn.Control callback.
func (l *Link) tryRead(fd uintptr) { l.read(fd) }

// parseMsg fills n from message i's source address and control messages
// (the destination address with a wildcard bind, the traffic class) and
// returns the GRO segment size (0: a single datagram).
//
// Preconditions: l.rx.mu is held.
func (l *Link) parseMsg(i int, n *wire.Net) (seg int) {
	r := &l.rx
	sa := &r.names[i]
	var src netip.Addr
	var sport uint16
	switch sa.Family {
	case unix.AF_INET:
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		src, sport = netip.AddrFrom4(s4.Addr), getPort(&s4.Port)
	case unix.AF_INET6:
		src, sport = netip.AddrFrom16(sa.Addr).Unmap(), getPort(&sa.Port)
	}
	dst := l.local.Addr()
	var tc, hop uint8
	h := &r.msgs[i].Hdr
	if h.Controllen > 0 {
		c := r.ctrl[i*ctrlSize : i*ctrlSize+min(int(h.Controllen), ctrlSize)]
		for len(c) >= unix.SizeofCmsghdr {
			ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			cl := int(ch.Len)
			if cl < unix.SizeofCmsghdr || cl > len(c) {
				break
			}
			d := c[unix.CmsgLen(0):cl]
			switch {
			case ch.Level == unix.IPPROTO_UDP && ch.Type == unix.UDP_GRO && len(d) >= 4:
				seg = int(binary.NativeEndian.Uint32(d))
			case ch.Level == unix.IPPROTO_IP && ch.Type == unix.IP_PKTINFO && len(d) >= unix.SizeofInet4Pktinfo:
				pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&d[0]))
				dst = netip.AddrFrom4(pi.Addr)
			case ch.Level == unix.IPPROTO_IPV6 && ch.Type == unix.IPV6_PKTINFO && len(d) >= unix.SizeofInet6Pktinfo:
				pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&d[0]))
				dst = netip.AddrFrom16(pi.Addr).Unmap()
			case ch.Level == unix.IPPROTO_IP && ch.Type == unix.IP_TOS && len(d) >= 1:
				tc = d[0]
			case ch.Level == unix.IPPROTO_IPV6 && ch.Type == unix.IPV6_TCLASS && len(d) >= 4:
				tc = uint8(binary.NativeEndian.Uint32(d))
			case ch.Level == unix.IPPROTO_IP && ch.Type == unix.IP_TTL && len(d) >= 4:
				hop = uint8(binary.NativeEndian.Uint32(d))
			case ch.Level == unix.IPPROTO_IPV6 && ch.Type == unix.IPV6_HOPLIMIT && len(d) >= 4:
				hop = uint8(binary.NativeEndian.Uint32(d))
			}
			next := unix.CmsgSpace(cl - unix.SizeofCmsghdr)
			if next >= len(c) {
				break
			}
			c = c[next:]
		}
	}
	*n = wire.Net{Src: src, Dst: dst, SrcPort: sport, DstPort: l.local.Port(), TrafficClass: tc, HopLimit: hop, DontFragment: true}
	return seg
}
