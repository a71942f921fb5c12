package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/wire"
)

// demoHeadings are the step headings in order.
var demoHeadings = []string{
	"Step 1: RC SEND",
	"Step 2: RDMA WRITE",
	"Step 3: RDMA READ",
	"Step 4: ATOMIC FETCH_AND_ADD",
	"Step 5: ATOMIC CMP_AND_SWP",
	"Step 6: UD SEND",
	"Step 7: TAG MATCHING, EAGER",
	"Step 8: TAG MATCHING, RENDEZVOUS",
}

// demoOpcodes are the opcodes the demo's ladder and capture must show.
var demoOpcodes = []wire.OpCode{
	wire.RCSendOnly, wire.RCAcknowledge, wire.RCRDMAWriteOnly, wire.RCRDMAReadRequest,
	wire.RCRDMAReadResponseOnly, wire.RCFetchAdd, wire.RCCompareSwap, wire.RCAtomicAcknowledge,
	wire.UDSendOnly,
}

// randomLoopback returns an -addrs value: two random neighbouring
// loopback addresses (Linux routes all of 127/8 to lo), so that parallel
// runs can all use port 4791, which a capture needs for wire.Parse (it
// takes only UDP port 4791 for RoCEv2) and tshark's usual command line.
func randomLoopback() string {
	x := rand.N(254) + 1
	y := rand.N(256)
	z := rand.N(127) * 2
	return fmt.Sprintf("127.%d.%d.%d,127.%d.%d.%d", x, y, z+1, x, y, z+2)
}

// runDemoOK runs the demo in-process and checks what every run must show:
// exit 0, the headings in order, the opcodes in the ladder, successful
// completions and the data checks. args select the ports: -port 0 or
// -addrs randomLoopback(), so that tests can run in parallel.
func runDemoOK(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCmd(t, append([]string{"demo"}, args...)...)
	checkDemoOK(t, code, stdout, stderr)
	return stdout
}

// checkDemoOK checks what every successful run of the demo shows.
func checkDemoOK(t *testing.T, code int, stdout, stderr string) {
	t.Helper()
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Empty(t, stderr)

	at := 0
	for _, h := range demoHeadings {
		i := strings.Index(stdout[at:], "\n"+h+"\n")
		require.GreaterOrEqual(t, i, 0, "heading %q missing or out of order:\n%s", h, stdout)
		at += i + 1
	}
	for _, op := range demoOpcodes {
		require.Regexp(t, `ms  A (->|<-) B  `+regexp.QuoteMeta(op.String())+`  qp=`, stdout, "ladder shows %s", op)
	}
	// Sixteen completions (two per SEND; steps 7 and 8 add the TAG_ADDs,
	// two TM_RECVs for the rendezvous and A's FIN), every one successful.
	wcs := regexp.MustCompile(`(?m)^    ([AB])  wr_id=(\d+)  status=([^ ]+(?: [^ ]+)*)  opcode=(\S+)  byte_len=(\d+)  imm=(\S+)(  flags=\S+)?(  tag=\S+)?$`).FindAllStringSubmatch(stdout, -1)
	require.Len(t, wcs, 16, "completions:\n%s", stdout)
	for _, m := range wcs {
		require.Equal(t, "success", m[3], "completion %q", m[0])
	}
	for _, want := range []string{
		"A  wr_id=1  status=success  opcode=SEND",
		"B  wr_id=1  status=success  opcode=RECV  byte_len=17",
		"A  wr_id=2  status=success  opcode=RDMA_WRITE",
		"A  wr_id=3  status=success  opcode=RDMA_READ  byte_len=25",
		"A  wr_id=4  status=success  opcode=FETCH_ADD",
		"A  wr_id=5  status=success  opcode=COMP_SWAP",
		"A  wr_id=6  status=success  opcode=SEND",
		"B  wr_id=6  status=success  opcode=RECV  byte_len=53",
		`B's buffer now holds: "Hello from A to B"`,
		`B's buffer now holds: "Written by A into B's memory"`,
		`A's buffer now holds: "Read by A from B's memory"`,
		"A's buffer now holds the original value 100; B's counter now holds 105",
		"A's buffer now holds the original value 105; B's counter now holds 7",
		`B's buffer now holds: "Hello over UD"`,
		"B  wr_id=70  status=success  opcode=TM_ADD",
		"B  wr_id=7  status=success  opcode=TM_RECV  byte_len=33  imm=none  flags=MATCH|DATA_VALID  tag=0x700",
		`B's tag buffer now holds: "Eager: the data rides in the SEND"`,
		"B  wr_id=8  status=success  opcode=TM_RECV  byte_len=43  imm=none  flags=MATCH  tag=0x701",
		"B  wr_id=8  status=success  opcode=TM_RECV  byte_len=43  imm=none  flags=DATA_VALID  tag=0x701",
		"A  wr_id=9  status=success  opcode=RECV  byte_len=16",
		"A's FIN: a TMH with opcode FIN and tag 0x701",
		`B's tag buffer now holds: "Read by B from A's memory, found by its tag"`,
		"All 8 steps passed",
	} {
		require.Contains(t, stdout, want)
	}
}

