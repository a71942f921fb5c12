package cq

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/verbs"
)

// Channel is a completion channel (struct ibv_comp_channel): a FIFO of
// completion events, one entry per event, each naming the CQ it is for,
// shared by every CQ created with the channel. Its file descriptor, an
// eventfd, is readable exactly while the FIFO is non-empty.
//
// The eventfd costs a write per event and a read per GetEvent, two system
// calls on the completion path, which a program that only calls GetEvent
// never looks at. So its counter is kept in step with the FIFO only from
// the first call to FD on: until then it stays zero, and FD brings it up
// to the number of events pending.
//
// Create it with NewChannel and close it with Close once no CQ uses it.
type Channel struct {
	// wake holds a token when a waiter in GetEvent should look at the
	// FIFO again. Senders never block (it has room for one token).
	wake chan struct{}
	// done is closed by Close, waking every waiter.
	done chan struct{}
	// waitHook, when set (by tests, before use), is called by GetEvent
	// each time it is about to block, with no lock held.
	waitHook func()

	mu sync.Mutex
	// The following fields are protected by mu.
	fd          int       // the eventfd; -1 once closed
	fdInUse     bool      // FD was called: the eventfd counts the FIFO
	closed      bool      // Close has succeeded
	nonBlocking bool      // O_NONBLOCK on channel->fd
	users       int       // CQs created with the channel and not destroyed
	q           eventFIFO // pending events, oldest first
	one         [8]byte   // the native-endian uint64 1 written per event
	rbuf        [8]byte   // read buffer for the eventfd
	fdErrs      int       // eventfd reads or writes that failed (should stay 0)
}

// NewChannel creates a completion channel (ibv_create_comp_channel). Its
// eventfd is close-on-exec and counts pending events in semaphore mode.
func NewChannel() (*Channel, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK|unix.EFD_SEMAPHORE)
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EIO
		}
		return nil, verbs.Errorf("create_comp_channel", errno, "eventfd: %v", err)
	}
	ch := &Channel{
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
		fd:   fd,
	}
	binary.NativeEndian.PutUint64(ch.one[:], 1)
	return ch, nil
}

// FD returns the channel's file descriptor (channel->fd), or -1 once the
// channel is closed. It polls readable (POLLIN) exactly while GetEvent
// would return an event without blocking. Poll it, but do not read it:
// the channel reads it as it hands out events.
func (ch *Channel) FD() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.fdInUse && !ch.closed {
		ch.fdInUse = true
		for range ch.q.len() {
			ch.writeFDLocked()
		}
	}
	return ch.fd
}

// SetNonBlocking sets or clears non-blocking mode, as fcntl(channel->fd,
// F_SETFL, O_NONBLOCK) does for libibverbs: in non-blocking mode GetEvent
// returns EAGAIN instead of waiting. A GetEvent already waiting keeps
// waiting.
func (ch *Channel) SetNonBlocking(nb bool) {
	ch.mu.Lock()
	ch.nonBlocking = nb
	ch.mu.Unlock()
}

// GetEvent takes the oldest completion event (ibv_get_cq_event) and returns
// the CQ it is for. The event counts as reported for that CQ and must be
// acknowledged with AckEvents before the CQ can be destroyed.
//
// With no event pending, GetEvent returns EAGAIN in non-blocking mode and
// otherwise waits until an event arrives, the channel is closed (EBADF) or
// ctx is done (an *InterruptedError matching syscall.EINTR and ctx.Err()).
// A pending event is returned even if ctx is already done. Several
// goroutines may wait at once; each event goes to exactly one of them.
func (ch *Channel) GetEvent(ctx context.Context) (*CQ, error) {
	for {
		ch.mu.Lock()
		if ch.closed {
			ch.mu.Unlock()
			return nil, verbs.Errorf("get_cq_event", syscall.EBADF, "completion channel is closed")
		}
		if c := ch.q.pop(); c != nil {
			ch.readFDLocked()
			c.reported++
			more := ch.q.len() > 0
			ch.mu.Unlock()
			if more {
				// Another waiter may have slept through the token
				// this one took; pass it on.
				ch.signal()
			}
			return c, nil
		}
		nb := ch.nonBlocking
		ch.mu.Unlock()
		if nb {
			return nil, verbs.Errorf("get_cq_event", syscall.EAGAIN, "no completion event pending")
		}
		if ch.waitHook != nil {
			ch.waitHook()
		}
		select {
		case <-ch.wake:
		case <-ch.done:
		case <-ctx.Done():
			return nil, interrupted("get_cq_event", ctx)
		}
	}
}

// Close closes the channel and its eventfd (ibv_destroy_comp_channel). It
// fails with EBUSY while a CQ created with the channel is not destroyed,
// and with EBADF when the channel is already closed. Waiters in GetEvent
// return EBADF.
func (ch *Channel) Close() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return verbs.Errorf("destroy_comp_channel", syscall.EBADF, "completion channel is already closed")
	}
	if ch.users > 0 {
		return verbs.Errorf("destroy_comp_channel", syscall.EBUSY, "completion channel is used by %d CQ(s)", ch.users)
	}
	ch.closed = true
	close(ch.done)
	err := unix.Close(ch.fd)
	ch.fd = -1
	ch.q = eventFIFO{}
	if err != nil {
		return verbs.Errorf("destroy_comp_channel", syscall.EIO, "close eventfd: %v", err)
	}
	return nil
}

// Pending returns the number of events queued and not yet taken by
// GetEvent.
func (ch *Channel) Pending() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.q.len()
}

// attach registers a new CQ with the channel.
func (ch *Channel) attach() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		// ib_uverbs_lookup_comp_file fails on a closed fd: EBADF.
		return verbs.Errorf("create_cq", syscall.EBADF, "completion channel is closed")
	}
	ch.users++
	return nil
}

// post appends an event for c.
//
// Preconditions: c.mu is held (lock order CQ.mu -> Channel.mu).
func (ch *Channel) post(c *CQ) {
	ch.mu.Lock()
	if ch.closed { // cannot happen while c is live; be safe
		ch.mu.Unlock()
		return
	}
	ch.q.push(c)
	ch.writeFDLocked()
	ch.mu.Unlock()
	ch.signal()
}

// detachLocked removes c's queued events and unregisters c.
//
// Preconditions: c.mu and ch.mu are held.
func (ch *Channel) detachLocked(c *CQ) {
	for range ch.q.remove(c) {
		ch.readFDLocked()
	}
	ch.users--
}

// signal leaves a wake-up token for a waiter, without blocking.
func (ch *Channel) signal() {
	select {
	case ch.wake <- struct{}{}:
	default:
	}
}

// writeFDLocked adds one to the eventfd counter, once FD was called.
//
// Preconditions: ch.mu is held and the channel is open.
func (ch *Channel) writeFDLocked() {
	for ch.fdInUse {
		_, err := unix.Write(ch.fd, ch.one[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// Only a counter at 2^64-2 could refuse; count it
			// rather than lose the event itself.
			ch.fdErrs++
		}
		return
	}
}

// readFDLocked takes one from the eventfd counter (semaphore mode), once
// FD was called.
//
// Preconditions: ch.mu is held and the channel is open.
func (ch *Channel) readFDLocked() {
	for ch.fdInUse {
		_, err := unix.Read(ch.fd, ch.rbuf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// EAGAIN: someone read the fd behind our back. The FIFO
			// stays authoritative; only readiness drifts.
			ch.fdErrs++
		}
		return
	}
}
