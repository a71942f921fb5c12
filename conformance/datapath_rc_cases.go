package conformance

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/softhca/softhca/verbs"
)

// Data-path cases for reliable connections: bytes placed where the verbs
// say, completions with the fields ibv_poll_cq(3) defines, atomics.

const (
	dpSendCite  = `ibv_post_send(3) (seed 003): IBV_WR_SEND "The content of the local memory buffers specified in sg_list is being sent to the remote QP ... A Receive Request will be consumed from the head of remote QP's Receive Queue and sent data will be written to the memory buffers which are specified in that Receive Request"`
	dpRecvCite  = `ibv_post_recv(3) (seed 000): a receive WR's scatter/gather elements are used in order from the first, and what the message does not need is left unused`
	dpWCCite    = `ibv_poll_cq(3): byte_len "Number of bytes transferred. Relevant if the Receive Queue for incoming Send or RDMA Write with immediate operations. This value doesn't include the length of the immediate data ... Relevant in the Send Queue for RDMA Read and Atomic operations"; qp_num "Local QP number of completed WR"`
	dpWriteCite = `ibv_post_send(3) (seed 003): IBV_WR_RDMA_WRITE "The content of the local memory buffers specified in sg_list is being sent and written to a contiguous block of memory range in the remote QP's virtual space ... No Receive Request will be consumed in the remote QP"`
)

