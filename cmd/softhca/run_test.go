package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeLib makes a directory holding a file named libibverbs.so.1.
func fakeLib(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "libibverbs.so.1"), nil, 0o644))
	return dir
}

func TestEnvPrintsTheSettings(t *testing.T) {
	dir := fakeLib(t)
	t.Setenv("LD_LIBRARY_PATH", "/opt/x")
	var out, errb bytes.Buffer
	require.Equal(t, exitOK, run([]string{"env", "--addr", "127.0.0.2", "--mtu", "1024", "--port", "4792", "--lib", dir}, &out, &errb), errb.String())
	require.Equal(t, "export SOFTHCA_ADDR=127.0.0.2\nexport SOFTHCA_PORT=4792\nexport SOFTHCA_MTU=1024\nexport LD_LIBRARY_PATH="+dir+":/opt/x\n", out.String())
}

func TestRunPutsTheProgramOnTheDevice(t *testing.T) {
	dir := fakeLib(t)
	t.Setenv("LD_LIBRARY_PATH", "")
	var out, errb bytes.Buffer
	code := run([]string{"run", "--addr", "127.0.0.3", "--device", "softhca5", "--lib", filepath.Join(dir, "libibverbs.so.1"), "--",
		"sh", "-c", `echo "$SOFTHCA_ADDR $SOFTHCA_DEVICE $LD_LIBRARY_PATH"; exit 3`}, &out, &errb)
	require.Equal(t, 3, code, "the program's exit status: %s", errb.String())
	require.Equal(t, "127.0.0.3 softhca5 "+dir+"\n", out.String())
}

func TestRunRefuses(t *testing.T) {
	dir := fakeLib(t)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"run", "--lib", dir, "--", "true"}, exitUsage, "--addr is required"},
		{[]string{"run", "--addr", "127.0.0.1", "--lib", dir}, exitUsage, "no program to run"},
		{[]string{"run", "--addr", "127.0.0.1", "--mtu", "1500", "--lib", dir, "--", "true"}, exitUsage, `SOFTHCA_MTU="1500"`},
		{[]string{"run", "--addr", "0.0.0.0", "--lib", dir, "--", "true"}, exitUsage, "SOFTHCA_ADDR"},
		{[]string{"run", "--addr", "127.0.0.1", "--rate", "fast", "--lib", dir, "--", "true"}, exitUsage, "SOFTHCA_RATE"},
		{[]string{"run", "--addr", "127.0.0.1", "--lib", t.TempDir(), "--", "true"}, exitFailure, "make libibverbs"},
		{[]string{"run", "--addr", "127.0.0.1", "--lib", dir, "--", filepath.Join(dir, "no-such-program")}, 127, "no such file"},
		{[]string{"run", "--addr", "127.0.0.1", "--lib", dir, "--", ""}, 127, `softhca run: the program to run is named "" (an empty argument)`},
		{[]string{"env", "--addr", "127.0.0.1", "--lib", dir, "extra"}, exitUsage, "unexpected argument"},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, c.code, run(c.args, &out, &errb), "%v: %s", c.args, errb.String())
		require.Contains(t, errb.String(), c.msg, "%v", c.args)
		require.False(t, strings.Contains(errb.String(), "goroutine"), "no stack trace")
	}
}
