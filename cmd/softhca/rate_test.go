package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

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

// TestBusyPollEnvMistyped: a mistyped SOFTHCA_BUSY_POLL stops perf before
// it opens anything.
func TestBusyPollEnvMistyped(t *testing.T) {
	t.Setenv("SOFTHCA_BUSY_POLL", "yes")
	var out, errb bytes.Buffer
	require.Equal(t, exitUsage, runPerf([]string{"write"}, &out, &errb))
	require.Contains(t, errb.String(), `SOFTHCA_BUSY_POLL: invalid argument: "yes" is not 0 or 1`)
}
