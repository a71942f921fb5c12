package testbench

// RC responder errors (IBTA 9.9.3, responder class C errors): a request
// the responder cannot execute is answered with a NAK (invalid request or
// remote access error) at its PSN, the QP moves to the error state (rxe
// moves straight to ERR), the receive WQE a half-received message was
// filling completes with an error, and every other posted receive is
// flushed: libibverbs users get every posted receive back.

import (
	"testing"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// errEnv is what a responder error case works with.
type errEnv struct {
	tb  *Testbench
	c   *RCConn
	mem *Region // the target of WRITEs, READs and atomics: 4 KiB of 0xee, all access
}

// respErrCase is one responder error: send injects the requests and
// returns the PSN of the one that must be NAKed.
type respErrCase struct {
	name   string
	code   wire.NAKCode
	config func(*QPConfig)
	send   func(t *testing.T, e *errEnv) wire.PSN
	// inProgress: receive WR 1 was being filled by the message the error
	// interrupted and must be the first completion, with this status.
	inProgress verbs.WCStatus
	// untouched: the target memory must not have been written.
	untouched bool
	// recvLen is the length of each of the two receive buffers (default
	// 4096).
	recvLen int
}

func runRespErr(t *testing.T, tc respErrCase) {
	tb := New(t)
	var opts []func(*QPConfig)
	if tc.config != nil {
		opts = append(opts, tc.config)
	}
	c := tb.NewRC(t, opts...)
	e := &errEnv{tb: tb, c: c, mem: tb.Mem(t, 4096, AllAccess)}
	fill(e.mem.Buf, 0xee)
	n := tc.recvLen
	if n == 0 {
		n = 4096
	}
	recv := tb.Mem(t, 2*n, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, n))
	c.PostRecv(t, 2, recv.SGE(n, n))

	bad := tc.send(t, e)
	c.Expect(t, NAK(tc.code, bad))
	tb.ExpectNothing(t)
	requireErrState(t, c)
	wcs := c.RecvCQ.Wait(t, 2)
	got := RequireAllReturned(t, wcs, 1, 2)
	if tc.inProgress != verbs.WCSuccess {
		require.EqualValues(t, 1, wcs[0].WRID, "the receive in progress completes first: %s", FormatWCs(wcs))
		require.Equal(t, tc.inProgress.String(), got[1].Status.String(), "status of the receive in progress")
	}
	if tc.untouched {
		untouched(t, e.mem.Buf, 0xee)
	}
	// The QP in the error state executes nothing more.
	tb.ExpectDropped(t, DropQPState, func() {
		c.Send(t, Pkt{Op: wire.RCRDMAWriteOnly, PSN: psnp(bad.Add(1)), AckReq: true, RETH: e.mem.RETH(0, 4), Payload: []byte("late")})
	})
}

// sendFirst sends a full-MTU SEND FIRST (no AckReq).
func (e *errEnv) sendFirst(t *testing.T) {
	e.c.Send(t, Pkt{Op: wire.RCSendFirst, Payload: pattern(e.c.MTU(), 1)})
}

// writeFirst sends a full-MTU WRITE FIRST of a total of n bytes at offset
// 0 of the target.
func (e *errEnv) writeFirst(t *testing.T, n int) {
	e.c.Send(t, Pkt{Op: wire.RCRDMAWriteFirst, RETH: e.mem.RETH(0, n), Payload: pattern(e.c.MTU(), 2)})
}

// bad sends the packet that must be NAKed and returns its PSN.
func (e *errEnv) bad(t *testing.T, p Pkt) wire.PSN {
	psn := e.c.SendPSN
	p.AckReq = true
	e.c.Send(t, p)
	return psn
}

