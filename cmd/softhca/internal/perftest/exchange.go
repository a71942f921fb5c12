package perftest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/softhca/softhca/verbs"
)

// Sizes of the messages of the out-of-band exchange, in bytes. Every
// message has a fixed size: perftest reads each with one read(2) of
// exactly that many bytes.
const (
	// VersionSize is the "version" string (char version[MAX_VERSION]).
	VersionSize = 16
	// SysDataSize is each of the two integers of check_sys_data.
	SysDataSize = 4
	// MTUSize is the MTU message for peers of version 5.31 and later.
	MTUSize = 2
	// DestSize is the key message with a GID (KEY_MSG_SIZE_GID).
	DestSize = 108
	// ReportFieldSize is each field of a bandwidth report.
	ReportFieldSize = 8
	// ReportFields is the number of fields of a bandwidth report without
	// --report-per-port: size, iterations, peak, average, message rate.
	ReportFields = 5
)

// Version is the version string softhca sends: the one of perftest
// 4.5-0.17 (Debian 12's package 4.5+0.17-1), whose behaviour it follows.
const Version = "6.06"

// MinPeerVersion is the oldest peer perftest 6.06 talks to
// (check_version_compatibility).
const MinPeerVersion = 5.70

// ErrMalformed is wrapped by every error about a message that does not
// parse.
var ErrMalformed = errors.New("malformed perftest message")

func malformed(what, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrMalformed, what, fmt.Sprintf(format, args...))
}

// EncodeVersion returns the version message for v (NUL-padded).
func EncodeVersion(v string) []byte {
	b := make([]byte, VersionSize)
	copy(b[:VersionSize-1], v)
	return b
}

// ParseVersion parses a version message: printable ASCII up to the first
// NUL, starting with a decimal number ("6.06"). It returns the string and
// the number (perftest compares versions with atof).
func ParseVersion(b []byte) (string, float64, error) {
	if len(b) != VersionSize {
		return "", 0, malformed("version", "%d bytes, want %d", len(b), VersionSize)
	}
	s := b
	if i := bytes.IndexByte(b, 0); i >= 0 {
		s = b[:i]
	}
	if len(s) == 0 {
		return "", 0, malformed("version", "empty")
	}
	for _, c := range s {
		if c < 0x20 || c > 0x7e {
			return "", 0, malformed("version", "non-printable byte %#02x in %q", c, s)
		}
	}
	// The leading number, as atof reads it: digits, at most one dot.
	n, dot := 0, false
	for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] == '.' && !dot) {
		if s[n] == '.' {
			dot = true
		}
		n++
	}
	f, err := strconv.ParseFloat(string(s[:n]), 64)
	if err != nil {
		return "", 0, malformed("version", "%q does not start with a number", s)
	}
	return string(s), f, nil
}

// Limits on check_sys_data values. perftest takes the larger of each
// side's values and sizes its buffers with them, so softhca refuses
// values no real host has rather than allocating whatever a peer says.
const (
	maxCycleBuffer = 1 << 26 // the page size; 64 MiB is beyond any
	maxCacheLine   = 1 << 12
)

// EncodeInt32 returns a check_sys_data integer (htonl).
func EncodeInt32(v int) []byte {
	return binary.BigEndian.AppendUint32(nil, uint32(int32(v)))
}

// ParseCycleBuffer parses the peer's cycle buffer (its page size).
func ParseCycleBuffer(b []byte) (int, error) {
	return parseSysInt("cycle buffer", b, maxCycleBuffer)
}

// ParseCacheLine parses the peer's cache line size.
func ParseCacheLine(b []byte) (int, error) {
	return parseSysInt("cache line size", b, maxCacheLine)
}

func parseSysInt(what string, b []byte, max int) (int, error) {
	if len(b) != SysDataSize {
		return 0, malformed(what, "%d bytes, want %d", len(b), SysDataSize)
	}
	v := int(int32(binary.BigEndian.Uint32(b)))
	if v <= 0 || v > max || v&(v-1) != 0 {
		return 0, malformed(what, "%d is not a power of two in 1..%d", v, max)
	}
	return v, nil
}

// EncodeMTU returns the MTU message: the ibv_mtu code in decimal and a
// NUL, as sprintf("%d") leaves it in a 2-byte exchange.
func EncodeMTU(m verbs.MTU) []byte {
	return []byte{'0' + byte(m), 0}
}

// ParseMTU parses the peer's MTU message. perftest reads it with strtol
// and ignores codes outside 1..5; softhca refuses them.
func ParseMTU(b []byte) (verbs.MTU, error) {
	if len(b) != MTUSize {
		return 0, malformed("MTU", "%d bytes, want %d", len(b), MTUSize)
	}
	s := b
	if i := bytes.IndexByte(b, 0); i >= 0 {
		s = b[:i]
	}
	n, err := strconv.Atoi(string(s))
	if err != nil || n < 1 || n > 5 {
		return 0, malformed("MTU", "%q is not an ibv_mtu code 1..5", b)
	}
	return verbs.MTU(n), nil
}

