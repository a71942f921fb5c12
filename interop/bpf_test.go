package interop

import (
	"encoding/binary"
	"testing"
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
		case bpfLdhInd:
			a = load(x+in.K, 2)
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
			if got := runBPF(t, lossFilter(30), c.pkt, r.rand); got != want {
				t.Errorf("loss filter (3%%) on %s with random %d returned %#x, want %#x", c.name, r.rand, got, want)
			}
		}
	}
	if got, want := tcBytecode([]bpfInsn{{bpfRetK, 0, 0, 2}, {bpfJeq, 1, 2, 3}}), "2,6 0 0 2,21 1 2 3"; got != want {
		t.Errorf("tcBytecode = %q, want %q", got, want)
	}
}