// IBTA 9.7.5.1.x / rxe check_op_seq: the opcode sequence of a message
// (FIRST, MIDDLE..., LAST; ONLY) is validated; a MIDDLE or LAST without a
// FIRST, or a new message before the LAST of the current one, is an
// Invalid Request (class C: RESPST_ERR_MISSING_OPCODE_FIRST and
// RESPST_ERR_MISSING_OPCODE_LAST_C).
func TestRCOpcodeSequenceErrors(t *testing.T) {
	t.Parallel()
	mtu := 1024
	cases := []respErrCase{
		{name: "SendMiddleWithoutFirst", send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCSendMiddle, Payload: pattern(mtu, 3)})
		}},
		{name: "SendLastWithoutFirst", send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCSendLast, Payload: pattern(10, 3)})
		}},
		{name: "WriteMiddleWithoutFirst", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteMiddle, Payload: pattern(mtu, 3)})
		}},
		{name: "WriteLastWithoutFirst", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteLast, Payload: pattern(10, 3)})
		}},
		{name: "SendFirstAfterSendFirst", inProgress: verbs.WCRemInvReqErr, send: func(t *testing.T, e *errEnv) wire.PSN {
			e.sendFirst(t)
			return e.bad(t, Pkt{Op: wire.RCSendFirst, Payload: pattern(mtu, 3)})
		}},
		{name: "SendOnlyInsideSend", inProgress: verbs.WCRemInvReqErr, send: func(t *testing.T, e *errEnv) wire.PSN {
			e.sendFirst(t)
			return e.bad(t, Pkt{Op: wire.RCSendOnly, Payload: pattern(10, 3)})
		}},
		{name: "WriteMiddleInsideSend", inProgress: verbs.WCRemInvReqErr, untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			e.sendFirst(t)
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteMiddle, Payload: pattern(mtu, 3)})
		}},
		{name: "WriteFirstInsideSend", inProgress: verbs.WCRemInvReqErr, untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			e.sendFirst(t)
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteFirst, RETH: e.mem.RETH(0, 2*mtu), Payload: pattern(mtu, 3)})
		}},
		{name: "ReadInsideSend", inProgress: verbs.WCRemInvReqErr, send: func(t *testing.T, e *errEnv) wire.PSN {
			e.sendFirst(t)
			return e.bad(t, Pkt{Op: wire.RCRDMAReadRequest, RETH: e.mem.RETH(0, 8)})
		}},
		{name: "SendMiddleInsideWrite", send: func(t *testing.T, e *errEnv) wire.PSN {
			e.writeFirst(t, 2*mtu)
			return e.bad(t, Pkt{Op: wire.RCSendMiddle, Payload: pattern(mtu, 3)})
		}},
	}
	for _, tc := range cases {
		tc.code = wire.NAKInvalidRequest
		t.Run(tc.name, func(t *testing.T) { t.Parallel(); runRespErr(t, tc) })
	}
}

// IBTA 9.7.5.1.x (length checks) / rxe check_length and check_rkey:
// every packet's payload is at most the path MTU, FIRST and MIDDLE carry
// exactly one MTU, and an RDMA WRITE's packets add up to the RETH's DMA
// length (ONLY: exactly; LAST: what is left). A violation is an Invalid
// Request (RESPST_ERR_LENGTH, class C).
func TestRCLengthErrors(t *testing.T) {
	t.Parallel()
	mtu := 1024
	cases := []respErrCase{
		{name: "SendOnlyLongerThanPathMTU", send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCSendOnly, Payload: pattern(mtu+4, 3)})
		}},
		{name: "WriteOnlyLongerThanPathMTU", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: e.mem.RETH(0, mtu+4), Payload: pattern(mtu+4, 3)})
		}},
		{name: "SendFirstShorterThanMTU", send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCSendFirst, Payload: pattern(mtu-24, 3)})
		}},
		{name: "SendMiddleShorterThanMTU", inProgress: verbs.WCRemInvReqErr, send: func(t *testing.T, e *errEnv) wire.PSN {
			e.sendFirst(t)
			return e.bad(t, Pkt{Op: wire.RCSendMiddle, Payload: pattern(mtu-24, 3)})
		}},
		{name: "SendLastLongerThanMTU", inProgress: verbs.WCRemInvReqErr, send: func(t *testing.T, e *errEnv) wire.PSN {
			e.sendFirst(t)
			return e.bad(t, Pkt{Op: wire.RCSendLast, Payload: pattern(mtu+4, 3)})
		}},
		{name: "WriteFirstShorterThanMTU", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteFirst, RETH: e.mem.RETH(0, 2*mtu), Payload: pattern(mtu-24, 3)})
		}},
		{name: "WriteOnlyShorterThanRETH", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: e.mem.RETH(0, 32), Payload: pattern(16, 3)})
		}},
		{name: "WriteOnlyLongerThanRETH", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: e.mem.RETH(0, 16), Payload: pattern(32, 3)})
		}},
		{name: "WriteLastShortOfRETH", send: func(t *testing.T, e *errEnv) wire.PSN {
			e.writeFirst(t, mtu+100)
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteLast, Payload: pattern(50, 3)})
		}},
		{name: "WriteLastBeyondRETH", send: func(t *testing.T, e *errEnv) wire.PSN {
			e.writeFirst(t, mtu+100)
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteLast, Payload: pattern(152, 3)})
		}},
		// The LAST WITH IMMEDIATE would consume a receive WQE: that WQE
		// must come back (with an error), not vanish.
		{name: "WriteLastWithImmWrongLength", send: func(t *testing.T, e *errEnv) wire.PSN {
			e.writeFirst(t, mtu+100)
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteLastWithImm, Imm: 5, Payload: pattern(50, 3)})
		}},
	}
	for _, tc := range cases {
		tc.code = wire.NAKInvalidRequest
		t.Run(tc.name, func(t *testing.T) { t.Parallel(); runRespErr(t, tc) })
	}
}

