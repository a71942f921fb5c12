package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/softhca/softhca/cmd/softhca/internal/daemon"
	"github.com/softhca/softhca/cmd/softhca/internal/devinfo"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for a daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serving is serve running in the test's process.
type serving struct {
	d              *daemon.Daemon
	control        string
	cancel         context.CancelFunc
	done           chan int
	stdout, stderr *syncBuffer
}

// startServe runs serve with args (and a control socket in a temporary
// directory, no web page) until the test ends or stop is called.
func startServe(t *testing.T, args ...string) *serving {
	t.Helper()
	s := &serving{control: filepath.Join(t.TempDir(), "s.sock"), done: make(chan int, 1),
		stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	ready := make(chan *daemon.Daemon, 1)
	args = append([]string{"--control", s.control, "--http", "", "--listen", "127.0.0.1:0"}, args...)
	go func() { s.done <- serveMain(ctx, args, s.stdout, s.stderr, func(d *daemon.Daemon) { ready <- d }) }()
	select {
	case s.d = <-ready:
	case code := <-s.done:
		t.Fatalf("serve exited with %d:\n%s%s", code, s.stdout, s.stderr)
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop ends serve as SIGTERM does and returns its exit status.
func (s *serving) stop(t *testing.T) int {
	s.cancel()
	code, ok := <-s.done
	if ok {
		close(s.done)
		s.done = make(chan int, 1)
		s.done <- code
		return code
	}
	return 0
}

// TestServeAndClients: a daemon serves; status, res and stat describe it
// in text and JSON; stopping exits 0 and removes the socket.
func TestServeAndClients(t *testing.T) {
	s := startServe(t, "--region", "tgt:4K:rw", "--name", "lab0")
	require.Contains(t, s.stdout.String(), "softhca serve: lab0 on UDP 127.0.0.1:")
	require.Contains(t, s.stderr.String(), "msg=serving device=lab0")
	dev := s.d.Device()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(32, nil, nil, 0)
	require.NoError(t, err)
	qp, err := pd.CreateQP(&hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeUD,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)

	ctl := "--control=" + s.control
	code, out, errs := runCmd(t, "status", ctl)
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, "lab0: serving on UDP "+s.d.Listen().String())
	require.Contains(t, out, "objects   pd 2 cq 1 qp 1 mr 1 srq 0")
	require.Contains(t, out, "region    tgt addr 0x")
	require.Contains(t, out, "access local_write,remote_write,remote_read")
	require.Contains(t, out, "gid 1     ::ffff:127.0.0.1")

	code, out, _ = runCmd(t, "res", ctl)
	require.Equal(t, exitOK, code)
	require.Equal(t, "0: lab0: pd 2 cq 1 qp 1 mr 1 srq 0\n", out)
	code, out, _ = runCmd(t, "res", "qp", ctl)
	require.Equal(t, exitOK, code)
	require.Equal(t, fmt.Sprintf("link lab0/1 lqpn %d type UD state RESET sq-psn 0 pdn %d send-cqn 1 recv-cqn 1 sq-outstanding 0 rq-posted 0 tx-pkts 0 rx-pkts 0 retransmits 0 pid %d comm softhca\n",
		qp.Num(), pd.Handle(), os.Getpid()), out)
	code, out, _ = runCmd(t, "res", "qp", "-j", ctl) // a flag after the object
	require.Equal(t, exitOK, code)
	var qps []control.QP
	require.NoError(t, json.Unmarshal([]byte(out), &qps))
	require.Equal(t, qp.Num(), qps[0].LQPN)
	require.Equal(t, "RESET", qps[0].State)
	code, out, _ = runCmd(t, "res", "mr", ctl)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "mrlen 4096 pdn 1 name tgt addr 0x")
	code, _, errs = runCmd(t, "res", "ah", ctl)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, `unknown object "ah"`)

	code, out, _ = runCmd(t, "stat", ctl)
	require.Equal(t, exitOK, code)
	require.True(t, strings.HasPrefix(out, "link lab0/1 sent_pkts 0 rcvd_pkts 0 duplicate_request 0"), out)
	code, out, _ = runCmd(t, "stat", "-j", ctl)
	require.Equal(t, exitOK, code)
	var st control.Stat
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, "lab0", st.Device)

	require.Equal(t, exitOK, s.stop(t))
	require.Contains(t, s.stderr.String(), "msg=stopped")
	_, err = os.Stat(s.control)
	require.ErrorIs(t, err, os.ErrNotExist)
	code, _, errs = runCmd(t, "status", ctl)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errs, "no softhca daemon is running at "+s.control)
}

