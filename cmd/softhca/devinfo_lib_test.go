package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/hcaenv"
)

// TestDevinfoMatchesIbvDevinfo runs rdma-core's ibv_devinfo on
// softhca's drop-in libibverbs.so.1 (built here, as make libibverbs
// builds it) and softhca devinfo with the same SOFTHCA_* settings: the
// two print the same device, byte for byte, and exit with the same
// status.
func TestDevinfoMatchesIbvDevinfo(t *testing.T) {
	tool, err := exec.LookPath("ibv_devinfo")
	if err != nil {
		skipOrFail(t, "ibv_devinfo is not installed (apt-get install ibverbs-utils)")
	}
	if testing.Short() {
		t.Skip("-short: building the drop-in libibverbs.so.1 takes a while")
	}
	lib := t.TempDir()
	if err := buildDropIn(lib); err != nil {
		skipOrFail(t, "cannot build the drop-in libibverbs.so.1 (needs gcc and libibverbs-dev): "+err.Error())
	}

	// The library binds the device's UDP port when ibv_devinfo opens
	// it: a free one, not 4791, which rxe or a daemon may hold.
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	port := c.LocalAddr().(*net.UDPAddr).Port
	require.NoError(t, c.Close())

	clearSofthcaEnv(t)
	settings := map[string]string{
		hcaenv.VarAddr:   "127.0.0.1",
		hcaenv.VarPort:   strconv.Itoa(port),
		hcaenv.VarDevice: "softhca9",
	}
	for k, v := range settings {
		t.Setenv(k, v)
	}
	env := []string{"LD_LIBRARY_PATH=" + lib}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SOFTHCA_") && !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") {
			env = append(env, kv)
		}
	}
	for k, v := range settings {
		env = append(env, k+"="+v)
	}

	for _, c := range []struct {
		args []string
		// sameStderr: both print the same message (ibv_devinfo's); for
		// usage errors getopt's words and softhca's differ.
		sameStderr bool
	}{
		{nil, true},
		{[]string{"-v"}, true},
		{[]string{"-v", "-i", "1"}, true},
		{[]string{"-d", "softhca9", "-v"}, true},
		{[]string{"-l"}, true},
		{[]string{"-d", "rxe0"}, true},
		{[]string{"-i", "2"}, true},
		{[]string{"-i", "0"}, false},
		{[]string{"-x"}, false},
	} {
		t.Run(strings.Join(append([]string{"ibv_devinfo"}, c.args...), " "), func(t *testing.T) {
			cmd := exec.Command(tool, c.args...)
			cmd.Env = env
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			status := 0
			if err := cmd.Run(); err != nil {
				var ee *exec.ExitError
				require.True(t, errors.As(err, &ee), "%v", err)
				status = ee.ExitCode()
			}
			code, stdout, stderr := runCmd(t, append([]string{"devinfo"}, c.args...)...)
			require.Equal(t, status, code, "exit status; ibv_devinfo's stderr: %s\nsofthca's: %s", errb.String(), stderr)
			if status == 0 || c.sameStderr {
				require.Equal(t, out.String(), stdout, "stdout")
			}
			if c.sameStderr {
				require.Equal(t, errb.String(), stderr, "stderr")
			}
		})
	}
}

// skipOrFail skips the test, or fails it in CI (CI=true), which has the
// tools.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// buildDropIn builds the drop-in libibverbs.so.1 into dir, as make
// libibverbs does.
func buildDropIn(dir string) error {
	pkg, err := filepath.Abs(filepath.Join("..", "..", "libibverbs"))
	if err != nil {
		return err
	}
	ld := "-extldflags '-Wl,--version-script=" + filepath.Join(pkg, "libibverbs.map") + " -Wl,-soname,libibverbs.so.1'"
	cmd := exec.Command("go", "build", "-tags", "libibverbs", "-buildmode=c-shared",
		"-ldflags", ld, "-o", filepath.Join(dir, "libibverbs.so.1"), ".")
	cmd.Dir = pkg
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}
