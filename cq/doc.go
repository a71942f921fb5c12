// Package cq implements completion queues (ibv_cq) and completion channels
// (ibv_comp_channel): the ring of work completions that ibv_poll_cq drains,
// the one-shot arm of ibv_req_notify_cq, and the event queue behind
// ibv_get_cq_event and ibv_ack_cq_events.
//
// # Objects and ownership
//
// A Channel owns a Linux eventfd and a FIFO of pending completion events.
// Each event names one CQ. The eventfd counts the pending events, so FD()
// polls readable exactly when GetEvent would not block; applications may
// poll, select or epoll it but must not read it. A Channel can be closed
// only when no CQ uses it (ibv_destroy_comp_channel returns EBUSY).
//
// A CQ owns a fixed-capacity ring of verbs.WC values, allocated by New and
// replaced only by Resize. The verbs side (Poll, ReqNotify, AckEvents,
// Resize, Destroy) is called by the application; the engine side (Push,
// AddUser, RemoveUser, SetOverrunHandler) by the QP/SRQ/transport code and
// the hca. A full ring is never grown: the completion is lost, the CQ enters
// the error state and the overrun handler runs once, so that the hca can
// raise IBV_EVENT_CQ_ERR.
//
// # Events and their accounting
//
// ReqNotify arms the CQ for one event. The next Push that matches the arm
// consumes it and appends one entry for the CQ to the channel. GetEvent
// takes the oldest entry and counts it as reported for its CQ; AckEvents
// counts acknowledgements. Destroy waits until every reported event has
// been acknowledged, as ibv_destroy_cq waits for comp_events_completed to
// reach comp_events_reported, and removes the CQ's entries that are still
// queued in the channel, as the kernel's ib_uverbs_release_ucq does.
//
// # Threading and lock order
//
// Every method is safe for concurrent use. Critical sections are short and
// never block: the only waits are GetEvent (for an event), Destroy (for
// acknowledgements) and Wait (for a completion, the blocking poll), and
// they wait on Go channels with no lock held, so a context cancels them.
// Wait has its own wake-up, which Push signals only while a goroutine
// waits: it does not touch the arm or the channel, so a blocking poll and
// the application's ReqNotify/GetEvent do not disturb each other.
//
// There are two mutexes, CQ.mu and Channel.mu, always taken in that order:
//
//	CQ.mu  ->  Channel.mu
//
// Push holds CQ.mu while it appends an event to the channel; Destroy holds
// both while it removes the CQ's queued events. The channel never calls a
// CQ method and never takes a CQ's mu: the few CQ fields that the channel
// updates (the reported and acknowledged event counts and the Destroy
// waiter) are guarded by Channel.mu instead, and say so. The overrun handler
// is called with no lock held, so it may call any method of the CQ.
//
// Push and Poll do not allocate. GetEvent and AckEvents do not allocate once
// the channel's event FIFO has grown to its working size.
package cq