func init() {
	Register(
		Case{
			Name:  "datapath/rc/send/gather-and-scatter",
			Cite:  dpSendCite + `; ` + dpRecvCite + `; ibv_post_send(3): "The entries in the list can specify memory blocks that were registered by different Memory Regions"; ` + dpWCCite,
			Label: Spec,
			Run:   dpRCSendScatter,
		},
		Case{
			Name:  "datapath/rc/send-with-imm",
			Cite:  `ibv_post_send(3): IBV_WR_SEND_WITH_IMM "Same as IBV_WR_SEND, and immediate data will be sent in the message. This value will be available in the Work Completion that will be generated for the consumed Receive Request in the remote QP"; ibv_poll_cq(3): IBV_WC_WITH_IMM "Immediate data value is valid"; ` + dpWCCite,
			Label: Spec,
			Run:   dpRCSendImm,
		},
		Case{
			Name:  "datapath/rc/rdma-write/consumes-no-receive",
			Cite:  dpWriteCite + `; the remote side gets no completion`,
			Label: Spec,
			Run:   dpRCWrite,
		},
		Case{
			Name:  "datapath/rc/rdma-write-with-imm/consumes-a-receive",
			Cite:  `ibv_post_send(3): IBV_WR_RDMA_WRITE_WITH_IMM "Same as IBV_WR_RDMA_WRITE, but Receive Request will be consumed from the head of remote QP's Receive Queue and immediate data will be sent in the message"; ibv_poll_cq(3): opcode IBV_WC_RECV_RDMA_WITH_IMM, byte_len is the length of the RDMA Write; the receive WR's buffers are not written`,
			Label: Spec,
			Run:   dpRCWriteImm,
		},
		Case{
			Name:  "datapath/rc/rdma-read/returns-remote-bytes",
			Cite:  `ibv_post_send(3): IBV_WR_RDMA_READ "Data is being read from a contiguous block of memory range in the remote QP's virtual space and being written to the local memory buffers specified in sg_list. No Receive Request will be consumed in the remote QP"; ` + dpWCCite,
			Label: Spec,
			Run:   dpRCRead,
		},
		Case{
			Name:  "datapath/rc/zero-length-operations",
			Cite:  `ibv_post_send(3): num_sge "If this size is 0, this indicates that the message size is 0"; "The message size can be [0, 2^31]" for SEND, RDMA WRITE and RDMA READ on RC; ibv_post_recv(3) (seed 000): num_sge 0 is a zero-length receive buffer`,
			Label: Spec,
			Run:   dpRCZeroLength,
		},
		Case{
			Name:  "query_qp/psns-after-traffic",
			Cite:  `ibv_query_qp(3): sq_psn "PSN for send queue", rq_psn "PSN for receive queue" (ibv_modify_qp(3) sets them as the first PSNs); the page does not say whether a query reports the values set or the PSNs the QP sends and expects next; rxe reports the latter (rxe_qp_to_attr: req.psn and resp.psn), and so does softhca`,
			Label: ImplementationDefined,
			Run:   dpQueryPSNs,
		},
		dpMTUCase(verbs.MTU256),
		dpMTUCase(verbs.MTU1024),
		dpMTUCase(verbs.MTU4096),
		Case{
			Name:  "datapath/rc/in-order-delivery-and-completion",
			Cite:  `IBTA 10.8.3: completions of one work queue are returned in the order its WRs were posted; ibv_post_send(3): each SEND consumes the Receive Request at "the head of remote QP's Receive Queue", so messages fill receive WRs in posting order`,
			Label: Spec,
			Run:   dpRCOrdering,
		},
		Case{
			Name:  "datapath/rc/send-inline",
			Cite:  `ibv_post_send(3): IBV_SEND_INLINE "Send data in given gather list as inline data in a send WQE. Valid only for Send and RDMA Write. The L_Key will not be checked"; the buffers can be reused as soon as ibv_post_send returns`,
			Label: Spec,
			Run:   dpRCInline,
		},
		Case{
			Name:  "datapath/rc/atomic/fetch-and-add",
			Cite:  `ibv_post_send(3): IBV_WR_ATOMIC_FETCH_AND_ADD "A 64 bits value in a remote QP's virtual space is being read, added to wr.atomic.compare_add and the result is being written to the same memory address, in an atomic way ... The original data, before the add operation, is being written to the local memory buffers specified in sg_list"; ibv_poll_cq(3): opcode IBV_WC_FETCH_ADD, byte_len 8`,
			Label: Spec,
			Run:   dpAtomicFAA,
		},
		Case{
			Name:  "datapath/rc/atomic/compare-and-swap",
			Cite:  `ibv_post_send(3): IBV_WR_ATOMIC_CMP_AND_SWP "A 64 bits value in a remote QP's virtual space is being read, compared with wr.atomic.compare_add and if they are equal, the value wr.atomic.swap is being written to the same memory address, in an atomic way ... The original data, before the compare operation, is being written to the local memory buffers specified in sg_list"; ibv_poll_cq(3): opcode IBV_WC_COMP_SWAP`,
			Label: Spec,
			Run:   dpAtomicCAS,
		},
		Case{
			Name:  "datapath/rc/atomic/atomic-across-qps",
			Cite:  `ibv_post_send(3): the atomic operations act "in an atomic way"; ibv_query_device(3): atomic_cap IBV_ATOMIC_HCA "Atomicity is guaranteed between QPs on this device only" (the two QPs here share the responder device); two QPs adding 1 to one word: the final value is the sum and every fetched value is distinct`,
			Label: Spec,
			Run:   dpAtomicConcurrent,
		},
	)
}

func dpRCSendScatter(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	m2 := a.RegMR(t, nil, 4096, verbs.AccessLocalWrite)
	dpFill(a.Buf[:1800], 1)
	dpFill(m2.Bytes()[100:1300], 2)
	want := append(append([]byte(nil), a.Buf[:1800]...), m2.Bytes()[100:1300]...)
	for i := range b.Buf[:8192] {
		b.Buf[i] = 0xee
	}
	dpFence(t, qb)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 1000), b.MR.SGE(2000, 500), b.MR.SGE(4000, 2000))
	dpPost(t, qa, dpSend(0x51, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 1800), m2.SGE(100, 1200)))
	wc := dpWait1(t, a.SCQ, "sender", a, b)
	dpExpectOK(t, wc, 0x51, verbs.WCSend, "sender completion")
	Expect(t, wc.QPNum, qa.Num(), "sender completion qp_num")
	rwc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, rwc, 0x61, verbs.WCRecv, "receive completion")
	Expect(t, rwc.ByteLen, uint32(3000), "receive byte_len")
	Expect(t, rwc.QPNum, qb.Num(), "receive qp_num")
	Expect(t, rwc.WCFlags&verbs.WCFlagWithImm, 0, "IBV_WC_WITH_IMM on a SEND without immediate")
	dpExpectBytes(t, b.Buf[0:1000], want[0:1000], "first receive SGE")
	dpExpectBytes(t, b.Buf[2000:2500], want[1000:1500], "second receive SGE")
	dpExpectBytes(t, b.Buf[4000:5500], want[1500:3000], "third receive SGE")
	dpExpectUntouched(t, b.Buf[1000:2000], 0xee, "memory between the first two SGEs")
	dpExpectUntouched(t, b.Buf[2500:4000], 0xee, "memory between the last two SGEs")
	dpExpectUntouched(t, b.Buf[5500:6000], 0xee, "the unused end of the third SGE")
}

