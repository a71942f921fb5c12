//go:build interop

package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softhca/softhca/verbs"
)

// TestInterop is the matrix, in the order it runs: the guest on its own,
// the immediate-data exchange with softhca in this process, the pingpong
// examples and perftest against the softhca command, then against softhca
// on its own TAP, and a lossy run.
// Subtest names select parts: -run 'TestInterop/pingpong/mtu1024/rc'.
func TestInterop(t *testing.T) {
	defer noCache()
	e := getEnv(t)
	t.Run("guest", e.testGuest)
	t.Run("imm", e.testImm)
	t.Run("tm", e.testTM)
	t.Run("pingpong", e.testPingpong)
	t.Run("perftest", e.testPerftest)
	t.Run("tap", e.testTap)
	t.Run("unmodified", e.testUnmodified)
	t.Run("loss", e.testLoss)
	t.Run("congestion", e.testCongestion)
	t.Run("conformance", e.testConformance)
}

// leaf starts a reported case. Once the run's time budget is spent
// (SOFTHCA_INTEROP_BUDGET, default 15m: hung cases each cost their
// timeout), the remaining cases fail at once, so the run still ends with
// its report.
func (e *env) leaf(t *testing.T, note *string) {
	t.Helper()
	e.record(t, time.Now(), note)
	if time.Now().After(e.budget) {
		t.Fatalf("not run: the run's time budget (until %s) is spent", e.budget.Format(time.TimeOnly))
	}
}

// testGuest checks the guest on its own: the device, the tools, and rxe
// talking to itself (so that a failure further on is not rxe's).
func (e *env) testGuest(t *testing.T) {
	t.Run("devinfo", func(t *testing.T) {
		e.leaf(t, nil)
		ctx := context.Background()
		r, err := e.vm.Run(ctx, 30*time.Second, "ibv_devinfo", "-v", "-d", RXEDevice)
		if err != nil {
			t.Fatal(err)
		}
		out := string(r.Stdout)
		for _, want := range []string{"PORT_ACTIVE", "link_layer:\t\tEthernet",
			fmt.Sprintf("GID[%3d]:\t\t::ffff:%s, RoCE v2", e.gidx, e.guestAddr())} {
			if !strings.Contains(out, want) {
				t.Errorf("ibv_devinfo -v -d rxe0 lacks %q:\n%s", want, out)
			}
		}
		tools := []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong",
			"ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_atomic_bw", "shca-imm", "shca-tm"}
		if _, err := e.vm.Sh(ctx, 30*time.Second, "for t in "+strings.Join(tools, " ")+
			`; do command -v $t >/dev/null || { echo "missing $t"; exit 1; }; done`); err != nil {
			t.Error(err)
		}
	})
	t.Run("rxe-loopback", func(t *testing.T) {
		e.leaf(t, nil)
		ctx := context.Background()
		port := e.nextPort()
		g := strconv.Itoa(e.gidx)
		pp := fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %s -p %d -s 4096 -n 10 -c", g, port)
		script := fmt.Sprintf("%s > /tmp/srv.log 2>&1 & srv=$!; for i in $(seq 100); do grep -q ':%04X 00000000:0000 0A' /proc/net/tcp && break; sleep 0.05; done; %s %s; c=$?; wait $srv; s=$?; cat /tmp/srv.log; exit $((c + s))",
			pp, port, pp, e.guestAddr())
		r, err := e.vm.Sh(ctx, 60*time.Second, script)
		if err != nil {
			t.Fatalf("rxe to itself: %v", err)
		}
		if n := strings.Count(string(r.Stdout), "10 iters in"); n != 2 {
			t.Errorf("want \"10 iters in\" from both sides, got it %d times:\n%s", n, r.Stdout)
		}
	})
}

