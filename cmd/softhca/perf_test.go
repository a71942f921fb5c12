package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/cmd/softhca/internal/perftest"
)

// perfRun is the outcome of one side of softhca perf.
type perfRun struct {
	code     int
	out, err string
	res      *perftest.Result
}

// perfAddrs returns the device options of a server and a client on two
// random loopback addresses (Linux routes all of 127/8 to lo): port 4791
// there when it is free, else free ports named with --peer-port. The
// server's device takes its address from the exchange connection.
func perfAddrs(t *testing.T) (serverIP netip.Addr, serverArgs, clientArgs []string) {
	t.Helper()
	x, y, z := rand.N(254)+1, rand.N(256), rand.N(127)*2
	s := netip.AddrFrom4([4]byte{127, byte(x), byte(y), byte(z + 1)})
	c := netip.AddrFrom4([4]byte{127, byte(x), byte(y), byte(z + 2)})
	free := true
	for _, a := range []netip.Addr{s, c} {
		pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 4791)))
		if err != nil {
			free = false
			continue
		}
		pc.Close()
	}
	if free {
		return s, nil, []string{"--addr", c.String()}
	}
	port := func(a netip.Addr) uint16 {
		pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)))
		require.NoError(t, err)
		defer pc.Close()
		return uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	}
	ps, pcl := port(s), port(c)
	return s, []string{"--addr", netip.AddrPortFrom(s, ps).String(), "--peer-port", fmt.Sprint(pcl)},
		[]string{"--addr", netip.AddrPortFrom(c, pcl).String(), "--peer-port", fmt.Sprint(ps)}
}

// runPerfPair runs "softhca perf" as server and as client in this
// process with the same arguments, and returns both outcomes.
func runPerfPair(t *testing.T, test string, args ...string) (server, client perfRun) {
	t.Helper()
	return runPerfPairSides(t, test, nil, nil, args...)
}

// runPerfPairSides is runPerfPair with serverArgs for the server only and
// clientArgs for the client only.
func runPerfPairSides(t *testing.T, test string, serverArgs, clientArgs []string, args ...string) (server, client perfRun) {
	t.Helper()
	ip, sa, ca := perfAddrs(t)
	listening := make(chan net.Addr, 1)
	var mu sync.Mutex
	results := map[bool]*perftest.Result{}
	perfListening = func(a net.Addr) { listening <- a }
	perfDone = func(o *perftest.Options, r *perftest.Result) {
		mu.Lock()
		defer mu.Unlock()
		results[o.Server == ""] = r
	}
	defer func() { perfListening, perfDone = nil, nil }()

	common := append([]string{test, "--timeout", "20s"}, args...)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var out, errb bytes.Buffer
		server.code = runPerf(slices.Concat(common, []string{"-p", "0"}, sa, serverArgs), &out, &errb)
		server.out, server.err = out.String(), errb.String()
		if server.code != exitOK {
			listening <- nil // the client must not wait
		}
	}()
	a := <-listening
	if a != nil {
		port := fmt.Sprint(a.(*net.TCPAddr).Port)
		var out, errb bytes.Buffer
		client.code = runPerf(slices.Concat(common, []string{"-p", port, ip.String()}, ca, clientArgs), &out, &errb)
		client.out, client.err = out.String(), errb.String()
	}
	wg.Wait()
	require.Equal(t, exitOK, server.code, "server stdout:\n%s\nstderr:\n%s", server.out, server.err)
	require.Equal(t, exitOK, client.code, "client stdout:\n%s\nstderr:\n%s", client.out, client.err)
	server.res, client.res = results[true], results[false]
	return server, client
}

// bwLine matches a bandwidth table line (REPORT_FMT).
var bwLine = regexp.MustCompile(`^ (\d+) {4,}(\d+) {7,}(\d+\.\d\d) {12,}(\d+\.\d\d) *\t\t   (\d+\.\d{6})$`)

// tableLines returns the lines after the header line h in out, up to the
// next dashed line.
func tableLines(t *testing.T, out, h string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(out, "\n"+h+"\n")
	require.True(t, ok, "no header %q in:\n%s", h, out)
	rows, _, ok := strings.Cut(rest, strings.Repeat("-", 87)+"\n")
	require.True(t, ok, "no closing line in:\n%s", out)
	return strings.Split(strings.TrimSuffix(rows, "\n"), "\n")
}

