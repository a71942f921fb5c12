package conformance

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/softhca/softhca/verbs"
)

// Data-path cases for unreliable datagrams: the GRH area, Q_Keys, drops,
// the path MTU limit and the send queue error state.

const dpGRHCite = `ibv_post_recv(3) (seed 000): "UD QP の場合、受信領域の先頭 40 バイトには必ず Global Routing Header (GRH) 用の領域が確保される" (the first 40 bytes of a UD receive buffer are always the GRH area, filled when the message has a GRH); IBTA annex A17 (RoCEv2): for an IPv4 packet the area holds 20 zero bytes and then the IPv4 header, for IPv6 the IPv6 header (rdma-core ibv_init_ah_from_wc reads it so); ibv_poll_cq(3): IBV_WC_GRH "GRH is present (valid only for UD QPs)", src_qp "Source QP number (remote QP number) of the completed WR (valid only for UD QPs)", byte_len counts the 40 bytes`

func init() {
	Register(
		Case{
			Name:  "datapath/ud/grh-area-and-completion",
			Cite:  dpGRHCite,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: `Linux 6.1.192 drivers/infiniband/sw/rxe/rxe_net.c: rxe_prepare() sets RXE_LOOPBACK_MASK when "ether_addr_equal(skb->dev->dev_addr, av->dmac)" (both QPs on one device, as in the suite's runs), and rxe_xmit_packet() then hands the skb to rxe_loopback() -> rxe_rcv() instead of ip_local_out(); prepare_ipv4_hdr() fills the IPv4 header without its checksum, which only net/ipv4/ip_output.c __ip_local_out() sets ("ip_send_check(iph)"); rxe_resp.c execute() copies that header into the GRH area as it is ("memcpy(&hdr.roce4grh, ip_hdr(skb), ...)")`,
				Note: "a message looped back on one device carries an IPv4 header whose checksum was never computed into the GRH area",
			}},
			Run: dpUDGRH,
		},
		Case{
			Name:  "datapath/ud/send-with-imm",
			Cite:  `ibv_post_send(3): IBV_WR_SEND_WITH_IMM is valid on UD; ibv_poll_cq(3): wc_flags IBV_WC_GRH|IBV_WC_WITH_IMM, imm_data`,
			Label: Spec,
			Run:   dpUDImm,
		},
		Case{
			Name:  "datapath/ud/wrong-qkey-is-dropped",
			Cite:  `ibv_modify_qp(3): qkey "Q_Key for the QP (valid only for UD QPs)"; IBTA 10.2.5: a UD message whose Q_Key differs from the receiving QP's is dropped silently (rxe check_keys); the receive WR stays for the next message`,
			Label: Spec,
			Run:   dpUDWrongQKey,
		},
		Case{
			Name:  "datapath/ud/qkey-with-high-bit-uses-the-qp-qkey",
			Cite:  `IBTA 10.2.5: when the Q_Key in a UD send WR has its most significant bit set, the QP's own Q_Key is sent instead (rxe_req.c: "(int)ibwr->wr.ud.remote_qkey < 0 ? qp->attr.qkey"); here the WR names 0x80001234 and the message reaches a QP whose Q_Key is the sender QP's`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeUDQKeyHighBit,
				Note: "a remote_qkey with the high bit set is sent as is, not replaced by the QP's qkey, so the receiver drops the message",
			}},
			Run: dpUDQKeyHighBit,
		},
		Case{
			Name:  "datapath/ud/no-receive-wr-drops-the-message",
			Cite:  `ibv_post_send(3): a SEND consumes a receive WR of the remote QP; with none posted on a UD QP the message is dropped silently (wire-notes: "No receive WQE ... On UC/UD: drop"); the sender completes successfully`,
			Label: Spec,
			Run:   dpUDNoReceive,
		},
		Case{
			Name:  "datapath/ud/message-longer-than-receive-buffer-is-dropped",
			Cite:  `ibv_post_recv(3) (seed 000): "受信したメッセージ長が Receive WR の受信領域長よりも大きい場合は、UD QP ではメッセージが破棄され" (a message longer than the receive buffer is dropped on a UD QP); no completion, and the receive WR is not consumed: the next message that fits uses it`,
			Label: Spec,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeCopyDataLength,
				Note: "does not drop the UD message: the receive WR completes with IBV_WC_LOC_QP_OP_ERR and the QP goes to ERR",
			}},
			Run: dpUDTooLongForBuffer,
		},
		Case{
			Name:  "datapath/ud/message-longer-than-path-mtu/emits-nothing",
			Cite:  `ibv_post_send(3) (seed 003): UD message size is [0, path MTU]; IBTA C10-93.1.1: if a UD message exceeds the port MTU "the CI shall not emit any packets for this message"`,
			Label: Spec,
			Run: func(t *T, d Device) {
				dpUDOversize(t, false)
			},
		},
		Case{
			Name:  "datapath/ud/message-longer-than-path-mtu/completes-without-error",
			Cite:  `IBTA C10-93.1.1 (quoted in rxe_req.c): if a UD message exceeds the port MTU "the CI shall not emit any packets for this message. Further, the CI shall not generate an error due to this condition": the send completes successfully and the QP stays in RTS (rxe does the same; hca.Config.UDOversizeError selects IBV_WC_LOC_LEN_ERR instead)`,
			Label: Spec,
			Run: func(t *T, d Device) {
				dpUDOversize(t, true)
			},
		},
		Case{
			Name:  "datapath/ud/send-error-enters-sqe-and-flushes",
			Cite:  `IBTA 10.3.1 (Send Queue Error state): a UD or UC QP whose send WR completes in error enters SQE; the WR completes with the error and every other outstanding send WR with IBV_WC_WR_FLUSH_ERR, while the receive queue keeps working (ibv_poll_cq(3): IBV_WC_LOC_PROT_ERR for a bad local element). rxe moves to ERR instead (it never enters SQE)`,
			Label: Spec,
			Run:   dpUDSQE,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeErrorToERR,
				Note: "a UD send that completes in error moves the QP to ERROR (flushing both queues), never to SQE",
			}},
		},
		Case{
			Name:  "datapath/ud/sqe-to-rts-resumes-sending",
			Cite:  `ibv_modify_qp(3)/IBTA 10.3.1 table 91: SQE -> RTS is a legal transition (UD/UC) that returns the QP to normal operation; sends posted afterwards are delivered`,
			Label: Spec,
			Run:   dpUDSQEToRTS,
			Deviations: []Deviation{{
				Impl: ImplRxe,
				Cite: rxeErrorToERR,
				Note: "the failed UD send leaves the QP in ERROR, not SQE, so there is no SQE -> RTS to take",
			}},
		},
	)
}

