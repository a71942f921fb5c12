package hca_test

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// ifaceLink is a chanLink that is a link.Interface, as link/tap is: a
// MAC, an MTU, two addresses and the link-local one, and received packets
// whose IP fields are "as they arrived" (arrived, below), which the
// transport must keep instead of recomputing.
type ifaceLink struct {
	*chanLink
	mac     [6]byte
	addrs   []netip.Addr
	mtu     int
	arrived wire.Net // the IP fields every received packet gets, addresses aside
}

func (l *ifaceLink) Addrs() []netip.Addr { return l.addrs }
func (l *ifaceLink) MAC() [6]byte        { return l.mac }
func (l *ifaceLink) MTU() int            { return l.mtu }

func (l *ifaceLink) Recv(pkts []link.Packet) (int, error) {
	n, err := l.chanLink.Recv(pkts)
	for i := range pkts[:n] {
		a := l.arrived
		a.Src, a.Dst, a.SrcPort, a.DstPort = pkts[i].Net.Src, pkts[i].Net.Dst, pkts[i].Net.SrcPort, pkts[i].Net.DstPort
		pkts[i].Net = a
	}
	return n, err
}

var _ link.Interface = (*ifaceLink)(nil)

// TestInterfaceDevice: a device on a link.Interface takes its GID table
// (the link-local GID of the MAC, then the interface's addresses), node
// GUID and active MTU from it, sends from any of its addresses, and fills
// a UD receive's GRH area with the IP header as it arrived (the IPv4 ID,
// TOS and TTL the link saw), not one rebuilt from the ICRC.
func TestInterfaceDevice(t *testing.T) {
	a4, b4 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	b6 := netip.MustParseAddr("2001:db8::2")
	la, lb := newChanPair(a4, b4)
	mac := [6]byte{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}
	ll := wire.LinkLocalFromGUID(wire.GUIDFromMAC(mac))
	ib := &ifaceLink{chanLink: lb, mac: mac, addrs: []netip.Addr{b4, b6, ll}, mtu: 1500,
		arrived: wire.Net{ID: 0x1234, TrafficClass: 0x2a, HopLimit: 7, DontFragment: true}}

	// Addresses the interface does not have are refused.
	_, err := hca.Open(hca.Config{Link: ib, Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}})
	require.ErrorIs(t, err, syscall.EINVAL)

	a := openSide(t, la, 1<<16)
	b := openSide(t, ib, 1<<16)
	require.Equal(t, wire.GUIDFromMAC(mac), b.dev.QueryDevice().NodeGUID)
	pa, err := b.dev.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, verbs.MTU1024, pa.ActiveMTU, "rxe's MTU for a 1500-byte interface")
	for i, want := range []netip.Addr{ll, b4, b6} {
		g, err := b.dev.QueryGID(1, i)
		require.NoError(t, err)
		require.Equal(t, verbs.GIDFromAddr(want), g, "GID %d", i)
	}
	// Any of the interface's addresses is a source (GID 2, IPv6; GID 0,
	// link-local); on the plain link only its own.
	for _, idx := range []uint8{0, 2} {
		_, err = b.pd.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(netip.MustParseAddr("2001:db8::9")), SGIDIndex: idx}})
		require.NoError(t, err, "sgid_index %d", idx)
	}

	connect(t, a, b, verbs.QPTypeUD, verbs.MTU1024)
	gid, _ := b.dev.QueryGID(1, 1)
	ah, err := a.pd.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1}})
	require.NoError(t, err)
	_, err = b.qp.PostRecv(&verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{b.mr.SGE(0, 40+512)}})
	require.NoError(t, err)
	copy(a.buf, "as it arrived")
	_, err = a.qp.PostSend(&verbs.SendWR{WRID: 8, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 13)}, UD: verbs.UDInfo{AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: 0x1234}})
	require.NoError(t, err)
	wc := waitWC(t, b, 1)[0]
	require.Equal(t, verbs.WCSuccess, wc.Status)
	ip := b.buf[20:40]
	require.Equal(t, byte(0x45), ip[0])
	require.Equal(t, byte(0x2a), ip[1], "TOS as it arrived")
	require.Equal(t, uint16(0x1234), binary.BigEndian.Uint16(ip[4:]), "IPv4 ID as it arrived")
	require.Equal(t, byte(7), ip[8], "TTL as it arrived")
	require.Equal(t, a4.AsSlice(), ip[12:16])
	require.Equal(t, b4.AsSlice(), ip[16:20])
	require.Equal(t, "as it arrived", string(b.buf[40:53]))
}
