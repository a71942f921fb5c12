package interop

import (
	"bytes"
	"testing"

	"github.com/softhca/softhca/wire"
)

// sendPacket builds the parsed form of a SEND packet with the payload.
func sendPacket(op wire.OpCode, qpn uint32, psn uint32, payload []byte) *wire.Packet {
	bth := make(wire.BTH, wire.BTHSize)
	bth.Encode(&wire.BTHFields{OpCode: op, DestQP: qpn, PSN: wire.MakePSN(psn), PKey: 0xffff})
	return &wire.Packet{BTH: bth, Payload: payload}
}

func TestPingpongPayload(t *testing.T) {
	fill := func(n int, zeros ...int) []byte {
		b := bytes.Repeat([]byte{0x7b}, n)
		for _, z := range zeros {
			b[z] = 0
		}
		return b
	}
	check := PingpongPayload(0x7b, 4096)
	// A 9000-byte message in 1024-byte packets: page starts at offsets
	// 0, 4096 (packet 4, offset 0) and 8192 (packet 8, offset 0).
	ok := []*wire.Packet{
		sendPacket(wire.RCSendFirst, 0x11, 100, fill(1024, 0)),
		sendPacket(wire.RCSendMiddle, 0x11, 101, fill(1024)),
		sendPacket(wire.RCSendMiddle, 0x11, 104, fill(1024, 0)),
		sendPacket(wire.RCSendLast, 0x11, 108, fill(808, 0)),
		sendPacket(wire.UDSendOnly, 0x12, 7, fill(64, 0)),
		sendPacket(wire.RCAcknowledge, 0x13, 1, nil),
		sendPacket(wire.UCSendMiddle, 0x15, 3, fill(16)), // its First was lost: not checked
	}
	for _, p := range ok {
		if err := check(ToGuest, p); err != nil {
			t.Errorf("%s psn %d: %v, want no error", p.BTH.OpCode(), p.BTH.PSN(), err)
		}
	}
	bad := []*wire.Packet{
		sendPacket(wire.RCSendMiddle, 0x11, 102, fill(1024, 5)),      // 0 off a page start
		sendPacket(wire.RCSendOnly, 0x14, 1, append(fill(10), 0x7c)), // wrong byte
	}
	for _, p := range bad {
		if err := check(ToGuest, p); err == nil {
			t.Errorf("%s psn %d: no error, want one", p.BTH.OpCode(), p.BTH.PSN())
		}
	}
	// srq_pingpong's buffer is zeroed.
	zero := PingpongPayload(0, 4096)
	if err := zero(FromGuest, sendPacket(wire.RCSendOnly, 0x16, 1, make([]byte, 64))); err != nil {
		t.Errorf("zeroed srq message: %v, want no error", err)
	}
	if err := zero(FromGuest, sendPacket(wire.RCSendOnly, 0x16, 2, fill(64))); err == nil {
		t.Error("0x7b bytes with fill 0: no error, want one")
	}
}
