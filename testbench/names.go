package testbench

// This file is the testbench's only contact with names the transport may
// change: the drop counter names and the type of Device.TransportStats. A
// rename in the engine is a one-line fix here.

import (
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/wire"
)

// Drop counter names, as Device.TransportStats().DropNames() reports them.
const (
	DropUnknownQP         = "unknown destination QP"
	DropQPState           = "QP state does not accept the packet"
	DropAddress           = "source address is not the QP's peer"
	DropPKey              = "P_Key mismatch"
	DropQKey              = "Q_Key mismatch"
	DropTransportMismatch = "opcode of another transport"
	DropUDNoReceive       = "UD: no receive WQE"
	DropUDTooLong         = "UD: message longer than the receive buffer"
	DropUCOutOfSequence   = "UC: out of sequence"
	DropUCNoReceive       = "UC: no receive WQE"
	DropStaleResponse     = "stale or unexpected response"
	DropDuplicate         = "duplicate request"
	DropOutOfSequence     = "out-of-sequence request (NAKed)"
	DropRNR               = "no receive WQE (RNR NAKed)"
	DropDuplicateAck      = "duplicate acknowledgement"
)

// Parse drop counters are named "parse: " and the wire.DropReason.
var (
	DropBadICRC           = parseDrop(wire.DropBadICRC)
	DropBadPad            = parseDrop(wire.DropBadPad)
	DropTruncated         = parseDrop(wire.DropTruncated)
	DropBadTVer           = parseDrop(wire.DropBadTVer)
	DropPayloadNotAllowed = parseDrop(wire.DropPayloadNotAllowed)
	DropReservedOpCode    = parseDrop(wire.DropReservedOpCode)
)

func parseDrop(r wire.DropReason) string { return "parse: " + r.String() }

// dropCounters returns the device's non-zero drop counters by name.
func dropCounters(d *hca.Device) map[string]uint64 { return d.TransportStats().DropNames() }
