package cq

import (
	"context"
	"errors"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// InterruptedError reports that a blocking verb (GetEvent, Destroy, Wait) gave up
// because its context was done. It is the Go form of a blocking read or
// pthread wait interrupted by a signal: errors.Is(err, syscall.EINTR) holds,
// and so does errors.Is(err, ctx.Err()) (context.Canceled or
// context.DeadlineExceeded) and errors.Is(err, context.Cause(ctx)).
// errors.As(err, **verbs.Error) finds a *verbs.Error with Errno EINTR.
type InterruptedError struct {
	Op    string // the verb: "get_cq_event", "destroy_cq" or "poll_cq" (Wait)
	Err   error  // ctx.Err()
	Cause error  // context.Cause(ctx); equal to Err unless a cause was set
}

func interrupted(op string, ctx context.Context) error {
	return &InterruptedError{Op: op, Err: ctx.Err(), Cause: context.Cause(ctx)}
}

// Error returns "op: interrupted: cause".
func (e *InterruptedError) Error() string {
	return e.Op + ": interrupted: " + e.Cause.Error()
}

// Unwrap returns the EINTR verbs error, the context's error and, when it
// differs, the context's cause.
func (e *InterruptedError) Unwrap() []error {
	errs := []error{
		&verbs.Error{Op: e.Op, Errno: syscall.EINTR, Msg: "interrupted: " + e.Err.Error()},
		e.Err,
	}
	if e.Cause != nil && !errors.Is(e.Cause, e.Err) {
		errs = append(errs, e.Cause)
	}
	return errs
}
