//go:build libibverbs

// Command libibverbs is softhca's drop-in libibverbs.so.1: built with
// -buildmode=c-shared (make libibverbs), it exports rdma-core's libibverbs
// ABI, symbol versions included, so that unmodified libibverbs programs
// (rdma-core's ibv_* tools, perftest, an application's own verbs code) run
// on a softhca device in their own process, with no kernel module.
//
// Two halves: shim.c defines every exported symbol and owns the C objects
// the application sees (struct ibv_context, ibv_qp, ... laid out by
// verbs.h itself, since it includes it); this package is the Go half,
// which the C half calls through cgo (the exports below, named shca_go_*)
// and which drives the hca package. Each C object holds the cgo.Handle of
// its Go half. The version script (libibverbs.map) exports the ABI
// symbols and hides the rest, the Go runtime's included.
//
// Threads: every verb runs on the application's thread that calls it;
// the device's transport runs on its own goroutines (hca). The Go halves
// that keep scratch space for the data path (QP, SRQ, CQ) lock it, since
// libibverbs lets several threads post to or poll one object.
//
// The device comes from the environment (package hcaenv): SOFTHCA_ADDR and
// the rest, which `softhca run` sets.
//
// The file is built only with the libibverbs build tag: the default build
// needs no C toolchain and no libibverbs-dev.
package main

/*
#cgo CFLAGS: -O2 -Wall
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"unsafe"
)

func main() {}

// init sizes the library's Go runtime: half the CPUs (at least one)
// unless the environment says otherwise (GOMAXPROCS). The application's
// own threads do most of the work here (they post, and they poll, which
// with busy polling runs the transport), and each of the runtime's Ps
// would also spin looking for work on the cores those threads need: with
// the default of one P per CPU, two processes on a 2-core machine (a
// server and a client) ran ib_write_bw at 740-820 MB/s and ib_send_lat at
// 19-37 us; with one P each, 1070-1420 MB/s and 11-13 us
// (docs/performance.md).
func init() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(max(1, runtime.NumCPU()/2))
	}
}

// errnoOf returns the errno an error carries (EINVAL if none: a bad
// argument is the likely cause of an error without one).
func errnoOf(err error) C.int {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return C.int(e)
	}
	return C.int(syscall.EINVAL)
}

// fail logs a failed verb at SOFTHCA_LOG=2 and returns its errno.
func fail(err error) C.int {
	if logLevel >= 2 {
		fmt.Fprintf(os.Stderr, "softhca: %v\n", err)
	}
	return errnoOf(err)
}

// logLevel is SOFTHCA_LOG, set by the first device list.
var logLevel int

// logf prints set-up messages at SOFTHCA_LOG=1 and above.
func logf(format string, args ...any) {
	if logLevel >= 1 {
		fmt.Fprintf(os.Stderr, "softhca: "+format+"\n", args...)
	}
}

// newHandle returns a handle for v, as C stores it.
func newHandle(v any) C.shca_handle { return C.shca_handle(handles.add(v)) }

// value returns the Go half a handle names, nil for 0, a destroyed
// object's handle or a handle of another type.
func value[T any](h C.shca_handle) *T {
	v, _ := handles.get(uintptr(h)).(*T)
	return v
}

// release forgets a handle (the object was destroyed).
func release(h C.shca_handle) { handles.del(uintptr(h)) }

// cbytes views n bytes of C memory at p.
func cbytes(p unsafe.Pointer, n int) []byte {
	if n <= 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// setErr stores an errno where a constructor's C half reads it.
func setErr(p *C.int, err error) {
	if p != nil {
		*p = fail(err)
	}
}

// The exports' guards: a Go panic under a verb (a bad pointer from the
// application, or a bug here) must not take the application down with a
// Go stack trace. The verb fails instead, and one line on stderr says
// which and why. Each export defers one.

// recovered reports a recovered panic of op, if any.
func recovered(op string, r any) bool {
	if r == nil {
		return false
	}
	verb := "ibv_" + strings.TrimPrefix(op, "shca_go_")
	if e, ok := r.(runtime.Error); ok && strings.Contains(e.Error(), "invalid memory address") {
		fmt.Fprintf(os.Stderr, "softhca: %s: an address given to it is not readable memory; the call fails (EFAULT)\n", verb)
		return true
	}
	fmt.Fprintf(os.Stderr, "softhca: %s: internal error, the call fails: %v\n", verb, r)
	return true
}

// guardInt makes a panicking export return fail.
func guardInt(op string, ret *C.int, fail C.int) {
	if recovered(op, recover()) {
		*ret = fail
	}
}

// guardHandle makes a panicking constructor return no object, errno
// EFAULT.
func guardHandle(op string, h *C.shca_handle, errp *C.int) {
	if recovered(op, recover()) {
		*h = 0
		if errp != nil {
			*errp = C.int(syscall.EFAULT)
		}
	}
}

// guard recovers a panicking export that returns nothing to check.
func guard(op string) { recovered(op, recover()) }
