package udp_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/wire"
)

// TestRoundTrip sends batches of real RoCEv2 packets of mixed sizes over
// IPv4 and IPv6 loopback, with every offload combination, and checks that
// they arrive complete, in order, with good ICRCs and the right
// addresses.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	// Packet sizes: -1 is an ACK; the runs of equal sizes make GSO
	// super-packets, the odd sizes end runs.
	var sizes []int
	sizes = append(sizes, -1, 0, 1, 3, 4, 255, 1024)
	for range 4 {
		sizes = append(sizes, 4096)
	}
	sizes = append(sizes, 100, -1, -1, -1)
	for range 20 {
		sizes = append(sizes, 4096)
	}
	sizes = append(sizes, 2000)
	for range 70 {
		sizes = append(sizes, 1000)
	}
	sizes = append(sizes, 17, 4096)
	chunks := []int{1, 7, 64, 3, len(sizes)} // the last one is what is left

	for _, fam := range []struct {
		name string
		addr netip.AddrPort
	}{{"ipv4", lo4}, {"ipv6", lo6}} {
		for _, o := range offloads {
			t.Run(fam.name+"/"+o.name, func(t *testing.T) {
				t.Parallel()
				a := open(t, udp.Config{Addr: fam.addr, GSO: o.gso, GRO: o.gro})
				b := open(t, udp.Config{Addr: fam.addr, GSO: o.gso, GRO: o.gro})
				n := netFor(t, a, b)
				pkts := make([]link.Packet, len(sizes))
				total := 0
				for i, s := range sizes {
					pkts[i] = packet(&n, 0x42, i, s)
					total += len(pkts[i].Buf)
				}
				for i, c := range chunks {
					if i == len(chunks)-1 || c > len(pkts) {
						c = len(pkts)
					}
					require.NoError(t, a.Send(pkts[:c]))
					pkts = pkts[c:]
				}
				out := receive(t, b, len(sizes), 16)
				for i, g := range out {
					require.Equal(t, i, g.psn, "order")
					require.Equal(t, n.Src, g.net.Src)
					require.Equal(t, n.SrcPort, g.net.SrcPort)
					require.Equal(t, n.Dst, g.net.Dst)
					require.Equal(t, n.DstPort, g.net.DstPort)
					require.True(t, g.net.DontFragment)
					require.Zero(t, g.net.ID)
					if sizes[i] < 0 {
						require.Equal(t, wire.RCAcknowledge, g.op)
					} else {
						require.Len(t, g.payload, sizes[i])
						checkPayload(t, g)
					}
				}
				sa, sb := a.Stats(), b.Stats()
				require.Equal(t, uint64(len(sizes)), sa.TxPackets)
				require.Equal(t, uint64(total), sa.TxBytes)
				require.Zero(t, sa.TxDropped)
				require.Equal(t, uint64(len(sizes)), sb.RxPackets)
				require.Equal(t, uint64(total), sb.RxBytes)
				require.Zero(t, sb.RxTruncated)
			})
		}
	}
}

// TestGSORun: a run of 40 equal 1100-byte packets and a shorter last one
// leaves as one GSO super-packet and arrives complete and in order, with
// GRO on and off. For IPv4 the kernel numbers the segments' IP IDs
// 0, 1, 2, ...; the ICRC of segment k must be the one for ID k, which
// ParseDatagram recovers.
func TestGSORun(t *testing.T) {
	t.Parallel()
	for _, fam := range []struct {
		name string
		addr netip.AddrPort
	}{{"ipv4", lo4}, {"ipv6", lo6}} {
		for _, gro := range []bool{false, true} {
			name := fam.name + "/gro=off"
			if gro {
				name = fam.name + "/gro=on"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				a := open(t, udp.Config{Addr: fam.addr, GSO: true})
				b := open(t, udp.Config{Addr: fam.addr, GRO: gro})
				require.True(t, a.Info().GSO, "this kernel offers UDP_SEGMENT")
				require.Equal(t, gro, b.Info().GRO)
				n := netFor(t, a, b)
				var pkts []link.Packet
				for i := range 40 {
					pkts = append(pkts, sized(&n, 7, i, 1100))
				}
				pkts = append(pkts, sized(&n, 7, 40, 516))
				require.NoError(t, a.Send(pkts))
				out := receive(t, b, len(pkts), 64)
				for i, g := range out {
					require.Equal(t, i, g.psn)
					require.Equal(t, len(pkts[i].Buf), g.size)
					checkPayload(t, g)
					if fam.addr.Addr().Is4() {
						require.Equal(t, uint16(i), g.id, "segment %d's ICRC is for IP ID %d", i, i)
					}
				}
				require.Equal(t, uint64(41), a.Stats().TxPackets)
				require.True(t, a.Info().GSO, "GSO still on")
			})
		}
	}
}

