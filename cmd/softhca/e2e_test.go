package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/stretchr/testify/require"
)

// The end-to-end test runs the softhca binary as a user does: `softhca
// serve` in its own process, and the clients as other processes.

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// softhcaBinary builds the softhca command once per test binary.
func softhcaBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		// One build for every test of the binary, so not t.TempDir,
		// which ends with the test that made it; TestMain removes it.
		dir, err := os.MkdirTemp("", "softhca-e2e-") //nolint:usetesting // shared by all tests, removed by TestMain
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "softhca")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

func TestMain(m *testing.M) {
	// Daemons this machine runs (their sockets in /run/softhca or the
	// user's runtime directory) stay out of the tests: devinfo, status and
	// the other clients look for daemons there.
	rt, err := os.MkdirTemp("", "softhca-xdg-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_RUNTIME_DIR", rt)
	code := m.Run()
	os.RemoveAll(rt)
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// freeUDPPort returns a UDP port free on addr now.
func freeUDPPort(t *testing.T, addr string) int {
	t.Helper()
	c, err := net.ListenPacket("udp", addr+":0")
	require.NoError(t, err)
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// daemonProc is `softhca serve` running as a process.
type daemonProc struct {
	cmd     *exec.Cmd
	control string
	stderr  *syncBuffer
	banner  string // the line serve prints once it serves
	done    chan error
}

// startDaemon starts softhca serve with args and waits for its banner.
func startDaemon(t *testing.T, args ...string) *daemonProc {
	t.Helper()
	bin := softhcaBinary(t)
	d := &daemonProc{control: filepath.Join(t.TempDir(), "e2e.sock"), stderr: &syncBuffer{}, done: make(chan error, 1)}
	d.cmd = exec.Command(bin, append([]string{"serve", "--control", d.control}, args...)...)
	d.cmd.Stderr = d.stderr
	stdout, err := d.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, d.cmd.Start())
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "serve ended before serving:\n%s", d.stderr)
	d.banner = line
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return d
}

// runBinary runs the binary and returns its exit status and output.
func runBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(softhcaBinary(t), args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, out.String(), errb.String()
}

// stop sends SIGTERM and returns the exit status.
func (d *daemonProc) stop(t *testing.T) int {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-d.done:
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return ee.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not stop within 30 s of SIGTERM:\n%s", d.stderr)
		return -1
	}
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the softhca binary")
	}
	port := freeUDPPort(t, "127.0.0.1")
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	d := startDaemon(t, "--listen", listen, "--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--region", "tgt:64K:rwa", "--log-format", "json")
	require.Contains(t, d.banner, "softhca serve: softhca0 on UDP "+listen)

	// A second daemon on the same address fails at once, with exit status 3.
	code, _, errs := runBinary(t, "serve", "--listen", listen, "--http", "", "--control", filepath.Join(t.TempDir(), "2.sock"))
	require.Equal(t, exitInUse, code, errs)
	require.Contains(t, errs, "UDP "+listen+" is in use")

	// The clients, text and JSON.
	ctl := "--control=" + d.control
	code, out, errs := runBinary(t, "status", ctl)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "softhca0: serving on UDP "+listen)
	require.Contains(t, out, "region    tgt addr 0x")
	code, out, _ = runBinary(t, "status", "-j", ctl)
	require.Equal(t, 0, code)
	var st control.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, listen, st.Listen)
	require.NotEmpty(t, st.HTTP)
	require.NotEmpty(t, st.Metrics)
	code, out, _ = runBinary(t, "res", "mr", ctl)
	require.Equal(t, 0, code)
	require.Contains(t, out, "dev softhca0 rkey ")
	require.Contains(t, out, "mrlen 65536 pdn 1 name tgt")
	code, out, _ = runBinary(t, "stat", "-j", ctl)
	require.Equal(t, 0, code)
	var stat control.Stat
	require.NoError(t, json.Unmarshal([]byte(out), &stat))
	require.Equal(t, "softhca0", stat.Device)

	// The web page and the metrics.
	resp, err := http.Get("http://" + st.HTTP + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get("http://" + st.Metrics + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(body), `softhca_objects{device="softhca0",kind="mr"} 1`)

	// SIGTERM: exit 0, the socket removed, the stop logged.
	require.Equal(t, 0, d.stop(t), d.stderr.String())
	_, err = os.Stat(d.control)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Contains(t, d.stderr.String(), `"msg":"stopped"`)
}
