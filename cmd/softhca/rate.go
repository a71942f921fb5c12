package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/softhca/softhca/hcaenv"
)

// rateEnv names the environment variable that sets a device's pacing
// rate (hca.Congestion.DeviceRate) for the pingpong and perf commands,
// whose options are rdma-core's and perftest's own.
const rateEnv = hcaenv.VarRate

// rateHelp documents rateEnv in the commands' usage texts.
const rateHelp = `With SOFTHCA_RATE=<rate> (bits per second, with an optional k, M or G,
e.g. 200M), the device paces everything it sends at that rate, for a
path that drains slower than this machine sends and gives no congestion
feedback (UC to rxe in a slow virtual machine).
With SOFTHCA_BUSY_POLL=1, perf polls its completion queues in a loop, as
perftest does, and the device runs its transport inside the empty polls.
`

// rateFromEnv returns the rate rateEnv sets, 0 if it is unset.
func rateFromEnv() (float64, error) {
	v, err := hcaenv.ParseRate(os.Getenv(rateEnv))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", rateEnv, err)
	}
	return v, nil
}

// busyPollFromEnv reads SOFTHCA_BUSY_POLL for perf: 1 polls completions
// in a loop that runs the transport, as the drop-in library's C programs
// do (the library's default); unset or 0 sleeps on the completion channel.
func busyPollFromEnv() (bool, error) {
	v := os.Getenv(hcaenv.VarBusyPoll)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s: %w: %q is not 0 or 1", hcaenv.VarBusyPoll, syscall.EINVAL, v)
	}
	return b, nil
}
