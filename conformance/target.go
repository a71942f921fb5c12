// Package conformance is an executable statement of the verbs semantics:
// each Case encodes one rule of the libibverbs man pages or the IBTA
// specification, cites the page and sentence it encodes, and checks the
// observable behaviour (return value, errno, work completion fields,
// events, state after the call) against a Target.
//
// A Target is the verbs surface of a device. Backends live in their own
// packages: conformance/softhca (softhca in process) and conformance/rdma
// (any device libibverbs drives, through a C agent process); the
// interfaces use only plain values and the verbs vocabulary so that a
// backend in another process can implement them. This package imports no device
// implementation: a case reaches the device only through these
// interfaces and the optional ones a target may add (PairTarget,
// AddrTarget, and TMPD and TMSRQ for tag matching).
//
// Cases are labelled Spec (the man page or IBTA says so) or
// ImplementationDefined (the man pages allow more than one behaviour; the
// case checks softhca's documented choice and a backend may differ).
//
// Run executes cases and reports one Result each; `softhca conformance`
// prints them as a table with a summary line "N passed, N failed, N
// skipped", and `go test ./conformance/...` runs the same cases as
// subtests.
package conformance

import (
	"context"
	"net/netip"

	"github.com/softhca/softhca/verbs"
)

// Target is a device implementation under test.
type Target interface {
	// Name identifies the backend in reports ("softhca", "rxe0").
	Name() string
	// Open opens a fresh device. Cases close it when they finish.
	Open() (Device, error)
}

// AddrTarget is a Target that knows the IP addresses of port 1 of the
// devices it opens, so that the query_gid cases can check the GID table
// against them.
type AddrTarget interface {
	Target
	// PortAddrs returns the addresses in GID order (GID[1], GID[2], ...;
	// GID[0] is the link-local GID).
	PortAddrs() []netip.Addr
}

// TransportDiagnoser is a Device that can describe its transport's
// counters (packets, retries, drops by reason); the data-path cases add
// the description to their failure messages. It is optional.
type TransportDiagnoser interface {
	TransportDiag() string
}

// DestroyOrderer is a Device that says in which order its Destroy
// methods destroy an object and wait for the acknowledgement of its
// events. libibverbs destroys the object first and then waits, in C,
// without a way to interrupt the wait (ibv_cmd_destroy_cq and
// ibv_cmd_destroy_qp); softhca's Go API waits first, so that a destroy
// whose context ends leaves the object intact. A backend without it
// waits first. The cases that check what survives an interrupted wait
// skip on a device that destroys first, naming why.
type DestroyOrderer interface {
	DestroysBeforeWaiting() bool
}

// Device is an open device (ibv_context).
type Device interface {
	QueryDevice() verbs.DeviceAttr
	QueryPort(port uint8) (verbs.PortAttr, error)
	QueryGID(port uint8, index int) (verbs.GID, error)
	QueryPKey(port uint8, index int) (uint16, error)
	AllocPD() (PD, error)
	CreateCompChannel() (CompChannel, error)
	// CreateCQ creates a CQ; ch may be nil.
	CreateCQ(cqe int, ch CompChannel, ctx any, compVector int) (CQ, error)
	GetAsyncEvent(ctx context.Context) (AsyncEvent, error)
	AckAsyncEvent(e AsyncEvent)
	SetAsyncNonBlocking(nb bool)
	Close() error
}

// PD is a protection domain.
type PD interface {
	// RegMR registers buf. RegMR may copy: the registered memory is
	// MR.Bytes(), which starts out holding buf's contents (a backend
	// whose device runs in another process registers shared memory
	// there), so after RegMR a case reads and writes the region through
	// MR.Bytes(), never through buf.
	RegMR(buf []byte, access verbs.AccessFlags) (MR, error)
	CreateQP(init *QPInitAttr) (QP, error)
	CreateSRQ(attr verbs.SRQAttr, ctx any) (SRQ, error)
	CreateAH(attr verbs.AHAttr) (AH, error)
	Dealloc() error
}

