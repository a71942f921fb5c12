// Package pipe is an in-memory pair of links for tests of the transport
// engine, after quic-go's simnet and wireguard-go's conn/bindtest. New
// returns two endpoints, A and B, each a link.Link: what one sends, the
// other receives, after faults (loss, duplication, corruption, ECN
// marking, reordering, delay) drawn from a seeded random source, a
// bottleneck queue served at a set rate, and a filter hook that drops (or
// marks) chosen packets exactly.
//
// # Addresses
//
// Each endpoint has an IP address and UDP port (Config.AddrA, AddrB). A
// packet arrives with its Net as a UDP socket shows it: Src and SrcPort are
// the sender's, Dst and DstPort the receiver's, DontFragment is set, the
// IPv4 ID is 0, TrafficClass is the one the sender gave in
// Net.TrafficClass (with CE set if the pipe marked the packet: Faults.CE,
// Faults.MarkCE, the filter), and every other field is zero. The rest of the Net
// given to Send is ignored: an endpoint has one peer and always sends from
// its own address, so a packet whose ICRC was computed for other addresses
// fails the receiver's check, as it would on a network. (The ICRC masks
// the traffic class.)
//
// # Ownership and threading
//
// As link.Link says: Send copies the packets before it returns and may be
// called from several goroutines at once; the packets of one Send call
// enter the pipe together and in order. Recv copies into the caller's
// buffers and is called by one goroutine at a time per endpoint. The pipe
// starts no goroutine of its own: delayed packets are delivered by one
// timer per direction (the clock's AfterFunc, re-armed for the next
// delivery), whose callback runs on a timer goroutine (clock.Real) or
// inside Advance (clock.Fake). Stats, SetFaults and SetFilter may be
// called at any time, from any goroutine.
//
// # Faults
//
// Faults act per direction: an endpoint's faults (Config.Faults, then
// SetFaults) and its filter apply to the packets it sends, and are counted
// in its Stats. A packet given to Send goes through these stages, in this
// order:
//
//  1. Admission. The packet is dropped, counted as TxDropped, when the
//     peer is closed, when it is longer than link.MaxPacketSize, or when
//     Config.Capacity packets are already on their way in this direction
//     (delayed, held for reordering or waiting to be received). Otherwise
//     it counts as TxPackets and TxBytes.
//  2. Filter (SetFilter). Drop discards the packet, counted as
//     InjectedLoss. The filter may also change the traffic class (an ECT
//     packet it marks CE counts as InjectedCE).
//  3. Loss: with probability Loss the packet is discarded (InjectedLoss).
//  4. Corruption: with probability Corrupt one bit is flipped
//     (InjectedCorrupt). The bit is drawn uniformly from those whose flip
//     wire.ParseDatagram detects at the receiver: a bit whose flip would
//     pass (the ICRC-masked BTH byte 4; for IPv4, the rare flip that the
//     Identification solve explains away) is drawn again. If the packet
//     does not parse before the flip, any bit may be flipped.
//  5. ECN marking: with probability CE an ECN-capable packet (ECT(0) or
//     ECT(1) in TrafficClass&3) is marked CE, TrafficClass&3 = 0b11
//     (InjectedCE). A packet that is not ECN-capable, or already CE, is
//     left alone (a draw is made all the same).
//  6. Duplication: with probability Duplicate a second copy follows the
//     first (InjectedDuplicate); the copies share any corruption and CE
//     mark. From here each copy is a packet of its own.
//  7. Bottleneck (Rate > 0, below): a packet that finds the queue full is
//     dropped (QueueDropped); one that finds it at least MarkCE deep is
//     marked CE if ECN-capable (InjectedCE); the others pass unmarked.
//     The packet departs when the bottleneck has sent it out; without a
//     bottleneck it departs at once.
//  8. Delay: the packet arrives at the receiving end Delay after it
//     departs, when the clock's timer fires (with clock.Fake: during
//     Advance). A packet that departs at once with Delay 0 arrives at
//     once.
//  9. Reordering, at the receiving end (below).
//
// So the filter and Loss drop packets before they reach the bottleneck
// (they take no place in its queue), both copies of a duplicate pass it,
// and Delay is the propagation time after it. Reordering comes after the
// delay so that with clock.Fake everything sent is receivable once Advance
// has passed its delivery time.
//
// Every random draw (one per enabled fault per packet, the corrupted bit,
// the reordering hold) is made in Send from a PCG seeded with Config.Seed,
// one stream per direction. So the random faults each packet suffers
// depend only on the seed, the sequence of packets sent in its direction
// and the Faults in force, not on timing (provided Capacity drops nothing,
// as admission depends on how fast the receiver drains). The bottleneck
// depends on the clock as well: with clock.Fake, on the times of the sends
// too, and nothing else.
//
// # Bottleneck
//
// With Rate > 0 the packets of a direction pass through a FIFO queue
// served at Rate bytes per second (the bytes of Buf, BTH through ICRC),
// like Linux's tbf qdisc without burst in front of a pfifo. A packet that
// arrives at the bottleneck at time now (Send's Config.Clock reading)
// departs at
//
//	max(now, the previous packet's departure) + len(Buf)/Rate
//
// rounded up to the nanosecond (counted from the start of the busy
// period, so the rounding does not add up), and arrives Delay later: the
// order is kept, and a sender that sends faster than Rate sees its packets
// arrive at Rate. The queue depth the packet finds is the number of
// packets admitted before it whose departure is after now (the one being
// sent out included). If Queue > 0 and the depth is at least Queue, the
// packet is dropped (QueueDropped). Otherwise, if MarkCE > 0 and the
// depth is at least MarkCE, an ECN-capable packet is marked CE
// (InjectedCE), a step marking threshold like a switch's ECN threshold
// with Kmin = Kmax; a packet that is not ECN-capable is queued unmarked,
// and a full Queue is its only congestion signal. The queued packets
// count towards Config.Capacity too, so a Queue above Capacity
// never fills: Capacity's admission drops (TxDropped) come first. A
// changed Rate applies to the packets sent from then on (those queued
// keep their departures); with Rate back to 0 later packets skip the
// queue and can overtake the queued ones.
//
// # Reordering
//
// With ReorderWindow k > 1, each packet gets a hold h drawn uniformly from
// 0..k-1 at Send. Packets are numbered in the order they arrive at the
// receiving end (the send order, unless SetFaults changed the Delay or
// switched the bottleneck off); packet n is released for receiving once
// packet n+h has arrived, and packets released together go in order of
// n+h, the later arrival first among equal values. Hence packet n can be overtaken only by packets
// n+1..n+k-1: no packet is received after more than k-1 packets that
// arrived after it, nor before more than k-1 that arrived before it. The
// bound is reached when packet n draws h = k-1 and packet n+k-1 draws 0.
//
// A held packet cannot wait forever when the sender goes quiet: whenever
// the receiver finds no packet ready (in Recv or TryRecv), every held
// packet is released, in the same order; releasing early cannot break the
// bound. So reordering happens among packets in flight together (a Send
// batch, packets sent while the receiver is busy, packets whose delay
// ends at the same instant), as on a network; a receiver waiting in Recv
// takes each packet as it comes. The holds are deterministic, but the
// received order of a live run also depends on when the receiver looks;
// a test that wants a reproducible order sends first and receives after.
// InjectedReorder counts the packets released ahead of a packet that
// arrived before them. A packet sent with ReorderWindow <= 1 releases
// every held packet ahead of itself.
//
// # Closing
//
// Close ends one endpoint: its Send and Recv return net.ErrClosed (a
// blocked Recv wakes), the packets on their way to it are discarded and
// its delivery timer stopped, and what the peer sends to it from then on
// is dropped as the peer's TxDropped. The peer stays open, like a UDP
// socket whose peer went away, and still receives what the closed
// endpoint sent before closing. Once both endpoints are closed, no timer
// or goroutine of the pipe remains.
package pipe
