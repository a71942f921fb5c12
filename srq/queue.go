// Package srq implements receive queues: Queue, the fixed-capacity store
// of receive work requests that both a QP's own receive queue and a shared
// receive queue use, and SRQ, the shared receive queue object
// (ibv_create_srq, ibv_modify_srq, ibv_query_srq, ibv_post_srq_recv) with
// its limit ("low watermark") event.
//
// # Ownership and threading
//
// A Queue is a plain value guarded by its owner: the QP's lock for a QP's
// receive queue, the SRQ's own lock for an SRQ. Posting copies the work
// request's scatter list into storage allocated when the queue is created,
// so the caller may reuse its RecvWR as soon as the post returns, and Take
// copies it out again into storage the transport owns.
//
// SRQ methods are safe for concurrent use. The limit event is raised
// through a callback called without the SRQ's lock held.
package srq

import (
	"syscall"

	"github.com/softhca/softhca/internal/ring"
	"github.com/softhca/softhca/verbs"
)

// RecvWQE is a receive work queue element as the transport takes it
// (Take fills its scatter list reusing its backing array, so a caller
// that keeps one RecvWQE allocates only on first use).
type RecvWQE = verbs.RecvWQE

// Queue is a fixed-capacity FIFO of receive work requests.
type Queue struct {
	slots  ring.Ring[slot]
	sges   []verbs.SGE // slot i's scatter list is sges[i*maxSGE:][:n]
	maxSGE int
}

type slot struct {
	wrID uint64
	n    int
}

// NewQueue returns a queue for maxWR requests of up to maxSGE elements.
func NewQueue(maxWR, maxSGE int) Queue {
	return Queue{
		slots:  ring.New[slot](maxWR),
		sges:   make([]verbs.SGE, maxWR*maxSGE),
		maxSGE: maxSGE,
	}
}

// Cap returns how many requests the queue holds.
func (q *Queue) Cap() int { return q.slots.Cap() }

// MaxSGE returns the longest scatter list a request may have.
func (q *Queue) MaxSGE() int { return q.maxSGE }

// Len returns how many requests are queued.
func (q *Queue) Len() int { return q.slots.Len() }

// Full reports whether the queue is full.
func (q *Queue) Full() bool { return q.slots.Full() }

// Push queues a copy of one request (wr.Next is ignored). It reports false
// when the queue is full. The caller has validated wr.
func (q *Queue) Push(wr *verbs.RecvWR) bool {
	s := q.slots.PushSlot()
	if s == nil {
		return false
	}
	s.wrID, s.n = wr.WRID, len(wr.SGList)
	i := q.slots.Index(q.slots.Len() - 1)
	copy(q.sges[i*q.maxSGE:], wr.SGList)
	return true
}

// Take removes the oldest request into dst and reports whether there was
// one.
func (q *Queue) Take(dst *RecvWQE) bool {
	if q.slots.Len() == 0 {
		return false
	}
	s := q.slots.At(0)
	i := q.slots.Index(0)
	dst.WRID = s.wrID
	dst.SGL = append(dst.SGL[:0], q.sges[i*q.maxSGE:i*q.maxSGE+s.n]...)
	q.slots.Drop(1)
	return true
}

// TakeIfFits removes the oldest request into dst if its scatter list holds
// at least need bytes. present reports whether there was a request at all.
func (q *Queue) TakeIfFits(dst *RecvWQE, need uint64) (taken, present bool) {
	if q.slots.Len() == 0 {
		return false, false
	}
	s := q.slots.At(0)
	i := q.slots.Index(0)
	var n uint64
	for _, sge := range q.sges[i*q.maxSGE : i*q.maxSGE+s.n] {
		n += uint64(sge.Length)
	}
	if n < need {
		return false, true
	}
	return q.Take(dst), true
}

// Drain removes every request, oldest first, calling f with each one's
// work request ID (to flush them).
func (q *Queue) Drain(f func(wrID uint64)) {
	for q.slots.Len() > 0 {
		f(q.slots.At(0).wrID)
		q.slots.Drop(1)
	}
}

// Reset empties the queue without completing anything.
func (q *Queue) Reset() { q.slots.Reset() }

// Resize changes the capacity to maxWR, keeping the queued requests in
// order. It reports false, changing nothing, when more than maxWR requests
// are queued.
func (q *Queue) Resize(maxWR int) bool {
	if maxWR < q.slots.Len() {
		return false
	}
	nq := NewQueue(maxWR, q.maxSGE)
	var w RecvWQE
	for q.Take(&w) {
		nq.Push(&verbs.RecvWR{WRID: w.WRID, SGList: w.SGL})
	}
	*q = nq
	return true
}

// SGEChecker checks one receive scatter element against the memory region
// table (key, protection domain, bounds, LOCAL_WRITE) and returns an error
// wrapping EINVAL when it is not usable. nil accepts everything.
type SGEChecker func(sge verbs.SGE) error

// ValidateRecvWR checks one receive work request for a queue whose
// requests may have up to maxSGE elements (ibv_post_recv(3): num_sge must
// not exceed max_recv_sge; each element must lie in a region registered
// with LOCAL_WRITE).
func ValidateRecvWR(op string, wr *verbs.RecvWR, maxSGE int, check SGEChecker) error {
	if len(wr.SGList) > maxSGE {
		return verbs.Errorf(op, syscall.EINVAL, "wr_id %#x: num_sge %d exceeds max_sge %d", wr.WRID, len(wr.SGList), maxSGE)
	}
	var total uint64
	for i, sge := range wr.SGList {
		total += uint64(sge.Length)
		if check == nil {
			continue
		}
		if err := check(sge); err != nil {
			return verbs.Errorf(op, syscall.EINVAL, "wr_id %#x: sg_list[%d]: %v", wr.WRID, i, err)
		}
	}
	if total > 1<<31 {
		return verbs.Errorf(op, syscall.EINVAL, "wr_id %#x: total length %d exceeds 2^31", wr.WRID, total)
	}
	return nil
}