// TestServeTwice: a second daemon on the same UDP address fails at once
// with exit status 3 and says what owns the address.
func TestServeTwice(t *testing.T) {
	s := startServe(t)
	var out, errb bytes.Buffer
	code := serveMain(context.Background(), []string{"--listen", s.d.Listen().String(), "--http", "",
		"--control", filepath.Join(t.TempDir(), "second.sock")}, &out, &errb, nil)
	require.Equal(t, exitInUse, code)
	require.Contains(t, errb.String(), "softhca serve: UDP "+s.d.Listen().String()+" is in use")
	// The same control socket, another address.
	errb.Reset()
	code = serveMain(context.Background(), []string{"--listen", "127.0.0.1:0", "--http", "", "--control", s.control}, &out, &errb, nil)
	require.Equal(t, exitInUse, code)
	require.Contains(t, errb.String(), "another softhca daemon answers there")
	code, _, _ = runCmd(t, "status", "--control", s.control)
	require.Equal(t, exitOK, code, "the first daemon still serves")
}

// TestServeUsage: bad flags, values and configuration files are usage
// errors (exit 2) that name what is wrong, and nothing starts.
func TestServeUsage(t *testing.T) {
	dir := t.TempDir()
	n := 0
	conf := func(body string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("c%d.conf", n))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--mtu", "1500"}, "--mtu 1500: want 256, 512, 1024, 2048 or 4096"},
		{[]string{"--region", "x:1Q"}, `invalid value "x:1Q" for flag -region`},
		{[]string{"--listen", "nowhere"}, `listen address "nowhere"`},
		{[]string{"--log-format", "xml"}, `--log-format "xml": want text or json`},
		{[]string{"--log-level", "loud"}, `--log-level "loud"`},
		{[]string{"--name", "a/b"}, `--name "a/b"`},
		{[]string{"--peer-port", "0"}, "--peer-port 0"},
		{[]string{"--trace-ring", "-1"}, "--trace-ring -1"},
		{[]string{"--limit", "max_qp=0"}, "limit max_qp=0: want 1.."},
		{[]string{"--http", "8791"}, `--http "8791": want HOST:PORT`},
		{[]string{"--metrics", "localhost"}, `--metrics "localhost": want HOST:PORT`},
		{[]string{"--region", "a:1K", "--region", "a:2K"}, "--region a: the name is given twice"},
		{[]string{"--run-timeout", "-1s"}, "--run-timeout -1s"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--config", filepath.Join(dir, "missing.conf")}, "missing.conf: no such file"},
		{[]string{"--config", conf("listen 1.2.3.4\n")}, `:1: "listen 1.2.3.4": want key = value`},
		{[]string{"--config", conf("# c\ncolour = blue\n")}, `:2: unknown key "colour"`},
		{[]string{"--config", conf("mtu = 9000\n")}, "--mtu 9000"},
		{[]string{"--config", conf("region = bad\n")}, ":1: region: region \"bad\""},
		{[]string{"--config", conf("config = other\n")}, "cannot name another"},
		{[]string{"--tap", "tap0"}, "--tap tap0 needs --listen IP: the device's own address on the TAP interface's network"},
		{[]string{"--tap", "tap0", "--listen", ":4791"}, "--tap tap0 needs --listen IP"},
		{[]string{"--tap", "tap0", "--listen", "10.9.0.2:4800"}, "--tap tap0: --listen 10.9.0.2:4800: a TAP host receives RoCEv2 on UDP port 4791 only"},
		{[]string{"--tap", "a-name-of-16-bytes", "--listen", "10.9.0.2"}, `--tap: interface name "a-name-of-16-bytes" is longer than 15 bytes`},
		{[]string{"--tap-addr", "fd09::2"}, "--tap-addr and --tap-mac describe the --tap device: give --tap NAME too"},
		{[]string{"--tap-mac", "02:00:00:00:00:01"}, "give --tap NAME too"},
		{[]string{"--tap-addr", "x"}, `invalid value "x" for flag -tap-addr: "x" is not an IP address`},
		{[]string{"--tap", "t", "--listen", "10.9.0.2", "--tap-mac", "nope"}, `--tap-mac: "nope" is not an Ethernet MAC address`},
		{[]string{"--tap", "t", "--listen", "10.9.0.2", "--tap-addr", "ff02::1"}, "--tap-addr ff02::1: not a global unicast address"},
		{[]string{"--tap", "t", "--listen", "10.9.0.2", "--tap-addr", "fd09::2", "--tap-addr", "fd09::2"}, "--tap-addr fd09::2: the address is given twice"},
		{[]string{"--tap", "t", "--listen", "10.9.0.2", "--tap-addr", "10.9.0.2"}, "--tap-addr 10.9.0.2: the address is given twice"},
		{[]string{"--config", conf("tap = tap0\n")}, "--tap tap0 needs --listen IP"},
	} {
		var out, errb bytes.Buffer
		code := serveMain(context.Background(), append([]string{"--control", filepath.Join(dir, "never.sock")}, tc.args...), &out, &errb, nil)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errb.String())
		require.Contains(t, errb.String(), tc.msg, tc.args)
	}
	_, err := os.Stat(filepath.Join(dir, "never.sock"))
	require.ErrorIs(t, err, os.ErrNotExist)
	code, out, errs := runCmd(t, "serve", "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "Exit status: 0 stopped cleanly")
	require.Empty(t, errs, "the usage is printed once, on stdout")
	require.Equal(t, 1, strings.Count(out, "usage: softhca serve"))
}

