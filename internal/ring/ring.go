// Package ring provides Ring, a fixed-capacity FIFO of values allocated
// once at creation. softhca's send, receive and completion queues are
// rings: a full ring is reported to the caller, never grown.
//
// A Ring is not safe for concurrent use; its owner guards it.
package ring

// Ring is a fixed-capacity FIFO queue of T values.
type Ring[T any] struct {
	buf  []T
	head int // index of the oldest element
	n    int // number of elements
}

// New returns an empty ring that holds up to capacity values.
func New[T any](capacity int) Ring[T] {
	return Ring[T]{buf: make([]T, capacity)}
}

// Cap returns the capacity.
func (r *Ring[T]) Cap() int { return len(r.buf) }

// Len returns the number of values in the ring.
func (r *Ring[T]) Len() int { return r.n }

// Free returns how many more values fit.
func (r *Ring[T]) Free() int { return len(r.buf) - r.n }

// Full reports whether no more values fit.
func (r *Ring[T]) Full() bool { return r.n == len(r.buf) }

// PushSlot reserves the slot after the newest value and returns a pointer to
// it for the caller to fill in place, or nil when the ring is full. The
// slot holds whatever value was there before.
func (r *Ring[T]) PushSlot() *T {
	if r.n == len(r.buf) {
		return nil
	}
	i := r.head + r.n
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	r.n++
	return &r.buf[i]
}

// Push appends v and reports whether there was room.
func (r *Ring[T]) Push(v T) bool {
	s := r.PushSlot()
	if s == nil {
		return false
	}
	*s = v
	return true
}

// At returns a pointer to the i-th oldest value (0 is the oldest).
// It panics if i is out of range.
func (r *Ring[T]) At(i int) *T {
	if i < 0 || i >= r.n {
		panic("ring: index out of range")
	}
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return &r.buf[j]
}

// Index returns the slot number (0..Cap-1) of the i-th oldest value: a
// stable name for the slot while the value stays in the ring, for storage
// kept beside the ring (scatter lists, inline data).
func (r *Ring[T]) Index(i int) int {
	j := r.head + i
	if j >= len(r.buf) {
		j -= len(r.buf)
	}
	return j
}

// Pop removes the oldest value and returns it; ok is false when the ring
// is empty.
func (r *Ring[T]) Pop() (v T, ok bool) {
	if r.n == 0 {
		return v, false
	}
	v = r.buf[r.head]
	var zero T
	r.buf[r.head] = zero
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
	return v, true
}

// Drop removes the oldest n values (n <= Len), zeroing their slots so
// that the ring keeps nothing they pointed to reachable.
func (r *Ring[T]) Drop(n int) {
	var zero T
	for range n {
		r.buf[r.head] = zero
		r.head++
		if r.head == len(r.buf) {
			r.head = 0
		}
		r.n--
	}
}

// Reset empties the ring.
func (r *Ring[T]) Reset() {
	clear(r.buf)
	r.head, r.n = 0, 0
}

// Resize changes the capacity to c, keeping the values in order. It
// reports false, changing nothing, when c is below Len.
func (r *Ring[T]) Resize(c int) bool {
	if c < r.n {
		return false
	}
	nb := make([]T, c)
	for i := range r.n {
		nb[i] = *r.At(i)
	}
	r.buf, r.head = nb, 0
	return true
}
