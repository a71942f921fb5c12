//go:build interop

package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softhca/softhca/interop/agent"
	tapdev "github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/wire"
)

// endpoint is one side of an exchange: a command in the guest (argv), the
// softhca binary on the host (argv after "softhca"), or softhca in this
// process (inproc, described by argv).
type endpoint struct {
	guest bool
	argv  []string
	// env is added to a host process's environment (SOFTHCA_RATE).
	env    []string
	inproc func(ctx context.Context, out io.Writer, statsFile string) error
}

func (p endpoint) String() string {
	where := "host: softhca "
	if len(p.env) > 0 {
		where = "host: " + strings.Join(p.env, " ") + " softhca "
	}
	switch {
	case p.guest:
		where = "guest: "
	case p.inproc != nil:
		where = "host (in process): "
	}
	return where + strings.Join(p.argv, " ")
}

// exchange is one server/client run between the guest and the host.
type exchange struct {
	port           int // the TCP port the server listens on
	server, client endpoint
	timeout        time.Duration // for each side
	// check inspects every captured packet's data.
	check PayloadCheck
	// loss drops this share (per mille) of the RoCEv2 packets both ways.
	loss int
	// spareMSN is Loss.SpareMSN: with loss, the ACKs of the last message
	// (MSN spareMSN or more) are never dropped, for the tools that end
	// without a goodbye (rdma-core's pingpong examples).
	spareMSN uint32
	// tap: softhca is on the host TAP (Net.HostTap, link/tap), a host of
	// its own at Net.HostTapAddr, instead of on a UDP socket on the
	// bridge's address; the capture checks its packets for that.
	tap bool
	// verify checks the two sides' output and returns what is wrong.
	verify func(server, client string) []string
	// lateTail allows the packets that reach a side while it tears its
	// device down (from lateWindow before its process ends) to go
	// uncounted: srq_pingpong ends when its totals over all QPs are
	// reached, while other QPs may still have sends in flight (and their
	// retransmissions), and destroys its QPs without waiting for them.
	lateTail bool
	// retryRxeSide repeats the exchange once when everything wrong with
	// it is on the rxe side (see problem.rxeSide): srq_pingpong's end can
	// leave rxe waiting forever for an ACK that the peer, already done,
	// will not send again.
	retryRxeSide bool
}

// exchangeResult is what an exchange produced.
type exchangeResult struct {
	serverOut, clientOut string
	capture              CaptureStats
	rxe                  Counters // rxe0's counters during the exchange
	softhca              Counters // softhca's, if its tool reported them
	dropped              int      // packets the loss filter dropped
	tapDropped           uint64   // packets the tap dropped on the way to the guest (its queue was full)
	tapDropsBefore       uint64   // the tap's tx_dropped counter before the exchange
	tapDropsAfter        uint64   // and after
	elapsed              time.Duration
	problems             []problem // what was wrong
	diag                 []string  // the outputs, the capture, the counters, for a failure
	retried              string    // why the first attempt was repeated, if it was
}

// problem is one thing wrong with an exchange.
type problem struct {
	msg string
	// rxeSide marks what concerns only the rxe side or the ends of the
	// run (the guest tool hung or its output, rxe's and the end-of-run
	// counts), not what softhca did or sent.
	rxeSide bool
}

// note summarises a result for the report.
func (r *exchangeResult) note() string {
	s := fmt.Sprintf("h->g %d pkts, g->h %d pkts; rxe rcvd %d sent %d",
		r.capture.ToGuest.Packets, r.capture.FromGuest.Packets, r.rxe["rcvd_pkts"], r.rxe["sent_pkts"])
	if r.dropped > 0 {
		s += fmt.Sprintf("; %d dropped", r.dropped)
	}
	if r.tapDropped > 0 {
		s += fmt.Sprintf("; tap queue overflowed %d", r.tapDropped)
	}
	if len(r.softhca) > 0 {
		s += "; softhca " + r.softhca.String()
	}
	if r.retried != "" {
		s += "; RETRIED after: " + r.retried
	}
	return s
}

