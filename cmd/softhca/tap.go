package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/cmd/softhca/internal/daemon"
	"github.com/softhca/softhca/link/tap"
)

// The TAP options of pingpong, perf, serve and demo put the device on a
// TAP interface (link/tap): a host of its own on that Ethernet link, with
// its own MAC and IP addresses, answering ARP, neighbour discovery and
// ping. The device then takes its GIDs (0: the link-local address made
// from the MAC, 1: the first address, ...), node GUID and active MTU from
// the interface, as rxe takes them from its netdev.

// tapHelp is what the usage texts say a TAP interface needs.
const tapHelp = `A TAP interface that does not exist is created, which needs root (or
CAP_NET_ADMIN and read-write access to /dev/net/tun; in a container,
--cap-add NET_ADMIN --device /dev/net/tun), and goes away at the end; an
existing one, made beforehand (ip tuntap add mode tap user $USER name
NAME; ip link set NAME up), is used as it is, without CAP_NET_ADMIN
(/dev/net/tun must still be readable and writable, as distributions
make it). The device is a host of its own on the TAP's Ethernet link:
the kernel (through an address on the interface) or a bridge the
interface is a port of reaches it there by ARP and neighbour discovery,
on UDP port 4791 only.`

// parseTAPName checks a --tap interface name.
func parseTAPName(v string) (string, error) {
	switch {
	case v == "":
		return "", errors.New("no interface name")
	case len(v) >= unix.IFNAMSIZ:
		return "", fmt.Errorf("interface name %q is longer than %d bytes", v, unix.IFNAMSIZ-1)
	}
	return v, nil
}

// parseMAC parses --tap-mac: a unicast Ethernet address.
func parseMAC(v string) ([6]byte, error) {
	hw, err := net.ParseMAC(v)
	if err != nil || len(hw) != 6 {
		return [6]byte{}, fmt.Errorf("%q is not an Ethernet MAC address (six bytes, like 02:00:0a:00:00:02)", v)
	}
	mac := [6]byte(hw)
	if mac == ([6]byte{}) || mac[0]&1 != 0 {
		return [6]byte{}, fmt.Errorf("%s is not a unicast MAC address", hw)
	}
	return mac, nil
}

// tapOpenError is a failure to open a device's TAP link.
type tapOpenError struct{ err error }

func (e *tapOpenError) Error() string { return e.err.Error() }
func (e *tapOpenError) Unwrap() error { return e.err }

// openTAP opens a TAP link on the interface name (created unless it
// exists) for a host with addrs (the first is the device's GID 1) and
// mac (zero: tap.DefaultMAC of the first address); kernel are the
// addresses of the kernel's side of an interface the link creates.
func openTAP(name string, mac [6]byte, addrs []netip.Addr, kernel []netip.Prefix) (*tap.Link, error) {
	l, err := tap.Open(tap.LinkConfig{Name: name, Host: tap.Config{Addrs: addrs, MAC: mac}, KernelAddrs: kernel})
	if err != nil {
		return nil, &tapOpenError{err}
	}
	return l, nil
}

// tapHint says what this machine lacks when err is a failure to open a
// TAP link for want of privileges or of the TUN/TAP driver; "" for any
// other error.
func tapHint(err error) string {
	var te *tapOpenError
	var de *daemon.TapError
	if !errors.As(err, &te) && !errors.As(err, &de) {
		return ""
	}
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return "a TAP device needs root, or CAP_NET_ADMIN and read-write access to /dev/net/tun " +
			"(in a container: --cap-add NET_ADMIN --device /dev/net/tun); without CAP_NET_ADMIN, use a TAP interface made for you " +
			"beforehand: ip tuntap add mode tap user $USER name NAME; ip link set NAME up"
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENODEV):
		return "a TAP device needs the TUN/TAP driver's /dev/net/tun: modprobe tun, or in a container --device /dev/net/tun"
	}
	return ""
}
