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
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/softhca/softhca/cmd/softhca/internal/headless"
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
	if libDir != "" {
		os.RemoveAll(libDir)
	}
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
	// The default control socket, in the runtime directory TestMain
	// made, where devinfo looks for daemons.
	d := &daemonProc{control: control.SocketPath("softhca0"), stderr: &syncBuffer{}, done: make(chan error, 1)}
	d.cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
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

var (
	libOnce sync.Once
	libDir  string
	libErr  error
)

// dropInLibrary builds the drop-in libibverbs.so.1 once per test binary.
func dropInLibrary() (string, error) {
	libOnce.Do(func() {
		dir, err := os.MkdirTemp("", "softhca-e2e-lib-") // shared by all tests; TestMain removes it
		if err != nil {
			libErr = err
			return
		}
		libDir = dir
		libErr = buildDropIn(dir)
	})
	return libDir, libErr
}

// e2eAddrs are the test's addresses: the daemon on 127.0.0.1, the
// clients' devices on 127.0.0.2, each on a free UDP port.
type e2eAddrs struct {
	daemonPort, clientPort int
	pingpongPort, perfPort int
	longPort               int // a pingpong responder whose runs outlast the test
}

func (a e2eAddrs) listen() string { return fmt.Sprintf("127.0.0.1:%d", a.daemonPort) }

// clientDevice are softhca pingpong's and perf's flags for the client's
// device.
func (a e2eAddrs) clientDevice() []string {
	return []string{"--addr", fmt.Sprintf("127.0.0.2:%d", a.clientPort), "--peer-port", fmt.Sprint(a.daemonPort)}
}

