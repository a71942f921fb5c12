package wire_test

import (
	"bytes"
	"encoding/hex"
	"strings"
	"syscall"
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

// dirty returns n bytes of 0xA5 so that Encode must overwrite every byte,
// reserved bits included.
func dirty(n int) []byte { return bytes.Repeat([]byte{0xa5}, n) }

func TestBTHEncode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		f     wire.BTHFields
		bytes string
	}{
		{"zero", wire.BTHFields{}, "000000000000000000000000"},
		{"all ones", wire.BTHFields{
			OpCode: 0xff, SolicitedEvent: true, MigReq: true, PadCount: 3, TVer: 15,
			PKey: 0xffff, FECN: true, BECN: true, DestQP: 0xffffff, AckReq: true, PSN: 0xffffff,
		}, "ffffffff c0ffffff 80ffffff"},
		{"rxe send only", wire.BTHFields{
			OpCode: wire.RCSendOnly, SolicitedEvent: false, PadCount: 2, PKey: 0xffff,
			DestQP: 0x000011, AckReq: true, PSN: 0x3a5b6c,
		}, "04 20 ffff 00000011 803a5b6c"},
		{"each flag alone: SE", wire.BTHFields{SolicitedEvent: true}, "00800000 00000000 00000000"},
		{"each flag alone: M", wire.BTHFields{MigReq: true}, "00400000 00000000 00000000"},
		{"each flag alone: F", wire.BTHFields{FECN: true}, "00000000 80000000 00000000"},
		{"each flag alone: B", wire.BTHFields{BECN: true}, "00000000 40000000 00000000"},
		{"each flag alone: A", wire.BTHFields{AckReq: true}, "00000000 00000000 80000000"},
		{"pad 1", wire.BTHFields{PadCount: 1}, "00100000 00000000 00000000"},
		{"tver 1", wire.BTHFields{TVer: 1}, "00010000 00000000 00000000"},
		{"boundaries", wire.BTHFields{OpCode: 0x81, PKey: 0x8001, DestQP: 0x800001, PSN: 0x800001},
			"81008001 00800001 00800001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := wire.BTH(dirty(wire.BTHSize))
			b.Encode(&tc.f)
			require.Equal(t, unhex(tc.bytes), []byte(b))
			require.Equal(t, tc.f, b.Fields())
			require.Equal(t, tc.f.OpCode, b.OpCode())
			require.Equal(t, tc.f.SolicitedEvent, b.SolicitedEvent())
			require.Equal(t, tc.f.MigReq, b.MigReq())
			require.Equal(t, tc.f.PadCount, b.PadCount())
			require.Equal(t, tc.f.TVer, b.TVer())
			require.Equal(t, tc.f.PKey, b.PKey())
			require.Equal(t, tc.f.FECN, b.FECN())
			require.Equal(t, tc.f.BECN, b.BECN())
			require.Equal(t, tc.f.DestQP, b.DestQP())
			require.Equal(t, tc.f.AckReq, b.AckReq())
			require.Equal(t, tc.f.PSN, b.PSN())
		})
	}
	t.Run("reserved bits read back as nothing", func(t *testing.T) {
		// Resv6 (byte 4 low bits) and Resv7 (byte 8 low bits) set.
		b := wire.BTH(unhex("00000000 3f000000 7f000000"))
		require.Equal(t, wire.BTHFields{}, b.Fields())
	})
	t.Run("wide values truncate", func(t *testing.T) {
		b := wire.BTH(dirty(wire.BTHSize))
		b.Encode(&wire.BTHFields{PadCount: 7, TVer: 0x1f, DestQP: 0xff000001, PSN: 0xff000002})
		require.Equal(t, unhex("00 3f 0000 00000001 00000002"), []byte(b))
	})
}

