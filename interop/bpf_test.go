package interop

import (
	"encoding/binary"
	"testing"

	"github.com/softhca/softhca/wire"
)

// runBPF interprets the classic BPF subset the harness emits; rand is
// what "ld rand" loads.
func runBPF(t *testing.T, p []bpfInsn, pkt []byte, rand uint32) uint32 {
	t.Helper()
	var a, x uint32
	for pc := 0; pc < len(p); pc++ {
		in := p[pc]
		load := func(off uint32, n int) uint32 {
			if int(off)+n > len(pkt) {
				t.Fatalf("pc %d: load of %d bytes at %d past a %d-byte packet", pc, n, off, len(pkt))
			}
			switch n {
			case 1:
				return uint32(pkt[off])
			case 2:
				return uint32(binary.BigEndian.Uint16(pkt[off:]))
			}
			return binary.BigEndian.Uint32(pkt[off:])
		}
		jump := func(cond bool) {
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		}
		switch in.Code {
		case bpfLdhAbs:
			a = load(in.K, 2)
		case bpfLdbAbs:
			a = load(in.K, 1)
		case bpfLdwAbs:
			if in.K != bpfRandom {
				t.Fatalf("pc %d: unexpected word load at %#x", pc, in.K)
			}
			a = rand
		case bpfLdxMsh:
			x = 4 * (load(in.K, 1) & 0xf)
		case bpfLdbInd:
			a = load(x+in.K, 1)
		case bpfLdhInd:
			a = load(x+in.K, 2)
		case bpfLdwInd:
			a = load(x+in.K, 4)
		case bpfAndK:
			a &= in.K
		case bpfJeq:
			jump(a == in.K)
		case bpfJge:
			jump(a >= in.K)
		case bpfJset:
			jump(a&in.K != 0)
		case bpfModK:
			a %= in.K
		case bpfRetK:
			return in.K
		default:
			t.Fatalf("pc %d: opcode %#x not interpreted", pc, in.Code)
		}
		if pc >= len(p) {
			t.Fatalf("jump past the end of the program at pc %d", pc)
		}
	}
	t.Fatal("program fell off its end")
	return 0
}

// frame builds an Ethernet/IPv4 frame with the given IP protocol, flags
// and fragment offset field, IP header length and UDP destination port.
func frame(proto uint8, frag uint16, ihl int, dport uint16) []byte {
	b := make([]byte, 14+ihl+8+16)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	b[14] = 0x40 | byte(ihl/4)
	binary.BigEndian.PutUint16(b[14+6:], frag)
	b[14+9] = proto
	binary.BigEndian.PutUint16(b[14+ihl+2:], dport)
	return b
}

func TestBPFPrograms(t *testing.T) {
	arp := make([]byte, 60)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	cases := []struct {
		name string
		pkt  []byte
		roce bool
	}{
		{"RoCEv2", frame(17, 0x4000, 20, 4791), true},
		{"RoCEv2 with IP options", frame(17, 0x4000, 24, 4791), true},
		{"other UDP port", frame(17, 0x4000, 20, 53), false},
		{"TCP", frame(6, 0x4000, 20, 4791), false},
		{"non-first fragment", frame(17, 0x0010, 20, 4791), false},
		{"ARP", arp, false},
	}
	for _, c := range cases {
		if got := runBPF(t, captureFilter(), c.pkt, 0); (got != 0) != c.roce {
			t.Errorf("capture filter on %s returned %d, want keep=%v", c.name, got, c.roce)
		}
		for _, r := range []struct {
			rand uint32
			want uint32
		}{{29, tcActShot}, {30, tcActUnset}, {1029, tcActShot}, {999, tcActUnset}} {
			want := r.want
			if !c.roce {
				want = tcActUnset
			}
			if got := runBPF(t, lossFilter(30, 0), c.pkt, r.rand); got != want {
				t.Errorf("loss filter (3%%) on %s with random %d returned %#x, want %#x", c.name, r.rand, got, want)
			}
		}
	}
	if got, want := tcBytecode([]bpfInsn{{bpfRetK, 0, 0, 2}, {bpfJeq, 1, 2, 3}}), "2,6 0 0 2,21 1 2 3"; got != want {
		t.Errorf("tcBytecode = %q, want %q", got, want)
	}
}

// ackFrame is a RoCEv2 frame with opcode op whose 4 bytes after the BTH
// (an ACK's AETH) are word; ihl is the IP header length.
func ackFrame(op wire.OpCode, word uint32, ihl int) []byte {
	b := frame(17, 0x4000, ihl, 4791)
	b[14+ihl+8] = byte(op)
	binary.BigEndian.PutUint32(b[14+ihl+8+wire.BTHSize:], word)
	return b
}

// TestLossFilterSparesFinalACKs checks Loss.SpareMSN: ACKs whose MSN
// reaches it always pass; every other RoCEv2 packet is dropped as
// without it.
func TestLossFilterSparesFinalACKs(t *testing.T) {
	const n = 20
	cases := []struct {
		name  string
		pkt   []byte
		spare bool
	}{
		{"ACK of message n-1", ackFrame(wire.RCAcknowledge, n-1, 20), false},
		{"ACK of message n", ackFrame(wire.RCAcknowledge, n, 20), true},
		{"ACK of message n, IP options", ackFrame(wire.RCAcknowledge, n, 24), true},
		{"ACK after message n", ackFrame(wire.RCAcknowledge, n+1, 20), true},
		{"ACK of message n, syndrome bits set", ackFrame(wire.RCAcknowledge, 0x1f<<24|n, 20), true},
		{"ACK of message n-1, syndrome bits set", ackFrame(wire.RCAcknowledge, 0x1f<<24|(n-1), 20), false},
		{"ACK with MSN 0", ackFrame(wire.RCAcknowledge, 0, 20), false},
		{"SEND whose data looks like MSN n", ackFrame(wire.RCSendOnly, n, 20), false},
		{"READ response with AETH, MSN n", ackFrame(wire.RCRDMAReadResponseOnly, n, 20), false},
	}
	for _, c := range cases {
		for _, r := range []struct {
			rand uint32
			drop bool
		}{{29, true}, {30, false}, {1029, true}, {999, false}} {
			want := uint32(tcActUnset)
			if r.drop && !c.spare {
				want = tcActShot
			}
			if got := runBPF(t, lossFilter(30, n), c.pkt, r.rand); got != want {
				t.Errorf("loss filter (3%%, spare MSN >= %d) on %s with random %d returned %#x, want %#x", n, c.name, r.rand, got, want)
			}
		}
	}
	// What is not RoCEv2 passes, as without SpareMSN.
	for _, pkt := range [][]byte{frame(17, 0x4000, 20, 53), frame(6, 0x4000, 20, 4791), frame(17, 0x0010, 20, 4791)} {
		if got := runBPF(t, lossFilter(30, n), pkt, 0); got != tcActUnset {
			t.Errorf("loss filter on a frame that is not RoCEv2 returned %#x, want %#x", got, uint32(tcActUnset))
		}
	}
}