func TestDemo(t *testing.T) {
	t.Parallel()
	svg := filepath.Join(t.TempDir(), "demo.svg")
	out := runDemoOK(t, "-port", "0", "-svg", svg)
	require.Contains(t, out, "RC Acknowledge  qp=0x11 psn=100 aeth{ACK syn=0x1f msn=1} len=0", "the SEND's ACK")
	require.Contains(t, out, "A -> B  RC Send Only  qp=0x11 psn=100 ackreq len=17")
	require.Contains(t, out, "B's GRH area names the sender 127.0.0.1")
	require.NotContains(t, out, "LOST")
	require.NotContains(t, out, "icrc BAD")
	// Each packet once: without loss, exactly the 19 packets of the steps.
	require.Equal(t, 19, strings.Count(out, " ms  A "), out)
	require.Contains(t, out, "19 packets sent.")

	// The diagram: A's and B's lifelines, the 19 packets in the ladders'
	// order with their text.
	require.Contains(t, out, "Wrote the ladders of 19 packets to "+svg+" (an SVG sequence diagram).")
	root := parseSVG(t, svg)
	var eps []string
	for _, e := range root.byClass("endpoint") {
		eps = append(eps, e.Nodes[0].Text)
	}
	require.Len(t, eps, 2)
	require.Regexp(t, `^A 127\.0\.0\.1:\d+$`, eps[0])
	require.Regexp(t, `^B 127\.0\.0\.2:\d+$`, eps[1])
	pkts := root.byClass("packet")
	require.Len(t, pkts, 19)
	ladder := regexp.MustCompile(`(?m)^ +\d+\.\d{3} ms  A (?:->|<-) B  (.*)$`).FindAllStringSubmatch(out, -1)
	for i, p := range pkts {
		require.Equal(t, ladder[i][1], p.Nodes[0].Text, "packet %d", i+1)
	}
}

// TestDemoIPv6 runs the demo over IPv6 loopback. UD's GRH area then holds
// the IPv6 header itself (the demo used to check for 20 zero bytes and an
// IPv4 header, and failed step 6), with the hop limit the packet arrived
// with (it was 0 before link/udp reported it).
func TestDemoIPv6(t *testing.T) {
	t.Parallel()
	if c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback}); err != nil {
		t.Skipf("no IPv6 loopback (::1) here: %v", err)
	} else {
		c.Close()
	}
	out := runDemoOK(t, "-port", "0", "-addrs", "::1,::1")
	require.Contains(t, out, "  A: ::1 port ")
	require.Contains(t, out, "GRH: B's buffer starts with 40 bytes for the Global Route Header, so byte_len = 40 + 13.\n"+
		"  RoCEv2 over IPv6 has no GRH: the area holds the packet's IPv6 header, which has the GRH's layout.\n")
	require.Regexp(t, `(?m)^  B's GRH area names the sender ::1; the packet arrived with hop limit [1-9]\d*$`, out)
	require.NotContains(t, out, "IPv4")
	require.NotContains(t, out, "icrc BAD")
}

