package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
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
	"github.com/softhca/softhca/cmd/softhca/internal/daemon"
	svgladder "github.com/softhca/softhca/cmd/softhca/internal/ladder"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/softhca/softhca/wire/pcap"
)

// traceSetup is a daemon, a device in the test's process on the
// neighbouring loopback address, and a QP on each, connected.
type traceSetup struct {
	d        *daemon.Daemon
	srv, cli *tracePeer
	// port is the UDP port of both devices: 4791 (on random loopback
	// addresses, as the demo's tests do, so that decode reads the
	// capture) unless it is taken everywhere tried.
	port uint16
}

// startTraceSetup starts the daemon (edit changes its configuration)
// and the peer.
func startTraceSetup(t *testing.T, edit func(*daemon.Config)) *traceSetup {
	t.Helper()
	var d *daemon.Daemon
	var l *udp.Link
	for try := 0; d == nil; try++ {
		pair := strings.Split(randomLoopback(), ",")
		port := uint16(wire.RoCEv2Port)
		if try >= 5 { // 4791 is taken (rdma_rxe loaded?): free ports
			pair, port = []string{"127.0.0.1", "127.0.0.2"}, 0
		}
		peer, err := udp.Open(udp.Config{Addr: netip.AddrPortFrom(netip.MustParseAddr(pair[1]), port)})
		if err != nil {
			require.Less(t, try, 5, "%v", err)
			continue
		}
		peerAddr, err := peer.LocalAddr()
		require.NoError(t, err)
		cfg := daemon.Config{
			Listen:    netip.AddrPortFrom(netip.MustParseAddr(pair[0]), port),
			PeerPort:  peerAddr.SrcPort,
			Control:   filepath.Join(t.TempDir(), "d.sock"),
			TraceRing: 64,
			Summarize: packetSummary,
		}
		if edit != nil {
			edit(&cfg)
		}
		d, err = daemon.Start(cfg)
		if err != nil {
			peer.Close()
			require.ErrorIs(t, err, daemon.ErrAddrInUse)
			require.Less(t, try, 5, "%v", err)
			continue
		}
		l = peer
	}
	t.Cleanup(func() { require.NoError(t, d.Stop()) })
	dev, err := hca.Open(hca.Config{Link: l, PeerPort: d.Listen().Port()})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })

	s := &traceSetup{d: d, srv: newTracePeer(t, d.Device()), cli: newTracePeer(t, dev), port: d.Listen().Port()}
	sg, err := s.srv.dev.QueryGID(1, 1)
	require.NoError(t, err)
	cg, err := s.cli.dev.QueryGID(1, 1)
	require.NoError(t, err)
	o := &hca.ConnectOptions{PathMTU: verbs.MTU1024, Access: verbs.AccessRemoteWrite}
	require.NoError(t, s.srv.qp.Connect(hca.Remote{QPN: s.cli.qp.Num(), GID: cg}, o))
	require.NoError(t, s.cli.qp.Connect(hca.Remote{QPN: s.srv.qp.Num(), GID: sg}, o))
	return s
}

// tracePeer is a QP and what it needs.
type tracePeer struct {
	dev *hca.Device
	cq  *hca.CQ
	mr  *hca.MR
	qp  *hca.QP
}

func newTracePeer(t *testing.T, dev *hca.Device) *tracePeer {
	t.Helper()
	p := &tracePeer{dev: dev}
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	p.cq, err = dev.CreateCQ(64, nil, nil, 0)
	require.NoError(t, err)
	// Text, not zeros, which Wireshark's heuristic dissectors (SMB
	// Direct, RPC over RDMA) take for theirs.
	buf := bytes.Repeat([]byte("softhca trace "), 4096/14+1)[:4096]
	p.mr, err = pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	p.qp, err = pd.CreateQP(&hca.QPInitAttr{SendCQ: p.cq, RecvCQ: p.cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	return p
}

func (p *tracePeer) waitWC(t *testing.T) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make([]verbs.WC, 1)
	n, err := p.cq.PollWait(ctx, wcs)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, verbs.WCSuccess, wcs[0].Status, "%+v", wcs[0])
	return wcs[0]
}

