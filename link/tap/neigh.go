package tap

import (
	"net/netip"
	"time"
)

// nudState is a neighbour cache entry's state, after RFC 4861 7.3.2 and
// Linux's NUD states, without DELAY (nothing above the host tells it that
// a neighbour answers, so a stale entry in use is probed at once).
// Transitions:
//
//	(none)     ─ Send to an unknown address ─▶ incomplete (broadcast request)
//	(none)     ─ the neighbour's request for the host ─▶ stale
//	incomplete ─ reply to the host ─▶ reachable (waiting packets sent)
//	incomplete ─ other news of its MAC ─▶ stale (waiting packets sent)
//	incomplete ─ Solicits requests unanswered ─▶ removed (packets dropped)
//	reachable  ─ ReachableTime since the reply ─▶ stale (by age, no timer)
//	reachable  ─ another MAC, unconfirmed ─▶ stale
//	stale      ─ Send ─▶ probe (unicast request; the MAC is still used)
//	probe      ─ reply to the host ─▶ reachable
//	probe      ─ Solicits requests unanswered ─▶ removed
//	any        ─ evicted for another neighbour (not incomplete) ─▶ removed
type nudState uint8

const (
	// nudFree: the slot holds no neighbour.
	nudFree nudState = iota
	// nudIncomplete: requests are out, packets wait, no MAC is known.
	nudIncomplete
	// nudReachable: the MAC was confirmed by a reply at confirmed.
	nudReachable
	// nudStale: the MAC was learned without confirmation (from the
	// neighbour's own request), or a probe found it changed.
	nudStale
	// nudProbe: a stale entry in use: its MAC is used while unicast
	// requests re-confirm it.
	nudProbe
)

// neighbour is an entry of the cache.
type neighbour struct {
	addr  netip.Addr
	state nudState
	mac   [6]byte
	// src is the host's address that requests for addr come from (the
	// source of the packet that started the resolution).
	src netip.Addr
	// confirmed is when a reply last confirmed mac (nudReachable).
	confirmed time.Time
	// used is when a packet last went to (or waited for) the neighbour,
	// or the entry was made: the least recently used entry is evicted.
	used time.Time
	// next is when to send the next request or give up (nudIncomplete,
	// nudProbe); sent is how many requests went out in this resolution.
	next time.Time
	sent int
	// queue holds the pool indices of the frames waiting for mac
	// (nudIncomplete), oldest first; its capacity is
	// Config.QueuePerNeighbour.
	queue []int32
}

// stale reports whether the entry's MAC needs re-confirming before it is
// trusted again: learned unconfirmed, or confirmed too long ago.
func (e *neighbour) stale(now time.Time, reachable time.Duration) bool {
	return e.state == nudStale || e.state == nudReachable && now.Sub(e.confirmed) >= reachable
}

// resolving reports whether the entry has requests out.
func (e *neighbour) resolving() bool {
	return e.state == nudIncomplete || e.state == nudProbe
}

// neighTable is the bounded neighbour cache: a fixed array of entries,
// indexed by address.
type neighTable struct {
	entries []neighbour
	index   map[netip.Addr]int32
	free    []int32
}

func (t *neighTable) init(n, queue int) {
	t.entries = make([]neighbour, n)
	t.index = make(map[netip.Addr]int32, n)
	t.free = make([]int32, n)
	for i := range t.entries {
		t.entries[i].queue = make([]int32, 0, queue)
		t.free[i] = int32(n - 1 - i)
	}
}

// lookup returns the entry for a, or nil.
func (t *neighTable) lookup(a netip.Addr) *neighbour {
	i, ok := t.index[a]
	if !ok {
		return nil
	}
	return &t.entries[i]
}

// victim returns the least recently used entry that is not being
// resolved (it has no packets waiting), or nil if every entry is.
func (t *neighTable) victim() *neighbour {
	var v *neighbour
	for i := range t.entries {
		e := &t.entries[i]
		if e.state == nudFree || e.state == nudIncomplete {
			continue
		}
		if v == nil || e.used.Before(v.used) {
			v = e
		}
	}
	return v
}

// add makes a free entry for a (the caller fills it), or returns nil when
// the table is full.
func (t *neighTable) add(a netip.Addr) *neighbour {
	if len(t.free) == 0 {
		return nil
	}
	i := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	t.index[a] = i
	e := &t.entries[i]
	q := e.queue[:0]
	*e = neighbour{addr: a, queue: q}
	return e
}

// remove frees e, whose queue must be empty.
func (t *neighTable) remove(e *neighbour) {
	i := t.index[e.addr]
	delete(t.index, e.addr)
	q := e.queue[:0]
	*e = neighbour{queue: q}
	t.free = append(t.free, i)
}

// framePool holds the frames waiting for resolution: at most max
// buffers, each made the first time it is needed and reused after.
type framePool struct {
	frames [][]byte
	free   []int32
	size   int
}

func (p *framePool) init(n, size int) {
	p.frames = make([][]byte, n)
	p.free = make([]int32, n)
	for i := range p.free {
		p.free[i] = int32(n - 1 - i)
	}
	p.size = size
}

// get returns a free buffer's index and the buffer, resliced to n bytes,
// or -1 when none is free.
func (p *framePool) get(n int) (int32, []byte) {
	if len(p.free) == 0 {
		return -1, nil
	}
	i := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	if p.frames[i] == nil {
		p.frames[i] = make([]byte, p.size)
	}
	p.frames[i] = p.frames[i][:n]
	return i, p.frames[i]
}

func (p *framePool) put(i int32) { p.free = append(p.free, i) }