// TestInfo: Info reports the offloads and options in effect.
func TestInfo(t *testing.T) {
	t.Parallel()
	for _, o := range offloads {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			l4 := open(t, udp.Config{Addr: lo4, GSO: o.gso, GRO: o.gro})
			i4 := l4.Info()
			require.Equal(t, o.gso, i4.GSO)
			require.Equal(t, o.gro, i4.GRO)
			require.Equal(t, 64, i4.BatchSize)
			require.Equal(t, 64, i4.GSOMaxSegments)
			require.Equal(t, 65000, i4.GSOMaxBytes)
			require.Equal(t, !o.gso, i4.NoUDPChecksum, "SO_NO_CHECK exactly when GSO is off")
			require.False(t, i4.DualStack)
			require.False(t, i4.PacketInfo)
			require.Positive(t, i4.RecvBuffer)
			require.Positive(t, i4.SendBuffer)
			if os.Geteuid() == 0 {
				require.GreaterOrEqual(t, i4.RecvBuffer, 4<<20)
				require.GreaterOrEqual(t, i4.SendBuffer, 4<<20)
			}

			l6 := open(t, udp.Config{Addr: lo6, GSO: o.gso, GRO: o.gro, BatchSize: 8})
			i6 := l6.Info()
			require.Equal(t, o.gso, i6.GSO)
			require.Equal(t, o.gro, i6.GRO)
			require.Equal(t, 8, i6.BatchSize)
			require.False(t, i6.NoUDPChecksum, "IPv6 carries a checksum")
		})
	}
	w := open(t, udp.Config{Addr: netip.MustParseAddrPort("0.0.0.0:0")})
	require.True(t, w.Info().PacketInfo)
	require.False(t, w.Info().DualStack)
	d := open(t, udp.Config{Addr: netip.MustParseAddrPort("[::]:0")})
	require.True(t, d.Info().PacketInfo)
	require.True(t, d.Info().DualStack)

	_, err := udp.Open(udp.Config{})
	require.Error(t, err)
	_, err = udp.Open(udp.Config{Addr: lo4, BatchSize: 5000})
	require.Error(t, err)
}