// congestionNote is note with the tap's drop counter before and after
// the exchange always shown (ip -s link's TX dropped of the tap: packets
// to the guest that found its queue full) and the CNPs the capture saw
// each way (softhca's tools do not report their congestion counters).
func (r *exchangeResult) congestionNote() string {
	cnp := wire.CNP.String()
	return fmt.Sprintf("tap TX dropped %d -> %d (+%d of %d pkts to the guest); CNPs h->g %d, g->h %d; %s",
		r.tapDropsBefore, r.tapDropsAfter, r.tapDropped, r.capture.ToGuest.Packets,
		r.capture.ToGuest.Ops[cnp], r.capture.FromGuest.Ops[cnp], r.note())
}

// run performs the exchange and checks it: both sides exit 0, their
// output passes verify, every captured packet parses with a correct ICRC
// and passes check, and rxe's counters agree with the capture: rxe
// counted as received (rcvd_pkts, which rxe increments only after the
// header and ICRC checks) every packet that reached the guest, and as
// sent every packet that left it.
//
// With x.retryRxeSide, an attempt whose every problem is on the rxe side
// is repeated once; the report notes it.
func (e *env) run(t *testing.T, x exchange) *exchangeResult {
	t.Helper()
	res := e.attempt(t, x)
	if x.retryRxeSide && len(res.problems) > 0 {
		rxeOnly := true
		var msgs []string
		for _, p := range res.problems {
			rxeOnly = rxeOnly && p.rxeSide
			msgs = append(msgs, p.msg)
		}
		if rxeOnly {
			t.Logf("first attempt failed on the rxe side only, retrying once:\n%s", indent(strings.Join(append(msgs, res.diag...), "\n")))
			first := strings.Join(msgs, "; ")
			x.port = e.nextPort()
			x.server.argv = replacePort(x.server.argv, x.port)
			x.client.argv = replacePort(x.client.argv, x.port)
			res = e.attempt(t, x)
			res.retried = first
		}
	}
	for _, p := range res.problems {
		t.Error(p.msg)
	}
	for _, d := range res.diag {
		t.Log(d)
	}
	return res
}

// replacePort replaces the value of -p in argv.
func replacePort(argv []string, port int) []string {
	out := append([]string(nil), argv...)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "-p" {
			out[i+1] = strconv.Itoa(port)
		}
	}
	return out
}