// TestCheckGRHArea: the demo's check of the GRH area, on headers as rxe
// lays them out and on the ones it must refuse.
func TestCheckGRHArea(t *testing.T) {
	a4, b4 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	a6, b6 := netip.MustParseAddr("::1"), netip.MustParseAddr("fe80::2")
	area := func(src, dst netip.Addr, hops uint8) []byte {
		n := wire.Net{Src: src, Dst: dst, SrcPort: 49152, DstPort: wire.RoCEv2Port, HopLimit: hops, DontFragment: true}
		var h [wire.IPv6HeaderSize + wire.UDPHeaderSize]byte
		wire.EncodeIPUDP(h[:], &n, 32)
		grh := make([]byte, 40)
		if src.Is4() {
			copy(grh[20:], h[:wire.IPv4HeaderSize])
		} else {
			copy(grh, h[:wire.IPv6HeaderSize])
		}
		return grh
	}
	for _, c := range []struct {
		src, dst netip.Addr
		hops     uint8
		grh      []byte
		err      string
	}{
		{src: a4, dst: b4, hops: 64},
		{src: a6, dst: b6, hops: 255},
		{src: a6, dst: b6, hops: 0, err: "hop limit 0, not the one the packet arrived with"},
		{src: a4, dst: b4, hops: 0, err: "hop limit 0"},
		{src: a4, dst: b4, grh: area(a6, b6, 64), err: "does not hold 20 zero bytes and an IPv4 header"},
		{src: a6, dst: b6, grh: area(a4, b4, 64), err: "does not hold an IPv6 header"},
		{src: a6, dst: b6, grh: area(b6, a6, 64), err: "names fe80::2 -> ::1, not A's packet ::1 -> fe80::2"},
	} {
		grh := c.grh
		if grh == nil {
			grh = area(c.src, c.dst, c.hops)
		}
		src, hops, err := checkGRHArea(grh, c.src, c.dst)
		if c.err != "" {
			require.ErrorContains(t, err, c.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, c.src, src)
		require.Equal(t, c.hops, hops)
	}
}

// TestDemoPcap checks the capture: every packet parses with wire.Parse,
// its ICRC verifies, each appears once, in the ladder's order, and tshark
// (when installed) dissects it as InfiniBand.
func TestDemoPcap(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "demo.pcap")
	out := runDemoOK(t, "-addrs", randomLoopback(), "-pcap", file)
	if strings.Contains(out, "using free ports instead") {
		t.Skip("UDP port 4791 is taken on every loopback address here (rdma_rxe loaded?): wire.Parse needs it")
	}
	require.Contains(t, out, "or check every ICRC with: softhca decode "+file)

	m := regexp.MustCompile(`Wrote (\d+) packets to (.*)\. `).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Equal(t, "19", m[1])
	require.Equal(t, file, m[2])

	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	require.NoError(t, err)
	require.Equal(t, layers.LinkTypeEthernet, r.LinkType())
	var ops []wire.OpCode
	var p wire.Packet
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			break
		}
		require.Greater(t, len(data), 14)
		require.Equal(t, wire.DropNone, wire.Parse(data[14:], &p), "frame %d", len(ops)+1)
		ops = append(ops, p.BTH.OpCode())
	}
	want := []wire.OpCode{
		wire.RCSendOnly, wire.RCAcknowledge,
		wire.RCRDMAWriteOnly, wire.RCAcknowledge,
		wire.RCRDMAReadRequest, wire.RCRDMAReadResponseOnly,
		wire.RCFetchAdd, wire.RCAtomicAcknowledge,
		wire.RCCompareSwap, wire.RCAtomicAcknowledge,
		wire.UDSendOnly,
		wire.RCSendOnly, wire.RCAcknowledge, // EAGER
	}
	require.Equal(t, want, ops[:len(want)])
	// The rendezvous: its request, B's READ and the ACK of the request
	// (B sends those two in the same turn), the READ's response, the FIN
	// and its ACK.
	rndv := []wire.OpCode{wire.RCSendOnly, wire.RCRDMAReadRequest, wire.RCAcknowledge,
		wire.RCRDMAReadResponseOnly, wire.RCSendOnly, wire.RCAcknowledge}
	require.ElementsMatch(t, rndv, ops[len(want):])

	// The printed tshark command names the ports the run used.
	cm := regexp.MustCompile(`(?m)^  (tshark -r .*)$`).FindStringSubmatch(out)
	require.NotNil(t, cm, out)
	args := strings.Fields(cm[1])[1:]
	require.Equal(t, []string{"-r", file}, args[:2])

	tshark := tsharkPath(t)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(tshark, append(args, "-T", "fields", "-e", "infiniband.bth.opcode", "-e", "_ws.col.Info")...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s\nstderr: %s", cm[1], stderr.String())
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	require.Len(t, lines, len(ops), stdout.String())
	for i, line := range lines {
		col := strings.SplitN(line, "\t", 2)
		require.Len(t, col, 2, "line %q", line)
		require.Equal(t, strconv.Itoa(int(ops[i])), col[0], "frame %d: %q", i+1, line)
		require.True(t, strings.HasPrefix(col[1], ops[i].String()), "frame %d: Info %q", i+1, col[1])
		require.NotContains(t, line, "Malformed")
	}
}

// tsharkPath returns tshark's path, or skips the test when it is not
// installed, except in CI (CI=true), where the test must run.
func tsharkPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("tshark is not on PATH, and CI=true: CI must install tshark (Wireshark) for this test: %v", err)
		}
		t.Skipf("tshark is not on PATH; install tshark (Wireshark) to run this test: %v", err)
	}
	return path
}

