package interop

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Net is the host side of the guest's network: a bridge holding the host's
// address and a tap device that qemu attaches the guest's virtio NIC to.
type Net struct {
	// Bridge and Tap are the interface names (shbr0, shtap0).
	Bridge, Tap string
	// Host is the bridge's address, Guest the guest's (same prefix).
	Host, Guest netip.Prefix
	// MTU is the bridge's, the tap's and the guest's eth0's MTU.
	MTU int
	// TxQueueLen is the tap's txqueuelen: how many packets to the guest
	// the tun device holds while qemu has not read them (its ring's
	// size); more arriving while it is full are dropped (tx_dropped).
	TxQueueLen int
	// HostTap is a second TAP interface on the bridge, for softhca as a
	// host of its own on the guest's Ethernet (link/tap attaches to it),
	// with the address HostTapAddr: its own MAC and IP, neither the
	// bridge's nor the guest's. Up makes it persistent, so that a
	// softhca process attaches to it and leaves it as it was; while none
	// is attached it has no carrier and the bridge forwards nothing to
	// it. Empty: none.
	HostTap     string
	HostTapAddr netip.Prefix
}

// DefaultTxQueueLen is the tap's queue: Linux's default for a tun
// device, and for an Ethernet interface, so the guest's network drops
// what a real one would when a sender outruns the receiver.
const DefaultTxQueueLen = 1000

// Slot returns the network of slot n (0..9): bridge shbrN, tap shtapN,
// host 10.77.N.1/24 and guest 10.77.N.2/24, MTU 9000 (rxe's path MTU 4096
// needs more than 4096 + 80 bytes), and softhca's own TAP shshN for
// 10.77.N.10/24. The tests use slot 0 and the vm command slot 1 by
// default, so the two do not clash. The tap's queue is set explicitly to
// DefaultTxQueueLen packets.
func Slot(n int) Net {
	return Net{
		Bridge:      fmt.Sprintf("shbr%d", n),
		Tap:         fmt.Sprintf("shtap%d", n),
		Host:        netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(n), 1}), 24),
		Guest:       netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(n), 2}), 24),
		MTU:         9000,
		TxQueueLen:  DefaultTxQueueLen,
		HostTap:     fmt.Sprintf("shsh%d", n),
		HostTapAddr: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 77, byte(n), 10}), 24),
	}
}

// GuestMAC is the guest NIC's MAC address, derived from the guest's IP.
func (n Net) GuestMAC() string {
	b := n.Guest.Addr().As4()
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[1], b[2], b[3])
}

// MissingNetTools says what creating the network needs and the host lacks.
func MissingNetTools() []string {
	var miss []string
	if _, err := lookPath("ip"); err != nil {
		miss = append(miss, "ip (iproute2)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		miss = append(miss, "/dev/net/tun (the tun module, or a container with the device)")
	}
	return miss
}

// Up creates the bridge and the taps (removing stale ones of the same
// names that no running VM uses).
func (n Net) Up(ctx context.Context) error {
	if pid := qemuUsing(n.Tap); pid != 0 {
		return fmt.Errorf("a running qemu (pid %d) already uses %s: stop it (vm down) or use another slot", pid, n.Tap)
	}
	n.Down()
	if ifc := addrUser(n.Host.Masked()); ifc != "" {
		return fmt.Errorf("interface %s already has an address in %s: the guest network would clash with it; use another slot", ifc, n.Host.Masked())
	}
	mtu := strconv.Itoa(n.MTU)
	qlen := n.TxQueueLen
	if qlen == 0 {
		qlen = DefaultTxQueueLen
	}
	steps := [][]string{
		{"link", "add", "name", n.Bridge, "type", "bridge"},
		{"tuntap", "add", "dev", n.Tap, "mode", "tap"},
		{"link", "set", n.Tap, "mtu", mtu},
		// Before qemu attaches: the tun device sizes its ring from it.
		{"link", "set", n.Tap, "txqueuelen", strconv.Itoa(qlen)},
		{"link", "set", n.Tap, "master", n.Bridge},
		{"link", "set", n.Bridge, "mtu", mtu},
		{"addr", "add", n.Host.String(), "dev", n.Bridge},
		{"link", "set", n.Tap, "up"},
		{"link", "set", n.Bridge, "up"},
	}
	if n.HostTap != "" {
		steps = append(steps,
			[]string{"tuntap", "add", "dev", n.HostTap, "mode", "tap"},
			[]string{"link", "set", n.HostTap, "mtu", mtu},
			[]string{"link", "set", n.HostTap, "master", n.Bridge})
	}
	for _, s := range steps {
		if out, err := command(ctx, "", "ip", s...); err != nil {
			n.Down()
			return fmt.Errorf("ip %s: %w: %s", strings.Join(s, " "), err, bytes.TrimSpace(out))
		}
	}
	// No IPv6 on the test network: no router solicitations or DAD noise
	// (on softhca's TAP, the kernel's own would go to softhca).
	for _, d := range n.devices() {
		os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", d, "disable_ipv6"), []byte("1"), 0o644)
	}
	if n.HostTap != "" {
		if out, err := command(ctx, "", "ip", "link", "set", n.HostTap, "up"); err != nil {
			n.Down()
			return fmt.Errorf("ip link set %s up: %w: %s", n.HostTap, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// devices are the interfaces Up makes: the taps, then the bridge.
func (n Net) devices() []string {
	ds := []string{n.Tap}
	if n.HostTap != "" {
		ds = append(ds, n.HostTap)
	}
	return append(ds, n.Bridge)
}

// SetMTU changes the MTU of the taps and the bridge. (A softhca attached
// to the host tap keeps the MTU it found until it reattaches.)
func (n *Net) SetMTU(ctx context.Context, mtu int) error {
	for _, d := range n.devices() {
		if out, err := command(ctx, "", "ip", "link", "set", d, "mtu", strconv.Itoa(mtu)); err != nil {
			return fmt.Errorf("ip link set %s mtu %d: %w: %s", d, mtu, err, bytes.TrimSpace(out))
		}
	}
	n.MTU = mtu
	return nil
}

// TapQueueLen reads the tap's txqueuelen as the kernel has it.
func (n Net) TapQueueLen() (int, error) {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", n.Tap, "tx_queue_len"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Down removes the taps and the bridge; missing ones are not an error.
func (n Net) Down() {
	for _, d := range n.devices() {
		if _, err := os.Stat(filepath.Join("/sys/class/net", d)); err == nil {
			command(context.Background(), "", "ip", "link", "del", d)
		}
	}
}

// qemuUsing returns the pid of a running qemu whose command line names the
// tap, or 0.
func qemuUsing(tap string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cl), "\x00")
		if !strings.Contains(filepath.Base(args[0]), "qemu") {
			continue
		}
		for _, a := range args {
			if strings.Contains(a, "ifname="+tap+",") {
				return pid
			}
		}
	}
	return 0
}

// addrUser returns the name of an interface with an address in p, or "".
func addrUser(p netip.Prefix) string {
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && p.Contains(ip.Unmap()) {
				return ifc.Name
			}
		}
	}
	return ""
}
