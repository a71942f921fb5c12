package conformance

import (
	"context"
	"errors"
	"runtime"
	"syscall"
	"time"

	"github.com/softhca/softhca/verbs"
)

// This file holds the helpers cases share: the concise form of each verb
// calls t.Fatalf on failure (packetimpact's dut.Socket), while cases that
// check an error call the verb directly and use ExpectErrno.

// ExpectErrno fails the case unless err wraps want.
func ExpectErrno(t *T, err error, want syscall.Errno, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want %s (%d)", what, errnoName(want), int(want))
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %q (errno %s), want %s", what, err, errnoName(ErrnoOf(err)), errnoName(want))
	}
}

// ExpectOK fails the case if err is not nil.
func ExpectOK(t *T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Expect fails the case unless got == want.
func Expect[V comparable](t *T, got, want V, what string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func errnoName(e syscall.Errno) string {
	switch e {
	case 0:
		return "no errno"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.ENOMEM:
		return "ENOMEM"
	case syscall.EBUSY:
		return "EBUSY"
	case syscall.EAGAIN:
		return "EAGAIN"
	case syscall.EOPNOTSUPP:
		return "EOPNOTSUPP"
	case syscall.EINTR:
		return "EINTR"
	case syscall.EBADF:
		return "EBADF"
	}
	return e.Error()
}

// Fixture is the usual set of objects a case needs.
type Fixture struct {
	D   Device
	PD  PD
	CQ  CQ
	MR  MR
	Buf []byte // MR.Bytes(): the registered memory
}

// NewFixture allocates a PD, a 64-entry CQ and a 64 KiB MR with every
// access right.
func NewFixture(t *T, d Device) *Fixture {
	t.Helper()
	f := &Fixture{D: d}
	var err error
	f.PD, err = d.AllocPD()
	ExpectOK(t, err, "alloc_pd")
	f.CQ, err = d.CreateCQ(64, nil, nil, 0)
	ExpectOK(t, err, "create_cq")
	f.MR, err = f.PD.RegMR(make([]byte, 64<<10), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	ExpectOK(t, err, "reg_mr")
	f.Buf = f.MR.Bytes() // RegMR may copy
	return f
}

// DefaultCap is a small set of queue sizes every device accepts.
var DefaultCap = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}

// NewQP creates a QP of the type with DefaultCap on the fixture's CQ.
func (f *Fixture) NewQP(t *T, typ verbs.QPType) QP {
	t.Helper()
	q, err := f.PD.CreateQP(&QPInitAttr{SendCQ: f.CQ, RecvCQ: f.CQ, Cap: DefaultCap, QPType: typ})
	ExpectOK(t, err, "create_qp "+typ.String())
	return q
}

// PeerGID returns the GID a fixture's QPs address: the device's own
// RoCEv2 GID at index 1.
func (f *Fixture) PeerGID(t *T) verbs.GID {
	t.Helper()
	g, err := f.D.QueryGID(1, 1)
	ExpectOK(t, err, "query_gid 1")
	return g
}

// Transition returns the attributes and the mask that carry a QP of the
// type from the state before `to` on the usual path (RESET -> INIT -> RTR
// -> RTS -> SQD) to `to`, with exactly the required attributes.
func (f *Fixture) Transition(t *T, typ verbs.QPType, to verbs.QPState, destQPN uint32) (verbs.QPAttr, verbs.QPAttrMask) {
	t.Helper()
	a := verbs.QPAttr{QPState: to}
	m := verbs.AttrState
	switch to {
	case verbs.QPStateInit:
		a.PKeyIndex, a.PortNum = 0, 1
		m |= verbs.AttrPKeyIndex | verbs.AttrPort
		if typ == verbs.QPTypeUD {
			a.QKey = 0x11111111
			m |= verbs.AttrQKey
		} else {
			a.QPAccessFlags = verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
			m |= verbs.AttrAccessFlags
		}
	case verbs.QPStateRTR:
		if typ != verbs.QPTypeUD {
			a.PathMTU = verbs.MTU1024
			a.DestQPNum = destQPN
			a.RQPSN = 0x123
			a.AHAttr = verbs.AHAttr{IsGlobal: true, PortNum: 1,
				GRH: verbs.GlobalRoute{DGID: f.PeerGID(t), SGIDIndex: 1, HopLimit: 64}}
			m |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		}
		if typ == verbs.QPTypeRC {
			a.MaxDestRdAtomic, a.MinRNRTimer = 4, 12
			m |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		}
	case verbs.QPStateRTS:
		a.SQPSN = 0x456
		m |= verbs.AttrSQPSN
		if typ == verbs.QPTypeRC {
			a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic = 14, 7, 7, 4
			m |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
		}
	case verbs.QPStateReset, verbs.QPStateSQD, verbs.QPStateSQE, verbs.QPStateErr: // the state alone
	}
	return a, m
}

// Walk moves a QP along RESET -> INIT -> RTR -> RTS -> SQD until it is in
// state to; ERR is reached from INIT by a modify to ERR (SQE cannot be
// reached by a modify: Walk skips the case for it). destQPN is the remote
// QP for connected types.
//
// ERR is entered from INIT, not RESET: the kernel's qp_state_table
// (drivers/infiniband/core/verbs.c, checked by ib_modify_qp_is_ok) has
// no RESET -> ERR, so a kernel device rejects that modify; INIT -> ERR is
// legal everywhere. The RESET -> ERR transition itself is the business
// of modify_qp/table/*/RESET->ERR.
func (f *Fixture) Walk(t *T, q QP, typ verbs.QPType, to verbs.QPState, destQPN uint32) {
	t.Helper()
	if to == verbs.QPStateSQE {
		t.Skipf("SQE is entered only through a send error, not through ibv_modify_qp")
	}
	if to == verbs.QPStateErr {
		a, m := f.Transition(t, typ, verbs.QPStateInit, destQPN)
		ExpectOK(t, q.Modify(&a, m), "modify to INIT (on the way to ERR)")
		ExpectOK(t, q.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState), "modify to ERR")
		return
	}
	path := []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS, verbs.QPStateSQD}
	for _, s := range path {
		if to == verbs.QPStateReset {
			return
		}
		a, m := f.Transition(t, typ, s, destQPN)
		ExpectOK(t, q.Modify(&a, m), "modify to "+s.String())
		if s == verbs.QPStateSQD {
			waitDrained(t, q)
		}
		if s == to {
			return
		}
	}
}

