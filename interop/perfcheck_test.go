package interop

import (
	"bytes"
	"testing"

	"github.com/softhca/softhca/wire"
)

func bthFor(op wire.OpCode, psn uint32) wire.BTH {
	b := make(wire.BTH, wire.BTHSize)
	b.Encode(&wire.BTHFields{OpCode: op, DestQP: 0x11, PSN: wire.MakePSN(psn), PKey: 0xffff})
	return b
}

func atomicReq(op wire.OpCode, psn uint32, va, swapAdd, cmp uint64) *wire.Packet {
	a := make(wire.AtomicETH, wire.AtomicETHSize)
	a.Encode(&wire.AtomicETHFields{VirtualAddress: va, SwapAddData: swapAdd, CompareData: cmp})
	return &wire.Packet{BTH: bthFor(op, psn), AtomicETH: a}
}

func atomicAck(psn uint32, orig uint64) *wire.Packet {
	a := make(wire.AtomicAckETH, wire.AtomicAckETHSize)
	a.SetOriginalRemoteData(orig)
	return &wire.Packet{BTH: bthFor(wire.RCAtomicAcknowledge, psn), AtomicAckETH: a}
}

func readReq(psn uint32, va uint64, n uint32) *wire.Packet {
	r := make(wire.RETH, wire.RETHSize)
	r.Encode(&wire.RETHFields{VirtualAddress: va, DMALength: n})
	return &wire.Packet{BTH: bthFor(wire.RCRDMAReadRequest, psn), RETH: r}
}

func readResp(op wire.OpCode, psn uint32, data []byte) *wire.Packet {
	return &wire.Packet{BTH: bthFor(op, psn), Payload: data}
}

// feed runs packets through a check; requests go to the guest, responses
// come back.
func feed(check PayloadCheck, pkts ...*wire.Packet) error {
	for _, p := range pkts {
		d := ToGuest
		if !p.Info().Request {
			d = FromGuest
		}
		if err := check(d, p); err != nil {
			return err
		}
	}
	return nil
}

func TestResponderCheckAtomics(t *testing.T) {
	ok := [][]*wire.Packet{
		{ // FETCH_AND_ADD twice on one address, once on another.
			atomicReq(wire.RCFetchAdd, 10, 0x1000, 5, 0), atomicAck(10, 100),
			atomicReq(wire.RCFetchAdd, 11, 0x1040, 5, 0), atomicAck(11, 7),
			atomicReq(wire.RCFetchAdd, 12, 0x1000, 5, 0), atomicAck(12, 105),
			atomicAck(12, 105), // a replayed ACK
		},
		{ // CMP_AND_SWAP that swaps, then one that does not.
			atomicReq(wire.RCCompareSwap, 1, 0x2000, 9, 3), atomicAck(1, 3),
			atomicReq(wire.RCCompareSwap, 2, 0x2000, 1, 3), atomicAck(2, 9),
			atomicReq(wire.RCCompareSwap, 3, 0x2000, 1, 3), atomicAck(3, 9),
		},
	}
	for i, seq := range ok {
		if err := feed(ResponderCheck(), seq...); err != nil {
			t.Errorf("sequence %d: %v, want no error", i, err)
		}
	}
	bad := [][]*wire.Packet{
		{atomicReq(wire.RCFetchAdd, 10, 0x1000, 5, 0), atomicAck(10, 100),
			atomicReq(wire.RCFetchAdd, 11, 0x1000, 5, 0), atomicAck(11, 100)}, // the add was lost
		{atomicReq(wire.RCCompareSwap, 1, 0x2000, 9, 3), atomicAck(1, 3),
			atomicReq(wire.RCCompareSwap, 2, 0x2000, 1, 3), atomicAck(2, 3)}, // the swap was lost
	}
	for i, seq := range bad {
		if err := feed(ResponderCheck(), seq...); err == nil {
			t.Errorf("bad sequence %d: no error, want one", i)
		}
	}
}

func TestResponderCheckReads(t *testing.T) {
	a, b := bytes.Repeat([]byte{1}, 1024), bytes.Repeat([]byte{2}, 1024)
	first := []*wire.Packet{
		readReq(100, 0x8000, 2048),
		readResp(wire.RCRDMAReadResponseFirst, 100, a),
		readResp(wire.RCRDMAReadResponseLast, 101, b),
	}
	again := []*wire.Packet{
		readReq(102, 0x8000, 2048),
		readResp(wire.RCRDMAReadResponseFirst, 102, a),
		readResp(wire.RCRDMAReadResponseLast, 103, b),
		readReq(104, 0x8400, 1024), // the second half alone
		readResp(wire.RCRDMAReadResponseOnly, 104, b),
	}
	check := ResponderCheck()
	if err := feed(check, append(first, again...)...); err != nil {
		t.Errorf("consistent reads: %v, want no error", err)
	}
	changed := []*wire.Packet{
		readReq(102, 0x8000, 2048),
		readResp(wire.RCRDMAReadResponseFirst, 102, a),
		readResp(wire.RCRDMAReadResponseLast, 103, a), // 0x8400 read as a
	}
	if err := feed(ResponderCheck(), append(first, changed...)...); err == nil {
		t.Error("a second read of 0x8400 returned other bytes: no error, want one")
	}
}
