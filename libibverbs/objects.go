//go:build libibverbs

package main

/*
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
)

// The Go halves of the objects. Each hca object's Context is the address
// of its C wrapper (a uintptr), which events and completions hand back.

type pdObj struct{ p *hca.PD }

type mrObj struct{ m *hca.MR }

type chanObj struct{ ch *hca.CompChannel }

type ahObj struct{ a *hca.AH }

type cqObj struct {
	c    *hca.CQ
	busy bool // the device busy-polls: an empty Poll runs the transport
	mu   sync.Mutex
	wcs  []verbs.WC // poll scratch, under mu
}

type srqObj struct {
	s    *hca.SRQ
	mu   sync.Mutex
	rwr  []verbs.RecvWR // post scratch, under mu
	sge  []verbs.SGE
	ops  []verbs.OpsWR
	rcws []*C.struct_ibv_recv_wr // the application's requests (C memory)
}

type qpObj struct {
	q    *hca.QP
	mu   sync.Mutex
	swr  []verbs.SendWR // post scratch, under mu
	rwr  []verbs.RecvWR
	sge  []verbs.SGE
	scws []*C.struct_ibv_send_wr // the application's requests (C memory)
	rcws []*C.struct_ibv_recv_wr
	inl  []byte // inline data copied at post (copyInline)
}

//export shca_go_alloc_pd
func shca_go_alloc_pd(ch C.shca_handle, errp *C.int) (h C.shca_handle) {
	defer guardHandle("shca_go_alloc_pd", &h, errp)
	c := value[ctxObj](ch)
	if c == nil {
		setErr(errp, syscall.EINVAL)
		return 0
	}
	p, err := c.d.AllocPD()
	if err != nil {
		setErr(errp, err)
		return 0
	}
	return newHandle(&pdObj{p: p})
}

//export shca_go_pd_handle
func shca_go_pd_handle(h C.shca_handle) (ret C.uint32_t) {
	defer guard("shca_go_pd_handle")
	if p := value[pdObj](h); p != nil {
		return C.uint32_t(p.p.Handle())
	}
	return 0
}

//export shca_go_dealloc_pd
func shca_go_dealloc_pd(h C.shca_handle) (ret C.int) {
	defer guardInt("shca_go_dealloc_pd", &ret, C.int(syscall.EFAULT))
	p := value[pdObj](h)
	if p == nil {
		return C.int(syscall.EINVAL)
	}
	if err := p.p.Dealloc(); err != nil {
		return fail(err)
	}
	release(h)
	return 0
}

//export shca_go_reg_mr
func shca_go_reg_mr(pdh C.shca_handle, addr unsafe.Pointer, length C.size_t, iova C.uint64_t, access C.int, lkey, rkey *C.uint32_t, errp *C.int) (h C.shca_handle) {
	defer guardHandle("shca_go_reg_mr", &h, errp)
	p := value[pdObj](pdh)
	switch {
	case p == nil:
		setErr(errp, syscall.EINVAL)
		return 0
	case uint64(iova) != uint64(uintptr(addr)):
		setErr(errp, verbs.Errorf("reg_mr_iova", syscall.EOPNOTSUPP, "an iova other than the address is not supported"))
		return 0
	case addr == nil || length == 0:
		setErr(errp, verbs.Errorf("reg_mr", syscall.EINVAL, "empty buffer"))
		return 0
	}
	m, err := p.p.RegMR(cbytes(addr, int(length)), verbs.AccessFlags(access))
	if err != nil {
		setErr(errp, err)
		return 0
	}
	if err := mapped(uintptr(addr), uintptr(length)); err != nil {
		// The kernel fails to pin such memory; here a later WRITE into
		// it would fault on a transport goroutine and end the program.
		_ = m.Dereg()
		setErr(errp, verbs.Errorf("reg_mr", syscall.EFAULT, "%#x+%d is not mapped memory: %v", uintptr(addr), length, err))
		return 0
	}
	*lkey, *rkey = C.uint32_t(m.LKey()), C.uint32_t(m.RKey())
	return newHandle(&mrObj{m: m})
}

// mapped reports whether every page of [addr, addr+n) is mapped:
// msync(MS_ASYNC) fails with ENOMEM otherwise, and changes nothing.
func mapped(addr, n uintptr) error {
	page := uintptr(unix.Getpagesize())
	start := addr &^ (page - 1)
	end := addr + n
	if end < addr {
		return syscall.EINVAL // wraps around
	}
	end = (end + page - 1) &^ (page - 1)
	return unix.Msync(unsafe.Slice(*(**byte)(unsafe.Pointer(&start)), end-start), unix.MS_ASYNC)
}

//export shca_go_dereg_mr
func shca_go_dereg_mr(h C.shca_handle) (ret C.int) {
	defer guardInt("shca_go_dereg_mr", &ret, C.int(syscall.EFAULT))
	m := value[mrObj](h)
	if m == nil {
		return C.int(syscall.EINVAL)
	}
	if err := m.m.Dereg(); err != nil {
		return fail(err)
	}
	release(h)
	return 0
}

//export shca_go_create_channel
func shca_go_create_channel(ch C.shca_handle, fd *C.int, errp *C.int) (h C.shca_handle) {
	defer guardHandle("shca_go_create_channel", &h, errp)
	c := value[ctxObj](ch)
	if c == nil {
		setErr(errp, syscall.EINVAL)
		return 0
	}
	cc, err := c.d.CreateCompChannel()
	if err != nil {
		setErr(errp, err)
		return 0
	}
	*fd = C.int(cc.FD())
	return newHandle(&chanObj{ch: cc})
}

//export shca_go_destroy_channel
func shca_go_destroy_channel(h C.shca_handle) (ret C.int) {
	defer guardInt("shca_go_destroy_channel", &ret, C.int(syscall.EFAULT))
	c := value[chanObj](h)
	if c == nil {
		return C.int(syscall.EINVAL)
	}
	if err := c.ch.Close(); err != nil {
		return fail(err)
	}
	release(h)
	return 0
}

// shca_go_get_cq_event waits for a completion event (or fails with EAGAIN
// when nonblock: the application set O_NONBLOCK on the channel's fd) and
// returns the C wrapper of its CQ.
//
//export shca_go_get_cq_event
func shca_go_get_cq_event(h C.shca_handle, nonblock C.int, cq *unsafe.Pointer) (ret C.int) {
	defer guardInt("shca_go_get_cq_event", &ret, C.int(syscall.EFAULT))
	c := value[chanObj](h)
	if c == nil {
		return C.int(syscall.EINVAL)
	}
	c.ch.SetNonBlocking(nonblock != 0)
	q, err := c.ch.GetEvent(context.Background())
	if err != nil {
		return errnoOf(err) // EAGAIN is not a failure worth a log line
	}
	*cq = cptr(q.Context())
	return 0
}

// cptr turns an object's Context (its C wrapper's address) back into a
// pointer.
func cptr(v any) unsafe.Pointer {
	u, _ := v.(uintptr)
	// A C address, not Go memory: converted through memory so that vet's
	// uintptr rule (which guards Go pointers) does not apply.
	return *(*unsafe.Pointer)(unsafe.Pointer(&u))
}

//export shca_go_create_cq
func shca_go_create_cq(ch C.shca_handle, cqe C.int, chanh C.shca_handle, wrapper unsafe.Pointer, vector C.int, actual *C.int, errp *C.int) (h C.shca_handle) {
	defer guardHandle("shca_go_create_cq", &h, errp)
	c := value[ctxObj](ch)
	if c == nil {
		setErr(errp, syscall.EINVAL)
		return 0
	}
	var cc *hca.CompChannel
	if chanh != 0 {
		o := value[chanObj](chanh)
		if o == nil {
			setErr(errp, syscall.EINVAL)
			return 0
		}
		cc = o.ch
	}
	q, err := c.d.CreateCQ(int(cqe), cc, uintptr(wrapper), int(vector))
	if err != nil {
		setErr(errp, err)
		return 0
	}
	*actual = C.int(q.CQE())
	return newHandle(&cqObj{c: q, busy: c.d.Config().BusyPoll})
}

//export shca_go_destroy_cq
func shca_go_destroy_cq(h C.shca_handle) (ret C.int) {
	defer guardInt("shca_go_destroy_cq", &ret, C.int(syscall.EFAULT))
	c := value[cqObj](h)
	if c == nil {
		return C.int(syscall.EINVAL)
	}
	if err := c.c.Destroy(context.Background()); err != nil {
		return fail(err)
	}
	release(h)
	return 0
}

//export shca_go_resize_cq
func shca_go_resize_cq(h C.shca_handle, cqe C.int, actual *C.int) (ret C.int) {
	defer guardInt("shca_go_resize_cq", &ret, C.int(syscall.EFAULT))
	c := value[cqObj](h)
	if c == nil {
		return C.int(syscall.EINVAL)
	}
	if err := c.c.Resize(int(cqe)); err != nil {
		return fail(err)
	}
	*actual = C.int(c.c.CQE())
	return 0
}

//export shca_go_ack_cq_events
func shca_go_ack_cq_events(h C.shca_handle, n C.uint) {
	defer guard("shca_go_ack_cq_events")
	if c := value[cqObj](h); c != nil {
		c.c.AckEvents(int(n))
	}
}

//export shca_go_req_notify_cq
func shca_go_req_notify_cq(h C.shca_handle, solicited C.int) (ret C.int) {
	defer guardInt("shca_go_req_notify_cq", &ret, C.int(syscall.EFAULT))
	c := value[cqObj](h)
	if c == nil {
		return C.int(syscall.EINVAL)
	}
	return fail(c.c.ReqNotify(solicited != 0))
}

//export shca_go_create_ah
func shca_go_create_ah(pdh C.shca_handle, attr *C.struct_ibv_ah_attr, errp *C.int) (h C.shca_handle) {
	defer guardHandle("shca_go_create_ah", &h, errp)
	p := value[pdObj](pdh)
	if p == nil || attr == nil {
		setErr(errp, syscall.EINVAL)
		return 0
	}
	a, err := p.p.CreateAH(ahAttrFromC(attr))
	if err != nil {
		setErr(errp, err)
		return 0
	}
	return newHandle(&ahObj{a: a})
}

//export shca_go_destroy_ah
func shca_go_destroy_ah(h C.shca_handle) (ret C.int) {
	defer guardInt("shca_go_destroy_ah", &ret, C.int(syscall.EFAULT))
	a := value[ahObj](h)
	if a == nil {
		return C.int(syscall.EINVAL)
	}
	if err := a.a.Destroy(); err != nil {
		return fail(err)
	}
	release(h)
	return 0
}

func ahAttrFromC(a *C.struct_ibv_ah_attr) verbs.AHAttr {
	return verbs.AHAttr{
		GRH: verbs.GlobalRoute{
			DGID:         *(*verbs.GID)(unsafe.Pointer(&a.grh.dgid)),
			FlowLabel:    uint32(a.grh.flow_label),
			SGIDIndex:    uint8(a.grh.sgid_index),
			HopLimit:     uint8(a.grh.hop_limit),
			TrafficClass: uint8(a.grh.traffic_class),
		},
		DLID:        uint16(a.dlid),
		SL:          uint8(a.sl),
		SrcPathBits: uint8(a.src_path_bits),
		StaticRate:  uint8(a.static_rate),
		IsGlobal:    a.is_global != 0,
		PortNum:     uint8(a.port_num),
	}
}

func ahAttrToC(v *verbs.AHAttr, a *C.struct_ibv_ah_attr) {
	*(*verbs.GID)(unsafe.Pointer(&a.grh.dgid)) = v.GRH.DGID
	a.grh.flow_label = C.uint32_t(v.GRH.FlowLabel)
	a.grh.sgid_index = C.uint8_t(v.GRH.SGIDIndex)
	a.grh.hop_limit = C.uint8_t(v.GRH.HopLimit)
	a.grh.traffic_class = C.uint8_t(v.GRH.TrafficClass)
	a.dlid = C.uint16_t(v.DLID)
	a.sl = C.uint8_t(v.SL)
	a.src_path_bits = C.uint8_t(v.SrcPathBits)
	a.static_rate = C.uint8_t(v.StaticRate)
	a.is_global = 0
	if v.IsGlobal {
		a.is_global = 1
	}
	a.port_num = C.uint8_t(v.PortNum)
}

//export shca_go_create_srq
func shca_go_create_srq(pdh, cqh C.shca_handle, wrapper unsafe.Pointer, attr *C.struct_ibv_srq_attr, tm C.int, maxTags, maxOps C.uint32_t, errp *C.int) (h C.shca_handle) {
	defer guardHandle("shca_go_create_srq", &h, errp)
	p := value[pdObj](pdh)
	if p == nil || attr == nil {
		setErr(errp, syscall.EINVAL)
		return 0
	}
	init := hca.SRQInitAttr{
		Context: uintptr(wrapper),
		Attr:    verbs.SRQAttr{MaxWR: uint32(attr.max_wr), MaxSGE: uint32(attr.max_sge), SRQLimit: uint32(attr.srq_limit)},
	}
	if tm != 0 {
		init.TM = &hca.TMCap{MaxNumTags: uint32(maxTags), MaxOps: uint32(maxOps)}
	}
	if cqh != 0 {
		c := value[cqObj](cqh)
		if c == nil {
			setErr(errp, syscall.EINVAL)
			return 0
		}
		init.CQ = c.c
	}
	s, err := p.p.CreateSRQ(&init)
	if err != nil {
		setErr(errp, err)
		return 0
	}
	a := s.Query()
	attr.max_wr, attr.max_sge = C.uint32_t(a.MaxWR), C.uint32_t(a.MaxSGE)
	return newHandle(&srqObj{s: s})
}

//export shca_go_destroy_srq
func shca_go_destroy_srq(h C.shca_handle) (ret C.int) {
	defer guardInt("shca_go_destroy_srq", &ret, C.int(syscall.EFAULT))
	s := value[srqObj](h)
	if s == nil {
		return C.int(syscall.EINVAL)
	}
	if err := s.s.Destroy(context.Background()); err != nil {
		return fail(err)
	}
	release(h)
	return 0
}

//export shca_go_modify_srq
func shca_go_modify_srq(h C.shca_handle, attr *C.struct_ibv_srq_attr, mask C.int) (ret C.int) {
	defer guardInt("shca_go_modify_srq", &ret, C.int(syscall.EFAULT))
	s := value[srqObj](h)
	if s == nil || attr == nil {
		return C.int(syscall.EINVAL)
	}
	a := verbs.SRQAttr{MaxWR: uint32(attr.max_wr), MaxSGE: uint32(attr.max_sge), SRQLimit: uint32(attr.srq_limit)}
	return fail(s.s.Modify(&a, verbs.SRQAttrMask(mask)))
}

//export shca_go_query_srq
func shca_go_query_srq(h C.shca_handle, attr *C.struct_ibv_srq_attr) (ret C.int) {
	defer guardInt("shca_go_query_srq", &ret, C.int(syscall.EFAULT))
	s := value[srqObj](h)
	if s == nil || attr == nil {
		return C.int(syscall.EINVAL)
	}
	a := s.s.Query()
	attr.max_wr, attr.max_sge, attr.srq_limit = C.uint32_t(a.MaxWR), C.uint32_t(a.MaxSGE), C.uint32_t(a.SRQLimit)
	return 0
}

//export shca_go_create_qp
func shca_go_create_qp(pdh, scqh, rcqh, srqh C.shca_handle, wrapper unsafe.Pointer, init *C.struct_ibv_qp_init_attr_ex, qpn *C.uint32_t, errp *C.int) (h C.shca_handle) {
	defer guardHandle("shca_go_create_qp", &h, errp)
	p := value[pdObj](pdh)
	scq, rcq := value[cqObj](scqh), value[cqObj](rcqh)
	if p == nil || init == nil || scq == nil || rcq == nil {
		setErr(errp, verbs.Errorf("create_qp", syscall.EINVAL, "a QP needs a PD, a send CQ and a receive CQ of this device"))
		return 0
	}
	a := hca.QPInitAttr{
		Context:  uintptr(wrapper),
		SendCQ:   scq.c,
		RecvCQ:   rcq.c,
		Cap:      capFromC(&init.cap),
		QPType:   verbs.QPType(init.qp_type),
		SQSigAll: init.sq_sig_all != 0,
	}
	if srqh != 0 {
		s := value[srqObj](srqh)
		if s == nil {
			setErr(errp, syscall.EINVAL)
			return 0
		}
		a.SRQ = s.s
	}
	q, err := p.p.CreateQP(&a)
	if err != nil {
		setErr(errp, err)
		return 0
	}
	capToC(q.Cap(), &init.cap)
	*qpn = C.uint32_t(q.Num())
	return newHandle(&qpObj{q: q})
}

//export shca_go_destroy_qp
func shca_go_destroy_qp(h C.shca_handle) (ret C.int) {
	defer guardInt("shca_go_destroy_qp", &ret, C.int(syscall.EFAULT))
	q := value[qpObj](h)
	if q == nil {
		return C.int(syscall.EINVAL)
	}
	if err := q.q.Destroy(context.Background()); err != nil {
		return fail(err)
	}
	release(h)
	return 0
}

//export shca_go_modify_qp
func shca_go_modify_qp(h C.shca_handle, attr *C.struct_ibv_qp_attr, mask C.int, state *C.int) (ret C.int) {
	defer guardInt("shca_go_modify_qp", &ret, C.int(syscall.EFAULT))
	q := value[qpObj](h)
	if q == nil || attr == nil {
		return C.int(syscall.EINVAL)
	}
	a := qpAttrFromC(attr)
	if err := q.q.Modify(&a, verbs.QPAttrMask(mask)); err != nil {
		return fail(err)
	}
	*state = C.int(q.q.State())
	return 0
}

//export shca_go_query_qp
func shca_go_query_qp(h C.shca_handle, attr *C.struct_ibv_qp_attr, init *C.struct_ibv_qp_init_attr, state *C.int) (ret C.int) {
	defer guardInt("shca_go_query_qp", &ret, C.int(syscall.EFAULT))
	q := value[qpObj](h)
	if q == nil || attr == nil || init == nil {
		return C.int(syscall.EINVAL)
	}
	a := q.q.Query()
	qpAttrToC(&a, attr)
	capToC(a.Cap, &init.cap)
	init.qp_type = uint32(q.q.Type())
	*state = C.int(a.QPState)
	return 0
}

func capFromC(c *C.struct_ibv_qp_cap) verbs.QPCap {
	return verbs.QPCap{
		MaxSendWR: uint32(c.max_send_wr), MaxRecvWR: uint32(c.max_recv_wr),
		MaxSendSGE: uint32(c.max_send_sge), MaxRecvSGE: uint32(c.max_recv_sge),
		MaxInlineData: uint32(c.max_inline_data),
	}
}

func capToC(v verbs.QPCap, c *C.struct_ibv_qp_cap) {
	c.max_send_wr, c.max_recv_wr = C.uint32_t(v.MaxSendWR), C.uint32_t(v.MaxRecvWR)
	c.max_send_sge, c.max_recv_sge = C.uint32_t(v.MaxSendSGE), C.uint32_t(v.MaxRecvSGE)
	c.max_inline_data = C.uint32_t(v.MaxInlineData)
}

func qpAttrFromC(c *C.struct_ibv_qp_attr) verbs.QPAttr {
	return verbs.QPAttr{
		QPState:      verbs.QPState(c.qp_state),
		CurQPState:   verbs.QPState(c.cur_qp_state),
		PathMTU:      verbs.MTU(c.path_mtu),
		PathMigState: verbs.MigState(c.path_mig_state),
		QKey:         uint32(c.qkey),
		RQPSN:        uint32(c.rq_psn),
		SQPSN:        uint32(c.sq_psn),
		DestQPNum:    uint32(c.dest_qp_num),
		QPAccessFlags: verbs.AccessFlags(
			c.qp_access_flags),
		Cap:              capFromC(&c.cap),
		AHAttr:           ahAttrFromC(&c.ah_attr),
		AltAHAttr:        ahAttrFromC(&c.alt_ah_attr),
		PKeyIndex:        uint16(c.pkey_index),
		AltPKeyIndex:     uint16(c.alt_pkey_index),
		EnSQDAsyncNotify: c.en_sqd_async_notify != 0,
		SQDraining:       c.sq_draining != 0,
		MaxRdAtomic:      uint8(c.max_rd_atomic),
		MaxDestRdAtomic:  uint8(c.max_dest_rd_atomic),
		MinRNRTimer:      uint8(c.min_rnr_timer),
		PortNum:          uint8(c.port_num),
		Timeout:          uint8(c.timeout),
		RetryCnt:         uint8(c.retry_cnt),
		RNRRetry:         uint8(c.rnr_retry),
		AltPortNum:       uint8(c.alt_port_num),
		AltTimeout:       uint8(c.alt_timeout),
		RateLimit:        uint32(c.rate_limit),
	}
}

func qpAttrToC(v *verbs.QPAttr, c *C.struct_ibv_qp_attr) {
	C.memset(unsafe.Pointer(c), 0, C.sizeof_struct_ibv_qp_attr)
	c.qp_state = uint32(v.QPState)
	c.cur_qp_state = uint32(v.CurQPState)
	c.path_mtu = uint32(v.PathMTU)
	c.path_mig_state = uint32(v.PathMigState)
	c.qkey = C.uint32_t(v.QKey)
	c.rq_psn = C.uint32_t(v.RQPSN)
	c.sq_psn = C.uint32_t(v.SQPSN)
	c.dest_qp_num = C.uint32_t(v.DestQPNum)
	c.qp_access_flags = C.uint(v.QPAccessFlags)
	capToC(v.Cap, &c.cap)
	ahAttrToC(&v.AHAttr, &c.ah_attr)
	ahAttrToC(&v.AltAHAttr, &c.alt_ah_attr)
	c.pkey_index = C.uint16_t(v.PKeyIndex)
	c.alt_pkey_index = C.uint16_t(v.AltPKeyIndex)
	c.en_sqd_async_notify = b2u8(v.EnSQDAsyncNotify)
	c.sq_draining = b2u8(v.SQDraining)
	c.max_rd_atomic = C.uint8_t(v.MaxRdAtomic)
	c.max_dest_rd_atomic = C.uint8_t(v.MaxDestRdAtomic)
	c.min_rnr_timer = C.uint8_t(v.MinRNRTimer)
	c.port_num = C.uint8_t(v.PortNum)
	c.timeout = C.uint8_t(v.Timeout)
	c.retry_cnt = C.uint8_t(v.RetryCnt)
	c.rnr_retry = C.uint8_t(v.RNRRetry)
	c.alt_port_num = C.uint8_t(v.AltPortNum)
	c.alt_timeout = C.uint8_t(v.AltTimeout)
	c.rate_limit = C.uint32_t(v.RateLimit)
}

func b2u8(b bool) C.uint8_t {
	if b {
		return 1
	}
	return 0
}

//export shca_go_attach_mcast
func shca_go_attach_mcast(h C.shca_handle, gid *C.union_ibv_gid, lid C.uint16_t, attach C.int) (ret C.int) {
	defer guardInt("shca_go_attach_mcast", &ret, C.int(syscall.EFAULT))
	q := value[qpObj](h)
	if q == nil || gid == nil {
		return C.int(syscall.EINVAL)
	}
	g := *(*verbs.GID)(unsafe.Pointer(gid))
	if attach != 0 {
		return fail(q.q.AttachMcast(g, uint16(lid)))
	}
	return fail(q.q.DetachMcast(g, uint16(lid)))
}

// shca_go_get_async_event takes the next asynchronous event: its type,
// and the C wrapper of its object or its port.
//
//export shca_go_get_async_event
func shca_go_get_async_event(h C.shca_handle, nonblock C.int, typ *C.int, obj *unsafe.Pointer, port *C.int) (ret C.int) {
	defer guardInt("shca_go_get_async_event", &ret, C.int(syscall.EFAULT))
	c := value[ctxObj](h)
	if c == nil {
		return C.int(syscall.EINVAL)
	}
	c.d.SetAsyncNonBlocking(nonblock != 0)
	e, err := c.d.GetAsyncEvent(context.Background())
	if err != nil {
		return errnoOf(err)
	}
	*typ = C.int(e.Type)
	switch {
	case e.QP != nil:
		*obj = cptr(e.QP.Context())
	case e.CQ != nil:
		*obj = cptr(e.CQ.Context())
	case e.SRQ != nil:
		*obj = cptr(e.SRQ.Context())
	default:
		*port = C.int(e.Port)
	}
	if *obj != nil {
		asyncEvents.Lock()
		asyncEvents.m[*obj] = append(asyncEvents.m[*obj], e)
		asyncEvents.Unlock()
	}
	return 0
}

// asyncEvents keeps the events handed out until ibv_ack_async_event, by
// their object: an application may take several about one object before
// acknowledging any, and each acknowledgement counts (Destroy waits for
// all of them). Port events need none. An object's list is as long as
// the events the application holds unacknowledged; it empties as they
// are acknowledged, and the object cannot be destroyed before.
var asyncEvents = struct {
	sync.Mutex
	m map[unsafe.Pointer][]hca.AsyncEvent
}{m: map[unsafe.Pointer][]hca.AsyncEvent{}}

//export shca_go_ack_async_event
func shca_go_ack_async_event(h C.shca_handle, obj unsafe.Pointer) {
	defer guard("shca_go_ack_async_event")
	c := value[ctxObj](h)
	if c == nil || obj == nil {
		return
	}
	asyncEvents.Lock()
	held := asyncEvents.m[obj]
	var e hca.AsyncEvent
	ok := len(held) > 0
	if ok {
		e = held[0]
		if len(held) == 1 {
			delete(asyncEvents.m, obj)
		} else {
			asyncEvents.m[obj] = held[1:]
		}
	}
	asyncEvents.Unlock()
	if ok {
		c.d.AckAsyncEvent(e)
	}
}

// be32 reads a big-endian 32-bit value in place (imm_data).
func be32(p unsafe.Pointer) uint32 { return binary.BigEndian.Uint32(cbytes(p, 4)) }