// IBTA 9.9.3 (class C), ibv_post_recv(3) ("a message longer than the
// buffer: RC completes with a local length error"): a SEND that does not
// fit the receive WQE completes it with IBV_WC_LOC_LEN_ERR, is NAKed as an
// Invalid Request, and the QP moves to the error state.
func TestRCSendLongerThanReceiveBuffer(t *testing.T) {
	t.Parallel()
	runRespErr(t, respErrCase{
		name: "SendLongerThanReceiveBuffer", code: wire.NAKInvalidRequest, inProgress: verbs.WCLocLenErr, recvLen: 16,
		send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCSendOnly, Payload: pattern(17, 1)})
		},
	})
}

// IBTA 10.3.1 / ibv_modify_qp(3): a QP moved to the error state by the
// application completes every outstanding receive WR with a flush error,
// the one a half-received SEND was filling included.
func TestRCModifyToErrorFlushesReceiveInProgress(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	recv := tb.Mem(t, 8192, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 4096))
	c.PostRecv(t, 2, recv.SGE(4096, 4096))
	c.Send(t, Pkt{Op: wire.RCSendFirst, Payload: pattern(c.MTU(), 1)})
	tb.Barrier(t)
	require.NoError(t, c.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState))
	wcs := c.RecvCQ.Wait(t, 2)
	got := RequireAllReturned(t, wcs, 1, 2)
	require.Equal(t, verbs.WCWRFlushErr.String(), got[1].Status.String())
	require.Equal(t, verbs.WCWRFlushErr.String(), got[2].Status.String())
}