// MR is a registered memory region.
type MR interface {
	Addr() uint64
	Len() int
	LKey() uint32
	RKey() uint32
	// Bytes returns the registered memory (see PD.RegMR): what the
	// device reads and writes at Addr().
	Bytes() []byte
	// SGE returns an element for n bytes at offset off.
	SGE(off, n int) verbs.SGE
	Dereg() error
}

// CompChannel is a completion channel.
type CompChannel interface {
	// GetEvent returns the CQ an event is for.
	GetEvent(ctx context.Context) (CQ, error)
	FD() int
	SetNonBlocking(nb bool)
	Close() error
}

// CQ is a completion queue.
type CQ interface {
	CQE() int
	Context() any
	Poll(wcs []verbs.WC) int
	ReqNotify(solicitedOnly bool) error
	AckEvents(n int)
	Resize(cqe int) error
	Destroy(ctx context.Context) error
}

// SRQ is a shared receive queue.
type SRQ interface {
	PostRecv(wr *verbs.RecvWR) (*verbs.RecvWR, error)
	Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error
	Query() (verbs.SRQAttr, error)
	Destroy(ctx context.Context) error
}

// TMPD is a PD that can create tag-matching SRQs (ibv_create_srq_ex(3)
// with srq_type IBV_SRQT_TM; docs/tag-matching.md). It is optional: the
// tag-matching cases skip against a PD without it, as they do against a
// device whose tm_caps.flags lacks IBV_TM_CAP_RC.
type TMPD interface {
	// CreateTMSRQ creates a tag-matching SRQ: attr holds max_wr and
	// max_sge of its ordinary receive queue, maxNumTags and maxOps are
	// its tm_cap (struct ibv_tm_cap), cq is srq_init_attr_ex.cq (nil for
	// none), where its list operations and every message it receives
	// complete, and ctx is the srq_context. The SRQ it returns may be
	// given to CreateQP as QPInitAttr.SRQ, and async events name it as
	// they name any SRQ.
	CreateTMSRQ(attr verbs.SRQAttr, maxNumTags, maxOps uint32, cq CQ, ctx any) (TMSRQ, error)
}

// TMSRQ is an SRQ that takes tag-matching list operations
// (ibv_post_srq_ops(3)). TMPD.CreateTMSRQ returns one. A backend may
// also return a TMSRQ from PD.CreateSRQ, since ibv_post_srq_ops takes
// any ibv_srq: the case that posts list operations to an ordinary SRQ
// needs that, and skips otherwise.
type TMSRQ interface {
	SRQ
	// PostOps posts a linked list of list operations (TAG_ADD,
	// TAG_DEL, TAG_SYNC) and returns the first one refused with its
	// error, or nil, nil. TAG_ADD writes the new entry's handle into
	// wr.TM.Handle.
	PostOps(wr *verbs.OpsWR) (*verbs.OpsWR, error)
}

// AH is an address handle.
type AH interface {
	verbs.AH
	Destroy() error
}

// QPInitAttr describes a QP to create.
type QPInitAttr struct {
	Context  any
	SendCQ   CQ
	RecvCQ   CQ
	SRQ      SRQ
	Cap      verbs.QPCap
	QPType   verbs.QPType
	SQSigAll bool
}

// QP is a queue pair.
type QP interface {
	Num() uint32
	// Query returns the attributes and the caps granted at creation.
	Query(mask verbs.QPAttrMask) (verbs.QPAttr, error)
	Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error
	PostSend(wr *verbs.SendWR) (*verbs.SendWR, error)
	PostRecv(wr *verbs.RecvWR) (*verbs.RecvWR, error)
	AttachMcast(gid verbs.GID, lid uint16) error
	DetachMcast(gid verbs.GID, lid uint16) error
	Destroy(ctx context.Context) error
}

// AsyncEvent is an asynchronous event. Exactly one of QP, CQ, SRQ is set
// for an affiliated event.
type AsyncEvent struct {
	Type verbs.EventType
	QP   QP
	CQ   CQ
	SRQ  SRQ
	Port uint8
}
