package devinfo

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softhca/softhca/verbs"
)

// GUID is a node or system image GUID, in host order. Its text form is
// ibv_devinfo's: four groups of four hex digits ("5054:00ff:fe77:0002").
type GUID uint64

// String formats the GUID as ibv_devinfo does (guid_str).
func (g GUID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// MarshalText returns String's form.
func (g GUID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText parses four colon-separated groups of one to four hex
// digits.
func (g *GUID) UnmarshalText(b []byte) error {
	parts := strings.Split(string(b), ":")
	if len(parts) != 4 {
		return fmt.Errorf("%w: GUID %q: want four groups of hex digits, such as 5054:00ff:fe77:0002", errBadText, b)
	}
	var v uint64
	for _, p := range parts {
		n, err := strconv.ParseUint(p, 16, 16)
		if err != nil || strings.ContainsAny(p, "+-_") {
			return fmt.Errorf("%w: GUID %q: %q is not one to four hex digits", errBadText, b, p)
		}
		v = v<<16 | n
	}
	*g = GUID(v)
	return nil
}

// GID is a GID (union ibv_gid). Its text form is the IPv6 address
// glibc's inet_ntop gives, as ibv_devinfo prints a RoCE v2 GID.
type GID verbs.GID

// String formats the GID as inet_ntop(AF_INET6) does.
func (g GID) String() string { return inetNtop6(g) }

// MarshalText returns String's form.
func (g GID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText parses an IPv6 address (or an IPv4 address, as its
// IPv4-mapped GID).
func (g *GID) UnmarshalText(b []byte) error {
	a, err := netip.ParseAddr(string(b))
	if err != nil || a.Zone() != "" {
		return fmt.Errorf("%w: GID %q: want an IPv6 address, such as ::ffff:10.77.0.2 or fe80::5054:ff:fe77:2", errBadText, b)
	}
	*g = GID(a.As16())
	return nil
}

// inetNtop6 is glibc's inet_ntop6: the longest run (the first of equal
// ones) of two or more zero groups becomes "::", groups are lower-case
// hex without leading zeros, and an IPv4-mapped (::ffff:a.b.c.d) or
// IPv4-compatible (::a.b.c.d) address ends in dotted decimal.
func inetNtop6(g GID) string {
	var words [8]uint16
	for i := range words {
		words[i] = uint16(g[2*i])<<8 | uint16(g[2*i+1])
	}
	bestBase, bestLen, curBase, curLen := -1, 0, -1, 0
	for i, w := range words {
		if w == 0 {
			if curBase == -1 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase != -1 {
			if bestBase == -1 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase != -1 && (bestBase == -1 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase != -1 && bestLen < 2 {
		bestBase = -1
	}
	var b strings.Builder
	for i := 0; i < len(words); i++ {
		if bestBase != -1 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			b.WriteByte(':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && words[5] == 0xffff)) {
			fmt.Fprintf(&b, "%d.%d.%d.%d", g[12], g[13], g[14], g[15])
			break
		}
		fmt.Fprintf(&b, "%x", words[i])
	}
	if bestBase != -1 && bestBase+bestLen == len(words) {
		b.WriteByte(':')
	}
	return b.String()
}

// GIDType is a GID's type (enum ibv_gid_type_sysfs). Its text form is
// the kernel's, in /sys/class/infiniband/*/ports/*/gid_attrs/types.
type GIDType uint8

// GID types.
const (
	GIDTypeIBRoCEv1 GIDType = 0 // IBV_GID_TYPE_SYSFS_IB_ROCE_V1: an InfiniBand or RoCE v1 GID
	GIDTypeRoCEv2   GIDType = 1 // IBV_GID_TYPE_SYSFS_ROCE_V2
)

// String returns the sysfs name: "IB/RoCE v1" or "RoCE v2".
func (t GIDType) String() string {
	switch t {
	case GIDTypeIBRoCEv1:
		return "IB/RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	default:
		return fmt.Sprintf("GIDType(%d)", uint8(t))
	}
}

// MarshalText returns the sysfs name; other values are an error.
func (t GIDType) MarshalText() ([]byte, error) {
	if t != GIDTypeIBRoCEv1 && t != GIDTypeRoCEv2 {
		return nil, fmt.Errorf("%w: GID type %d: want 0 (IB/RoCE v1) or 1 (RoCE v2)", errBadText, uint8(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText parses a sysfs name.
func (t *GIDType) UnmarshalText(b []byte) error {
	for _, v := range []GIDType{GIDTypeIBRoCEv1, GIDTypeRoCEv2} {
		if string(b) == v.String() {
			*t = v
			return nil
		}
	}
	return fmt.Errorf("%w: GID type %q: want \"IB/RoCE v1\" or \"RoCE v2\"", errBadText, b)
}
