package netpath

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file is a small eBPF assembler (labels resolved at the end) and the
// bpf(2) calls the CE marker needs: create an array map, load a program,
// attach it with a tcx link, read the map. Opcode values are those of
// linux/bpf_common.h and linux/bpf.h.

// insn is one eBPF instruction (struct bpf_insn).
type insn struct {
	op       uint8
	dst, src uint8
	off      int16
	imm      int32
}

// Instruction classes, sizes, modes and operations.
const (
	clsLDX   = 0x01
	clsST    = 0x02
	clsSTX   = 0x03
	clsALU   = 0x04 // 32-bit
	clsJMP   = 0x05
	clsALU64 = 0x07

	sizeW  = 0x00
	sizeH  = 0x08
	sizeB  = 0x10
	sizeDW = 0x18

	modeMEM    = 0x60
	modeATOMIC = 0xc0

	srcK = 0x00 // the operand is imm
	srcX = 0x08 // the operand is the src register

	aluADD  = 0x00
	aluSUB  = 0x10
	aluMUL  = 0x20
	aluDIV  = 0x30
	aluOR   = 0x40
	aluAND  = 0x50
	aluLSH  = 0x60
	aluRSH  = 0x70
	aluMOV  = 0xb0
	aluEND  = 0xd0
	toBE    = 0x08 // with aluEND: convert to big endian
	jmpJA   = 0x00
	jmpJEQ  = 0x10
	jmpJGE  = 0x30
	jmpJSET = 0x40
	jmpJNE  = 0x50
	jmpJSLT = 0xc0
	jmpJLE  = 0xb0
	jmpCALL = 0x80
	jmpEXIT = 0x90

	atomicADD   = 0x00
	ldImm64Op   = 0x18 // BPF_LD | BPF_IMM | BPF_DW: a 64-bit immediate, two slots
	pseudoMapFD = 1    // src of a 64-bit immediate load: imm is a map fd
	regFP       = 10   // the read-only frame pointer
)

// Helper function numbers (enum bpf_func_id).
const (
	fnMapLookupElem = 1
	fnKtimeGetNs    = 5
	fnGetPrandomU32 = 7
	fnSkbStoreBytes = 9
	fnL3CsumReplace = 10
	fnSkbLoadBytes  = 26
)

// asm collects instructions; jumps name labels, resolved by assemble.
type asm struct {
	insns  []insn
	labels map[string]int
	jumps  map[int]string // instruction index -> target label
}

func newAsm() *asm {
	return &asm{labels: map[string]int{}, jumps: map[int]string{}}
}

func (a *asm) emit(in insn) { a.insns = append(a.insns, in) }

// label marks the next instruction as name.
func (a *asm) label(name string) {
	if _, dup := a.labels[name]; dup {
		panic("netpath: duplicate BPF label " + name)
	}
	a.labels[name] = len(a.insns)
}

// movImm: dst = imm (64-bit, imm sign-extended).
func (a *asm) movImm(dst uint8, imm int32) {
	a.emit(insn{op: clsALU64 | aluMOV | srcK, dst: dst, imm: imm})
}

// movReg: dst = src (64-bit).
func (a *asm) movReg(dst, src uint8) {
	a.emit(insn{op: clsALU64 | aluMOV | srcX, dst: dst, src: src})
}

// zext32: dst = dst & 0xffffffff (a 32-bit move zero-extends).
func (a *asm) zext32(dst uint8) {
	a.emit(insn{op: clsALU | aluMOV | srcX, dst: dst, src: dst})
}

// aluImm: dst op= imm (64-bit).
func (a *asm) aluImm(op, dst uint8, imm int32) {
	a.emit(insn{op: clsALU64 | op | srcK, dst: dst, imm: imm})
}

// aluReg: dst op= src (64-bit).
func (a *asm) aluReg(op, dst, src uint8) {
	a.emit(insn{op: clsALU64 | op | srcX, dst: dst, src: src})
}

// be16: dst = the low 16 bits of dst, read as a big-endian number (the
// network byte order of a half word loaded from a packet).
func (a *asm) be16(dst uint8) {
	a.emit(insn{op: clsALU | aluEND | toBE, dst: dst, imm: 16})
}

// ldImm64: dst = v (a two-slot instruction).
func (a *asm) ldImm64(dst uint8, v uint64) {
	a.emit(insn{op: ldImm64Op, dst: dst, imm: int32(uint32(v))})
	a.emit(insn{imm: int32(uint32(v >> 32))})
}

