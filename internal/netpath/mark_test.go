package netpath_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/internal/netpath"
)

// ecnSender sends datagrams with a per-datagram TOS (IPv4) or traffic
// class (IPv6), given in a control message.
type ecnSender struct {
	c  *net.UDPConn
	v6 bool
}

func (s ecnSender) send(t *testing.T, to netip.AddrPort, payload []byte, tos byte) {
	t.Helper()
	level, typ := unix.IPPROTO_IP, unix.IP_TOS
	if s.v6 {
		level, typ = unix.IPPROTO_IPV6, unix.IPV6_TCLASS
	}
	oob := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(oob[unix.CmsgLen(0):], uint32(tos))
	_, _, err := s.c.WriteMsgUDPAddrPort(payload, oob, to)
	require.NoError(t, err)
}

// datagram is what the tests send: a sequence number and the TOS it was
// sent with, padded to a size.
func datagram(seq int, tos byte, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b, uint32(seq))
	b[4] = tos
	return b
}

// arrival is a received datagram: its sequence number, the TOS it was
// sent with and the TOS (traffic class) it arrived with.
type arrival struct {
	seq       int
	sent, got byte
}

// ecnReceiver turns on IP_RECVTOS (IPV6_RECVTCLASS) on c.
func ecnReceiver(t *testing.T, c *net.UDPConn, v6 bool) {
	t.Helper()
	if v6 {
		setsockopt(t, c, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
	} else {
		setsockopt(t, c, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
	}
}

// receive reads n datagrams from c and returns them indexed by sequence
// number. A datagram that does not come (a marked IPv4 packet whose header
// checksum is wrong is dropped by the receiving kernel) fails the test.
func receive(t *testing.T, c *net.UDPConn, n int) map[int]arrival {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(watchdog)))
	got := map[int]arrival{}
	buf := make([]byte, 65536)
	oob := make([]byte, 128)
	for len(got) < n {
		k, oobn, _, _, err := c.ReadMsgUDPAddrPort(buf, oob)
		require.NoError(t, err, "after %d of %d datagrams", len(got), n)
		require.GreaterOrEqual(t, k, 5)
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		require.NoError(t, err)
		tos := -1
		for _, m := range msgs {
			switch {
			case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
				tos = int(m.Data[0])
			case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS && len(m.Data) >= 4:
				tos = int(binary.NativeEndian.Uint32(m.Data))
			}
		}
		require.GreaterOrEqual(t, tos, 0, "no TOS/TCLASS control message")
		seq := int(binary.BigEndian.Uint32(buf))
		require.NotContains(t, got, seq, "duplicate datagram")
		got[seq] = arrival{seq: seq, sent: buf[4], got: byte(tos)}
	}
	return got
}

// family is an address family of a path.
type family struct {
	name string
	v6   bool
	addr func(int) netip.Addr
}

func families(p *netpath.Path) []family {
	return []family{{"ipv4", false, p.Addr}, {"ipv6", true, p.Addr6}}
}

// TestMarkProbability runs the marker with P=1 and P=0 over IPv4 and
// IPv6: with P=1 every ECT(0)/ECT(1) datagram to port 4791 arrives CE
// (its DSCP kept; over IPv4 the receiving kernel accepting it proves the
// header checksum right), with P=0 none does; Not-ECT and CE datagrams,
// and ECT datagrams to another port, arrive as sent. The counters agree.
func TestMarkProbability(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Rate: 100e6, IPv6: true})
	for _, o := range []netpath.MarkOptions{{Probability: 1.5}, {Rate: 90e6}, {Rate: 90e6, Threshold: 1000, Probability: 0.5}} {
		require.Error(t, p.MarkCE(0, o), "%+v", o)
	}
	_, err := p.Marked(0)
	require.Error(t, err, "no marker yet")
	const each = 20
	for _, fam := range families(p) {
		for _, prob := range []float64{1, 0} {
			t.Run(fam.name+map[float64]string{1: "/P=1", 0: "/P=0"}[prob], func(t *testing.T) {
				require.NoError(t, p.MarkCE(0, netpath.MarkOptions{Probability: prob}))
				roce := listen(t, p, 1, fam.addr(1), 4791)
				other := listen(t, p, 1, fam.addr(1), 4792)
				ecnReceiver(t, roce, fam.v6)
				ecnReceiver(t, other, fam.v6)
				tx := ecnSender{listen(t, p, 0, fam.addr(0), 0), fam.v6}

				// TOS values: Not-ECT, ECT(1), ECT(0), CE, and ECT(0)
				// with DSCP 46 (EF).
				toses := []byte{0b00, 0b01, 0b10, 0b11, 0xb8 | 0b10}
				ect := 0
				seq := 0
				for range each {
					for _, tos := range toses {
						tx.send(t, netip.AddrPortFrom(fam.addr(1), 4791), datagram(seq, tos, 1000), tos)
						seq++
						if tos&3 == 1 || tos&3 == 2 {
							ect++
						}
					}
					tx.send(t, netip.AddrPortFrom(fam.addr(1), 4792), datagram(seq, 0b10, 1000), 0b10)
					seq++
				}
				for _, a := range receive(t, roce, each*len(toses)) {
					want := a.sent
					if prob == 1 && (a.sent&3 == 1 || a.sent&3 == 2) {
						want = a.sent | 3
					}
					require.Equal(t, want, a.got, "datagram %d sent with TOS %#x", a.seq, a.sent)
				}
				for _, a := range receive(t, other, each) {
					require.Equal(t, a.sent, a.got, "datagram %d to port 4792 sent with TOS %#x", a.seq, a.sent)
				}
				c, err := p.Marked(0)
				require.NoError(t, err)
				require.Equal(t, uint64(ect), c.ECT)
				require.Equal(t, uint64(prob*float64(ect)), c.Marked)
			})
		}
	}
}