// TestBTHSetters checks that each setter writes its field and leaves every
// other bit as it was, starting from many different BTH contents.
func TestBTHSetters(t *testing.T) {
	r := newRand(1)
	type setter struct {
		name string
		set  func(wire.BTH, uint32)
		// mask is the bits of the 12 bytes the setter may change.
		mask  string
		check func(*testing.T, wire.BTH, uint32)
	}
	setters := []setter{
		{"SetPSN", func(b wire.BTH, v uint32) { b.SetPSN(wire.PSN(v)) },
			"00000000 00000000 00ffffff",
			func(t *testing.T, b wire.BTH, v uint32) { require.Equal(t, wire.PSN(v&0xffffff), b.PSN()) }},
		{"SetAckReq", func(b wire.BTH, v uint32) { b.SetAckReq(v&1 != 0) },
			"00000000 00000000 80000000",
			func(t *testing.T, b wire.BTH, v uint32) { require.Equal(t, v&1 != 0, b.AckReq()) }},
		{"SetDestQP", func(b wire.BTH, v uint32) { b.SetDestQP(v) },
			"00000000 00ffffff 00000000",
			func(t *testing.T, b wire.BTH, v uint32) { require.Equal(t, v&0xffffff, b.DestQP()) }},
		{"SetPadCount", func(b wire.BTH, v uint32) { b.SetPadCount(int(v)) },
			"00300000 00000000 00000000",
			func(t *testing.T, b wire.BTH, v uint32) { require.Equal(t, int(v&3), b.PadCount()) }},
	}
	values := []uint32{0, 1, 2, 3, 0x7fffff, 0x800000, 0xffffff, 0x1000000, 0xffffffff}
	for _, s := range setters {
		t.Run(s.name, func(t *testing.T) {
			mask := unhex(s.mask)
			for range 200 {
				orig := randBytes(r, wire.BTHSize)
				if r.IntN(4) == 0 {
					orig = bytes.Repeat([]byte{0xff}, wire.BTHSize)
				}
				for _, v := range append(values, r.Uint32()) {
					b := wire.BTH(bytes.Clone(orig))
					s.set(b, v)
					s.check(t, b, v)
					for i := range b {
						require.Equal(t, orig[i]&^mask[i], b[i]&^mask[i],
							"%s(%#x) changed byte %d outside its field: %x -> %x", s.name, v, i, orig, []byte(b))
					}
				}
			}
		})
	}
}

func TestRETH(t *testing.T) {
	for _, tc := range []struct {
		f     wire.RETHFields
		bytes string
	}{
		{wire.RETHFields{}, "0000000000000000 00000000 00000000"},
		{wire.RETHFields{^uint64(0), ^uint32(0), ^uint32(0)}, "ffffffffffffffff ffffffff ffffffff"},
		{wire.RETHFields{0x0102030405060708, 0x090a0b0c, 0x0d0e0f10}, "0102030405060708 090a0b0c 0d0e0f10"},
		{wire.RETHFields{1 << 63, 1 << 31, 1}, "8000000000000000 80000000 00000001"},
	} {
		b := wire.RETH(dirty(wire.RETHSize))
		b.Encode(&tc.f)
		require.Equal(t, unhex(tc.bytes), []byte(b))
		require.Equal(t, tc.f, b.Fields())
		require.Equal(t, tc.f.VirtualAddress, b.VirtualAddress())
		require.Equal(t, tc.f.RKey, b.RKey())
		require.Equal(t, tc.f.DMALength, b.DMALength())
	}
}

func TestAtomicETH(t *testing.T) {
	for _, tc := range []struct {
		f     wire.AtomicETHFields
		bytes string
	}{
		{wire.AtomicETHFields{}, strings.Repeat("00", 28)},
		{wire.AtomicETHFields{^uint64(0), ^uint32(0), ^uint64(0), ^uint64(0)}, strings.Repeat("ff", 28)},
		{wire.AtomicETHFields{0x0102030405060708, 0x090a0b0c, 0x0d0e0f1011121314, 0x15161718191a1b1c},
			"0102030405060708 090a0b0c 0d0e0f1011121314 15161718191a1b1c"},
	} {
		b := wire.AtomicETH(dirty(wire.AtomicETHSize))
		b.Encode(&tc.f)
		require.Equal(t, unhex(tc.bytes), []byte(b))
		require.Equal(t, tc.f, b.Fields())
		require.Equal(t, tc.f.VirtualAddress, b.VirtualAddress())
		require.Equal(t, tc.f.RKey, b.RKey())
		require.Equal(t, tc.f.SwapAddData, b.SwapAddData())
		require.Equal(t, tc.f.CompareData, b.CompareData())
	}
	a := wire.AtomicAckETH(dirty(wire.AtomicAckETHSize))
	a.SetOriginalRemoteData(0x0102030405060708)
	require.Equal(t, unhex("0102030405060708"), []byte(a))
	require.Equal(t, uint64(0x0102030405060708), a.OriginalRemoteData())
}

