package hca_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
)

// Example opens a device, creates the objects a connection needs and
// walks an RC QP through RESET -> INIT -> RTR -> RTS, then posts a receive
// and a send. (Moving the bytes is the transport engine's job; without a
// peer the work stays queued, so this example ends by moving the QP to
// ERR, which flushes both requests to the CQ.)
func Example() {
	dev, err := hca.Open(hca.Config{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}})
	if err != nil {
		panic(err)
	}
	pd, _ := dev.AllocPD()
	buf := make([]byte, 4096)
	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	cq, _ := dev.CreateCQ(16, nil, nil, 0)
	qp, err := pd.CreateQP(&hca.QPInitAttr{
		SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		panic(err)
	}

	peer, _ := dev.QueryGID(1, 1) // talk to ourselves for the example
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{QPState: verbs.QPStateInit, PKeyIndex: 0, PortNum: 1,
			QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPNum: qp.Num(),
			RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: peer, SGIDIndex: 1, HopLimit: 64}}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
				verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry |
				verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			panic(err)
		}
		fmt.Println("QP is in", qp.State())
	}

	if _, err := qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(0, 2048)}}); err != nil {
		panic(err)
	}
	if _, err := qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(2048, 64)}}); err != nil {
		panic(err)
	}
	_ = qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState)

	wcs := make([]verbs.WC, 4)
	n := cq.Poll(wcs)
	for _, wc := range wcs[:n] {
		fmt.Printf("wr_id %d: %s\n", wc.WRID, wc.Status)
	}

	_ = qp.Destroy(context.Background())
	_ = cq.Destroy(context.Background())
	_ = mr.Dereg()
	_ = pd.Dealloc()
	// Output:
	// QP is in INIT
	// QP is in RTR
	// QP is in RTS
	// wr_id 2: Work Request Flushed Error
	// wr_id 1: Work Request Flushed Error
}
