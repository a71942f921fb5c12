package tap_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/internal/netpath"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/wire"
)

// TestOpenValidates: a bad configuration is refused with EINVAL before
// any device is touched (no privileges needed).
func TestOpenValidates(t *testing.T) {
	a := []netip.Addr{host4}
	for _, c := range []struct {
		name string
		cfg  tap.LinkConfig
		msg  string
	}{
		{"name too long", tap.LinkConfig{Name: strings.Repeat("x", 16), Host: tap.Config{Addrs: a}}, "longer than 15"},
		{"no address", tap.LinkConfig{Name: "shtapv0"}, "needs an address"},
		{"negative loopback queue", tap.LinkConfig{Host: tap.Config{Addrs: a}, LoopbackQueue: -1}, "negative"},
		{"not a TUN/TAP interface", tap.LinkConfig{Name: "lo", Host: tap.Config{Addrs: a}}, "not a TUN/TAP"},
		{"bad kernel address", tap.LinkConfig{Host: tap.Config{Addrs: a}, KernelAddrs: []netip.Prefix{{}}}, "kernel address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := tap.Open(c.cfg)
			require.Nil(t, l)
			require.ErrorIs(t, err, syscall.EINVAL)
			require.Contains(t, err.Error(), c.msg)
		})
	}
}

// tapPath is a network namespace for a TAP device (side 0 of an unshaped
// netpath), or a skipped test without root.
func tapPath(t *testing.T) *netpath.Path {
	return netpath.ForTest(t, netpath.Options{Unshaped: true, IPv6: true})
}

var tapNames atomic.Uint32

// openIn opens a TAP link in side 0's namespace of p.
func openIn(t *testing.T, p *netpath.Path, cfg tap.LinkConfig) *tap.Link {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "shlt" + string(rune('a'+tapNames.Add(1)%26))
	}
	var l *tap.Link
	require.NoError(t, p.Do(0, func() (err error) {
		l, err = tap.Open(cfg)
		return err
	}))
	t.Cleanup(func() { l.Close() })
	return l
}

// TestLinkInterface: the link is a link.Interface with the host's MAC,
// addresses (link-local last) and MTU; the interface exists with that
// MTU, up; Close removes an interface the link created.
func TestLinkInterface(t *testing.T) {
	p := tapPath(t)
	l := openIn(t, p, tap.LinkConfig{Name: "shltif", Host: tap.Config{Addrs: []netip.Addr{host4, host6}, MTU: 9000}})
	var ifc link.Interface = l
	mac := tap.DefaultMAC(host4)
	require.Equal(t, mac, ifc.MAC())
	require.Equal(t, []netip.Addr{host4, host6, wire.LinkLocalFromGUID(wire.GUIDFromMAC(mac))}, ifc.Addrs())
	require.Equal(t, 9000, ifc.MTU())
	require.Equal(t, "shltif", l.Name())
	out, err := p.Exec(0, "ip", "link", "show", "shltif")
	require.NoError(t, err)
	require.Contains(t, out, "mtu 9000")
	require.Contains(t, out, ",UP")
	local, err := l.LocalAddr()
	require.NoError(t, err)
	require.Equal(t, wire.Net{Src: host4, SrcPort: wire.RoCEv2Port, DontFragment: true}, local)

	require.NoError(t, l.Close())
	require.NoError(t, l.Close(), "closing twice")
	_, err = p.Exec(0, "ip", "link", "show", "shltif")
	require.Error(t, err, "the interface the link created is gone")
	_, err = l.LocalAddr()
	require.ErrorIs(t, err, net.ErrClosed)
	require.ErrorIs(t, l.Send([]link.Packet{{}}), net.ErrClosed)
}

