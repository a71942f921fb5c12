package hca

import "github.com/softhca/softhca/qp"

// Direction says whether a traced packet was sent or received
// (Config.Trace).
type Direction = qp.Direction

// Directions of a traced packet.
const (
	Sent     = qp.Sent
	Received = qp.Received
)

// Stats are the transport's counters (Device.TransportStats): packets,
// retries, NAKs, and every dropped packet by named reason.
type Stats = qp.Stats
