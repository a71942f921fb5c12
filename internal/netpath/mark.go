package netpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"

	"golang.org/x/sys/unix"
)

// MarkOptions says when the CE marker marks a packet. With Rate set it
// keeps a phantom queue; otherwise it marks at random with Probability.
type MarkOptions struct {
	// Rate, in bits per second, turns on the phantom-queue mode: the
	// marker keeps a virtual queue that every packet leaving the side
	// adds its length to (skb->len, Ethernet header included; a GSO
	// super-packet counts once, with one set of headers) and that drains
	// at Rate. Set it a little below the path's Rate, so that marking
	// starts before the real queue builds up (HULL's phantom queues).
	Rate uint64
	// Threshold is the phantom queue's marking threshold K in bytes: a
	// packet that brings the phantom queue above it is marked. Required
	// with Rate. A GSO super-packet (link/udp with GSO sends up to 64
	// segments, 65000 bytes, as one) enters the phantom queue and is
	// marked whole: below its size, every super-packet is marked.
	Threshold int
	// Probability, without Rate, is the chance (0 to 1) that an
	// ECN-capable packet is marked: 0 marks none, 1 marks every one.
	Probability float64
}

// MarkCounts are a marker's counters since MarkCE attached it. They count
// packets as the egress hook sees them: a GSO super-packet, marked whole,
// counts once, however many datagrams it arrives as.
type MarkCounts struct {
	// ECT counts the RoCEv2 packets (UDP to port 4791) the marker saw
	// with ECT(0) or ECT(1): those it could mark.
	ECT uint64
	// Marked counts those it marked CE.
	Marked uint64
}

// The marker's state: one element of an array map.
const (
	valQueue  = 0  // u64: phantom queue, bytes
	valLast   = 8  // u64: bpf_ktime_get_ns of the last packet
	valECT    = 16 // u64: MarkCounts.ECT
	valMarked = 24 // u64: MarkCounts.Marked
	valSize   = 32
)

// The program's stack (offsets from the frame pointer r10).
const (
	stkBuf  = -64 // 64 bytes: Ethernet, IPv6 and the UDP ports
	stkKey  = -72 // u32: the map key, 0
	stkPort = -80 // u16: an IPv4 packet's UDP destination port
	stkByte = -88 // u8: the byte to store into the packet
)

const (
	roceV2Port  = 4791
	tcActUnspec = -1 // TC_ACT_UNSPEC, also TCX_NEXT: carry on as if no program ran
)

// marker is an attached CE marker: the map holding its state and the tcx
// link that keeps the program on the device.
type marker struct {
	mapFD, linkFD int
}

func (m *marker) close() error {
	return errors.Join(unix.Close(m.linkFD), unix.Close(m.mapFD))
}

// MarkCE attaches a CE marker to the egress of side's veth, ahead of the
// bottleneck's qdisc (a tcx eBPF program: it runs before the root qdisc,
// so it sees packets at the rate they arrive at the bottleneck, not at
// the rate tbf lets them out). It marks IPv4 and IPv6 UDP datagrams to
// port 4791 whose ECN field is ECT(0) or ECT(1), setting it to CE and
// fixing the IPv4 header checksum; other packets, Not-ECT and CE ones
// included, are left alone. A second MarkCE on the same side replaces the
// marker (and its counters). Close detaches it.
//
// In phantom-queue mode the queue is updated without a lock: packets
// leaving on several CPUs at once may each see a slightly stale queue.
func (p *Path) MarkCE(side int, o MarkOptions) error {
	checkSide(side)
	if err := o.check(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("netpath: MarkCE on a closed path")
	}
	if m := p.marks[side]; m != nil {
		p.marks[side] = nil
		if err := m.close(); err != nil {
			return fmt.Errorf("netpath: detaching the previous marker of side %d: %w", side, err)
		}
	}
	m, err := p.attachMarker(side, o)
	if err != nil {
		return fmt.Errorf("netpath: CE marker on %s (side %d): %w", p.dev[side], side, err)
	}
	p.marks[side] = m
	return nil
}

func (o MarkOptions) check() error {
	switch {
	case o.Rate > 0 && o.Probability != 0:
		return fmt.Errorf("netpath: MarkOptions: Rate (phantom queue) and Probability are exclusive")
	case o.Rate > 0 && o.Rate < 8:
		return fmt.Errorf("netpath: MarkOptions: Rate %d bit/s is below a byte per second", o.Rate)
	case o.Rate > 0 && o.Threshold <= 0:
		return fmt.Errorf("netpath: MarkOptions: a phantom queue needs a Threshold (bytes)")
	case !(o.Probability >= 0 && o.Probability <= 1): // NaN too
		return fmt.Errorf("netpath: MarkOptions: Probability %v is not within 0..1", o.Probability)
	}
	return nil
}