// IBTA 9.7.5.1.x (R_Key validation), 10.6.3 (memory region access rights)
// / rxe check_rkey: the R_Key must name a memory region of the QP's
// protection domain that covers the whole range and grants the remote
// access; otherwise a Remote Access Error NAK (RESPST_ERR_RKEY_VIOLATION,
// class C), and nothing is written.
func TestRCRKeyErrors(t *testing.T) {
	t.Parallel()
	atomic := func(e *errEnv, va uint64, rkey uint32) Pkt {
		return Pkt{Op: wire.RCFetchAdd, AtomicETH: &wire.AtomicETHFields{VirtualAddress: va, RKey: rkey, SwapAddData: 1}}
	}
	region := func(t *testing.T, e *errEnv, access verbs.AccessFlags) *Region {
		r := e.tb.Mem(t, 64, access)
		fill(r.Buf, 0xee)
		return r
	}
	cases := []respErrCase{
		{name: "WriteUnknownRKey", send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: &wire.RETHFields{VirtualAddress: e.mem.VA(0), RKey: e.mem.RKey() + 0x100, DMALength: 4}, Payload: []byte("evil")})
		}},
		{name: "WriteRKeyOfAnotherPD", send: func(t *testing.T, e *errEnv) wire.PSN {
			pd2, err := e.tb.Dev.AllocPD()
			require.NoError(t, err)
			other := e.tb.MemIn(t, pd2, 64, AllAccess)
			fill(other.Buf, 0xee)
			psn := e.bad(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: other.RETH(0, 4), Payload: []byte("evil")})
			t.Cleanup(func() { untouched(t, other.Buf, 0xee) })
			return psn
		}},
		{name: "WriteBeyondRegionEnd", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: e.mem.RETH(4096-8, 16), Payload: pattern(16, 1)})
		}},
		{name: "WriteBeforeRegionStart", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: &wire.RETHFields{VirtualAddress: e.mem.VA(0) - 8, RKey: e.mem.RKey(), DMALength: 16}, Payload: pattern(16, 1)})
		}},
		{name: "WriteRegionWithoutRemoteWrite", send: func(t *testing.T, e *errEnv) wire.PSN {
			r := region(t, e, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
			psn := e.bad(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: r.RETH(0, 4), Payload: []byte("evil")})
			t.Cleanup(func() { untouched(t, r.Buf, 0xee) })
			return psn
		}},
		{name: "WriteWithImmUnknownRKey", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteOnlyWithImm, Imm: 1, RETH: &wire.RETHFields{VirtualAddress: e.mem.VA(0), RKey: e.mem.RKey() + 0x100, DMALength: 4}, Payload: []byte("evil")})
		}},
		{name: "WriteOnlyToDeregisteredRegion", send: func(t *testing.T, e *errEnv) wire.PSN {
			r := region(t, e, AllAccess)
			require.NoError(t, r.MR.Dereg())
			psn := e.bad(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: r.RETH(0, 4), Payload: []byte("evil")})
			t.Cleanup(func() { untouched(t, r.Buf, 0xee) })
			return psn
		}},
		// The region goes away in the middle of a WRITE: its later
		// packets must not be acknowledged (rxe looks the R_Key up for
		// every packet).
		{name: "WriteLastAfterDeregistration", send: func(t *testing.T, e *errEnv) wire.PSN {
			e.writeFirst(t, e.c.MTU()+16)
			e.tb.Barrier(t)
			require.NoError(t, e.mem.MR.Dereg())
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteLast, Payload: pattern(16, 9)})
		}},
		{name: "ReadUnknownRKey", send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAReadRequest, RETH: &wire.RETHFields{VirtualAddress: e.mem.VA(0), RKey: e.mem.RKey() ^ 0x5500, DMALength: 8}})
		}},
		{name: "ReadBeyondRegionEnd", send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAReadRequest, RETH: e.mem.RETH(4000, 200)})
		}},
		{name: "ReadRegionWithoutRemoteRead", send: func(t *testing.T, e *errEnv) wire.PSN {
			r := region(t, e, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			return e.bad(t, Pkt{Op: wire.RCRDMAReadRequest, RETH: r.RETH(0, 8)})
		}},
		// A duplicate READ is executed again from memory: when the
		// region is gone, the responder must not send responses with
		// whatever bytes it has (rxe_recheck_mr fails: R_Key violation).
		{name: "DuplicateReadAfterDeregistration", send: func(t *testing.T, e *errEnv) wire.PSN {
			r := region(t, e, AllAccess)
			psn := e.c.SendPSN
			e.c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, AckReq: true, RETH: r.RETH(0, 64)})
			e.c.Expect(t, Match{Op: P(wire.RCRDMAReadResponseOnly), PSN: P(psn), Payload: r.Buf})
			require.NoError(t, r.MR.Dereg())
			e.c.Send(t, Pkt{Op: wire.RCRDMAReadRequest, PSN: psnp(psn), AckReq: true, RETH: r.RETH(0, 64)})
			return psn
		}},
		{name: "AtomicUnknownRKey", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, atomic(e, e.mem.VA(0), e.mem.RKey()+0x100))
		}},
		{name: "AtomicBeyondRegionEnd", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, atomic(e, e.mem.VA(4096), e.mem.RKey()))
		}},
		{name: "AtomicRegionWithoutRemoteAtomic", send: func(t *testing.T, e *errEnv) wire.PSN {
			r := region(t, e, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
			psn := e.bad(t, atomic(e, r.VA(0), r.RKey()))
			t.Cleanup(func() { untouched(t, r.Buf, 0xee) })
			return psn
		}},
	}
	for _, tc := range cases {
		tc.code = wire.NAKRemoteAccessError
		t.Run(tc.name, func(t *testing.T) { t.Parallel(); runRespErr(t, tc) })
	}
}

