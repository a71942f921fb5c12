package srq

import (
	"syscall"

	"github.com/softhca/softhca/tm"
	"github.com/softhca/softhca/transport"
	"github.com/softhca/softhca/verbs"
)

// TMConfig makes an SRQ a tag-matching SRQ (IBV_SRQT_TM,
// ibv_create_srq_ex(3)).
type TMConfig struct {
	// MaxNumTags and MaxOps are the requested tm_cap; MaxSGE is the
	// device's tm_caps.max_sge (the longest scatter list of a tag).
	MaxNumTags, MaxOps, MaxSGE uint32
	// DevMaxNumTags and DevMaxOps are the device's tm_caps limits.
	DevMaxNumTags, DevMaxOps uint32
	// CQ is the SRQ's completion queue (srq_init_attr_ex.cq): list
	// operations and every message the SRQ receives complete there.
	CQ CQ
}

// Releaser learns that the application polled a completion (cq.Releaser).
type Releaser interface {
	Released(token uint32)
}

// CQ is the completion queue of a tag-matching SRQ as it uses it.
type CQ interface {
	Push(wc *verbs.WC, solicited bool) bool
	// PushRelease queues a completion and calls r.Released(token) once
	// the application has polled it; false, calling nothing, when it
	// was not queued.
	PushRelease(wc *verbs.WC, solicited bool, r Releaser, token uint32) bool
}

// tmState is the tag-matching part of an SRQ, protected by SRQ.mu.
type tmState struct {
	list   *tm.List
	cq     CQ
	maxOps int
	maxSGE int
}

// newTM validates a TMConfig against the device's limits.
func newTM(c *TMConfig) (*tmState, error) {
	const op = "create_srq_ex"
	switch {
	case c.CQ == nil:
		return nil, verbs.Errorf(op, syscall.EINVAL, "a tag-matching SRQ needs a CQ")
	case c.MaxNumTags == 0 || c.MaxNumTags > c.DevMaxNumTags:
		return nil, verbs.Errorf(op, syscall.EINVAL, "tm_cap.max_num_tags %d not in 1..%d", c.MaxNumTags, c.DevMaxNumTags)
	case c.MaxOps == 0 || c.MaxOps > c.DevMaxOps:
		return nil, verbs.Errorf(op, syscall.EINVAL, "tm_cap.max_ops %d not in 1..%d", c.MaxOps, c.DevMaxOps)
	case c.MaxSGE == 0 || c.MaxSGE > transport.MaxTagSGE:
		// A device configured with more would have rendezvous READs
		// cut short: refuse it rather than fail messages later.
		return nil, verbs.Errorf(op, syscall.EINVAL, "the device's tm_caps.max_sge %d is not within 1..%d, the scatter elements a tag may have", c.MaxSGE, transport.MaxTagSGE)
	}
	l, err := tm.New(tm.Config{MaxNumTags: int(c.MaxNumTags), MaxSGE: int(c.MaxSGE)})
	if err != nil {
		return nil, err
	}
	return &tmState{list: l, cq: c.CQ, maxOps: int(c.MaxOps), maxSGE: int(c.MaxSGE)}, nil
}

// IsTM reports whether the SRQ is a tag-matching SRQ.
func (s *SRQ) IsTM() bool { return s.tm != nil }

