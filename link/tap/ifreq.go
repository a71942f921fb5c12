package tap

import (
	"fmt"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's side of the TAP interface, configured with ioctls on a
// datagram socket, as ifconfig does (no netlink, no iproute2 needed).

// tunKind says whether the interface name exists in the calling
// thread's network namespace and whether it is a TAP: a device of the
// tun driver (ethtool's driver name) with an Ethernet hardware type (a
// TUN device has none). It asks the kernel with ioctls, not sysfs, whose
// /sys/class/net shows the namespace sysfs was mounted in.
func tunKind(name string) (exists, isTAP bool, err error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false, false, err
	}
	defer unix.Close(fd)
	// struct ifreq with ifr_hwaddr, a sockaddr whose family is the
	// ARPHRD_ type.
	var r struct {
		name   [unix.IFNAMSIZ]byte
		family uint16
		data   [22]byte
	}
	if len(name) >= len(r.name) {
		return false, false, fmt.Errorf("interface name %q: %w", name, syscall.EINVAL)
	}
	copy(r.name[:], name)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCGIFHWADDR, uintptr(unsafe.Pointer(&r))); e != 0 {
		if e == unix.ENODEV {
			return false, false, nil
		}
		return false, false, fmt.Errorf("%s: SIOCGIFHWADDR: %w", name, e)
	}
	drv, err := unix.IoctlGetEthtoolDrvinfo(fd, name)
	if err != nil || unix.ByteSliceToString(drv.Driver[:]) != "tun" {
		return true, false, fmt.Errorf("%s exists and is not a TUN/TAP interface: %w", name, syscall.EINVAL)
	}
	return true, r.family == unix.ARPHRD_ETHER, nil
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
