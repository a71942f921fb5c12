package pingpong

import (
	"sync"
	"time"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

// A workaround for a gap in softhca's transport. The responder sends the
// ACK for a message after it delivers the receive completion (on the next
// transmit batch), and destroying the QP or closing the device before
// that batch has left loses the ACK. The peer's last send then never
// completes: IBV_WC_RETRY_EXC_ERR with softhca, a hang with rxe, which
// retries forever. On rxe, destroy_qp waits for the responder task, which
// sends the ACK, to finish. So before it destroys anything, an RC side
// waits until the ACK of the last message it received has left through
// the link: ackWatch sees every packet the device sends.

// ackWatch wraps the device's link and records, per destination QP, the
// PSN of the latest ACK that the link sent.
type ackWatch struct {
	link.Link
	mu    sync.Mutex
	acked map[uint32]wire.PSN // destination QPN -> PSN of the latest ACK
}

func newAckWatch(l link.Link) *ackWatch {
	return &ackWatch{Link: l, acked: map[uint32]wire.PSN{}}
}

// Send sends the packets and notes the ACKs among them.
func (a *ackWatch) Send(pkts []link.Packet) error {
	err := a.Link.Send(pkts)
	if err != nil {
		return err
	}
	for i := range pkts {
		b := pkts[i].Buf
		if len(b) < wire.BTHSize+wire.AETHSize {
			continue
		}
		bth := wire.BTH(b)
		if bth.OpCode() != wire.RCAcknowledge || b[wire.BTHSize]>>5 != 0 { // AETH syndrome 000xxxxx: ACK
			continue
		}
		a.mu.Lock()
		if old, ok := a.acked[bth.DestQP()]; !ok || old.LessThan(bth.PSN()) {
			a.acked[bth.DestQP()] = bth.PSN()
		}
		a.mu.Unlock()
	}
	return nil
}

// hasAcked reports whether an ACK for psn (or later) went to qpn.
func (a *ackWatch) hasAcked(qpn uint32, psn wire.PSN) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	got, ok := a.acked[qpn]
	return ok && psn.LessThanEq(got)
}

// lingerForACKs waits (at most a second) until the last message each RC
// QP received has been acknowledged on the wire. Every message is one
// SEND of Size bytes, max(1, ceil(Size/MTU)) packets, the first with the
// peer's first PSN, so the PSN of the last packet of the n-th message is
// known.
func (s *session) lingerForACKs() {
	if s.acks == nil {
		return
	}
	ppm := (s.cfg.Size + uint32(s.cfg.MTU.Bytes()) - 1) / uint32(s.cfg.MTU.Bytes())
	ppm = max(ppm, 1)
	deadline := time.Now().Add(time.Second)
	for i, n := range s.received {
		if n == 0 {
			continue
		}
		last := wire.MakePSN(s.remote[i].PSN).Add(uint32(n)*ppm - 1)
		for !s.acks.hasAcked(s.remote[i].QPN, last) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
	}
}