func TestPerfWrite(t *testing.T) {
	srv, cli := runPerfPair(t, "write", "-n", "20", "-s", "3000", "-F")
	for _, r := range []perfRun{srv, cli} {
		require.Contains(t, r.out, "                    RDMA_Write BW Test\n")
		require.Contains(t, r.out, " Connection type : RC\t\tUsing SRQ      : OFF\n")
		require.Regexp(t, `(?m)^ local address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN 0x[0-9a-f]{1,6} RKey 0x[0-9a-f]{6,8} VAddr 0x[0-9a-f]{14,16}$`, r.out)
		require.Regexp(t, `(?m)^ GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:\d+:\d+:\d+$`, r.out)
		rows := tableLines(t, r.out, perftest.BWHeader)
		require.Len(t, rows, 1)
		m := bwLine.FindStringSubmatch(rows[0])
		require.NotNil(t, m, "%q", rows[0])
		require.Equal(t, []string{"3000", "20"}, m[1:3])
	}
	// The server printed the client's line.
	require.Equal(t, tableLines(t, cli.out, perftest.BWHeader), tableLines(t, srv.out, perftest.BWHeader))
	require.Contains(t, srv.out, "Waiting for client to connect")
	// Every slot the client wrote arrived in the server's area.
	reg := cli.res.Region
	for off := 0; off+3000 <= 4096; off += 3008 {
		require.Equal(t, cli.res.Buf[off:off+3000], srv.res.Buf[reg+off:reg+off+3000])
	}
	require.Empty(t, cli.err)
}

func TestPerfSend(t *testing.T) {
	// SOFTHCA_STATS: both sides (one process here) write their counters.
	stats := filepath.Join(t.TempDir(), "stats.json")
	t.Setenv("SOFTHCA_STATS", stats)
	srv, cli := runPerfPair(t, "send", "-n", "10", "-s", "5000", "--report_gbits")
	b, err := os.ReadFile(stats)
	require.NoError(t, err)
	var m map[string]uint64
	require.NoError(t, json.Unmarshal(b, &m))
	require.Contains(t, m, "tx_packets")
	require.Contains(t, m, "retransmits")
	require.Equal(t, cli.res.Buf[:5000], srv.res.Buf[srv.res.Region:srv.res.Region+5000])
	for _, r := range []perfRun{srv, cli} {
		require.Contains(t, r.out, "Send BW Test")
		require.Len(t, tableLines(t, r.out, perftest.BWHeaderGbits), 1)
	}
	// The receiver reports no peak.
	require.Regexp(t, `^ 5000 +10 +0\.00`, tableLines(t, srv.out, perftest.BWHeaderGbits)[0])
}

func TestPerfRead(t *testing.T) {
	srv, cli := runPerfPair(t, "read_bw", "-n", "10", "-s", "64", "-o", "2", "--stats")
	reg := srv.res.Region
	require.Equal(t, srv.res.Buf[reg:reg+10*64], cli.res.Buf[:10*64])
	require.Contains(t, cli.out, "RDMA_Read BW Test")
	require.Contains(t, cli.out, " Outstand reads  : 2\n")
	require.Regexp(t, `(?m)^ remote address: LID 0000 QPN 0x[0-9a-f]+ PSN 0x[0-9a-f]+ OUT 0x02 RKey`, cli.out)
	// --stats: 10 READ requests sent, 10 responses received.
	require.Contains(t, cli.err, "transport: 10 packets sent, 10 received; 0 retransmitted")
	require.Equal(t, uint64(10), cli.res.Stats.TxPackets)
	require.Equal(t, uint64(10), srv.res.Stats.TxPackets)
}