func (p *Path) attachMarker(side int, o MarkOptions) (*marker, error) {
	mapFD, err := createArray("softhca_ce", valSize, 1)
	if err != nil {
		return nil, err
	}
	prog, err := markProgram(mapFD, o)
	if err != nil {
		unix.Close(mapFD)
		return nil, err
	}
	progFD, err := loadSchedCls("softhca_ce", prog)
	if err != nil {
		unix.Close(mapFD)
		return nil, err
	}
	defer unix.Close(progFD) // the link holds the program
	linkFD := -1
	err = p.Do(side, func() error {
		ifc, err := net.InterfaceByName(p.dev[side])
		if err != nil {
			return err
		}
		linkFD, err = attachTCXEgress(progFD, ifc.Index)
		return err
	})
	if err != nil {
		unix.Close(mapFD)
		return nil, err
	}
	return &marker{mapFD: mapFD, linkFD: linkFD}, nil
}

// Marked returns the counters of side's CE marker.
func (p *Path) Marked(side int) (MarkCounts, error) {
	checkSide(side)
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.marks[side]
	if m == nil {
		return MarkCounts{}, fmt.Errorf("netpath: no CE marker on side %d", side)
	}
	v := make([]byte, valSize)
	if err := lookupArray(m.mapFD, 0, v); err != nil {
		return MarkCounts{}, fmt.Errorf("netpath: reading the CE marker's counters: %w", err)
	}
	return MarkCounts{
		ECT:    binary.NativeEndian.Uint64(v[valECT:]),
		Marked: binary.NativeEndian.Uint64(v[valMarked:]),
	}, nil
}