// TestWildcard: a link bound to a wildcard address learns the real
// destination of each datagram (IP_PKTINFO / IPV6_PKTINFO), which the
// ICRC covers, and sends from the address in Net.Src. A dual-stack [::]
// link does both for IPv4 peers with plain 4-byte addresses.
func TestWildcard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		bind  string
		peers []netip.AddrPort
	}{
		{"ipv4", "0.0.0.0:0", []netip.AddrPort{lo4}},
		{"ipv6", "[::]:0", []netip.AddrPort{lo6, lo4}},
	} {
		for _, gro := range []bool{false, true} {
			name := tc.name
			if gro {
				name += "/gro"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				w := open(t, udp.Config{Addr: netip.MustParseAddrPort(tc.bind), GRO: gro, GSO: gro})
				wl, err := w.LocalAddr()
				require.NoError(t, err)
				require.True(t, wl.Src.IsUnspecified())
				for _, pa := range tc.peers {
					peer := open(t, udp.Config{Addr: pa})
					pn, err := peer.LocalAddr()
					require.NoError(t, err)
					// Peer to wildcard: the ICRC is computed for the loopback
					// address the datagram is sent to.
					n := wire.Net{Src: pn.Src, SrcPort: pn.SrcPort, Dst: pa.Addr(), DstPort: wl.SrcPort, DontFragment: true}
					pkts := []link.Packet{packet(&n, 1, 0, 64), packet(&n, 1, 1, 64), packet(&n, 1, 2, -1)}
					require.NoError(t, peer.Send(pkts))
					out := receive(t, w, len(pkts), 8)
					for i, g := range out {
						require.Equal(t, i, g.psn)
						require.Equal(t, pa.Addr(), g.net.Dst, "the real destination")
						require.True(t, g.net.Dst.Is4() == pa.Addr().Is4(), "plain IPv4, not mapped")
						require.Equal(t, pn.Src, g.net.Src)
						require.Equal(t, pn.SrcPort, g.net.SrcPort)
						require.Equal(t, wl.SrcPort, g.net.DstPort)
					}
					// Wildcard back to the peer, from the address the peer
					// used, given in Net.Src.
					back := wire.Net{Src: out[0].net.Dst, SrcPort: wl.SrcPort, Dst: pn.Src, DstPort: pn.SrcPort, DontFragment: true}
					require.NoError(t, w.Send([]link.Packet{packet(&back, 2, 0, 100), packet(&back, 2, 1, 100)}))
					for _, g := range receive(t, peer, 2, 8) {
						require.Equal(t, back.Src, g.net.Src)
					}
				}
			})
		}
	}

	// Net.Src picks the source address among the local ones: 127.0.0.2
	// is on loopback too.
	t.Run("source", func(t *testing.T) {
		t.Parallel()
		w := open(t, udp.Config{Addr: netip.MustParseAddrPort("0.0.0.0:0")})
		peer := open(t, udp.Config{Addr: lo4})
		wl, err := w.LocalAddr()
		require.NoError(t, err)
		pn, err := peer.LocalAddr()
		require.NoError(t, err)
		src := netip.MustParseAddr("127.0.0.2")
		n := wire.Net{Src: src, SrcPort: wl.SrcPort, Dst: pn.Src, DstPort: pn.SrcPort, DontFragment: true}
		require.NoError(t, w.Send([]link.Packet{packet(&n, 3, 0, 32)}))
		g := receive(t, peer, 1, 4)[0]
		require.Equal(t, src, g.net.Src)
	})
}

// TestTruncated: a datagram larger than its receive buffer is dropped and
// counted; the packets around it still arrive, in the caller's slots.
func TestTruncated(t *testing.T) {
	t.Parallel()
	for _, gro := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "gro"}[gro], func(t *testing.T) {
			t.Parallel()
			a := open(t, udp.Config{Addr: lo4})
			b := open(t, udp.Config{Addr: lo4, GRO: gro})
			n := netFor(t, a, b)
			pkts := []link.Packet{sized(&n, 1, 0, 1000), sized(&n, 1, 1, 100), sized(&n, 1, 2, 1500), sized(&n, 1, 3, 152)}
			require.NoError(t, a.Send(pkts))
			bufs := make([]link.Packet, 8)
			backing := make([][]byte, len(bufs))
			for i := range bufs {
				backing[i] = make([]byte, 200)
				bufs[i].Buf = backing[i]
			}
			var psns []int
			var p wire.Packet
			for len(psns) < 2 {
				k, err := b.Recv(bufs)
				require.NoError(t, err)
				for i := range k {
					require.Same(t, &backing[i][0], &bufs[i].Buf[0], "slot %d keeps its buffer", i)
					nn := bufs[i].Net
					require.Equal(t, wire.DropNone, wire.ParseDatagram(bufs[i].Buf, &nn, &p))
					psns = append(psns, int(p.BTH.PSN()))
				}
			}
			require.Equal(t, []int{1, 3}, psns)
			require.Equal(t, uint64(2), b.Stats().RxTruncated)
			require.Equal(t, uint64(2), b.Stats().RxPackets)
		})
	}
}

// TestSendDrops: packets the link cannot send are counted, not reported.
func TestSendDrops(t *testing.T) {
	t.Parallel()
	a := open(t, udp.Config{Addr: lo4})
	b := open(t, udp.Config{Addr: lo4})
	n := netFor(t, a, b)
	v6 := n
	v6.Dst = netip.MustParseAddr("::1")
	good := packet(&n, 1, 5, 10)
	pkts := []link.Packet{
		{Buf: nil, Net: n},                      // empty
		packet(&v6, 1, 0, 10),                   // wrong family
		{Buf: make([]byte, 70000), Net: n},      // larger than a datagram
		{Buf: make([]byte, 1), Net: wire.Net{}}, // no destination
		good,
	}
	require.NoError(t, a.Send(pkts))
	require.Equal(t, uint64(4), a.Stats().TxDropped)
	require.Equal(t, uint64(1), a.Stats().TxPackets)
	g := receive(t, b, 1, 4)[0]
	require.Equal(t, 5, g.psn)
}