// IBTA 9.7.5.1.x (operation validity) / rxe check_op_valid and
// check_resource: an operation the QP's qp_access_flags do not allow, a
// READ or atomic on a QP without responder resources
// (max_dest_rd_atomic 0), and an atomic on an address that is not 8-byte
// aligned (IBTA 9.4.5) are Invalid Requests (class C), whatever the
// memory region allows.
func TestRCInvalidOperations(t *testing.T) {
	t.Parallel()
	noAccess := func(a verbs.AccessFlags) func(*QPConfig) {
		return func(q *QPConfig) { q.Access &^= a }
	}
	noResources := func(q *QPConfig) { q.MaxDestRdAtomic = 0 }
	fetchAdd := func(e *errEnv, off int) Pkt {
		return Pkt{Op: wire.RCFetchAdd, AtomicETH: &wire.AtomicETHFields{VirtualAddress: e.mem.VA(off), RKey: e.mem.RKey(), SwapAddData: 1}}
	}
	cases := []respErrCase{
		{name: "WriteWithoutQPRemoteWrite", config: noAccess(verbs.AccessRemoteWrite), untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAWriteOnly, RETH: e.mem.RETH(0, 4), Payload: []byte("evil")})
		}},
		{name: "ReadWithoutQPRemoteRead", config: noAccess(verbs.AccessRemoteRead), send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAReadRequest, RETH: e.mem.RETH(0, 8)})
		}},
		{name: "AtomicWithoutQPRemoteAtomic", config: noAccess(verbs.AccessRemoteAtomic), untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, fetchAdd(e, 0))
		}},
		{name: "MisalignedAtomic", untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, fetchAdd(e, 4))
		}},
		{name: "ReadWithoutResponderResources", config: noResources, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, Pkt{Op: wire.RCRDMAReadRequest, RETH: e.mem.RETH(0, 8)})
		}},
		{name: "AtomicWithoutResponderResources", config: noResources, untouched: true, send: func(t *testing.T, e *errEnv) wire.PSN {
			return e.bad(t, fetchAdd(e, 0))
		}},
	}
	for _, tc := range cases {
		tc.code = wire.NAKInvalidRequest
		t.Run(tc.name, func(t *testing.T) { t.Parallel(); runRespErr(t, tc) })
	}
}

// IBTA 9.4.1.x (SEND with Invalidate), 10.6.x / rxe execute() and
// RESPST_ERR_INVALIDATE_RKEY: a SEND with Invalidate whose IETH names an
// R_Key that cannot be invalidated (softhca has only ordinary memory
// regions, which rxe_invalidate_mr refuses: not IB_MR_TYPE_MEM_REG) is not
// a successful delivery: the receive WQE completes with
// IBV_WC_REM_INV_REQ_ERR, the requester gets an Invalid Request NAK, and
// SEND with Invalidate names an R_Key for the responder to invalidate
// (IBTA 9.4.1.1, 10.6.6); softhca has no memory region or window that can
// be invalidated. rxe_resp.c answers an IETH it cannot invalidate with
// RESPST_ERR_INVALIDATE_RKEY ("Class J"): the receive completes with
// IBV_WC_REM_INV_REQ_ERR and the QP moves to the error state, and since
// it sets no NAK syndrome the packet itself is acknowledged. softhca does
// as rxe does (implementation-defined; the issue asks for rxe's answer).
func TestRCSendWithInvalidateOrdinaryMR(t *testing.T) {
	t.Parallel()
	tb := New(t)
	c := tb.NewRC(t)
	mem := tb.Mem(t, 4096, AllAccess)
	recv := tb.Mem(t, 8192, AllAccess)
	c.PostRecv(t, 1, recv.SGE(0, 4096))
	c.PostRecv(t, 2, recv.SGE(4096, 4096))
	psn := c.SendPSN
	c.Send(t, Pkt{Op: wire.RCSendOnlyWithInvalidate, AckReq: true, IETH: mem.RKey(), Payload: []byte("invalidate")})
	c.Expect(t, ACK(psn).WithMSN(0))
	tb.ExpectNothing(t)
	requireErrState(t, c)
	wcs := c.RecvCQ.Wait(t, 2)
	got := RequireAllReturned(t, wcs, 1, 2)
	require.EqualValues(t, 1, wcs[0].WRID, "the SEND's receive completes first: %s", FormatWCs(wcs))
	require.Equal(t, verbs.WCRemInvReqErr.String(), got[1].Status.String(), "status of the SEND's receive")
	require.Zero(t, got[1].WCFlags&verbs.WCFlagWithInv, "nothing was invalidated")
}
