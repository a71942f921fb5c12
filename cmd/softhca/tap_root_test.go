package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/softhca/softhca/cmd/softhca/internal/pingpong"
	"github.com/softhca/softhca/internal/netpath"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// The commands on real TAP interfaces. These tests need root: each runs
// in fresh network namespaces (netpath.ForTest, which skips without
// root, and fails with CI=true), so that the machine's own interfaces
// and addresses are not touched. The commands run as a user runs them,
// as the built binary under `ip netns exec` (which also mounts the
// namespace's /sys, where link/tap looks for an existing interface),
// except for pingpong, which runs in-process on a thread inside a
// namespace (netpath.Path.Do: every socket the run makes, it makes on
// the calling goroutine) so that the test can put the TAP interface it
// creates on the bridge before any packet needs it.

// requireRoot skips a test that needs root without it, or fails it with
// CI=true, as netpath.ForTest does.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root to open TAP interfaces; CI=true: CI must run the TAP tests as root")
	}
	t.Skip("needs root to open TAP interfaces")
}

// runIn runs the softhca binary with args in side's namespace and
// returns its exit status and output.
func runIn(t *testing.T, p *netpath.Path, side int, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.Namespace(side), softhcaBinary(t)}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, out.String(), errb.String()
}

// tapHostAddr is the address of a TAP host on side 0's network of p (a
// /24, or a /64 for IPv6): the side's own address with last byte b.
func tapHostAddr(a netip.Addr, b byte) netip.Addr {
	x := a.As16()
	x[15] = b
	return netip.AddrFrom16(x).Unmap()
}

// hostCounters are the counters the demo prints for A's TAP host.
var hostCounters = regexp.MustCompile(`A's TAP host: frames in (\d+) \(RoCEv2 (\d+), ARP requests answered (\d+), ARP replies\n` +
	`learned (\d+), dropped (\d+)\); RoCEv2 packets out (\d+); ARP requests sent (\d+);\nneighbours resolved (\d+)\.\n`)

