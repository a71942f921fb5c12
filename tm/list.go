package tm

import (
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// indexedMasks is how many distinct masks Match always looks up by hash;
// with more, it looks up by hash while the entries outnumber the masks
// twice, and otherwise scans the list in add order (a scan step costs
// less than a lookup).
const indexedMasks = 8

// entryState is where an entry is in its life (docs/tag-matching.md T2,
// T3). Only listed entries can match.
type entryState uint8

const (
	entryFree     entryState = iota // the handle is not in use
	entryListed                     // in the list, enabled or not (P2)
	entryConsumed                   // matched; in use until Release
	entryRemoved                    // removed by a signaled TAG_DEL; in use until Release
)

// none is the end of a link.
const none = -1

// entry is one handle's slot. Listed entries are linked twice, both in
// add order: in the list of all listed entries and in their bucket (the
// entries of one mask and one tag).
type entry struct {
	state        entryState
	seq          uint64 // add order; enabled when below List.enabledBelow
	tag, mask    uint64
	wrID         uint64
	sgl          []verbs.SGE // backing array of MaxSGE, owned by the slot
	prev, next   int32       // the list of listed entries
	bprev, bnext int32       // the bucket
	freeNext     int32       // the free handles
}

// bucket is the first and last listed entry of one (mask, tag).
type bucket struct{ head, tail int32 }

// maskGroup indexes the listed entries of one mask by tag.
type maskGroup struct {
	mask    uint64
	n       int // listed entries with this mask
	buckets map[uint64]bucket
}

// List is a tag-matching SRQ's tag list: the entries TAG_ADD put there,
// the phase counters and the handles.
//
// A List is not safe for concurrent use: its owner (the TM-SRQ) holds its
// lock around every call. Nothing in it allocates after New except the
// first use of a mask value (its index map).
type List struct {
	cfg     Config
	entries []entry
	// Free handles, first in first out (a freed handle is the last to be
	// reused, as mlx5's list does).
	freeHead, freeTail int32
	nfree              int
	// The listed entries in add order.
	head, tail int32
	listed     int
	groups     []maskGroup
	groupOf    map[uint64]int32 // mask -> index in groups
	spare      []map[uint64]bucket
	// Phase synchronisation (P1-P3).
	sw, hw       uint32
	nextSeq      uint64
	enabledBelow uint64
}

// New returns an empty list (ibv_create_srq_ex with IBV_SRQT_TM).
func New(cfg Config) (*List, error) {
	if cfg.MaxNumTags < 1 || cfg.MaxSGE < 1 || cfg.MaxNumTags > 1<<30 {
		return nil, verbs.Errorf("create_srq_ex", syscall.EINVAL, "tag matching needs max_num_tags >= 1 and max_sge >= 1 (got %d and %d)", cfg.MaxNumTags, cfg.MaxSGE)
	}
	l := &List{
		cfg:      cfg,
		entries:  make([]entry, cfg.MaxNumTags),
		head:     none,
		tail:     none,
		groupOf:  make(map[uint64]int32),
		freeHead: 0,
		freeTail: int32(cfg.MaxNumTags - 1),
		nfree:    cfg.MaxNumTags,
	}
	sgl := make([]verbs.SGE, cfg.MaxNumTags*cfg.MaxSGE)
	for i := range l.entries {
		e := &l.entries[i]
		e.sgl = sgl[i*cfg.MaxSGE : i*cfg.MaxSGE : (i+1)*cfg.MaxSGE]
		e.freeNext = int32(i + 1)
		e.prev, e.next, e.bprev, e.bnext = none, none, none, none
	}
	l.entries[cfg.MaxNumTags-1].freeNext = none
	return l, nil
}

// Counts returns the phase counters: sw, the unexpected messages software
// last said it handled, and hw, the messages found unexpected.
func (l *List) Counts() (sw, hw uint32) { return l.sw, l.hw }

// InUse returns how many handles are in use (T2).
func (l *List) InUse() int { return l.cfg.MaxNumTags - l.nfree }

// Len returns how many entries are in the list, enabled or not.
func (l *List) Len() int { return l.listed }

// Apply applies one list op. An op it refuses (EINVAL, ENOMEM) changed
// nothing; the caller stops the list there (O1).
func (l *List) Apply(op *verbs.OpsWR) (OpResult, error) {
	const name = "post_srq_ops"
	if op.Flags&^(verbs.OpsSignaled|verbs.OpsTMSync) != 0 {
		return OpResult{}, verbs.Errorf(name, syscall.EINVAL, "unknown flags %#x", uint32(op.Flags&^(verbs.OpsSignaled|verbs.OpsTMSync)))
	}
	signaled := op.Flags&verbs.OpsSignaled != 0
	var h uint32
	switch op.Opcode {
	case verbs.WRTagAdd:
		if n := len(op.TM.Add.SGList); n > l.cfg.MaxSGE {
			return OpResult{}, verbs.Errorf(name, syscall.EINVAL, "TAG_ADD with %d scatter elements; the SRQ's max_sge is %d", n, l.cfg.MaxSGE)
		}
		if l.nfree == 0 {
			return OpResult{}, verbs.Errorf(name, syscall.ENOMEM, "tag list full: all %d handles in use", l.cfg.MaxNumTags)
		}
	case verbs.WRTagDel:
		h = op.TM.Handle
		if h >= uint32(l.cfg.MaxNumTags) || l.entries[h].state == entryFree {
			return OpResult{}, verbs.Errorf(name, syscall.EINVAL, "TAG_DEL of handle %d, which is not in use", h)
		}
	case verbs.WRTagSync:
	default:
		return OpResult{}, verbs.Errorf(name, syscall.EINVAL, "unknown opcode %d", uint8(op.Opcode))
	}

	// Accepted: P1 first, then the op.
	if op.Flags&verbs.OpsTMSync != 0 {
		l.sw = op.TM.UnexpectedCnt
	}
	res := OpResult{Handle: h, Complete: signaled, Status: verbs.WCSuccess}
	switch op.Opcode {
	case verbs.WRTagAdd:
		h = l.add(&op.TM.Add)
		op.TM.Handle, res.Handle = h, h
	case verbs.WRTagDel:
		e := &l.entries[h]
		if e.state != entryListed {
			// Consumed meanwhile, or removed already (O3).
			res.Complete, res.Status = true, verbs.WCTMErr
			break
		}
		l.unlink(int32(h))
		if signaled {
			e.state, res.Releases = entryRemoved, true
		} else {
			l.free(h)
		}
	case verbs.WRTagSync:
	}
	l.moment()
	res.SyncReq = res.Complete && l.sw != l.hw
	return res, nil
}

// Match consumes the earliest-added enabled entry that tag matches (M1,
// M2, M3, P2). When none does it changes nothing.
func (l *List) Match(tag uint64) (Match, bool) {
	best := int32(none)
	if len(l.groups) <= indexedMasks || 2*len(l.groups) <= l.listed {
		for i := range l.groups {
			g := &l.groups[i]
			if g.n == 0 {
				continue
			}
			b, ok := g.buckets[tag&g.mask]
			if !ok {
				continue
			}
			// A bucket is in add order: if its first entry is not
			// enabled, none of it is.
			if s := l.entries[b.head].seq; s < l.enabledBelow && (best == none || s < l.entries[best].seq) {
				best = b.head
			}
		}
	} else {
		for i := l.head; i != none; i = l.entries[i].next {
			e := &l.entries[i]
			if e.seq >= l.enabledBelow {
				break // the rest were added later still
			}
			if tag&e.mask == e.tag {
				best = i
				break
			}
		}
	}
	if best == none {
		return Match{}, false
	}
	l.unlink(best)
	e := &l.entries[best]
	e.state = entryConsumed
	return Match{Handle: uint32(best), RecvWRID: e.wrID, Tag: e.tag, Mask: e.mask, SGL: e.sgl}, true
}

// maxSyncDiff is how far software's count may fall behind before an
// unexpected message's completion asks for a sync (P3; mlx5's
// MLX5_TM_MAX_SYNC_DIFF).
const maxSyncDiff = 0x3fff

// Unexpected counts a tagged message delivered to an ordinary buffer
// (M4) and reports whether its completion asks for a sync (P3).
func (l *List) Unexpected() (syncReq bool) {
	l.hw++
	l.moment()
	return l.hw-l.sw > maxSyncDiff
}

// Release ends a consumed or removed entry whose last completion was
// polled (T3); its handle may be returned again. Any other handle is left
// alone.
func (l *List) Release(handle uint32) {
	if handle >= uint32(l.cfg.MaxNumTags) {
		return
	}
	if s := l.entries[handle].state; s == entryConsumed || s == entryRemoved {
		l.free(handle)
	}
}

// moment is a point where P2 looks at the counters: when they are equal,
// every entry added so far is enabled.
func (l *List) moment() {
	if l.sw == l.hw {
		l.enabledBelow = l.nextSeq
	}
}

// add takes a free handle for a new entry and links it last.
func (l *List) add(a *verbs.TagAdd) uint32 {
	h := l.freeHead
	e := &l.entries[h]
	l.freeHead = e.freeNext
	if l.freeHead == none {
		l.freeTail = none
	}
	l.nfree--

	e.state = entryListed
	e.seq = l.nextSeq
	l.nextSeq++
	e.tag, e.mask, e.wrID = a.Tag, a.Mask, a.RecvWRID
	e.sgl = append(e.sgl[:0], a.SGList...)

	e.prev, e.next = l.tail, none
	if l.tail != none {
		l.entries[l.tail].next = h
	} else {
		l.head = h
	}
	l.tail = h
	l.listed++

	gi, ok := l.groupOf[a.Mask]
	if !ok {
		if len(l.groups) >= indexedMasks {
			l.dropEmptyGroups()
		}
		gi = int32(len(l.groups))
		var m map[uint64]bucket
		if n := len(l.spare); n > 0 {
			m, l.spare = l.spare[n-1], l.spare[:n-1]
		} else {
			m = make(map[uint64]bucket)
		}
		l.groups = append(l.groups, maskGroup{mask: a.Mask, buckets: m})
		l.groupOf[a.Mask] = gi
	}
	g := &l.groups[gi]
	g.n++
	b, ok := g.buckets[a.Tag]
	if !ok {
		b = bucket{head: h, tail: h}
		e.bprev, e.bnext = none, none
	} else {
		e.bprev, e.bnext = b.tail, none
		l.entries[b.tail].bnext = h
		b.tail = h
	}
	g.buckets[a.Tag] = b
	return uint32(h)
}

// unlink takes a listed entry out of the list and its bucket.
func (l *List) unlink(h int32) {
	e := &l.entries[h]
	if e.prev != none {
		l.entries[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next != none {
		l.entries[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	l.listed--

	gi := l.groupOf[e.mask]
	g := &l.groups[gi]
	b := g.buckets[e.tag]
	if e.bprev != none {
		l.entries[e.bprev].bnext = e.bnext
	} else {
		b.head = e.bnext
	}
	if e.bnext != none {
		l.entries[e.bnext].bprev = e.bprev
	} else {
		b.tail = e.bprev
	}
	if b.head == none {
		delete(g.buckets, e.tag)
	} else {
		g.buckets[e.tag] = b
	}
	g.n-- // an empty group stays for the next entry of its mask (see add)
	e.prev, e.next, e.bprev, e.bnext = none, none, none, none
}

// dropEmptyGroups removes the mask groups that have no entries left,
// keeping their maps for new masks. Empty groups stay until there are
// indexedMasks groups, so that a mask whose entries come and go (one
// entry matched and added again) keeps its group.
func (l *List) dropEmptyGroups() {
	kept := l.groups[:0]
	for _, g := range l.groups {
		if g.n == 0 {
			delete(l.groupOf, g.mask)
			l.spare = append(l.spare, g.buckets)
			continue
		}
		l.groupOf[g.mask] = int32(len(kept))
		kept = append(kept, g)
	}
	clear(l.groups[len(kept):])
	l.groups = kept
}

// free returns a handle to the end of the free list.
func (l *List) free(h uint32) {
	e := &l.entries[h]
	e.state = entryFree
	e.sgl = e.sgl[:0]
	e.freeNext = none
	if l.freeTail == none {
		l.freeHead = int32(h)
	} else {
		l.entries[l.freeTail].freeNext = int32(h)
	}
	l.freeTail = int32(h)
	l.nfree++
}