func TestAETHView(t *testing.T) {
	for _, tc := range []struct {
		f     wire.AETHFields
		bytes string
	}{
		{wire.AETHFields{}, "00000000"},
		{wire.AETHFields{0xff, 0xffffff}, "ffffffff"},
		{wire.AETHFields{wire.ACKSyndrome(wire.CreditsInvalid), 0x000102}, "1f000102"},
		{wire.AETHFields{wire.NAKSyndrome(wire.NAKRemoteAccessError), 0x800000}, "62800000"},
	} {
		b := wire.AETH(dirty(wire.AETHSize))
		b.Encode(&tc.f)
		require.Equal(t, unhex(tc.bytes), []byte(b))
		require.Equal(t, tc.f, b.Fields())
		require.Equal(t, tc.f.Syndrome, b.Syndrome())
		require.Equal(t, tc.f.MSN, b.MSN())
	}
	// A wide MSN must not spill into the syndrome.
	b := wire.AETH(dirty(wire.AETHSize))
	b.Encode(&wire.AETHFields{Syndrome: 0x11, MSN: 0xff000003})
	require.Equal(t, unhex("11000003"), []byte(b))
}

func TestDETH(t *testing.T) {
	for _, tc := range []struct {
		f     wire.DETHFields
		bytes string
	}{
		{wire.DETHFields{}, "00000000 00000000"},
		{wire.DETHFields{0xffffffff, 0xffffff}, "ffffffff 00ffffff"},
		{wire.DETHFields{0x80010203, 0x800001}, "80010203 00800001"},
	} {
		b := wire.DETH(dirty(wire.DETHSize))
		b.Encode(&tc.f)
		require.Equal(t, unhex(tc.bytes), []byte(b))
		require.Equal(t, tc.f, b.Fields())
		require.Equal(t, tc.f.QKey, b.QKey())
		require.Equal(t, tc.f.SrcQP, b.SrcQP())
	}
	b := wire.DETH(dirty(wire.DETHSize))
	b.Encode(&wire.DETHFields{QKey: 1, SrcQP: 0xff000002})
	require.Equal(t, unhex("00000001 00000002"), []byte(b), "reserved byte must stay zero")
	require.Equal(t, uint32(0x123456), wire.DETH(unhex("00000000 ff123456")).SrcQP())
}

func TestImmDtIETH(t *testing.T) {
	for _, v := range []uint32{0, 1, 0x80000000, 0xffffffff, 0x01020304} {
		i := wire.ImmDt(dirty(wire.ImmDtSize))
		i.SetValue(v)
		require.Equal(t, v, i.Value())
		e := wire.IETH(dirty(wire.IETHSize))
		e.SetRKey(v)
		require.Equal(t, v, e.RKey())
		require.Equal(t, []byte(i), []byte(e))
	}
	i := wire.ImmDt(dirty(4))
	i.SetValue(0x01020304)
	require.Equal(t, unhex("01020304"), []byte(i), "network byte order")
}

func TestFETH(t *testing.T) {
	for _, tc := range []struct {
		f     wire.FETHFields
		bytes string
	}{
		{wire.FETHFields{}, "00000000"},
		{wire.FETHFields{PlacementType: 0xf, Selectivity: 3}, "0000003f"},
		{wire.FETHFields{PlacementType: 1, Selectivity: 1}, "00000011"},
		{wire.FETHFields{PlacementType: 2, Selectivity: 0}, "00000002"},
	} {
		b := wire.FETH(dirty(wire.FETHSize))
		b.Encode(&tc.f)
		require.Equal(t, unhex(tc.bytes), []byte(b))
		require.Equal(t, tc.f, b.Fields())
		require.Equal(t, tc.f.PlacementType, b.PlacementType())
		require.Equal(t, tc.f.Selectivity, b.Selectivity())
	}
	b := wire.FETH(dirty(wire.FETHSize))
	b.Encode(&wire.FETHFields{PlacementType: 0xff, Selectivity: 0xff})
	require.Equal(t, unhex("0000003f"), []byte(b), "wide values truncate, reserved bits zero")
	require.Equal(t, wire.FETHFields{PlacementType: 0xf, Selectivity: 3}, wire.FETH(unhex("ffffffff")).Fields())
}

