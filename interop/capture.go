package interop

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/wire"
)

// Direction is which way a packet crossed the tap.
type Direction int

// The two directions, named by who sent the packet.
const (
	ToGuest   Direction = iota // the host (softhca) to the guest (rxe)
	FromGuest                  // the guest (rxe) to the host (softhca)
)

func (d Direction) String() string {
	if d == ToGuest {
		return "host->guest"
	}
	return "guest->host"
}

// PayloadCheck inspects a parsed packet (its ICRC already verified) and
// returns an error when its data is not what the test sent.
type PayloadCheck func(d Direction, p *wire.Packet) error

// DirStats counts one direction's RoCEv2 packets.
type DirStats struct {
	// Packets is every RoCEv2 frame seen, Good those that parsed with a
	// correct ICRC.
	Packets, Good int
	// PayloadBytes sums the good packets' payloads.
	PayloadBytes int64
	// Bad counts the rest by wire.DropReason ("ICRC mismatch", ...).
	Bad map[string]int
	// Ops counts the good packets by opcode name.
	Ops map[string]int
	// PayloadErrors counts good packets the PayloadCheck rejected.
	PayloadErrors int
	// HeaderErrors counts good packets whose Ethernet or IP header does
	// not name the host side as the capture's HostSide describes it.
	HeaderErrors int
}

// HostSide is what a capture expects of the host side's packets: who
// sends the packets to the guest and receives the guest's.
type HostSide struct {
	// Addr is softhca's IP address (the bridge's, for a device on a UDP
	// socket there; its own on a TAP) and MAC the MAC its frames carry:
	// the source of every packet to the guest, the destination of every
	// packet from it. Unset (invalid, nil): not checked.
	Addr netip.Addr
	MAC  net.HardwareAddr
	// TAP is set when softhca frames its packets itself (link/tap): then
	// every IPv4 header to the guest has ID 0 and DF set, the values it
	// computed the ICRC with.
	TAP bool
}

// CaptureStats is what a capture saw.
type CaptureStats struct {
	ToGuest, FromGuest DirStats
	// KernelDrops is the number of frames the capture socket lost (its
	// buffer overflowed): the counts are then lower bounds.
	KernelDrops int
	// times holds each direction's packet arrival times, in order.
	times [2][]time.Time
	// Problems describes the first bad packets and payload errors.
	Problems []string
}

// After returns how many packets of direction d the capture saw at or
// after t.
func (s *CaptureStats) After(d Direction, t time.Time) int {
	ts := s.times[d]
	return len(ts) - sort.Search(len(ts), func(i int) bool { return !ts[i].Before(t) })
}

// Dir returns the counts of one direction.
func (s *CaptureStats) Dir(d Direction) *DirStats {
	if d == ToGuest {
		return &s.ToGuest
	}
	return &s.FromGuest
}

// String summarises the capture in one line per direction.
func (s *CaptureStats) String() string {
	var b strings.Builder
	for _, d := range []Direction{ToGuest, FromGuest} {
		ds := s.Dir(d)
		fmt.Fprintf(&b, "%s: %d packets, %d with a good ICRC, %d payload bytes", d, ds.Packets, ds.Good, ds.PayloadBytes)
		if len(ds.Bad) > 0 {
			fmt.Fprintf(&b, ", bad: %s", formatCounts(ds.Bad))
		}
		if ds.PayloadErrors > 0 {
			fmt.Fprintf(&b, ", %d payload errors", ds.PayloadErrors)
		}
		if ds.HeaderErrors > 0 {
			fmt.Fprintf(&b, ", %d header errors", ds.HeaderErrors)
		}
		fmt.Fprintf(&b, " [%s]\n", formatCounts(ds.Ops))
	}
	if s.KernelDrops > 0 {
		fmt.Fprintf(&b, "capture lost %d frames\n", s.KernelDrops)
	}
	return b.String()
}