func dpRCSendImm(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	dpFill(a.Buf[:100], 3)
	dpRecv(t, qb, 0x62, b.MR.SGE(0, 256))
	wr := dpSend(0x52, verbs.WRSendWithImm, verbs.SendSignaled, a.MR.SGE(0, 100))
	wr.ImmData = 0x12345678
	dpPost(t, qa, wr)
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 0x52, verbs.WCSend, "sender completion")
	rwc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, rwc, 0x62, verbs.WCRecv, "receive completion")
	Expect(t, rwc.WCFlags&verbs.WCFlagWithImm, verbs.WCFlagWithImm, "IBV_WC_WITH_IMM")
	Expect(t, rwc.ImmData, uint32(0x12345678), "imm_data")
	Expect(t, rwc.ByteLen, uint32(100), "byte_len (the immediate data is not counted)")
	dpExpectBytes(t, b.Buf[:100], a.Buf[:100], "received bytes")
}

func dpRCWrite(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	dpFill(a.Buf[:2000], 4)
	dpFill(a.Buf[4096:4096+16], 5)
	for i := range b.Buf[8000:10300] {
		b.Buf[8000+i] = 0xee
	}
	dpFence(t, qb)
	dpRecv(t, qb, 0x71, b.MR.SGE(0, 64))
	dpPost(t, qa, dpRDMA(0x53, verbs.WRRDMAWrite, b.MR.Addr()+8192, b.MR.RKey(), a.MR.SGE(0, 2000)))
	wc := dpWait1(t, a.SCQ, "RDMA WRITE", a, b)
	dpExpectOK(t, wc, 0x53, verbs.WCRDMAWrite, "RDMA WRITE completion")
	// A SEND after the WRITE must find the receive WR posted before it.
	dpPost(t, qa, dpSend(0x54, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(4096, 16)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "SEND", a, b), 0x54, verbs.WCSend, "SEND completion")
	rwc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, rwc, 0x71, verbs.WCRecv, "the receive WR, consumed by the SEND and not by the WRITE")
	Expect(t, rwc.ByteLen, uint32(16), "byte_len of the SEND")
	if n := b.RCQ.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatalf("the receiver has %d more completions, want none for an RDMA WRITE", n)
	}
	dpFence(t, qb)
	dpExpectBytes(t, b.Buf[8192:8192+2000], a.Buf[:2000], "written bytes")
	dpExpectUntouched(t, b.Buf[8000:8192], 0xee, "memory before the written range")
	dpExpectUntouched(t, b.Buf[8192+2000:10300], 0xee, "memory after the written range")
}

