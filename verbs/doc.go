// Package verbs is softhca's shared vocabulary: the types, constants and
// errors of the InfiniBand verbs as libibverbs defines them (verbs.h), so
// that every layer and the conformance suite speak one language.
//
// Numeric values equal libibverbs' (IBV_QPT_RC is 2 here too), so a backend
// that drives a real rdma-core device converts by a plain cast. Names follow
// Go conventions with the libibverbs name in each comment.
//
// Verbs return errors that wrap a syscall.Errno, as libibverbs returns
// errno values: errors.Is(err, syscall.EINVAL) works, and the message says
// what was wrong ("post_send: QP 0x11 is in RESET"). Protocol outcomes are
// never Go errors: they are WCStatus values in work completions.
//
// The package holds no state and starts no goroutines.
package verbs