// TestRemotePort: a packet whose Net.DstPort is 0 goes to
// Config.RemotePort.
func TestRemotePort(t *testing.T) {
	t.Parallel()
	b := open(t, udp.Config{Addr: lo4})
	bn, err := b.LocalAddr()
	require.NoError(t, err)
	a := open(t, udp.Config{Addr: lo4, RemotePort: bn.SrcPort})
	n := netFor(t, a, b)
	sent := n
	sent.DstPort = 0
	p := packet(&n, 1, 0, 8) // ICRC for the real port
	p.Net = sent
	require.NoError(t, a.Send([]link.Packet{p}))
	require.Equal(t, bn.SrcPort, receive(t, b, 1, 4)[0].net.DstPort)
}

// TestNotUnicast: a multicast or the broadcast address is refused by
// name (the net package would bind a multicast one as the wildcard, and
// the device's open would then blame 0.0.0.0).
func TestNotUnicast(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"224.0.0.1:0", "255.255.255.255:0", "[ff02::1]:0", "[::ffff:239.1.2.3]:0"} {
		_, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort(a)})
		require.ErrorIs(t, err, syscall.EINVAL, a)
		want := netip.MustParseAddrPort(a).Addr().Unmap().String() + " is not a unicast address"
		require.ErrorContains(t, err, want)
	}
}

// TestClose: Close wakes a blocked Recv with net.ErrClosed, is
// idempotent, and later calls fail with net.ErrClosed.
func TestClose(t *testing.T) {
	t.Parallel()
	for _, gro := range []bool{false, true} {
		t.Run(map[bool]string{false: "direct", true: "gro"}[gro], func(t *testing.T) {
			t.Parallel()
			l, err := udp.Open(udp.Config{Addr: lo4, GRO: gro, GSO: gro})
			require.NoError(t, err)
			done := make(chan error)
			go func() {
				_, err := l.Recv(recvBufs(4))
				done <- err
			}()
			require.NoError(t, l.Close())
			require.True(t, isClosed(<-done), "Recv returns net.ErrClosed")
			require.NoError(t, l.Close(), "second Close")
			_, err = l.Recv(recvBufs(1))
			require.True(t, isClosed(err))
			n, _ := l.LocalAddr()
			err = l.Send([]link.Packet{{Buf: []byte{1}, Net: n}})
			require.True(t, isClosed(err))
			_, err = l.LocalAddr()
			require.True(t, isClosed(err))
		})
	}
}

// TestConcurrentSend: four goroutines send at once; every packet arrives
// intact and each sender's packets stay in order.
func TestConcurrentSend(t *testing.T) {
	t.Parallel()
	for _, o := range []struct {
		name     string
		gso, gro bool
	}{offloads[0], offloads[3]} {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			const senders, batches, per = 4, 25, 8
			a := open(t, udp.Config{Addr: lo4, GSO: o.gso})
			b := open(t, udp.Config{Addr: lo4, GRO: o.gro})
			n := netFor(t, a, b)
			var wg sync.WaitGroup
			for s := range senders {
				wg.Go(func() {
					psn := 0
					for range batches {
						pkts := make([]link.Packet, per)
						for i := range pkts {
							size := 1100
							if i == per-1 {
								size = 300 + 4*s
							}
							pkts[i] = sized(&n, uint32(s), psn, size)
							psn++
						}
						if err := a.Send(pkts); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			out := receive(t, b, senders*batches*per, 32)
			wg.Wait()
			next := make([]int, senders)
			for _, g := range out {
				require.Equal(t, next[g.qp], g.psn, "sender %d in order", g.qp)
				next[g.qp]++
				checkPayload(t, g)
			}
		})
	}
}

// TestZeroAllocs: Send and Recv allocate nothing in steady state. (Not
// parallel: AllocsPerRun counts the whole process's allocations.)
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, o := range offloads {
		t.Run(o.name, func(t *testing.T) {
			for _, fam := range []netip.AddrPort{lo4, lo6} {
				a := open(t, udp.Config{Addr: fam, GSO: o.gso})
				b := open(t, udp.Config{Addr: fam, GRO: o.gro})
				n := netFor(t, a, b)
				var pkts []link.Packet
				for i := range 12 {
					pkts = append(pkts, sized(&n, 1, i, 1100))
				}
				pkts = append(pkts, sized(&n, 1, 12, 200), packet(&n, 1, 13, -1), packet(&n, 1, 14, -1))
				bufs := recvBufs(5) // fewer than sent: GRO carries segments over
				round := func() {
					if err := a.Send(pkts); err != nil {
						panic(err)
					}
					for k := 0; k < len(pkts); {
						m, err := b.Recv(bufs)
						if err != nil {
							panic(err)
						}
						k += m
					}
				}
				round()
				require.Zero(t, testing.AllocsPerRun(50, round))
			}
		})
	}
}

// TestNoGoroutines: the link starts no goroutines, so closing it leaves
// none behind. (Not parallel, so that the count is stable.)
func TestNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, o := range offloads {
		a, err := udp.Open(udp.Config{Addr: lo4, GSO: o.gso, GRO: o.gro})
		require.NoError(t, err)
		b, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("[::]:0"), GSO: o.gso, GRO: o.gro})
		require.NoError(t, err)
		bn, err := b.LocalAddr()
		require.NoError(t, err)
		n := netFor(t, a, b)
		n.Dst = lo4.Addr()
		require.Equal(t, bn.SrcPort, n.DstPort)
		require.NoError(t, a.Send([]link.Packet{packet(&n, 1, 0, 100)}))
		receive(t, b, 1, 4)
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines left behind")
}