// send has the peer SEND n bytes to the daemon's QP and waits for both
// completions: the daemon received a SEND and sent its ACK.
func (s *traceSetup) send(t *testing.T, n uint32) {
	t.Helper()
	_, err := s.srv.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{s.srv.mr.SGE(0, 4096)}})
	require.NoError(t, err)
	_, err = s.cli.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{s.cli.mr.SGE(0, int(n))}})
	require.NoError(t, err)
	s.cli.waitWC(t)
	require.Equal(t, n, s.srv.waitWC(t).ByteLen)
}

// write has the daemon's QP RDMA WRITE n bytes into the peer's memory:
// the daemon sent a WRITE and received its ACK.
func (s *traceSetup) write(t *testing.T, n uint32) {
	t.Helper()
	_, err := s.srv.qp.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{s.srv.mr.SGE(0, int(n))}, RDMA: verbs.RDMAInfo{RemoteAddr: s.cli.mr.Addr(), RKey: s.cli.mr.RKey()}})
	require.NoError(t, err)
	s.srv.waitWC(t)
}

// ladderLine matches a ladder line: time, the daemon's address, the
// direction, the peer's address and the summary.
var ladderLine = regexp.MustCompile(`^ +(\d+\.\d{3}) ms  (\S+) (->|<-) (\S+)  (.+)$`)

// TestTrace runs the trace command on a daemon's recent packets: the
// ladder, the capture (decode and tshark read it, every ICRC verifies)
// and the SVG.
func TestTrace(t *testing.T) {
	s := startTraceSetup(t, nil)
	s.send(t, 17)
	s.send(t, 300)
	s.write(t, 40)
	s.send(t, 0)
	// The daemon received 3 SENDs and sent their ACKs, and sent a WRITE
	// and received its ACK: 8 packets.
	dir := t.TempDir()
	pcapFile, svgFile := filepath.Join(dir, "t.pcap"), filepath.Join(dir, "t.svg")
	var stdout, stderr bytes.Buffer
	code := traceCommand(context.Background(), []string{"--control", s.d.ControlPath(), "-c", "8", "--recent", "8",
		"-w", pcapFile, "--svg", svgFile}, &stdout, &stderr)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())

	local, peer := s.d.Listen().String(), netip.AddrPortFrom(s.cli.dev.Config().Addrs[0], s.port).String()
	type row struct{ arrow, op string }
	want := []row{
		{"<-", "RC Send Only"}, {"->", "RC Acknowledge"},
		{"<-", "RC Send Only"}, {"->", "RC Acknowledge"},
		{"->", "RC RDMA Write Only"}, {"<-", "RC Acknowledge"},
		{"<-", "RC Send Only"}, {"->", "RC Acknowledge"},
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Len(t, lines, len(want), stdout.String())
	var summaries []string
	last := -1.0
	for i, l := range lines {
		m := ladderLine.FindStringSubmatch(l)
		require.NotNil(t, m, "line %q", l)
		var ms float64
		_, err := fmt.Sscan(m[1], &ms)
		require.NoError(t, err)
		if i == 0 {
			require.Equal(t, "0.000", m[1], "times are from the first packet")
		}
		require.GreaterOrEqual(t, ms, last)
		last = ms
		require.Equal(t, local, m[2], "the daemon's address on the left")
		require.Equal(t, want[i].arrow, m[3], "line %q", l)
		require.Equal(t, peer, m[4])
		require.True(t, strings.HasPrefix(m[5], want[i].op+"  qp="), "line %q: want %s", l, want[i].op)
		summaries = append(summaries, m[5])
	}
	require.Contains(t, summaries[0], " ackreq len=17")
	require.Contains(t, summaries[2], " ackreq len=300")
	require.Contains(t, summaries[4], " reth{va=")
	require.Contains(t, summaries[6], " ackreq len=0")

	require.Contains(t, stderr.String(), "softhca trace: wrote 8 packets to "+pcapFile+"; show them with:\n")
	require.Contains(t, stderr.String(), "softhca trace: wrote the ladder of 8 packets to "+svgFile+"\n")

	checkTraceCapture(t, pcapFile, s.port, summaries, stderr.String())
	checkTraceSVG(t, svgFile, local, peer, summaries)
}

