package interop

import (
	"fmt"
	"hash/crc32"

	"github.com/softhca/softhca/wire"
)

// ResponderCheck checks, from the packets alone, that the responder of
// RDMA READs and atomics behaves like memory: perftest fills its buffers
// with random bytes and never looks at what arrives, but it cycles through
// its buffer, so the same remote addresses are used again and again.
//
//   - READ: every response packet's data is remembered by remote address
//     (the request's VA plus the packet's offset, its PSN distance from
//     the request times the first response's length); a later read of the
//     same address must return the same bytes (the buffer does not change
//     during ib_read_bw).
//   - FETCH_AND_ADD: the original value an ACK returns for an address must
//     be the previous original plus the previous add.
//   - CMP_AND_SWAP: it must be the previous original if that did not equal
//     the previous compare value, else the previous swap value.
//
// A first access to an address only records it. Retransmitted requests
// and replayed ACKs carry the PSN of the original and are checked once.
func ResponderCheck() PayloadCheck {
	type readReq struct {
		va    uint64
		psn   wire.PSN
		len   int
		pmtu  int // from the first response
		npkts int
	}
	type atomicReq struct {
		va        uint64
		fetchAdd  bool
		swap, cmp uint64 // the add value is swap for FETCH_AND_ADD
	}
	type atomicState struct {
		orig uint64
		req  atomicReq
	}
	type readData struct {
		sum uint32
		n   int
	}
	const keepReads = 512
	reads := map[Direction][]*readReq{} // recent READ requests by requester direction
	atomics := map[uint64]atomicReq{}   // atomic requests by (direction, PSN)
	answered := map[uint64]bool{}       // atomic ACKs already checked
	memory := map[uint64]atomicState{}  // the last atomic on each address
	readMem := map[uint64]readData{}    // the data last read at each address
	key := func(d Direction, psn wire.PSN) uint64 { return uint64(d)<<32 | uint64(psn) }
	return func(d Direction, p *wire.Packet) error {
		info := p.Info()
		psn := p.BTH.PSN()
		// Responses travel the other way: they belong to requests of rd.
		rd := ToGuest
		if d == ToGuest {
			rd = FromGuest
		}
		switch info.Kind {
		case wire.KindReadRequest:
			q := append(reads[d], &readReq{va: p.RETH.VirtualAddress(), psn: psn, len: int(p.RETH.DMALength())})
			if len(q) > keepReads {
				q = q[len(q)-keepReads:]
			}
			reads[d] = q
		case wire.KindReadResponse:
			var r *readReq
			q := reads[rd]
			for i := len(q) - 1; i >= 0 && r == nil; i-- {
				diff := int(psn.Diff(q[i].psn))
				switch {
				case diff == 0:
					r = q[i]
				case diff > 0 && q[i].npkts > 0 && diff < q[i].npkts:
					r = q[i]
				}
			}
			if r == nil {
				return nil // its request was not captured
			}
			if psn == r.psn {
				r.pmtu = len(p.Payload)
				r.npkts = 1
				if r.pmtu > 0 {
					r.npkts = (r.len + r.pmtu - 1) / r.pmtu
				}
			}
			if r.pmtu == 0 {
				return nil
			}
			addr := r.va + uint64(int(psn.Diff(r.psn))*r.pmtu)
			sum := crc32.ChecksumIEEE(p.Payload)
			if prev, seen := readMem[addr]; seen && prev.n == len(p.Payload) && prev.sum != sum {
				return fmt.Errorf("READ of 0x%x returned other bytes than an earlier READ of the same address (crc 0x%08x, earlier 0x%08x)", addr, sum, prev.sum)
			}
			readMem[addr] = readData{sum, len(p.Payload)}
		case wire.KindFetchAdd, wire.KindCompareSwap:
			a := p.AtomicETH
			atomics[key(d, psn)] = atomicReq{va: a.VirtualAddress(), fetchAdd: info.Kind == wire.KindFetchAdd,
				swap: a.SwapAddData(), cmp: a.CompareData()}
		case wire.KindAtomicAck:
			k := key(rd, psn)
			req, ok := atomics[k]
			if !ok || answered[k] {
				return nil
			}
			answered[k] = true
			orig := p.AtomicAckETH.OriginalRemoteData()
			if prev, seen := memory[req.va]; seen {
				want := prev.orig
				switch {
				case prev.req.fetchAdd:
					want = prev.orig + prev.req.swap
				case prev.orig == prev.req.cmp:
					want = prev.req.swap
				}
				if orig != want {
					return fmt.Errorf("atomic on 0x%x returned original 0x%x, want 0x%x (what the previous atomic there left)", req.va, orig, want)
				}
			}
			memory[req.va] = atomicState{orig, req}
		default:
			// Sends, writes, ACKs and the rest return no memory to check.
		}
		return nil
	}
}
