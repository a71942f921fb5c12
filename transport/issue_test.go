package transport

import (
	"bytes"
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// The transport issues requests of its own (QP.Issue), as a tag-matching
// SRQ's rendezvous READ will: they take their PSNs in order with the
// application's requests and report to done, never to the send CQ.

func TestIssueReadCompletesThroughDone(t *testing.T) {
	h := newRC(t)
	h.post(sendWR(1, 0, 8))
	var got []verbs.WCStatus
	sgl := []verbs.SGE{{Addr: dstVA, Length: 300, LKey: lkeyDst}}
	ok := h.q.Issue(verbs.SendWR{Opcode: verbs.WRRDMARead, RDMA: verbs.RDMAInfo{RemoteAddr: peerVA, RKey: rkeyPeer}},
		sgl, func(s verbs.WCStatus) { got = append(got, s) })
	require.True(t, ok)
	require.Equal(t, 1, h.q.Internal())
	_, pkts := h.run()
	require.Len(t, pkts, 2)
	require.Equal(t, wire.RCSendOnly, pkts[0].op())
	require.Equal(t, wire.RCRDMAReadRequest, pkts[1].op(), "the READ follows the application's SEND")
	require.EqualValues(t, testSQPSN+1, pkts[1].psn())

	data := pattern(3, 300)
	_, _ = h.receive(readResp(wire.RCRDMAReadResponseFirst, testSQPSN+1), data[:testMTU])
	_, _ = h.receive(readResp(wire.RCRDMAReadResponseLast, testSQPSN+2), data[testMTU:])
	require.Equal(t, []string{"1:success"}, wcs(h.scq.take()), "only the application's SEND reaches the CQ")
	require.Equal(t, []verbs.WCStatus{verbs.WCSuccess}, got)
	require.True(t, bytes.Equal(data, h.dst[:300]))
	require.Zero(t, h.q.Internal())
	require.Zero(t, h.sq.Len())
}

func TestIssueFlushedThroughDone(t *testing.T) {
	h := newRC(t)
	var got []verbs.WCStatus
	done := func(s verbs.WCStatus) { got = append(got, s) }
	rd := verbs.SendWR{Opcode: verbs.WRRDMARead, RDMA: verbs.RDMAInfo{RemoteAddr: peerVA, RKey: rkeyPeer}}
	for range InternalSlots {
		require.True(t, h.q.Issue(rd, []verbs.SGE{{Addr: dstVA, Length: 8, LKey: lkeyDst}}, done))
	}
	require.False(t, h.q.Issue(rd, nil, done), "at most InternalSlots of its own")
	h.post(sendWR(7, 0, 8))
	h.q.SetState(verbs.QPStateErr, 0, 0)
	h.q.FlushSend()
	require.Equal(t, []string{"7:Work Request Flushed Error"}, wcs(h.scq.take()))
	require.Len(t, got, InternalSlots)
	for _, s := range got {
		require.Equal(t, verbs.WCWRFlushErr, s)
	}
	require.Zero(t, h.q.Internal())
	require.False(t, h.q.Issue(rd, nil, done), "nothing is issued by a requester that does not run")
}