// markProgram writes the marker: a tc direct-action program over the
// frame at the egress hook (skb->data is the Ethernet header).
func markProgram(mapFD int, o MarkOptions) ([]insn, error) {
	const (
		r0 uint8 = iota
		r1
		r2
		r3
		r4
		r5
		r6 // the skb
		r7 // the map value
		r8 // the byte at offset 15: IPv4's TOS, or IPv6's traffic class low nibble
		r9 // phantom queue: 1 if over the threshold
	)
	phantom := o.Rate > 0
	a := newAsm()

	a.movReg(r6, r1)
	// r7 = the state (array element 0).
	a.st(sizeW, regFP, stkKey, 0)
	a.ldMapFD(r1, mapFD)
	a.movReg(r2, regFP)
	a.aluImm(aluADD, r2, stkKey)
	a.call(fnMapLookupElem)
	a.jmpImm(jmpJEQ, r0, 0, "out")
	a.movReg(r7, r0)

	if phantom {
		// Every packet through the hook goes into the phantom queue,
		// which drains at rate bytes per second:
		// queue = max(0, queue - elapsed*rate/1e9) + skb->len.
		rate := o.Rate / 8
		maxElapsed := uint64(math.MaxUint64) / rate // elapsed*rate does not overflow below it
		a.call(fnKtimeGetNs)
		a.ldx(sizeDW, r1, r7, valLast)
		a.stx(sizeDW, r7, valLast, r0)
		a.aluReg(aluSUB, r0, r1) // r0 = elapsed ns
		a.ldx(sizeDW, r2, r7, valQueue)
		// Another CPU stamped a later time: no drain.
		a.jmpImm(jmpJSLT, r0, 0, "enqueue")
		// Long idle (or the first packet): empty.
		a.ldImm64(r3, maxElapsed)
		a.jmpReg(jmpJGE, r0, r3, "empty")
		a.ldImm64(r3, rate)
		a.aluReg(aluMUL, r0, r3)
		a.aluImm(aluDIV, r0, 1e9) // r0 = drained bytes
		a.jmpReg(jmpJLE, r2, r0, "empty")
		a.aluReg(aluSUB, r2, r0)
		a.ja("enqueue")
		a.label("empty")
		a.movImm(r2, 0)
		a.label("enqueue")
		a.ldx(sizeW, r3, r6, 0) // skb->len
		a.aluReg(aluADD, r2, r3)
		a.stx(sizeDW, r7, valQueue, r2)
		a.movImm(r9, 0)
		a.ldImm64(r3, uint64(o.Threshold))
		a.jmpReg(jmpJLE, r2, r3, "parse")
		a.movImm(r9, 1)
		a.label("parse")
	}

	// load(off, n) copies n bytes of the frame at off (in r2 if off < 0)
	// to the stack at dst; a frame too short leaves the program.
	load := func(off int32, dst int16, n int32) {
		a.movReg(r1, r6)
		if off >= 0 {
			a.movImm(r2, off)
		}
		a.movReg(r3, regFP)
		a.aluImm(aluADD, r3, int32(dst))
		a.movImm(r4, n)
		a.call(fnSkbLoadBytes)
		a.jmpImm(jmpJNE, r0, 0, "out")
	}
	// decide leaves the program unless this packet is to be marked.
	decide := func() {
		a.movImm(r1, 1)
		a.atomicAdd64(r7, valECT, r1)
		if phantom {
			a.jmpImm(jmpJEQ, r9, 0, "out")
			return
		}
		// Mark when a random u32 is below Probability * 2^32 (0 never
		// is; 2^32 always is).
		a.call(fnGetPrandomU32)
		a.zext32(r0)
		a.ldImm64(r1, uint64(math.Round(o.Probability*(1<<32))))
		a.jmpReg(jmpJGE, r0, r1, "out")
	}
	// store writes the byte at stkByte to the frame's byte 15.
	store := func() {
		a.movReg(r1, r6)
		a.movImm(r2, ethLen+1)
		a.movReg(r3, regFP)
		a.aluImm(aluADD, r3, stkByte)
		a.movImm(r4, 1)
		a.movImm(r5, 0)
		a.call(fnSkbStoreBytes)
		a.jmpImm(jmpJNE, r0, 0, "out")
	}

	// The Ethernet header and a fixed IPv4 header.
	load(0, stkBuf, ethLen+20)
	a.ldx(sizeH, r1, regFP, stkBuf+12) // EtherType
	a.be16(r1)
	a.jmpImm(jmpJEQ, r1, unix.ETH_P_IPV6, "ipv6")
	a.jmpImm(jmpJNE, r1, unix.ETH_P_IP, "out")

	// IPv4: UDP, not a later fragment, to port 4791, ECT.
	a.ldx(sizeB, r1, regFP, stkBuf+ethLen+9) // protocol
	a.jmpImm(jmpJNE, r1, unix.IPPROTO_UDP, "out")
	a.ldx(sizeH, r1, regFP, stkBuf+ethLen+6) // flags and fragment offset
	a.be16(r1)
	a.jmpImm(jmpJSET, r1, 0x1fff, "out")
	a.ldx(sizeB, r8, regFP, stkBuf+ethLen+1) // TOS
	a.ldx(sizeB, r2, regFP, stkBuf+ethLen)   // version and IHL
	a.aluImm(aluAND, r2, 0xf)
	a.aluImm(aluLSH, r2, 2)
	a.aluImm(aluADD, r2, ethLen+2) // the UDP destination port
	load(-1, stkPort, 2)
	a.ldx(sizeH, r1, regFP, stkPort)
	a.be16(r1)
	a.jmpImm(jmpJNE, r1, roceV2Port, "out")
	a.movReg(r1, r8)
	a.aluImm(aluAND, r1, 3)
	a.jmpImm(jmpJEQ, r1, 0, "out") // Not-ECT
	a.jmpImm(jmpJEQ, r1, 3, "out") // CE already
	decide()
	// TOS |= CE, then the header checksum: bpf_l3_csum_replace takes
	// the half word holding the TOS before and after, as the bytes are
	// in the packet.
	a.movReg(r1, r8)
	a.aluImm(aluOR, r1, 3)
	a.stx(sizeB, regFP, stkByte, r1)
	store()
	a.ldx(sizeH, r3, regFP, stkBuf+ethLen) // before
	a.movReg(r1, r8)
	a.aluImm(aluOR, r1, 3)
	a.stx(sizeB, regFP, stkBuf+ethLen+1, r1)
	a.ldx(sizeH, r4, regFP, stkBuf+ethLen) // after
	a.movReg(r1, r6)
	a.movImm(r2, ethLen+10) // the checksum
	a.movImm(r5, 2)         // BPF_F_HDR_FIELD_MASK: a 2-byte field
	a.call(fnL3CsumReplace)
	a.jmpImm(jmpJNE, r0, 0, "out")
	a.ja("marked")

	// IPv6 (no extension headers): UDP to port 4791, ECT. The traffic
	// class spans bytes 0 and 1; its ECN bits are bits 5..4 of byte 1.
	a.label("ipv6")
	load(0, stkBuf, ethLen+40+4)
	a.ldx(sizeB, r1, regFP, stkBuf+ethLen+6) // next header
	a.jmpImm(jmpJNE, r1, unix.IPPROTO_UDP, "out")
	a.ldx(sizeH, r1, regFP, stkBuf+ethLen+40+2) // UDP destination port
	a.be16(r1)
	a.jmpImm(jmpJNE, r1, roceV2Port, "out")
	a.ldx(sizeB, r8, regFP, stkBuf+ethLen+1)
	a.movReg(r1, r8)
	a.aluImm(aluRSH, r1, 4)
	a.aluImm(aluAND, r1, 3)
	a.jmpImm(jmpJEQ, r1, 0, "out")
	a.jmpImm(jmpJEQ, r1, 3, "out")
	decide()
	a.movReg(r1, r8)
	a.aluImm(aluOR, r1, 3<<4)
	a.stx(sizeB, regFP, stkByte, r1)
	store()

	a.label("marked")
	a.movImm(r1, 1)
	a.atomicAdd64(r7, valMarked, r1)
	a.label("out")
	a.movImm(r0, tcActUnspec)
	a.exit()
	return a.assemble()
}