// checkTraceCapture checks the capture: Ethernet frames with the
// packets' times in order, each ICRC good over the IP and UDP headers
// written; when the devices used port 4791, decode reads every packet
// with its ICRC good and the ladder's summary; tshark (when installed)
// dissects each as the ladder's opcode with the ICRC decode verified.
func checkTraceCapture(t *testing.T, file string, port uint16, summaries []string, traceStderr string) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	r, err := openCapture(f) // decode's reader
	require.NoError(t, err)
	var prev time.Time
	var icrcs []string // as tshark shows them: the last 4 bytes, big-endian
	var ops []string   // the BTH's opcode numbers
	n := 0
	for {
		fr, err := r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.EqualValues(t, 1, fr.linkType, "LINKTYPE_ETHERNET")
		require.False(t, fr.time.Before(prev))
		prev = fr.time
		// The ICRC verifies over the rebuilt headers, IPv4 ID included,
		// whatever the port (wire.Parse takes only 4791).
		ip, what := linkPayload(fr.linkType, fr.data)
		require.NotNil(t, ip, what)
		require.Equal(t, byte(0x45), ip[0])
		total := int(ip[2])<<8 | int(ip[3])
		nt := wire.Net{Src: netip.AddrFrom4([4]byte(ip[12:16])), Dst: netip.AddrFrom4([4]byte(ip[16:20])),
			SrcPort: uint16(ip[20])<<8 | uint16(ip[21]), DstPort: uint16(ip[22])<<8 | uint16(ip[23]),
			ID: uint16(ip[4])<<8 | uint16(ip[5]), DontFragment: ip[6]&0x40 != 0, TrafficClass: ip[1], HopLimit: ip[8]}
		require.True(t, wire.CheckICRC(&nt, ip[28:total]), "frame %d: ICRC", n+1)
		icrcs = append(icrcs, fmt.Sprintf("0x%x", ip[total-4:total]))
		ops = append(ops, strconv.Itoa(int(ip[28])))
		n++
	}
	require.NoError(t, f.Close())
	require.Equal(t, len(summaries), n)

	if port != wire.RoCEv2Port {
		t.Logf("the devices used port %d, not 4791: decode cannot read the capture (it takes only 4791)", port)
	} else {
		require.Contains(t, traceStderr, "or check every ICRC with: softhca decode "+file+"\n")
		code, out, errOut := runCmd(t, "decode", "-v", file)
		require.Equal(t, exitOK, code, "%s\n%s", out, errOut)
		require.Contains(t, out, fmt.Sprintf("%s: %d packets, %d RoCEv2, %d ok, 0 bad, 0 not RoCEv2\n", file, n, n, n))
		frames := regexp.MustCompile(`(?m)^frame (\d+): \S+ \S+ -> \S+: (.*) icrc ok \(0x[0-9a-f]{8}\)$`).FindAllStringSubmatch(out, -1)
		require.Len(t, frames, n, out)
		for i, fr := range frames {
			// decode's line has one space after the opcode, the ladder two.
			got := regexp.MustCompile(` pad=\d+ ip\{.*\}$`).ReplaceAllString(fr[2], "")
			got = strings.Replace(got, " pkey=0xffff", "", 1)
			require.Equal(t, strings.Replace(summaries[i], "  ", " ", 1), got, "frame %d", i+1)
		}
	}
	checkTshark(t, traceStderr, summaries, ops, icrcs)
}

// checkTshark runs the tshark command trace printed: every packet is
// dissected as InfiniBand, with the ladder's opcode and the ICRC decode
// verified (tshark 4.0 shows the ICRC but does not check it), and no
// expert info (malformed, bad checksum).
func checkTshark(t *testing.T, traceStderr string, summaries, ops, icrcs []string) {
	t.Helper()
	cm := regexp.MustCompile(`(?m)^  (tshark -r .*)$`).FindStringSubmatch(traceStderr)
	require.NotNil(t, cm, traceStderr)
	args := strings.Fields(cm[1])[1:]
	tshark := tsharkPath(t)
	// Wireshark 4.0's heuristic RPC-over-RDMA dissector reads past the
	// end of an empty SEND payload (and of short ones of zeros) and
	// calls the packet malformed: it is not asked here.
	args = append(args, "--disable-heuristic", "rpcrdma_infiniband")
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(tshark, append(args, "-T", "fields", "-e", "infiniband.bth.opcode", "-e", "_ws.col.Info",
		"-e", "infiniband.invariant.crc", "-e", "_ws.expert.message")...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s\nstderr: %s", cm[1], stderr.String())
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	require.Len(t, lines, len(summaries), stdout.String())
	for i, l := range lines {
		col := strings.Split(l, "\t")
		require.Len(t, col, 4, "line %q", l)
		require.Equal(t, ops[i], col[0], "frame %d: opcode: %q", i+1, l)
		op, _, _ := strings.Cut(summaries[i], "  ")
		require.True(t, strings.HasPrefix(col[1], op), "frame %d: Info %q, want %s", i+1, col[1], op)
		require.Equal(t, icrcs[i], col[2], "frame %d: ICRC: %q", i+1, l)
		require.Empty(t, col[3], "frame %d: tshark's expert info: %q", i+1, l)
	}
}

// svgNode is an element of a parsed SVG.
type svgNode struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []svgNode  `xml:",any"`
	Text    string     `xml:",chardata"`
}