func dpRCWriteImm(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	dpFill(a.Buf[:3000], 6)
	for i := range b.Buf[:1024] {
		b.Buf[i] = 0xee
	}
	dpFence(t, qb)
	dpRecv(t, qb, 0x81, b.MR.SGE(0, 256))
	wr := dpRDMA(0x55, verbs.WRRDMAWriteWithImm, b.MR.Addr()+16384, b.MR.RKey(), a.MR.SGE(0, 3000))
	wr.ImmData = 0xcafef00d
	dpPost(t, qa, wr)
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 0x55, verbs.WCRDMAWrite, "sender completion")
	rwc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, rwc, 0x81, verbs.WCRecvRDMAWithImm, "receive completion")
	Expect(t, rwc.ByteLen, uint32(3000), "byte_len (the length of the RDMA WRITE)")
	Expect(t, rwc.WCFlags&verbs.WCFlagWithImm, verbs.WCFlagWithImm, "IBV_WC_WITH_IMM")
	Expect(t, rwc.ImmData, uint32(0xcafef00d), "imm_data")
	Expect(t, rwc.QPNum, qb.Num(), "qp_num")
	dpFence(t, qb)
	dpExpectBytes(t, b.Buf[16384:16384+3000], a.Buf[:3000], "written bytes")
	dpExpectUntouched(t, b.Buf[:1024], 0xee, "the receive WR's buffer")
}

func dpRCRead(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	m2 := a.RegMR(t, nil, 4096, verbs.AccessLocalWrite)
	dpFill(b.Buf[20000:25000], 7)
	dpFence(t, qb)
	dpPost(t, qa, dpRDMA(0x56, verbs.WRRDMARead, b.MR.Addr()+20000, b.MR.RKey(), a.MR.SGE(0, 3000), m2.SGE(10, 2000)))
	wc := dpWait1(t, a.SCQ, "RDMA READ", a, b)
	dpExpectOK(t, wc, 0x56, verbs.WCRDMARead, "RDMA READ completion")
	Expect(t, wc.ByteLen, uint32(5000), "RDMA READ byte_len")
	dpExpectBytes(t, a.Buf[:3000], b.Buf[20000:23000], "first local SGE")
	dpExpectBytes(t, m2.Bytes()[10:2010], b.Buf[23000:25000], "second local SGE (another MR)")
	if n := b.RCQ.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatalf("the responder has %d completions, want none for an RDMA READ", n)
	}
}

func dpRCZeroLength(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	dpRecv(t, qb, 0x91)
	dpRecv(t, qb, 0x92, b.MR.SGE(0, 64))
	imm := dpSend(4, verbs.WRSendWithImm, verbs.SendSignaled)
	imm.ImmData = 0x77
	dpPost(t, qa, dpList(
		dpSend(1, verbs.WRSend, verbs.SendSignaled),
		dpRDMA(2, verbs.WRRDMAWrite, b.MR.Addr(), b.MR.RKey()),
		dpRDMA(3, verbs.WRRDMARead, b.MR.Addr(), b.MR.RKey()),
		imm,
	))
	wcs := dpWaitWC(t, a.SCQ, 4, "sender", a, b)
	for i, op := range []verbs.WCOpcode{verbs.WCSend, verbs.WCRDMAWrite, verbs.WCRDMARead, verbs.WCSend} {
		dpExpectOK(t, wcs[i], uint64(i+1), op, fmt.Sprintf("zero-length %s", op))
	}
	Expect(t, wcs[2].ByteLen, uint32(0), "zero-length RDMA READ byte_len")
	rwcs := dpWaitWC(t, b.RCQ, 2, "receiver", a, b)
	dpExpectOK(t, rwcs[0], 0x91, verbs.WCRecv, "zero-length SEND into num_sge 0")
	Expect(t, rwcs[0].ByteLen, uint32(0), "byte_len")
	dpExpectOK(t, rwcs[1], 0x92, verbs.WCRecv, "zero-length SEND_WITH_IMM")
	Expect(t, rwcs[1].ByteLen, uint32(0), "byte_len")
	Expect(t, rwcs[1].ImmData, uint32(0x77), "imm_data")
}