// Dest is what each side tells the other about one QP (struct
// pingpong_dest).
type Dest struct {
	LID      uint16 // 0 on RoCE
	OutReads uint16 // responder resources: the peer's max_rd_atomic
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64 // start of the buffer the peer may access remotely
	GID      verbs.GID
	SRQN     uint32 // XRC/DC only; 0
}

// Encode returns the key message in perftest's GID format
// "%04x:%04x:%06x:%06x:%08x:%016llx:" then 16 "%02x:" and "%08x:",
// NUL-terminated, DestSize bytes.
func (d *Dest) Encode() []byte {
	s := fmt.Sprintf("%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN&0xffffff, d.PSN&0xffffff, d.RKey, d.VAddr)
	for _, g := range d.GID {
		s += fmt.Sprintf("%02x:", g)
	}
	s += fmt.Sprintf("%08x:", d.SRQN)
	b := make([]byte, DestSize)
	copy(b, s) // len(s) == DestSize-1: the last byte stays NUL
	return b
}

// destFields are the key message's fields: name and width in bits.
var destFields = [...]struct {
	name string
	bits int
}{
	{"LID", 16}, {"out_reads", 16}, {"QPN", 24}, {"PSN", 24}, {"rkey", 32}, {"vaddr", 64},
}

// ParseDest parses a key message in the GID format. perftest reads each
// field with strtol, so any number of hex digits is accepted, but every
// field must be present, hexadecimal and fit its width.
func ParseDest(b []byte) (Dest, error) {
	var d Dest
	if len(b) != DestSize {
		return d, malformed("key message", "%d bytes, want %d", len(b), DestSize)
	}
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return d, malformed("key message", "no NUL terminator")
	}
	s := b[:i]
	fields := bytes.Split(s, []byte{':'})
	// 6 fields, 16 GID bytes, SRQN, then the empty string after the
	// last ':'.
	const want = len(destFields) + 16 + 1
	if len(fields) != want+1 || len(fields[want]) != 0 {
		return d, malformed("key message", "%d ':'-separated fields, want %d ending with ':' in %q", len(fields)-1, want, s)
	}
	hexField := func(i int, name string, bits int) (uint64, error) {
		f := fields[i]
		if len(f) == 0 || len(f) > 16 {
			return 0, malformed("key message", "%s: %q", name, f)
		}
		v, err := strconv.ParseUint(string(f), 16, 64)
		if err != nil || bits < 64 && v>>bits != 0 {
			return 0, malformed("key message", "%s: %q is not a %d-bit hex number", name, f, bits)
		}
		return v, nil
	}
	var v [len(destFields)]uint64
	for i, f := range destFields {
		x, err := hexField(i, f.name, f.bits)
		if err != nil {
			return d, err
		}
		v[i] = x
	}
	d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr = uint16(v[0]), uint16(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4]), v[5]
	for i := range d.GID {
		x, err := hexField(len(destFields)+i, fmt.Sprintf("GID byte %d", i), 8)
		if err != nil {
			return d, err
		}
		d.GID[i] = byte(x)
	}
	x, err := hexField(want-1, "SRQN", 32)
	if err != nil {
		return d, err
	}
	d.SRQN = uint32(x)
	return d, nil
}

// Report is a bandwidth report (struct bw_report_data) as exchanged by
// xchg_bw_reports.
type Report struct {
	Size    uint64
	Iters   uint64
	Peak    float64 // MB/s or Gb/s, as the sender's --report_gbits says
	Avg     float64
	MsgRate float64 // Mpps
}

// EncodeFields returns the report's five fields, each 8 bytes in network
// byte order (doubles byte-swapped like hton_double). They are exchanged
// one by one, in this order.
func (r *Report) EncodeFields() [ReportFields][]byte {
	var out [ReportFields][]byte
	for i, v := range []uint64{r.Size, r.Iters, math.Float64bits(r.Peak), math.Float64bits(r.Avg), math.Float64bits(r.MsgRate)} {
		out[i] = binary.BigEndian.AppendUint64(nil, v)
	}
	return out
}

// ParseReport parses the five fields of a report. Rates must be finite
// and not negative.
func ParseReport(fields [ReportFields][]byte) (Report, error) {
	var u [ReportFields]uint64
	for i, f := range fields {
		if len(f) != ReportFieldSize {
			return Report{}, malformed("report", "field %d: %d bytes, want %d", i, len(f), ReportFieldSize)
		}
		u[i] = binary.BigEndian.Uint64(f)
	}
	r := Report{Size: u[0], Iters: u[1], Peak: math.Float64frombits(u[2]), Avg: math.Float64frombits(u[3]), MsgRate: math.Float64frombits(u[4])}
	for _, x := range []float64{r.Peak, r.Avg, r.MsgRate} {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return Report{}, malformed("report", "rate %v", x)
		}
	}
	return r, nil
}