// TestLinkLoopback: packets to the host's own addresses come back through
// Recv with the IP fields they were sent with; a packet whose ICRC is
// wrong, and packets beyond the loopback queue, are dropped and counted.
// A blocked Recv and WaitReadable wake for a looped-back packet.
func TestLinkLoopback(t *testing.T) {
	p := tapPath(t)
	l := openIn(t, p, tap.LinkConfig{Host: tap.Config{Addrs: []netip.Addr{host4, host6}}, LoopbackQueue: 2})
	bufs := []link.Packet{{Buf: make([]byte, link.MaxPacketSize)}, {Buf: make([]byte, link.MaxPacketSize)}, {Buf: make([]byte, link.MaxPacketSize)}}

	for _, dst := range []netip.Addr{host4, host6} {
		n := wire.Net{Src: host4, Dst: dst, SrcPort: 0xc001, DstPort: wire.RoCEv2Port, TrafficClass: 2, HopLimit: 64, DontFragment: true}
		if dst.Is6() {
			n.Src, n.FlowLabel = host6, 0x54321
		}
		ib := ibPacket(&n, 5, 100)
		// A blocked Recv wakes for it.
		got := make(chan int, 1)
		go func() {
			k, err := l.Recv(bufs[:1])
			if err != nil {
				k = -1
			}
			got <- k
		}()
		require.NoError(t, l.Send([]link.Packet{{Buf: ib, Net: n}}))
		require.Equal(t, 1, <-got)
		require.Equal(t, ib, bufs[0].Buf)
		require.Equal(t, n, bufs[0].Net, "the IP and UDP fields as sent")
	}

	// A bad ICRC, and a full queue.
	n := wire.Net{Src: host4, Dst: host4, SrcPort: wire.RoCEv2Port, DstPort: wire.RoCEv2Port, HopLimit: 64, DontFragment: true}
	bad := ibPacket(&n, 1, 10)
	bad[len(bad)-1] ^= 1
	good := ibPacket(&n, 2, 10)
	require.NoError(t, l.Send([]link.Packet{{Buf: bad, Net: n}, {Buf: good, Net: n}, {Buf: good, Net: n}, {Buf: good, Net: n}}))
	k, err := l.TryRecv(bufs)
	require.NoError(t, err)
	require.Equal(t, 2, k, "the queue holds two: %+v", l.Stats())
	st := l.Stats()
	require.Equal(t, uint64(1), st.Drops["tx: loopback packet invalid"])
	require.Equal(t, uint64(1), st.Drops["tx: loopback queue full"])
	require.Equal(t, uint64(2), st.TxDropped)
	require.Equal(t, uint64(4), st.RxPackets)
	require.Equal(t, uint64(4), st.TxPackets)

	// WaitReadable wakes for a looped-back packet.
	done := make(chan error, 1)
	var seen int
	go func() {
		done <- l.WaitReadable(func() bool {
			k, _ := l.TryRecv(bufs[:1])
			seen += k
			return seen > 0
		})
	}()
	require.NoError(t, l.Send([]link.Packet{{Buf: good, Net: n}}))
	require.NoError(t, <-done)
	require.Equal(t, 1, seen)
}

// TestLinkCloseUnblocks: Close makes a blocked Recv and WaitReadable
// return net.ErrClosed.
func TestLinkCloseUnblocks(t *testing.T) {
	p := tapPath(t)
	l := openIn(t, p, tap.LinkConfig{Host: tap.Config{Addrs: []netip.Addr{host4}}})
	errs := make(chan error, 2)
	go func() {
		_, err := l.Recv([]link.Packet{{Buf: make([]byte, link.MaxPacketSize)}})
		errs <- err
	}()
	go func() { errs <- l.WaitReadable(func() bool { return false }) }()
	require.NoError(t, l.Close())
	for range 2 {
		require.ErrorIs(t, <-errs, net.ErrClosed)
	}
}