// waitDrained waits up to two seconds for a QP in SQD to finish draining
// (query_qp's sq_draining clears). The drain of a QP with nothing
// outstanding may still take a moment on a device that drains in another
// context (rxe: rxe_qp_drain schedules the requester, which sets
// QP_STATE_DRAINED), and a modify of a QP in SQD that is still draining
// may be rejected (IBTA 10.3.1: attributes are modified in SQD once the
// QP is drained; rxe_qp_chk_attr in drivers/infiniband/sw/rxe/rxe_qp.c
// returns EINVAL for any transition but to ERR while draining).
func waitDrained(t *T, q QP) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		a, err := q.Query(verbs.AttrState)
		ExpectOK(t, err, "query_qp in SQD")
		if !a.SQDraining {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("QP in SQD with nothing outstanding still draining after 2s")
		}
		time.Sleep(time.Millisecond)
	}
}

// State returns the QP's state as query_qp reports it.
func State(t *T, q QP) verbs.QPState {
	t.Helper()
	a, err := q.Query(verbs.AttrState)
	ExpectOK(t, err, "query_qp")
	return a.QPState
}

// PollN polls until n completions arrived or two seconds passed (a
// hardware target completes asynchronously), and returns what arrived. It
// then polls once more, so a case can tell "exactly n" from "at least n".
func PollN(t *T, c CQ, n int) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	wcs := make([]verbs.WC, 16)
	deadline := time.Now().Add(2 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		k := c.Poll(wcs)
		out = append(out, wcs[:k]...)
		if k == 0 {
			runtime.Gosched()
		}
	}
	k := c.Poll(wcs)
	return append(out, wcs[:k]...)
}

// Ctx returns a context that ends after d, cancelled when the case ends.
func Ctx(t *T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// SkipIfDestroysFirst ends a case that goes on to use an object whose
// destroy was interrupted while it waited for event acknowledgements,
// on a device that destroys before it waits (DestroyOrderer): there the
// object is gone, as libibverbs defines it.
func SkipIfDestroysFirst(t *T, d Device, object string) {
	t.Helper()
	if o, ok := d.(DestroyOrderer); ok && o.DestroysBeforeWaiting() {
		t.Skipf("target %s destroys the %s before it waits for the acknowledgements (libibverbs' order, a wait C cannot interrupt): "+
			"what survives an interrupted destroy is a property of softhca's Go API", t.Target().Name(), object)
	}
}
