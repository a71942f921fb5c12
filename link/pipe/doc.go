// Package pipe is an in-memory pair of links for tests of the transport
// engine, after quic-go's simnet and wireguard-go's conn/bindtest. New
// returns two endpoints, A and B, each a link.Link: what one sends, the
// other receives, after faults (loss, duplication, corruption, reordering,
// delay) drawn from a seeded random source, and a filter hook that drops
// chosen packets exactly.
//
// # Addresses
//
// Each endpoint has an IP address and UDP port (Config.AddrA, AddrB). A
// packet arrives with its Net as a UDP socket shows it: Src and SrcPort are
// the sender's, Dst and DstPort the receiver's, DontFragment is set, the
// IPv4 ID is 0, TrafficClass is the one the sender gave in
// Net.TrafficClass, and every other field is zero. The rest of the Net
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
//     InjectedLoss.
//  3. Loss: with probability Loss the packet is discarded (InjectedLoss).
//  4. Corruption: with probability Corrupt one bit is flipped
//     (InjectedCorrupt). The bit is drawn uniformly from those whose flip
//     wire.ParseDatagram detects at the receiver: a bit whose flip would
//     pass (the ICRC-masked BTH byte 4; for IPv4, the rare flip that the
//     Identification solve explains away) is drawn again. If the packet
//     does not parse before the flip, any bit may be flipped.
//  5. Duplication: with probability Duplicate a second copy follows the
//     first (InjectedDuplicate); the copies share any corruption. From
//     here each copy is a packet of its own.
//  6. Delay: the packet arrives at the receiving end Delay after Send,
//     when the clock's timer fires (with clock.Fake: during Advance). With
//     Delay 0 it arrives at once.
//  7. Reordering, at the receiving end (below).
//
// Reordering comes after the delay so that with clock.Fake everything
// sent is receivable once Advance has passed its delivery time.
//
// Every random draw (one per enabled fault per packet, the corrupted bit,
// the reordering hold) is made in Send from a PCG seeded with Config.Seed,
// one stream per direction. So the faults each packet suffers depend only
// on the seed, the sequence of packets sent in its direction and the
// Faults in force, not on timing (provided Capacity drops nothing, as
// admission depends on how fast the receiver drains).
//
// # Reordering
//
// With ReorderWindow k > 1, each packet gets a hold h drawn uniformly from
// 0..k-1 at Send. Packets are numbered in the order they arrive at the
// receiving end (the send order, unless SetFaults changed the Delay);
// packet n is released for receiving once packet n+h has arrived, and
// packets released together go in order of n+h, the later arrival first
// among equal values. Hence packet n can be overtaken only by packets
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
