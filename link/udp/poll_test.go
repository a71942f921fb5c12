package udp_test

import (
	"bytes"
	"time"

	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/wire"
)

// TestTryRecv: TryRecv returns 0 at once on an empty socket, then the
// packets that arrive, in order and intact, with or without GRO; segments
// of a coalesced datagram that did not fit are returned by the next call.
func TestTryRecv(t *testing.T) {
	t.Parallel()
	for _, o := range offloads {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			a := open(t, udp.Config{Addr: lo4, GSO: o.gso})
			b := open(t, udp.Config{Addr: lo4, GRO: o.gro})
			pkts := recvBufs(2)
			n, err := b.TryRecv(pkts)
			require.NoError(t, err)
			require.Zero(t, n, "nothing was sent")

			nf := netFor(t, a, b)
			var sent []link.Packet
			for i := range 5 {
				sent = append(sent, sized(&nf, 9, i, 300))
			}
			require.NoError(t, a.Send(sent))
			var p wire.Packet
			psn := 0
			for psn < len(sent) {
				// WaitReadable must not block while packets are queued
				// or GRO segments wait (the watchdog turns a hang into a
				// failure).
				k := tryRecvWait(t, b, pkts)
				for _, lp := range pkts[:k] {
					nn := lp.Net
					require.Equal(t, wire.DropNone, wire.ParseDatagram(lp.Buf, &nn, &p))
					require.Equal(t, psn, int(p.BTH.PSN()), "in order")
					checkPayload(t, got{qp: p.BTH.DestQP(), psn: psn, op: p.BTH.OpCode(), payload: p.Payload})
					psn++
				}
			}
			for i := range pkts {
				pkts[i].Buf = pkts[i].Buf[:cap(pkts[i].Buf)]
			}
			n, err = b.TryRecv(pkts)
			require.NoError(t, err)
			require.Zero(t, n, "everything was read")
			require.Equal(t, uint64(len(sent)), b.Stats().RxPackets)
		})
	}
}

// TestWaitReadable: WaitReadable calls ready at once, again for each
// packet that arrives after ready last read, and returns when ready
// returns true; Close wakes it with net.ErrClosed, and TryRecv on a
// closed link fails the same way.
func TestWaitReadable(t *testing.T) {
	t.Parallel()
	a := open(t, udp.Config{Addr: lo4})
	b, err := udp.Open(udp.Config{Addr: lo4, GRO: true})
	require.NoError(t, err)
	nf := netFor(t, a, b)
	pkts := recvBufs(4)
	calls, got := 0, 0
	// ready reads what is queued; it asks to go on waiting until three
	// packets were read, and lets the test send the next one after each
	// call: every packet arrives while WaitReadable waits.
	sendNext := make(chan struct{}, 8)
	ready := func() bool {
		calls++
		for i := range pkts {
			pkts[i].Buf = pkts[i].Buf[:cap(pkts[i].Buf)]
		}
		n, err := b.TryRecv(pkts)
		require.NoError(t, err)
		got += n
		if got < 3 {
			sendNext <- struct{}{}
		}
		return got == 3
	}
	go func() {
		for psn := range 3 {
			<-sendNext
			if a.Send([]link.Packet{sized(&nf, 3, psn, 200)}) != nil {
				return
			}
		}
	}()
	require.NoError(t, b.WaitReadable(ready))
	require.Equal(t, 3, got)
	require.GreaterOrEqual(t, calls, 4, "one call at once, then one per packet at least")

	woke := make(chan error, 1)
	go func() { woke <- b.WaitReadable(func() bool { return false }) }()
	require.NoError(t, b.Close())
	require.True(t, isClosed(<-woke), "Close wakes WaitReadable with net.ErrClosed")
	_, err = b.TryRecv(pkts)
	require.True(t, isClosed(err))
	require.True(t, isClosed(b.WaitReadable(func() bool { return true })))
}