// TestDemoTap runs `softhca demo -tap` in a network namespace: A on the
// TAP interface it creates, B on UDP on the kernel's side of it, every
// step passing; A's host counters show every RoCEv2 packet of the
// ladder crossing the interface and B's MAC resolved by ARP; the pcap
// decodes with every ICRC good, the SVG names both devices, and the
// interface is gone afterwards. Then the same with -loss (A's device
// must keep the interface's GIDs behind the lossy wrapper), and on an
// interface made beforehand, which the demo uses and leaves as it was.
func TestDemoTap(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Unshaped: true})
	dir := t.TempDir()
	pcapFile, svg := filepath.Join(dir, "tap.pcap"), filepath.Join(dir, "tap.svg")
	code, stdout, stderr := runIn(t, p, 0, "demo", "-tap", "-pcap", pcapFile, "-svg", svg)
	checkDemoOK(t, code, stdout, stderr)
	require.Contains(t, stdout, "A is a host of its own on TAP interface softhca-demo0, MAC 02:00:0a:d5:00:02;\n")
	require.Contains(t, stdout, "  A: 10.213.0.2 port 4791    B: 10.213.0.1 port 4791\n")
	require.Contains(t, stdout, "B's GRH area names the sender 10.213.0.2")
	require.NotContains(t, stdout, "icrc BAD")
	require.NotContains(t, stdout, "note:")
	require.Contains(t, stdout, "19 packets sent.")
	m := hostCounters.FindStringSubmatch(stdout)
	require.NotNil(t, m, "A's host counters:\n%s", stdout)
	n := func(i int) int {
		v, err := strconv.Atoi(m[i])
		require.NoError(t, err)
		return v
	}
	fromB, fromA := strings.Count(stdout, " ms  A <- B  "), strings.Count(stdout, " ms  A -> B  ")
	require.Equal(t, 19, fromA+fromB)
	require.Equal(t, fromB, n(2), "every packet B sent reached A's host as a frame")
	require.Equal(t, fromA, n(6), "every packet A sent left as a frame")
	require.GreaterOrEqual(t, n(7), 1, "A asked for B's MAC")
	require.Equal(t, 1, n(8), "A resolved B's MAC")
	require.Equal(t, n(1), n(2)+n(3)+n(4)+n(5), "every frame in has one outcome")

	code, out, errs := runCmd(t, "decode", pcapFile)
	require.Equal(t, exitOK, code, "%s%s", out, errs)
	require.Contains(t, out, pcapFile+": 19 packets, 19 RoCEv2, 19 ok, 0 bad, 0 not RoCEv2")
	var eps []string
	for _, e := range parseSVG(t, svg).byClass("endpoint") {
		eps = append(eps, e.Nodes[0].Text)
	}
	require.Equal(t, []string{"A 10.213.0.2:4791", "B 10.213.0.1:4791"}, eps)
	_, err := p.Exec(0, "ip", "link", "show", "softhca-demo0")
	require.Error(t, err, "the interface the demo created goes away with it")

	t.Run("loss", func(t *testing.T) {
		code, stdout, stderr := runIn(t, p, 0, "demo", "-tap", "-loss", "0.2", "-tap-name", "shdemo1", "-addrs", "10.214.7.9,10.214.7.1")
		require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		require.Contains(t, stdout, "A is a host of its own on TAP interface shdemo1, MAC 02:00:0a:d6:07:09;\n")
		require.Contains(t, stdout, "  A: 10.214.7.9 port 4791    B: 10.214.7.1 port 4791\n")
		require.Contains(t, stdout, "All 8 steps passed")
		require.Regexp(t, `neighbours resolved 1\.`, stdout)
	})

	t.Run("existing interface", func(t *testing.T) {
		for _, c := range [][]string{
			{"ip", "tuntap", "add", "mode", "tap", "name", "shdemo2"},
			{"ip", "addr", "add", "10.215.0.1/24", "dev", "shdemo2"},
			{"ip", "link", "set", "shdemo2", "up"},
		} {
			_, err := p.Exec(0, c[0], c[1:]...)
			require.NoError(t, err)
		}
		code, stdout, stderr := runIn(t, p, 0, "demo", "-tap", "-tap-name", "shdemo2", "-addrs", "10.215.0.2,10.215.0.1")
		require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		require.Contains(t, stdout, "note: shdemo2 exists: using it as it is (its kernel side must have 10.215.0.1)\n")
		require.Contains(t, stdout, "All 8 steps passed")
		out, err := p.Exec(0, "ip", "addr", "show", "shdemo2")
		require.NoError(t, err, "the interface made beforehand is still there")
		require.Contains(t, out, "inet 10.215.0.1/24")

		// Its kernel side lacks B's address: the demo says what to do.
		code, stdout, stderr = runIn(t, p, 0, "demo", "-tap", "-tap-name", "shdemo2")
		require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		require.Contains(t, stderr, "softhca demo: FAILED: device B: 10.213.0.1 is not an address of the kernel's side of shdemo2 (ip addr add 10.213.0.1/24 dev shdemo2)")
	})
}