func TestTMHRVH(t *testing.T) {
	for _, tc := range []struct {
		f     wire.TMHFields
		bytes string
	}{
		{wire.TMHFields{}, "00000000 00000000 0000000000000000"},
		{wire.TMHFields{0xff, 0xffffffff, ^uint64(0)}, "ff000000 ffffffff ffffffffffffffff"},
		{wire.TMHFields{wire.TMRendezvous, 0x01020304, 0x05060708090a0b0c}, "01000000 01020304 05060708090a0b0c"},
	} {
		b := wire.TMH(dirty(wire.TMHSize))
		b.Encode(&tc.f)
		require.Equal(t, unhex(tc.bytes), []byte(b))
		require.Equal(t, tc.f, b.Fields())
		require.Equal(t, tc.f.Opcode, b.Opcode())
		require.Equal(t, tc.f.AppCtx, b.AppCtx())
		require.Equal(t, tc.f.Tag, b.Tag())
	}
	for _, tc := range []struct {
		f     wire.RVHFields
		bytes string
	}{
		{wire.RVHFields{}, strings.Repeat("00", 16)},
		{wire.RVHFields{^uint64(0), ^uint32(0), ^uint32(0)}, strings.Repeat("ff", 16)},
		{wire.RVHFields{0x0102030405060708, 0x090a0b0c, 0x0d0e0f10}, "0102030405060708 090a0b0c 0d0e0f10"},
	} {
		b := wire.RVH(dirty(wire.RVHSize))
		b.Encode(&tc.f)
		require.Equal(t, unhex(tc.bytes), []byte(b))
		require.Equal(t, tc.f, b.Fields())
		require.Equal(t, tc.f.VirtualAddress, b.VirtualAddress())
		require.Equal(t, tc.f.RKey, b.RKey())
		require.Equal(t, tc.f.Length, b.Length())
	}
	for op, name := range map[wire.TMOpcode]string{
		wire.TMNoTag: "NO_TAG", wire.TMRendezvous: "RNDV", wire.TMFin: "FIN",
		wire.TMEager: "EAGER", 4: "reserved 4", 255: "reserved 255",
	} {
		require.Equal(t, name, op.String())
	}
}

func TestParseTMH(t *testing.T) {
	tmh := func(op wire.TMOpcode) []byte {
		b := make([]byte, wire.TMHSize)
		wire.TMH(b).Encode(&wire.TMHFields{Opcode: op, AppCtx: 7, Tag: 0x1234})
		return b
	}
	rvh := make([]byte, wire.RVHSize)
	wire.RVH(rvh).Encode(&wire.RVHFields{VirtualAddress: 0x1000, RKey: 9, Length: 64})
	data := []byte("application data")
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	for _, tc := range []struct {
		name    string
		payload []byte
		ok      bool
		rvh     bool
		data    []byte
	}{
		{"empty", nil, false, false, nil},
		{"short TMH", tmh(wire.TMEager)[:15], false, false, nil},
		{"eager, no data", tmh(wire.TMEager), true, false, []byte{}},
		{"eager with data", cat(tmh(wire.TMEager), data), true, false, data},
		{"no tag", cat(tmh(wire.TMNoTag), data), true, false, data},
		{"fin", cat(tmh(wire.TMFin), data), true, false, data},
		{"reserved opcode has no RVH", cat(tmh(9), data), true, false, data},
		{"rndv without RVH", tmh(wire.TMRendezvous), false, false, nil},
		{"rndv with short RVH", cat(tmh(wire.TMRendezvous), rvh[:15]), false, false, nil},
		{"rndv", cat(tmh(wire.TMRendezvous), rvh), true, true, []byte{}},
		{"rndv with data", cat(tmh(wire.TMRendezvous), rvh, data), true, true, data},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th, rh, d, ok := wire.ParseTMH(tc.payload)
			require.Equal(t, tc.ok, ok)
			if !ok {
				require.Nil(t, th)
				require.Nil(t, rh)
				require.Nil(t, d)
				return
			}
			require.Len(t, th, wire.TMHSize)
			require.Equal(t, uint64(0x1234), th.Tag())
			require.Equal(t, uint32(7), th.AppCtx())
			if tc.rvh {
				require.Len(t, rh, wire.RVHSize)
				require.Equal(t, wire.RVHFields{VirtualAddress: 0x1000, RKey: 9, Length: 64}, rh.Fields())
			} else {
				require.Nil(t, rh)
			}
			require.Equal(t, tc.data, d)
		})
	}
}

