package hca

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/internal/acks"
	"github.com/softhca/softhca/verbs"
)

// AsyncEvent is an asynchronous event (struct ibv_async_event). Exactly
// one of QP, CQ and SRQ is set for an affiliated event; Port is set for a
// port event.
type AsyncEvent struct {
	Type verbs.EventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	Port uint8
}

// asyncQueue is the device's queue of asynchronous events not yet taken
// by GetAsyncEvent.
type asyncQueue struct {
	mu       sync.Mutex
	q        []AsyncEvent // protected by mu
	nonblock bool         // protected by mu
	notify   chan struct{}
	// fd is the eventfd AsyncFD returns, created on its first call
	// (-1 until then and once closed); it counts the queued events
	// (semaphore mode). Protected by mu.
	fd int
}

func (a *asyncQueue) init() { a.notify, a.fd = make(chan struct{}, 1), -1 }

// fdAdd adds n (>0) to the eventfd's count or takes -n (<0) from it.
//
// Preconditions: a.mu is held.
func (a *asyncQueue) fdAdd(n int) {
	if a.fd < 0 {
		return
	}
	var b [8]byte
	for ; n > 0; n-- {
		binary.NativeEndian.PutUint64(b[:], 1)
		for {
			if _, err := unix.Write(a.fd, b[:]); err != unix.EINTR {
				break
			}
		}
	}
	for ; n < 0; n++ {
		for {
			if _, err := unix.Read(a.fd, b[:]); err != unix.EINTR {
				break
			}
		}
	}
}

// AsyncFD returns a file descriptor that polls readable (POLLIN) exactly
// while GetAsyncEvent would return an event without blocking: the
// ibv_context's async_fd. Poll it, but do not read it. It is closed by
// Close. -1 if the eventfd cannot be created or the device is closed.
func (d *Device) AsyncFD() int {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	a := &d.ev
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fd >= 0 || closed {
		return a.fd
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK|unix.EFD_SEMAPHORE)
	if err != nil {
		return -1
	}
	a.fd = fd
	a.fdAdd(len(a.q))
	return fd
}

// closeFD closes the eventfd, if any.
func (a *asyncQueue) closeFD() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fd >= 0 {
		unix.Close(a.fd)
		a.fd = -1
	}
}

// raise queues an event. It takes only the queue's lock, so objects may
// raise events while holding their own.
func (a *asyncQueue) raise(e AsyncEvent) {
	a.mu.Lock()
	a.q = append(a.q, e)
	a.fdAdd(1)
	a.mu.Unlock()
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

// purge removes the queued events that match, returning how many.
func (a *asyncQueue) purge(match func(*AsyncEvent) bool) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	kept := a.q[:0]
	n := 0
	for i := range a.q {
		if match(&a.q[i]) {
			n++
			continue
		}
		kept = append(kept, a.q[i])
	}
	clear(a.q[len(kept):])
	a.q = kept
	a.fdAdd(-n)
	return n
}

// SetAsyncNonBlocking makes GetAsyncEvent fail with EAGAIN instead of
// blocking when no event is queued (like O_NONBLOCK on the async fd).
func (d *Device) SetAsyncNonBlocking(nb bool) {
	d.ev.mu.Lock()
	d.ev.nonblock = nb
	d.ev.mu.Unlock()
}

// ErrInterrupted is returned (wrapped together with the context's error)
// when GetAsyncEvent's context ends before an event arrives; it matches
// syscall.EINTR.
var ErrInterrupted = &verbs.Error{Op: "get_async_event", Errno: syscall.EINTR, Msg: "interrupted"}

// GetAsyncEvent returns the next asynchronous event (ibv_get_async_event),
// blocking until one arrives or ctx is done; in non-blocking mode it
// fails with EAGAIN when none is queued. Every event returned must be
// acknowledged with AckAsyncEvent.
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) {
	a := &d.ev
	for {
		a.mu.Lock()
		if len(a.q) > 0 {
			e := a.q[0]
			a.q[0] = AsyncEvent{}
			a.q = a.q[1:]
			a.fdAdd(-1)
			more := len(a.q) > 0
			if c := e.counter(); c != nil {
				c.Reported()
			}
			a.mu.Unlock()
			if more {
				select {
				case a.notify <- struct{}{}:
				default:
				}
			}
			return e, nil
		}
		nb := a.nonblock
		a.mu.Unlock()
		if nb {
			return AsyncEvent{}, verbs.Errorf("get_async_event", syscall.EAGAIN, "no asynchronous event is queued")
		}
		select {
		case <-a.notify:
		case <-ctx.Done():
			return AsyncEvent{}, errors.Join(ErrInterrupted, ctx.Err())
		}
	}
}

// AckAsyncEvent acknowledges an event returned by GetAsyncEvent
// (ibv_ack_async_event).
func (d *Device) AckAsyncEvent(e AsyncEvent) {
	if c := e.counter(); c != nil {
		c.Acked(1)
	}
}

// counter returns the acknowledgement counter of the event's object.
func (e *AsyncEvent) counter() *acks.Counter {
	switch {
	case e.QP != nil:
		return e.QP.qp.Events()
	case e.CQ != nil:
		return &e.CQ.events.Counter
	case e.SRQ != nil:
		return &e.SRQ.events.Counter
	}
	return nil
}

// eventCounter counts an object's asynchronous events. Destroy waits
// until those taken by GetAsyncEvent are acknowledged (libibverbs waits for
// events_completed == events_reported) and then drops those never taken
// from the queue (as the kernel's uverbs does when an object is destroyed).
type eventCounter struct{ acks.Counter }