// TestLinkResolutionTimer: a packet to a neighbour that never answers
// waits while the link's timer (on the injected clock) sends Solicits
// requests, one RetryInterval apart, then is dropped and counted.
func TestLinkResolutionTimer(t *testing.T) {
	p := tapPath(t)
	clk := clock.NewFake(t0)
	l := openIn(t, p, tap.LinkConfig{Host: tap.Config{Addrs: []netip.Addr{host4}}, Clock: clk})
	n := wire.Net{Src: host4, Dst: peer4, DstPort: wire.RoCEv2Port, HopLimit: 64, DontFragment: true}
	require.NoError(t, l.Send([]link.Packet{{Buf: ibPacket(&n, 0, 10), Net: n}}))
	hs := l.HostStats()
	require.Equal(t, uint64(1), hs.TxQueued)
	require.Equal(t, uint64(1), hs.ARPRequests)
	require.Equal(t, uint64(2), hs.Announcements, "Open announced host4 and the link-local address")
	for i := range 3 {
		clk.Advance(time.Second)
		hs = l.HostStats()
		if i < 2 {
			require.Equal(t, uint64(2+i), hs.ARPRequests, "retry %d", i+1)
		}
	}
	require.Equal(t, uint64(3), hs.ARPRequests)
	require.Equal(t, uint64(1), hs.TxDropped[tap.TxUnresolved])
	require.Equal(t, uint64(1), hs.ResolveFailed)
	require.Equal(t, uint64(8), hs.Announcements, "Open's, then three rounds within the first second")
	require.Zero(t, clk.Pending(), "nothing left to time")
	require.Equal(t, uint64(1), l.Stats().Drops["tx: "+tap.TxUnresolved.String()])
}

// TestLinkKernelAddrs: the kernel's side of a TAP the link creates gets
// KernelAddrs, and the kernel reaches the host over it: ping and ping -6
// are answered, and the kernel's neighbour table holds the host's MAC.
func TestLinkKernelAddrs(t *testing.T) {
	p := tapPath(t)
	k4, k6 := netip.MustParseAddr("10.0.0.9"), netip.MustParseAddr("2001:db8::9")
	l := openIn(t, p, tap.LinkConfig{Name: "shltka", Host: tap.Config{Addrs: []netip.Addr{host4, host6}},
		KernelAddrs: []netip.Prefix{netip.PrefixFrom(k4, 24), netip.PrefixFrom(k6, 64)}})
	out, err := p.Exec(0, "ip", "addr", "show", "shltka")
	require.NoError(t, err)
	require.Contains(t, out, "10.0.0.9/24")
	require.Contains(t, out, "2001:db8::9/64")
	go func() {
		buf := []link.Packet{{Buf: make([]byte, link.MaxPacketSize)}}
		for {
			if _, err := l.Recv(buf); err != nil {
				return
			}
		}
	}()
	// IPv6 duplicate address detection holds the kernel's new address
	// tentative for a second or so: Ping asks again until a reply comes.
	require.NoError(t, p.Ping(0, host4, 10*time.Second))
	require.NoError(t, p.Ping(0, host6, 10*time.Second))
	hs := l.HostStats()
	require.NotZero(t, hs.EchoReplies)
	require.NotZero(t, hs.Echo6Replies)
	mac := tap.DefaultMAC(host4)
	out, err = p.Exec(0, "ip", "neigh", "show", "dev", "shltka")
	require.NoError(t, err)
	require.Contains(t, out, net.HardwareAddr(mac[:]).String())

	// Attaching to an existing interface: its owner's addresses stay.
	err = p.Do(0, func() error {
		l2, err := tap.Open(tap.LinkConfig{Name: "shltka", Host: tap.Config{Addrs: []netip.Addr{host4}}, KernelAddrs: []netip.Prefix{netip.PrefixFrom(k4, 24)}})
		if err == nil {
			l2.Close()
		}
		return err
	})
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Contains(t, err.Error(), "owner's")
	require.False(t, errors.Is(err, syscall.EPERM))
}