func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Capture records the RoCEv2 packets crossing a network device (the
// guest's tap: every packet between softhca and rxe, as the guest sees
// it, after segmentation offload) through an AF_PACKET socket, and checks
// each one as it arrives: parsed by softhca's codec with the ICRC
// verified over the real IP header, its addresses those of the HostSide,
// then given to the PayloadCheck. It keeps the first and the last frames
// for a pcap file.
type Capture struct {
	fd    int
	guest netip.Addr
	host  HostSide
	check PayloadCheck
	stop  chan struct{}
	done  chan struct{}

	mu    sync.Mutex
	stats CaptureStats
	head  []capFrame
	tail  []capFrame // ring
	next  int        // next slot of tail
	err   error
}

type capFrame struct {
	t    time.Time
	data []byte
}

const (
	capHead     = 500
	capTail     = 1500
	maxProblems = 20
)

// StartCapture starts capturing RoCEv2 frames on dev; packets from guest
// count as FromGuest, the rest as ToGuest. check may be nil.
func StartCapture(dev string, guest netip.Addr, host HostSide, check PayloadCheck) (*Capture, error) {
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, err
	}
	proto := htons(unix.ETH_P_ALL)
	// Protocol 0: the socket receives nothing until bind names the
	// protocol and the device, so no frame of another interface slips in
	// before the bind.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("capture on %s: AF_PACKET socket: %w", dev, err)
	}
	prog := captureFilter()
	filter := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		filter[i] = unix.SockFilter{Code: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture on %s: attaching the filter: %w", dev, err)
	}
	// A large buffer: a perftest run sends bursts faster than this
	// goroutine may be scheduled on two cores.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20); err != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 64<<20)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifc.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("capture on %s: bind: %w", dev, err)
	}
	c := &Capture{
		fd: fd, guest: guest, host: host, check: check,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	c.stats.ToGuest = DirStats{Bad: map[string]int{}, Ops: map[string]int{}}
	c.stats.FromGuest = DirStats{Bad: map[string]int{}, Ops: map[string]int{}}
	c.tail = make([]capFrame, 0, capTail)
	go c.loop()
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *Capture) loop() {
	defer close(c.done)
	buf := make([]byte, 1<<18)
	var pkt wire.Packet
	pfd := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
	stopping := false
	for {
		if !stopping {
			select {
			case <-c.stop:
				stopping = true
			default:
			}
		}
		timeout := 50
		if stopping {
			timeout = 0
		}
		n, err := unix.Poll(pfd, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			c.setErr(err)
			return
		}
		if n <= 0 {
			if stopping {
				return
			}
			continue
		}
		for {
			m, _, err := unix.Recvfrom(c.fd, buf, unix.MSG_DONTWAIT)
			if err != nil {
				if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
					c.setErr(err)
					return
				}
				break
			}
			c.frame(buf[:m], &pkt)
		}
	}
}