// rxeErrorToERR is where rxe's handling of a send completed in error
// comes from: every error goes through the completer's COMPST_ERROR, which
// moves the QP to ERR whatever its type.
const rxeErrorToERR = `drivers/infiniband/sw/rxe/rxe_comp.c: get_wqe() returns COMPST_ERROR for a WQE the requester marked wqe_state_error (rxe_req.c: rxe_requester() "err: wqe->state = wqe_state_error"), and rxe_completer() "case COMPST_ERROR: ... do_complete(qp, wqe); rxe_qp_error(qp);"; rxe_qp.c: rxe_qp_error() sets "qp->attr.qp_state = IB_QPS_ERR" (read at torvalds/linux 06a7fcfc9a32 and later)`

// dpUDPair connects UD QPs on a and b and returns them with an address
// handle from a to b.
func dpUDPair(t *T, a, b *dpSide) (qa, qb QP, ah AH) {
	t.Helper()
	qa, qb = dpConnect1(t, a, b, dpOpts{Type: verbs.QPTypeUD})
	return qa, qb, a.AH(t, b)
}

// dpUDSend builds a UD SEND.
func dpUDSend(id uint64, ah AH, qpn, qkey uint32, sges ...verbs.SGE) *verbs.SendWR {
	return &verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: sges,
		UD: verbs.UDInfo{AH: ah, RemoteQPN: qpn, RemoteQKey: qkey}}
}

