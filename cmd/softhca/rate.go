package main

import (
	"fmt"
	"os"

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
`

// rateFromEnv returns the rate rateEnv sets, 0 if it is unset.
func rateFromEnv() (float64, error) {
	v, err := hcaenv.ParseRate(os.Getenv(rateEnv))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", rateEnv, err)
	}
	return v, nil
}