// TestServeConfigFile: the file sets flags; the command line wins.
func TestServeConfigFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "serve.conf")
	require.NoError(t, os.WriteFile(p, []byte("# lab\nname = fromfile\nregion = a:1K:r\nregion = b:2K\ntrace-ring = 8\n"), 0o600))
	s := startServe(t, "--config", p, "--trace-ring", "16")
	var st control.Status
	c, err := control.Dial(s.control)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Call(context.Background(), control.Request{Op: control.OpStatus}, &st))
	require.Equal(t, "fromfile", st.Device)
	require.Len(t, st.Regions, 2)
	require.Equal(t, uint64(2048), st.Regions[1].Length)
}

// TestServeTapFlags: --tap, --tap-addr and --tap-mac, on the command line
// and in a configuration file, make the daemon's Tap; the daemon opens
// the interface they name (an interface that is not a TAP is refused,
// which needs no privileges to find out: exit 1 with link/tap's reason).
func TestServeTapFlags(t *testing.T) {
	p := filepath.Join(t.TempDir(), "serve.conf")
	require.NoError(t, os.WriteFile(p, []byte("tap = lo\nlisten = 10.9.0.2\ntap-addr = fd09::2\ntap-addr = [fd09::3]\ntap-mac = 02:00:0a:09:00:99\n"), 0o600))
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveFlags
	f.register(fs)
	require.NoError(t, fs.Parse([]string{"--config", p, "--tap", "tap7"}))
	require.NoError(t, applyConfigFile(fs, p))
	cfg, _, err := f.daemonConfig(io.Discard)
	require.NoError(t, err)
	require.Equal(t, netip.MustParseAddrPort("10.9.0.2:4791"), cfg.Listen)
	require.Equal(t, daemon.Tap{Name: "tap7", Addrs: []netip.Addr{netip.MustParseAddr("fd09::2"), netip.MustParseAddr("fd09::3")},
		MAC: [6]byte{2, 0, 10, 9, 0, 0x99}}, cfg.Tap, "the command line's --tap wins over the file's")

	var out, errb bytes.Buffer
	code := serveMain(context.Background(), []string{"--config", p, "--control", filepath.Join(t.TempDir(), "s.sock"), "--http", ""}, &out, &errb, nil)
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", &out, &errb)
	require.Equal(t, "softhca serve: TAP interface lo: link/tap: lo exists and is not a TUN/TAP interface: invalid argument\n", errb.String())
	require.Empty(t, out.String())
}

