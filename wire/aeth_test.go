package wire_test

import (
	"fmt"
	"testing"

	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// TestSyndrome checks every one of the 256 syndrome bytes against IBTA
// table 43: bits 6..5 are the kind (00 ACK, 01 RNR NAK, 10 reserved,
// 11 NAK), bits 4..0 the credit count, timer code or NAK code (table 44),
// bit 7 reserved.
func TestSyndrome(t *testing.T) {
	nakNames := []string{
		"NAK PSN sequence error", "NAK invalid request", "NAK remote access error",
		"NAK remote operational error", "NAK invalid RD request",
	}
	for i := range 256 {
		s := wire.Syndrome(i)
		v := uint8(i & 0x1f)
		require.Equal(t, v, s.Value())
		require.Equal(t, wire.NAKCode(v), s.NAKCode())
		var kind wire.AckKind
		var name string
		switch i >> 5 & 3 {
		case 0:
			kind, name = wire.AckKindACK, "ACK"
		case 1:
			kind, name = wire.AckKindRNRNAK, fmt.Sprintf("RNR NAK timer %d", v)
		case 2:
			kind, name = wire.AckKindReserved, fmt.Sprintf("reserved syndrome %d", i)
		case 3:
			kind = wire.AckKindNAK
			if int(v) < len(nakNames) {
				name = nakNames[v]
			} else {
				name = fmt.Sprintf("NAK reserved %d", v)
			}
		}
		require.Equal(t, kind, s.Kind(), "%#02x", i)
		require.Equal(t, name, s.String(), "%#02x", i)
	}
}

func TestSyndromeConstructors(t *testing.T) {
	for _, tc := range []struct {
		s    wire.Syndrome
		want uint8
		kind wire.AckKind
	}{
		{wire.ACKSyndrome(0), 0x00, wire.AckKindACK},
		{wire.ACKSyndrome(wire.CreditsInvalid), 0x1f, wire.AckKindACK},
		{wire.ACKSyndrome(0xff), 0x1f, wire.AckKindACK},
		{wire.RNRNAKSyndrome(0), 0x20, wire.AckKindRNRNAK},
		{wire.RNRNAKSyndrome(14), 0x2e, wire.AckKindRNRNAK},
		{wire.RNRNAKSyndrome(31), 0x3f, wire.AckKindRNRNAK},
		{wire.RNRNAKSyndrome(0xe1), 0x21, wire.AckKindRNRNAK},
		{wire.NAKSyndrome(wire.NAKPSNSequenceError), 0x60, wire.AckKindNAK},
		{wire.NAKSyndrome(wire.NAKInvalidRequest), 0x61, wire.AckKindNAK},
		{wire.NAKSyndrome(wire.NAKRemoteAccessError), 0x62, wire.AckKindNAK},
		{wire.NAKSyndrome(wire.NAKRemoteOperational), 0x63, wire.AckKindNAK},
		{wire.NAKSyndrome(wire.NAKInvalidRDRequest), 0x64, wire.AckKindNAK},
		{wire.NAKSyndrome(0xff), 0x7f, wire.AckKindNAK},
	} {
		require.Equal(t, wire.Syndrome(tc.want), tc.s)
		require.Equal(t, tc.kind, tc.s.Kind())
	}
}

// TestRNRTimerMicros checks IBTA table 45 (the RNR NAK timer field), the
// whole table and its landmarks.
func TestRNRTimerMicros(t *testing.T) {
	// Milliseconds as the spec prints them, times 100.
	table := [32]uint32{
		65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
		256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
	}
	for code, hundredths := range table {
		require.Equal(t, hundredths*10, wire.RNRTimerMicros(uint8(code)), "code %d", code)
		// Only the low five bits are the code.
		require.Equal(t, hundredths*10, wire.RNRTimerMicros(uint8(code)|0xe0), "code %d", code)
	}
	for _, tc := range []struct {
		code   uint8
		micros uint32
	}{
		{0, 655360}, // 655.36 ms, the longest
		{1, 10},     // 0.01 ms
		{14, 1280},  // 1.28 ms
		{31, 491520},
	} {
		require.Equal(t, tc.micros, wire.RNRTimerMicros(tc.code), "code %d", tc.code)
	}
	// Apart from code 0, the table increases.
	for c := uint8(2); c < 32; c++ {
		require.Greater(t, wire.RNRTimerMicros(c), wire.RNRTimerMicros(c-1))
	}
}
