package rdma

import (
	"fmt"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// The protocol between the runner and the agent (agent.c): one request,
// one response, each one SOCK_SEQPACKET message of fixed little-endian
// records. The package doc describes it; agent.c's enum op must match.

// protoVersion is what the agent answers to opHello.
const protoVersion = 1

// maxMsg bounds a message either way (agent.c's MAX_MSG): below the
// default socket buffer, so that a message is never refused for its size.
const maxMsg = 192 << 10

// maxPoll is the most completions one opPollCQ returns (agent.c's
// MAX_POLL); Poll asks again for more.
const maxPoll = 1024

// Request op codes.
const (
	opHello uint32 = iota + 1
	opQueryDevice
	opQueryPort
	opQueryGID
	opQueryPKey
	opAllocPD
	opDeallocPD
	opRegMR
	opDeregMR
	opCreateChannel
	opDestroyChannel
	opCreateCQ
	opDestroyCQ
	opResizeCQ
	opReqNotifyCQ
	opPollCQ
	opGetCQEvent
	opGetAsyncEvent
	opCreateSRQ
	opModifySRQ
	opQuerySRQ
	opDestroySRQ
	opPostSRQRecv
	opPostSRQOps
	opCreateAH
	opDestroyAH
	opCreateQP
	opQueryQP
	opModifyQP
	opPostSend
	opPostRecv
	opAttachMcast
	opDetachMcast
	opDestroyQP
	opLast = opDestroyQP
)

var opNames = [...]string{
	opHello: "hello", opQueryDevice: "query_device", opQueryPort: "query_port", opQueryGID: "query_gid",
	opQueryPKey: "query_pkey", opAllocPD: "alloc_pd", opDeallocPD: "dealloc_pd", opRegMR: "reg_mr",
	opDeregMR: "dereg_mr", opCreateChannel: "create_comp_channel", opDestroyChannel: "destroy_comp_channel",
	opCreateCQ: "create_cq", opDestroyCQ: "destroy_cq", opResizeCQ: "resize_cq", opReqNotifyCQ: "req_notify_cq",
	opPollCQ: "poll_cq", opGetCQEvent: "get_cq_event", opGetAsyncEvent: "get_async_event",
	opCreateSRQ: "create_srq", opModifySRQ: "modify_srq", opQuerySRQ: "query_srq", opDestroySRQ: "destroy_srq",
	opPostSRQRecv: "post_srq_recv", opPostSRQOps: "post_srq_ops", opCreateAH: "create_ah",
	opDestroyAH: "destroy_ah", opCreateQP: "create_qp", opQueryQP: "query_qp", opModifyQP: "modify_qp",
	opPostSend: "post_send", opPostRecv: "post_recv", opAttachMcast: "attach_mcast",
	opDetachMcast: "detach_mcast", opDestroyQP: "destroy_qp",
}

// opName names an op as libibverbs names the verb, without "ibv_".
func opName(op uint32) string {
	if op >= 1 && op <= opLast {
		return opNames[op]
	}
	return fmt.Sprintf("op %d", op)
}

// Kinds of buffer opRegMR registers.
const (
	mrNil   = 0 // addr NULL, length 0
	mrEmpty = 1 // a valid address, length 0
	mrMemfd = 2 // the memfd passed with the request
)

// Kinds of element an async event names.
const (
	evNone = 0
	evCQ   = 1
	evQP   = 2
	evSRQ  = 3
	evPort = 4
)

// Record sizes, for bounding counts by the bytes that remain.
const (
	sgeSize    = 16
	wcSize     = 58
	sendWRBase = 80 // a send WR without its SGEs, with its SGE count
	recvWRBase = 12
	opsWRBase  = 52
)

// encoder appends little-endian fields to a request.
type encoder struct{ b []byte }

func newRequest(op uint32) *encoder {
	e := &encoder{b: make([]byte, 0, 64)}
	e.u32(op)
	return e
}

func (e *encoder) u8(v uint8) { e.b = append(e.b, v) }
func (e *encoder) u16(v uint16) {
	e.b = append(e.b, byte(v), byte(v>>8))
}
func (e *encoder) u32(v uint32) {
	e.b = append(e.b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}
func (e *encoder) u64(v uint64) { e.u32(uint32(v)); e.u32(uint32(v >> 32)) }
func (e *encoder) i32(v int32)  { e.u32(uint32(v)) }
func (e *encoder) bytes(p []byte) {
	e.b = append(e.b, p...)
}
func (e *encoder) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// decoder reads little-endian fields of a response. Reading past the
// end, or a count larger than the bytes left could hold, sets err and
// reads zeros: a short or hostile response (from a dying agent) is an
// error, never a panic.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: short or malformed response from the agent (%s at byte %d of %d)", syscall.EPROTO, what, d.off, len(d.b))
	}
}

