package main

import (
	"bytes"
	"context"
	"math"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{
		"":            0,
		"200M":        200e6,
		"200 Mbit/s":  200e6,
		"1.5G":        1.5e9,
		"1.5Gbps":     1.5e9,
		"64k":         64e3,
		"64K":         64e3,
		"100000000":   100e6,
		" 10Mbit ":    10e6,
		"10000G":      1e13,
		"1e9":         1e9,
		"2.5e8bit/s":  2.5e8,
		"1000":        1000,
		"1000 bit/s":  1000,
		"0.001M":      1000,
		"7.25Mbit/s ": 7.25e6,
	} {
		got, err := parseRate(in)
		require.NoError(t, err, "%q", in)
		require.InDelta(t, want, got, want*1e-12, "%q", in)
	}
	for _, in := range []string{"fast", "-5M", "0", "999", "1T", "20000G", "NaN", "Inf", "M", "10 M M", "200m", "1e400"} {
		_, err := parseRate(in)
		require.ErrorIs(t, err, syscall.EINVAL, "%q", in)
	}
}

// FuzzParseRate: any string is a rate in range or EINVAL, never a panic.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"200M", "1.5Gbps", "", "1e9", "-1", "NaN", "10 M"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseRate(s)
		if err != nil {
			require.ErrorIs(t, err, syscall.EINVAL)
			require.Zero(t, v)
			return
		}
		if v != 0 {
			require.False(t, math.IsNaN(v) || math.IsInf(v, 0))
			require.GreaterOrEqual(t, v, 1e3)
			require.LessOrEqual(t, v, 1e13)
		}
	})
}

// TestRateEnvMistyped: a mistyped SOFTHCA_RATE stops pingpong and perf
// before they open anything, saying what is wrong.
func TestRateEnvMistyped(t *testing.T) {
	t.Setenv(rateEnv, "200 MB/s")
	var out, errb bytes.Buffer
	require.Equal(t, exitFailure, pingpongMain(context.Background(), []string{"rc"}, &out, &errb, nil))
	require.Contains(t, errb.String(), `SOFTHCA_RATE: invalid argument: "200 MB/s" is not a rate`)
	errb.Reset()
	require.Equal(t, exitUsage, runPerf([]string{"write"}, &out, &errb))
	require.Contains(t, errb.String(), `SOFTHCA_RATE: invalid argument: "200 MB/s" is not a rate`)
}
