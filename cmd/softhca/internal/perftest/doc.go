// Package perftest runs the tests of linux-rdma perftest (ib_send_bw,
// ib_write_bw, ib_read_bw, ib_atomic_bw and their _lat variants) on a
// softhca device, speaking perftest's out-of-band exchange so that either
// side may be the real perftest program and the other softhca. It is the
// engine of "softhca perf".
//
// The reference is perftest 4.5-0.17, Debian 12's package
// (perftest 4.5+0.17-1), whose programs call themselves version 6.06. The
// facts below were read from its source and checked against the binaries
// of that package; the code is softhca's own.
//
// # The exchange
//
// The client connects to the server over TCP (port 18515 by default).
// Every message has a fixed size and is exchanged in lock step: the client
// writes its message, then reads the server's; the server reads, then
// writes. perftest reads each message with a single read(2), so each goes
// out in one write. In order:
//
//  1. version: 16 bytes, the version string NUL-padded ("6.06"). A peer
//     older than 5.70 is refused.
//  2. system data: the page size ("cycle buffer"), then the cache line
//     size, each a 4-byte big-endian integer; both sides take the larger.
//     The page size is the span the addresses of small messages cycle
//     through; messages step by their size rounded up to a cache line.
//  3. MTU: 2 bytes, the ibv_mtu code in decimal and a NUL ("3" is 1024);
//     both sides take the smaller of their -m (or active) MTU.
//  4. key messages (ctx_hand_shake), 108 bytes each, the text
//     "%04x:%04x:%06x:%06x:%08x:%016llx:" (LID, outstanding reads, QPN,
//     PSN, R_Key, virtual address of the peer-accessible buffer), the 16
//     GID bytes as "%02x:", the SRQ number as "%08x:", and a NUL. Every
//     test exchanges them three times before it runs: the addresses, the
//     addresses again, and once after the QP is connected; ib_write_lat,
//     ib_read_lat and ib_atomic_lat four times (the addresses twice
//     before connecting).
//  5. per test (see runTest): more key exchanges as barriers, and for the
//     one-way bandwidth tests the client's results (xchg_bw_reports):
//     size, iterations, peak, average and message rate, five 8-byte
//     big-endian fields, the rates as IEEE doubles.
//
// # The QP
//
// One RC QP per side, connected as perftest's ctx_connect does: path MTU
// as agreed, min_rnr_timer 12, hop limit 255, GID index of the local
// address (1, the IPv4-mapped RoCEv2 GID, as with rxe), max_dest_rd_atomic
// the own outstanding reads (the device maximum, 128, or -o, for READ and
// atomics; 1 otherwise), and, on the side that sends, timeout 14 (-u),
// retry_cnt 7, rnr_retry 7 and max_rd_atomic the peer's outstanding reads.
// The server of a bandwidth test stays in RTR: it only responds.
//
// Each side registers 2*B bytes, B being the message size (8 MiB with -a)
// or the cycle buffer if larger. The first half is the local area messages
// are sent from or fetched into; the second half is advertised to the peer
// (its address goes in the key message) and holds received messages.
// Atomics add 1 (FETCH_AND_ADD) or compare with 0 and swap in 0
// (CMP_AND_SWAP), as perftest does.
//
// # The softhca device
//
// The device opens a UDP socket on the local address of the exchange
// connection (the address the client connected from, or the server
// accepted on), port 4791, unless Options.Addr says otherwise; packets go
// to the peer GID's address, port 4791 or Options.PeerPort. The port's
// active MTU follows the network interface, as with rxe. The banner says
// where the device listens ("UDP address", a line perftest does not
// have). The socket uses UDP GSO and GRO unless Options.NoGSO
// (--no-gso).
//
// # Waiting
//
// perftest busy-polls its CQs. A Go program that does starves its own
// network goroutines, so softhca sleeps on completion channels instead,
// and polls the byte ib_write_lat waits on with 1 us sleeps.
//
// # Threading
//
// Run runs one side on the caller's goroutine; the device's transport has
// goroutines of its own. Polling loops yield the processor between polls.
package perftest