// TestSocketDrops: datagrams the kernel drops because the receiver's
// socket buffer is full are counted as RxSocketDropped, and the count
// survives Close (a program reads its final counters after closing).
func TestSocketDrops(t *testing.T) {
	t.Parallel()
	a := open(t, udp.Config{Addr: lo4})
	b, err := udp.Open(udp.Config{Addr: lo4})
	require.NoError(t, err)
	n := netFor(t, a, b)
	// b never reads: 8,000 datagrams of 1,000 bytes take more than its
	// buffer holds (4 MiB asked, which the kernel doubles: some 3,600
	// such datagrams at their true size).
	const sent = 8000
	batch := make([]link.Packet, 64)
	for i := 0; i < sent; i += len(batch) {
		for j := range batch {
			batch[j] = sized(&n, 1, i+j, 1000)
		}
		require.NoError(t, a.Send(batch))
	}
	require.Equal(t, uint64(sent), a.Stats().TxPackets)
	dropped := b.Stats().RxSocketDropped
	require.Positive(t, dropped, "a full receive buffer dropped nothing")
	// What the socket kept, b reads now; the two add up to at most what
	// was sent (loopback's backlog may drop some before the socket).
	bufs := recvBufs(64)
	var read uint64
	for {
		k, err := b.TryRecv(bufs)
		require.NoError(t, err)
		if k == 0 {
			break
		}
		read += uint64(k)
	}
	require.Positive(t, read)
	require.LessOrEqual(t, read+dropped, uint64(sent))
	require.NoError(t, b.Close())
	require.Equal(t, dropped, b.Stats().RxSocketDropped, "the count after Close")
}

// TestSendPayload: a packet whose payload lies apart from its Buf
// (link.Gatherer) leaves as the same datagram as the whole packet, alone
// or in a GSO run (whose segments' ICRCs are rewritten for their IPv4
// IDs), IPv4 and IPv6; one whose payload has no place in its Buf is
// dropped and counted.
func TestSendPayload(t *testing.T) {
	t.Parallel()
	for _, fam := range []netip.AddrPort{lo4, lo6} {
		for _, gso := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/gso=%v", fam.Addr(), gso), func(t *testing.T) {
				t.Parallel()
				a := open(t, udp.Config{Addr: fam, GSO: gso})
				b := open(t, udp.Config{Addr: fam, GRO: gso})
				require.True(t, a.Gathers())
				n := netFor(t, a, b)
				var whole, split []link.Packet
				for i := range 20 {
					p := sized(&n, 5, i, 1500)
					if i == 19 {
						p = sized(&n, 5, i, 1100) // a shorter last segment
					}
					whole = append(whole, p)
					split = append(split, payloadApart(p))
				}
				bad := split[0]
				bad.PayloadAt = len(bad.Buf) + 1
				require.NoError(t, a.Send(append(split, bad)))
				require.Equal(t, uint64(1), a.Stats().TxDropped)
				out := receive(t, b, len(whole), 64)
				for i, g := range out {
					require.Equal(t, i, g.psn)
					require.Equal(t, len(whole[i].Buf), g.size)
					checkPayload(t, g)
					if fam.Addr().Is4() && gso {
						require.Equal(t, uint16(i%20), g.id, "segment %d's ICRC is for its IP ID", i)
					}
				}
			})
		}
	}
}