// TestClientsUsage: the clients' usage errors and their -h.
func TestClientsUsage(t *testing.T) {
	for _, name := range []string{"status", "res", "stat"} {
		code, out, errs := runCmd(t, name, "-h")
		require.Equal(t, exitOK, code)
		require.Contains(t, out, "usage: softhca "+name)
		require.Empty(t, errs, "the usage is printed once, on stdout")
		require.Contains(t, out, "Examples:")
		code, _, errs = runCmd(t, name, "--nope")
		require.Equal(t, exitUsage, code)
		require.Contains(t, errs, "flag provided but not defined: -nope")
		require.Equal(t, 1, strings.Count(errs, "usage: softhca "+name), "the usage, once, after the error")
	}
	code, _, errs := runCmd(t, "res", "qp", "cq", "--control", "/nonexistent.sock")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, `unexpected argument "cq"`)
	code, _, errs = runCmd(t, "stat", "--control", "/nonexistent/x.sock")
	require.Equal(t, exitFailure, code)
	require.Contains(t, errs, "no softhca daemon is running at /nonexistent/x.sock")
}

// TestClientsNameTheSocketOnce: a socket that closes the connection
// without an answer is named once in the message (it was named twice, once by
// the client and once by the command).
func TestClientsNameTheSocketOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mute.sock")
	l, err := net.Listen("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// Read the request, so that the close is an EOF, not a reset.
			_, _ = bufio.NewReader(c).ReadBytes('\n')
			c.Close()
		}
	}()
	for _, args := range [][]string{{"status"}, {"res"}, {"res", "qp"}, {"stat"}} {
		code, _, errs := runCmd(t, append(args, "--control", path)...)
		require.Equal(t, exitFailure, code, "%v", args)
		require.Equal(t, "softhca "+args[0]+": "+path+": the daemon closed the connection: EOF\n", errs, "%v", args)
	}
}

// TestDevinfoFromDaemon: with a daemon running, devinfo describes the
// daemon's device (found by its socket in the runtime directory), and
// -d names it.
func TestDevinfoFromDaemon(t *testing.T) {
	rt := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", rt)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *daemon.Daemon, 1)
	done := make(chan int, 1)
	var out, errb syncBuffer
	go func() {
		done <- serveMain(ctx, []string{"--name", "lab7", "--listen", "127.0.0.9:0", "--http", ""}, &out, &errb,
			func(d *daemon.Daemon) { ready <- d })
	}()
	var d *daemon.Daemon
	select {
	case d = <-ready:
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, errb.String())
	}
	defer func() { cancel(); <-done }()
	require.Equal(t, filepath.Join(rt, "softhca", "lab7.sock"), d.ControlPath())
	want, err := devinfo.FromDevice(d.Device())
	require.NoError(t, err)
	var wantText bytes.Buffer
	require.NoError(t, devinfo.Write(&wantText, want, true))
	code, text, errs := runCmd(t, "devinfo", "-v")
	require.Equal(t, 0, code, errs)
	require.Equal(t, wantText.String(), text)
	require.Contains(t, text, "hca_id:\tlab7")
	require.Contains(t, text, "GID[  1]:\t\t::ffff:127.0.0.9, RoCE v2")
	code, _, _ = runCmd(t, "devinfo", "-d", "lab7")
	require.Equal(t, 0, code)
	code, out2, _ := runCmd(t, "devinfo", "-l")
	require.Equal(t, 0, code)
	require.Contains(t, out2, "lab7")
}