// TestRecvVaryingBatch: reads with batches of different sizes, blocking
// and not, keep every datagram's control messages (the GRO segment size)
// intact: the message headers any earlier read filled are prepared again
// before the next, whatever its size. The sequence is the one that broke
// it: a read that takes two datagrams (the second without control
// messages), a read of one, then a read whose second datagram is a
// coalesced run.
func TestRecvVaryingBatch(t *testing.T) {
	t.Parallel()
	a := open(t, udp.Config{Addr: lo4, GSO: true})
	b := open(t, udp.Config{Addr: lo4, GRO: true})
	nf := netFor(t, a, b)
	psn := 0
	send := func(n, size int) {
		var run []link.Packet
		for range n {
			run = append(run, sized(&nf, 5, psn+len(run), size))
		}
		require.NoError(t, a.Send(run))
	}
	var p wire.Packet
	next := 0 // the next PSN expected
	read := func(slots int, try bool, want int) {
		got := 0
		for got < want {
			pkts := recvBufs(slots)
			var k int
			var err error
			if try {
				k = tryRecvWait(t, b, pkts)
			} else {
				k, err = b.Recv(pkts)
			}
			require.NoError(t, err)
			for _, lp := range pkts[:k] {
				nn := lp.Net
				require.Equal(t, wire.DropNone, wire.ParseDatagram(lp.Buf, &nn, &p), "PSN %d", next)
				require.Equal(t, next, int(p.BTH.PSN()))
				next++
				got++
			}
		}
	}
	for round := range 20 {
		try := round%2 == 1
		send(1, 300)
		psn++
		send(1, 200)
		psn++
		read(8, try, 2)
		send(1, 300)
		psn++
		read(1, try, 1)
		send(1, 300)
		psn++
		send(3, 600)
		psn += 3
		read(8, try, 4)
	}
}

// tryRecvWait reads with TryRecv inside WaitReadable, as a transport
// does, until it gets packets; it closes b if that takes longer than the
// watchdog (a missed packet then fails instead of hanging).
func tryRecvWait(t *testing.T, b *udp.Link, pkts []link.Packet) int {
	t.Helper()
	guard := time.AfterFunc(watchdog, func() { b.Close() })
	defer guard.Stop()
	n := 0
	var rerr error
	err := b.WaitReadable(func() bool {
		for i := range pkts {
			pkts[i].Buf = pkts[i].Buf[:cap(pkts[i].Buf)]
		}
		n, rerr = b.TryRecv(pkts)
		return n > 0 || rerr != nil
	})
	require.NoError(t, err, "WaitReadable blocked with packets queued")
	require.NoError(t, rerr)
	return n
}

// TestTryRecvBulk: with GRO, a GSO run arrives as one datagram in one of
// the caller's buffers, and its packets are handed out as slices of that
// buffer (no copy), in order, with IPv4 IDs 0, 1, 2, ... recoverable from
// their ICRCs; segments a TryRecv left pending come first, copied. A link
// without GRO does not coalesce (Coalesces).
func TestTryRecvBulk(t *testing.T) {
	t.Parallel()
	require.False(t, open(t, udp.Config{Addr: lo4}).Coalesces())
	a := open(t, udp.Config{Addr: lo4, GSO: true})
	b := open(t, udp.Config{Addr: lo4, GRO: true})
	require.True(t, b.Coalesces())
	nf := netFor(t, a, b)
	var sent []link.Packet
	for i := range 20 {
		sent = append(sent, sized(&nf, 9, i, 1500))
	}
	sent = append(sent, sized(&nf, 9, 20, 700)) // a shorter last segment ends the run
	require.NoError(t, a.Send(sent[:10]))
	// A TryRecv of two packets leaves the rest of the first run pending.
	pkts := recvBufs(2)
	require.Equal(t, 2, tryRecvWait(t, b, pkts))
	require.NoError(t, a.Send(sent[10:]))

	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, link.BulkBufSize)
	}
	bp := make([]link.Packet, 4*link.MaxBulkSegments)
	in := make([]int, len(bp))
	within := func(p, buf []byte) bool {
		return &p[0] == &buf[cap(buf)-cap(p)] // p is a slice of buf
	}
	var p wire.Packet
	psn := 2
	for psn < len(sent) {
		nb, np := tryRecvBulkWait(t, b, bufs, bp, in)
		require.LessOrEqual(t, nb, len(bufs))
		for i, lp := range bp[:np] {
			require.Less(t, in[i], nb)
			require.True(t, within(lp.Buf, bufs[in[i]]), "packet %d lies in the buffer in names", psn)
			if i > 0 && psn > 10 {
				require.Equal(t, in[i-1], in[i], "one GSO run, one datagram")
			}
			nn := lp.Net
			require.Equal(t, wire.DropNone, wire.ParseDatagram(lp.Buf, &nn, &p), "packet %d", psn)
			require.Equal(t, psn, int(p.BTH.PSN()), "in order")
			require.Equal(t, len(sent[psn].Buf), len(lp.Buf))
			checkPayload(t, got{qp: p.BTH.DestQP(), psn: psn, op: p.BTH.OpCode(), payload: p.Payload})
			if psn >= 10 {
				require.Equal(t, uint16(psn-10), p.Net.ID, "segment %d of the second run", psn-10)
			}
			psn++
		}
	}
	nb, np, err := b.TryRecvBulk(bufs, bp, in)
	require.NoError(t, err)
	require.Zero(t, nb+np, "everything was read")
	require.Equal(t, uint64(len(sent)), b.Stats().RxPackets)
	require.NoError(t, b.Close())
	_, _, err = b.TryRecvBulk(bufs, bp, in)
	require.True(t, isClosed(err))
}