// ldMapFD: dst = the map whose fd is fd.
func (a *asm) ldMapFD(dst uint8, fd int) {
	a.emit(insn{op: ldImm64Op, dst: dst, src: pseudoMapFD, imm: int32(fd)})
	a.emit(insn{})
}

// ldx: dst = *(size *)(src + off).
func (a *asm) ldx(size, dst, src uint8, off int16) {
	a.emit(insn{op: clsLDX | modeMEM | size, dst: dst, src: src, off: off})
}

// stx: *(size *)(dst + off) = src.
func (a *asm) stx(size, dst uint8, off int16, src uint8) {
	a.emit(insn{op: clsSTX | modeMEM | size, dst: dst, src: src, off: off})
}

// st: *(size *)(dst + off) = imm.
func (a *asm) st(size, dst uint8, off int16, imm int32) {
	a.emit(insn{op: clsST | modeMEM | size, dst: dst, off: off, imm: imm})
}

// atomicAdd64: *(u64 *)(dst + off) += src, atomically.
func (a *asm) atomicAdd64(dst uint8, off int16, src uint8) {
	a.emit(insn{op: clsSTX | modeATOMIC | sizeDW, dst: dst, src: src, off: off, imm: atomicADD})
}

// jmpImm: if dst op imm goto label (64-bit compare).
func (a *asm) jmpImm(op, dst uint8, imm int32, label string) {
	a.jumps[len(a.insns)] = label
	a.emit(insn{op: clsJMP | op | srcK, dst: dst, imm: imm})
}

// jmpReg: if dst op src goto label (64-bit compare).
func (a *asm) jmpReg(op, dst, src uint8, label string) {
	a.jumps[len(a.insns)] = label
	a.emit(insn{op: clsJMP | op | srcX, dst: dst, src: src})
}

// ja: goto label.
func (a *asm) ja(label string) { a.jmpImm(jmpJA, 0, 0, label) }

// call calls helper fn: arguments in r1-r5, result in r0; r1-r5 are
// clobbered, r6-r9 kept.
func (a *asm) call(fn int32) { a.emit(insn{op: clsJMP | jmpCALL, imm: fn}) }

func (a *asm) exit() { a.emit(insn{op: clsJMP | jmpEXIT}) }

// assemble resolves the jumps (an offset counts from the next instruction).
func (a *asm) assemble() ([]insn, error) {
	out := append([]insn(nil), a.insns...)
	for at, name := range a.jumps {
		to, ok := a.labels[name]
		if !ok {
			return nil, fmt.Errorf("netpath: BPF label %q is never defined", name)
		}
		out[at].off = int16(to - at - 1)
	}
	return out, nil
}

// encode lays the instructions out as struct bpf_insn: the register
// nibbles are C bit-fields (dst_reg:4, src_reg:4), whose order follows the
// host's byte order.
func encode(p []insn) []byte {
	littleEndian := binary.NativeEndian.Uint16([]byte{1, 0}) == 1
	b := make([]byte, 0, 8*len(p))
	for _, in := range p {
		regs := in.dst&0xf | in.src<<4
		if !littleEndian {
			regs = in.dst<<4 | in.src&0xf
		}
		b = append(b, in.op, regs)
		b = binary.NativeEndian.AppendUint16(b, uint16(in.off))
		b = binary.NativeEndian.AppendUint32(b, uint32(in.imm))
	}
	return b
}

// bpf calls bpf(2) with an attribute struct.
func bpf(cmd int, attr unsafe.Pointer, size uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_BPF, uintptr(cmd), uintptr(attr), size)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// mapCreateAttr is the BPF_MAP_CREATE part of union bpf_attr.
type mapCreateAttr struct {
	mapType, keySize, valueSize, maxEntries uint32
	mapFlags, innerMapFD, numaNode          uint32
	name                                    [unix.BPF_OBJ_NAME_LEN]byte
}

