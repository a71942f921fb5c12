package perftest

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
)

// side is the outcome of one side of a run.
type side struct {
	res *Result
	err error
	out string
}

// runPair runs a softhca server and a softhca client of test with the same
// perftest arguments, in this process, over UDP loopback on free ports.
func runPair(t *testing.T, test string, args ...string) (server, client side) {
	t.Helper()
	return runPairBusy(t, false, test, args...)
}

// runPairBusy is runPair with Config.BusyPoll on both sides or not.
func runPairBusy(t *testing.T, busy bool, test string, args ...string) (server, client side) {
	t.Helper()
	return runPairWith(t, func(_ bool, c *Config) { c.BusyPoll = busy }, test, args...)
}

// runPairWith is runPair with each side's Config passed through set.
func runPairWith(t *testing.T, set func(server bool, c *Config), test string, args ...string) (server, client side) {
	t.Helper()
	tst, err := ParseTest(test)
	require.NoError(t, err)
	so, err := ParseArgs(tst, args)
	require.NoError(t, err)
	co, err := ParseArgs(tst, append(append([]string{}, args...), "127.0.0.1"))
	require.NoError(t, err)

	open := func() *udp.Link {
		l, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), GSO: true, GRO: true})
		require.NoError(t, err)
		return l
	}
	ls, lc := open(), open()
	ns, _ := ls.LocalAddr()
	nc, _ := lc.LocalAddr()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	co.Port = l.Addr().(*net.TCPAddr).Port

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	run := func(o *Options, lk link.Link, peer uint16, lst net.Listener, into *side) {
		defer wg.Done()
		var out bytes.Buffer
		cfg := Config{Options: o, Stdout: &out, Stderr: &out, Listener: lst,
			OpenLink: func(netip.Addr) (link.Link, uint16, error) { return lk, peer, nil }}
		set(lst != nil, &cfg)
		into.res, into.err = Run(ctx, cfg)
		into.out = out.String()
		if into.err != nil {
			cancel() // do not leave the other side waiting
		}
	}
	wg.Add(2)
	go run(so, ls, nc.SrcPort, l, &server)
	go run(co, lc, ns.SrcPort, nil, &client)
	wg.Wait()
	require.NoError(t, server.err, "server output:\n%s", server.out)
	require.NoError(t, client.err, "client output:\n%s", client.out)
	return server, client
}

// local and remote return a side's two areas.
func local(r *Result) []byte  { return r.Buf[:r.Region] }
func remote(r *Result) []byte { return r.Buf[r.Region:] }

// checkSlots checks that every slot a size's messages used holds, in
// dst's area, the bytes src has at the same offset.
func checkSlots(t *testing.T, src, dst []byte, size, iters int, r *Result) {
	t.Helper()
	s := &session{res: r}
	inc, slots := s.slotting(size)
	for i := range min(iters, slots) {
		off := i * inc
		require.Equal(t, src[off:off+size], dst[off:off+size], "slot %d (offset %d, size %d)", i, off, size)
	}
}

func TestRunWriteBW(t *testing.T) {
	srv, cli := runPair(t, "write", "-n", "40", "-s", "100")
	// The client wrote its pattern into the server's advertised area.
	checkSlots(t, local(cli.res), remote(srv.res), 100, 40, cli.res)
	require.Len(t, cli.res.Reports, 1)
	r := cli.res.Reports[0]
	require.Equal(t, uint64(100), r.Size)
	require.Equal(t, uint64(40), r.Iters)
	require.Greater(t, r.Avg, 0.0)
	require.GreaterOrEqual(t, r.Peak, r.Avg*0.99)
	// The server printed the client's figures.
	require.NotNil(t, srv.res.PeerReport)
	require.Equal(t, r, *srv.res.PeerReport)
	for _, s := range []side{srv, cli} {
		require.Contains(t, s.out, "RDMA_Write BW Test")
		require.Contains(t, s.out, BWHeader+"\n")
		require.Contains(t, s.out, FormatBWLine(r, false))
	}
	require.Equal(t, srv.res.Local, cli.res.Remote)
	require.Equal(t, cli.res.Local, srv.res.Remote)
}

func TestRunWriteBWAllSizes(t *testing.T) {
	// -a runs 23 sizes up to 8 MiB; few iterations keep it short.
	srv, cli := runPair(t, "write", "-a", "-n", "5", "--report_gbits")
	require.Len(t, cli.res.Reports, 23)
	for i, r := range cli.res.Reports {
		require.Equal(t, uint64(2)<<i, r.Size)
	}
	// The largest size's bytes arrived at offset 0.
	require.Equal(t, local(cli.res)[:MaxSize], remote(srv.res)[:MaxSize])
	require.Contains(t, cli.out, BWHeaderGbits)
	// The sizes run without exchanges between them (TestTranscripts).
	want := slices.Concat([]int{16, 4, 4, 2}, slices.Repeat([]int{DestSize}, 4), slices.Repeat([]int{ReportFieldSize}, 5), []int{DestSize})
	require.Equal(t, want, cli.res.Transcript)
	require.Equal(t, want, srv.res.Transcript)
}

