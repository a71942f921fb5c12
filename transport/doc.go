// Package transport is softhca's InfiniBand transport (IBTA chapter 9):
// the protocol that turns work requests into RoCEv2 packets and packets
// into placed bytes, acknowledgements and completions, and the scheduler
// that runs it for every QP of a device over one link.
//
// # The protocol
//
// A QP's transport state is a QP (qp.go), owned by the qp package and
// called with that QP's lock held. It has three parts, each a state
// machine with a named state type and one transition point (setState):
//
//   - the Requester (requester.go) turns send WQEs into packets: PSNs,
//     segmentation into path-MTU packets, the 128-PSN window, fences,
//     max_rd_atomic, go-back-N, the transport and RNR timers;
//   - the Completer (completer.go) turns ACKs, NAKs, READ responses and
//     ATOMIC acknowledges into completions, in order, and tells the
//     requester when to go back;
//   - the Responder (responder.go) checks each request (sequence, opcode
//     order, length, access), chooses where a message's bytes go (a
//     receive WQE from the QP's RecvQueue, or the region a WRITE's RETH
//     names), places them (place.go), answers duplicates, coalesces ACKs,
//     and answers READs a budget at a time.
//
// The protocol knows nothing of goroutines, timers or sockets. Every call
// (QP.Receive, QP.Run, QP.Timer) takes an Env: the time, an Emitter that
// takes the packets it builds, the device's Memory, the Counters and a
// byte budget; and it returns Effects: what the QP object must do (a work
// request failed, so the QP changes state; an asynchronous event) and
// what the scheduler must do (run the QP again, keep a packet it could
// not take yet). QP.Deadline says when QP.Timer wants to be called. Tests
// drive the protocol alone with fakes of Emitter, Memory, CQ and
// RecvQueue.
//
// Memory is reached only through Memory.Lookup, and a lookup that fails
// (a region deregistered meanwhile) is answered as IBTA says (a NAK, a
// failed work request); no byte is copied from or to memory whose lookup
// failed. On a link that sends payloads from where they lie
// (link.Gatherer, Env.Gather), an RC requester packet whose payload is at
// least 1 KiB within one SGE, and a READ response of at least 1 KiB, is
// not copied in user space at all (UC and UD sends complete before their
// batch leaves, so they are copied): its
// headers, pad and ICRC are built in the transmit batch and the link hands
// the kernel the region's bytes as an iovec of their own. The batch is
// sent within the turn, so Quiesce covers those bytes too.
//
// # The scheduler
//
// The Engine (engine.go, worker.go) reads the link, parses each packet
// (ICRC included), looks its destination QP up in a lock-free table and
// hands it to the worker that owns the QP. Workers are a fixed pool; a QP
// is owned by worker QPN % N, and a worker's events are handled by one
// goroutine at a time, in the order they arrived, however many QPs there
// are: no goroutine per QP. The QP's side is an Endpoint (the qp package's
// QP), which the scheduler calls; the protocol never calls the scheduler.
//
// Which goroutine runs a worker's turn (worker.running, under worker.mu,
// is the one place that says who owns the worker):
//   - With busy polling (Config.BusyPoll), the application's goroutine
//     drives the transport: a poller (Engine.Progress) reads the link and
//     runs the turns of what it read, and a post to a send queue that held
//     nothing else runs the turn in the caller's goroutine (Handle.Ring),
//     as rxe runs its requester in the caller of post_send. The receive
//     goroutine, woken by an arrival while a poller holds the link, leaves
//     it to that poller (Engine.ready, pollMissed) rather than read it
//     onto the workers' goroutines.
//   - Everything else wakes the worker's goroutine: the receive
//     goroutine's packets, timers and state changes (whose callers may
//     hold locks).
//   - One hand-over without busy polling: a turn of the worker's
//     goroutine that completed a receive and owes ACKs yields once
//     (runtime.Gosched) before it sends them, so that the application
//     the completion woke can answer first and the answer and the ACKs
//     leave in one send. If that application's doorbell (Handle.Ring)
//     finds the turn yielding (worker.yielding), it takes the turn over
//     and runs it to the end in its own goroutine; the yielding
//     goroutine, back from its yield, finds the turn taken and leaves
//     it. A ping-pong leg then needs no switch back to the worker's
//     goroutine before the answer leaves.
//
// A turn not run by the worker's goroutine builds at most 64 KiB and
// hands the rest to it, so neither a poster nor a poller is held by a
// long transfer. Within a turn, each QP's Run builds at most 64 KiB before
// the other QPs of the worker get theirs (round robin), so one long READ
// or WRITE does not stall the others.
//
// # Bounds and fences
//
// On a link that coalesces datagrams (link.BulkReceiver: UDP with GRO),
// each datagram is read into a 64 KiB chunk and its packets are handed to
// the workers as views of the chunk, without a copy; the chunk returns to
// the engine's pool when the last of its packets is released. Small
// packets, and every packet when no chunk is free, are copied out as on
// other links.
//
// Everything is bounded: each worker's queue of received packets
// (Config.QueueLen), the receive buffers (Config.Buffers) and chunks, the requests a
// QP keeps waiting behind a READ it answers (128). A packet that does not
// fit is dropped and counted by name (DropReason); so is every packet the
// transport does not execute.
//
// A turn runs its protocol work holding its worker's guard for reading.
// Engine.Quiesce takes every guard for writing, so it returns only once
// every turn that might still hold a lookup's bytes has ended: a memory
// region's deregistration calls it. Handle.Detach does the same for one
// QP's worker, after which no call reaches the QP's Endpoint.
//
// # Lock order
//
// worker.guard (read), then the QP's lock (taken by the Endpoint), then
// a CQ's or an SRQ's lock. worker.mu is never held while an Endpoint is
// called. Callers of Quiesce, Detach, Flush and Ring hold none of these.
package transport