func dpMTUCase(mtu verbs.MTU) Case {
	return Case{
		Name:  "datapath/rc/multi-packet/path_mtu-" + fmt.Sprint(mtu.Bytes()),
		Cite:  `ibv_modify_qp(3): path_mtu "Path MTU (valid only for RC/UC QPs)"; ibv_post_send(3): RC messages of [0, 2^31] bytes, so a message longer than the path MTU is carried in several packets and arrives whole: SEND, RDMA WRITE and RDMA READ of 3.5 MTUs plus 3 bytes (packets of path_mtu bytes, the last one shorter)`,
		Label: Spec,
		Run: func(t *T, d Device) {
			a, b := dpOpen(t)
			qa, qb := dpConnect1(t, a, b, dpOpts{MTU: mtu})
			a1, err := qa.Query(verbs.AttrPathMTU)
			ExpectOK(t, err, "query_qp")
			Expect(t, a1.PathMTU, mtu, "path_mtu after the modify")
			n := 3*mtu.Bytes() + mtu.Bytes()/2 + 3
			dpFill(a.Buf[:n], byte(mtu))
			dpRecv(t, qb, 0xa1, b.MR.SGE(0, 20000))
			dpPost(t, qa, dpList(
				dpSend(1, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, n)),
				dpRDMA(2, verbs.WRRDMAWrite, b.MR.Addr()+32768, b.MR.RKey(), a.MR.SGE(0, n)),
				dpRDMA(3, verbs.WRRDMARead, b.MR.Addr()+32768, b.MR.RKey(), a.MR.SGE(65536, n)),
			))
			wcs := dpWaitWC(t, a.SCQ, 3, "sender", a, b)
			dpExpectOK(t, wcs[0], 1, verbs.WCSend, "SEND")
			dpExpectOK(t, wcs[1], 2, verbs.WCRDMAWrite, "RDMA WRITE")
			dpExpectOK(t, wcs[2], 3, verbs.WCRDMARead, "RDMA READ")
			Expect(t, wcs[2].ByteLen, uint32(n), "RDMA READ byte_len")
			rwc := dpWait1(t, b.RCQ, "receiver", a, b)
			dpExpectOK(t, rwc, 0xa1, verbs.WCRecv, "receive")
			Expect(t, rwc.ByteLen, uint32(n), "receive byte_len")
			dpFence(t, qb)
			dpExpectBytes(t, b.Buf[:n], a.Buf[:n], "SEND payload")
			dpExpectBytes(t, b.Buf[32768:32768+n], a.Buf[:n], "RDMA WRITE payload")
			dpExpectBytes(t, a.Buf[65536:65536+n], a.Buf[:n], "RDMA READ payload")
		},
	}
}

func dpRCOrdering(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	const n = 8
	wrs := make([]*verbs.SendWR, n)
	for i := range n {
		dpFill(a.Buf[i*512:i*512+100+i], byte(0x30+i))
		dpRecv(t, qb, uint64(0xb0+i), b.MR.SGE(i*512, 256))
		wrs[i] = dpSend(uint64(0x10+i), verbs.WRSend, verbs.SendSignaled, a.MR.SGE(i*512, 100+i))
	}
	dpPost(t, qa, dpList(wrs...))
	wcs := dpWaitWC(t, a.SCQ, n, "sender", a, b)
	rwcs := dpWaitWC(t, b.RCQ, n, "receiver", a, b)
	for i := range n {
		dpExpectOK(t, wcs[i], uint64(0x10+i), verbs.WCSend, fmt.Sprintf("send completion %d", i))
		dpExpectOK(t, rwcs[i], uint64(0xb0+i), verbs.WCRecv, fmt.Sprintf("receive completion %d", i))
		Expect(t, rwcs[i].ByteLen, uint32(100+i), fmt.Sprintf("receive %d byte_len", i))
		dpExpectBytes(t, b.Buf[i*512:i*512+100+i], a.Buf[i*512:i*512+100+i], fmt.Sprintf("message %d in receive WR %d", i, i))
	}
}