func dpUDGRH(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb, ah := dpUDPair(t, a, b)
	copy(a.Buf, "hello over UD")
	for i := range b.Buf[:512] {
		b.Buf[i] = 0xee
	}
	dpFence(t, qb)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 40+256))
	dpPost(t, qa, dpUDSend(1, ah, qb.Num(), dpQKey, a.MR.SGE(0, 13)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCSend, "UD SEND")
	wc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, wc, 0x61, verbs.WCRecv, "UD receive")
	Expect(t, wc.ByteLen, uint32(40+13), "byte_len (40 bytes of GRH area + 13)")
	Expect(t, wc.WCFlags&verbs.WCFlagGRH, verbs.WCFlagGRH, "IBV_WC_GRH")
	Expect(t, wc.SrcQP, qa.Num(), "src_qp")
	Expect(t, wc.QPNum, qb.Num(), "qp_num")
	Expect(t, string(b.Buf[40:53]), "hello over UD", "payload after the GRH area")
	src, dst := a.GID.Addr(), b.GID.Addr()
	g := b.Buf[:40]
	if src.Is4() {
		dpExpectUntouched(t, g[:20], 0, "the first 20 bytes of the GRH area of an IPv4 packet")
		h := g[20:40]
		Expect(t, h[0], byte(0x45), "IPv4 version and header length")
		Expect(t, h[9], byte(17), "IPv4 protocol (UDP)")
		// BTH 12 + DETH 8 + 13 bytes + 3 pad + ICRC 4, in UDP, in IPv4.
		Expect(t, binary.BigEndian.Uint16(h[2:]), uint16(20+8+12+8+13+3+4), "IPv4 total length")
		Expect(t, netip.AddrFrom4([4]byte(h[12:16])), src, "IPv4 source address (the sender's)")
		Expect(t, netip.AddrFrom4([4]byte(h[16:20])), dst, "IPv4 destination address (the receiver's)")
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(h[i:]))
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		Expect(t, sum, uint32(0xffff), "IPv4 header checksum (one's complement sum)")
	} else {
		Expect(t, g[0]>>4, byte(6), "IPv6 version")
		Expect(t, g[6], byte(17), "IPv6 next header (UDP)")
		Expect(t, netip.AddrFrom16([16]byte(g[8:24])), src, "IPv6 source address")
		Expect(t, netip.AddrFrom16([16]byte(g[24:40])), dst, "IPv6 destination address")
	}
	dpExpectUntouched(t, b.Buf[53:40+256], 0xee, "the receive buffer after the message")
}

func dpUDImm(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb, ah := dpUDPair(t, a, b)
	dpFill(a.Buf[:100], 20)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 40+256))
	wr := dpUDSend(1, ah, qb.Num(), dpQKey, a.MR.SGE(0, 100))
	wr.Opcode, wr.ImmData = verbs.WRSendWithImm, 0xabcdef01
	dpPost(t, qa, wr)
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCSend, "UD SEND_WITH_IMM")
	wc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, wc, 0x61, verbs.WCRecv, "UD receive")
	Expect(t, wc.WCFlags&(verbs.WCFlagGRH|verbs.WCFlagWithImm), verbs.WCFlagGRH|verbs.WCFlagWithImm, "wc_flags")
	Expect(t, wc.ImmData, uint32(0xabcdef01), "imm_data")
	Expect(t, wc.ByteLen, uint32(140), "byte_len")
	dpExpectBytes(t, b.Buf[40:140], a.Buf[:100], "payload")
}

