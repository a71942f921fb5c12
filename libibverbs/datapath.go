//go:build libibverbs

package main

/*
#include "shim.h"
*/
import "C"

import (
	"encoding/binary"
	"syscall"
	"unsafe"

	"github.com/softhca/softhca/verbs"
)

// The data path: the C half's ops (post_send, post_recv, poll_cq, ...)
// call these with the application's request lists and completion arrays,
// which are read and written in place. A list is converted into the
// object's scratch (under its lock) and posted as one list, as the
// application made it; the index of the request the engine refused maps
// back to the application's own.

func at[T any](p unsafe.Pointer, off uintptr) *T { return (*T)(unsafe.Add(p, off)) }

// refused returns the index in list of the request the engine refused
// (b), which names the application's own; 0 if b is not in list.
func refused[T any](list []T, b *T) int {
	for i := range list {
		if b == &list[i] {
			return i
		}
	}
	return 0
}

// sges copies n C scatter/gather elements to the scratch and returns them.
func sges(scratch *[]verbs.SGE, list *C.struct_ibv_sge, n C.int) ([]verbs.SGE, bool) {
	if n < 0 || (n > 0 && list == nil) {
		return nil, false
	}
	start := len(*scratch)
	for _, s := range unsafe.Slice(list, int(n)) {
		*scratch = append(*scratch, verbs.SGE{Addr: uint64(s.addr), Length: uint32(s.length), LKey: uint32(s.lkey)})
	}
	return (*scratch)[start:len(*scratch):len(*scratch)], true
}

func sendWR(w *C.struct_ibv_send_wr, sc *[]verbs.SGE) (verbs.SendWR, bool) {
	p := unsafe.Pointer(w)
	sgl, ok := sges(sc, w.sg_list, w.num_sge)
	if !ok {
		return verbs.SendWR{}, false
	}
	op := verbs.WROpcode(w.opcode)
	v := verbs.SendWR{
		WRID:      uint64(w.wr_id),
		SGList:    sgl,
		Opcode:    op,
		SendFlags: verbs.SendFlags(w.send_flags),
	}
	switch {
	case op.HasImm():
		v.ImmData = be32(unsafe.Add(p, C.shca_off_send_imm))
	case op == verbs.WRSendWithInv || op == verbs.WRLocalInv:
		v.InvalidateRKey = *at[uint32](p, C.shca_off_send_imm)
	}
	switch {
	case op == verbs.WRRDMAWrite || op == verbs.WRRDMAWriteWithImm || op == verbs.WRRDMARead:
		v.RDMA = verbs.RDMAInfo{RemoteAddr: *at[uint64](p, C.shca_off_rdma_raddr), RKey: *at[uint32](p, C.shca_off_rdma_rkey)}
	case op.IsAtomic():
		v.Atomic = verbs.AtomicInfo{
			RemoteAddr: *at[uint64](p, C.shca_off_atomic_raddr),
			CompareAdd: *at[uint64](p, C.shca_off_atomic_compare),
			Swap:       *at[uint64](p, C.shca_off_atomic_swap),
			RKey:       *at[uint32](p, C.shca_off_atomic_rkey),
		}
	}
	return v, true
}

// setUD fills a UD request's address: the AH's Go half, the remote QPN
// and Q_Key.
func setUD(v *verbs.SendWR, w *C.struct_ibv_send_wr) bool {
	p := unsafe.Pointer(w)
	ah := *at[*C.struct_ibv_ah](p, C.shca_off_ud_ah)
	if ah == nil {
		return true // the engine refuses it, saying why
	}
	a := value[ahObj](C.shca_ah_handle(ah))
	if a == nil {
		return false
	}
	v.UD = verbs.UDInfo{AH: a.a, RemoteQPN: *at[uint32](p, C.shca_off_ud_qpn), RemoteQKey: *at[uint32](p, C.shca_off_ud_qkey)}
	return true
}