// TestSendPayloadManyIovecs: one Send of more packets with a Payload
// than one sendmmsg's iovecs hold (each takes three or four) is split
// over several, and every packet arrives: a packet never starts where
// its iovecs would not fit.
func TestSendPayloadManyIovecs(t *testing.T) {
	t.Parallel()
	a := open(t, udp.Config{Addr: lo4, GSO: true})
	b := open(t, udp.Config{Addr: lo4, GRO: true, BatchSize: 64})
	n := netFor(t, a, b)
	var split []link.Packet
	for i := range 150 {
		split = append(split, payloadApart(sized(&n, 6, i, 1128))) // 1100-byte payloads: runs of 57 packets
	}
	require.NoError(t, a.Send(split))
	out := receive(t, b, len(split), 64)
	for i, g := range out {
		require.Equal(t, i, g.psn)
		checkPayload(t, g)
	}
}

// TestSendSmallPackets: small packets, which Send copies end to end into
// its staging buffer so that a GSO run of them is one iovec, arrive as
// they were sent, whole or with their payload apart, around a large
// packet that is not copied and past the point where the staging buffer
// is full; each GSO segment's ICRC is the one for its IPv4 ID; the
// caller's buffers are not written.
func TestSendSmallPackets(t *testing.T) {
	t.Parallel()
	for _, fam := range []netip.AddrPort{lo4, lo6} {
		for _, gso := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/gso=%v", fam.Addr(), gso), func(t *testing.T) {
				t.Parallel()
				a := open(t, udp.Config{Addr: fam, GSO: gso})
				b := open(t, udp.Config{Addr: fam, GRO: gso})
				n := netFor(t, a, b)
				var pkts []link.Packet
				var ids []int // each packet's IPv4 ID: its place in its GSO run
				add := func(p link.Packet, id int) {
					pkts = append(pkts, p)
					ids = append(ids, id)
				}
				for i := range 30 { // 64-byte SENDs
					add(packet(&n, 3, len(pkts), 64), i)
				}
				for i := range 10 { // the same with the payload apart: the same run
					add(payloadApart(packet(&n, 3, len(pkts), 64)), 30+i)
				}
				// A large packet, sent from where it lies, and the first ACK
				// as its run's shorter last segment; then a run of ACKs.
				add(sized(&n, 3, len(pkts), 1100), 0)
				add(packet(&n, 3, len(pkts), -1), 1)
				for i := range 19 {
					add(packet(&n, 3, len(pkts), -1), i)
				}
				exact := len(pkts)
				for range 1000 { // more than the staging buffer holds
					add(packet(&n, 3, len(pkts), 64), -1)
				}
				before := make([][]byte, len(pkts))
				for i, p := range pkts {
					before[i] = bytes.Clone(p.Buf)
				}
				require.NoError(t, a.Send(pkts))
				require.Equal(t, uint64(len(pkts)), a.Stats().TxPackets)
				out := receive(t, b, len(pkts), 64)
				runs := 0
				for i, g := range out {
					require.Equal(t, i, g.psn)
					require.Equal(t, pkts[i].Len(), g.size)
					checkPayload(t, g)
					if !fam.Addr().Is4() || !gso {
						continue
					}
					if i < exact {
						require.Equal(t, uint16(ids[i]), g.id, "packet %d's ICRC is for its IP ID", i)
						continue
					}
					// Where the runs of the last 1,000 end depends on how
					// many iovecs and staging bytes a batch has left; within
					// a run, the IDs count up from 0.
					if g.id != 0 {
						require.Equal(t, out[i-1].id+1, g.id, "packet %d's ICRC is for its IP ID", i)
					} else {
						runs++
					}
				}
				if fam.Addr().Is4() && gso {
					require.Less(t, runs, 1000/32, "runs of 1,000 small packets")
				}
				for i, p := range pkts {
					require.Equal(t, before[i], p.Buf, "packet %d's buffer written", i)
				}
			})
		}
	}
}
