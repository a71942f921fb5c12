package transport

import (
	"sync/atomic"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// DropReason names why the transport dropped a received packet. Every
// dropped packet increments exactly one counter: the codec's reasons
// (wire.DropReason) for packets that do not parse, these for packets
// that parse but are not executed.
type DropReason uint8

// Drop reasons.
const (
	DropUnknownQP         DropReason = iota // no QP has the destination QP number
	DropQPState                             // the QP's state does not accept the packet (IBTA 10.3.1)
	DropAddress                             // RC/UC: not from the connected peer's address, or not to the QP's own
	DropPKey                                // the P_Key is not in the partition table
	DropQKey                                // UD: the Q_Key does not match the QP's
	DropTransportMismatch                   // the opcode belongs to another transport than the QP's
	DropUDNoReceive                         // UD: no receive WQE
	DropUDTooLong                           // UD: the message is longer than the receive buffer
	DropUCOutOfSequence                     // UC: a packet of a message that lost a packet, or out of order
	DropUCNoReceive                         // UC: no receive WQE
	DropStaleResponse                       // an acknowledgement or response for nothing outstanding
	DropDuplicate                           // a duplicate request (answered again, not executed)
	DropOutOfSequence                       // RC: a request beyond the expected PSN (NAKed once)
	DropRNR                                 // RC: no receive WQE (RNR NAKed)
	DropInvalidRequest                      // RC: an invalid request (opcode sequence, length, access flags): NAKed
	DropRemoteAccess                        // RC: an R_Key violation: NAKed with a remote access error
	DropUDTooLongForMTU                     // UD: the payload is longer than the port MTU
	DropUCInvalid                           // UC: an invalid request (opcode sequence, length, R_Key): the message is dropped
	DropQueueFull                           // the QP's worker had no room for another packet
	DropNoBuffer                            // every receive buffer was in use
	DropHeldFull                            // a request waiting behind a READ response found its QP's hold queue full
	DropDestroyed                           // the QP was destroyed while the packet waited
	DropDuplicateAck                        // a repeat of the last acknowledgement
	numDropReasons
)

// NumDropReasons is the number of transport drop reasons.
const NumDropReasons = int(numDropReasons)

var dropNames = [...]string{
	DropUnknownQP:         "unknown destination QP",
	DropQPState:           "QP state does not accept the packet",
	DropAddress:           "source address is not the QP's peer",
	DropPKey:              "P_Key mismatch",
	DropQKey:              "Q_Key mismatch",
	DropTransportMismatch: "opcode of another transport",
	DropUDNoReceive:       "UD: no receive WQE",
	DropUDTooLong:         "UD: message longer than the receive buffer",
	DropUCOutOfSequence:   "UC: out of sequence",
	DropUCNoReceive:       "UC: no receive WQE",
	DropStaleResponse:     "stale or unexpected response",
	DropDuplicate:         "duplicate request",
	DropOutOfSequence:     "out-of-sequence request (NAKed)",
	DropRNR:               "no receive WQE (RNR NAKed)",
	DropInvalidRequest:    "invalid request (NAKed)",
	DropRemoteAccess:      "remote access error (NAKed)",
	DropUDTooLongForMTU:   "UD: payload longer than the port MTU",
	DropUCInvalid:         "UC: invalid request (message dropped)",
	DropQueueFull:         "receive queue of the QP's worker full",
	DropNoBuffer:          "receive buffers exhausted",
	DropHeldFull:          "requests waiting behind a READ response: queue full",
	DropDestroyed:         "QP destroyed",
	DropDuplicateAck:      "duplicate acknowledgement",
}

// String names the reason.
func (d DropReason) String() string {
	if int(d) < len(dropNames) {
		return dropNames[d]
	}
	return "transport drop reason ?"
}

// Counters are the transport's counters, updated atomically from any
// goroutine. The zero value is ready.
type Counters struct {
	Rx, Tx        atomic.Uint64
	Parse         [wire.NumDropReasons]atomic.Uint64
	Drops         [NumDropReasons]atomic.Uint64
	Retransmits   atomic.Uint64 // go-back-N restarts (sequence NAK, timeout, RNR, implied NAK)
	RetryTimeouts atomic.Uint64 // transport timer expiries with PSNs outstanding
	RNRNAKsSent   atomic.Uint64
	RNRNAKsRecv   atomic.Uint64
	SeqNAKsSent   atomic.Uint64
	SeqNAKsRecv   atomic.Uint64
	AcksSent      atomic.Uint64 // ACKs and NAKs sent
	DupAnswered   atomic.Uint64 // duplicate requests answered (ACK, READ or ATOMIC replayed)

	// Congestion control (cc.go): every decision is counted.
	RetxPackets     atomic.Uint64 // packets sent again: requests after a go-back, READ responses asked for again
	WindowIncreases atomic.Uint64 // ACKs that grew an RC window
	WindowCuts      atomic.Uint64 // RC window halvings (sequence NAK, duplicate ACKs, timeout)
	RateCuts        atomic.Uint64 // DCQCN rate cuts (CNP, lost READ responses)
	RateIncreases   atomic.Uint64 // DCQCN rate increase periods applied
	RateUnpaced     atomic.Uint64 // QPs whose rate recovered fully: pacing ended
	PacerWaits      atomic.Uint64 // times a QP's rate stopped it until later
	DeviceWaits     atomic.Uint64 // times the device window stopped a QP
	DeviceRateWaits atomic.Uint64 // times the device rate stopped a QP until later
	CEReceived      atomic.Uint64 // packets received marked CE (ECN)
	CNPsSent        atomic.Uint64 // CNPs sent, for CE marks and for UC losses
	LossCNPs        atomic.Uint64 // of those, CNPs for packets a UC QP saw lost
	CNPsReceived    atomic.Uint64
}

// Drop counts a dropped packet.
func (c *Counters) Drop(d DropReason) { c.Drops[d].Add(1) }

// Stats is a snapshot of the counters.
type Stats struct {
	RxPackets, TxPackets uint64
	// ParseDrops counts packets the codec rejected, by wire.DropReason.
	ParseDrops [wire.NumDropReasons]uint64
	// Drops counts packets the transport dropped, by DropReason.
	Drops [NumDropReasons]uint64
	// Transport events.
	Retransmits, RetryTimeouts, RNRNAKsSent, RNRNAKsReceived   uint64
	SeqNAKsSent, SeqNAKsReceived, AcksSent, DuplicatesAnswered uint64
	// Congestion control.
	RetransmittedPackets, WindowIncreases, WindowCuts uint64
	RateCuts, RateIncreases, RateUnpaced              uint64
	PacerWaits, DeviceWaits, DeviceRateWaits          uint64
	CEReceived, CNPsSent, LossCNPs, CNPsReceived      uint64
	// Link is the link's own counters (Engine.Stats fills it; a bare
	// Counters snapshot leaves it zero).
	Link link.Stats
}

// Snapshot returns the counters' current values.
func (c *Counters) Snapshot() Stats {
	var s Stats
	s.RxPackets, s.TxPackets = c.Rx.Load(), c.Tx.Load()
	for i := range s.ParseDrops {
		s.ParseDrops[i] = c.Parse[i].Load()
	}
	for i := range s.Drops {
		s.Drops[i] = c.Drops[i].Load()
	}
	s.Retransmits, s.RetryTimeouts = c.Retransmits.Load(), c.RetryTimeouts.Load()
	s.RNRNAKsSent, s.RNRNAKsReceived = c.RNRNAKsSent.Load(), c.RNRNAKsRecv.Load()
	s.SeqNAKsSent, s.SeqNAKsReceived = c.SeqNAKsSent.Load(), c.SeqNAKsRecv.Load()
	s.AcksSent, s.DuplicatesAnswered = c.AcksSent.Load(), c.DupAnswered.Load()
	s.RetransmittedPackets, s.WindowIncreases, s.WindowCuts = c.RetxPackets.Load(), c.WindowIncreases.Load(), c.WindowCuts.Load()
	s.RateCuts, s.RateIncreases, s.RateUnpaced = c.RateCuts.Load(), c.RateIncreases.Load(), c.RateUnpaced.Load()
	s.PacerWaits, s.DeviceWaits, s.DeviceRateWaits = c.PacerWaits.Load(), c.DeviceWaits.Load(), c.DeviceRateWaits.Load()
	s.CEReceived, s.CNPsSent, s.LossCNPs, s.CNPsReceived = c.CEReceived.Load(), c.CNPsSent.Load(), c.LossCNPs.Load(), c.CNPsReceived.Load()
	return s
}

// namedCount is a counter and its name.
type namedCount struct {
	name string
	n    uint64
}

// linkDrops are the link's drop counters, by name: the three every link
// has, then the link's own (link.Stats.Drops).
func (s Stats) linkDrops() []namedCount {
	d := []namedCount{
		{"link: send failed", s.Link.TxDropped},
		{"link: datagram larger than the receive buffer", s.Link.RxTruncated},
		{"link: socket receive buffer full", s.Link.RxSocketDropped},
	}
	for k, v := range s.Link.Drops {
		d = append(d, namedCount{"link: " + k, v})
	}
	return d
}

// DropNames returns the non-zero drop counters by name (the codec's
// prefixed with "parse: ", the link's with "link: ").
func (s Stats) DropNames() map[string]uint64 {
	m := map[string]uint64{}
	for i, v := range s.ParseDrops {
		if v != 0 && i != int(wire.DropNone) {
			m["parse: "+wire.DropReason(i).String()] = v
		}
	}
	for i, v := range s.Drops {
		if v != 0 {
			m[DropReason(i).String()] = v
		}
	}
	for _, d := range s.linkDrops() {
		if d.n != 0 {
			m[d.name] = d.n
		}
	}
	return m
}

// DropCounts returns every drop counter by name, those still zero
// included (the names DropNames uses), so that a metrics exporter has a
// stable set of series.
func (s Stats) DropCounts() map[string]uint64 {
	m := map[string]uint64{}
	for i, v := range s.ParseDrops {
		if i != int(wire.DropNone) {
			m["parse: "+wire.DropReason(i).String()] = v
		}
	}
	for i, v := range s.Drops {
		m[DropReason(i).String()] = v
	}
	for _, d := range s.linkDrops() {
		m[d.name] = d.n
	}
	return m
}

// Dropped returns how many packets were dropped in all, for every reason.
func (s Stats) Dropped() uint64 {
	var n uint64
	for i, v := range s.ParseDrops {
		if i != int(wire.DropNone) {
			n += v
		}
	}
	for _, v := range s.Drops {
		n += v
	}
	for _, d := range s.linkDrops() {
		n += d.n
	}
	return n
}
