package main

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// rateEnv names the environment variable that sets a device's pacing
// rate (hca.Congestion.DeviceRate) for the pingpong and perf commands,
// whose options are rdma-core's and perftest's own.
const rateEnv = "SOFTHCA_RATE"

// rateHelp documents rateEnv in the commands' usage texts.
const rateHelp = `With SOFTHCA_RATE=<rate> (bits per second, with an optional k, M or G,
e.g. 200M), the device paces everything it sends at that rate, for a
path that drains slower than this machine sends and gives no congestion
feedback (UC to rxe in a slow virtual machine).
`

// parseRate parses a rate in bits per second: a decimal number with an
// optional k, M or G (powers of 1000) and an optional "bit/s", "bps" or
// "bit". The empty string is 0 (no rate).
func parseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	for _, unit := range []string{"bit/s", "bps", "bit"} {
		if strings.HasSuffix(t, unit) {
			t = strings.TrimSpace(strings.TrimSuffix(t, unit))
			break
		}
	}
	mult := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult = 1e3
		case 'M':
			mult = 1e6
		case 'G':
			mult = 1e9
		}
		if mult != 1 {
			t = strings.TrimSpace(t[:n-1])
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	v *= mult
	// From 1 kbit/s to 10 Tbit/s: beyond, the pacer's arithmetic in
	// nanoseconds per byte loses its meaning.
	if err != nil || math.IsNaN(v) || v < 1e3 || v > 1e13 {
		return 0, fmt.Errorf("%w: %q is not a rate in bits per second from 1k to 10000G (e.g. 200M)", syscall.EINVAL, s)
	}
	return v, nil
}

// rateFromEnv returns the rate rateEnv sets, 0 if it is unset.
func rateFromEnv() (float64, error) {
	v, err := parseRate(os.Getenv(rateEnv))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", rateEnv, err)
	}
	return v, nil
}