// attempt runs the exchange once and returns what was wrong in
// res.problems; it fails the test only when the exchange cannot start.
func (e *env) attempt(t *testing.T, x exchange) *exchangeResult {
	t.Helper()
	if x.timeout == 0 {
		x.timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*x.timeout+30*time.Second)
	defer cancel()
	res := &exchangeResult{}
	start := time.Now()
	defer func() { res.elapsed = time.Since(start) }()

	before, err := e.vm.RXECounters(ctx)
	if err != nil {
		t.Fatalf("reading rxe0's counters: %v", err)
	}
	tapDropsBefore := tapTxDropped(e.net.Tap)
	var loss *Loss
	if x.loss > 0 {
		loss = &Loss{Dev: e.net.Tap, Permille: x.loss, SpareMSN: x.spareMSN}
		if err := loss.Apply(ctx); err != nil {
			t.Fatal(err)
		}
		defer loss.Remove()
	}
	capt, err := StartCapture(e.net.Tap, e.guestAddr(), e.hostSide(x.tap), x.check)
	if err != nil {
		t.Fatal(err)
	}
	capStopped := false
	stopCapture := func() {
		if capStopped {
			return
		}
		capStopped = true
		st, err := capt.Stop()
		if err != nil {
			t.Errorf("capture: %v", err)
		}
		res.capture = st
	}
	defer stopCapture()
	statsDir := t.TempDir()

	srv, err := e.start(ctx, x.server, x.timeout, filepath.Join(statsDir, "server.json"))
	if err != nil {
		t.Fatalf("starting the server (%s): %v", x.server, err)
	}
	defer srv.abandon()
	if err := srv.waitListen(ctx, e, x.port); err != nil {
		t.Fatalf("server (%s): %v", x.server, err)
	}
	cli, err := e.start(ctx, x.client, x.timeout, filepath.Join(statsDir, "client.json"))
	if err != nil {
		t.Fatalf("starting the client (%s): %v", x.client, err)
	}
	defer cli.abandon()
	cliOK, cliStatus, cliOut := cli.wait()
	// The client is done; a server that outlives it by 15 s hangs (rxe
	// retries forever with retry_cnt 7).
	srvDone := make(chan struct{})
	var srvOK bool
	var srvStatus, srvOut string
	go func() { srvOK, srvStatus, srvOut = srv.wait(); close(srvDone) }()
	select {
	case <-srvDone:
	case <-time.After(15 * time.Second):
		srv.abandon()
		<-srvDone
		srvStatus += " (killed: still running 15 s after the client ended)"
		srvOK = false
	}
	res.serverOut, res.clientOut = srvOut, cliOut
	stopCapture()
	if loss != nil {
		if n, err := loss.Dropped(ctx); err == nil {
			res.dropped = n
		}
	}
	after, err := e.vm.RXECounters(ctx)
	if err != nil {
		t.Fatalf("reading rxe0's counters: %v", err)
	}
	res.rxe = after.Sub(before)
	res.tapDropsBefore, res.tapDropsAfter = tapDropsBefore, tapTxDropped(e.net.Tap)
	res.tapDropped = res.tapDropsAfter - tapDropsBefore
	for _, f := range []string{"server.json", "client.json"} {
		if c, err := readStats(filepath.Join(statsDir, f)); err == nil {
			if res.softhca == nil {
				res.softhca = Counters{}
			}
			res.softhca.Add(c)
			e.addSofthca(c)
		}
	}

	failed := false
	fail := func(rxeSide bool, format string, args ...any) {
		failed = true
		res.problems = append(res.problems, problem{fmt.Sprintf(format, args...), rxeSide})
	}
	if !srvOK {
		fail(x.server.guest, "server %s: %s, want exit 0", x.server, srvStatus)
	}
	if !cliOK {
		fail(x.client.guest, "client %s: %s, want exit 0", x.client, cliStatus)
	}
	if x.verify != nil {
		for _, p := range x.verify(srvOut, cliOut) {
			guestSide := (strings.HasPrefix(p, "server") && x.server.guest) || (strings.HasPrefix(p, "client") && x.client.guest)
			fail(guestSide, "%s", p)
		}
	}
	c := &res.capture
	for _, d := range []Direction{ToGuest, FromGuest} {
		ds := c.Dir(d)
		if len(ds.Bad) > 0 {
			fail(false, "%s: %d of %d packets failed softhca's parser (%s), want all to parse with a correct ICRC",
				d, ds.Packets-ds.Good, ds.Packets, formatCounts(ds.Bad))
		}
		if ds.PayloadErrors > 0 {
			fail(false, "%s: %d packets carry data the test did not send", d, ds.PayloadErrors)
		}
		if ds.HeaderErrors > 0 {
			fail(false, "%s: %d packets do not name softhca's host side in their Ethernet or IP header (%s)", d, ds.HeaderErrors, e.hostSide(x.tap))
		}
		if ds.Packets == 0 {
			fail(false, "%s: no RoCEv2 packets captured, want some", d)
		}
	}
	// late are the packets a receiver may miss by the end of the run:
	// those captured after its process ended (rc_pingpong has no
	// goodbye: rxe may retransmit its last message just as softhca, done,
	// closes, and those packets reach no one), and for a lateTail
	// exchange those from lateWindow before.
	late := func(d Direction) uint64 {
		receiver := srv
		if (d == ToGuest) != srv.ep.guest {
			receiver = cli
		}
		if receiver.exitedAt.IsZero() {
			return 0 // not seen to end: everything counts
		}
		if !x.lateTail {
			return uint64(c.After(d, receiver.exitedAt))
		}
		return uint64(c.After(d, receiver.exitedAt.Add(-lateWindow)))
	}
	if c.KernelDrops == 0 {
		// The capture sees a packet to the guest before the tap queues
		// it for qemu; when the emulated guest falls behind, the queue
		// overflows and the tap drops it (RC recovers: rxe NAKs the gap).
		// So can the guest's network stack (counted in net.*).
		netDrops := res.rxe.NetDrops()
		if got, want := res.rxe["rcvd_pkts"], uint64(c.ToGuest.Good); got > want || got+late(ToGuest)+res.tapDropped+netDrops < want {
			fail(true, "rxe0 rcvd_pkts went up by %d, want %d: the capture saw %d packets from softhca on their way to the guest, all with a correct ICRC (rxe drops bad ones silently; the tap dropped %d for a full queue, the guest's network stack %d; %d came as the rxe side was closing)",
				got, want, want, res.tapDropped, netDrops, late(ToGuest))
		}
		if got, want := res.rxe["sent_pkts"], uint64(c.FromGuest.Packets); got != want {
			fail(true, "rxe0 sent_pkts went up by %d, want %d (the packets the capture saw leave the guest)", got, want)
		}
	} else {
		res.diag = append(res.diag, fmt.Sprintf("the capture lost %d frames: counts not compared", c.KernelDrops))
	}
	for k, v := range res.softhca {
		if strings.HasPrefix(k, "parse: ") && v != 0 {
			fail(false, "softhca dropped %d packets from rxe as malformed (%s), want 0", v, k)
		}
	}
	if rx, ok := res.softhca["rx_packets"]; ok && c.KernelDrops == 0 {
		// Under loss the capture sees guest->host packets before the tap's
		// ingress filter drops them.
		// The host's kernel may drop some at softhca's socket when its
		// receive buffer is full (rxe retransmits them); softhca counts
		// those under their own name.
		sockDrops := res.softhca[softhcaSocketDrops]
		if want := uint64(c.FromGuest.Packets); (rx > want || rx+late(FromGuest)+sockDrops < want) && x.loss == 0 {
			fail(true, "softhca received %d packets, want %d (the packets the capture saw leave the guest; %d came as softhca was closing, the host dropped %d at softhca's full socket)", rx, want, late(FromGuest), sockDrops)
		}
		if tx, want := res.softhca["tx_packets"], uint64(c.ToGuest.Packets); tx < want {
			fail(false, "softhca says it sent %d packets, but the capture saw %d reach the guest", tx, want)
		}
	}
	diag := func(format string, args ...any) { res.diag = append(res.diag, fmt.Sprintf(format, args...)) }
	if failed || os.Getenv("SOFTHCA_INTEROP_PCAP") != "" {
		pcap := filepath.Join(e.dir, sanitize(t.Name())+fmt.Sprintf("-p%d.pcap", x.port))
		if err := capt.WritePcap(pcap); err == nil {
			diag("capture (first 500 and last 1500 frames): %s", pcap)
		}
	}
	if failed {
		diag("server %s: %s\n%s", x.server, srvStatus, indent(srvOut))
		diag("client %s: %s\n%s", x.client, cliStatus, indent(cliOut))
		diag("capture: %s", c)
		for _, p := range c.Problems {
			diag("  %s", p)
		}
		diag("rxe0 counters during the run: %s", res.rxe)
		if len(res.softhca) > 0 {
			diag("softhca counters: %s", res.softhca)
		}
	}
	return res
}

