package netpath_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/internal/netpath"
)

// watchdog bounds every wait for packets: a lost packet fails the test
// instead of hanging it. No assertion depends on it.
const watchdog = 15 * time.Second

// TestMain fails the run if a namespace of this process is left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	left, err := netpath.Leftovers()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if len(left) > 0 {
		fmt.Fprintf(os.Stderr, "network namespaces left behind: %s\n", strings.Join(left, " "))
		code = 1
	}
	os.Exit(code)
}

// listen opens a plain UDP socket on side's address (IPv4 or IPv6) inside
// its namespace, with a receive buffer big enough for the tests' bursts.
func listen(t *testing.T, p *netpath.Path, side int, addr netip.Addr, port int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	require.NoError(t, p.Do(side, func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, uint16(port))))
		return err
	}))
	t.Cleanup(func() { c.Close() })
	setsockopt(t, c, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	return c
}

func setsockopt(t *testing.T, c *net.UDPConn, level, opt, v int) {
	t.Helper()
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	var serr error
	require.NoError(t, rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }))
	require.NoError(t, serr, "setsockopt(%d, %d, %d)", level, opt, v)
}

func localPort(c *net.UDPConn) int { return c.LocalAddr().(*net.UDPAddr).Port }

// TestPath builds a path and checks what it is: the addresses on each
// side, UDP both ways over IPv4 and IPv6 with sockets made by Do (used
// after Do returned), a bottleneck on each shaped side only, and nothing
// left once closed.
func TestPath(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Rate: 100e6, IPv6: true, Directions: netpath.From0})
	require.NotEqual(t, p.Namespace(0), p.Namespace(1))
	for _, fam := range []struct {
		name string
		addr func(int) netip.Addr
	}{{"ipv4", p.Addr}, {"ipv6", p.Addr6}} {
		t.Run(fam.name, func(t *testing.T) {
			a0, a1 := fam.addr(0), fam.addr(1)
			require.True(t, a0.IsValid() && a1.IsValid())
			c0 := listen(t, p, 0, a0, 0)
			c1 := listen(t, p, 1, a1, 0)
			for _, dir := range []struct {
				from, to *net.UDPConn
				dst      netip.Addr
			}{{c0, c1, a1}, {c1, c0, a0}} {
				msg := []byte("over the veth from " + dir.from.LocalAddr().String())
				_, err := dir.from.WriteToUDPAddrPort(msg, netip.AddrPortFrom(dir.dst, uint16(localPort(dir.to))))
				require.NoError(t, err)
				require.NoError(t, dir.to.SetReadDeadline(time.Now().Add(watchdog)))
				buf := make([]byte, 100)
				n, from, err := dir.to.ReadFromUDPAddrPort(buf)
				require.NoError(t, err)
				require.Equal(t, msg, buf[:n])
				require.Equal(t, dir.from.LocalAddr().(*net.UDPAddr).AddrPort(), from)
			}
		})
	}

	// The sockets live in the namespaces, not in the test's: the path's
	// addresses are not the host's.
	ifs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range ifs {
		require.NotContains(t, a.String(), p.Addr(0).String())
	}
	// Do runs in the namespace: the veth is there.
	require.NoError(t, p.Do(1, func() error {
		_, err := net.InterfaceByName(p.Device(1))
		return err
	}))

	s, err := p.QdiscStats(0)
	require.NoError(t, err)
	require.Positive(t, s.Packets, "side 0's bottleneck passed the test's datagrams")
	_, err = p.QdiscStats(1)
	require.Error(t, err, "side 1 is not shaped")

	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "Close is idempotent")
	require.Error(t, p.Do(0, func() error { return nil }))
	left, err := netpath.Leftovers()
	require.NoError(t, err)
	require.Empty(t, left)
}

// TestPing: Ping gets an echo reply from the other side over IPv4 and
// IPv6 (the kernel's own ICMP answers), and reports an address that
// nothing answers for once its timeout has passed.
func TestPing(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Rate: 100e6, IPv6: true})
	require.NoError(t, p.Ping(0, p.Addr(1), watchdog))
	require.NoError(t, p.Ping(1, p.Addr6(0), watchdog))
	nobody := p.Addr(1).Next().Next() // on the veth's subnet, not assigned
	err := p.Ping(0, nobody, 500*time.Millisecond)
	require.ErrorContains(t, err, "no echo reply")
}

// TestOptions checks that New refuses what it cannot build.
func TestOptions(t *testing.T) {
	for _, o := range []netpath.Options{
		{},
		{Rate: 1e6, MTU: 100},
		{Rate: 1e6, QueuePackets: -1},
		{Rate: 1e6, Burst: 1000},
		{Rate: 1e6, Directions: 7},
	} {
		_, err := netpath.New(o)
		require.Error(t, err, "%+v", o)
		require.False(t, errors.Is(err, errors.ErrUnsupported), "%+v: %v", o, err)
	}
}
