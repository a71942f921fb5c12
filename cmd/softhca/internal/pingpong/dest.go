package pingpong

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/softhca/softhca/verbs"
)

// MsgSize is the size of one address message on the TCP connection:
// sizeof "0000:000000:000000:00000000000000000000000000000000" in
// rdma-core's examples, that is 51 characters and the terminating NUL,
// which is sent too.
const MsgSize = 52

// Done is what the client sends after the server's address message(s),
// NUL included, and what the server waits for before it starts.
var Done = [5]byte{'d', 'o', 'n', 'e', 0}

// SRQMessages is the number of address messages each side of
// ibv_srq_pingpong sends: always MAX_QP (256), whatever -q says; the
// entries past the QPs in use are all zero.
const SRQMessages = 256

// Dest is one side's address as the pingpong examples exchange it
// (struct pingpong_dest): the port's LID (0 on RoCE), the QP number, the
// first PSN the QP sends, and the GID (zero when the side was given no
// GID index).
type Dest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID verbs.GID
}

// Message returns d as rdma-core writes it: sprintf("%04x:%06x:%06x:%s")
// with the GID as 32 lower-case hex digits, the GID's bytes in order
// (gid_to_wire_gid prints each 32-bit word with htonl, so the text is the
// same on every host), then NUL.
func (d Dest) Message() [MsgSize]byte {
	var m [MsgSize]byte
	b := fmt.Appendf(m[:0], "%04x:%06x:%06x:", d.LID, d.QPN&0xffffff, d.PSN&0xffffff)
	hex.Encode(m[len(b):], d.GID[:])
	// The final byte stays NUL.
	return m
}

// HasGID reports whether the GID's interface identifier (its last eight
// bytes) is non-zero: the examples set up a GRH to the peer only then
// (dest->gid.global.interface_id).
func (d Dest) HasGID() bool {
	for _, b := range d.GID[8:] {
		if b != 0 {
			return true
		}
	}
	return false
}

// MessageError is a peer's address message that is not in rdma-core's
// format.
type MessageError struct {
	Msg    []byte // the message as received
	Reason string
}

func (e *MessageError) Error() string {
	text := e.Msg
	if i := bytes.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	}
	return fmt.Sprintf("malformed address message %q: %s", text, e.Reason)
}

// ParseMessage parses an address message: exactly MsgSize bytes holding
// "LID:QPN:PSN:GID" and a NUL. LID, QPN and PSN are hexadecimal numbers
// (rdma-core writes 4, 6 and 6 digits; any count from 1 to 8 is accepted,
// as its sscanf("%x") does) within 16, 24 and 24 bits; the GID is exactly
// 32 hex digits. Bytes after the NUL are ignored, as sscanf ignores them.
// Anything else is a *MessageError.
func ParseMessage(msg []byte) (Dest, error) {
	var d Dest
	fail := func(format string, args ...any) (Dest, error) {
		return Dest{}, &MessageError{Msg: bytes.Clone(msg), Reason: fmt.Sprintf(format, args...)}
	}
	if len(msg) != MsgSize {
		return fail("%d bytes, want %d", len(msg), MsgSize)
	}
	end := bytes.IndexByte(msg, 0)
	if end < 0 {
		return fail("no NUL terminator")
	}
	fields := bytes.Split(msg[:end], []byte{':'})
	if len(fields) != 4 {
		return fail("%d colon-separated fields, want 4 (LID:QPN:PSN:GID)", len(fields))
	}
	names := [3]string{"LID", "QPN", "PSN"}
	bits := [3]int{16, 24, 24}
	var v [3]uint64
	for i := range 3 {
		f := fields[i]
		if len(f) < 1 || len(f) > 8 {
			return fail("%s %q: want 1 to 8 hex digits", names[i], f)
		}
		n, err := strconv.ParseUint(string(f), 16, 32)
		if err != nil {
			return fail("%s %q is not hexadecimal", names[i], f)
		}
		if n >= 1<<bits[i] {
			return fail("%s %#x does not fit in %d bits", names[i], n, bits[i])
		}
		v[i] = n
	}
	d.LID, d.QPN, d.PSN = uint16(v[0]), uint32(v[1]), uint32(v[2])
	g := fields[3]
	if len(g) != 2*len(d.GID) {
		return fail("GID %q: want %d hex digits", g, 2*len(d.GID))
	}
	if _, err := hex.Decode(d.GID[:], g); err != nil {
		return fail("GID %q is not hexadecimal", g)
	}
	return d, nil
}