func TestPerfAtomic(t *testing.T) {
	for _, typ := range []string{"FETCH_AND_ADD", "CMP_AND_SWAP"} {
		t.Run(typ, func(t *testing.T) {
			srv, cli := runPerfPair(t, "atomic", "-A", typ, "-n", "70")
			require.Contains(t, cli.out, "Atomic "+typ+" BW Test")
			require.Len(t, tableLines(t, srv.out, perftest.BWHeader), 1)
			// 70 atomics over the 64 slots of 64 bytes in 4 KiB.
			reg := srv.res.Region
			var sum uint64
			for i := range 64 {
				v := binary.NativeEndian.Uint64(srv.res.Buf[reg+64*i:])
				got := binary.NativeEndian.Uint64(cli.res.Buf[64*i:])
				sum += v
				if typ == "FETCH_AND_ADD" {
					require.Equal(t, v-1, got, "slot %d: fetched the value before the last add", i)
				} else {
					require.Zero(t, v, "slot %d", i)
					require.Zero(t, got, "slot %d: fetched 0 over the pattern", i)
				}
			}
			if typ == "FETCH_AND_ADD" {
				require.Equal(t, uint64(70), sum)
			}
		})
	}
}

func TestPerfLatency(t *testing.T) {
	srv, cli := runPerfPair(t, "ib_write_lat", "-n", "30")
	for _, r := range []perfRun{srv, cli} {
		require.Contains(t, r.out, "RDMA_Write Latency Test")
		rows := tableLines(t, r.out, perftest.LatHeader)
		require.Len(t, rows, 1)
		require.Regexp(t, `^ 2 +30 +\d+\.\d\d`, rows[0])
	}
}

func TestPerfUsage(t *testing.T) {
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, exitUsage, "usage: softhca perf TEST"},
		{[]string{"-h"}, exitOK, "usage: softhca perf TEST"},
		{[]string{"write", "--help"}, exitOK, "usage: softhca perf TEST"},
		{[]string{"frob"}, exitUsage, `unknown test "frob"`},
		{[]string{"write", "-b", "-R", "--odp"}, exitUsage, "not supported by softhca perf: -b (--bidirectional), -R (--rdma_cm), --odp"},
		{[]string{"write", "-Z"}, exitUsage, "unknown option -Z"},
		{[]string{"write", "--timeout", "5s", ""}, exitUsage, `softhca perf ib_write_bw: the server name is ""`},
		{[]string{"atomic", "-s", "16"}, exitUsage, "atomic tests"},
		{[]string{"write", "-p", "1", "--timeout", "5s", "127.0.0.1"}, exitFailure, "cannot connect"},
	} {
		var out, errb bytes.Buffer
		code := runPerf(c.args, &out, &errb)
		require.Equal(t, c.code, code, "%v: %s", c.args, errb.String())
		require.Contains(t, errb.String(), c.stderr, "%v", c.args)
	}
	var out bytes.Buffer
	require.Equal(t, exitOK, runPerf([]string{"read", "-V"}, &out, &out))
	require.Contains(t, out.String(), "perftest 4.5-0.17 (version 6.06)")
}

