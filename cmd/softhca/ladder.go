package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
	"github.com/softhca/softhca/wire/pcap"
)

// packetSummary formats an InfiniBand packet in decode's line format
// ("RC Send Only qp=0x11 psn=100 ackreq len=12"), with two spaces after
// the opcode name so that it stands out in a ladder. It is the shared
// helper between decode and demo: both print through decoder.packet.
func packetSummary(p *wire.Packet) string {
	var d decoder
	d.packet(p)
	s := d.line.String()
	name := p.BTH.OpCode().String()
	if rest, ok := strings.CutPrefix(s, name+" "); ok {
		return name + "  " + rest
	}
	return s
}

// ladderEvent is one packet a device sent.
type ladderEvent struct {
	at       time.Time
	from     byte // 'A' or 'B'
	net      wire.Net
	buf      []byte // BTH through ICRC, a copy
	lost     bool   // dropped by -loss before it reached the network
	resent   bool   // byte for byte a packet this side already sent in the step
	request  bool   // a request (not an acknowledgement or a read response)
	icrcGood bool
}

// ladder records the packets of both devices through their Trace hooks.
// Only sent packets are recorded: every packet is sent by exactly one
// device, so each appears once, in the order the senders handed them to
// the network (a reply is always sent after its request, so causality is
// kept). Received packets are ignored; they would repeat the sent ones.
type ladder struct {
	mu     sync.Mutex
	events []ladderEvent   // of the current step
	last   time.Time       // when the last packet was recorded
	seen   map[string]byte // packets of the step, by content: who sent them
	total  int             // packets recorded over the whole run
	lost   int             // packets -loss dropped

	pcap     *pcap.Writer // nil without -pcap
	pcapErr  error
	pcapPkts int

	// Loss injection (-loss): RC packets are dropped with probability
	// loss. The decision is taken in the trace hook, which the engine
	// calls for each packet just before handing the same link.Packet to
	// Link.Send; lossyLink.Send drops the packets marked here.
	loss float64
	rng  *rand.Rand
	drop map[*byte]bool
}

func newLadder(pw *pcap.Writer, loss float64) *ladder {
	return &ladder{
		pcap: pw,
		loss: loss,
		rng:  rand.New(rand.NewPCG(1, 2)),
		drop: map[*byte]bool{},
		seen: map[string]byte{},
	}
}

// trace returns the Trace hook of the device named from.
func (l *ladder) trace(from byte) func(hca.Direction, *link.Packet) {
	return func(dir hca.Direction, p *link.Packet) {
		if dir != hca.Sent || len(p.Buf) < wire.BTHSize {
			return
		}
		now := time.Now()
		ev := ladderEvent{at: now, from: from, net: p.Net, buf: append([]byte(nil), p.Buf...)}
		ev.icrcGood = wire.CheckICRC(&ev.net, ev.buf)
		ev.request = wire.BTH(ev.buf).OpCode().Info().Request
		l.mu.Lock()
		defer l.mu.Unlock()
		key := string(ev.buf)
		if l.seen[key] == from {
			ev.resent = true
		}
		l.seen[key] = from
		if l.loss > 0 && wire.BTH(ev.buf).OpCode().Transport() == wire.TransportRC && l.rng.Float64() < l.loss {
			ev.lost = true
			l.lost++
			l.drop[&p.Buf[0]] = true
		}
		if l.pcap != nil && !ev.lost && l.pcapErr == nil {
			if err := l.pcap.WritePacket(now, &ev.net, ev.buf); err != nil {
				l.pcapErr = err
			} else {
				l.pcapPkts++
			}
		}
		l.events = append(l.events, ev)
		l.last = now
		l.total++
	}
}

// dropped reports whether the trace hook chose to lose p, and forgets it.
func (l *ladder) dropped(p *link.Packet) bool {
	if len(p.Buf) == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.drop[&p.Buf[0]] {
		delete(l.drop, &p.Buf[0])
		return true
	}
	return false
}

// settle waits until no packet has been sent for quiet (at most max), so
// that a step's ladder is complete before it is printed.
func (l *ladder) settle(quiet, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		last := l.last
		l.mu.Unlock()
		if time.Since(last) >= quiet {
			return
		}
		time.Sleep(quiet / 4)
	}
}

// take returns the packets recorded since the last call and starts a new
// step.
func (l *ladder) take() []ladderEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	evs := l.events
	l.events = nil
	clear(l.seen)
	return evs
}

// printLadder writes the ladder of evs, one line per packet, with times from
// the first packet:
//
//	0.000 ms  A -> B  RC Send Only  qp=0x11 psn=100 ackreq len=12
//	0.091 ms  A <- B  RC Acknowledge  qp=0x11 psn=100 aeth{ACK syn=0x1f msn=1} len=0
func printLadder(w io.Writer, evs []ladderEvent) {
	if len(evs) == 0 {
		fmt.Fprintln(w, "    (no packets)")
		return
	}
	var p wire.Packet
	t0 := evs[0].at
	for i := range evs {
		ev := &evs[i]
		arrow := "A -> B"
		if ev.from == 'B' {
			arrow = "A <- B"
		}
		fmt.Fprintf(w, "  %8.3f ms  %s  %s\n", float64(ev.at.Sub(t0).Microseconds())/1000, arrow, ev.describe(&p))
	}
}

// describe is the ladder's text for ev: the packet's summary and what
// happened to it. p is scratch space.
func (ev *ladderEvent) describe(p *wire.Packet) string {
	var desc string
	if r := wire.ParseTransport(ev.buf, p); r == wire.DropNone {
		desc = packetSummary(p)
	} else {
		desc = fmt.Sprintf("malformed packet (%s)", r)
	}
	if !ev.icrcGood {
		desc += " icrc BAD"
	}
	if ev.resent {
		if ev.request {
			desc += "  (retransmission)"
		} else {
			desc += "  (answer repeated)"
		}
	}
	if ev.lost {
		desc += "  LOST (-loss)"
	}
	return desc
}