// TestDemoTapUnprivileged runs `softhca demo -tap` as an unprivileged
// user: exit status 1 and a message naming what is missing, root or
// CAP_NET_ADMIN and /dev/net/tun; no stack trace.
func TestDemoTapUnprivileged(t *testing.T) {
	requireRoot(t)
	// nobody must be able to run the binary.
	dir, err := os.MkdirTemp("", "softhca-nobody-") //nolint:usetesting // t.TempDir's parents are not searchable by nobody
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	b, err := os.ReadFile(softhcaBinary(t))
	require.NoError(t, err)
	bin := filepath.Join(dir, "softhca")
	require.NoError(t, os.WriteFile(bin, b, 0o755))

	name := fmt.Sprintf("shnp%d", os.Getpid()%100000) // unique, and nobody cannot create it anyway
	cmd := exec.Command(bin, "demo", "-tap", "-tap-name", name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = dir
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stdout:\n%s\nstderr:\n%s", &out, &errb)
	require.Equal(t, exitFailure, ee.ExitCode(), "stderr:\n%s", &errb)
	require.Empty(t, out.String())
	lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
	require.Len(t, lines, 2, errb.String())
	require.Regexp(t, `^softhca demo: FAILED: device A: link/tap: creating TAP interface `+name+`: (permission denied|operation not permitted) \(needs root or CAP_NET_ADMIN`, lines[0])
	require.Equal(t, "softhca demo: -tap: a TAP device needs root, or CAP_NET_ADMIN and read-write access to /dev/net/tun "+
		"(in a container: --cap-add NET_ADMIN --device /dev/net/tun); without CAP_NET_ADMIN, use a TAP interface made for you beforehand: "+
		"ip tuntap add mode tap user $USER name NAME; ip link set NAME up", lines[1])
}

// TestPingpongTap plays rc ping-pong (-c: every byte checked) between a
// server on a TAP interface in one namespace, put on the bridge there,
// and a client on UDP in the other namespace, over IPv4; then ud over
// IPv6, where the client's kernel finds the TAP host by neighbour
// discovery.
func TestPingpongTap(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Unshaped: true, Bridge: true, IPv6: true})
	for i, tc := range []struct {
		mode         string
		host, client netip.Addr
		server       netip.Addr // the server's TCP address
	}{
		{"rc", tapHostAddr(p.Addr(0), 10), p.Addr(1), p.Addr(0)},
		{"ud", tapHostAddr(p.Addr6(0), 0x10), p.Addr6(1), p.Addr6(0)},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			name := fmt.Sprintf("shpp%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var ln net.Listener
			require.NoError(t, p.Do(0, func() (err error) {
				ln, err = net.Listen("tcp", net.JoinHostPort(tc.server.String(), "0"))
				return err
			}))
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			// The command opens the TAP interface (created, as it does
			// not exist); the test puts it on the bridge at once, before
			// the server waits for its client.
			joined := make(chan error, 1)
			adjust := func(c *pingpong.Config) {
				c.Listener = ln
				open := c.OpenLink
				require.NotNil(t, open, "--tap sets the hook")
				c.OpenLink = func(a netip.AddrPort) (link.Link, error) {
					l, err := open(a)
					if err == nil {
						err = p.Join(name)
						if err != nil {
							l.Close()
							l = nil
						}
					}
					joined <- err
					return l, err
				}
			}
			common := []string{tc.mode, "-g", "1", "-n", "200", "-c"}
			var sout, serr, cout, cerr bytes.Buffer
			scode := make(chan int, 1)
			go func() {
				code := -1
				_ = p.Do(0, func() error {
					code = pingpongMain(ctx, append(common, "--tap", name, "--addr", tc.host.String()), &sout, &serr, adjust)
					return nil
				})
				scode <- code
			}()
			require.NoError(t, <-joined, "opening the TAP and joining the bridge")
			ccode := -1
			require.NoError(t, p.Do(1, func() error {
				ccode = pingpongMain(ctx, append(common, "-p", port, "--addr", tc.client.String(), tc.server.String()), &cout, &cerr, nil)
				return nil
			}))
			require.Equal(t, exitOK, <-scode, "server stdout:\n%s\nstderr:\n%s", &sout, &serr)
			require.Equal(t, exitOK, ccode, "client stdout:\n%s\nstderr:\n%s", &cout, &cerr)
			gid := func(a netip.Addr) string { return pingpong.FormatGID(verbs.GIDFromAddr(a)) }
			require.Contains(t, sout.String(), "local address:  LID 0x0000, QPN 0x000011")
			require.Contains(t, sout.String(), "GID "+gid(tc.host)+"\n")
			require.Contains(t, cout.String(), "GID "+gid(tc.client)+"\n")
			require.Contains(t, cout.String(), "200 iters in")
			require.Contains(t, sout.String(), "200 iters in")
			_, err := p.Exec(0, "ip", "link", "show", name)
			require.Error(t, err, "the interface the server created goes away with it")
		})
	}
}

