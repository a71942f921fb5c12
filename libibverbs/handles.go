//go:build libibverbs

package main

import (
	"sync"
	"sync/atomic"
)

// handles maps the numbers the C objects hold to their Go halves. It is
// cgo.Handle without its panic: a verb called on an object already
// destroyed (by another thread, say) finds nothing and fails with EINVAL
// instead of taking the application down with a Go stack trace.
var handles handleTable

type handleTable struct {
	next atomic.Uintptr
	m    sync.Map // uintptr -> any
}

// add registers v and returns its handle, never 0.
func (t *handleTable) add(v any) uintptr {
	h := t.next.Add(1)
	t.m.Store(h, v)
	return h
}

// get returns the value of h, nil if h is 0 or unknown (deleted).
func (t *handleTable) get(h uintptr) any {
	if h == 0 {
		return nil
	}
	v, _ := t.m.Load(h)
	return v
}

// del forgets h; deleting an unknown handle does nothing.
func (t *handleTable) del(h uintptr) { t.m.Delete(h) }