// TestLinkAttach: an existing (persistent) TAP interface is attached to,
// takes the host's MTU, and is left in place when the link closes; a TUN
// interface is refused.
func TestLinkAttach(t *testing.T) {
	p := tapPath(t)
	_, err := p.Exec(0, "ip", "tuntap", "add", "mode", "tap", "name", "shltpe")
	require.NoError(t, err)
	_, err = p.Exec(0, "ip", "tuntap", "add", "mode", "tun", "name", "shltun")
	require.NoError(t, err)
	l := openIn(t, p, tap.LinkConfig{Name: "shltpe", Host: tap.Config{Addrs: []netip.Addr{host4}, MTU: 4000}})
	out, err := p.Exec(0, "ip", "link", "show", "shltpe")
	require.NoError(t, err)
	require.Contains(t, out, "mtu 4000")
	require.NoError(t, l.Close())
	_, err = p.Exec(0, "ip", "link", "show", "shltpe")
	require.NoError(t, err, "an interface the link did not create stays")

	err = p.Do(0, func() error {
		l, err := tap.Open(tap.LinkConfig{Name: "shltun", Host: tap.Config{Addrs: []netip.Addr{host4}}})
		if err == nil {
			l.Close()
		}
		return err
	})
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Contains(t, err.Error(), "TUN interface, not a TAP")
}

// TestLinkSendNoAllocs: sending a RoCEv2 packet to a resolved neighbour
// allocates nothing (the frame is built in the host's buffer and written
// with a callback made once).
func TestLinkSendNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	p := tapPath(t)
	k4 := netip.MustParseAddr("10.0.0.9")
	l := openIn(t, p, tap.LinkConfig{Host: tap.Config{Addrs: []netip.Addr{host4}}, KernelAddrs: []netip.Prefix{netip.PrefixFrom(k4, 24)}})
	n := wire.Net{Src: host4, Dst: k4, SrcPort: wire.RoCEv2Port, DstPort: wire.RoCEv2Port, HopLimit: 64, DontFragment: true}
	pkts := []link.Packet{{Buf: ibPacket(&n, 1, 1000), Net: n}}
	require.NoError(t, l.Send(pkts)) // resolves the kernel's MAC
	bufs := []link.Packet{{Buf: make([]byte, link.MaxPacketSize)}}
	require.NoError(t, l.WaitReadable(func() bool {
		_, _ = l.TryRecv(bufs)
		return l.HostStats().Resolved > 0
	}))
	allocs := testing.AllocsPerRun(100, func() {
		if err := l.Send(pkts); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
	require.Equal(t, uint64(102), l.HostStats().TxPackets)
}

// TestLinkInterfaceDeleted: when the interface is deleted under the link
// (`ip link del`), reads and writes fail with EBADFD for ever. Every call
// then returns one error that says so and wraps net.ErrClosed, so that
// the device's receive goroutine stops instead of spinning on it.
func TestLinkInterfaceDeleted(t *testing.T) {
	p := tapPath(t)
	l := openIn(t, p, tap.LinkConfig{Name: "shltdel", Host: tap.Config{Addrs: []netip.Addr{host4}}})
	_, err := p.Exec(0, "ip", "link", "del", "shltdel")
	require.NoError(t, err)
	bufs := []link.Packet{{Buf: make([]byte, link.MaxPacketSize)}}
	_, err = l.Recv(bufs)
	require.ErrorIs(t, err, net.ErrClosed)
	require.Contains(t, err.Error(), "shltdel is gone")
	_, err = l.TryRecv(bufs)
	require.ErrorIs(t, err, net.ErrClosed)
	require.ErrorIs(t, l.WaitReadable(func() bool { return false }), net.ErrClosed)
	n := wire.Net{Src: host4, Dst: peer4, SrcPort: wire.RoCEv2Port, DstPort: wire.RoCEv2Port, HopLimit: 64, DontFragment: true}
	require.ErrorIs(t, l.Send([]link.Packet{{Buf: ibPacket(&n, 0, 10), Net: n}}), net.ErrClosed)
	require.NoError(t, l.Close())
}

// TestLinkKernelAddrIPv4Mapped: an IPv4-mapped kernel address keeps its
// prefix (::ffff:10.0.0.9/120 is 10.0.0.9/24), not a /32.
func TestLinkKernelAddrIPv4Mapped(t *testing.T) {
	p := tapPath(t)
	openIn(t, p, tap.LinkConfig{Name: "shltkm", Host: tap.Config{Addrs: []netip.Addr{host4}},
		KernelAddrs: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.9/120")}})
	out, err := p.Exec(0, "ip", "addr", "show", "shltkm")
	require.NoError(t, err)
	require.Contains(t, out, "10.0.0.9/24")
}
