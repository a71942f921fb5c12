package interop

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/softhca/softhca/wire"
)

// bpfInsn is one classic BPF instruction (struct sock_filter).
type bpfInsn struct {
	Code   uint16
	Jt, Jf uint8
	K      uint32
}

// Classic BPF opcodes used here (linux/filter.h).
const (
	bpfLdhAbs  = 0x28 // A = half word at [k]
	bpfLdbAbs  = 0x30 // A = byte at [k]
	bpfLdwAbs  = 0x20 // A = word at [k] (ancillary data above SKF_AD_OFF)
	bpfLdxMsh  = 0xb1 // X = 4 * ([k] & 0xf)
	bpfLdbInd  = 0x50 // A = byte at [X + k]
	bpfLdhInd  = 0x48 // A = half word at [X + k]
	bpfLdwInd  = 0x40 // A = word at [X + k]
	bpfAndK    = 0x54 // A &= k
	bpfJeq     = 0x15
	bpfJge     = 0x35
	bpfJset    = 0x45
	bpfModK    = 0x94 // A %= k
	bpfRetK    = 0x06
	bpfRandom  = 0xfffff000 + 56 // SKF_AD_OFF + SKF_AD_RANDOM
	tcActShot  = 2
	tcActUnset = 0xffffffff // TC_ACT_UNSPEC: carry on as if no filter matched
)

// roceMatch is the start of every program here: on an Ethernet frame, jump
// on to the instruction after it when the frame is an unfragmented IPv4
// UDP datagram to port 4791, else skip `miss` instructions past it.
func roceMatch(miss uint8) []bpfInsn {
	// A jump's offsets count from the next instruction; the block is 9
	// instructions long, so the miss target of the jump at index i is
	// 9 + miss - (i + 1) ahead.
	return []bpfInsn{
		{bpfLdhAbs, 0, 0, 12},          // 0: ethertype
		{bpfJeq, 0, 7 + miss, 0x0800},  // 1: IPv4?
		{bpfLdbAbs, 0, 0, 23},          // 2: IP protocol
		{bpfJeq, 0, 5 + miss, 17},      // 3: UDP?
		{bpfLdhAbs, 0, 0, 20},          // 4: flags and fragment offset
		{bpfJset, 3 + miss, 0, 0x1fff}, // 5: a fragment: no UDP header
		{bpfLdxMsh, 0, 0, 14},          // 6: X = IP header length
		{bpfLdhInd, 0, 0, 14 + 2},      // 7: UDP destination port
		{bpfJeq, 0, miss, 4791},        // 8: RoCEv2?
	}
}

// captureFilter keeps RoCEv2 frames (whole) and nothing else.
func captureFilter() []bpfInsn {
	p := roceMatch(1)
	return append(p,
		bpfInsn{bpfRetK, 0, 0, 1 << 18}, // keep 256 KiB: all of it
		bpfInsn{bpfRetK, 0, 0, 0},       // drop
	)
}

// lossFilter drops RoCEv2 frames with probability permille/1000 (tc
// direct-action return values), and lets everything else through. With
// spareMSN > 0 it never drops an RC Acknowledge whose MSN (the AETH's
// message sequence number: the messages the responder has completed) is
// spareMSN or more: see Loss.SpareMSN.
func lossFilter(permille int, spareMSN uint32) []bpfInsn {
	random := []bpfInsn{
		{bpfLdwAbs, 0, 0, bpfRandom},
		{bpfModK, 0, 0, 1000},
		{bpfJge, 1, 0, uint32(permille)},
		{bpfRetK, 0, 0, tcActShot},
		{bpfRetK, 0, 0, tcActUnset},
	}
	if spareMSN == 0 {
		return append(roceMatch(uint8(len(random)-1)), random...)
	}
	// The BTH starts right after the UDP header (X + 14 + 8); the AETH
	// follows the 12-byte BTH. A load past the frame's end (a truncated
	// packet) ends the program with 0, TC_ACT_OK: the frame passes.
	const bth = 14 + 8
	spare := []bpfInsn{
		{bpfLdbInd, 0, 0, bth},                        // opcode
		{bpfJeq, 0, 3, uint32(wire.RCAcknowledge)},    // an ACK? else to the random drop
		{bpfLdwInd, 0, 0, bth + wire.BTHSize},         // AETH: syndrome and MSN
		{bpfAndK, 0, 0, 0xffffff},                     // MSN
		{bpfJge, uint8(len(random) - 1), 0, spareMSN}, // to the last instruction: pass
	}
	p := roceMatch(uint8(len(spare) + len(random) - 1))
	p = append(p, spare...)
	return append(p, random...)
}