// softhcaSocketDrops is the name under which softhca counts the datagrams
// the kernel dropped at its full socket (transport.Stats.DropNames).
const softhcaSocketDrops = "link: socket receive buffer full"

// lateWindow is how long before its process ends a side of a lateTail
// exchange may already be tearing its QPs down. 200 ms was too short
// with both cores busy: CI failed srq -q 16 at MTU 1024, softhca-server,
// with "softhca received 6532 packets, want 8708; 1190 came as softhca
// was closing" (rxe retransmits the unacknowledged sends of the QPs
// srq_pingpong no longer serves until its own end); the same case passed
// 6 of 6 runs here on a quiet machine with 1,300 to 1,700 packets late.
const lateWindow = time.Second

// proc is a running endpoint.
type proc struct {
	ep       endpoint
	exitedAt time.Time // when wait saw it end
	guest    *agent.Proc
	host     *hostProc
	inproc   *inprocRun
}

// inprocRun is an in-process endpoint running in a goroutine.
type inprocRun struct {
	cancel context.CancelFunc
	out    syncWriter
	done   chan struct{}
	err    error
}

// start starts an endpoint. A host softhca process gets SOFTHCA_STATS
// naming a file for its counters (used when the tool supports it).
func (e *env) start(ctx context.Context, ep endpoint, timeout time.Duration, statsFile string) (*proc, error) {
	p := &proc{ep: ep}
	var err error
	switch {
	case ep.guest:
		// Line-buffered output: a tool killed for hanging still shows
		// what it printed.
		argv := append([]string{"stdbuf", "-oL", "-eL"}, ep.argv...)
		p.guest, err = e.vm.Agent.Start(ctx, agent.Request{Argv: argv, Timeout: timeout}, nil, nil)
	case ep.inproc != nil:
		r := &inprocRun{done: make(chan struct{})}
		r.out.b = new(bytes.Buffer)
		var rctx context.Context
		rctx, r.cancel = context.WithTimeout(ctx, timeout)
		go func() {
			defer close(r.done)
			r.err = ep.inproc(rctx, &r.out, statsFile)
		}()
		p.inproc = r
	default:
		p.host, err = e.startHost(timeout, append([]string{"SOFTHCA_STATS=" + statsFile}, ep.env...), ep.argv...)
	}
	return p, err
}

