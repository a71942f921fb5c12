package tap

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's side of the TAP interface, configured with ioctls on a
// datagram socket, as ifconfig does (no netlink, no iproute2 needed).

// tunFlags returns the IFF_ flags of the TUN/TAP interface name from
// sysfs, and whether such an interface exists; ok with a flag set without
// IFF_TAP means a TUN interface.
func tunFlags(name string) (flags uint64, exists bool, err error) {
	if _, err := os.Stat("/sys/class/net/" + name); errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	b, err := os.ReadFile("/sys/class/net/" + name + "/tun_flags")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, true, fmt.Errorf("%s exists and is not a TUN/TAP interface: %w", name, syscall.EINVAL)
	}
	if err != nil {
		return 0, true, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 64)
	if err != nil {
		return 0, true, fmt.Errorf("%s: tun_flags %q: %w", name, b, err)
	}
	return v, true, nil
}

// ifconfig configures one interface through a socket of one family.
type ifconfig struct {
	name string
	fd   int
}

func openIfconfig(name string, family int) (*ifconfig, error) {
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &ifconfig{name: name, fd: fd}, nil
}

func (c *ifconfig) close() { unix.Close(c.fd) }

func (c *ifconfig) ifreq() (*unix.Ifreq, error) { return unix.NewIfreq(c.name) }

func (c *ifconfig) mtu() (int, error) {
	r, err := c.ifreq()
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(c.fd, unix.SIOCGIFMTU, r); err != nil {
		return 0, fmt.Errorf("SIOCGIFMTU: %w", err)
	}
	return int(r.Uint32()), nil
}

func (c *ifconfig) setMTU(mtu int) error {
	r, err := c.ifreq()
	if err != nil {
		return err
	}
	r.SetUint32(uint32(mtu))
	if err := unix.IoctlIfreq(c.fd, unix.SIOCSIFMTU, r); err != nil {
		return fmt.Errorf("SIOCSIFMTU %d: %w", mtu, err)
	}
	return nil
}

func (c *ifconfig) flags() (uint16, error) {
	r, err := c.ifreq()
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(c.fd, unix.SIOCGIFFLAGS, r); err != nil {
		return 0, fmt.Errorf("SIOCGIFFLAGS: %w", err)
	}
	return r.Uint16(), nil
}

// up sets IFF_UP unless it is set.
func (c *ifconfig) up() error {
	f, err := c.flags()
	if err != nil {
		return err
	}
	if f&unix.IFF_UP != 0 {
		return nil
	}
	r, err := c.ifreq()
	if err != nil {
		return err
	}
	r.SetUint16(f | unix.IFF_UP)
	if err := unix.IoctlIfreq(c.fd, unix.SIOCSIFFLAGS, r); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS up: %w", err)
	}
	return nil
}

// addIPv4 gives the interface the address and netmask of p (SIOCSIFADDR
// replaces the interface's first IPv4 address, as ifconfig does).
func (c *ifconfig) addIPv4(p netip.Prefix) error {
	r, err := c.ifreq()
	if err != nil {
		return err
	}
	if err := r.SetInet4Addr(p.Addr().AsSlice()); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(c.fd, unix.SIOCSIFADDR, r); err != nil {
		return fmt.Errorf("SIOCSIFADDR %v: %w", p.Addr(), err)
	}
	var m [4]byte
	for i := range p.Bits() {
		m[i/8] |= 0x80 >> (i % 8)
	}
	if err := r.SetInet4Addr(m[:]); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(c.fd, unix.SIOCSIFNETMASK, r); err != nil {
		return fmt.Errorf("SIOCSIFNETMASK /%d: %w", p.Bits(), err)
	}
	return nil
}

// in6Ifreq is struct in6_ifreq (linux/ipv6.h).
type in6Ifreq struct {
	addr      [16]byte
	prefixLen uint32
	ifindex   int32
}

// addIPv6 adds the IPv6 address p to the interface (on an AF_INET6
// socket).
func (c *ifconfig) addIPv6(p netip.Prefix, ifindex int) error {
	req := in6Ifreq{addr: p.Addr().As16(), prefixLen: uint32(p.Bits()), ifindex: int32(ifindex)}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(c.fd), unix.SIOCSIFADDR, uintptr(unsafe.Pointer(&req))); e != 0 {
		return fmt.Errorf("SIOCSIFADDR %v: %w", p, e)
	}
	return nil
}
