package cq

// eventFIFO is a channel's queue of pending events, one *CQ per event,
// oldest first. Unlike a CQ's ring it grows: how many events may wait is
// not bounded by any CQ's size (a CQ can fire, be re-armed and fire again
// before anyone reads the channel), as the kernel's per-file event list is
// not. It doubles when full and never shrinks, so steady state does not
// allocate.
//
// An eventFIFO is not safe for concurrent use; Channel.mu guards it.
type eventFIFO struct {
	buf  []*CQ
	head int // index of the oldest event
	n    int // number of events
}

func (f *eventFIFO) len() int { return f.n }

func (f *eventFIFO) push(c *CQ) {
	if f.n == len(f.buf) {
		nb := make([]*CQ, max(8, 2*len(f.buf)))
		for i := range f.n {
			nb[i] = f.buf[f.idx(i)]
		}
		f.buf, f.head = nb, 0
	}
	f.buf[f.idx(f.n)] = c
	f.n++
}

// pop removes and returns the oldest event's CQ, or nil when empty.
func (f *eventFIFO) pop() *CQ {
	if f.n == 0 {
		return nil
	}
	c := f.buf[f.head]
	f.buf[f.head] = nil
	f.head++
	if f.head == len(f.buf) {
		f.head = 0
	}
	f.n--
	return c
}

// remove deletes every event for c, keeping the others in order, and
// returns how many it deleted.
func (f *eventFIFO) remove(c *CQ) int {
	kept := 0
	for i := range f.n {
		e := f.buf[f.idx(i)]
		if e != c {
			f.buf[f.idx(kept)] = e
			kept++
		}
	}
	for i := kept; i < f.n; i++ {
		f.buf[f.idx(i)] = nil
	}
	removed := f.n - kept
	f.n = kept
	return removed
}

func (f *eventFIFO) idx(i int) int {
	j := f.head + i
	if j >= len(f.buf) {
		j -= len(f.buf)
	}
	return j
}
