package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/cmd/softhca/internal/pingpong"
	"github.com/softhca/softhca/verbs"
)

// TestParsePingpong checks that the options the interop harness passes
// reach the pingpong configuration, over rdma-core's defaults.
func TestParsePingpong(t *testing.T) {
	cfg, err := parsePingpong("rc", []string{"-g", "1", "-p", "18601", "-s", "65536", "-n", "20", "-c", "-m", "1024", "-e", "10.77.0.2"})
	require.NoError(t, err)
	want := pingpong.NewConfig(pingpong.RC)
	want.GIDIndex, want.Port, want.Size, want.Iters, want.Validate, want.MTU, want.Events, want.ServerName =
		1, 18601, 65536, 20, true, verbs.MTU1024, true, "10.77.0.2"
	require.Equal(t, want, cfg)

	// The server: no host; ud's default size; srq's -q.
	cfg, err = parsePingpong("ud", []string{"-g", "1", "-p", "18602"})
	require.NoError(t, err)
	want = pingpong.NewConfig(pingpong.UD)
	want.GIDIndex, want.Port = 1, 18602
	require.Equal(t, want, cfg)
	cfg, err = parsePingpong("srq", []string{"-q", "4"})
	require.NoError(t, err)
	require.Equal(t, uint32(4), cfg.NumQP)
}

func TestParsePingpongErrors(t *testing.T) {
	for _, tc := range []struct {
		mode string
		args []string
		want string
	}{
		{"xrc", nil, `unknown pingpong mode "xrc"`},
		{"rc", []string{"-m", "1500"}, "-m 1500 is not 256, 512, 1024, 2048 or 4096"},
		{"rc", []string{"-x", "1"}, "flag provided but not defined: -x"},
		{"rc", []string{"-s", "many"}, `invalid value "many" for flag -s`},
		{"rc", []string{"10.77.0.2", "10.77.0.3"}, "one server at most"},
	} {
		_, err := parsePingpong(tc.mode, tc.args)
		require.ErrorContains(t, err, tc.want, "%s %q", tc.mode, tc.args)
	}
}

// TestUsage checks the command lines refused before a TAP is opened.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: interoptap"},
		{[]string{"-addr", "10.77.0.10", "pingpong", "rc"}, "usage: interoptap"},
		{[]string{"-tap", "shsh0", "pingpong", "rc"}, "usage: interoptap"},
		{[]string{"-tap", "shsh0", "-addr", "10.77.0.10", "pingpong"}, "usage: interoptap"},
		{[]string{"-tap", "shsh0", "-addr", "10.77.0", "pingpong", "rc"}, "-addr: ParseAddr"},
		{[]string{"-tap", "shsh0", "-addr", "10.77.0.10", "ping", "rc"}, `unknown tool "ping"`},
		{[]string{"-tap", "shsh0", "-addr", "10.77.0.10", "perf", "copy"}, "perf:"},
		{[]string{"-tap", "shsh0", "-addr", "10.77.0.10", "perf", "write", "--no-such-option"}, "perf ib_write_bw:"},
		{[]string{"-tap", "shsh0", "-addr", "10.77.0.10", "pingpong", "rc", "-m", "9000"}, "-m 9000"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, exitUsage, code, "%q: %s", tc.args, stderr.String())
		require.True(t, strings.Contains(stderr.String(), tc.want), "%q: stderr %q, want %q", tc.args, stderr.String(), tc.want)
		require.Empty(t, stdout.String())
	}
}
