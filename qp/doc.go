// Package qp implements queue pairs: creation with the rules of
// ibv_create_qp(3), the IBTA state machine (transition.go, a table with one
// mutation point, setStateLocked), ibv_modify_qp and ibv_query_qp, and the
// send and receive queues with every posting rule of ibv_post_send(3) and
// ibv_post_recv(3), including flushing on entry to the error state.
//
// # Ownership and threading
//
// A QP's verbs (Modify, Query, PostSend, PostRecv, Destroy) may be called
// from any goroutine; each takes the QP's mutex for a short critical
// section and never blocks while holding it. Posting copies the work
// request (scatter list and inline data included) into storage allocated
// at creation, so the caller may reuse it when the call returns.
//
// Lock order: QP.mu, then the CQ's and SRQ's locks (flushing pushes
// completions while holding QP.mu). Event handlers given in Config are
// called with QP.mu held and must not call back into the QP.
//
// # The transport
//
// The protocol that moves the bytes is package transport; the QP holds
// its half (a transport.QP, guarded by QP.mu like everything else) and is
// the transport.Endpoint the scheduler calls from its worker goroutines
// (endpoint.go): each call takes QP.mu, runs the protocol, and applies
// what it asks of the QP object in one place (applyLocked: a failed work
// request moves the QP to ERR or SQE through setStateLocked). A QP
// created without a transport (Config.Engine nil) keeps posted work
// queued.
//
// Destroy ends a QP in two steps (life: alive, destroying, destroyed):
// while it is destroying, verbs fail and the transport only sends the
// acknowledgement the QP owes; once destroyed, the scheduler is detached
// and nothing of the QP runs any more.
package qp