// dpUDExpectOnly checks that the receiver got exactly one message, the
// one at a.Buf[off:off+n], in receive WR id.
func dpUDExpectOnly(t *T, a, b *dpSide, id uint64, off, n int) {
	t.Helper()
	wc := dpWait1(t, b.RCQ, "receiver", a, b)
	dpExpectOK(t, wc, id, verbs.WCRecv, "UD receive")
	Expect(t, wc.ByteLen, uint32(40+n), "byte_len")
	dpExpectBytes(t, b.Buf[40:40+n], a.Buf[off:off+n], "the receive WR holds the message that was not dropped")
	dpNoWC(t, b.RCQ, "the receiver after that message")
}

func dpUDWrongQKey(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb, ah := dpUDPair(t, a, b)
	dpFill(a.Buf[:200], 21)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 40+256))
	dpPost(t, qa, dpList(
		dpUDSend(1, ah, qb.Num(), dpQKey+1, a.MR.SGE(0, 100)),
		dpUDSend(2, ah, qb.Num(), dpQKey, a.MR.SGE(100, 100)),
	))
	wcs := dpWaitWC(t, a.SCQ, 2, "sender", a, b)
	dpExpectOK(t, wcs[0], 1, verbs.WCSend, "UD SEND with a wrong Q_Key (the sender cannot know)")
	dpExpectOK(t, wcs[1], 2, verbs.WCSend, "UD SEND with the right Q_Key")
	dpUDExpectOnly(t, a, b, 0x61, 100, 100)
}

func dpUDQKeyHighBit(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb, ah := dpUDPair(t, a, b) // both QPs have Q_Key dpQKey
	dpFill(a.Buf[:100], 22)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 40+256))
	dpPost(t, qa, dpUDSend(1, ah, qb.Num(), 0x80001234, a.MR.SGE(0, 100)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCSend, "UD SEND")
	dpUDExpectOnly(t, a, b, 0x61, 0, 100)
}

func dpUDNoReceive(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb, ah := dpUDPair(t, a, b)
	dpFill(a.Buf[:200], 23)
	dpPost(t, qa, dpUDSend(1, ah, qb.Num(), dpQKey, a.MR.SGE(0, 100)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCSend, "UD SEND to a QP without receive WRs")
	dpNoWC(t, b.RCQ, "the receiver without receive WRs")
	Expect(t, State(t, qb), verbs.QPStateRTS, "receiver state")
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 40+256))
	dpPost(t, qa, dpUDSend(2, ah, qb.Num(), dpQKey, a.MR.SGE(100, 100)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 2, verbs.WCSend, "second UD SEND")
	dpUDExpectOnly(t, a, b, 0x61, 100, 100)
}

func dpUDTooLongForBuffer(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb, ah := dpUDPair(t, a, b)
	dpFill(a.Buf[:400], 24)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 40+128))
	dpPost(t, qa, dpList(
		dpUDSend(1, ah, qb.Num(), dpQKey, a.MR.SGE(0, 300)),
		dpUDSend(2, ah, qb.Num(), dpQKey, a.MR.SGE(300, 100)),
	))
	wcs := dpWaitWC(t, a.SCQ, 2, "sender", a, b)
	dpExpectOK(t, wcs[0], 1, verbs.WCSend, "UD SEND longer than the receive buffer")
	dpExpectOK(t, wcs[1], 2, verbs.WCSend, "UD SEND that fits")
	dpUDExpectOnly(t, a, b, 0x61, 300, 100)
	Expect(t, State(t, qb), verbs.QPStateRTS, "receiver state")
}

