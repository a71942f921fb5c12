// Package testbench is a packet testbench for softhca's transport, in the
// manner of gVisor's packetimpact: a test opens a softhca device (the DUT)
// on a link the testbench owns, sets up protection domains, memory
// regions, CQs and QPs through the public hca API, injects hand-built
// RoCEv2 packets, and asserts on exactly what the DUT sends back, what
// lands in registered memory, the completions, and the transport's drop
// counters. The cases in this package's tests cite the IBTA rule each one
// checks.
//
// # How it works
//
// New opens the DUT with three things the testbench controls:
//
//   - Link, a fake link.Link. Inject queues a datagram (BTH through ICRC,
//     plus the IP/UDP fields the DUT's Recv reports with it) for the DUT;
//     every packet the DUT sends is copied into a FIFO that Next reads.
//     Packets are built with wire.Headers and wire.AppendPacket, the ICRC
//     computed for the addresses they are injected with, IPv4 ID 0 and DF
//     set, as a UDP socket shows a RoCEv2 datagram (the DUT recovers the ID
//     with wire.ParseDatagram). Faults change that: BadICRC, PadCount,
//     Truncate, From (another source address), FromPort, Edit.
//   - Clock, a clock.Fake: the DUT's retransmission and RNR timers fire only
//     when the test calls Clock.Advance, inside that call.
//   - One transport worker (hca.Config.Workers = 1), so that the DUT handles
//     every packet it receives, whatever QP it is for, in arrival order,
//     and sends what a packet causes before what a later packet causes.
//
// Nothing sleeps to synchronise and nothing measures time. Waiting for
// something the DUT must do (a packet, a completion) blocks on a channel
// (the link's FIFO signal, a CQ's completion channel) and fails after
// Timeout; Timeout is a failure deadline, never a synchronisation.
//
// # Barriers: asserting that nothing happened
//
// To show that the DUT does not answer a packet, the test injects a
// follow-up packet whose answer is known and requires that answer to be
// the next packet the DUT sends. Testbench.Barrier does it with a
// sentinel RC QP that New creates: a zero-length RDMA WRITE with AckReq,
// answered by an ACK. Because the DUT handles packets in order, anything
// the packet under test caused would come before the sentinel's ACK, and
// once the ACK has arrived the packet under test has been handled: its
// completions are in the CQs and its drop counted. RCConn.Barrier does the
// same with a duplicate request on the connection itself (a zero-length
// SEND at SendPSN-1, which the responder re-acknowledges without executing
// it), the technique packetimpact uses; its ACK names the same PSN a
// coalesced ACK of the packet under test would, so Testbench.Barrier is
// the one that proves a packet was not acknowledged.
//
// A barrier also orders the test against the DUT: inject a NAK, Barrier,
// then Advance the clock, and the NAK's timer is known to be armed before
// the clock moves. After Advance, the fired timer's work is queued before
// anything injected later, so a Barrier after Advance shows what the timer
// caused (or that it caused nothing).
//
// Every packet the DUT drops increments exactly one named counter
// (Device.TransportStats().DropNames()). ExpectDropped injects, runs a
// Barrier and requires exactly one counter to have increased, by one,
// under the expected name (names.go holds the names: a rename in the
// engine is a one-line fix there).
//
// # What a case looks like
//
//	// IBTA 9.7.5.2.8: a SEND with no receive WQE is answered with an RNR
//	// NAK carrying min_rnr_timer and consumes nothing.
//	func TestRCRNRNAK(t *testing.T) {
//		tb := testbench.New(t)
//		c := tb.NewRC(t, func(q *testbench.QPConfig) { q.MinRNRTimer = 14 })
//		psn := c.SendPSN
//		c.Send(t, testbench.Pkt{Op: wire.RCSendOnly, AckReq: true, Payload: []byte("early")})
//		c.Expect(t, testbench.RNRNAK(14, psn))
//		tb.ExpectNothing(t)
//		c.RecvCQ.RequireEmpty(t)
//	}
//
// # The API
//
// Testbench: New (options WithPortMTU, WithDevice), NewRC, NewUC, NewUD,
// Mem/MemIn (registered Regions with VA, RKey, SGE, RETH), NewCQ, Inject,
// InjectRaw, PeerNet, Next, Expect, Barrier, BarrierSkipping,
// ExpectNothing, Drops, DropDelta, ExpectDropped, Clock.
//
// Connections: a QPConfig (DefaultQPConfig plus changes: PSNs, path MTU,
// timeout, retry_cnt, rnr_retry, min_rnr_timer, access flags,
// max_rd_atomic, max_dest_rd_atomic, Q_Key, the state to stop in) brings a
// DUT QP up pointed at the testbench's address and QPN. RCConn (RC and UC)
// tracks SendPSN, the PSN of the next request the testbench sends, and
// ExpectPSN, the PSN of the next request expected from the DUT: Send(t,
// Pkt) uses and advances SendPSN unless the Pkt names a PSN; Expect(t,
// Match) and ExpectReq(t, Match) (which defaults the PSN to ExpectPSN and
// advances it); Ack, NAK, RNRNAK, ReadResponse and AtomicAck answer the
// DUT's requests; PostRecv, PostSend, State. UDConn does the same for UD.
//
// Packets: Pkt is partially specified (zero or nil fields take the
// connection's defaults); Match is partially specified (nil fields are
// "don't care"), with ACK, NAK, RNRNAK and Op as shorthands and P for
// pointers to literals. Every packet the DUT sends is also checked for
// what every packet must satisfy: it parses, its ICRC verifies for the
// IP/UDP fields it was sent with, and its pad is right and zero.
//
// Completions: CQ.Wait, Next, Drain, RequireEmpty; RequireWC;
// RequireAllReturned (every posted receive came back, none successful).
package testbench