// runDevice are softhca run's flags for an unmodified program's device.
func (a e2eAddrs) runDevice(lib string) []string {
	return []string{"run", "--addr", "127.0.0.2", "--port", fmt.Sprint(a.clientPort), "--peer-port", fmt.Sprint(a.daemonPort), "--lib", lib, "--"}
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the softhca binary")
	}
	a := e2eAddrs{daemonPort: freeUDPPort(t, "127.0.0.1"), clientPort: freeUDPPort(t, "127.0.0.2"),
		pingpongPort: freeTCPPort(t), perfPort: freeTCPPort(t), longPort: freeTCPPort(t)}
	listen := a.listen()
	pp := fmt.Sprintf("rc -g 1 -n 100 -s 4096 -p %d", a.pingpongPort)
	pf := fmt.Sprintf("write_bw -n 200 -s 65536 -p %d", a.perfPort)
	long := fmt.Sprintf("rc -g 1 -n 100000000 -s 64 -p %d", a.longPort)
	d := startDaemon(t, "--listen", listen, "--peer-port", fmt.Sprint(a.clientPort), "--http", "127.0.0.1:0",
		"--metrics", "127.0.0.1:0", "--region", "tgt:64K:rwa", "--log-format", "json",
		"--pingpong", pp, "--perftest", pf, "--pingpong", long)
	require.Contains(t, d.banner, "softhca serve: softhca0 on UDP "+listen)

	// A second daemon on the same address fails at once, with exit status 3.
	code, _, errs := runBinary(t, "serve", "--listen", listen, "--http", "", "--control", filepath.Join(t.TempDir(), "2.sock"))
	require.Equal(t, exitInUse, code, errs)
	require.Contains(t, errs, "UDP "+listen+" is in use")

	// A trace of the first exchange, as pcap.
	ctl := "--control=" + d.control
	pcapFile := filepath.Join(t.TempDir(), "e2e.pcap")
	trace := exec.Command(softhcaBinary(t), "trace", ctl, "-c", "4", "-w", pcapFile)
	var traceOut, traceErr strings.Builder
	trace.Stdout, trace.Stderr = &traceOut, &traceErr
	require.NoError(t, trace.Start())
	t.Cleanup(func() { _ = trace.Process.Kill() })

	// softhca's clients against the responders, twice for pingpong.
	for i := range 2 {
		code, out, errs := runBinary(t, append(append([]string{"pingpong"}, strings.Fields(pp)...), append(a.clientDevice(), "127.0.0.1")...)...)
		require.Equal(t, 0, code, "pingpong %d: %s%s\ndaemon: %s", i, out, errs, d.stderr)
		require.Contains(t, out, "100 iters in")
	}
	code, out, errs := runBinary(t, append(append([]string{"perf"}, strings.Fields(pf)...), append(a.clientDevice(), "127.0.0.1")...)...)
	require.Equal(t, 0, code, "perf: %s%s\ndaemon: %s", out, errs, d.stderr)
	require.Contains(t, out, " 65536      200 ")

	require.NoError(t, trace.Wait(), traceErr.String())
	lines := strings.Split(strings.TrimSpace(traceOut.String()), "\n")
	require.Len(t, lines, 4, traceOut.String())
	for _, l := range lines {
		require.Regexp(t, `ms  127\.0\.0\.1:\d+ (->|<-) 127\.0\.0\.2:\d+  RC `, l)
	}
	fi, err := os.Stat(pcapFile)
	require.NoError(t, err)
	require.Greater(t, fi.Size(), int64(24+4*(16+60)), "a pcap header and four frames")

	// rdma-core's and perftest's unmodified clients, through the drop-in
	// library, where the tools and a C compiler are installed.
	t.Run("unmodified", func(t *testing.T) {
		for _, tool := range []string{"ibv_rc_pingpong", "ib_write_bw"} {
			if _, err := exec.LookPath(tool); err != nil {
				skipOrFail(t, tool+" is not installed (apt-get install ibverbs-utils perftest)")
			}
		}
		lib, err := dropInLibrary()
		if err != nil {
			skipOrFail(t, "cannot build the drop-in libibverbs.so.1 (needs gcc and libibverbs-dev): "+err.Error())
		}
		code, out, errs := runBinary(t, append(a.runDevice(lib), "ibv_rc_pingpong", "-g", "1", "-n", "100", "-s", "4096",
			"-p", fmt.Sprint(a.pingpongPort), "127.0.0.1")...)
		require.Equal(t, 0, code, "ibv_rc_pingpong: %s%s\ndaemon: %s", out, errs, d.stderr)
		require.Contains(t, out, "100 iters in")
		code, out, errs = runBinary(t, append(a.runDevice(lib), "ib_write_bw", "-n", "200", "-s", "65536",
			"-p", fmt.Sprint(a.perfPort), "127.0.0.1")...)
		require.Equal(t, 0, code, "ib_write_bw: %s%s\ndaemon: %s", out, errs, d.stderr)
		require.Contains(t, out, " 65536      200 ")
	})

	// The clients, text and JSON.
	code, out, errs = runBinary(t, "status", ctl)
	require.Equal(t, 0, code, errs)
	require.Contains(t, out, "softhca0: serving on UDP "+listen)
	require.Contains(t, out, "region    tgt addr 0x")
	require.Regexp(t, `service   pingpong rc .* \([1-9]\d* served\)`, out)
	code, out, _ = runBinary(t, "status", "-j", ctl)
	require.Equal(t, 0, code)
	var st control.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, listen, st.Listen)
	require.NotEmpty(t, st.HTTP)
	require.NotEmpty(t, st.Metrics)
	require.GreaterOrEqual(t, st.Services[0].Served, uint64(2))
	require.GreaterOrEqual(t, st.Services[1].Served, uint64(1))
	code, out, _ = runBinary(t, "res", "mr", ctl)
	require.Equal(t, 0, code)
	require.Contains(t, out, "dev softhca0 rkey ")
	require.Contains(t, out, "mrlen 65536 pdn 1 name tgt")
	code, out, _ = runBinary(t, "stat", ctl)
	require.Equal(t, 0, code)
	require.Regexp(t, `^link softhca0/1 sent_pkts [1-9]\d* rcvd_pkts [1-9]\d* `, out)
	code, out, _ = runBinary(t, "stat", "-j", ctl)
	require.Equal(t, 0, code)
	var stat control.Stat
	require.NoError(t, json.Unmarshal([]byte(out), &stat))
	require.Positive(t, stat.Counters["rcvd_pkts"])
	code, out, _ = runBinary(t, "devinfo", "-v", "-d", "softhca0")
	require.Equal(t, 0, code)
	require.Contains(t, out, "GID[  1]:\t\t::ffff:127.0.0.1, RoCE v2") // the daemon's device

	// The web page and the metrics.
	resp, err := http.Get("http://" + st.HTTP + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get("http://" + st.Metrics + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// (The pingpong responder's next run has its objects made already,
	// as rdma-core's server makes them before it waits for a client.)
	require.Regexp(t, `softhca_objects\{device="softhca0",kind="mr"\} [1-9]`, string(body))
	require.Regexp(t, `softhca_rcvd_pkts_total\{device="softhca0"\} [1-9]`, string(body))

	// A client still running when the daemon stops: its QP on the
	// daemon's side is connected (res shows it in RTS) when SIGTERM
	// comes; the daemon flushes it, finds every work request completed,
	// exits 0 and removes its socket.
	longCli := exec.Command(softhcaBinary(t), append(append([]string{"pingpong"}, strings.Fields(long)...), append(a.clientDevice(), "127.0.0.1")...)...)
	longOut, err := longCli.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, longCli.Start())
	t.Cleanup(func() { _ = longCli.Process.Kill(); _ = longCli.Wait() })
	br := bufio.NewReader(longOut)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "the long pingpong ended before it connected")
		if strings.Contains(line, "remote address") {
			break // the client connected its QP: the daemon's is in RTR or RTS
		}
	}
	go func() { _, _ = io.Copy(io.Discard, br) }()
	code, out, _ = runBinary(t, "res", "qp", "-j", ctl)
	require.Equal(t, 0, code)
	var qps []control.QP
	require.NoError(t, json.Unmarshal([]byte(out), &qps))
	// The long pingpong's QP, and perhaps the one the first responder's
	// next run has made by now while it waits for a client (as
	// rdma-core's server does; that run starts as the last client ends,
	// so it may not have).
	states := map[string]int{}
	for _, q := range qps {
		states[q.State]++
	}
	require.Equal(t, 1, states["RTS"], out)
	require.LessOrEqual(t, states["INIT"], 1, out)
	require.Len(t, qps, states["RTS"]+states["INIT"], out)
	var lq control.QP // the long pingpong's
	for _, q := range qps {
		if q.State == "RTS" {
			lq = q
		}
	}
	// Meanwhile, the web page in a browser shows it running.
	t.Run("web page in a browser", func(t *testing.T) {
		webPageShowsQP(t, st.HTTP, lq, listen, fmt.Sprintf("127.0.0.2:%d", a.clientPort))
	})
	require.Equal(t, 0, d.stop(t), d.stderr.String())
	_, err = os.Stat(d.control)
	require.ErrorIs(t, err, os.ErrNotExist)
	logs := d.stderr.String()
	// Every QP alive at SIGTERM (the long pingpong's, perhaps an idle
	// responder's) flushed, with no work request left and no CQ overrun.
	require.Regexp(t, `"msg":"flushed","qps":[12],"outstanding_wrs":0,"cq_overruns":0`, logs)
	require.Contains(t, logs, `"msg":"stopped"`)
}

