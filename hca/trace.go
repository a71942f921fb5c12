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