// dpUDOversize sends a UD message one byte longer than the port's active
// MTU: nothing may reach the receiver; with status it also checks
// softhca's completion (IBV_WC_LOC_LEN_ERR, QP in SQE).
func dpUDOversize(t *T, status bool) {
	a, b := dpOpen(t)
	qa, qb, ah := dpUDPair(t, a, b)
	pa, err := a.D.QueryPort(1)
	ExpectOK(t, err, "query_port")
	n := pa.ActiveMTU.Bytes() + 1
	if n+40 > dpMemSize/2 {
		t.Skipf("active MTU %d too large for the case's buffers", n-1)
	}
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 40+n))
	dpPost(t, qa, dpUDSend(1, ah, qb.Num(), dpQKey, a.MR.SGE(0, n)))
	wc := dpWait1(t, a.SCQ, "sender", a, b)
	dpNoWC(t, b.RCQ, "the receiver of a UD message longer than the path MTU")
	if !status {
		return
	}
	dpExpectWC(t, wc, 1, verbs.WCSuccess, verbs.WCSend, "UD SEND of active_mtu+1 bytes")
	dpWaitState(t, qa, verbs.QPStateRTS, "sender")
}

// dpUDBadLKey posts a UD SEND with a bad local key followed by a good one.
func dpUDBadLKey(t *T, a *dpSide, qa QP, ah AH, qpn uint32) {
	t.Helper()
	bad := a.MR.SGE(0, 16)
	bad.LKey ^= 0x00ff00ff
	dpPost(t, qa, dpList(
		dpUDSend(1, ah, qpn, dpQKey, bad),
		dpUDSend(2, ah, qpn, dpQKey, a.MR.SGE(0, 16)),
		dpUDSend(3, ah, qpn, dpQKey, a.MR.SGE(0, 16)),
	))
}

func dpUDSQE(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb, ah := dpUDPair(t, a, b)
	dpUDBadLKey(t, a, qa, ah, qb.Num())
	dpExpectWC(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCLocProtErr, 0, "UD SEND with a bad local key")
	flushed := dpWaitWCFor(t, a.SCQ, 2, time.Second, "the send WRs posted after it (flushed on entering SQE)", a, b)
	dpExpectFlushed(t, flushed, "the send WRs posted with it", 2, 3)
	dpWaitState(t, qa, verbs.QPStateSQE, "sender")
	// The receive queue of a QP in SQE keeps working.
	dpFill(b.Buf[4096:4096+32], 25)
	dpFence(t, qb)
	dpRecv(t, qa, 0x71, a.MR.SGE(8192, 40+64))
	bah := b.AH(t, a)
	dpPost(t, qb, dpUDSend(9, bah, qa.Num(), dpQKey, b.MR.SGE(4096, 32)))
	dpExpectOK(t, dpWait1(t, b.SCQ, "B's sender", a, b), 9, verbs.WCSend, "B's UD SEND")
	wc := dpWait1(t, a.RCQ, "receiver in SQE", a, b)
	dpExpectOK(t, wc, 0x71, verbs.WCRecv, "a receive on the QP in SQE")
	dpExpectBytes(t, a.Buf[8192+40:8192+40+32], b.Buf[4096:4096+32], "payload received in SQE")
}

func dpUDSQEToRTS(t *T, d Device) {
	a, b := dpOpen(t)
	qa, qb, ah := dpUDPair(t, a, b)
	bad := a.MR.SGE(0, 16)
	bad.LKey ^= 0x00ff00ff
	dpPost(t, qa, dpUDSend(1, ah, qb.Num(), dpQKey, bad))
	dpExpectWC(t, dpWait1(t, a.SCQ, "sender", a, b), 1, verbs.WCLocProtErr, 0, "UD SEND with a bad local key")
	dpWaitState(t, qa, verbs.QPStateSQE, "sender")
	ExpectOK(t, qa.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.AttrState), "modify SQE -> RTS")
	dpFill(a.Buf[:64], 26)
	dpRecv(t, qb, 0x61, b.MR.SGE(0, 40+64))
	dpPost(t, qa, dpUDSend(2, ah, qb.Num(), dpQKey, a.MR.SGE(0, 64)))
	dpExpectOK(t, dpWait1(t, a.SCQ, "sender", a, b), 2, verbs.WCSend, "UD SEND after SQE -> RTS")
	dpUDExpectOnly(t, a, b, 0x61, 0, 64)
}