//export shca_go_post_send
func shca_go_post_send(h C.shca_handle, wr *C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) (ret C.int) {
	defer guardInt("shca_go_post_send", &ret, C.int(syscall.EFAULT))
	q := value[qpObj](h)
	if q == nil {
		*bad = wr
		return C.int(syscall.EINVAL)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.swr, q.sge, q.scws = q.swr[:0], q.sge[:0], q.scws[:0]
	ud := q.q.Type() == verbs.QPTypeUD
	for w := wr; w != nil; w = w.next {
		v, ok := sendWR(w, &q.sge)
		if ok && ud {
			ok = setUD(&v, w)
		}
		if !ok {
			// Post what came before, as the engine would have, and
			// stop here.
			if err := q.postSend(q.scws, bad); err != 0 {
				return err
			}
			*bad = w
			return C.int(syscall.EINVAL)
		}
		q.swr = append(q.swr, v)
		q.scws = append(q.scws, w)
	}
	return q.postSend(q.scws, bad)
}

// postSend posts the converted list; cws are the application's requests.
func (q *qpObj) postSend(cws []*C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) C.int {
	if len(q.swr) == 0 {
		return 0
	}
	q.copyInline()
	for i := range q.swr[:len(q.swr)-1] {
		q.swr[i].Next = &q.swr[i+1]
	}
	b, err := q.q.PostSend(&q.swr[0])
	clear(q.swr)
	if err == nil {
		return 0
	}
	*bad = cws[refused(q.swr, b)]
	return fail(err)
}

// copyInline copies the data of the IBV_SEND_INLINE requests into the
// QP's scratch and points their elements there, before the engine sees
// them: a wild address faults here (the export's guard turns that into
// EFAULT) rather than inside PostSend, where the send queue has already
// taken a slot for the request. A request with more inline data than
// max_inline_data is left alone: the engine refuses it without reading.
func (q *qpObj) copyInline() {
	limit := uint64(q.q.Cap().MaxInlineData)
	total := 0
	for i := range q.swr {
		if n, ok := inlineLen(&q.swr[i], limit); ok {
			total += int(n)
		}
	}
	if total == 0 {
		return
	}
	if cap(q.inl) < total {
		q.inl = make([]byte, total)
	}
	buf := q.inl[:total]
	off := 0
	for i := range q.swr {
		w := &q.swr[i]
		if _, ok := inlineLen(w, limit); !ok {
			continue
		}
		for j := range w.SGList {
			s := &w.SGList[j]
			if s.Length == 0 {
				continue
			}
			n := copy(buf[off:], cbytes(*(*unsafe.Pointer)(unsafe.Pointer(&s.Addr)), int(s.Length)))
			s.Addr = uint64(uintptr(unsafe.Pointer(&buf[off])))
			off += n
		}
	}
}

// inlineLen returns the inline data length of w, and whether the library
// copies it (an inline request within limit bytes).
func inlineLen(w *verbs.SendWR, limit uint64) (uint64, bool) {
	if w.SendFlags&verbs.SendInline == 0 {
		return 0, false
	}
	var n uint64
	for _, s := range w.SGList {
		n += uint64(s.Length)
	}
	return n, n > 0 && n <= limit
}

// recvList converts a receive list into scratch; it returns the
// application's requests, and the first malformed one.
func recvList(wr *C.struct_ibv_recv_wr, rwr *[]verbs.RecvWR, sc *[]verbs.SGE, scws *[]*C.struct_ibv_recv_wr) (cws []*C.struct_ibv_recv_wr, malformed *C.struct_ibv_recv_wr) {
	*rwr, *sc, *scws = (*rwr)[:0], (*sc)[:0], (*scws)[:0]
	for w := wr; w != nil; w = w.next {
		sgl, ok := sges(sc, w.sg_list, w.num_sge)
		if !ok {
			return *scws, w
		}
		*rwr = append(*rwr, verbs.RecvWR{WRID: uint64(w.wr_id), SGList: sgl})
		*scws = append(*scws, w)
	}
	return *scws, nil
}

func postRecvList(rwr []verbs.RecvWR, cws []*C.struct_ibv_recv_wr, post func(*verbs.RecvWR) (*verbs.RecvWR, error), bad **C.struct_ibv_recv_wr) C.int {
	if len(rwr) == 0 {
		return 0
	}
	for i := range rwr[:len(rwr)-1] {
		rwr[i].Next = &rwr[i+1]
	}
	b, err := post(&rwr[0])
	clear(rwr)
	if err == nil {
		return 0
	}
	*bad = cws[refused(rwr, b)]
	return fail(err)
}

//export shca_go_post_recv
func shca_go_post_recv(h C.shca_handle, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) (ret C.int) {
	defer guardInt("shca_go_post_recv", &ret, C.int(syscall.EFAULT))
	q := value[qpObj](h)
	if q == nil {
		*bad = wr
		return C.int(syscall.EINVAL)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	cws, malformed := recvList(wr, &q.rwr, &q.sge, &q.rcws)
	if e := postRecvList(q.rwr, cws, q.q.PostRecv, bad); e != 0 {
		return e
	}
	if malformed != nil {
		*bad = malformed
		return C.int(syscall.EINVAL)
	}
	return 0
}

//export shca_go_post_srq_recv
func shca_go_post_srq_recv(h C.shca_handle, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) (ret C.int) {
	defer guardInt("shca_go_post_srq_recv", &ret, C.int(syscall.EFAULT))
	s := value[srqObj](h)
	if s == nil {
		*bad = wr
		return C.int(syscall.EINVAL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cws, malformed := recvList(wr, &s.rwr, &s.sge, &s.rcws)
	if e := postRecvList(s.rwr, cws, s.s.PostRecv, bad); e != 0 {
		return e
	}
	if malformed != nil {
		*bad = malformed
		return C.int(syscall.EINVAL)
	}
	return 0
}

//export shca_go_post_srq_ops
func shca_go_post_srq_ops(h C.shca_handle, wr *C.struct_ibv_ops_wr, bad **C.struct_ibv_ops_wr) (ret C.int) {
	defer guardInt("shca_go_post_srq_ops", &ret, C.int(syscall.EFAULT))
	s := value[srqObj](h)
	if s == nil {
		*bad = wr
		return C.int(syscall.EINVAL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops, s.sge = s.ops[:0], s.sge[:0]
	var cws []*C.struct_ibv_ops_wr
	var malformed *C.struct_ibv_ops_wr
	for w := wr; w != nil; w = w.next {
		p := unsafe.Pointer(w)
		v := verbs.OpsWR{WRID: uint64(w.wr_id), Opcode: verbs.OpsOpcode(w.opcode), Flags: verbs.OpsFlags(w.flags)}
		v.TM.UnexpectedCnt = *at[uint32](p, C.shca_off_ops_tm_unexp)
		v.TM.Handle = *at[uint32](p, C.shca_off_ops_tm_handle)
		if v.Opcode == verbs.WRTagAdd {
			sgl, ok := sges(&s.sge, *at[*C.struct_ibv_sge](p, C.shca_off_ops_tm_sg_list), C.int(*at[uint32](p, C.shca_off_ops_tm_num_sge)))
			if !ok {
				malformed = w
				break
			}
			v.TM.Add = verbs.TagAdd{
				RecvWRID: *at[uint64](p, C.shca_off_ops_tm_recv_wr_id),
				SGList:   sgl,
				Tag:      *at[uint64](p, C.shca_off_ops_tm_tag),
				Mask:     *at[uint64](p, C.shca_off_ops_tm_mask),
			}
		}
		s.ops = append(s.ops, v)
		cws = append(cws, w)
	}
	if len(s.ops) > 0 {
		for i := range s.ops[:len(s.ops)-1] {
			s.ops[i].Next = &s.ops[i+1]
		}
		b, err := s.s.PostOps(&s.ops[0])
		// TAG_ADD returns each entry's handle in the request.
		for i := range s.ops {
			if s.ops[i].Opcode == verbs.WRTagAdd {
				*at[uint32](unsafe.Pointer(cws[i]), C.shca_off_ops_tm_handle) = s.ops[i].TM.Handle
			}
		}
		if err != nil {
			*bad = cws[refused(s.ops, b)]
			clear(s.ops)
			return fail(err)
		}
		clear(s.ops)
	}
	if malformed != nil {
		*bad = malformed
		return C.int(syscall.EINVAL)
	}
	return 0
}

// emptyPollLooks is how many more times ibv_poll_cq looks at an empty CQ
// before it returns 0 to C, on a busy-polling device, where each look
// runs the transport. A C program polls in a loop, and every trip
// between C and Go costs a cgo callback; looking a few more times while
// in Go saves most of those trips. Measured in one run, 5 alternated
// rounds each against softhca perf: with 0 more looks ib_send_lat was
// 1.18x the Go path's and ib_write_bw 0.89x; with 8, 0.98x and 1.02x
// (docs/performance.md). An empty poll then takes a few microseconds
// instead of one.
const emptyPollLooks = 8

// shca_go_poll_cq polls up to n completions into the application's
// array; with tm non-nil (the extended CQ reads one at a time), the
// completion's tag-matching information too.
//
//export shca_go_poll_cq
func shca_go_poll_cq(h C.shca_handle, n C.int, wc *C.struct_ibv_wc, tag *C.uint64_t, priv *C.uint32_t) (ret C.int) {
	defer guardInt("shca_go_poll_cq", &ret, -1)
	c := value[cqObj](h)
	if c == nil || n < 0 || (n > 0 && wc == nil) {
		return -1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cap(c.wcs) < int(n) {
		c.wcs = make([]verbs.WC, n)
	}
	wcs := c.wcs[:n]
	got := c.c.Poll(wcs)
	for i := 0; got == 0 && c.busy && i < emptyPollLooks; i++ {
		got = c.c.Poll(wcs)
	}
	out := unsafe.Slice(wc, int(n))
	for i := range got {
		wcToC(&wcs[i], &out[i])
	}
	if got == 1 && tag != nil {
		*tag, *priv = C.uint64_t(wcs[0].TMInfo.Tag), C.uint32_t(wcs[0].TMInfo.Priv)
	}
	return C.int(got)
}

func wcToC(v *verbs.WC, w *C.struct_ibv_wc) {
	w.wr_id = C.uint64_t(v.WRID)
	w.status = uint32(v.Status)
	w.opcode = uint32(v.Opcode)
	w.vendor_err = C.uint32_t(v.VendorErr)
	w.byte_len = C.uint32_t(v.ByteLen)
	imm := cbytes(unsafe.Add(unsafe.Pointer(w), C.shca_off_wc_imm), 4)
	if v.WCFlags&verbs.WCFlagWithInv != 0 {
		binary.NativeEndian.PutUint32(imm, v.ImmData) // invalidated_rkey, host order
	} else {
		binary.BigEndian.PutUint32(imm, v.ImmData) // imm_data, network order
	}
	w.qp_num = C.uint32_t(v.QPNum)
	w.src_qp = C.uint32_t(v.SrcQP)
	w.wc_flags = C.uint(v.WCFlags)
	w.pkey_index = C.uint16_t(v.PKeyIndex)
	w.slid = C.uint16_t(v.SLID)
	w.sl = C.uint8_t(v.SL)
	w.dlid_path_bits = C.uint8_t(v.DLIDPathBits)
}
