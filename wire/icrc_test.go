package wire_test

import (
	"encoding/binary"
	"hash/crc32"
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// crcRegister runs the CRC-32 shift register bit by bit (reflected
// polynomial 0xEDB88320, as rxe's crc32_le), from the given state, with no
// final complement.
func crcRegister(reg uint32, data []byte) uint32 {
	for _, b := range data {
		reg ^= uint32(b)
		for range 8 {
			if reg&1 != 0 {
				reg = reg>>1 ^ 0xedb88320
			} else {
				reg >>= 1
			}
		}
	}
	return reg
}

// TestICRCRxeConstant checks the constant rxe's ICRC starts from: the CRC
// register after the 8 bytes of 0xFF that stand for the masked LRH is
// 0xdebb20e3 (wire-notes, rxe_icrc.c).
func TestICRCRxeConstant(t *testing.T) {
	ff := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	require.Equal(t, uint32(0xdebb20e3), crcRegister(0xffffffff, ff))
	require.Equal(t, uint32(0xdebb20e3), ^crc32.ChecksumIEEE(ff))
	// hash/crc32's IEEE checksum is the same register, complemented, so
	// the reference below may use it.
	r := newRand(20)
	for range 100 {
		b := randBytes(r, r.IntN(200))
		require.Equal(t, ^crcRegister(0xffffffff, b), crc32.ChecksumIEEE(b))
	}
}

// TestICRCReferenceOnCaptures validates the slow reference itself against
// rxe: it must reproduce the ICRC of every captured packet.
func TestICRCReferenceOnCaptures(t *testing.T) {
	for i, f := range captureIPFrames(t) {
		require.Equal(t, binary.LittleEndian.Uint32(f[len(f)-4:]), refICRC(f), "capture frame %d", i)
	}
}

// TestICRCVector checks one captured rxe packet by hand: an RC Acknowledge
// from 10.77.0.3 to 10.77.0.2.
func TestICRCVector(t *testing.T) {
	frame := unhex("" +
		// IPv4: version/IHL, TOS 0, total 48, ID 0x0af3, DF, TTL 64, UDP,
		// checksum 0x1b2c, 10.77.0.3 -> 10.77.0.2
		"4500 0030 0af3 4000 4011 1b2c 0a4d0003 0a4d0002" +
		// UDP: source port 0xc271, destination 4791, length 28, checksum 0
		"c271 12b7 001c 0000" +
		// BTH: RC Acknowledge, pad 0, P_Key 0xffff, QP 0x000019,
		// PSN 0x1f6abc
		"11 00 ffff 00000019 001f6abc" +
		// AETH: syndrome 0x1f (ACK, credits invalid), MSN 1
		"1f000001" +
		// ICRC, least-significant byte first
		"ea383436")
	var p wire.Packet
	require.Equal(t, wire.DropNone, wire.Parse(frame, &p))
	require.Equal(t, wire.RCAcknowledge, p.BTH.OpCode())
	require.Equal(t, uint16(0x0af3), p.Net.ID)
	require.Equal(t, uint32(0x19), p.BTH.DestQP())
	require.Equal(t, wire.PSN(0x1f6abc), p.BTH.PSN())
	require.Equal(t, wire.ACKSyndrome(wire.CreditsInvalid), p.AETH.Syndrome())
	require.Equal(t, uint32(1), p.AETH.MSN())
	require.Equal(t, uint32(0x363438ea), p.ICRC)
	require.Equal(t, uint32(0x363438ea), wire.ICRC(&p.Net, p.Raw[:len(p.Raw)-4]))
	require.Equal(t, uint32(0x363438ea), refICRC(frame))
}

// TestICRCRandom compares wire.ICRC with the slow reference for random
// packets of every opcode and many sizes, IPv4 and IPv6. There is no IPv6
// capture, so for IPv6 this is the cross-check.
func TestICRCRandom(t *testing.T) {
	r := newRand(21)
	ops := validOpCodes()
	sizes := []int{0, 1, 2, 3, 4, 5, 63, 64, 255, 256, 1024, 4095, 4096, 4097, 9000}
	for _, v6 := range []bool{false, true} {
		for i := range 3000 {
			op := ops[r.IntN(len(ops))]
			max := sizes[i%len(sizes)]
			tp := randPacket(r, op, v6, max)
			want := refICRC(tp.frame())
			got := wire.ICRC(&tp.net, tp.ib[:len(tp.ib)-4])
			if got != want {
				t.Fatalf("%s v6=%v payload %d: ICRC %#08x, reference %#08x", op, v6, len(tp.payload), got, want)
			}
			require.Equal(t, want, wire.StoredICRC(tp.ib), "AppendPacket stores the ICRC")
			require.True(t, wire.CheckICRC(&tp.net, tp.ib))
		}
	}
}

// TestICRCGather: the ICRC of a packet held in parts (headers, payload
// where it lies, pad) is the ICRC of the whole packet, for random packets
// of every opcode, IPv4 and IPv6, and costs no allocation.
func TestICRCGather(t *testing.T) {
	r := newRand(22)
	ops := validOpCodes()
	sizes := []int{0, 1, 2, 3, 5, 64, 1021, 4096}
	for _, v6 := range []bool{false, true} {
		for i := range 1000 {
			tp := randPacket(r, ops[r.IntN(len(ops))], v6, sizes[i%len(sizes)])
			hl := tp.hdr.Len()
			end := len(tp.ib) - wire.ICRCSize
			pad := end - hl - len(tp.payload)
			require.Equal(t, wire.BTH(tp.ib).PadCount(), pad)
			got := wire.ICRCGather(&tp.net, tp.ib[:hl], tp.payload, pad)
			require.Equal(t, wire.StoredICRC(tp.ib), got, "%s v6=%v payload %d", tp.hdr.BTH.OpCode, v6, len(tp.payload))
		}
		tp := randPacket(r, wire.RCRDMAWriteFirst, v6, 4096)
		hl := tp.hdr.Len()
		require.Zero(t, testing.AllocsPerRun(100, func() { wire.ICRCGather(&tp.net, tp.ib[:hl], tp.payload, 0) }))
	}
}

// TestICRCMaskedInputs: the fields the ICRC masks do not change it, the
// ones it covers do.
func TestICRCMaskedInputs(t *testing.T) {
	r := newRand(22)
	for _, v6 := range []bool{false, true} {
		for range 200 {
			tp := randPacket(r, wire.RCSendOnly, v6, 100)
			ib := tp.ib[:len(tp.ib)-4]
			want := wire.ICRC(&tp.net, ib)

			n := tp.net
			n.TrafficClass, n.HopLimit = uint8(r.Uint32()), uint8(r.Uint32())
			if v6 {
				n.FlowLabel = r.Uint32() & 0xfffff
			}
			ib[4] = byte(r.Uint32()) // FECN, BECN, Resv6
			require.Equal(t, want, wire.ICRC(&n, ib))

			for _, change := range []func(n *wire.Net){
				func(n *wire.Net) { n.SrcPort++ },
				func(n *wire.Net) { n.DstPort++ },
				func(n *wire.Net) { n.Src, n.Dst = n.Dst, n.Src },
			} {
				m := n
				change(&m)
				require.NotEqual(t, want, wire.ICRC(&m, ib))
			}
			if !v6 {
				m := n
				m.ID++
				require.NotEqual(t, want, wire.ICRC(&m, ib))
				m = n
				m.DontFragment = !m.DontFragment
				require.NotEqual(t, want, wire.ICRC(&m, ib))
			}
		}
	}
}

// TestSealZeroesPad: Seal clears the pad the BTH announces and stores the
// ICRC, whatever the buffer held.
func TestSealZeroesPad(t *testing.T) {
	r := newRand(23)
	for pl := range 9 {
		n := randNet(r, pl%2 == 0)
		h := randHeaders(r, wire.UCSendOnly)
		pkt := dirty(h.PacketLen(pl))
		hl := h.Encode(pkt, pl)
		copy(pkt[hl:], randBytes(r, pl))
		wire.Seal(&n, pkt)
		end := len(pkt) - 4
		require.Equal(t, make([]byte, -pl&3), pkt[end-(-pl&3):end])
		require.Equal(t, refICRC(frameFor(&n, pkt)), wire.StoredICRC(pkt))
		require.True(t, wire.CheckICRC(&n, pkt))
	}
}