// freeTCPPort returns a TCP port free now.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestServeResponders: the daemon's pingpong and perftest responders
// serve softhca's clients again and again on the daemon's device, and
// status counts them.
func TestServeResponders(t *testing.T) {
	peerPort := freeUDPPort(t, "127.0.0.2")
	ppPort, pfPort := freeTCPPort(t), freeTCPPort(t)
	s := startServe(t, "--peer-port", fmt.Sprint(peerPort),
		"--pingpong", fmt.Sprintf("rc -g 1 -n 50 -s 1024 -p %d", ppPort),
		"--perftest", fmt.Sprintf("write_bw -n 200 -s 4096 -p %d", pfPort))
	daemonPort := s.d.Listen().Port()
	client := []string{"--addr", fmt.Sprintf("127.0.0.2:%d", peerPort), "--peer-port", fmt.Sprint(daemonPort)}
	for i := range 2 {
		code, out, errs := runCmd(t, append([]string{"pingpong", "rc", "-g", "1", "-n", "50", "-s", "1024", "-p", fmt.Sprint(ppPort)}, append(client, "127.0.0.1")...)...)
		require.Equal(t, exitOK, code, "run %d: %s%s\ndaemon: %s", i, out, errs, s.stderr.String())
		require.Contains(t, out, "50 iters in")
	}
	code, out, errs := runCmd(t, append([]string{"perf", "write_bw", "-n", "200", "-s", "4096", "-p", fmt.Sprint(pfPort)}, append(client, "127.0.0.1")...)...)
	require.Equal(t, exitOK, code, "%s%s\ndaemon: %s", out, errs, s.stderr.String())
	require.Contains(t, out, " 4096       200 ")
	var st control.Status
	c, err := control.Dial(s.control)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Call(context.Background(), control.Request{Op: control.OpStatus}, &st))
	require.Len(t, st.Services, 2)
	require.Equal(t, fmt.Sprintf("pingpong rc -g 1 -n 50 -s 1024 -p %d", ppPort), st.Services[0].Name)
	require.Equal(t, uint64(2), st.Services[0].Served)
	require.Equal(t, uint64(1), st.Services[1].Served)
	require.Equal(t, exitOK, s.stop(t))
	require.Contains(t, s.stderr.String(), "msg=flushed")
	require.Contains(t, s.stderr.String(), "outstanding_wrs=0 cq_overruns=0")
}

// TestServeResponderUsage: responder arguments that cannot serve are
// usage errors.
func TestServeResponderUsage(t *testing.T) {
	for _, tc := range []struct{ flag, args, msg string }{
		{"--pingpong", "xx", `unknown pingpong "xx"`},
		{"--pingpong", "rc 10.0.0.1", "names a host"},
		{"--pingpong", "rc --addr 127.0.0.5", "describe a device of its own"},
		{"--pingpong", "rc -w x.pcap", "-w is not for a responder"},
		{"--perftest", "", "the arguments of softhca perf's server"},
		{"--perftest", "frob", "frob"},
		{"--perftest", "write_bw 10.0.0.1", "names a host"},
		{"--perftest", "write_bw -p 0", "a responder needs a port"},
	} {
		var out, errb bytes.Buffer
		code := serveMain(context.Background(), []string{"--control", filepath.Join(t.TempDir(), "x.sock"), tc.flag, tc.args}, &out, &errb, nil)
		require.Equal(t, exitUsage, code, "%s %q: %s", tc.flag, tc.args, errb.String())
		require.Contains(t, errb.String(), tc.msg)
	}
}