// byClass returns the elements below n whose class list has c.
func (n *svgNode) byClass(c string) []*svgNode {
	var out []*svgNode
	for i := range n.Nodes {
		m := &n.Nodes[i]
		for _, a := range m.Attrs {
			if a.Name.Local == "class" && strings.Contains(" "+a.Value+" ", " "+c+" ") {
				out = append(out, m)
			}
		}
		out = append(out, m.byClass(c)...)
	}
	return out
}

// parseSVG parses an SVG file, strictly.
func parseSVG(t *testing.T, file string) *svgNode {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	var root svgNode
	require.NoError(t, dec.Decode(&root), "%s", b)
	require.Equal(t, "svg", root.XMLName.Local)
	return &root
}

// checkTraceSVG parses the diagram: its title, a lifeline for the
// daemon's address and one for the peer's, and an arrow per packet in
// order, with its summary as the tooltip.
func checkTraceSVG(t *testing.T, file, local, peer string, summaries []string) {
	t.Helper()
	root := parseSVG(t, file)
	title := root.byClass("title")
	require.Len(t, title, 1)
	require.True(t, strings.HasPrefix(title[0].Text, fmt.Sprintf("softhca trace: %d packets from ", len(summaries))), title[0].Text)
	var eps []string
	for _, e := range root.byClass("endpoint") {
		eps = append(eps, e.Nodes[0].Text)
	}
	require.Equal(t, []string{local, peer}, eps, "the daemon's lifeline on the left, as on the ladder")
	require.Len(t, root.byClass("lifeline"), 2)
	pkts := root.byClass("packet")
	require.Len(t, pkts, len(summaries))
	for i, p := range pkts {
		require.Equal(t, "title", p.Nodes[0].XMLName.Local)
		require.Equal(t, summaries[i], p.Nodes[0].Text)
		require.Len(t, p.byClass("arrow"), 1)
	}
}

// traceRun is a trace command running in a goroutine with stdout on a
// pipe: lines delivers stdout line by line, done the exit status.
type traceRun struct {
	lines  chan string
	done   chan int
	stderr *bytes.Buffer
	cancel context.CancelFunc
}

func startTrace(t *testing.T, run func(ctx context.Context, args []string, stdout, stderr io.Writer) int, args ...string) *traceRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	tr := &traceRun{lines: make(chan string, 100), done: make(chan int, 1), stderr: new(bytes.Buffer), cancel: cancel}
	go func() {
		code := run(ctx, args, pw, tr.stderr)
		pw.Close()
		tr.done <- code
	}()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			tr.lines <- sc.Text()
		}
		close(tr.lines)
	}()
	t.Cleanup(func() {
		cancel()
		pr.Close()
	})
	return tr
}

func (tr *traceRun) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-tr.lines:
		require.True(t, ok, "trace ended early; stderr:\n%s", tr.stderr)
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("no ladder line; stderr:\n%s", tr.stderr)
	}
	return ""
}

func (tr *traceRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-tr.done:
		return code
	case <-time.After(10 * time.Second):
		t.Fatalf("the trace did not stop; stderr:\n%s", tr.stderr)
	}
	return -1
}