func TestRunReadBW(t *testing.T) {
	srv, cli := runPair(t, "read", "-n", "30", "-s", "3000", "-o", "4")
	// The client read the server's pattern into its own area.
	checkSlots(t, remote(srv.res), local(cli.res), 3000, 30, cli.res)
	require.Equal(t, uint16(4), srv.res.Local.OutReads)
	require.Contains(t, cli.out, "RDMA_Read BW Test")
	require.Contains(t, cli.out, " Outstand reads  : 4\n")
	require.Contains(t, srv.out, FormatBWLine(cli.res.Reports[0], false))
}

func TestRunSendBW(t *testing.T) {
	srv, cli := runPair(t, "send", "-n", "50", "-s", "1500", "-r", "8")
	checkSlots(t, local(cli.res), remote(srv.res), 1500, 50, cli.res)
	// Both sides measure; the receiver has no peak.
	require.Equal(t, uint64(50), srv.res.Reports[0].Iters)
	require.Zero(t, srv.res.Reports[0].Peak)
	require.Greater(t, cli.res.Reports[0].Peak, 0.0)
	require.Contains(t, srv.out, " RX depth        : 8\n")
	require.Contains(t, srv.out, FormatBWLine(srv.res.Reports[0], false))
}

func TestRunSendBWAllSizes(t *testing.T) {
	srv, cli := runPair(t, "send", "-a", "-n", "5")
	require.Len(t, srv.res.Reports, 23)
	require.Len(t, cli.res.Reports, 23)
	require.Equal(t, local(cli.res)[:MaxSize], remote(srv.res)[:MaxSize])
	// A barrier before and after each size (TestTranscripts).
	want := slices.Concat([]int{16, 4, 4, 2}, slices.Repeat([]int{DestSize}, 3+2*23+1))
	require.Equal(t, want, cli.res.Transcript)
	require.Equal(t, want, srv.res.Transcript)
}

// counters returns the 64-bit words at the atomic slots of an area.
func counters(r *Result, area []byte, iters int) []uint64 {
	s := &session{res: r}
	inc, slots := s.slotting(8)
	var c []uint64
	for i := range min(iters, slots) {
		c = append(c, binary.NativeEndian.Uint64(area[i*inc:]))
	}
	return c
}

func TestRunAtomicFetchAdd(t *testing.T) {
	const n = 150 // more than the 64 slots of a 4 KiB cycle buffer
	srv, cli := runPair(t, "atomic", "-n", "150", "-A", "FETCH_AND_ADD")
	// Each message added 1 to its slot: the server's counters sum to n,
	// and the last value fetched from each slot is its final count less
	// one.
	final := counters(cli.res, remote(srv.res), n)
	var sum uint64
	for _, v := range final {
		sum += v
	}
	require.Equal(t, uint64(n), sum)
	fetched := counters(cli.res, local(cli.res), n)
	for i := range final {
		require.Equal(t, final[i]-1, fetched[i], "slot %d", i)
	}
	require.Contains(t, cli.out, "Atomic FETCH_AND_ADD BW Test")
}

func TestRunAtomicCmpSwap(t *testing.T) {
	srv, cli := runPair(t, "atomic", "-n", "20", "-A", "CMP_AND_SWAP")
	// perftest compares with 0 and swaps in 0: the server's memory stays
	// zero, and every result area, which held softhca's pattern, now
	// holds the original value 0.
	for i, v := range counters(cli.res, remote(srv.res), 20) {
		require.Zero(t, v, "server slot %d", i)
	}
	for i, v := range counters(cli.res, local(cli.res), 20) {
		require.Zero(t, v, "fetched value %d", i)
	}
	require.Contains(t, cli.out, "Atomic CMP_AND_SWAP BW Test")
}

func TestRunWriteLat(t *testing.T) {
	srv, cli := runPair(t, "write_lat", "-n", "300", "-s", "64")
	// Each side's last write carried its count (300 mod 256) in the last
	// byte, and the peer saw it.
	for _, p := range [][2]*Result{{srv.res, cli.res}, {cli.res, srv.res}} {
		require.Equal(t, local(p[0])[:63], remote(p[1])[:63])
		require.Equal(t, byte(300%256), remote(p[1])[63])
	}
	for _, s := range []side{srv, cli} {
		require.Len(t, s.res.LatReports, 1)
		require.Contains(t, s.out, "RDMA_Write Latency Test")
		require.Contains(t, s.out, LatHeader+"\n")
		require.Contains(t, s.out, FormatLatLine(s.res.LatReports[0]))
	}
}

func TestRunSendLat(t *testing.T) {
	srv, cli := runPair(t, "send_lat", "-n", "20", "-s", "2000")
	require.Equal(t, local(cli.res)[:2000], remote(srv.res)[:2000])
	require.Equal(t, local(srv.res)[:2000], remote(cli.res)[:2000])
	require.Len(t, srv.res.LatReports, 1)
	require.Len(t, cli.res.LatReports, 1)
}

