package hca

import "github.com/softhca/softhca/transport"

// Direction says whether a traced packet was sent or received
// (Config.Trace).
type Direction = transport.Direction

// Directions of a traced packet.
const (
	Sent     = transport.Sent
	Received = transport.Received
)

// Stats are the transport's counters (Device.TransportStats): packets,
// retries, NAKs, and every dropped packet by named reason.
type Stats = transport.Stats

// QPCounters are a QP's own counters (QPInfo.Counters): its packets and
// the transport events that concern it.
type QPCounters = transport.QPCounters

// Drop reasons an application may look up in Stats.Drops (the others are
// named by Stats.DropNames and Stats.DropCounts).
const (
	DropDuplicate     = transport.DropDuplicate     // a duplicate request (answered again, not executed)
	DropOutOfSequence = transport.DropOutOfSequence // RC: a request beyond the expected PSN (NAKed once)
)