// TestPerfTap runs ib_write_bw between a server on a TAP interface made
// beforehand and put on the bridge (the way to give a user one), and a
// client on UDP in the other namespace; the interface stays.
func TestPerfTap(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Unshaped: true, Bridge: true})
	name := "shpf0"
	_, err := p.Exec(0, "ip", "tuntap", "add", "mode", "tap", "name", name)
	require.NoError(t, err)
	require.NoError(t, p.Join(name))
	host := tapHostAddr(p.Addr(0), 20)

	srv := exec.Command("ip", "netns", "exec", p.Namespace(0), softhcaBinary(t), "perf", "write", "-s", "65536", "-n", "100",
		"-p", "0", "--tap", name, "--addr", host.String(), "--timeout", "60s")
	var sout bytes.Buffer
	srv.Stdout = &sout
	stderr, err := srv.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, srv.Start())
	done := make(chan error, 1)
	var serr strings.Builder
	rd := bufio.NewReader(stderr)
	port := ""
	for port == "" {
		line, err := rd.ReadString('\n')
		serr.WriteString(line)
		if err != nil {
			_ = srv.Wait()
			t.Fatalf("perf server ended before listening: %v\n%s", err, &serr)
		}
		if v, ok := strings.CutPrefix(line, "note: listening on TCP port "); ok {
			port = strings.TrimSpace(v)
		}
	}
	go func() {
		b, _ := io.ReadAll(rd)
		serr.Write(b)
		done <- srv.Wait()
	}()
	code, cout, cerr := runIn(t, p, 1, "perf", "write", "-s", "65536", "-n", "100", "-p", port,
		"--addr", p.Addr(1).String(), "--timeout", "60s", p.Addr(0).String())
	require.NoError(t, <-done, "server stdout:\n%s\nstderr:\n%s", &sout, &serr)
	require.Equal(t, exitOK, code, "client stdout:\n%s\nstderr:\n%s", cout, cerr)
	for _, out := range []string{sout.String(), cout} {
		rows := tableLines(t, out, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
		require.Len(t, rows, 1)
		require.Regexp(t, bwLine, rows[0])
	}
	require.Contains(t, sout.String(), fmt.Sprintf(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:%02d:%02d:%02d:%02d", host.As4()[0], host.As4()[1], host.As4()[2], host.As4()[3]))
	_, err = p.Exec(0, "ip", "link", "show", name)
	require.NoError(t, err, "an interface made beforehand stays")
}

// TestServeTap runs `softhca serve --tap` with an IPv6 --tap-addr and a
// pingpong responder in one namespace, puts the interface it created on
// the bridge, and plays ping-pong with it from the other namespace;
// status shows the interface, the MAC and the GIDs (link-local, the
// --listen address, the --tap-addr).
func TestServeTap(t *testing.T) {
	p := netpath.ForTest(t, netpath.Options{Unshaped: true, Bridge: true, IPv6: true})
	name := "shsv0"
	host, host6 := tapHostAddr(p.Addr(0), 30), tapHostAddr(p.Addr6(0), 0x30)
	sock := filepath.Join(t.TempDir(), "s.sock")
	cmd := exec.Command("ip", "netns", "exec", p.Namespace(0), softhcaBinary(t), "serve", "--tap", name, "--listen", host.String(),
		"--tap-addr", host6.String(), "--pingpong", "rc -g 1 -n 100", "--http", "", "--control", sock)
	serr := &syncBuffer{}
	cmd.Stderr = serr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	banner, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "serve ended before serving:\n%s", serr)
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	mac := "02:00:" + fmt.Sprintf("%02x:%02x:%02x:%02x", host.As4()[0], host.As4()[1], host.As4()[2], host.As4()[3])
	require.Equal(t, fmt.Sprintf("softhca serve: softhca0 on TAP %s as %s:4791 (MAC %s); control %s\n", name, host, mac, sock), banner)
	require.NoError(t, p.Join(name))

	code, cout, cerr := runIn(t, p, 1, "pingpong", "rc", "-g", "1", "-n", "100", "--addr", p.Addr(1).String(), p.Addr(0).String())
	require.Equal(t, exitOK, code, "client stdout:\n%s\nstderr:\n%s\nserve:\n%s", cout, cerr, serr)
	require.Contains(t, cout, "remote address: LID 0x0000, QPN 0x000011")
	require.Contains(t, cout, "GID ::ffff:"+host.String()+"\n")

	var st control.Status
	c, err := control.Dial(sock)
	require.NoError(t, err)
	require.NoError(t, c.Call(context.Background(), control.Request{Op: control.OpStatus}, &st))
	c.Close()
	require.Equal(t, name, st.Tap)
	require.Equal(t, mac, st.MAC)
	require.Equal(t, host.String()+":4791", st.Listen)
	hw, err := net.ParseMAC(mac)
	require.NoError(t, err)
	ll := wire.LinkLocalFromGUID(wire.GUIDFromMAC([6]byte(hw)))
	require.Equal(t, []string{ll.String(), "::ffff:" + host.String(), host6.String()}, st.GIDs)
	code, out, errs := runCmd(t, "status", "--control", sock)
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, out, fmt.Sprintf("softhca0: serving on TAP %s as %s:4791 (MAC %s)", name, host, mac))
	require.Contains(t, out, "  gid 2     "+host6.String()+"\n")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, <-done, "serve's exit:\n%s", serr)
	stopped = true
	_, err = p.Exec(0, "ip", "link", "show", name)
	require.Error(t, err, "the interface serve created goes away with it")
}
