package interop

import (
	"fmt"

	"github.com/softhca/softhca/wire"
)

// PingpongPayload checks the SEND data of rdma-core's pingpong examples
// (and of tools that claim their compatibility): every byte is fill, the
// examples' buffer fill (0x7b for rc, uc and ud; srq clears its buffer,
// 0), except that with -c the client writes 0 into the
// first byte of each page of its message (i / page_size % sizeof(char),
// which is 0 for every page), and the server echoes what it received. So
// a byte may be 0 only at a message offset that is a multiple of pageSize.
// Multi-packet messages are followed per destination QP: a packet's offset
// is its PSN's distance from the message's first packet times that first
// packet's payload length (the path MTU). Packets of a message whose first
// packet was not seen are not checked.
func PingpongPayload(fill byte, pageSize int) PayloadCheck {
	type msgStart struct {
		psn  wire.PSN
		pmtu int
	}
	starts := map[uint64]msgStart{}
	return func(d Direction, p *wire.Packet) error {
		info := p.Info()
		if info.Kind != wire.KindSend {
			return nil
		}
		key := uint64(d)<<32 | uint64(p.BTH.DestQP())
		off := 0
		if info.Pos.First() {
			starts[key] = msgStart{p.BTH.PSN(), len(p.Payload)}
		} else {
			s, ok := starts[key]
			if !ok {
				// The message's first packet was lost before the
				// capture saw it (a loss case): its offset is unknown
				// until the retransmission.
				return nil
			}
			off = int(p.BTH.PSN().Diff(s.psn)) * s.pmtu
		}
		for i, b := range p.Payload {
			o := off + i
			if b == fill || (b == 0 && o%pageSize == 0) {
				continue
			}
			return fmt.Errorf("payload byte %d (message offset %d) is 0x%02x, want 0x%02x (or 0 at a page start)", i, o, b, fill)
		}
		return nil
	}
}