// TestRunBusyPoll: with BusyPoll (SOFTHCA_BUSY_POLL=1) the completions
// are polled in a loop that runs the transport; the data moves as without.
func TestRunBusyPoll(t *testing.T) {
	srv, cli := runPairBusy(t, true, "send_lat", "-n", "20", "-s", "2000")
	require.Equal(t, local(cli.res)[:2000], remote(srv.res)[:2000])
	require.Equal(t, local(srv.res)[:2000], remote(cli.res)[:2000])
	srv, cli = runPairBusy(t, true, "write", "-n", "40", "-s", "100")
	checkSlots(t, local(cli.res), remote(srv.res), 100, 40, cli.res)
}

func TestRunReadLat(t *testing.T) {
	srv, cli := runPair(t, "read_lat", "-n", "10", "-a")
	require.Len(t, cli.res.LatReports, 23)
	require.Empty(t, srv.res.LatReports)
	require.Equal(t, remote(srv.res)[:MaxSize], local(cli.res)[:MaxSize])
	require.True(t, strings.HasSuffix(srv.out, resultLine), srv.out)
}

func TestRunAtomicLat(t *testing.T) {
	srv, cli := runPair(t, "atomic_lat", "-n", "10")
	require.Equal(t, uint64(10), binary.NativeEndian.Uint64(remote(srv.res)))
	require.Equal(t, uint64(9), binary.NativeEndian.Uint64(local(cli.res)))
}

// TestTranscripts checks the sequence of messages each test exchanges
// against perftest 4.5-0.17's, as read from its programs (non-duplex,
// one QP): the prelude (version 16 bytes, page and cache line sizes 4
// each, MTU 2), key messages (108) and results (8 each).
func TestTranscripts(t *testing.T) {
	prelude := []int{16, 4, 4, 2}
	keys := func(n int) []int { return slices.Repeat([]int{DestSize}, n) }
	results := slices.Repeat([]int{ReportFieldSize}, ReportFields)
	cat := func(parts ...[]int) []int { return slices.Concat(append([][]int{prelude}, parts...)...) }
	for _, c := range []struct {
		test string
		args []string
		want []int // both sides
	}{
		// K, K, sync; then server: wait for the client, results, close.
		{"write", nil, cat(keys(3), keys(1), results, keys(1))},
		{"read", nil, cat(keys(3), keys(1), results, keys(1))},
		{"atomic", nil, cat(keys(3), keys(1), results, keys(1))},
		// send: a barrier before the run; close.
		{"send", nil, cat(keys(3), keys(1), keys(1))},
		// send -a: barriers before and after each size, then close
		// (TestRunSendBWAllSizes); write -a: the client runs the sizes
		// without a word to the server (TestRunWriteBWAllSizes).
		// write_lat: four before the run (the addresses twice over),
		// nothing after.
		{"write_lat", nil, cat(keys(4))},
		{"write_lat", []string{"-a"}, cat(keys(4))},
		// read/atomic lat: four, then the server waits for the client.
		{"read_lat", nil, cat(keys(4), keys(1))},
		{"atomic_lat", nil, cat(keys(4), keys(1))},
		// send_lat: three, a barrier before each size, close.
		{"send_lat", nil, cat(keys(3), keys(1), keys(1))},
		{"send_lat", []string{"-a"}, cat(keys(3), keys(23), keys(1))},
	} {
		args := append([]string{"-n", "5"}, c.args...)
		srv, cli := runPair(t, c.test, args...)
		require.Equal(t, c.want, srv.res.Transcript, "%s %v server", c.test, c.args)
		require.Equal(t, c.want, cli.res.Transcript, "%s %v client", c.test, c.args)
	}
}

// A peer's GID the device cannot send to is refused before the QP is
// connected to it: a link-local fe80:: GID (rxe's index 0), the zero GID
// and multicast; addresses it can reach are not.
func TestCheckPeerGID(t *testing.T) {
	gid := func(s string) verbs.GID { return verbs.GIDFromAddr(netip.MustParseAddr(s)) }
	v6, v4 := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("10.0.0.1")
	require.ErrorContains(t, checkPeerGID(gid("fe80::7fff:fe00:1"), v6),
		"the peer's GID fe80::7fff:fe00:1 is a link-local fe80:: GID (index 0 on rxe and softhca, made from the node GUID): the device's UDP socket on 2001:db8::1 cannot send to it")
	require.ErrorContains(t, checkPeerGID(verbs.GID{}, v6), "the peer's GID :: is not a unicast address")
	require.ErrorContains(t, checkPeerGID(gid("ff02::1"), v6), "not a unicast address")
	require.NoError(t, checkPeerGID(gid("2001:db8::2"), v6))
	require.NoError(t, checkPeerGID(gid("::1"), netip.MustParseAddr("::1")))
	require.NoError(t, checkPeerGID(gid("10.0.0.2"), v4))
	require.NoError(t, checkPeerGID(gid("169.254.0.2"), netip.MustParseAddr("169.254.0.1")), "IPv4 link-local is an address like any")
}
