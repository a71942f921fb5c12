package tm

import (
	"fmt"
	"slices"
	"strings"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// This file is the reference matcher the model test (model_test.go)
// compares the engine with. It is written from docs/tag-matching.md alone,
// as plainly as the rules read: a slice of entries in add order, scanned
// from the front; a per-handle state; and each entry's "enabled" flag of
// rule P2 set, at every moment P2 names, on every entry in the list when
// sw == hw. It is slow on purpose: nothing in it is clever.
//
// The engine chooses handle values (T2 only bounds them), so the reference
// never predicts one: apply takes the handle the engine returned, after the
// caller has checked with handleFree that the rules allow it.

// refState is where a handle is in its life (rules T2, T3).
type refState uint8

const (
	// refFree: not in use; a TAG_ADD may return it.
	refFree refState = iota
	// refLive: its entry is in the list, enabled or not.
	refLive
	// refConsumed: its entry matched a message (M3) and left the list;
	// the handle is in use until the completion that finishes the
	// message is polled (T3).
	refConsumed
	// refRemoved: its entry was removed by a signaled TAG_DEL; the handle
	// is in use until that TM_DEL completion is polled (T3).
	refRemoved
)

func (s refState) String() string {
	switch s {
	case refFree:
		return "free"
	case refLive:
		return "live"
	case refConsumed:
		return "consumed"
	case refRemoved:
		return "removed"
	}
	return fmt.Sprintf("refState(%d)", uint8(s))
}

// refEntry is one entry of the list (T1).
type refEntry struct {
	handle   uint32
	tag      uint64
	mask     uint64
	recvWRID uint64
	sgl      []verbs.SGE // a copy: the caller's scatter list is its own after the post
	// enabled: there has been a moment, at or after this entry's TAG_ADD,
	// at which sw == hw (P2).
	enabled bool
}

// matches is rule M1 as the man page writes it: the entry's tag is not
// masked.
func (e *refEntry) matches(tag uint64) bool { return tag&e.mask == e.tag }

// refList is the reference tag list.
type refList struct {
	maxNumTags int
	maxSGE     int
	list       []*refEntry // entries in the list, in add order
	state      []refState  // by handle, 0 <= handle < maxNumTags
	sw, hw     uint32      // section 3
}

// refConfigErr is what New must say of cfg.
func refConfigErr(cfg Config) error {
	if cfg.MaxNumTags < 1 || cfg.MaxSGE < 1 {
		return syscall.EINVAL
	}
	return nil
}

// newRefList returns an empty reference list; cfg must be valid.
func newRefList(cfg Config) *refList {
	if refConfigErr(cfg) != nil {
		panic(fmt.Sprintf("newRefList(%+v): invalid config", cfg))
	}
	return &refList{
		maxNumTags: cfg.MaxNumTags,
		maxSGE:     cfg.MaxSGE,
		state:      make([]refState, cfg.MaxNumTags),
	}
}

// stateOf returns the state of handle h; handles out of range are never
// in use.
func (r *refList) stateOf(h uint32) refState {
	if uint64(h) >= uint64(r.maxNumTags) {
		return refFree
	}
	return r.state[h]
}

// handleFree reports whether a TAG_ADD may return h (T2): in range and not
// in use.
func (r *refList) handleFree(h uint32) bool {
	return uint64(h) < uint64(r.maxNumTags) && r.state[h] == refFree
}

// inUse is the number of handles in use (T2, T3).
func (r *refList) inUse() int {
	n := 0
	for _, s := range r.state {
		if s != refFree {
			n++
		}
	}
	return n
}

// index returns where the entry named h is in the list, or -1.
func (r *refList) index(h uint32) int {
	for i, e := range r.list {
		if e.handle == h {
			return i
		}
	}
	return -1
}

// refusal returns the errnos Apply may refuse op with; empty when the op
// must be accepted. When more than one check fails and they name different
// errnos, the rule book does not say which check comes first, so each is
// returned and either is right.
func (r *refList) refusal(op *verbs.OpsWR) []syscall.Errno {
	var errs []syscall.Errno
	add := func(e syscall.Errno) {
		if !slices.Contains(errs, e) {
			errs = append(errs, e)
		}
	}
	if op.Flags&^(verbs.OpsSignaled|verbs.OpsTMSync) != 0 {
		add(syscall.EINVAL) // O4
	}
	switch op.Opcode {
	case verbs.WRTagAdd:
		if len(op.TM.Add.SGList) > r.maxSGE {
			add(syscall.EINVAL) // T5
		}
		if r.inUse() >= r.maxNumTags {
			add(syscall.ENOMEM) // T4
		}
	case verbs.WRTagDel:
		if r.stateOf(op.TM.Handle) == refFree {
			add(syscall.EINVAL) // O3, implementation-defined
		}
	case verbs.WRTagSync:
	default:
		add(syscall.EINVAL) // O4
	}
	return errs
}

// moment is one of P2's moments: when sw == hw, every entry in the list
// is enabled from now on.
func (r *refList) moment() {
	if r.sw == r.hw {
		for _, e := range r.list {
			e.enabled = true
		}
	}
}

// apply applies an op that refusal accepted. newHandle is the handle the
// engine returned for a TAG_ADD (the caller has checked handleFree); it is
// ignored for the other ops.
//
// The result's SyncReq is false when there is no completion (Complete
// false): P3 is about completions, and the comparison ignores SyncReq then.
func (r *refList) apply(op *verbs.OpsWR, newHandle uint32) OpResult {
	if errs := r.refusal(op); len(errs) != 0 {
		panic(fmt.Sprintf("refList.apply of an op it refuses with %v", errs))
	}
	signaled := op.Flags&verbs.OpsSignaled != 0
	if op.Flags&verbs.OpsTMSync != 0 {
		r.sw = op.TM.UnexpectedCnt // P1: before the op takes effect
	}
	var res OpResult
	switch op.Opcode {
	case verbs.WRTagAdd:
		if !r.handleFree(newHandle) {
			panic(fmt.Sprintf("refList.apply: TAG_ADD given handle %d (%v)", newHandle, r.stateOf(newHandle)))
		}
		r.list = append(r.list, &refEntry{
			handle:   newHandle,
			tag:      op.TM.Add.Tag,
			mask:     op.TM.Add.Mask,
			recvWRID: op.TM.Add.RecvWRID,
			sgl:      slices.Clone(op.TM.Add.SGList),
		})
		r.state[newHandle] = refLive
		res.Handle = newHandle
		res.Complete = signaled // O2
	case verbs.WRTagDel:
		h := op.TM.Handle
		res.Handle = h
		if i := r.index(h); i >= 0 {
			// O3: in the list, enabled or not: removed.
			r.list = slices.Delete(r.list, i, i+1)
			if signaled {
				// T3: the handle stays in use until the TM_DEL
				// completion is polled.
				r.state[h] = refRemoved
				res.Complete = true
				res.Releases = true
			} else {
				r.state[h] = refFree // T3: at once
			}
		} else {
			// O3: consumed meanwhile, or already removed, handle still
			// in use: TM_ERR, which completes even unsignaled.
			res.Complete = true
			res.Status = verbs.WCTMErr
		}
	case verbs.WRTagSync:
		res.Complete = signaled // only P1
	}
	r.moment()                                 // P2: the end of every op
	res.SyncReq = res.Complete && r.sw != r.hw // P3
	return res
}

// match is a tagged message's arrival (M1-M3): the earliest-added enabled
// entry that matches tag is consumed. Not found: nothing changes (the
// caller then calls unexpected, or drops the message for want of a buffer).
func (r *refList) match(tag uint64) (Match, bool) {
	for i, e := range r.list {
		if !e.enabled || !e.matches(tag) {
			continue
		}
		r.list = slices.Delete(r.list, i, i+1)
		r.state[e.handle] = refConsumed
		// P2's moment at this arrival: no counter moved, so it enables
		// nothing that the previous moment did not (checked by
		// selfCheck), but it is taken, as the rule reads.
		r.moment()
		return Match{Handle: e.handle, RecvWRID: e.recvWRID, Tag: e.tag, Mask: e.mask, SGL: e.sgl}, true
	}
	return Match{}, false
}

// unexpected is an unexpected message delivered to an ordinary buffer
// (M4): hw advances, then P2's moment; it returns P3's SyncReq for the
// message's completion: only when software is more than 16,383 behind.
func (r *refList) unexpected() bool {
	r.hw++
	r.moment()
	return r.hw-r.sw > 16383
}

// release: the completion that ends h's entry was polled (T3). Anything
// else (a live entry, a handle not in use, out of range) is ignored.
func (r *refList) release(h uint32) {
	if s := r.stateOf(h); s == refConsumed || s == refRemoved {
		r.state[h] = refFree
	}
}

// enabledCount is the number of enabled entries in the list.
func (r *refList) enabledCount() int {
	n := 0
	for _, e := range r.list {
		if e.enabled {
			n++
		}
	}
	return n
}

// selfCheck checks the reference's own invariants, which follow from the
// rules: each list entry's handle is live and only one entry has it; the
// live handles are exactly the list's; when sw == hw every entry is
// enabled (the last moment saw it); enabled entries come before disabled
// ones (an entry enabled at a moment was added after every earlier one).
func (r *refList) selfCheck() error {
	seen := make(map[uint32]bool)
	lastEnabled := true
	for i, e := range r.list {
		if seen[e.handle] {
			return fmt.Errorf("reference: handle %d twice in the list", e.handle)
		}
		seen[e.handle] = true
		if r.stateOf(e.handle) != refLive {
			return fmt.Errorf("reference: list entry %d has handle %d in state %v", i, e.handle, r.stateOf(e.handle))
		}
		if r.sw == r.hw && !e.enabled {
			return fmt.Errorf("reference: sw == hw == %d but entry %d (handle %d) is disabled", r.sw, i, e.handle)
		}
		if e.enabled && !lastEnabled {
			return fmt.Errorf("reference: entry %d (handle %d) enabled after a disabled one", i, e.handle)
		}
		lastEnabled = e.enabled
	}
	for h, s := range r.state {
		if s == refLive && !seen[uint32(h)] {
			return fmt.Errorf("reference: handle %d live but not in the list", h)
		}
	}
	return nil
}

// String describes the reference's state for failure messages.
func (r *refList) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sw=%d hw=%d inUse=%d list=[", r.sw, r.hw, r.inUse())
	for i, e := range r.list {
		if i > 0 {
			b.WriteString(" ")
		}
		en := "on"
		if !e.enabled {
			en = "off"
		}
		fmt.Fprintf(&b, "{h=%d tag=%#x mask=%#x wrid=%d sge=%d %s}", e.handle, e.tag, e.mask, e.recvWRID, len(e.sgl), en)
	}
	b.WriteString("] ended=[")
	first := true
	for h, s := range r.state {
		if s == refConsumed || s == refRemoved {
			if !first {
				b.WriteString(" ")
			}
			first = false
			fmt.Fprintf(&b, "%d:%v", h, s)
		}
	}
	b.WriteString("]")
	return b.String()
}

// refAlone is the reference on its own, as a refMatcher, for
// TestReferenceRules: it picks handles itself (the highest free one, so
// that no scenario leans on a particular choice).
type refAlone struct{ r *refList }

func newRefAlone(cfg Config) (refMatcher, error) {
	if err := refConfigErr(cfg); err != nil {
		return nil, err
	}
	return refAlone{newRefList(cfg)}, nil
}

func (a refAlone) Apply(op *verbs.OpsWR) (OpResult, error) {
	if errs := a.r.refusal(op); len(errs) != 0 {
		return OpResult{}, errs[0]
	}
	var h uint32
	if op.Opcode == verbs.WRTagAdd {
		for i := a.r.maxNumTags - 1; i >= 0; i-- {
			if a.r.state[i] == refFree {
				h = uint32(i)
				break
			}
		}
		op.TM.Handle = h
	}
	return a.r.apply(op, h), nil
}

func (a refAlone) Match(tag uint64) (Match, bool) { return a.r.match(tag) }
func (a refAlone) Unexpected() bool               { return a.r.unexpected() }
func (a refAlone) Release(h uint32)               { a.r.release(h) }
func (a refAlone) Counts() (sw, hw uint32)        { return a.r.sw, a.r.hw }
func (a refAlone) InUse() int                     { return a.r.inUse() }
func (a refAlone) Len() int                       { return len(a.r.list) }

// refMatcher is the API the engine's *List and refAlone share.
type refMatcher interface {
	Apply(op *verbs.OpsWR) (OpResult, error)
	Match(tag uint64) (Match, bool)
	Unexpected() bool
	Release(handle uint32)
	Counts() (sw, hw uint32)
	InUse() int
	Len() int
}