// TestTraceLive follows packets as they come, in JSON, and stops after
// -c.
func TestTraceLive(t *testing.T) {
	s := startTraceSetup(t, nil)
	s.send(t, 8)
	// The ring's last packet (the ACK) comes first: once it is printed,
	// the stream is open, and the next SEND's packets come live.
	tr := startTrace(t, traceCommand, "--control", s.d.ControlPath(), "--recent", "1", "-c", "3", "-j")
	var pkts []traceJSON
	next := func() {
		var p traceJSON
		require.NoError(t, json.Unmarshal([]byte(tr.line(t)), &p))
		pkts = append(pkts, p)
	}
	next()
	s.send(t, 9)
	next()
	next()
	require.Equal(t, exitOK, tr.wait(t), tr.stderr.String())
	require.Empty(t, tr.stderr.String())

	var dirs, ops []string
	for _, p := range pkts {
		require.NotNil(t, p.Packet)
		dirs = append(dirs, p.Dir)
		op, _, _ := strings.Cut(p.Summary, "  ")
		ops = append(ops, op)
		require.Zero(t, p.Lost)
		n, err := packetNet(p.Packet)
		require.NoError(t, err)
		require.True(t, wire.CheckICRC(&n, p.Data), "the packet's ICRC, with the recovered IPv4 ID")
	}
	require.Equal(t, []string{"sent", "received", "sent"}, dirs)
	require.Equal(t, []string{"RC Acknowledge", "RC Send Only", "RC Acknowledge"}, ops)
	require.Contains(t, pkts[1].Summary, " len=9")
	require.Greater(t, pkts[1].Time, pkts[0].Time)
}

// TestTraceSignal: SIGINT stops the trace, which then writes its files
// and exits 0.
func TestTraceSignal(t *testing.T) {
	s := startTraceSetup(t, nil)
	s.send(t, 21)
	dir := t.TempDir()
	pcapFile, svgFile := filepath.Join(dir, "t.pcap"), filepath.Join(dir, "t.svg")
	tr := startTrace(t, func(_ context.Context, args []string, stdout, stderr io.Writer) int {
		return runTrace(args, stdout, stderr) // the real signal handling
	}, "--control", s.d.ControlPath(), "--recent", "2", "-w", pcapFile, "--svg", svgFile)
	var summaries []string
	for range 2 {
		m := ladderLine.FindStringSubmatch(tr.line(t))
		require.NotNil(t, m)
		summaries = append(summaries, m[5])
	}
	// runTrace watches for SIGINT before it prints anything.
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	require.Equal(t, exitOK, tr.wait(t), tr.stderr.String())
	require.Contains(t, tr.stderr.String(), "wrote 2 packets to "+pcapFile)
	checkTraceCapture(t, pcapFile, s.port, summaries, tr.stderr.String())
	b, err := os.ReadFile(svgFile)
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(b, new(svgNode)))
	require.Equal(t, 2, strings.Count(string(b), `<g class="packet"`))
}

// TestTraceDaemonStops: a trace whose daemon stops says so, writes what
// it has and exits 1.
func TestTraceDaemonStops(t *testing.T) {
	s := startTraceSetup(t, nil)
	s.send(t, 1)
	pcapFile := filepath.Join(t.TempDir(), "t.pcap")
	tr := startTrace(t, traceCommand, "--control", s.d.ControlPath(), "--recent", "1", "-w", pcapFile)
	require.Regexp(t, ladderLine, tr.line(t))
	require.NoError(t, s.d.Stop())
	require.Equal(t, exitFailure, tr.wait(t))
	require.Contains(t, tr.stderr.String(), "the daemon closed the connection")
	require.Contains(t, tr.stderr.String(), "wrote 1 packets to "+pcapFile)
}

// TestTraceNoRing: a daemon that keeps no packets refuses the stream.
func TestTraceNoRing(t *testing.T) {
	s := startTraceSetup(t, func(c *daemon.Config) { c.TraceRing = 0 })
	var stdout, stderr bytes.Buffer
	code := traceCommand(context.Background(), []string{"--control", s.d.ControlPath()}, &stdout, &stderr)
	require.Equal(t, exitFailure, code)
	require.Empty(t, stdout.String())
	require.Equal(t, "softhca trace: the daemon keeps no packets (it was started with --trace-ring 0)\n", stderr.String())
}

// TestTraceNoDaemon: without a daemon, trace says so and exits 1,
// creating no file.
func TestTraceNoDaemon(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	out := filepath.Join(dir, "t.pcap")
	code, stdout, stderr := runCmd(t, "trace", "-w", out)
	require.Equal(t, exitFailure, code)
	require.Empty(t, stdout)
	require.Equal(t, "softhca trace: no softhca daemon is running (no control socket in "+filepath.Join(dir, "softhca")+"; start one with `softhca serve`)\n", stderr)
	_, err := os.Stat(out)
	require.ErrorIs(t, err, os.ErrNotExist)

	code, _, stderr = runCmd(t, "trace", "-d", "softhca7")
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "no softhca daemon is running at "+filepath.Join(dir, "softhca", "softhca7.sock"))

	// A stale socket nobody listens on is no daemon either.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "softhca"), 0o700))
	stale := filepath.Join(dir, "softhca", "x.sock")
	require.NoError(t, os.WriteFile(stale, nil, 0o600))
	code, _, stderr = runCmd(t, "trace")
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "no softhca daemon is running at "+stale)
}

func TestTraceUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-d", "a", "--control", "b"}, "-d and --control both name a daemon"},
		{[]string{"-c", "-1"}, "-c -1: want 0 (no limit) or more"},
		{[]string{"--recent", "-2"}, "--recent -2: want 0 or more"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{""}, `unexpected argument ""`},
		{[]string{"-w", "x", "--svg", "x"}, "-w and --svg name the same file x"},
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
	} {
		code, stdout, stderr := runCmd(t, append([]string{"trace"}, tc.args...)...)
		require.Equal(t, exitUsage, code, "%v", tc.args)
		require.Empty(t, stdout)
		require.Contains(t, stderr, tc.msg)
	}
	code, stdout, _ := runCmd(t, "help", "trace")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "usage: softhca trace [-d NAME | --control PATH]")

	// An output file that cannot be created.
	s := startTraceSetup(t, nil)
	code, _, stderr := runCmd(t, "trace", "--control", s.d.ControlPath(), "-w", filepath.Join(t.TempDir(), "no", "such", "dir.pcap"))
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "no such file or directory")
}

// TestTraceLostNote: packets the stream lost are noted on the ladder,
// in JSON and as a gap in the diagram.
func TestTraceLostNote(t *testing.T) {
	p := &control.Packet{Time: 1e9, Dir: "received", Src: "10.0.0.2:4791", Dst: "10.0.0.1:4791", Summary: "RC Send Only  qp=0x11"}
	var out bytes.Buffer
	tr := &tracer{out: &out, svg: true}
	require.NoError(t, tr.packet(p, 5))
	require.Equal(t, "  (5 packets lost here: the trace read more slowly than the device moved them)\n"+
		"     0.000 ms  10.0.0.1:4791 <- 10.0.0.2:4791  RC Send Only  qp=0x11\n", out.String())
	require.Equal(t, uint64(5), tr.events[0].Lost)
	require.Equal(t, "10.0.0.2:4791", tr.events[0].From)

	out.Reset()
	tr = &tracer{out: &out, json: true}
	require.NoError(t, tr.packet(p, 5))
	var j map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &j))
	require.Equal(t, float64(5), j["lost"])
	require.Equal(t, "received", j["dir"])
}

// TestTraceOddPackets: a packet without a summary is summarised here; one
// whose addresses make no IP header stays out of the capture, with a
// note; nothing panics.
func TestTraceOddPackets(t *testing.T) {
	_, err := netip.ParseAddrPort("nonsense")
	bad := err.Error()
	var out, pbuf bytes.Buffer
	tr := &tracer{out: &out, ports: map[uint16]bool{}}
	pw := bufio.NewWriter(&pbuf)
	tr.pcapBuf = pw
	tr.pcap, err = pcap.NewWriter(pw)
	require.NoError(t, err)
	require.NoError(t, tr.packet(&control.Packet{Dir: "sent", Src: "10.0.0.1:4791", Dst: "[::1]:4791", Data: []byte{1, 2, 3}}, 0))
	require.NoError(t, tr.packet(&control.Packet{Dir: "sent", Src: "nonsense", Dst: "10.0.0.2:4791"}, 0))
	require.NoError(t, tr.packet(&control.Packet{Dir: "sent", Src: "10.0.0.1:4791", Dst: "10.0.0.2:4791", Data: make([]byte, 16)}, 0))
	require.Equal(t, ""+
		"     0.000 ms  10.0.0.1:4791 -> [::1]:4791  from 10.0.0.1:4791 to [::1]:4791: not both IPv4 or both IPv6\n"+
		"  (not in the capture: from 10.0.0.1:4791 to [::1]:4791: not both IPv4 or both IPv6)\n"+
		"     0.000 ms  nonsense -> 10.0.0.2:4791  source \"nonsense\": "+bad+"\n"+
		"  (not in the capture: source \"nonsense\": "+bad+")\n"+
		"     0.000 ms  10.0.0.1:4791 -> 10.0.0.2:4791  DROP "+wire.DropBadICRC.String()+"\n", out.String())
	require.Equal(t, 1, tr.pcapPkts)
}