func dpRCInline(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	attr, err := qa.Query(verbs.AttrCap)
	ExpectOK(t, err, "query_qp")
	if attr.Cap.MaxInlineData < 48 {
		t.Skipf("max_inline_data %d < 48", attr.Cap.MaxInlineData)
	}
	dpFill(a.Buf[:256], 8)
	want := append(append([]byte(nil), a.Buf[:20]...), a.Buf[100:128]...)
	wantW := append([]byte(nil), a.Buf[200:240]...)
	dpRecv(t, qb, 0xc1, b.MR.SGE(0, 64))
	s1, s2 := a.MR.SGE(0, 20), a.MR.SGE(100, 28)
	s1.LKey ^= 0x5a5a5a5a // not checked for inline data
	dpPost(t, qa, dpList(
		dpSend(0x57, verbs.WRSend, verbs.SendSignaled|verbs.SendInline, s1, s2),
		&verbs.SendWR{WRID: 0x58, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled | verbs.SendInline,
			SGList: []verbs.SGE{a.MR.SGE(200, 40)}, RDMA: verbs.RDMAInfo{RemoteAddr: b.MR.Addr() + 4096, RKey: b.MR.RKey()}},
	))
	for i := range a.Buf[:256] {
		a.Buf[i] = 0xff // reusable as soon as post_send returned
	}
	wcs := dpWaitWC(t, a.SCQ, 2, "sender", a, b)
	dpExpectOK(t, wcs[0], 0x57, verbs.WCSend, "inline SEND of two elements")
	dpExpectOK(t, wcs[1], 0x58, verbs.WCRDMAWrite, "inline RDMA WRITE")
	rwc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, rwc, 0xc1, verbs.WCRecv, "receive")
	Expect(t, rwc.ByteLen, uint32(48), "byte_len")
	dpExpectBytes(t, b.Buf[:48], want, "inline SEND data as it was at post time")
	dpFence(t, qb)
	dpExpectBytes(t, b.Buf[4096:4096+40], wantW, "inline RDMA WRITE data as it was at post time")
}

func dpAtomicFAA(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	word := b.Buf[4096:4104]
	binary.NativeEndian.PutUint64(word, 40)
	dpFence(t, qb)
	faa := func(id uint64, add uint64, off int) {
		dpFence(t, qb) // after the case's last access to the word
		dpPost(t, qa, &verbs.SendWR{WRID: id, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(off, 8)}, Atomic: verbs.AtomicInfo{RemoteAddr: b.MR.Addr() + 4096, RKey: b.MR.RKey(), CompareAdd: add}})
		wc := dpWait1(t, a.SCQ, "FETCH_AND_ADD", a, b)
		dpExpectOK(t, wc, id, verbs.WCFetchAdd, "FETCH_AND_ADD completion")
		Expect(t, wc.ByteLen, uint32(8), "FETCH_AND_ADD byte_len")
	}
	faa(1, 2, 0)
	Expect(t, binary.NativeEndian.Uint64(a.Buf[0:]), uint64(40), "value fetched by the first add")
	dpFence(t, qb)
	Expect(t, binary.NativeEndian.Uint64(word), uint64(42), "remote word after adding 2")
	faa(2, ^uint64(0), 8) // adding 2^64-1 wraps: -1
	Expect(t, binary.NativeEndian.Uint64(a.Buf[8:]), uint64(42), "value fetched by the second add")
	dpFence(t, qb)
	Expect(t, binary.NativeEndian.Uint64(word), uint64(41), "remote word after adding 2^64-1 (modulo 2^64)")
}

func dpAtomicCAS(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb := dpConnect1(t, a, b, dpOpts{})
	word := b.Buf[4096:4104]
	binary.NativeEndian.PutUint64(word, 42)
	dpFence(t, qb)
	cas := func(id, cmp, swap uint64, off int) {
		dpFence(t, qb) // after the case's last access to the word
		dpPost(t, qa, &verbs.SendWR{WRID: id, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.MR.SGE(off, 8)}, Atomic: verbs.AtomicInfo{RemoteAddr: b.MR.Addr() + 4096, RKey: b.MR.RKey(), CompareAdd: cmp, Swap: swap}})
		wc := dpWait1(t, a.SCQ, "CMP_AND_SWP", a, b)
		dpExpectOK(t, wc, id, verbs.WCCompSwap, "CMP_AND_SWP completion")
		Expect(t, wc.ByteLen, uint32(8), "CMP_AND_SWP byte_len")
	}
	cas(1, 41, 7, 0)
	Expect(t, binary.NativeEndian.Uint64(a.Buf[0:]), uint64(42), "value fetched by a compare that fails")
	dpFence(t, qb)
	Expect(t, binary.NativeEndian.Uint64(word), uint64(42), "remote word after a compare that fails (unchanged)")
	cas(2, 42, 7, 8)
	Expect(t, binary.NativeEndian.Uint64(a.Buf[8:]), uint64(42), "value fetched by a compare that succeeds")
	dpFence(t, qb)
	Expect(t, binary.NativeEndian.Uint64(word), uint64(7), "remote word after a compare that succeeds (swapped)")
}

