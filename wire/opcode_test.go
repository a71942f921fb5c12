package wire_test

import (
	"fmt"
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// expectedOp is one row of IBTA Vol. 1 table 38 (plus the IBTA 1.5 FLUSH
// and ATOMIC WRITE rows and the RoCEv2 CNP), written out by hand: the
// extension headers in wire order, their total size with the BTH, and
// whether payload may follow.
type expectedOp struct {
	name    string
	hdrs    []string
	hdrLen  int
	payload bool
	fixed   int
	kind    wire.Kind
	pos     wire.Position
	request bool
}

var expectedOps = map[wire.OpCode]expectedOp{
	0x00: {"RC Send First", nil, 12, true, 0, wire.KindSend, wire.PosFirst, true},
	0x01: {"RC Send Middle", nil, 12, true, 0, wire.KindSend, wire.PosMiddle, true},
	0x02: {"RC Send Last", nil, 12, true, 0, wire.KindSend, wire.PosLast, true},
	0x03: {"RC Send Last Immediate", []string{"ImmDt"}, 16, true, 0, wire.KindSend, wire.PosLast, true},
	0x04: {"RC Send Only", nil, 12, true, 0, wire.KindSend, wire.PosOnly, true},
	0x05: {"RC Send Only Immediate", []string{"ImmDt"}, 16, true, 0, wire.KindSend, wire.PosOnly, true},
	0x06: {"RC RDMA Write First", []string{"RETH"}, 28, true, 0, wire.KindWrite, wire.PosFirst, true},
	0x07: {"RC RDMA Write Middle", nil, 12, true, 0, wire.KindWrite, wire.PosMiddle, true},
	0x08: {"RC RDMA Write Last", nil, 12, true, 0, wire.KindWrite, wire.PosLast, true},
	0x09: {"RC RDMA Write Last Immediate", []string{"ImmDt"}, 16, true, 0, wire.KindWrite, wire.PosLast, true},
	0x0a: {"RC RDMA Write Only", []string{"RETH"}, 28, true, 0, wire.KindWrite, wire.PosOnly, true},
	0x0b: {"RC RDMA Write Only Immediate", []string{"RETH", "ImmDt"}, 32, true, 0, wire.KindWrite, wire.PosOnly, true},
	0x0c: {"RC RDMA Read Request", []string{"RETH"}, 28, false, 0, wire.KindReadRequest, wire.PosOnly, true},
	0x0d: {"RC RDMA Read Response First", []string{"AETH"}, 16, true, 0, wire.KindReadResponse, wire.PosFirst, false},
	0x0e: {"RC RDMA Read Response Middle", nil, 12, true, 0, wire.KindReadResponse, wire.PosMiddle, false},
	0x0f: {"RC RDMA Read Response Last", []string{"AETH"}, 16, true, 0, wire.KindReadResponse, wire.PosLast, false},
	0x10: {"RC RDMA Read Response Only", []string{"AETH"}, 16, true, 0, wire.KindReadResponse, wire.PosOnly, false},
	0x11: {"RC Acknowledge", []string{"AETH"}, 16, false, 0, wire.KindAck, wire.PosOnly, false},
	0x12: {"RC Atomic Acknowledge", []string{"AETH", "AtomicAckETH"}, 24, false, 0, wire.KindAtomicAck, wire.PosOnly, false},
	0x13: {"RC Compare Swap", []string{"AtomicETH"}, 40, false, 0, wire.KindCompareSwap, wire.PosOnly, true},
	0x14: {"RC Fetch Add", []string{"AtomicETH"}, 40, false, 0, wire.KindFetchAdd, wire.PosOnly, true},
	0x16: {"RC Send Last Invalidate", []string{"IETH"}, 16, true, 0, wire.KindSend, wire.PosLast, true},
	0x17: {"RC Send Only Invalidate", []string{"IETH"}, 16, true, 0, wire.KindSend, wire.PosOnly, true},
	0x1c: {"RC Flush", []string{"FETH", "RETH"}, 32, false, 0, wire.KindFlush, wire.PosOnly, true},
	0x1d: {"RC Atomic Write", []string{"RETH"}, 28, true, 8, wire.KindAtomicWrite, wire.PosOnly, true},

	0x20: {"UC Send First", nil, 12, true, 0, wire.KindSend, wire.PosFirst, true},
	0x21: {"UC Send Middle", nil, 12, true, 0, wire.KindSend, wire.PosMiddle, true},
	0x22: {"UC Send Last", nil, 12, true, 0, wire.KindSend, wire.PosLast, true},
	0x23: {"UC Send Last Immediate", []string{"ImmDt"}, 16, true, 0, wire.KindSend, wire.PosLast, true},
	0x24: {"UC Send Only", nil, 12, true, 0, wire.KindSend, wire.PosOnly, true},
	0x25: {"UC Send Only Immediate", []string{"ImmDt"}, 16, true, 0, wire.KindSend, wire.PosOnly, true},
	0x26: {"UC RDMA Write First", []string{"RETH"}, 28, true, 0, wire.KindWrite, wire.PosFirst, true},
	0x27: {"UC RDMA Write Middle", nil, 12, true, 0, wire.KindWrite, wire.PosMiddle, true},
	0x28: {"UC RDMA Write Last", nil, 12, true, 0, wire.KindWrite, wire.PosLast, true},
	0x29: {"UC RDMA Write Last Immediate", []string{"ImmDt"}, 16, true, 0, wire.KindWrite, wire.PosLast, true},
	0x2a: {"UC RDMA Write Only", []string{"RETH"}, 28, true, 0, wire.KindWrite, wire.PosOnly, true},
	0x2b: {"UC RDMA Write Only Immediate", []string{"RETH", "ImmDt"}, 32, true, 0, wire.KindWrite, wire.PosOnly, true},

	0x64: {"UD Send Only", []string{"DETH"}, 20, true, 0, wire.KindSend, wire.PosOnly, true},
	0x65: {"UD Send Only Immediate", []string{"DETH", "ImmDt"}, 24, true, 0, wire.KindSend, wire.PosOnly, true},

	0x81: {"CNP", []string{"CNPReserved"}, 28, false, 0, wire.KindCNP, wire.PosOnly, false},
}

var headerBits = map[string]wire.HeaderMask{
	"DETH": wire.HasDETH, "FETH": wire.HasFETH, "RETH": wire.HasRETH,
	"AtomicETH": wire.HasAtomicETH, "AETH": wire.HasAETH,
	"AtomicAckETH": wire.HasAtomicAckETH, "ImmDt": wire.HasImmDt,
	"IETH": wire.HasIETH, "CNPReserved": wire.HasCNPReserved,
}

// TestOpCodeTable checks all 256 opcodes against the hand-written table.
func TestOpCodeTable(t *testing.T) {
	require.Len(t, expectedOps, 25+12+2+1)
	for i := range 256 {
		op := wire.OpCode(i)
		t.Run(fmt.Sprintf("0x%02x", i), func(t *testing.T) {
			info := op.Info()
			e, ok := expectedOps[op]
			require.Equal(t, ok, op.Valid())
			require.Equal(t, ok, info.Valid)
			if !ok {
				require.Equal(t, fmt.Sprintf("reserved 0x%02x", i), op.String())
				require.Empty(t, info.Name)
				require.Zero(t, *info)
				return
			}
			var mask wire.HeaderMask
			for _, h := range e.hdrs {
				mask |= headerBits[h]
			}
			require.Equal(t, e.name, op.String())
			require.Equal(t, e.name, info.Name)
			require.Equal(t, mask, info.Headers)
			require.Equal(t, e.hdrLen, info.HdrLen)
			require.Equal(t, e.hdrLen-12, info.Headers.Len())
			require.Equal(t, e.payload, info.Payload)
			require.Equal(t, e.fixed, info.FixedLen)
			require.Equal(t, e.kind, info.Kind)
			require.Equal(t, e.pos, info.Pos)
			require.Equal(t, e.request, info.Request)
			h := wire.Headers{BTH: wire.BTHFields{OpCode: op}}
			require.Equal(t, e.hdrLen, h.Len())
		})
	}
}

// TestOpCodeTransport checks the transport split of the opcode byte and
// how ParseTransport treats every reserved opcode: RD's range as an
// unsupported transport, the rest as reserved.
func TestOpCodeTransport(t *testing.T) {
	names := map[wire.Transport]string{
		wire.TransportRC: "RC", wire.TransportUC: "UC", wire.TransportRD: "RD",
		wire.TransportUD: "UD", wire.TransportCNP: "CNP", 0xa0: "reserved",
		0xc0: "reserved", 0xe0: "reserved",
	}
	for tr, name := range names {
		require.Equal(t, name, tr.String())
	}
	for i := range 256 {
		op := wire.OpCode(i)
		require.Equal(t, wire.Transport(i&0xe0), op.Transport())
		require.Equal(t, uint8(i&0x1f), op.Operation())

		// A packet long enough for any opcode's headers, with payload.
		b := make([]byte, 64+4)
		b[0] = byte(op)
		var p wire.Packet
		r := wire.ParseTransport(b, &p)
		switch {
		case i >= 0x40 && i <= 0x5f:
			require.Equal(t, wire.DropUnsupportedTransport, r, "%#02x", i)
		case !op.Valid():
			require.Equal(t, wire.DropReservedOpCode, r, "%#02x", i)
		default:
			require.NotEqual(t, wire.DropReservedOpCode, r, "%#02x", i)
			require.NotEqual(t, wire.DropUnsupportedTransport, r, "%#02x", i)
		}
	}
}

func TestPosition(t *testing.T) {
	for _, tc := range []struct {
		pos         wire.Position
		first, last bool
	}{
		{wire.PosOnly, true, true},
		{wire.PosFirst, true, false},
		{wire.PosMiddle, false, false},
		{wire.PosLast, false, true},
	} {
		require.Equal(t, tc.first, tc.pos.First(), "%d", tc.pos)
		require.Equal(t, tc.last, tc.pos.Last(), "%d", tc.pos)
	}
}

func TestHeaderMaskLen(t *testing.T) {
	sizes := map[wire.HeaderMask]int{
		wire.HasDETH: 8, wire.HasFETH: 4, wire.HasRETH: 16, wire.HasAtomicETH: 28,
		wire.HasAETH: 4, wire.HasAtomicAckETH: 8, wire.HasImmDt: 4, wire.HasIETH: 4,
		wire.HasCNPReserved: 16,
	}
	total := 0
	var all wire.HeaderMask
	for m, s := range sizes {
		require.Equal(t, s, m.Len())
		total += s
		all |= m
	}
	require.Equal(t, total, all.Len())
	require.Zero(t, wire.HeaderMask(0).Len())
	require.Equal(t, wire.DETHSize, sizes[wire.HasDETH])
	require.Equal(t, wire.FETHSize, sizes[wire.HasFETH])
	require.Equal(t, wire.RETHSize, sizes[wire.HasRETH])
	require.Equal(t, wire.AtomicETHSize, sizes[wire.HasAtomicETH])
	require.Equal(t, wire.AETHSize, sizes[wire.HasAETH])
	require.Equal(t, wire.AtomicAckETHSize, sizes[wire.HasAtomicAckETH])
	require.Equal(t, wire.ImmDtSize, sizes[wire.HasImmDt])
	require.Equal(t, wire.IETHSize, sizes[wire.HasIETH])
	require.Equal(t, wire.CNPReservedSize, sizes[wire.HasCNPReserved])
}