// webPageShowsQP loads the daemon's web page (its HTTP address addr) in
// a headless Chromium, as a user would while the QP q exchanges messages
// with a client at peer, and waits until the page shows q's row in RTS
// and the ladder's lines of q's SENDs both ways: one the daemon received
// from peer for q, one it sent to peer's QP. The page must raise no
// JavaScript error, log none to the console and load everything it
// asks for. Without chromium the test skips.
func webPageShowsQP(t *testing.T, addr string, q control.QP, listen, peer string) {
	bin := headless.Find(t)
	began := time.Now()
	b := headless.Launch(t, bin)
	page := b.Open(t, "http://"+addr+"/")
	// What the page shows of q, kept in window.testShown by the condition
	// that saw it: q's row (its cells' text by data-field) and the text
	// of the first ladder line of a SEND each way.
	send := func(dir string, qpn uint32) string {
		return fmt.Sprintf(`(Array.from(document.querySelectorAll('#ladder .packet[data-dir="%s"]'))
			.find((d) => d.textContent.includes("  RC Send Only  qp=%#x ")) || {}).textContent || ""`, dir, qpn)
	}
	row := fmt.Sprintf(`#qps tr[data-qpn="%#x"]`, q.LQPN)
	page.WaitFor(t, fmt.Sprintf(`(window.testShown = {
			row: Object.fromEntries(Array.from(document.querySelectorAll('%s td')).map((td) => [td.dataset.field, td.textContent])),
			state: (document.querySelector('%[1]s') || {dataset: {}}).dataset.state,
			received: %[2]s,
			sent: %[3]s,
		}) && window.testShown.state === "RTS" && window.testShown.row["psn-in"] && window.testShown.row["psn-out"] &&
		window.testShown.received && window.testShown.sent && document.querySelector('#conn').dataset.state === "live"`,
		row, send("received", q.LQPN), send("sent", q.RQPN)))
	var shown struct {
		Row      map[string]string `json:"row"`
		Received string            `json:"received"`
		Sent     string            `json:"sent"`
	}
	require.NoError(t, json.Unmarshal(page.Eval(t, `window.testShown`), &shown))
	require.Equal(t, fmt.Sprintf("%#x", q.LQPN), shown.Row["qpn"])
	require.Equal(t, "RC", shown.Row["type"])
	require.Equal(t, "RTS", shown.Row["state"])
	require.Equal(t, fmt.Sprintf("%#x", q.RQPN), shown.Row["rqpn"])
	require.Equal(t, "127.0.0.2", shown.Row["peer"])
	require.Regexp(t, `^\d+$`, shown.Row["psn-in"])
	require.Regexp(t, `^\d+$`, shown.Row["psn-out"])
	// The ladder: the daemon's address on the left, the client's on the
	// right, the arrow saying which way the packet went.
	local, remote := regexp.QuoteMeta(listen), regexp.QuoteMeta(peer)
	require.Regexp(t, fmt.Sprintf(`^ +\d+\.\d{3} ms  %s <- %s +RC Send Only  qp=%#x psn=\d+ .*len=64$`, local, remote, q.LQPN), shown.Received)
	require.Regexp(t, fmt.Sprintf(`^ +\d+\.\d{3} ms  %s -> %s +RC Send Only  qp=%#x psn=\d+ .*len=64$`, local, remote, q.RQPN), shown.Sent)
	require.Empty(t, b.Problems(), "the page's errors")
	t.Logf("the browser part took %v: %q, %q", time.Since(began).Round(time.Millisecond), shown.Received, shown.Sent)
}