// testImm runs SEND_WITH_IMM and RDMA_WRITE_WITH_IMM both ways between
// shca-imm on rxe and softhca in this process (RunImm), checked on each
// receiver's completions: message sizes of one packet and of several.
func (e *env) testImm(t *testing.T) {
	for _, tr := range []string{"rc", "uc"} {
		for _, role := range []string{"softhca-client", "softhca-server"} {
			for _, size := range []int{64, 5000} {
				t.Run(fmt.Sprintf("%s/%s/%d", tr, role, size), func(t *testing.T) {
					var note string
					e.leaf(t, &note)
					res := e.runImm(t, tr == "uc", role == "softhca-server", size, 8, verbs.MTU1024, 0)
					note = res.note()
				})
			}
		}
	}
}

// runImm runs one immediate-data exchange.
func (e *env) runImm(t *testing.T, uc, softhcaServer bool, size, count int, mtu verbs.MTU, loss int) *exchangeResult {
	port := e.nextPort()
	tr := "rc"
	if uc {
		tr = "uc"
	}
	guestArgv := []string{"shca-imm", "-d", RXEDevice, "-g", strconv.Itoa(e.gidx), "-p", strconv.Itoa(port),
		"-t", tr, "-s", strconv.Itoa(size), "-n", strconv.Itoa(count), "-m", strconv.Itoa(mtu.Bytes())}
	cfg := ImmConfig{Local: netip.AddrPortFrom(e.hostAddr(), 4791), UC: uc, Size: size, Count: count, MTU: mtu}
	host := endpoint{argv: []string{"RunImm", tr, fmt.Sprintf("size=%d count=%d", size, count)}}
	var l net.Listener
	if softhcaServer {
		var err error
		l, err = net.Listen("tcp", net.JoinHostPort(e.hostAddr().String(), strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		cfg.Listener = l
		guestArgv = append(guestArgv, e.hostAddr().String())
	} else {
		cfg.Server = net.JoinHostPort(e.guestAddr().String(), strconv.Itoa(port))
	}
	host.inproc = func(ctx context.Context, out io.Writer, statsFile string) error {
		c := cfg
		c.Log = out
		res, err := RunImm(ctx, c)
		writeImmStats(statsFile, res)
		return err
	}
	guest := endpoint{guest: true, argv: guestArgv}
	x := exchange{port: port, server: guest, client: host, loss: loss, timeout: 90 * time.Second,
		verify: func(srv, cli string) []string {
			var p []string
			guestOut, hostOut := srv, cli
			if softhcaServer {
				guestOut, hostOut = cli, srv
			}
			if !strings.Contains(guestOut, "shca-imm: OK") {
				p = append(p, "shca-imm (rxe) did not report OK")
			}
			if n := strings.Count(hostOut, " ok\n"); n != count {
				p = append(p, fmt.Sprintf("softhca checked %d received messages as ok, want %d", n, count))
			}
			if n := strings.Count(guestOut, " ok\n"); n != count {
				p = append(p, fmt.Sprintf("shca-imm checked %d received messages as ok, want %d", n, count))
			}
			return p
		}}
	if softhcaServer {
		x.server, x.client = host, guest
	}
	return e.run(t, x)
}

// testTM sends EAGER and rendezvous messages from shca-tm on rxe to a
// tag-matching SRQ of softhca in this process (RunTM): softhca matches
// them by tag and READs each rendezvous' data from rxe's memory; shca-tm
// checks the FINs. One-packet and multi-packet messages.
func (e *env) testTM(t *testing.T) {
	for _, size := range []int{1000, 65536} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			var note string
			e.leaf(t, &note)
			const count = 8
			port := e.nextPort()
			l, err := net.Listen("tcp", net.JoinHostPort(e.hostAddr().String(), strconv.Itoa(port)))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cfg := TMConfig{Local: netip.AddrPortFrom(e.hostAddr(), 4791), Listener: l, Size: size, Count: count, MTU: verbs.MTU1024}
			host := endpoint{argv: []string{"RunTM", fmt.Sprintf("size=%d count=%d", size, count)}}
			host.inproc = func(ctx context.Context, out io.Writer, statsFile string) error {
				c := cfg
				c.Log = out
				res, err := RunTM(ctx, c)
				writeImmStats(statsFile, res)
				return err
			}
			guest := endpoint{guest: true, argv: []string{"shca-tm", "-d", RXEDevice, "-g", strconv.Itoa(e.gidx),
				"-p", strconv.Itoa(port), "-s", strconv.Itoa(size), "-n", strconv.Itoa(count), "-m", "1024", e.hostAddr().String()}}
			x := exchange{port: port, server: host, client: guest, timeout: 90 * time.Second,
				verify: func(srv, cli string) []string {
					var p []string
					if !strings.Contains(cli, "shca-tm: OK") {
						p = append(p, "shca-tm (rxe) did not report OK")
					}
					if n := strings.Count(srv, " ok\n"); n != count {
						p = append(p, fmt.Sprintf("softhca checked %d tagged messages as ok, want %d", n, count))
					}
					if n := strings.Count(cli, "fin "); n != count/2 {
						p = append(p, fmt.Sprintf("shca-tm received %d FINs, want %d", n, count/2))
					}
					return p
				}}
			note = e.run(t, x).note()
		})
	}
}