func dpAtomicConcurrent(t *T, d Device) {
	a, b := dpOpen(t)
	const n = 128
	o := dpOpts{Cap: verbs.QPCap{MaxSendWR: n, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	qa1, qb1 := dpConnect1(t, a, b, o)
	qa2, qb2 := dpConnect1(t, a, b, o)
	const base = 1 << 40
	binary.NativeEndian.PutUint64(b.Buf[8192:], base)
	dpFence(t, qb1, qb2)
	for k, q := range []QP{qa1, qa2} {
		wrs := make([]*verbs.SendWR, n)
		for i := range wrs {
			slot := (k*n + i) * 8
			wrs[i] = &verbs.SendWR{WRID: uint64(slot), Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{a.MR.SGE(slot, 8)}, Atomic: verbs.AtomicInfo{RemoteAddr: b.MR.Addr() + 8192, RKey: b.MR.RKey(), CompareAdd: 1}}
		}
		dpPost(t, q, dpList(wrs...))
	}
	wcs := dpWaitWC(t, a.SCQ, 2*n, "FETCH_AND_ADD from two QPs", a, b)
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("FETCH_AND_ADD completion %s", dpWC(wc))
		}
	}
	dpFence(t, qb1, qb2)
	Expect(t, binary.NativeEndian.Uint64(b.Buf[8192:]), uint64(base+2*n), "remote word after 2x128 additions of 1")
	got := make([]uint64, 2*n)
	for i := range got {
		got[i] = binary.NativeEndian.Uint64(a.Buf[i*8:])
	}
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	for i, v := range got {
		if v != base+uint64(i) {
			t.Fatalf("fetched values are not base..base+%d, each once: sorted value %d is base%+d", 2*n-1, i, int64(v-base))
		}
	}
}

// dpQueryPSNs: a 3000-byte SEND at path MTU 1024 is three packets; after
// it, the sender's sq_psn and the receiver's rq_psn have moved on by
// three, and the directions that carried nothing did not move.
func dpQueryPSNs(t *T, d Device) {
	a, b := dpOpen(t)
	o := dpOpts{MTU: verbs.MTU1024, PSN: 0x100}
	qa, qb := dpConnect1(t, a, b, o)
	dpRecv(t, qb, 0x91, b.MR.SGE(0, 4096))
	dpPost(t, qa, dpSend(0x92, verbs.WRSend, verbs.SendSignaled, a.MR.SGE(0, 3000)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 0x92, verbs.WCSend, "sender completion")
	dpExpectOK(t, dpWait1(t, b.RCQ, "receiver", a, b), 0x91, verbs.WCRecv, "receive completion")
	sa, err := qa.Query(verbs.AttrSQPSN | verbs.AttrRQPSN)
	ExpectOK(t, err, "query_qp (sender)")
	sb, err := qb.Query(verbs.AttrSQPSN | verbs.AttrRQPSN)
	ExpectOK(t, err, "query_qp (receiver)")
	Expect(t, sa.SQPSN, uint32(0x103), "the sender's sq_psn after three packets")
	Expect(t, sb.RQPSN, uint32(0x103), "the receiver's rq_psn after three packets")
	Expect(t, sa.RQPSN, uint32(0x100), "the sender's rq_psn (nothing received)")
	Expect(t, sb.SQPSN, uint32(0x100), "the receiver's sq_psn (nothing sent: ACKs carry the requester's PSN)")
}