func (c *Capture) setErr(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

func (c *Capture) frame(f []byte, pkt *wire.Packet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fr := capFrame{time.Now(), append([]byte(nil), f...)}
	if len(c.head) < capHead {
		c.head = append(c.head, fr)
	} else if len(c.tail) < capTail {
		c.tail = append(c.tail, fr)
	} else {
		c.tail[c.next] = fr
		c.next = (c.next + 1) % capTail
	}
	if len(f) < 14+20 || binary.BigEndian.Uint16(f[12:]) != 0x0800 {
		return
	}
	ip := f[14:]
	src, _ := netip.AddrFromSlice(ip[12:16])
	d := ToGuest
	if src == c.guest {
		d = FromGuest
	}
	ds := c.stats.Dir(d)
	ds.Packets++
	c.stats.times[d] = append(c.stats.times[d], time.Now())
	*pkt = wire.Packet{}
	if r := wire.Parse(ip, pkt); r != wire.DropNone {
		ds.Bad[r.String()]++
		c.problem("%s frame %d (%s): %s", d, ds.Packets, describe(pkt), r)
		return
	}
	ds.Good++
	ds.PayloadBytes += int64(len(pkt.Payload))
	ds.Ops[pkt.BTH.OpCode().String()]++
	if err := c.host.check(d, f, &pkt.Net); err != nil {
		ds.HeaderErrors++
		c.problem("%s frame %d (%s): %v", d, ds.Packets, describe(pkt), err)
	}
	if c.check != nil {
		if err := c.check(d, pkt); err != nil {
			ds.PayloadErrors++
			c.problem("%s frame %d (%s): %v", d, ds.Packets, describe(pkt), err)
		}
	}
}

// String describes what the capture expects.
func (h HostSide) String() string {
	s := "softhca at " + h.Addr.String()
	if h.MAC != nil {
		s += ", MAC " + h.MAC.String()
	}
	if h.TAP {
		s += ", on its TAP: IPv4 ID 0 and DF"
	}
	return s
}

// check returns what is wrong with the Ethernet and IP headers of a good
// packet of direction d (frame f, its IP and UDP fields n) for the host
// side h.
func (h *HostSide) check(d Direction, f []byte, n *wire.Net) error {
	var what []string
	ethDst, ethSrc := net.HardwareAddr(f[0:6]), net.HardwareAddr(f[6:12])
	if d == ToGuest {
		if h.Addr.IsValid() && n.Src != h.Addr {
			what = append(what, fmt.Sprintf("source address %s, want softhca's %s", n.Src, h.Addr))
		}
		if h.MAC != nil && !bytes.Equal(ethSrc, h.MAC) {
			what = append(what, fmt.Sprintf("source MAC %s, want softhca's %s", ethSrc, h.MAC))
		}
		if h.TAP && n.Src.Is4() && (n.ID != 0 || !n.DontFragment) {
			what = append(what, fmt.Sprintf("IPv4 ID %d, DF %v; want ID 0 and DF, as link/tap frames its packets", n.ID, n.DontFragment))
		}
	} else {
		if h.Addr.IsValid() && n.Dst != h.Addr {
			what = append(what, fmt.Sprintf("destination address %s, want softhca's %s", n.Dst, h.Addr))
		}
		if h.MAC != nil && !bytes.Equal(ethDst, h.MAC) {
			what = append(what, fmt.Sprintf("destination MAC %s, want softhca's %s", ethDst, h.MAC))
		}
	}
	if len(what) == 0 {
		return nil
	}
	return errors.New(strings.Join(what, "; "))
}

func (c *Capture) problem(format string, args ...any) {
	if len(c.stats.Problems) < maxProblems {
		c.stats.Problems = append(c.stats.Problems, fmt.Sprintf(format, args...))
	}
}

// describe names a packet for a message, as far as it parsed.
func describe(p *wire.Packet) string {
	if len(p.BTH) < wire.BTHSize {
		return "no BTH"
	}
	return fmt.Sprintf("%s qp=0x%x psn=%d len=%d", p.BTH.OpCode(), p.BTH.DestQP(), p.BTH.PSN(), len(p.Payload))
}

// Stop ends the capture, after the frames already queued on the socket,
// and returns what it saw.
func (c *Capture) Stop() (CaptureStats, error) {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	if st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		c.mu.Lock()
		c.stats.KernelDrops += int(st.Drops)
		c.mu.Unlock()
	}
	unix.Close(c.fd)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats, c.err
}

// WritePcap writes the kept frames (the first 500 and the last 1500) to a
// pcap file; run it after Stop.
func (c *Capture) WritePcap(path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	w := pcapgo.NewWriterNanos(bw)
	if err := w.WriteFileHeader(1<<18, layers.LinkTypeEthernet); err != nil {
		f.Close()
		return err
	}
	frames := append([]capFrame(nil), c.head...)
	frames = append(frames, c.tail[c.next:]...)
	frames = append(frames, c.tail[:c.next]...)
	for _, fr := range frames {
		ci := gopacketCaptureInfo(fr)
		if err := w.WritePacket(ci, fr.data); err != nil {
			f.Close()
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func gopacketCaptureInfo(fr capFrame) gopacket.CaptureInfo {
	return gopacket.CaptureInfo{Timestamp: fr.t, CaptureLength: len(fr.data), Length: len(fr.data)}
}
