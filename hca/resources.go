package hca

import (
	"cmp"
	"maps"
	"slices"

	"github.com/softhca/softhca/verbs"
)

// Resources is a snapshot of a device's objects, what iproute2's
// `rdma resource show` lists for a kernel device: the protection
// domains, memory regions, completion queues, queue pairs and shared
// receive queues alive when Device.Resources ran, each list ordered by
// number. Objects are read one at a time, so a snapshot taken while
// other goroutines create, modify or destroy objects shows each object
// as it was at some moment during the call.
type Resources struct {
	PDs  []PDInfo
	MRs  []MRInfo
	CQs  []CQInfo
	QPs  []QPInfo
	SRQs []SRQInfo
}

// PDInfo describes a protection domain.
type PDInfo struct {
	Handle uint32 // pdn
	// Users counts the objects in the PD: memory regions, QPs, SRQs and
	// address handles (what keeps Dealloc from succeeding).
	Users int
}

// MRInfo describes a memory region.
type MRInfo struct {
	LKey, RKey uint32
	PD         uint32
	Addr       uint64
	Length     uint64
	Access     verbs.AccessFlags
}

// CQInfo describes a completion queue.
type CQInfo struct {
	Num     uint32 // cqn, numbered from 1 in creation order
	CQE     int    // capacity
	Queued  int    // completions waiting to be polled
	Users   int    // QPs and SRQs that complete into it, each once
	Channel bool   // created with a completion channel
	InError bool   // overran (IBV_EVENT_CQ_ERR)
}

// QPInfo describes a queue pair.
type QPInfo struct {
	QPN            uint32
	Type           verbs.QPType
	PD             uint32
	SendCQ, RecvCQ uint32 // CQ numbers
	SRQ            uint32 // SRQ number; 0 for none
	SQSigAll       bool
	// Attr is what QP.Query returns: the state, the PSNs, the
	// destination, the path MTU, the caps, the timers.
	Attr verbs.QPAttr
	// SendQueued and RecvQueued are the work requests outstanding on
	// the send and receive queues (RecvQueued is 0 with an SRQ).
	SendQueued, RecvQueued int
	// Counters are the QP's packets and transport events since it was
	// created.
	Counters QPCounters
}

// SRQInfo describes a shared receive queue.
type SRQInfo struct {
	Num    uint32 // srqn, numbered from 1 in creation order
	PD     uint32
	Attr   verbs.SRQAttr // max_wr, max_sge, srq_limit (0: not armed)
	Queued int           // receive requests posted and not yet taken
	Users  int           // QPs that take their receives from it
	// TM marks a tag-matching SRQ; CQ is its completion queue's number.
	TM bool
	CQ uint32
}

// Resources returns a snapshot of the device's objects. It may be
// called from any goroutine, also after Close (objects still open are
// listed).
func (d *Device) Resources() Resources {
	var r Resources
	d.mu.Lock()
	pds := slices.Collect(maps.Values(d.pds))
	cqs := slices.Collect(maps.Values(d.cqs))
	qps := slices.Collect(maps.Values(d.qps))
	srqs := slices.Collect(maps.Values(d.srqs))
	for _, p := range pds {
		r.PDs = append(r.PDs, PDInfo{Handle: p.handle, Users: p.refs})
	}
	d.mu.Unlock()
	// Each object's own lock, outside the device's: a QP's or CQ's lock
	// is taken by the transport while it may wait for d.mu.
	for _, m := range d.mrs.Regions() {
		r.MRs = append(r.MRs, MRInfo{LKey: m.LKey(), RKey: m.RKey(), PD: m.PD(), Addr: m.Addr(),
			Length: uint64(m.Len()), Access: m.Access()})
	}
	for _, c := range cqs {
		r.CQs = append(r.CQs, CQInfo{Num: c.num, CQE: c.cq.CQE(), Queued: c.cq.Len(), Users: c.cq.Users(),
			Channel: c.ch != nil, InError: c.cq.InError()})
	}
	for _, q := range qps {
		qi := QPInfo{QPN: q.Num(), Type: q.qp.Type(), PD: q.pd.handle, SendCQ: q.send.num, RecvCQ: q.recv.num,
			SQSigAll: q.qp.SQSigAll(), Attr: q.qp.Query(), SendQueued: q.qp.SendQueueLen(), Counters: q.qp.Counters()}
		if q.srq != nil {
			qi.SRQ = q.srq.num
		} else {
			qi.RecvQueued = q.qp.RecvQueueLen()
		}
		r.QPs = append(r.QPs, qi)
	}
	for _, s := range srqs {
		si := SRQInfo{Num: s.num, PD: s.pd.handle, Attr: s.srq.Query(), Queued: s.srq.Len(), Users: s.srq.Users(), TM: s.srq.IsTM()}
		if s.cq != nil {
			si.CQ = s.cq.num
		}
		r.SRQs = append(r.SRQs, si)
	}
	slices.SortFunc(r.PDs, func(a, b PDInfo) int { return cmp.Compare(a.Handle, b.Handle) })
	slices.SortFunc(r.CQs, func(a, b CQInfo) int { return cmp.Compare(a.Num, b.Num) })
	slices.SortFunc(r.QPs, func(a, b QPInfo) int { return cmp.Compare(a.QPN, b.QPN) })
	slices.SortFunc(r.SRQs, func(a, b SRQInfo) int { return cmp.Compare(a.Num, b.Num) })
	return r
}
