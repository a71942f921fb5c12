package pingpong

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

func TestResultLines(t *testing.T) {
	// The default run: 4096 bytes, 1000 iterations, 123456 us.
	require.Equal(t,
		"8192000 bytes in 0.12 seconds = 530.84 Mbit/sec\n"+
			"1000 iters in 0.12 seconds = 123.46 usec/iter\n",
		ResultLines(4096, 1000, 123456*time.Microsecond))
	// Sub-microsecond parts are dropped, as gettimeofday has none.
	require.Equal(t, ResultLines(64, 10, 1500*time.Microsecond), ResultLines(64, 10, 1500*time.Microsecond+999*time.Nanosecond))
	// Big runs: bytes is a long long.
	require.Contains(t, ResultLines(65536, 100000, 10*time.Second), "13107200000 bytes in 10.00 seconds = 10485.76 Mbit/sec\n")
	// No iterations, no time: C's inf and nan.
	require.Equal(t, "0 bytes in 0.00 seconds = -nan Mbit/sec\n0 iters in 0.00 seconds = -nan usec/iter\n", ResultLines(4096, 0, 0))
	require.Equal(t, "0 bytes in 0.00 seconds = 0.00 Mbit/sec\n0 iters in 0.00 seconds = inf usec/iter\n", ResultLines(4096, 0, 3*time.Microsecond))
}

func TestCFloat(t *testing.T) {
	require.Equal(t, "inf", cfloat2(math.Inf(1)))
	require.Equal(t, "-inf", cfloat2(math.Inf(-1)))
	require.Equal(t, "nan", cfloat2(math.NaN()))
	require.Equal(t, "-nan", cfloat2(math.Copysign(math.NaN(), -1)))
	require.Equal(t, "0.12", cfloat2(0.123456))
	require.Equal(t, "2.50", cfloat2(2.5))
}

func TestFormatGID(t *testing.T) {
	for in, want := range map[string]string{
		"::ffff:10.77.0.2":       "::ffff:10.77.0.2",
		"::":                     "::",
		"::1":                    "::1",
		"::1.2.3.4":              "::1.2.3.4", // glibc's IPv4-compatible form
		"fe80::5054:ff:fe77:2":   "fe80::5054:ff:fe77:2",
		"2001:db8:0:1:0:0:0:1":   "2001:db8:0:1::1",
		"2001:db8:0:0:1:0:0:1":   "2001:db8::1:0:0:1", // the first of equal runs
		"1:0:2:0:3:0:4:0":        "1:0:2:0:3:0:4:0",   // no run of two
		"1:2:3:4:5:6:7:8":        "1:2:3:4:5:6:7:8",
		"0:0:1:2:3:4:5:6":        "::1:2:3:4:5:6",
		"1:2:3:4:5:6:0:0":        "1:2:3:4:5:6::",
		"::ffff:0:0":             "::ffff:0.0.0.0",
		"0:0:0:0:0:fffe:a4d:2":   "::fffe:a4d:2",
		"64:ff9b::10.77.0.2":     "64:ff9b::a4d:2",
		"fe80:0:0:0:0:0:0:ff":    "fe80::ff",
		"0:0:0:0:0:0:ffff:ffff":  "::255.255.255.255",
		"0:0:0:0:1:0:0:0":        "::1:0:0:0",
		"abcd:ef01:2345:6789::1": "abcd:ef01:2345:6789::1",
		"0:0:0:0:0:0:0:1":        "::1",
		"0:0:0:0:0:0:0:2":        "::2",
		"0:0:0:0:0:0:1:0":        "::0.1.0.0",
		"0:0:0:0:0:ffff:1:0":     "::ffff:0.1.0.0",
		"1::":                    "1::",
		"0:1:0:0:0:0:0:0":        "0:1::",
		"0:0:0:0:0:0:0:ffff":     "::ffff",
		"0:0:0:0:0:1:0:0":        "::1:0:0",
		"ffff:ffff::ffff:ffff":   "ffff:ffff::ffff:ffff",
	} {
		g := verbs.GIDFromAddr(netip.MustParseAddr(in))
		require.Equal(t, want, FormatGID(g), in)
	}
}

func TestAddressLine(t *testing.T) {
	d := Dest{QPN: 0x11, PSN: 0xabc, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.77.0.2"))}
	require.Equal(t, "  local address:  LID 0x0000, QPN 0x000011, PSN 0x000abc, GID ::ffff:10.77.0.2\n", AddressLine("local", d, false))
	require.Equal(t, "  local address:  LID 0x0000, QPN 0x000011, PSN 0x000abc: GID ::ffff:10.77.0.2\n", AddressLine("local", d, true))
	require.Equal(t, "  remote address: LID 0x0000, QPN 0x000011, PSN 0x000abc, GID ::ffff:10.77.0.2\n", AddressLine("remote", d, false))
}