func (p *proc) waitListen(ctx context.Context, e *env, port int) error {
	if p.guest != nil {
		err := e.vm.Agent.WaitListen(ctx, port, 20*time.Second)
		if err != nil {
			select {
			case <-p.guest.Done():
				r, _ := p.guest.Wait()
				return fmt.Errorf("%w; it ended: %s\n%s", err, r.Exit, r.Output(4000))
			default:
			}
		}
		return err
	}
	if p.inproc != nil {
		// In-process servers listen before they start.
		if !agent.ListeningHere(port) {
			return fmt.Errorf("nothing listens on TCP port %d", port)
		}
		return nil
	}
	return waitHostListen(p.host, port, 20*time.Second)
}

// wait waits for the endpoint to end: ok, how it ended, its output.
func (p *proc) wait() (bool, string, string) {
	defer func() { p.exitedAt = time.Now() }()
	if p.guest != nil {
		r, err := p.guest.Wait()
		out := string(r.Stdout) + string(r.Stderr)
		if err != nil {
			return false, err.Error(), out
		}
		return r.Exit.OK(), r.Exit.String(), out
	}
	if r := p.inproc; r != nil {
		<-r.done
		r.out.mu.Lock()
		out := r.out.b.String()
		r.out.mu.Unlock()
		if r.err != nil {
			return false, r.err.Error(), out
		}
		return true, "returned without error", out
	}
	return p.host.wait()
}

// abandon kills the endpoint if it still runs.
func (p *proc) abandon() {
	switch {
	case p.guest != nil:
		p.guest.Close()
	case p.inproc != nil:
		p.inproc.cancel()
	case !p.host.exited():
		p.host.kill()
	}
}

// readStats reads the counters a softhca tool wrote to SOFTHCA_STATS: a
// JSON object of counter names and numbers.
func readStats(path string) (Counters, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c := Counters{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			switch v := v.(type) {
			case float64:
				c[prefix+k] += uint64(v)
			case map[string]any:
				walk(prefix+k+".", v)
			}
		}
	}
	walk("", raw)
	return c, nil
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func sanitize(name string) string { return unsafeName.ReplaceAllString(name, "_") }

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// tapTxDropped reads the tap's count of packets it dropped on the way to
// the guest.
func tapTxDropped(dev string) uint64 {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", dev, "statistics/tx_dropped"))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v
}

// hostSide is what the capture expects of softhca's side of the packets:
// on a UDP socket on the bridge's address, that address and the bridge's
// MAC; on the host TAP (tap), the TAP host's address and MAC (link/tap's
// default for that address), and its own IPv4 headers.
func (e *env) hostSide(tap bool) HostSide {
	if tap {
		a := e.net.HostTapAddr.Addr()
		mac := tapdev.DefaultMAC(a)
		return HostSide{Addr: a, MAC: net.HardwareAddr(mac[:]), TAP: true}
	}
	h := HostSide{Addr: e.hostAddr()}
	if ifc, err := net.InterfaceByName(e.net.Bridge); err == nil {
		h.MAC = ifc.HardwareAddr
	}
	return h
}