// PostOps applies a linked list of tag-matching list operations
// (ibv_post_srq_ops(3)) in order. It stops at the first operation it
// refuses and returns it with the error; the operations before it took
// effect, it and the ones after did not. Errors: EINVAL for an SRQ that
// is not a tag-matching SRQ or is destroyed, an unknown opcode or flag, a
// TAG_ADD scatter list longer than tm_caps.max_sge or not covered by the
// PD's regions with LOCAL_WRITE, a TAG_DEL of a handle not in use; ENOMEM
// when the tag list is full or the list holds more than max_ops
// operations. TAG_ADD writes the new entry's handle into wr.TM.Handle.
func (s *SRQ) PostOps(wr *verbs.OpsWR) (*verbs.OpsWR, error) {
	const op = "post_srq_ops"
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tm
	switch {
	case t == nil:
		return wr, verbs.Errorf(op, syscall.EINVAL, "the SRQ is not a tag-matching SRQ")
	case s.destroyed:
		return wr, verbs.Errorf(op, syscall.EINVAL, "SRQ is destroyed")
	}
	for n := 0; wr != nil; n, wr = n+1, wr.Next {
		if n == t.maxOps {
			return wr, verbs.Errorf(op, syscall.ENOMEM, "more than max_ops (%d) operations in one list", t.maxOps)
		}
		if wr.Opcode == verbs.WRTagAdd && len(wr.TM.Add.SGList) <= t.maxSGE && s.check != nil {
			for i, sge := range wr.TM.Add.SGList {
				if err := s.check(sge); err != nil {
					return wr, verbs.Errorf(op, syscall.EINVAL, "wr_id %#x: tag sg_list[%d]: %v", wr.WRID, i, err)
				}
			}
		}
		res, err := t.list.Apply(wr)
		if err != nil {
			return wr, err
		}
		if !res.Complete {
			continue
		}
		wc := verbs.WC{WRID: wr.WRID, Status: res.Status, Opcode: tmOpcode(wr.Opcode)}
		if res.SyncReq {
			wc.WCFlags |= verbs.WCFlagTMSyncReq
		}
		if res.Releases {
			if !t.cq.PushRelease(&wc, false, s, res.Handle) {
				t.list.Release(res.Handle) // never seen: it cannot be named again
			}
		} else {
			t.cq.Push(&wc, false)
		}
	}
	return nil, nil
}

// tmOpcode is the completion opcode of a list operation.
func tmOpcode(o verbs.OpsOpcode) verbs.WCOpcode {
	switch o {
	case verbs.WRTagAdd:
		return verbs.WCTMAdd
	case verbs.WRTagDel:
		return verbs.WCTMDel
	default:
		return verbs.WCTMSync
	}
}

// Released frees the tag handle whose last completion the application
// polled (docs/tag-matching.md T3). The CQ calls it.
func (s *SRQ) Released(handle uint32) {
	s.mu.Lock()
	if s.tm != nil {
		s.tm.list.Release(handle)
	}
	s.mu.Unlock()
}

// Arrive chooses the destination of a tagged message (transport.TagQueue).
func (s *SRQ) Arrive(tag uint64, dst *RecvWQE) (v transport.TagVerdict, handle uint32, syncReq bool) {
	s.mu.Lock()
	if s.tm == nil || s.destroyed {
		s.mu.Unlock()
		return transport.TagNone, 0, false
	}
	if m, ok := s.tm.list.Match(tag); ok {
		dst.WRID = m.RecvWRID
		dst.SGL = append(dst.SGL[:0], m.SGL...)
		s.mu.Unlock()
		return transport.TagMatched, m.Handle, false
	}
	if !s.q.Take(dst) {
		s.mu.Unlock()
		return transport.TagNone, 0, false
	}
	syncReq = s.tm.list.Unexpected()
	fire := s.limitReachedLocked()
	s.mu.Unlock()
	if fire && s.onLimit != nil {
		s.onLimit(s)
	}
	return transport.TagUnexpected, 0, syncReq
}

// Complete queues a completion of a message the SRQ received on its CQ
// (transport.TagQueue); ends: the completion ends the tag entry handle,
// freed once the application has polled it.
func (s *SRQ) Complete(wc verbs.WC, solicited bool, ends bool, handle uint32) {
	t := s.tm // set by New, never changed
	if t == nil {
		return
	}
	if !ends {
		t.cq.Push(&wc, solicited)
		return
	}
	if !t.cq.PushRelease(&wc, solicited, s, handle) {
		s.Released(handle)
	}
}

// TMCounts returns the tag list's phase counters: the unexpected
// messages software last reported and those the SRQ found.
func (s *SRQ) TMCounts() (sw, hw uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tm == nil {
		return 0, 0
	}
	return s.tm.list.Counts()
}
