package tap

import (
	"sync"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// loopQueue holds the packets a Link sent to its own addresses until Recv
// takes them: a ring of at most cap packets whose buffers are made when
// first needed and reused after. Send pushes (under the Link's mutex),
// the reader takes; the queue has its own lock so that the reader does
// not wait for a Send.
type loopQueue struct {
	mu         sync.Mutex
	bufs       [][]byte
	nets       []wire.Net
	head, size int

	packets, bytes            uint64 // looped back
	delivered, deliveredBytes uint64 // taken by Recv
	full                      uint64 // dropped: the queue was full
	invalid                   uint64 // dropped: not deliverable (see Link.loopBack)
}

type loopStats struct {
	packets, bytes, delivered, deliveredBytes, full, invalid uint64
}

func (q *loopQueue) init(n int) {
	q.bufs = make([][]byte, n)
	q.nets = make([]wire.Net, n)
}

// push copies a packet in; it reports whether the queue was empty (the
// reader must be woken).
func (q *loopQueue) push(n wire.Net, b []byte) (wasEmpty bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.size == len(q.bufs) {
		q.full++
		return false
	}
	i := (q.head + q.size) % len(q.bufs)
	if q.bufs[i] == nil {
		q.bufs[i] = make([]byte, 0, link.MaxPacketSize)
	}
	q.bufs[i] = append(q.bufs[i][:0], b...)
	q.nets[i] = n
	q.size++
	q.packets++
	q.bytes += uint64(len(b))
	return q.size == 1
}

func (q *loopQueue) reject() {
	q.mu.Lock()
	q.invalid++
	q.mu.Unlock()
}

// take moves up to len(pkts) packets into the callers' buffers.
func (q *loopQueue) take(pkts []link.Packet) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for n < len(pkts) && q.size > 0 {
		b := q.bufs[q.head]
		if cap(pkts[n].Buf) < len(b) {
			q.invalid++
		} else {
			pkts[n].Buf = pkts[n].Buf[:copy(pkts[n].Buf[:cap(pkts[n].Buf)], b)]
			pkts[n].Net = q.nets[q.head]
			q.delivered++
			q.deliveredBytes += uint64(len(b))
			n++
		}
		q.head = (q.head + 1) % len(q.bufs)
		q.size--
	}
	return n
}

func (q *loopQueue) stats() loopStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return loopStats{q.packets, q.bytes, q.delivered, q.deliveredBytes, q.full, q.invalid}
}
