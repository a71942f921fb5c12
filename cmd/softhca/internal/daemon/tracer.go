package daemon

import (
	"sync"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// maxTraced is the most of a packet the tracer keeps: a 4096-byte MTU
// payload with its headers and ICRC, and room for a jumbo's headers.
const maxTraced = 4096 + 128

// tracer keeps the last packets the device sent and received in a fixed
// ring, for the trace stream and the web page's ladder. The device's
// Trace hook (record) runs on the transport's goroutines for every
// packet: it copies the packet into the next slot under mu and wakes the
// readers, and never blocks on them. A reader holds a cursor (the
// sequence number of the next packet it wants); one that falls more than
// the ring's length behind loses the oldest packets and is told how many.
type tracer struct {
	now func() time.Time

	mu    sync.Mutex
	slots []traced // fixed; slot i holds packet seq with seq%len == i
	next  uint64   // sequence number of the next packet recorded
	// wake is closed by the next record once a reader took it (waiting):
	// a device nobody traces makes no channel per packet.
	wake    chan struct{}
	waiting bool
}

// traced is one recorded packet.
type traced struct {
	at   time.Time
	dir  hca.Direction
	net  wire.Net
	data []byte // the UDP payload, truncated at maxTraced
	size int    // its length before truncation
}

func newTracer(n int, now func() time.Time) *tracer {
	t := &tracer{now: now, wake: make(chan struct{})}
	if n > 0 {
		t.slots = make([]traced, n)
	}
	return t
}

// record is the device's Trace hook.
func (t *tracer) record(dir hca.Direction, p *link.Packet) {
	if len(t.slots) == 0 {
		return
	}
	t.mu.Lock()
	// The clock is read under the lock, so that the ring's order (the
	// receive goroutine and the workers record concurrently) is also
	// the order of the times.
	at := t.now()
	s := &t.slots[t.next%uint64(len(t.slots))]
	s.at, s.dir, s.net, s.size = at, dir, p.Net, len(p.Buf)
	if s.data == nil {
		s.data = make([]byte, 0, maxTraced)
	}
	s.data = append(s.data[:0], p.Buf[:min(len(p.Buf), maxTraced)]...)
	t.next++
	if t.waiting {
		close(t.wake)
		t.wake, t.waiting = make(chan struct{}), false
	}
	t.mu.Unlock()
}

// since copies out the packets from sequence number from on, at most
// max of them (0: all), into out (its elements and their buffers
// reused: what it returned last time is overwritten), and returns them, the
// sequence number to ask for next, how many were lost (overwritten
// before they were read) and a channel closed when another packet is
// recorded.
func (t *tracer) since(from uint64, max int, out []traced) ([]traced, uint64, uint64, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out = out[:0]
	var lost uint64
	if n := uint64(len(t.slots)); t.next > n && from < t.next-n {
		lost = t.next - n - from
		from = t.next - n
	}
	for ; from < t.next && (max == 0 || len(out) < max); from++ {
		s := &t.slots[from%uint64(len(t.slots))]
		if len(out) < cap(out) {
			out = out[:len(out)+1]
		} else {
			out = append(out, traced{})
		}
		c := &out[len(out)-1]
		data := c.data[:0]
		*c = *s
		c.data = append(data, s.data...)
	}
	t.waiting = true
	return out, from, lost, t.wake
}

// recent returns the sequence number from which the last n packets are
// still held.
func (t *tracer) recent(n int) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	n = min(n, len(t.slots))
	if uint64(n) > t.next {
		return 0
	}
	return t.next - uint64(n)
}