func (d *decoder) take(n int, what string) []byte {
	if d.err != nil || n < 0 || len(d.b)-d.off < n {
		d.fail(what)
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *decoder) u8(what string) uint8 {
	p := d.take(1, what)
	if p == nil {
		return 0
	}
	return p[0]
}

func (d *decoder) u16(what string) uint16 {
	p := d.take(2, what)
	if p == nil {
		return 0
	}
	return uint16(p[0]) | uint16(p[1])<<8
}

func (d *decoder) u32(what string) uint32 {
	p := d.take(4, what)
	if p == nil {
		return 0
	}
	return uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
}

func (d *decoder) u64(what string) uint64 {
	lo := d.u32(what)
	hi := d.u32(what)
	return uint64(lo) | uint64(hi)<<32
}

func (d *decoder) i32(what string) int32 { return int32(d.u32(what)) }

// count reads a u32 count of records of at least size bytes each and
// checks that the rest of the message could hold them.
func (d *decoder) count(size int, what string) int {
	n := d.u32(what)
	if d.err != nil {
		return 0
	}
	if uint64(n)*uint64(size) > uint64(len(d.b)-d.off) {
		d.fail(what + " count")
		return 0
	}
	return int(n)
}

// decodeHeader splits a response into its errno and its body.
func decodeHeader(b []byte) (syscall.Errno, *decoder, error) {
	d := &decoder{b: b}
	e := d.u32("errno")
	if d.err != nil {
		return 0, nil, d.err
	}
	return syscall.Errno(e), d, nil
}

// --- records ---

func encodeSGEs(e *encoder, sges []verbs.SGE) {
	e.u32(uint32(len(sges)))
	for _, s := range sges {
		e.u64(s.Addr)
		e.u32(s.Length)
		e.u32(s.LKey)
	}
}

func encodeAHAttr(e *encoder, a *verbs.AHAttr) {
	e.bytes(a.GRH.DGID[:])
	e.u32(a.GRH.FlowLabel)
	e.u8(a.GRH.SGIDIndex)
	e.u8(a.GRH.HopLimit)
	e.u8(a.GRH.TrafficClass)
	e.u16(a.DLID)
	e.u8(a.SL)
	e.u8(a.SrcPathBits)
	e.u8(a.StaticRate)
	e.bool(a.IsGlobal)
	e.u8(a.PortNum)
}

func decodeAHAttr(d *decoder) verbs.AHAttr {
	var a verbs.AHAttr
	copy(a.GRH.DGID[:], d.take(16, "dgid"))
	a.GRH.FlowLabel = d.u32("flow_label")
	a.GRH.SGIDIndex = d.u8("sgid_index")
	a.GRH.HopLimit = d.u8("hop_limit")
	a.GRH.TrafficClass = d.u8("traffic_class")
	a.DLID = d.u16("dlid")
	a.SL = d.u8("sl")
	a.SrcPathBits = d.u8("src_path_bits")
	a.StaticRate = d.u8("static_rate")
	a.IsGlobal = d.u8("is_global") != 0
	a.PortNum = d.u8("port_num")
	return a
}

func encodeCap(e *encoder, c *verbs.QPCap) {
	e.u32(c.MaxSendWR)
	e.u32(c.MaxRecvWR)
	e.u32(c.MaxSendSGE)
	e.u32(c.MaxRecvSGE)
	e.u32(c.MaxInlineData)
}

func decodeCap(d *decoder) verbs.QPCap {
	return verbs.QPCap{MaxSendWR: d.u32("max_send_wr"), MaxRecvWR: d.u32("max_recv_wr"),
		MaxSendSGE: d.u32("max_send_sge"), MaxRecvSGE: d.u32("max_recv_sge"), MaxInlineData: d.u32("max_inline_data")}
}

func encodeQPAttr(e *encoder, a *verbs.QPAttr) {
	e.u8(uint8(a.QPState))
	e.u8(uint8(a.CurQPState))
	e.u8(uint8(a.PathMTU))
	e.u8(uint8(a.PathMigState))
	e.u32(a.QKey)
	e.u32(a.RQPSN)
	e.u32(a.SQPSN)
	e.u32(a.DestQPNum)
	e.u32(uint32(a.QPAccessFlags))
	encodeCap(e, &a.Cap)
	encodeAHAttr(e, &a.AHAttr)
	encodeAHAttr(e, &a.AltAHAttr)
	e.u16(a.PKeyIndex)
	e.u16(a.AltPKeyIndex)
	e.bool(a.EnSQDAsyncNotify)
	e.bool(a.SQDraining)
	e.u8(a.MaxRdAtomic)
	e.u8(a.MaxDestRdAtomic)
	e.u8(a.MinRNRTimer)
	e.u8(a.PortNum)
	e.u8(a.Timeout)
	e.u8(a.RetryCnt)
	e.u8(a.RNRRetry)
	e.u8(a.AltPortNum)
	e.u8(a.AltTimeout)
	e.u32(a.RateLimit)
}

func decodeQPAttr(d *decoder) verbs.QPAttr {
	var a verbs.QPAttr
	a.QPState = verbs.QPState(d.u8("qp_state"))
	a.CurQPState = verbs.QPState(d.u8("cur_qp_state"))
	a.PathMTU = verbs.MTU(d.u8("path_mtu"))
	a.PathMigState = verbs.MigState(d.u8("path_mig_state"))
	a.QKey = d.u32("qkey")
	a.RQPSN = d.u32("rq_psn")
	a.SQPSN = d.u32("sq_psn")
	a.DestQPNum = d.u32("dest_qp_num")
	a.QPAccessFlags = verbs.AccessFlags(d.u32("qp_access_flags"))
	a.Cap = decodeCap(d)
	a.AHAttr = decodeAHAttr(d)
	a.AltAHAttr = decodeAHAttr(d)
	a.PKeyIndex = d.u16("pkey_index")
	a.AltPKeyIndex = d.u16("alt_pkey_index")
	a.EnSQDAsyncNotify = d.u8("en_sqd_async_notify") != 0
	a.SQDraining = d.u8("sq_draining") != 0
	a.MaxRdAtomic = d.u8("max_rd_atomic")
	a.MaxDestRdAtomic = d.u8("max_dest_rd_atomic")
	a.MinRNRTimer = d.u8("min_rnr_timer")
	a.PortNum = d.u8("port_num")
	a.Timeout = d.u8("timeout")
	a.RetryCnt = d.u8("retry_cnt")
	a.RNRRetry = d.u8("rnr_retry")
	a.AltPortNum = d.u8("alt_port_num")
	a.AltTimeout = d.u8("alt_timeout")
	a.RateLimit = d.u32("rate_limit")
	return a
}

// encodeWC writes a completion as agent.c's put_wc does (for tests).
func encodeWC(e *encoder, wc *verbs.WC) {
	e.u64(wc.WRID)
	e.u32(uint32(wc.Status))
	e.u32(uint32(wc.Opcode))
	e.u32(wc.VendorErr)
	e.u32(wc.ByteLen)
	e.u32(wc.ImmData)
	e.u32(wc.QPNum)
	e.u32(wc.SrcQP)
	e.u32(uint32(wc.WCFlags))
	e.u16(wc.PKeyIndex)
	e.u16(wc.SLID)
	e.u8(wc.SL)
	e.u8(wc.DLIDPathBits)
	e.u64(wc.TMInfo.Tag)
	e.u32(wc.TMInfo.Priv)
}

func decodeWC(d *decoder) verbs.WC {
	var wc verbs.WC
	wc.WRID = d.u64("wr_id")
	wc.Status = verbs.WCStatus(d.u32("status"))
	wc.Opcode = verbs.WCOpcode(d.u32("opcode"))
	wc.VendorErr = d.u32("vendor_err")
	wc.ByteLen = d.u32("byte_len")
	wc.ImmData = d.u32("imm_data")
	wc.QPNum = d.u32("qp_num")
	wc.SrcQP = d.u32("src_qp")
	wc.WCFlags = verbs.WCFlags(d.u32("wc_flags"))
	wc.PKeyIndex = d.u16("pkey_index")
	wc.SLID = d.u16("slid")
	wc.SL = d.u8("sl")
	wc.DLIDPathBits = d.u8("dlid_path_bits")
	wc.TMInfo.Tag = d.u64("tm tag")
	wc.TMInfo.Priv = d.u32("tm priv")
	return wc
}

// decodeWCs reads opPollCQ's body: a count, then the completions.
func decodeWCs(d *decoder, out []verbs.WC) int {
	n := d.count(wcSize, "completions")
	if n > len(out) {
		d.fail("more completions than asked for")
		return 0
	}
	for i := range n {
		out[i] = decodeWC(d)
	}
	if d.err != nil {
		return 0
	}
	return n
}

// encodeDeviceAttr writes a device's attributes as agent.c's
// h_query_device does (for tests).
func encodeDeviceAttr(e *encoder, a *verbs.DeviceAttr) {
	fw := make([]byte, 64)
	copy(fw[:63], a.FWVer)
	e.bytes(fw)
	e.u64(a.NodeGUID)
	e.u64(a.SysImageGUID)
	e.u64(a.MaxMRSize)
	e.u64(a.PageSizeCap)
	for _, v := range []uint32{a.VendorID, a.VendorPartID, a.HWVer, a.MaxQP, a.MaxQPWR, uint32(a.DeviceCapFlags),
		a.MaxSGE, a.MaxSGERd, a.MaxCQ, a.MaxCQE, a.MaxMR, a.MaxPD, a.MaxQPRdAtom, a.MaxEERdAtom, a.MaxResRdAtom,
		a.MaxQPInitRdAtom, a.MaxEEInitRdAtom, uint32(a.AtomicCap), a.MaxEE, a.MaxRDD, a.MaxMW, a.MaxRawIPv6QP,
		a.MaxRawEthyQP, a.MaxMcastGrp, a.MaxMcastQPAttach, a.MaxTotalMcastQPAttach, a.MaxAH, a.MaxFMR,
		a.MaxMapPerFMR, a.MaxSRQ, a.MaxSRQWR, a.MaxSRQSGE} {
		e.u32(v)
	}
	e.u16(a.MaxPKeys)
	e.u8(a.LocalCAAckDelay)
	e.u8(a.PhysPortCnt)
	e.u32(a.MaxInlineData)
	e.u32(a.TM.MaxRndvHdrSize)
	e.u32(a.TM.MaxNumTags)
	e.u32(a.TM.Flags)
	e.u32(a.TM.MaxOps)
	e.u32(a.TM.MaxSGE)
}

func decodeDeviceAttr(d *decoder) verbs.DeviceAttr {
	var a verbs.DeviceAttr
	fw := d.take(64, "fw_ver")
	for i, c := range fw {
		if c == 0 {
			fw = fw[:i]
			break
		}
	}
	a.FWVer = string(fw)
	a.NodeGUID = d.u64("node_guid")
	a.SysImageGUID = d.u64("sys_image_guid")
	a.MaxMRSize = d.u64("max_mr_size")
	a.PageSizeCap = d.u64("page_size_cap")
	a.VendorID = d.u32("vendor_id")
	a.VendorPartID = d.u32("vendor_part_id")
	a.HWVer = d.u32("hw_ver")
	a.MaxQP = d.u32("max_qp")
	a.MaxQPWR = d.u32("max_qp_wr")
	a.DeviceCapFlags = verbs.DeviceCapFlags(d.u32("device_cap_flags"))
	a.MaxSGE = d.u32("max_sge")
	a.MaxSGERd = d.u32("max_sge_rd")
	a.MaxCQ = d.u32("max_cq")
	a.MaxCQE = d.u32("max_cqe")
	a.MaxMR = d.u32("max_mr")
	a.MaxPD = d.u32("max_pd")
	a.MaxQPRdAtom = d.u32("max_qp_rd_atom")
	a.MaxEERdAtom = d.u32("max_ee_rd_atom")
	a.MaxResRdAtom = d.u32("max_res_rd_atom")
	a.MaxQPInitRdAtom = d.u32("max_qp_init_rd_atom")
	a.MaxEEInitRdAtom = d.u32("max_ee_init_rd_atom")
	a.AtomicCap = verbs.AtomicCap(d.u32("atomic_cap"))
	a.MaxEE = d.u32("max_ee")
	a.MaxRDD = d.u32("max_rdd")
	a.MaxMW = d.u32("max_mw")
	a.MaxRawIPv6QP = d.u32("max_raw_ipv6_qp")
	a.MaxRawEthyQP = d.u32("max_raw_ethy_qp")
	a.MaxMcastGrp = d.u32("max_mcast_grp")
	a.MaxMcastQPAttach = d.u32("max_mcast_qp_attach")
	a.MaxTotalMcastQPAttach = d.u32("max_total_mcast_qp_attach")
	a.MaxAH = d.u32("max_ah")
	a.MaxFMR = d.u32("max_fmr")
	a.MaxMapPerFMR = d.u32("max_map_per_fmr")
	a.MaxSRQ = d.u32("max_srq")
	a.MaxSRQWR = d.u32("max_srq_wr")
	a.MaxSRQSGE = d.u32("max_srq_sge")
	a.MaxPKeys = d.u16("max_pkeys")
	a.LocalCAAckDelay = d.u8("local_ca_ack_delay")
	a.PhysPortCnt = d.u8("phys_port_cnt")
	a.MaxInlineData = d.u32("max_inline_data")
	a.TM.MaxRndvHdrSize = d.u32("max_rndv_hdr_size")
	a.TM.MaxNumTags = d.u32("max_num_tags")
	a.TM.Flags = d.u32("tm flags")
	a.TM.MaxOps = d.u32("max_ops")
	a.TM.MaxSGE = d.u32("tm max_sge")
	return a
}

func encodePortAttr(e *encoder, a *verbs.PortAttr) {
	e.u8(uint8(a.State))
	e.u8(uint8(a.MaxMTU))
	e.u8(uint8(a.ActiveMTU))
	e.u32(uint32(a.GIDTblLen))
	e.u32(a.PortCapFlags)
	e.u32(a.MaxMsgSz)
	e.u32(a.BadPKeyCntr)
	e.u32(a.QKeyViolCntr)
	e.u16(a.PKeyTblLen)
	e.u16(a.LID)
	e.u16(a.SMLID)
	for _, v := range []uint8{a.LMC, a.MaxVLNum, a.SMSL, a.SubnetTimeout, a.InitTypeReply, a.ActiveWidth,
		a.ActiveSpeed, a.PhysState, uint8(a.LinkLayer)} {
		e.u8(v)
	}
}

func decodePortAttr(d *decoder) verbs.PortAttr {
	var a verbs.PortAttr
	a.State = verbs.PortState(d.u8("state"))
	a.MaxMTU = verbs.MTU(d.u8("max_mtu"))
	a.ActiveMTU = verbs.MTU(d.u8("active_mtu"))
	a.GIDTblLen = d.i32("gid_tbl_len")
	a.PortCapFlags = d.u32("port_cap_flags")
	a.MaxMsgSz = d.u32("max_msg_sz")
	a.BadPKeyCntr = d.u32("bad_pkey_cntr")
	a.QKeyViolCntr = d.u32("qkey_viol_cntr")
	a.PKeyTblLen = d.u16("pkey_tbl_len")
	a.LID = d.u16("lid")
	a.SMLID = d.u16("sm_lid")
	a.LMC = d.u8("lmc")
	a.MaxVLNum = d.u8("max_vl_num")
	a.SMSL = d.u8("sm_sl")
	a.SubnetTimeout = d.u8("subnet_timeout")
	a.InitTypeReply = d.u8("init_type_reply")
	a.ActiveWidth = d.u8("active_width")
	a.ActiveSpeed = d.u8("active_speed")
	a.PhysState = d.u8("phys_state")
	a.LinkLayer = verbs.LinkLayer(d.u8("link_layer"))
	return a
}

// chain returns the linked list that starts at first, in order.
func chain[T any](first *T, next func(*T) *T) []*T {
	var list []*T
	for w := first; w != nil; w = next(w) {
		list = append(list, w)
	}
	return list
}

// encodeRecvWRs writes a receive WR list; it returns the WRs in order,
// to name the one the agent refuses.
func encodeRecvWRs(e *encoder, wr *verbs.RecvWR) []*verbs.RecvWR {
	list := chain(wr, func(w *verbs.RecvWR) *verbs.RecvWR { return w.Next })
	e.u32(uint32(len(list)))
	for _, w := range list {
		e.u64(w.WRID)
		encodeSGEs(e, w.SGList)
	}
	return list
}

// encodeSendWRs writes a send WR list; ah maps a WR's address handle to
// the agent's handle of it (0 for none).
func encodeSendWRs(e *encoder, wr *verbs.SendWR, ah func(verbs.AH) uint32) []*verbs.SendWR {
	list := chain(wr, func(w *verbs.SendWR) *verbs.SendWR { return w.Next })
	e.u32(uint32(len(list)))
	for _, w := range list {
		e.u64(w.WRID)
		e.u32(uint32(w.Opcode))
		e.u32(uint32(w.SendFlags))
		e.u32(w.ImmData)
		e.u32(w.InvalidateRKey)
		e.u64(w.RDMA.RemoteAddr)
		e.u32(w.RDMA.RKey)
		e.u64(w.Atomic.RemoteAddr)
		e.u64(w.Atomic.CompareAdd)
		e.u64(w.Atomic.Swap)
		e.u32(w.Atomic.RKey)
		e.u32(ah(w.UD.AH))
		e.u32(w.UD.RemoteQPN)
		e.u32(w.UD.RemoteQKey)
		encodeSGEs(e, w.SGList)
	}
	return list
}

func encodeOpsWRs(e *encoder, wr *verbs.OpsWR) []*verbs.OpsWR {
	list := chain(wr, func(w *verbs.OpsWR) *verbs.OpsWR { return w.Next })
	e.u32(uint32(len(list)))
	for _, w := range list {
		e.u64(w.WRID)
		e.u32(uint32(w.Opcode))
		e.u32(uint32(w.Flags))
		e.u32(w.TM.UnexpectedCnt)
		e.u32(w.TM.Handle)
		e.u64(w.TM.Add.RecvWRID)
		e.u64(w.TM.Add.Tag)
		e.u64(w.TM.Add.Mask)
		encodeSGEs(e, w.TM.Add.SGList)
	}
	return list
}

// decodeBadIndex reads a post's refused index: -1 (or a missing body)
// is none; an index outside the list is a protocol error.
func decodeBadIndex(d *decoder, n int) int {
	if d.off == len(d.b) {
		return -1
	}
	i := d.i32("refused index")
	if d.err != nil {
		return -1
	}
	if i < -1 || int(i) >= n {
		d.fail("refused index out of the list")
		return -1
	}
	return int(i)
}

// decodeOpsHandles reads opPostSRQOps' handles, one per op.
func decodeOpsHandles(d *decoder, n int) []uint32 {
	k := d.count(4, "op handles")
	if d.err != nil {
		return nil
	}
	if k != n {
		d.fail("op handle count")
		return nil
	}
	hs := make([]uint32, k)
	for i := range hs {
		hs[i] = d.u32("op handle")
	}
	return hs
}

// asyncRecord is opGetAsyncEvent's body.
type asyncRecord struct {
	Type   uint32
	Kind   uint8
	Handle uint32
	Port   uint8
}

func encodeAsync(e *encoder, r asyncRecord) {
	e.u32(r.Type)
	e.u8(r.Kind)
	e.u32(r.Handle)
	e.u8(r.Port)
}

func decodeAsync(d *decoder) asyncRecord {
	return asyncRecord{Type: d.u32("event_type"), Kind: d.u8("element kind"), Handle: d.u32("element"), Port: d.u8("port")}
}

// mrRecord is opRegMR's body.
type mrRecord struct {
	Handle     uint32
	Addr       uint64
	LKey, RKey uint32
	Length     uint64
}

func encodeMR(e *encoder, r mrRecord) {
	e.u32(r.Handle)
	e.u64(r.Addr)
	e.u32(r.LKey)
	e.u32(r.RKey)
	e.u64(r.Length)
}

func decodeMR(d *decoder) mrRecord {
	return mrRecord{Handle: d.u32("mr handle"), Addr: d.u64("addr"), LKey: d.u32("lkey"), RKey: d.u32("rkey"), Length: d.u64("length")}
}
