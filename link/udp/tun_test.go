package udp_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/wire"
)

// tun is a TUN device with an IPv4 address: packets routed to its subnet
// come out of the file as raw IP packets, after the kernel's software
// segmentation (the device has no offloads), exactly as a NIC or a VM's
// tap would get them.
type tun struct {
	f      *os.File
	local  netip.Addr // the host's address on the device
	remote netip.Addr // a peer address routed through it
}

var (
	tunBase  = rand.Uint32N(250)
	tunCount atomic.Uint32
)

// openTUN creates the device, or skips the test without CAP_NET_ADMIN.
func openTUN(t *testing.T) *tun {
	t.Helper()
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Skipf("no /dev/net/tun: %v", err)
	}
	ifr, err := unix.NewIfreq("")
	require.NoError(t, err)
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		t.Skipf("cannot create a TUN device: %v", err)
	}
	name := ifr.Name()
	f := os.NewFile(uintptr(fd), "/dev/net/tun")
	t.Cleanup(func() { f.Close() }) // the device goes with the file

	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(s)
	// A /24 in the benchmarking range 198.18.0.0/15: a random start, then
	// a different one for each device, so that parallel tests (and other
	// test processes, most likely) do not collide.
	sub := byte(2 + (tunBase+tunCount.Add(1))%250)
	tn := &tun{
		f:      f,
		local:  netip.AddrFrom4([4]byte{198, 18, sub, 1}),
		remote: netip.AddrFrom4([4]byte{198, 18, sub, 2}),
	}
	set := func(req uint, v []byte) {
		r, err := unix.NewIfreq(name)
		require.NoError(t, err)
		require.NoError(t, r.SetInet4Addr(v))
		require.NoError(t, unix.IoctlIfreq(s, req, r), "ioctl %#x on %s", req, name)
	}
	a := tn.local.As4()
	set(unix.SIOCSIFADDR, a[:])
	set(unix.SIOCSIFNETMASK, []byte{255, 255, 255, 0})
	r, err := unix.NewIfreq(name)
	require.NoError(t, err)
	require.NoError(t, unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, r))
	r.SetUint16(r.Uint16() | unix.IFF_UP)
	require.NoError(t, unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, r))
	return tn
}

// read returns the next IPv4 UDP packet to the remote address.
func (tn *tun) read(t *testing.T) []byte {
	t.Helper()
	require.NoError(t, tn.f.SetReadDeadline(time.Now().Add(watchdog)))
	buf := make([]byte, 65536)
	for {
		n, err := tn.f.Read(buf)
		require.NoError(t, err)
		b := buf[:n]
		if n >= 28 && b[0]>>4 == 4 && b[9] == 17 && netip.AddrFrom4([4]byte(b[16:20])) == tn.remote {
			return append([]byte(nil), b...)
		}
	}
}

// TestWireIPv4 captures what the link really puts on the wire and checks
// it the way rxe does: wire.Parse verifies the ICRC over the real IP and
// UDP headers (the real IP ID included). Without GSO every packet has ID
// 0, DF and UDP checksum 0 (SO_NO_CHECK); with GSO the kernel splits the
// super-packet and numbers the IDs 0, 1, 2, ..., and the link's rewritten
// ICRCs must match them. With ECN every packet carries ECT(0) in its TOS
// byte (which the ICRC masks), without it 0. Needs CAP_NET_ADMIN (skipped
// otherwise).
func TestWireIPv4(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		gso, ecn bool
	}{{"plain", false, false}, {"gso", true, false}, {"ecn", false, true}, {"gso+ecn", true, true}} {
		gso := tc.gso
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tn := openTUN(t)
			l := open(t, udp.Config{Addr: netip.AddrPortFrom(tn.local, 0), GSO: gso, ECN: tc.ecn})
			require.Equal(t, gso, l.Info().GSO)
			la, err := l.LocalAddr()
			require.NoError(t, err)
			n := wire.Net{Src: tn.local, SrcPort: la.SrcPort, Dst: tn.remote, DstPort: wire.RoCEv2Port, DontFragment: true}
			var pkts []link.Packet
			for i := range 10 {
				pkts = append(pkts, sized(&n, 9, i, 1100))
			}
			pkts = append(pkts, sized(&n, 9, 10, 300), packet(&n, 9, 11, -1))
			require.NoError(t, l.Send(pkts))
			wantIDs := []uint16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0}
			if !gso {
				wantIDs = make([]uint16, len(pkts))
			}
			var p wire.Packet
			for i := range pkts {
				b := tn.read(t)
				require.Equal(t, wire.DropNone, wire.Parse(b, &p), "packet %d", i)
				require.Equal(t, i, int(p.BTH.PSN()))
				require.Equal(t, wantIDs[i], p.Net.ID, "packet %d: IP ID", i)
				require.True(t, p.Net.DontFragment, "DF")
				require.Equal(t, map[bool]uint8{false: 0, true: 2}[tc.ecn], b[1], "packet %d: TOS", i)
				require.Equal(t, uint16(0x4000), binary.BigEndian.Uint16(b[6:]), "DF only, no fragmentation")
				require.Equal(t, la.SrcPort, p.Net.SrcPort)
				// The packet is the caller's, except the ICRC of segments
				// with a nonzero ID (rewritten; wire.Parse checked it).
				sent := pkts[i].Buf
				require.Len(t, p.Raw, len(sent))
				end := len(sent)
				if p.Net.ID != 0 {
					end -= wire.ICRCSize
				}
				require.True(t, bytes.Equal(sent[:end], p.Raw[:end]), "packet %d content", i)
				csum := binary.BigEndian.Uint16(b[26:])
				if l.Info().NoUDPChecksum {
					require.Zero(t, csum, "UDP checksum 0")
				} else {
					require.NotZero(t, csum)
				}
			}
		})
	}
}
