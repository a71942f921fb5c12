// Package wire is softhca's RoCEv2 codec: byte-slice views of the
// InfiniBand transport headers carried in UDP (IBTA Vol. 1 chapter 9 and
// the RoCEv2 annex A17), the opcode table, 24-bit PSN arithmetic, the
// invariant CRC (ICRC) and the parser that checks received packets the way
// Linux's rdma_rxe does.
//
// # Views and fields
//
// Each header is a named []byte (BTH, RETH, AETH, AtomicETH, AtomicAckETH,
// ImmDt, IETH, DETH, FETH; TMH and RVH for the tag-matching payload
// headers). A view is just the bytes: accessors read and setters write in
// place, with no validation and no allocation. Building goes through a
// plain struct of field values (BTHFields, RETHFields, ...) and the view's
// Encode method, one call per header. Headers groups the fields of every
// extension header; the opcode decides which of them are written.
//
// # Parsing
//
// Parse, ParseDatagram and ParseTransport fill a caller-owned Packet with
// views into the input, never copy, never allocate, and return a DropReason:
// DropNone for a good packet, otherwise the single named reason the packet
// must be dropped for. Parse starts at an IPv4 or IPv6 header (as on a TAP
// device or in a capture). ParseDatagram starts at the UDP payload, as a
// UDP socket delivers it, and recovers the IPv4 Identification that the
// ICRC covers but the socket hides (see SolveIPv4ID). ParseTransport
// checks only the InfiniBand part and leaves the ICRC alone.
// ParseDatagramFlow is ParseDatagram with an ICRCFlow: a caller that
// checks or seals many packets of one IPv4 flow keeps one, and the ICRC
// of the flow's constant pseudo-header fields is computed once.
//
// # Ownership and threading
//
// Views alias the buffer they were made from; a Packet is valid only as long
// as that buffer is not reused. Nothing in this package keeps state between
// calls except read-only tables built at init, the IPv4 Identification
// solver cache, which is safe for concurrent use, and the ICRCFlows its
// callers own (each used by one goroutine at a time). The package imports
// only the standard library.
package wire
