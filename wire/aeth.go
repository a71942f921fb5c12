package wire

import "encoding/binary"

// AETH is a view of the ACK Extended Transport Header (IBTA 9.3.5,
// 4 bytes), carried by acknowledgements and by the first, last and only
// packets of an RDMA READ response:
//
//	+---------------+-----------------------------------------------+
//	|   Syndrome    |          Message Sequence Number              |
//	+---------------+-----------------------------------------------+
type AETH []byte

// AETHSize is the length of the AETH.
const AETHSize = 4

// Syndrome returns the "Syndrome" field.
func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }

// MSN returns the "Message Sequence Number" field (24 bits).
func (a AETH) MSN() uint32 { return binary.BigEndian.Uint32(a[0:]) & 0xffffff }

// AETHFields holds the AETH's values.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32 // 24 bits
}

// Encode writes the AETH.
func (a AETH) Encode(f *AETHFields) {
	binary.BigEndian.PutUint32(a[0:], uint32(f.Syndrome)<<24|f.MSN&0xffffff)
}

// Fields returns the AETH's values.
func (a AETH) Fields() AETHFields { return AETHFields{a.Syndrome(), a.MSN()} }

// Syndrome is the AETH syndrome (IBTA 9.7.5.1, table 43): bits 6..5 give
// the kind (ACK, RNR NAK, NAK), bits 4..0 its value (credit count, RNR
// timer code, or NAK code). Bit 7 is reserved.
type Syndrome uint8

// AckKind is the kind of an AETH syndrome.
type AckKind uint8

// Syndrome kinds.
const (
	AckKindACK      AckKind = 0
	AckKindRNRNAK   AckKind = 1
	AckKindReserved AckKind = 2
	AckKindNAK      AckKind = 3
)

// NAKCode is the value of a NAK syndrome (IBTA table 44).
type NAKCode uint8

// NAK codes.
const (
	NAKPSNSequenceError  NAKCode = 0
	NAKInvalidRequest    NAKCode = 1
	NAKRemoteAccessError NAKCode = 2
	NAKRemoteOperational NAKCode = 3
	NAKInvalidRDRequest  NAKCode = 4
)

// CreditsInvalid is the ACK credit code meaning "no credit information";
// rxe always sends it.
const CreditsInvalid = 0x1f

// ACKSyndrome returns an ACK syndrome with the given 5-bit credit code.
func ACKSyndrome(credits uint8) Syndrome { return Syndrome(credits & 0x1f) }

// RNRNAKSyndrome returns an RNR NAK syndrome with the 5-bit timer code.
func RNRNAKSyndrome(timer uint8) Syndrome { return Syndrome(0x20 | timer&0x1f) }

// NAKSyndrome returns a NAK syndrome with the given code.
func NAKSyndrome(c NAKCode) Syndrome { return Syndrome(0x60 | uint8(c)&0x1f) }

// Kind returns the syndrome's kind.
func (s Syndrome) Kind() AckKind { return AckKind(s>>5) & 3 }

// Value returns the low five bits: credits, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & 0x1f }

// NAKCode returns the NAK code of a NAK syndrome.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

// String names the syndrome as rxe's and Wireshark's vocabulary does.
func (s Syndrome) String() string {
	switch s.Kind() {
	case AckKindACK:
		return "ACK"
	case AckKindRNRNAK:
		return "RNR NAK timer " + itoa(int(s.Value()))
	case AckKindNAK:
		switch s.NAKCode() {
		case NAKPSNSequenceError:
			return "NAK PSN sequence error"
		case NAKInvalidRequest:
			return "NAK invalid request"
		case NAKRemoteAccessError:
			return "NAK remote access error"
		case NAKRemoteOperational:
			return "NAK remote operational error"
		case NAKInvalidRDRequest:
			return "NAK invalid RD request"
		}
		return "NAK reserved " + itoa(int(s.Value()))
	default: // AckKindReserved
		return "reserved syndrome " + itoa(int(s))
	}
}

// rnrTimerMicros is IBTA table 45: the RNR NAK timer field in microseconds.
// Code 0 is the largest value, 655.36 ms.
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280,
	1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440,
	81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimerMicros returns the minimum RNR NAK delay, in microseconds, that
// the 5-bit timer code stands for (IBTA table 45).
func RNRTimerMicros(code uint8) uint32 { return rnrTimerMicros[code&0x1f] }

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	neg := v < 0
	if neg {
		v = -v
	}
	for v > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		buf[i] = '-'
	}
	return string(buf[i:])
}
