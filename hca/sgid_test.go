package hca_test

import (
	"net/netip"
	"syscall"
	"testing"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

// TestSGIDIndexNamesTheSource: a QP's packets leave from the address of
// the GID its address vector's sgid_index names, so modify_qp refuses an
// index the device cannot send from (EINVAL, nothing changed): one that
// holds no GID, one whose address is of another family than the dgid's
// (the link-local GID at index 0 with an IPv4 peer), and one whose
// address the device's link is not bound to.
func TestSGIDIndexNamesTheSource(t *testing.T) {
	la, lb := newChanPair(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"))
	a := openSideConfig(t, hca.Config{Link: la, Addrs: []netip.Addr{
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.9")}}, 4096)
	b := openSide(t, lb, 4096)
	a.createQP(t, verbs.QPTypeRC)
	b.createQP(t, verbs.QPTypeRC)
	peer, err := b.dev.QueryGID(1, 1)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		idx  uint8
	}{
		{"no GID", 7},
		{"link-local IPv6 GID, IPv4 peer", 0},
		{"an address the link does not send from", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1},
				verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
			defer func() {
				require.NoError(t, a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.AttrState))
			}()
			rtr := verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: b.qp.Num(),
				MaxDestRdAtomic: 1, MinRNRTimer: 12,
				AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: peer, SGIDIndex: tc.idx, HopLimit: 64}}}
			err := a.qp.Modify(&rtr, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|
				verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
			require.ErrorIs(t, err, syscall.EINVAL)
			require.Equal(t, verbs.QPStateInit, a.qp.State(), "the refused modify changed nothing")
		})
	}
	// The link's own address works, and the connection carries data.
	connect(t, a, b, verbs.QPTypeRC, verbs.MTU1024)
	_, err = b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 64)}})
	require.NoError(t, err)
	_, err = a.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 64)}})
	require.NoError(t, err)
	require.Equal(t, verbs.WCSuccess, waitWC(t, a, 1)[0].Status)
}