// writeImmStats saves softhca's counters from an in-process run in the
// format the harness reads from the softhca tools.
func writeImmStats(path string, res ImmResult) {
	m := map[string]uint64{
		"rx_packets":          res.Transport.RxPackets,
		"tx_packets":          res.Transport.TxPackets,
		"retransmits":         res.Transport.Retransmits,
		"seq_naks_sent":       res.Transport.SeqNAKsSent,
		"seq_naks_received":   res.Transport.SeqNAKsReceived,
		"duplicates_answered": res.Transport.DuplicatesAnswered,
	}
	for k, v := range res.Transport.DropNames() {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	os.WriteFile(path, b, 0o644)
}

// The pingpong matrix: each example at each size, softhca as client and as
// server, polling and with completion events, at path MTU 1024 (a
// 1500-byte network, as rxe derives its port MTU from its netdev's) and
// 4096 (9000 bytes).
func (e *env) testPingpong(t *testing.T) {
	if !e.hasCommand("pingpong") {
		e.leaf(t, nil)
		t.Fatalf("the softhca binary has no pingpong command (softhca help lists:\n%s)", e.cmds)
	}
	for _, mtu := range []int{1024, 4096} {
		t.Run(fmt.Sprintf("mtu%d", mtu), func(t *testing.T) {
			e.setMTU(t, mtu)
			type mode struct {
				name  string
				sizes []int
			}
			modes := []mode{{"rc", []int{64, 4096, 65536}}, {"uc", []int{64, 4096, 65536}},
				{"srq", []int{64, 4096, 65536}}, {"ud", []int{64, mtu}}}
			for _, m := range modes {
				for _, role := range []string{"softhca-client", "softhca-server"} {
					for _, size := range m.sizes {
						for _, ev := range []bool{false, true} {
							name := fmt.Sprintf("%s/%s/%d/poll", m.name, role, size)
							if ev {
								name = fmt.Sprintf("%s/%s/%d/events", m.name, role, size)
							}
							t.Run(name, func(t *testing.T) {
								var note string
								e.leaf(t, &note)
								res := e.runPingpong(t, pingpong{mode: m.name, softhcaServer: role == "softhca-server",
									size: size, mtu: mtu, events: ev, iters: pingpongIters(size)})
								note = res.note()
							})
						}
					}
				}
			}
		})
	}
}

// pingpongIters keeps every case to a second or two under TCG.
func pingpongIters(size int) int {
	if size > 8192 {
		return 20
	}
	return 100
}

// setMTU sets the network for a path MTU: the host bridge and tap and the
// guest's eth0 to 1500 bytes for 1024 (rxe's port MTU then is 1024) or
// 9000 for 4096.
func (e *env) setMTU(t *testing.T, mtu int) {
	t.Helper()
	ifMTU := 9000
	if mtu <= 1024 {
		ifMTU = 1500
	}
	ctx := context.Background()
	if err := e.net.SetMTU(ctx, ifMTU); err != nil {
		t.Fatal(err)
	}
	if err := e.vm.SetGuestMTU(ctx, ifMTU, min(mtu, 4096)); err != nil {
		t.Fatal(err)
	}
}

type pingpong struct {
	mode          string // rc, uc, ud, srq
	softhcaServer bool
	size, mtu     int
	events        bool
	iters         int
	loss          int    // per mille
	numQP         int    // srq: -q; 0 for numQP
	rate          string // SOFTHCA_RATE of the softhca side; "" for none
	// unmodified runs rdma-core's own binary on the host, through
	// softhca's drop-in libibverbs.so.1, instead of softhca pingpong.
	unmodified bool
	// tap runs softhca's pingpong on the host TAP (--tap) instead of
	// on a UDP socket on the bridge's address.
	tap bool
}

// numQP is the -q of the srq cases.
const numQP = 4

// runPingpong runs ibv_<mode>_pingpong in the guest against softhca
// pingpong <mode> on the host, both with -c, and checks their output and
// every packet's data.
func (e *env) runPingpong(t *testing.T, pp pingpong) *exchangeResult {
	port := e.nextPort()
	common := []string{"-p", strconv.Itoa(port), "-s", strconv.Itoa(pp.size), "-n", strconv.Itoa(pp.iters), "-c"}
	if pp.mode != "ud" {
		common = append(common, "-m", strconv.Itoa(pp.mtu))
	}
	if pp.mode == "srq" {
		q := pp.numQP
		if q == 0 {
			q = numQP
		}
		common = append(common, "-q", strconv.Itoa(q))
	}
	if pp.events {
		common = append(common, "-e")
	}
	guest := endpoint{guest: true, argv: append([]string{"ibv_" + pp.mode + "_pingpong", "-d", RXEDevice, "-g", strconv.Itoa(e.gidx)}, common...)}
	host := endpoint{argv: append([]string{"pingpong", pp.mode, "-g", "1"}, common...)}
	switch {
	case pp.unmodified:
		host.argv = append(e.runArgs(pp.mtu), append([]string{"ibv_" + pp.mode + "_pingpong", "-g", "1"}, common...)...)
	case pp.tap:
		host = e.tapEndpoint(host.argv)
	}
	if pp.rate != "" {
		host.env = []string{"SOFTHCA_RATE=" + pp.rate}
	}
	fill := byte(0x7b)
	if pp.mode == "srq" {
		fill = 0 // srq_pingpong clears its buffer
	}
	x := exchange{port: port, server: guest, client: host, check: PingpongPayload(fill, 4096), loss: pp.loss,
		verify: pingpongVerify(pp), lateTail: pp.mode == "srq", retryRxeSide: pp.mode == "srq", tap: pp.tap}
	if pp.loss > 0 && pp.mode == "rc" {
		// Each side receives iters messages on its one QP and acknowledges
		// the last with MSN iters; the examples end without a goodbye, so
		// the loss of that ACK would strand its sender (Loss.SpareMSN).
		x.spareMSN = uint32(pp.iters)
	}
	if pp.softhcaServer {
		x.server, x.client = host, guest
		x.client.argv = append(x.client.argv, e.hostAddr().String())
	} else {
		x.client.argv = append(x.client.argv, e.guestAddr().String())
	}
	return e.run(t, x)
}

// pingpongVerify checks the result lines of both sides: the byte and
// iteration counts the examples print, and no "invalid data" from -c.
func pingpongVerify(pp pingpong) func(srv, cli string) []string {
	bytesLine := regexp.MustCompile(fmt.Sprintf(`(?m)^%d bytes in [0-9.]+ seconds = `, pp.size*pp.iters*2))
	itersLine := regexp.MustCompile(fmt.Sprintf(`(?m)^%d iters in [0-9.]+ seconds = `, pp.iters))
	return func(srv, cli string) []string {
		var p []string
		for _, s := range []struct{ name, out string }{{"server", srv}, {"client", cli}} {
			if !bytesLine.MatchString(s.out) || !itersLine.MatchString(s.out) {
				p = append(p, fmt.Sprintf("%s: want the lines \"%d bytes in ...\" and \"%d iters in ...\"", s.name, pp.size*pp.iters*2, pp.iters))
			}
			if strings.Contains(s.out, "invalid data") {
				p = append(p, fmt.Sprintf("%s: -c found invalid data", s.name))
			}
		}
		return p
	}
}

// testPerftest runs ib_send_bw, ib_write_bw, ib_read_bw and ib_atomic_bw
// (both atomics) in the guest against softhca perf on the host, each way.
func (e *env) testPerftest(t *testing.T) {
	if !e.hasCommand("perf") {
		e.leaf(t, nil)
		t.Fatalf("the softhca binary has no perf command (softhca help lists:\n%s)", e.cmds)
	}
	e.setMTU(t, 4096)
	type test struct {
		name, verb string
		args       []string
	}
	tests := []test{
		{"send", "send", []string{"-s", "65536", "-n", "500"}},
		{"write", "write", []string{"-s", "65536", "-n", "500"}},
		{"read", "read", []string{"-s", "65536", "-n", "500"}},
		{"atomic-fadd", "atomic", []string{"-A", "FETCH_AND_ADD", "-n", "1000"}},
		{"atomic-cas", "atomic", []string{"-A", "CMP_AND_SWAP", "-n", "1000"}},
	}
	for _, tc := range tests {
		for _, role := range []string{"softhca-client", "softhca-server"} {
			t.Run(tc.name+"/"+role, func(t *testing.T) {
				var note string
				e.leaf(t, &note)
				res := e.runPerf(t, tc.verb, tc.args, 4096, role == "softhca-server")
				note = res.note()
			})
		}
	}
}

// runPerf runs ib_<verb>_bw in the guest against softhca perf <verb> at
// path MTU mtu.
func (e *env) runPerf(t *testing.T, verb string, args []string, mtu int, softhcaServer bool) *exchangeResult {
	return e.runPerfHost(t, verb, args, mtu, softhcaServer, perfSofthca)
}

// perfHost is what runs perftest's side on the host.
type perfHost int

const (
	perfSofthca    perfHost = iota // softhca perf
	perfUnmodified                 // perftest's own ib_<verb>_bw through softhca's drop-in libibverbs.so.1
	perfTap                        // softhca perf on the host TAP (--tap)
)

// runPerfHost is runPerf with the host side that host says.
func (e *env) runPerfHost(t *testing.T, verb string, args []string, mtu int, softhcaServer bool, host perfHost) *exchangeResult {
	port := e.nextPort()
	common := append([]string{"-p", strconv.Itoa(port), "-m", strconv.Itoa(mtu)}, args...)
	guest := endpoint{guest: true, argv: append([]string{"ib_" + verb + "_bw", "-d", RXEDevice, "-x", strconv.Itoa(e.gidx), "-F"}, common...)}
	hostEP := endpoint{argv: append([]string{"perf", verb, "-x", "1"}, common...)}
	switch host {
	case perfSofthca:
	case perfUnmodified:
		hostEP.argv = append(e.runArgs(mtu), append([]string{"ib_" + verb + "_bw", "-x", "1", "-F"}, common...)...)
	case perfTap:
		hostEP = e.tapEndpoint(hostEP.argv)
	}
	iters, all := 0, false
	for i, a := range args {
		switch a {
		case "-n":
			iters, _ = strconv.Atoi(args[i+1])
		case "-a":
			all = true
		}
	}
	verify := perfVerify(iters)
	if all {
		verify = perfVerifyAll(iters)
	}
	x := exchange{port: port, server: guest, client: hostEP, check: ResponderCheck(), verify: verify, tap: host == perfTap}
	if softhcaServer {
		x.server, x.client = hostEP, guest
		x.client.argv = append(x.client.argv, e.hostAddr().String())
	} else {
		x.client.argv = append(x.client.argv, e.guestAddr().String())
	}
	return e.run(t, x)
}

// tapEndpoint is the host endpoint that runs a softhca pingpong or perf
// command line (argv after "softhca") on the host TAP: softhca's own
// --tap NAME --addr IP options, after the command and its mode (pingpong
// rc, perf write), put its device
// on the TAP link. The TCP exchange still goes through the host's kernel
// (the guest reaches the host at the bridge's address); the GID softhca
// gives the peer, and so every RoCEv2 packet, is the TAP's address.
func (e *env) tapEndpoint(argv []string) endpoint {
	a := append([]string{argv[0], argv[1], "--tap", e.net.HostTap, "--addr", e.net.HostTapAddr.Addr().String()}, argv[2:]...)
	return endpoint{argv: a}
}

// testTap runs softhca as a host of its own on the guest's Ethernet: on
// a TAP interface on the guest's bridge (Net.HostTap, link/tap), with its
// own MAC and IP address, as rxe is on its netdev, instead of on a UDP
// socket on the bridge's address. ib_write_bw at path MTU 4096 (jumbo
// frames) and the rc and ud pingpongs at 1024 (a 1500-byte Ethernet),
// each with softhca as client and as server. Besides what the other
// cases check, the capture checks that every packet to the guest comes
// from the TAP host's MAC and address with its own IPv4 header (ID 0, DF)
// and every packet from the guest goes to them: rxe resolved softhca's
// address by ARP on the bridge and sent to the GID softhca gave it.
func (e *env) testTap(t *testing.T) {
	t.Run("perftest/mtu4096", func(t *testing.T) {
		e.setMTU(t, 4096)
		for _, role := range []string{"softhca-client", "softhca-server"} {
			t.Run("write/"+role, func(t *testing.T) {
				var note string
				e.leaf(t, &note)
				note = e.runPerfHost(t, "write", []string{"-s", "65536", "-n", "500"}, 4096, role == "softhca-server", perfTap).note()
			})
		}
	})
	t.Run("pingpong/mtu1024", func(t *testing.T) {
		e.setMTU(t, 1024)
		for _, m := range []struct {
			mode string
			size int
		}{{"rc", 65536}, {"ud", 1024}} {
			for _, role := range []string{"softhca-client", "softhca-server"} {
				t.Run(fmt.Sprintf("%s/%s/%d", m.mode, role, m.size), func(t *testing.T) {
					var note string
					e.leaf(t, &note)
					note = e.runPingpong(t, pingpong{mode: m.mode, softhcaServer: role == "softhca-server",
						size: m.size, mtu: 1024, iters: pingpongIters(m.size), tap: true}).note()
				})
			}
		}
	})
}

// runArgs are the softhca arguments that run a program on the host's
// address through the drop-in library, at port MTU mtu.
func (e *env) runArgs(mtu int) []string {
	return []string{"run", "--addr", e.hostAddr().String(), "--mtu", strconv.Itoa(mtu), "--lib", e.dir, "--"}
}

// testUnmodified runs rdma-core's and perftest's unmodified binaries at
// both ends: in the guest on rxe, on the host on softhca through the
// drop-in libibverbs.so.1 (softhca run).
func (e *env) testUnmodified(t *testing.T) {
	if e.libErr != nil || !e.hasCommand("run") {
		e.leaf(t, nil)
		t.Fatalf("no drop-in library to run the host's tools on: %v (softhca help lists:\n%s)", e.libErr, e.cmds)
	}
	for _, bin := range []string{"ibv_rc_pingpong", "ib_write_bw"} {
		if _, err := exec.LookPath(bin); err != nil {
			e.leaf(t, nil)
			t.Fatalf("%s is not installed on the host (apt-get install ibverbs-utils perftest)", bin)
		}
	}
	e.setMTU(t, 1024)
	for _, role := range []string{"softhca-client", "softhca-server"} {
		for _, pp := range []pingpong{
			{mode: "rc", size: 4096, iters: 100},
			{mode: "rc", size: 65536, iters: 20, events: true},
			{mode: "uc", size: 4096, iters: 100},
			{mode: "ud", size: 1024, iters: 100},
			{mode: "srq", size: 4096, iters: 100},
		} {
			name := fmt.Sprintf("ibv_%s_pingpong/%s/%d", pp.mode, role, pp.size)
			if pp.events {
				name += "/events"
			}
			t.Run(name, func(t *testing.T) {
				var note string
				e.leaf(t, &note)
				pp.mtu, pp.unmodified, pp.softhcaServer = 1024, true, role == "softhca-server"
				note = e.runPingpong(t, pp).note()
			})
		}
		for _, verb := range []string{"write", "read", "send"} {
			t.Run("ib_"+verb+"_bw/"+role, func(t *testing.T) {
				var note string
				e.leaf(t, &note)
				note = e.runPerfHost(t, verb, []string{"-s", "65536", "-n", "200"}, 1024, role == "softhca-server", perfUnmodified).note()
			})
		}
	}
}

// perfResult matches perftest's result row: #bytes #iterations BW peak
// BW average MsgRate.
var perfResult = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$`)

// perfVerify checks that both sides printed a result row for the
// iterations asked for.
func perfVerify(iters int) func(srv, cli string) []string {
	return func(srv, cli string) []string {
		var p []string
		for _, s := range []struct{ name, out string }{{"server", srv}, {"client", cli}} {
			m := perfResult.FindStringSubmatch(s.out)
			if m == nil {
				p = append(p, s.name+": no perftest result row (#bytes #iterations BW peak BW average MsgRate)")
				continue
			}
			if n, _ := strconv.Atoi(m[2]); n != iters {
				p = append(p, fmt.Sprintf("%s: result row reports %s iterations, want %d", s.name, m[2], iters))
			}
		}
		return p
	}
}

// perfVerifyAll checks the result rows of a run with -a (every size from
// 2 to 2^23 bytes): the client measures, so it prints a row per size;
// the server of a write, read or atomic test prints the client's last
// row (perftest exchanges the reports at the end).
func perfVerifyAll(iters int) func(srv, cli string) []string {
	return func(srv, cli string) []string {
		var p []string
		rows := perfResult.FindAllStringSubmatch(cli, -1)
		var sizes []string
		for size := 2; size <= 1<<23; size *= 2 {
			sizes = append(sizes, strconv.Itoa(size))
		}
		if len(rows) != len(sizes) {
			p = append(p, fmt.Sprintf("client: %d result rows, want %d (sizes 2 .. 8388608)", len(rows), len(sizes)))
		}
		for i, m := range rows {
			if i < len(sizes) && m[1] != sizes[i] {
				p = append(p, fmt.Sprintf("client: result row %d is for %s bytes, want %s", i+1, m[1], sizes[i]))
			}
			if n, _ := strconv.Atoi(m[2]); n != iters {
				p = append(p, fmt.Sprintf("client: the row for %s bytes reports %s iterations, want %d", m[1], m[2], iters))
			}
		}
		m := perfResult.FindStringSubmatch(srv)
		switch {
		case m == nil:
			p = append(p, "server: no perftest result row (#bytes #iterations BW peak BW average MsgRate)")
		case m[1] != sizes[len(sizes)-1] || m[2] != strconv.Itoa(iters):
			p = append(p, fmt.Sprintf("server: result row for %s bytes, %s iterations, want %s bytes, %d iterations", m[1], m[2], sizes[len(sizes)-1], iters))
		}
		return p
	}
}

// testLoss runs a multi-packet RC pingpong and the immediate-data exchange
// with 3% of the RoCEv2 packets dropped both ways on the guest's tap, with
// softhca as client and as server. The pingpong's last ACKs are spared
// (Loss.SpareMSN); shca-imm and RunImm end with a goodbye over TCP after
// their completions, so nothing of theirs needs sparing.
func (e *env) testLoss(t *testing.T) {
	e.setMTU(t, 1024)
	for _, role := range []string{"softhca-client", "softhca-server"} {
		t.Run("rc-pingpong/"+role, func(t *testing.T) {
			var note string
			e.leaf(t, &note)
			if !e.hasCommand("pingpong") {
				t.Fatal("the softhca binary has no pingpong command")
			}
			res := e.runPingpong(t, pingpong{mode: "rc", softhcaServer: role == "softhca-server",
				size: 65536, mtu: 1024, iters: 20, loss: 30})
			note = res.note()
			if res.dropped == 0 {
				t.Errorf("the loss filter dropped no packets: the case did not test loss")
			}
		})
		t.Run("imm-rc/"+role, func(t *testing.T) {
			var note string
			e.leaf(t, &note)
			res := e.runImm(t, false, role == "softhca-server", 20000, 16, verbs.MTU1024, 30)
			note = res.note()
			if res.dropped == 0 {
				t.Errorf("the loss filter dropped no packets: the case did not test loss")
			}
		})
	}
}

// testCongestion runs, at the tap's default queue of 1000 packets, the
// cases that overflowed it before softhca had congestion control (issue
// 12): srq_pingpong over 16 QPs at 64 KiB, uc_pingpong at 1 MiB (UC
// cannot recover a lost packet: a message that loses one is lost, and
// pingpong then hangs) and ib_read_bw over every size up to 8 MiB, each
// with softhca as client and as server, at path MTU 1024 (a 1500-byte
// network: the most packets per message) and 4096. Each checks what the
// other cases check; the report shows the tap's drop counter before and
// after, and softhca's counters.
func (e *env) testCongestion(t *testing.T) {
	for _, mtu := range []int{1024, 4096} {
		t.Run(fmt.Sprintf("mtu%d", mtu), func(t *testing.T) {
			e.setMTU(t, mtu)
			for _, role := range []string{"softhca-client", "softhca-server"} {
				server := role == "softhca-server"
				t.Run("srq-q16-65536/"+role, func(t *testing.T) {
					var note string
					e.leaf(t, &note)
					if !e.hasCommand("pingpong") {
						t.Fatal("the softhca binary has no pingpong command")
					}
					res := e.runPingpong(t, pingpong{mode: "srq", softhcaServer: server, size: 65536, mtu: mtu,
						iters: congestionSRQIters, numQP: 16})
					note = res.congestionNote()
				})
				t.Run("uc-1048576/"+role, func(t *testing.T) {
					var note string
					e.leaf(t, &note)
					if !e.hasCommand("pingpong") {
						t.Fatal("the softhca binary has no pingpong command")
					}
					pp := pingpong{mode: "uc", softhcaServer: server, size: 1 << 20, mtu: mtu, iters: congestionUCIters}
					if mtu == 1024 {
						// A 1 MiB UC message at MTU 1024 is 1024 packets,
						// which unpaced overflow the guest's 1000-packet
						// tap queue; UC has no acknowledgement and rxe
						// sends no CNP, so nothing on this path can tell
						// softhca to slow down, and only a device rate the
						// user sets (Congestion.DeviceRate) keeps it within
						// what the path drains. 2026-11-26, this machine:
						// FAIL both ways unpaced (tap +25 and +26 drops),
						// and at 1G and 2G (+30..38); PASS both ways at
						// 100M, 250M and 500M with 0 drops. 200M leaves a
						// margin for a slower CI machine.
						pp.rate = "200M"
					}
					res := e.runPingpong(t, pp)
					note = res.congestionNote()
				})
				t.Run("read-bw-all/"+role, func(t *testing.T) {
					var note string
					e.leaf(t, &note)
					if !e.hasCommand("perf") {
						t.Fatal("the softhca binary has no perf command")
					}
					res := e.runPerf(t, "read", []string{"-a", "-n", strconv.Itoa(congestionReadIters)}, mtu, server)
					note = res.congestionNote()
				})
			}
		})
	}
}

// The congestion cases' iterations, chosen to keep each case within
// about a minute under TCG.
const (
	congestionSRQIters  = 100 // srq_pingpong -q 16 -s 65536: 100 messages each way, over the 16 QPs
	congestionUCIters   = 100 // uc_pingpong -s 1048576: 100 MiB each way
	congestionReadIters = 5   // ib_read_bw -a: 5 READs of each size (perftest's least), 80 MiB in all
)