// TestHeadersEncode encodes random headers for every opcode into a dirty
// buffer and checks each extension header lands at its IBTA offset, and
// that the length matches the hand-written table.
func TestHeadersEncode(t *testing.T) {
	r := newRand(2)
	for _, op := range validOpCodes() {
		e := expectedOps[op]
		t.Run(op.String(), func(t *testing.T) {
			for range 20 {
				h := randHeaders(r, op)
				pl := randPayloadLen(r, op, 100)
				require.Equal(t, e.hdrLen, h.Len())
				require.Equal(t, e.hdrLen+pl+(-pl&3)+4, h.PacketLen(pl))
				b := dirty(e.hdrLen + 8)
				require.Equal(t, e.hdrLen, h.Encode(b, pl))
				require.Equal(t, dirty(8), b[e.hdrLen:], "Encode wrote past the headers")

				want := h.BTH
				want.PadCount = -pl & 3
				require.Equal(t, want, wire.BTH(b).Fields())
				off := wire.BTHSize
				for _, name := range e.hdrs {
					switch name {
					case "DETH":
						require.Equal(t, h.DETH, wire.DETH(b[off:]).Fields())
						require.Zero(t, b[off+4], "DETH reserved byte")
						off += 8
					case "FETH":
						require.Equal(t, h.FETH, wire.FETH(b[off:]).Fields())
						off += 4
					case "RETH":
						require.Equal(t, h.RETH, wire.RETH(b[off:]).Fields())
						off += 16
					case "AtomicETH":
						require.Equal(t, h.AtomicETH, wire.AtomicETH(b[off:]).Fields())
						off += 28
					case "AETH":
						require.Equal(t, h.AETH, wire.AETH(b[off:]).Fields())
						off += 4
					case "AtomicAckETH":
						require.Equal(t, h.AtomicAckETH, wire.AtomicAckETH(b[off:]).OriginalRemoteData())
						off += 8
					case "ImmDt":
						require.Equal(t, h.ImmDt, wire.ImmDt(b[off:]).Value())
						off += 4
					case "IETH":
						require.Equal(t, h.IETH, wire.IETH(b[off:]).RKey())
						off += 4
					case "CNPReserved":
						require.Equal(t, make([]byte, 16), b[off:off+16])
						off += 16
					}
				}
				require.Equal(t, e.hdrLen, off)
			}
		})
	}
}

func TestHeadersValidate(t *testing.T) {
	ok := func(op wire.OpCode) wire.Headers { return wire.Headers{BTH: wire.BTHFields{OpCode: op}} }
	for _, tc := range []struct {
		name       string
		h          wire.Headers
		payloadLen int
		valid      bool
	}{
		{"send only", ok(wire.RCSendOnly), 100, true},
		{"send only empty", ok(wire.RCSendOnly), 0, true},
		{"ack", ok(wire.RCAcknowledge), 0, true},
		{"atomic write", ok(wire.RCAtomicWrite), 8, true},
		{"max fields", wire.Headers{
			BTH:  wire.BTHFields{OpCode: wire.UDSendOnly, DestQP: 0xffffff, PSN: 0xffffff, TVer: 15},
			DETH: wire.DETHFields{SrcQP: 0xffffff},
		}, 1, true},
		{"reserved opcode", ok(0x15), 0, false},
		{"RD opcode", ok(0x44), 0, false},
		{"ack with payload", ok(wire.RCAcknowledge), 1, false},
		{"read request with payload", ok(wire.RCRDMAReadRequest), 4, false},
		{"atomic write short", ok(wire.RCAtomicWrite), 7, false},
		{"atomic write long", ok(wire.RCAtomicWrite), 9, false},
		{"negative payload", ok(wire.RCSendOnly), -1, false},
		{"dest QP", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, DestQP: 1 << 24}}, 0, false},
		{"PSN", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PSN: 1 << 24}}, 0, false},
		{"TVer", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, TVer: 16}}, 0, false},
		{"src QP", wire.Headers{BTH: wire.BTHFields{OpCode: wire.UDSendOnly}, DETH: wire.DETHFields{SrcQP: 1 << 24}}, 0, false},
		{"src QP ignored without DETH", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly}, DETH: wire.DETHFields{SrcQP: 1 << 24}}, 0, true},
		{"MSN", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCAcknowledge}, AETH: wire.AETHFields{MSN: 1 << 24}}, 0, false},
		{"FETH placement", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCFlush}, FETH: wire.FETHFields{PlacementType: 16}}, 0, false},
		{"FETH selectivity", wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCFlush}, FETH: wire.FETHFields{Selectivity: 4}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.h.Validate(tc.payloadLen)
			if tc.valid {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, syscall.EINVAL)
			require.True(t, strings.HasPrefix(err.Error(), "wire: "), err.Error())
		})
	}
}

func TestPadFor(t *testing.T) {
	for n, want := range []int{0, 3, 2, 1, 0, 3, 2, 1, 0} {
		require.Equal(t, want, wire.PadFor(n), "PadFor(%d)", n)
	}
	require.Equal(t, 3, wire.PadFor(4097))
}