// TestDemoLoss drops RC packets: the ladder shows the lost ones and the
// retransmissions, and every step still succeeds.
func TestDemoLoss(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "loss.pcap")
	svg := filepath.Join(t.TempDir(), "loss.svg")
	out := runDemoOK(t, "-addrs", randomLoopback(), "-loss", "0.3", "-pcap", file, "-svg", svg)
	if strings.Contains(out, "using free ports instead") {
		t.Skip("UDP port 4791 is taken on every loopback address here (rdma_rxe loaded?): wire.Parse needs it")
	}
	require.Contains(t, out, "LOST (-loss)")
	require.Regexp(t, `\((retransmission|answer repeated)\)`, out)
	require.Contains(t, out, "Loss: A heard nothing back in time")
	require.Regexp(t, `\d+ packets sent, [1-9]\d* lost, [1-9]\d* retransmitted`, out)

	// The capture holds what crossed the wire: no lost packet, every ICRC good.
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	require.NoError(t, err)
	n := 0
	var p wire.Packet
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		require.Equal(t, wire.DropNone, wire.Parse(data[14:], &p))
		n++
	}
	sent := strings.Count(out, " ms  A ")
	lost := strings.Count(out, "LOST (-loss)")
	require.Equal(t, sent-lost, n)

	// The diagram draws the lost packets as dropped.
	root := parseSVG(t, svg)
	require.Len(t, root.byClass("packet"), sent)
	require.Len(t, root.byClass("dropped"), 2*lost, "each lost packet's group and arrow")
}

// TestDemoPortBusy occupies the demo's port: on every address (the demo
// falls back to free ports), or only on 127.0.0.1 (it moves to other
// loopback addresses and keeps the port).
func TestDemoPortBusy(t *testing.T) {
	t.Parallel()
	t.Run("wildcard", func(t *testing.T) {
		t.Parallel()
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
		require.NoError(t, err)
		defer c.Close()
		port := strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)
		code, stdout, stderr := runCmd(t, "demo", "-port", port)
		require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		require.Contains(t, stdout, "note: UDP port "+port+" on loopback: in use")
		require.Contains(t, stdout, "using free ports instead")
		require.NotContains(t, stdout, "port "+port+"    B:")
	})
	t.Run("127.0.0.1", func(t *testing.T) {
		t.Parallel()
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		require.NoError(t, err)
		defer c.Close()
		port := strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)
		code, stdout, stderr := runCmd(t, "demo", "-port", port)
		require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		require.Contains(t, stdout, "note: UDP port "+port+" on 127.0.0.1/127.0.0.2: in use")
		require.Contains(t, stdout, "A: 127.0.0.3 port "+port+"    B: 127.0.0.4 port "+port)
	})
}

func TestDemoUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"help", []string{"-h"}, exitOK, "usage: softhca demo"},
		{"extra argument", []string{"x"}, exitUsage, `unexpected argument "x"`},
		{"empty argument", []string{""}, exitUsage, `unexpected argument ""`},
		{"pcap is svg", []string{"-port", "0", "-pcap", filepath.Join(dir, "d.out"), "-svg", dir + "/./d.out"}, exitUsage, "-pcap and -svg name the same file " + filepath.Join(dir, "d.out")},
		{"bad flag", []string{"-nope"}, exitUsage, "flag provided but not defined: -nope"},
		{"port out of range", []string{"-port", "65536"}, exitUsage, "-port 65536 is not a UDP port"},
		{"negative port", []string{"-port", "-1"}, exitUsage, "-port -1 is not a UDP port"},
		{"loss out of range", []string{"-loss", "0.9"}, exitUsage, "-loss 0.9 is out of range"},
		{"loss NaN", []string{"-loss", "NaN"}, exitUsage, "is out of range"},
		{"addrs one", []string{"-addrs", "127.0.0.1"}, exitUsage, "want two addresses"},
		{"addrs bad", []string{"-addrs", "127.0.0.1,nope"}, exitUsage, `ParseAddr("nope")`},
		{"addrs families", []string{"-addrs", "127.0.0.1,::1"}, exitUsage, "one address is IPv4 and the other IPv6"},
		{"addrs same", []string{"-addrs", "127.0.0.1,127.0.0.1"}, exitUsage, "need different addresses"},
		{"pcap not writable", []string{"-pcap", filepath.Join(t.TempDir(), "no", "such", "dir.pcap")}, exitUsage, "no such file or directory"},
		{"svg not writable", []string{"-svg", filepath.Join(t.TempDir(), "no", "such", "dir.svg")}, exitUsage, "no such file or directory"},
		{"tap-name without tap", []string{"-tap-name", "t0"}, exitUsage, "-tap-name names the -tap interface: give -tap too"},
		{"tap-name too long", []string{"-tap", "-tap-name", "a-name-of-16-bytes"}, exitUsage, `-tap-name: interface name "a-name-of-16-bytes" is longer than 15 bytes`},
		{"tap-name empty", []string{"-tap", "-tap-name", ""}, exitUsage, "-tap-name: no interface name"},
		{"tap over IPv6", []string{"-tap", "-addrs", "fd13::2,fd13::1"}, exitUsage, "-tap runs over IPv4"},
		{"tap other network", []string{"-tap", "-addrs", "10.213.1.2,10.213.0.1"}, exitUsage, "-tap: A's 10.213.1.2 is not in 10.213.0.0/24, the kernel side's network"},
		{"tap same address", []string{"-tap", "-port", "0", "-addrs", "10.213.0.1,10.213.0.1"}, exitUsage, "need different addresses"},
		{"tap broadcast", []string{"-tap", "-addrs", "10.213.0.255,10.213.0.1"}, exitUsage, "10.213.0.255 is 10.213.0.0/24's network or broadcast address"},
		{"tap network", []string{"-tap", "-addrs", "10.213.0.2,10.213.0.0"}, exitUsage, "10.213.0.0 is 10.213.0.0/24's network or broadcast address"},
		{"tap loopback", []string{"-tap", "-addrs", "127.0.0.2,127.0.0.1"}, exitUsage, "127.0.0.2 is not a unicast address for a host on the TAP link"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(t, append([]string{"demo"}, tc.args...)...)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.stderr)
		})
	}
	code, stdout, _ := runCmd(t, "help", "demo")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "usage: softhca demo [-port N] [-addrs A,B] [-pcap FILE] [-svg FILE] [-loss P]")
}

// TestDemoMulticastAddrs: a multicast address for A is refused by name;
// before, the net package bound it as 0.0.0.0, and the message blamed
// that address.
func TestDemoMulticastAddrs(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCmd(t, "demo", "-port", "0", "-addrs", "224.0.0.1,224.0.0.2")
	require.Equal(t, exitFailure, code, stderr)
	require.Contains(t, stderr, "224.0.0.1 is not a unicast address")
	require.NotContains(t, stderr, "0.0.0.0")
}

// TestDemoFailure makes step 2 fail (B's memory region is deregistered,
// so the RDMA WRITE meets a remote access error): exit 1, a message that
// says which step failed and why, and every goroutine stopped. It does not
// run in parallel: it sets demoTestHook.
func TestDemoFailure(t *testing.T) {
	before := runtime.NumGoroutine()
	demoTestHook = func(d *demo, step int) {
		if step == 2 {
			require.NoError(t, d.b.mr.Dereg())
		}
	}
	defer func() { demoTestHook = nil }()
	svg := filepath.Join(t.TempDir(), "failed.svg")
	code, stdout, stderr := runCmd(t, "demo", "-port", "0", "-svg", svg)
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Contains(t, stdout, `B's buffer now holds: "Hello from A to B"`, "step 1 passed")
	require.Contains(t, stdout, "status=remote access error  opcode=RDMA_WRITE")
	require.Contains(t, stdout, "aeth{NAK remote access error")
	require.NotContains(t, stdout, "Step 3")
	require.NotContains(t, stdout, "msn has grown", "no explanation of a step that failed")
	require.Equal(t, "softhca demo: FAILED: step 2 (RDMA WRITE): A: wr_id 2 completed with \"remote access error\"\n", stderr)
	// The diagram has the steps that ran: the SEND and its ACK, the
	// WRITE and its NAK.
	pkts := parseSVG(t, svg).byClass("packet")
	require.Len(t, pkts, 4)
	require.True(t, strings.HasPrefix(pkts[3].Nodes[0].Text, "RC Acknowledge  qp=0x11 psn=101 aeth{NAK remote access error"), pkts[3].Nodes[0].Text)
	waitGoroutines(t, before)
}

// waitGoroutines waits until no more goroutines run than before.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before the demo, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDemoStopsGoroutines runs the demo alone (not in parallel) and checks
// that closing the devices stopped every goroutine it started.
func TestDemoStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	runDemoOK(t, "-port", "0")
	waitGoroutines(t, before)
}