// -w writes every packet the device sends and receives, one frame per
// packet although the link sends with GSO; decode (when the devices are
// on port 4791, the only one it takes for RoCEv2) and tshark read them.
// perftest's -w is --limit_bw, a number: refused, not taken as a file.
func TestPerfPcap(t *testing.T) {
	dir := t.TempDir()
	sf, cf := filepath.Join(dir, "server.pcap"), filepath.Join(dir, "client.pcap")
	srv, cli := runPerfPairSides(t, "write", []string{"-w", sf}, []string{"--pcap", cf}, "-n", "20", "-s", "8192", "-m", "1024")
	noteRE := regexp.MustCompile(`(?m)^softhca perf ib_write_bw: wrote (\d+) packets to (\S+); look at them with: (tshark -r \S+( -d udp.port==\d+,infiniband)+)( or softhca decode (\S+))?$`)
	for _, s := range []struct {
		file string
		r    perfRun
	}{{sf, srv}, {cf, cli}} {
		m := noteRE.FindStringSubmatch(s.r.err)
		require.NotNil(t, m, "stderr: %q", s.r.err)
		require.Equal(t, s.file, m[2])
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		// 20 WRITEs of 8 packets, and the ACKs (at least one).
		require.Greater(t, n, 20*8)
		require.Equal(t, s.r.res.Stats.TxPackets+s.r.res.Stats.RxPackets, uint64(n), "every packet sent and received, once")
		if m[6] != "" {
			code, stdout, _ := runCmd(t, "decode", s.file)
			require.Equal(t, exitOK, code, stdout)
			require.NotContains(t, stdout, " gso ")
			require.Contains(t, stdout, fmt.Sprintf(": %d packets, %d RoCEv2, %d ok, 0 bad, 0 not RoCEv2\n", n, n, n))
		}
		tshark := tsharkPath(t)
		args := append(strings.Fields(m[3])[1:], "-T", "fields", "-e", "infiniband.bth.opcode")
		var stderr bytes.Buffer
		cmd := exec.Command(tshark, args...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%s", stderr.String())
		ops := lines(string(out))
		require.Len(t, ops, n)
		for _, op := range ops {
			// RDMA WRITE First, Middle, Last (the client sends) and
			// Acknowledge (the server sends).
			require.Contains(t, []string{"6", "7", "8", "17"}, op)
		}
	}
}

func TestPerfPcapArgs(t *testing.T) {
	for _, c := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"write", "-w", "10"}, `-w 10: softhca perf's -w writes the packets to a pcap file, and "10" looks like a bandwidth for perftest's -w (--limit_bw)`},
		{[]string{"write", "-w", ""}, "-w: no file name"},
		{[]string{"write", "--limit_bw", "10"}, "not supported by softhca perf: --limit_bw"},
		{[]string{"write", "-w", filepath.Join(t.TempDir(), "no", "dir", "x.pcap")}, "-w: open "},
	} {
		var out, errb bytes.Buffer
		code := runPerf(c.args, &out, &errb)
		require.Equal(t, exitUsage, code, "%v: %s", c.args, errb.String())
		require.Contains(t, errb.String(), c.stderr, "%v", c.args)
		require.NotContains(t, out.String(), "Waiting for client", "fails before listening")
	}
}

// A -x the device cannot use fails at once: the server before it listens,
// the client before it connects. (-x 5 used to be found only after the
// exchange had begun, and -x 0 likewise.)
func TestPerfGIDIndex(t *testing.T) {
	listened := false
	perfListening = func(a net.Addr) {
		// A server that listens waits for a client: give it one that
		// leaves at once, so that it ends.
		listened = true
		if c, err := net.Dial("tcp", a.String()); err == nil {
			c.Close()
		}
	}
	defer func() { perfListening = nil }()
	for _, c := range []struct {
		x    string
		want string
	}{
		{"5", "softhca perf ib_write_bw: -x 5: the device has no GID at index 5: its port has index 0, the link-local fe80:: GID, and index 1, the device's IP address; use -x 1 (or no -x)\n"},
		{"1023", "-x 1023: the device has no GID at index 1023"},
		{"0", "softhca perf ib_write_bw: -x 0: GID index 0 is the link-local GID (fe80::/64 with the interface identifier made from the node GUID, as rxe puts it there); " +
			"the device's UDP socket is bound to its IP address, not to it, so it cannot carry RoCEv2 traffic here: use -x 1 (or no -x), the device's IP address\n"},
	} {
		listened = false
		var out, errb bytes.Buffer
		code := runPerf([]string{"write", "-x", c.x, "-p", "0"}, &out, &errb)
		require.Equal(t, exitFailure, code)
		require.Contains(t, errb.String(), c.want)
		require.False(t, listened, "-x %s: the server listened", c.x)
		require.NotContains(t, out.String(), "Waiting for client")

		tl, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		out.Reset()
		errb.Reset()
		code = runPerf([]string{"write", "-x", c.x, "-p", fmt.Sprint(tl.Addr().(*net.TCPAddr).Port), "127.0.0.1"}, &out, &errb)
		require.Equal(t, exitFailure, code)
		require.Contains(t, errb.String(), c.want)
		// A client that had connected would be in the accept queue by
		// now: Dial returns after the handshake.
		require.NoError(t, tl.(*net.TCPListener).SetDeadline(time.Now()))
		_, err = tl.Accept()
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "-x %s: the client connected", c.x)
		tl.Close()
	}
	// -x 1 is the device's address, as with rxe.
	srv, _ := runPerfPair(t, "write", "-x", "1", "-n", "5", "-s", "64")
	require.Contains(t, srv.out, "RDMA_Write BW Test")
}