// TestMarkPhantomQueue runs the marker as a phantom queue draining at 90
// Mbit/s with K = 30000 bytes, on a 100 Mbit/s path: a trickle (at least
// 1 ms between 1442-byte frames, each drained long before the next) is
// never marked; a burst of back-to-back datagrams is, once the phantom
// queue holds more than K, and not before: the first K/frame - 2 of the
// burst (the queue may still hold the trickle's last frame) arrive
// unmarked.
func TestMarkPhantomQueue(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Rate: 100e6, IPv6: true})
	const (
		size      = 1400               // UDP payload
		frame     = size + 8 + 20 + 14 // as the marker counts it, over IPv4
		threshold = 30000
		trickle   = 50
		burst     = 300
	)
	for _, fam := range families(p) {
		t.Run(fam.name, func(t *testing.T) {
			require.NoError(t, p.MarkCE(0, netpath.MarkOptions{Rate: 90e6, Threshold: threshold}))
			rx := listen(t, p, 1, fam.addr(1), 4791)
			ecnReceiver(t, rx, fam.v6)
			tx := ecnSender{listen(t, p, 0, fam.addr(0), 0), fam.v6}
			to := netip.AddrPortFrom(fam.addr(1), 4791)

			for i := range trickle {
				tx.send(t, to, datagram(i, 0b10, size), 0b10)
				time.Sleep(time.Millisecond) // the trickle's pace, not a wait for anything
			}
			for _, a := range receive(t, rx, trickle) {
				require.Equal(t, byte(0b10), a.got, "trickle datagram %d marked", a.seq)
			}
			c, err := p.Marked(0)
			require.NoError(t, err)
			require.Equal(t, netpath.MarkCounts{ECT: trickle}, c)

			for i := range burst {
				tx.send(t, to, datagram(trickle+i, 0b10, size), 0b10)
			}
			marked := 0
			got := receive(t, rx, burst)
			for i := range burst {
				a := got[trickle+i]
				require.Contains(t, []byte{0b10, 0b11}, a.got)
				if a.got == 0b11 {
					marked++
					// With IPv6's 20 more header bytes the threshold
					// comes a little sooner.
					require.GreaterOrEqual(t, i, threshold/(frame+20)-2, "burst datagram %d marked before the phantom queue could exceed %d bytes", i, threshold)
				}
			}
			require.Positive(t, marked, "no datagram of the burst marked")
			c, err = p.Marked(0)
			require.NoError(t, err)
			require.Equal(t, netpath.MarkCounts{ECT: trickle + burst, Marked: uint64(marked)}, c)
			t.Logf("%d of %d burst datagrams marked", marked, burst)
		})
	}
}

// TestMarkGSO sends ECT(0) datagrams as UDP GSO super-packets (as
// link/udp with GSO does): the marker sees each super-packet as one
// packet, marks it whole, and every segment arrives CE with a good header
// checksum.
func TestMarkGSO(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Rate: 100e6})
	require.NoError(t, p.MarkCE(0, netpath.MarkOptions{Probability: 1}))
	rx := listen(t, p, 1, p.Addr(1), 4791)
	ecnReceiver(t, rx, false)
	tx := listen(t, p, 0, p.Addr(0), 0)
	const (
		supers = 5
		segs   = 10
		size   = 1000
	)
	oob := make([]byte, unix.CmsgSpace(4)+unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(oob[unix.CmsgLen(0):], 0b10)
	h = (*unix.Cmsghdr)(unsafe.Pointer(&oob[unix.CmsgSpace(4)]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgSpace(4)+unix.CmsgLen(0):], size)
	for s := range supers {
		var b []byte
		for i := range segs {
			b = append(b, datagram(s*segs+i, 0b10, size)...)
		}
		_, _, err := tx.WriteMsgUDPAddrPort(b, oob, netip.AddrPortFrom(p.Addr(1), 4791))
		require.NoError(t, err)
	}
	for _, a := range receive(t, rx, supers*segs) {
		require.Equal(t, byte(0b11), a.got, "segment %d", a.seq)
	}
	c, err := p.Marked(0)
	require.NoError(t, err)
	require.Equal(t, netpath.MarkCounts{ECT: supers, Marked: supers}, c, "one count per super-packet")
}
