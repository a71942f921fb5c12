package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConformanceCommand(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"conformance", "-run", "^query_device/"}, &out, &errb)
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errb.String(), out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	require.Regexp(t, `^[1-9]\d* passed, 0 failed, 0 skipped$`, last)
	require.Regexp(t, `(?m)^PASS +query_device/one-port +spec$`, out.String())

	out.Reset()
	code = run([]string{"conformance", "-run", "("}, &out, &errb)
	require.Equal(t, exitUsage, code)
	code = run([]string{"conformance", "extra"}, &out, &errb)
	require.Equal(t, exitUsage, code)
}

func TestConformanceTargetFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--target", "rxe0"}, `--target "rxe0": want softhca or rdma:DEVICE`},
		{[]string{"--target", "rdma:"}, `--target "rdma:": want softhca or rdma:DEVICE`},
		{[]string{"--agent", "/bin/true"}, `--agent and --lib need --target rdma:DEVICE, not "softhca"`},
		{[]string{"--target", "rdma:softhca0", "--lib", "/nonexistent"}, `--lib "/nonexistent"`},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"conformance"}, c.args...), &out, &errb)
		require.Equal(t, exitUsage, code, "%v", c.args)
		require.Contains(t, errb.String(), c.msg, "%v", c.args)
	}
}
