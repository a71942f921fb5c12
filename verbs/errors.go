package verbs

import (
	"fmt"
	"syscall"
)

// Error is a verbs failure: the verb that failed, the errno libibverbs
// would return, and what was wrong. errors.Is(err, syscall.EINVAL) matches
// on the errno.
type Error struct {
	Op    string        // the verb, as libibverbs names it without "ibv_": "post_send"
	Errno syscall.Errno // EINVAL, ENOMEM, EBUSY, EAGAIN, ...
	Msg   string        // what was wrong
}

// Error returns "op: message".
func (e *Error) Error() string { return e.Op + ": " + e.Msg }

// Unwrap returns the errno, so errors.Is compares against it.
func (e *Error) Unwrap() error { return e.Errno }

// Errorf returns an *Error for the verb op with errno and a formatted
// message.
func Errorf(op string, errno syscall.Errno, format string, args ...any) error {
	return &Error{Op: op, Errno: errno, Msg: fmt.Sprintf(format, args...)}
}