// tcBytecode formats a program for tc's "bpf bytecode" argument.
func tcBytecode(p []bpfInsn) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", len(p))
	for _, in := range p {
		fmt.Fprintf(&b, ",%d %d %d %d", in.Code, in.Jt, in.Jf, in.K)
	}
	return b.String()
}

// Loss drops a share of the RoCEv2 packets crossing the tap, in both
// directions, with a classic BPF program in tc's clsact hooks (the host
// kernel needs sch_ingress/clsact and cls_bpf, not netem).
type Loss struct {
	Dev      string
	Permille int
	// SpareMSN, if not 0, spares the acknowledgements of an exchange's
	// last message: an RC Acknowledge whose MSN is SpareMSN or more is
	// never dropped. rdma-core's pingpong examples end when each side
	// has its own completions, with no goodbye: the side that receives
	// the last message acknowledges it and exits. If that ACK is lost,
	// nothing answers the sender's retransmissions (the QP is gone) and
	// the sender never completes its last send: it hangs (rxe retries
	// forever with retry_cnt 7), through no fault of either side. A
	// responder's MSN counts the messages it has completed, so with N
	// messages each way, SpareMSN N spares exactly the ACKs sent once the
	// last message is complete; every other packet, that message's data
	// included, is dropped as before.
	SpareMSN uint32
}

// Apply installs the filters.
func (l Loss) Apply(ctx context.Context) error {
	l.Remove()
	bc := tcBytecode(lossFilter(l.Permille, l.SpareMSN))
	steps := [][]string{
		{"qdisc", "add", "dev", l.Dev, "clsact"},
		{"filter", "add", "dev", l.Dev, "ingress", "bpf", "da", "bytecode", bc},
		{"filter", "add", "dev", l.Dev, "egress", "bpf", "da", "bytecode", bc},
	}
	for _, s := range steps {
		if out, err := command(ctx, "", "tc", s...); err != nil {
			l.Remove()
			return fmt.Errorf("tc %s: %w: %s", strings.Join(s, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// Dropped returns how many packets the filters have dropped (the clsact
// qdisc's drop counter).
func (l Loss) Dropped(ctx context.Context) (int, error) {
	out, err := command(ctx, "", "tc", "-s", "qdisc", "show", "dev", l.Dev)
	if err != nil {
		return 0, fmt.Errorf("tc -s qdisc show: %w: %s", err, out)
	}
	in := false
	n := -1
	scanLines(out, func(line string) {
		if strings.HasPrefix(line, "qdisc ") {
			in = strings.HasPrefix(line, "qdisc clsact")
		}
		if i := strings.Index(line, "(dropped "); in && i >= 0 && n < 0 {
			fmt.Sscanf(line[i:], "(dropped %d", &n)
		}
	})
	if n < 0 {
		return 0, fmt.Errorf("no clsact drop counter on %s:\n%s", l.Dev, out)
	}
	return n, nil
}

// Remove deletes the filters (and the clsact qdisc).
func (l Loss) Remove() {
	command(context.Background(), "", "tc", "qdisc", "del", "dev", l.Dev, "clsact")
}
