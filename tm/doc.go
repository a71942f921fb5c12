// Package tm is the matching engine of a tag-matching shared receive
// queue (TM-SRQ): the tag list that ibv_post_srq_ops(3) edits, the
// matching rule, the handles and the phase synchronisation between
// software and the device. docs/tag-matching.md is its rule book; each
// rule there has a name (T1, M2, P2, ...) that the code and the tests
// cite.
//
// A List knows nothing of packets, memory or completions: its owner, the
// TM-SRQ, holds its lock around every call, validates scatter lists
// against memory before Apply, delivers the bytes, generates the
// completions that OpResult asks for and calls Release when the
// completion that ends an entry is polled. Apply runs on the
// application's goroutine (ibv_post_srq_ops); Match and Unexpected run on
// the transport worker that owns the receiving QP; Release runs on the
// goroutine that polls the CQ.
//
// Matching costs one hash lookup per distinct mask in the list (or, when
// nearly every entry has a mask of its own, a scan in add order) and
// allocates nothing.
package tm