// TestTryRecvBulkOversize: a datagram longer than any InfiniBand packet
// (link.MaxPacketSize) is dropped and counted as RxTruncated, as Recv
// drops one that does not fit its buffer; the packets around it arrive.
func TestTryRecvBulkOversize(t *testing.T) {
	t.Parallel()
	a := open(t, udp.Config{Addr: lo4})
	b := open(t, udp.Config{Addr: lo4, GRO: true})
	n := netFor(t, a, b)
	require.NoError(t, a.Send([]link.Packet{sized(&n, 1, 0, 300), sized(&n, 1, 1, link.MaxPacketSize+1), sized(&n, 1, 2, 300)}))
	bufs := [][]byte{make([]byte, link.BulkBufSize), make([]byte, link.BulkBufSize), make([]byte, link.BulkBufSize)}
	bp := make([]link.Packet, 3*link.MaxBulkSegments)
	in := make([]int, len(bp))
	var psns []int
	var p wire.Packet
	for len(psns) < 2 {
		_, np := tryRecvBulkWait(t, b, bufs, bp, in)
		for _, lp := range bp[:np] {
			nn := lp.Net
			require.Equal(t, wire.DropNone, wire.ParseDatagram(lp.Buf, &nn, &p))
			psns = append(psns, int(p.BTH.PSN()))
		}
	}
	require.Equal(t, []int{0, 2}, psns)
	require.Equal(t, uint64(1), b.Stats().RxTruncated)
	require.Equal(t, uint64(2), b.Stats().RxPackets)
}

// TestTryRecvBulkLentBuffers: the buffers a TryRecvBulk lent stay its
// caller's: a Recv or TryRecv afterwards reads into the link's own
// buffers and never writes to them, and a later TryRecvBulk with other
// buffers reads into those.
func TestTryRecvBulkLentBuffers(t *testing.T) {
	t.Parallel()
	a := open(t, udp.Config{Addr: lo4, GSO: true})
	b := open(t, udp.Config{Addr: lo4, GRO: true})
	n := netFor(t, a, b)
	newBufs := func() [][]byte {
		bufs := make([][]byte, 2)
		for i := range bufs {
			bufs[i] = bytes.Repeat([]byte{0xa5}, link.BulkBufSize)
		}
		return bufs
	}
	bp := make([]link.Packet, 2*link.MaxBulkSegments)
	in := make([]int, len(bp))
	var p wire.Packet
	// bulk reads one packet with TryRecvBulk into bufs and checks that
	// it is psn and lies in them.
	bulk := func(bufs [][]byte, psn int) {
		t.Helper()
		_, np := tryRecvBulkWait(t, b, bufs, bp, in)
		require.Equal(t, 1, np)
		require.Same(t, &bufs[in[0]][0], &bp[0].Buf[0])
		nn := bp[0].Net
		require.Equal(t, wire.DropNone, wire.ParseDatagram(bp[0].Buf, &nn, &p))
		require.Equal(t, psn, int(p.BTH.PSN()))
	}
	first := newBufs()
	require.NoError(t, a.Send([]link.Packet{sized(&n, 1, 0, 300)}))
	bulk(first, 0)
	for i := range first {
		for j := range first[i] {
			first[i][j] = 0x5a
		}
	}
	require.NoError(t, a.Send([]link.Packet{sized(&n, 1, 1, 300)}))
	pkts := recvBufs(2)
	require.Equal(t, 1, tryRecvWait(t, b, pkts))
	nn := pkts[0].Net
	require.Equal(t, wire.DropNone, wire.ParseDatagram(pkts[0].Buf, &nn, &p))
	require.Equal(t, 1, int(p.BTH.PSN()))
	for i := range first {
		require.Equal(t, -1, bytes.IndexFunc(first[i], func(r rune) bool { return r != 0x5a }), "buffer %d lent before was written", i)
	}
	require.NoError(t, a.Send([]link.Packet{sized(&n, 1, 2, 300)}))
	bulk(newBufs(), 2)
}

// tryRecvBulkWait waits until a TryRecvBulk into bufs returns packets and
// returns how many buffers and packets it filled.
func tryRecvBulkWait(t *testing.T, b *udp.Link, bufs [][]byte, pkts []link.Packet, in []int) (nb, np int) {
	t.Helper()
	guard := time.AfterFunc(watchdog, func() { b.Close() })
	defer guard.Stop()
	require.NoError(t, b.WaitReadable(func() bool {
		var err error
		nb, np, err = b.TryRecvBulk(bufs, pkts, in)
		require.NoError(t, err)
		return np > 0
	}))
	return nb, np
}