// createArray creates a BPF_MAP_TYPE_ARRAY of entries values of
// valueSize bytes (keys are uint32 indexes) and returns its fd.
func createArray(name string, valueSize, entries int) (int, error) {
	attr := mapCreateAttr{
		mapType:    unix.BPF_MAP_TYPE_ARRAY,
		keySize:    4,
		valueSize:  uint32(valueSize),
		maxEntries: uint32(entries),
	}
	copy(attr.name[:unix.BPF_OBJ_NAME_LEN-1], name)
	fd, err := bpf(unix.BPF_MAP_CREATE, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if err != nil {
		return -1, fmt.Errorf("bpf(BPF_MAP_CREATE, array of %d x %d bytes): %w", entries, valueSize, err)
	}
	return fd, nil
}

// mapElemAttr is the BPF_MAP_*_ELEM part of union bpf_attr.
type mapElemAttr struct {
	mapFD uint32
	_     uint32
	key   uint64 // pointer
	value uint64 // pointer
	flags uint64
}

// lookupArray copies the value at index key of an array map into value.
func lookupArray(fd int, key uint32, value []byte) error {
	attr := mapElemAttr{
		mapFD: uint32(fd),
		key:   uint64(uintptr(unsafe.Pointer(&key))),
		value: uint64(uintptr(unsafe.Pointer(&value[0]))),
	}
	_, err := bpf(unix.BPF_MAP_LOOKUP_ELEM, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	runtime.KeepAlive(&key)
	runtime.KeepAlive(value)
	if err != nil {
		return fmt.Errorf("bpf(BPF_MAP_LOOKUP_ELEM, key %d): %w", key, err)
	}
	return nil
}

// progLoadAttr is the BPF_PROG_LOAD part of union bpf_attr, as far as
// expected_attach_type.
type progLoadAttr struct {
	progType           uint32
	insnCnt            uint32
	insns              uint64 // pointer
	license            uint64 // pointer to a NUL-terminated string
	logLevel           uint32
	logSize            uint32
	logBuf             uint64 // pointer
	kernVersion        uint32
	progFlags          uint32
	name               [unix.BPF_OBJ_NAME_LEN]byte
	progIfindex        uint32
	expectedAttachType uint32
}

// loadSchedCls loads a BPF_PROG_TYPE_SCHED_CLS program and returns its
// fd. When the verifier refuses it, the error ends with the verifier's log.
func loadSchedCls(name string, p []insn) (int, error) {
	code := encode(p)
	license := []byte("GPL\x00") // no GPL-only helper is used; any string would do
	load := func(logBuf []byte) (int, error) {
		attr := progLoadAttr{
			progType: unix.BPF_PROG_TYPE_SCHED_CLS,
			insnCnt:  uint32(len(p)),
			insns:    uint64(uintptr(unsafe.Pointer(&code[0]))),
			license:  uint64(uintptr(unsafe.Pointer(&license[0]))),
		}
		copy(attr.name[:unix.BPF_OBJ_NAME_LEN-1], name)
		if logBuf != nil {
			attr.logLevel = 1
			attr.logSize = uint32(len(logBuf))
			attr.logBuf = uint64(uintptr(unsafe.Pointer(&logBuf[0])))
		}
		fd, err := bpf(unix.BPF_PROG_LOAD, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
		runtime.KeepAlive(code)
		runtime.KeepAlive(license)
		runtime.KeepAlive(logBuf)
		return fd, err
	}
	fd, err := load(nil)
	if err == nil {
		return fd, nil
	}
	// Load again with the verifier's log, to say why.
	logBuf := make([]byte, 1<<20)
	if fd, err2 := load(logBuf); err2 == nil {
		return fd, nil // it passed the second time: nothing to report
	}
	log := logBuf
	if i := bytes.IndexByte(log, 0); i >= 0 {
		log = log[:i]
	}
	return -1, fmt.Errorf("bpf(BPF_PROG_LOAD, %s, %d instructions): %w; verifier log:\n%s", name, len(p), err, log)
}

// linkCreateAttr is the BPF_LINK_CREATE part of union bpf_attr for tcx.
type linkCreateAttr struct {
	progFD           uint32
	targetIfindex    uint32
	attachType       uint32
	flags            uint32
	relativeFD       uint32
	_                uint32
	expectedRevision uint64
}

// attachTCXEgress attaches a SCHED_CLS program to the egress of the
// interface ifindex of the calling thread's network namespace (tcx, Linux
// 6.6 and later) and returns the link's fd: closing it detaches the
// program.
func attachTCXEgress(prog, ifindex int) (int, error) {
	attr := linkCreateAttr{
		progFD:        uint32(prog),
		targetIfindex: uint32(ifindex),
		attachType:    unix.BPF_TCX_EGRESS,
	}
	fd, err := bpf(unix.BPF_LINK_CREATE, unsafe.Pointer(&attr), unsafe.Sizeof(attr))
	if err != nil {
		if errors.Is(err, unix.EINVAL) {
			err = fmt.Errorf("%w (tcx needs Linux 6.6 or later)", err)
		}
		return -1, fmt.Errorf("bpf(BPF_LINK_CREATE, tcx egress of ifindex %d): %w", ifindex, err)
	}
	return fd, nil
}