// TestTracePcapHeaders: the capture's IP headers are those the ICRC was
// computed over: a peer's IPv4 Identification (rxe sends one; softhca
// sends 0) is recovered from the ICRC, and IPv6 packets keep their
// traffic class and hop limit; decode verifies every ICRC.
func TestTracePcapHeaders(t *testing.T) {
	h := wire.Headers{BTH: wire.BTHFields{OpCode: wire.RCSendOnly, PKey: 0xffff, DestQP: 0x11, AckReq: true, PSN: 7}}
	v4 := wire.Net{Src: netip.MustParseAddr("192.0.2.2"), Dst: netip.MustParseAddr("192.0.2.1"), SrcPort: 49152, DstPort: wire.RoCEv2Port,
		ID: 0x1234, DontFragment: true, HopLimit: 64, TrafficClass: 0x02}
	v6 := wire.Net{Src: netip.MustParseAddr("2001:db8::2"), Dst: netip.MustParseAddr("2001:db8::1"), SrcPort: 49153, DstPort: wire.RoCEv2Port,
		HopLimit: 1, TrafficClass: 0x62}
	var pkts []*control.Packet
	for i, n := range []wire.Net{v4, v6} {
		pkts = append(pkts, &control.Packet{Time: int64(i+1) * 1e6, Dir: "received",
			Src: netip.AddrPortFrom(n.Src, n.SrcPort).String(), Dst: netip.AddrPortFrom(n.Dst, n.DstPort).String(),
			TrafficClass: n.TrafficClass, HopLimit: n.HopLimit, Data: wire.AppendPacket(nil, &n, &h, []byte("hello"))})
	}

	file := filepath.Join(t.TempDir(), "h.pcap")
	f, err := os.Create(file)
	require.NoError(t, err)
	var out bytes.Buffer
	tr := &tracer{out: &out, ports: map[uint16]bool{}, pcapBuf: bufio.NewWriter(f)}
	tr.pcap, err = pcap.NewWriter(tr.pcapBuf)
	require.NoError(t, err)
	for _, p := range pkts {
		require.NoError(t, tr.packet(p, 0))
	}
	require.NoError(t, tr.pcapBuf.Flush())
	require.NoError(t, f.Close())
	require.Equal(t, ""+
		"     0.000 ms  192.0.2.1:4791 <- 192.0.2.2:49152  RC Send Only  qp=0x11 psn=7 ackreq len=5\n"+
		"     1.000 ms  [2001:db8::1]:4791 <- [2001:db8::2]:49153  RC Send Only  qp=0x11 psn=7 ackreq len=5\n", out.String())
	require.Equal(t, []uint16{wire.RoCEv2Port}, tr.portList(), "the ports peers send to, not from")

	code, stdout, stderr := runCmd(t, "decode", "-v", file)
	require.Equal(t, exitOK, code, "%s%s", stdout, stderr)
	require.Contains(t, stdout, "frame 1: 0.000000 192.0.2.2:49152 -> 192.0.2.1:4791: RC Send Only qp=0x11 psn=7 ackreq pkey=0xffff len=5 pad=3 ip{id=0x1234 tos=0x02 ttl=64 df} icrc ok")
	require.Contains(t, stdout, "frame 2: 0.001000 [2001:db8::2]:49153 -> [2001:db8::1]:4791: RC Send Only qp=0x11 psn=7 ackreq pkey=0xffff len=5 pad=3 ip{tclass=0x62 flow=0x0 hlim=1} icrc ok")
	require.Contains(t, stdout, "2 packets, 2 RoCEv2, 2 ok, 0 bad")
}

// TestTraceKeepsFirstArrows: for --svg a long trace keeps only the
// packets the diagram shows, and counts the rest.
func TestTraceKeepsFirstArrows(t *testing.T) {
	tr := &tracer{out: io.Discard, svg: true}
	for i := range 250 {
		require.NoError(t, tr.packet(&control.Packet{Time: int64(i), Dir: "sent", Src: "10.0.0.1:4791", Dst: "10.0.0.2:4791", Summary: "x"}, 0))
	}
	require.Len(t, tr.events, svgladder.MaxArrows)
	require.Equal(t, 50, tr.more)
	require.Equal(t, "10.0.0.1:4791", tr.local)
}
