package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/cmd/softhca/internal/pingpong"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
)

func TestPingpongArgs(t *testing.T) {
	rc := pingpong.NewConfig(pingpong.RC)
	for _, tc := range []struct {
		name string
		args []string
		want func(c *pingpong.Config)
	}{
		{"defaults", []string{"rc"}, func(*pingpong.Config) {}},
		{"client", []string{"rc", "10.0.0.2"}, func(c *pingpong.Config) { c.ServerName = "10.0.0.2" }},
		{"separate", []string{"rc", "-s", "65536", "-m", "4096", "-n", "5", "-g", "1"},
			func(c *pingpong.Config) { c.Size, c.MTU, c.Iters, c.GIDIndex = 65536, verbs.MTU4096, 5, 1 }},
		{"attached and clustered", []string{"rc", "-ecs64", "-g1"},
			func(c *pingpong.Config) { c.Events, c.Validate, c.Size, c.GIDIndex = true, true, 64, 1 }},
		{"long", []string{"rc", "--size=64", "--iters", "7", "--events", "--gid-idx=1", "--chk"},
			func(c *pingpong.Config) { c.Size, c.Iters, c.Events, c.GIDIndex, c.Validate = 64, 7, true, 1, true }},
		{"long prefix", []string{"rc", "--it=7", "--ev"}, func(c *pingpong.Config) { c.Iters, c.Events = 7, true }},
		{"options after host", []string{"rc", "host", "-p", "0x4000", "-r", "010"},
			func(c *pingpong.Config) { c.ServerName, c.Port, c.RxDepth = "host", 0x4000, 8 }},
		{"double dash", []string{"rc", "-e", "--", "-host"}, func(c *pingpong.Config) { c.Events, c.ServerName = true, "-host" }},
		{"device and port", []string{"rc", "-d", "softhca0", "-i", "1", "-l", "3"},
			func(c *pingpong.Config) { c.IBDev, c.IBPort, c.SL = "softhca0", 1, 3 }},
		{"no gid", []string{"rc", "-g", "-1"}, func(c *pingpong.Config) { c.GIDIndex = -1 }},
		{"softhca", []string{"rc", "--addr=10.0.0.1", "-peer-port", "5000", "-port-mtu=4096"}, func(c *pingpong.Config) {
			c.Addr, c.PeerPort, c.PortMTU = netip.MustParseAddrPort("10.0.0.1:4791"), 5000, verbs.MTU4096
		}},
		{"addr with port", []string{"rc", "-addr", "[::1]:7000"}, func(c *pingpong.Config) { c.Addr = netip.MustParseAddrPort("[::1]:7000") }},
		{"no gso", []string{"rc", "--no-gso"}, func(c *pingpong.Config) { c.NoGSO = true }},
		{"no gso, one dash", []string{"rc", "-no-gso"}, func(c *pingpong.Config) { c.NoGSO = true }},
		{"no gso, prefix", []string{"rc", "--no"}, func(c *pingpong.Config) { c.NoGSO = true }},
		// Prefixes mean what they mean to rdma-core's getopt_long, which
		// does not know softhca's options.
		{"rdma-core prefix", []string{"rc", "--n", "--po=7"}, func(c *pingpong.Config) { c.Features.NewSend, c.Port = true, 7 }},
		{"features", []string{"rc", "-oOPtjN"}, func(c *pingpong.Config) {
			c.Features = pingpong.Features{ODP: true, ImplicitODP: true, Prefetch: true, Timestamps: true, DM: true, NewSend: true}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, help, err := parsePingpongArgs(tc.args)
			require.NoError(t, err)
			require.False(t, help)
			want := rc
			tc.want(&want)
			require.Equal(t, want, got.Config)
			require.Empty(t, got.pcapFile)
		})
	}

	// -w FILE (--pcap, -pcap), in getopt's forms.
	for _, args := range [][]string{{"rc", "-w", "x.pcap"}, {"rc", "-wx.pcap"}, {"rc", "-ew", "x.pcap"},
		{"rc", "--pcap=x.pcap"}, {"rc", "--pc", "x.pcap"}, {"rc", "-pcap", "x.pcap"}} {
		got, _, err := parsePingpongArgs(args)
		require.NoError(t, err, args)
		require.Equal(t, "x.pcap", got.pcapFile, args)
	}

	// --tap NAME with --addr (softhca's own, so one dash works too), and
	// --tap-mac. A prefix rdma-core knows means rdma-core's option
	// ("--t" is --ts).
	for _, tc := range []struct {
		args []string
		mac  [6]byte
	}{
		{[]string{"rc", "--tap", "tap0", "--addr", "10.9.0.2"}, [6]byte{}},
		{[]string{"rc", "-tap=tap0", "-addr=10.9.0.2:4791"}, [6]byte{}},
		{[]string{"rc", "--addr", "10.9.0.2", "--tap", "tap0", "--tap-mac", "02:aa:bb:cc:dd:ee"}, [6]byte{2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}},
		{[]string{"rc", "--addr", "10.9.0.2", "-tap-mac=02-AA-BB-CC-DD-EE", "--tap=tap0"}, [6]byte{2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}},
	} {
		got, _, err := parsePingpongArgs(tc.args)
		require.NoError(t, err, tc.args)
		require.Equal(t, "tap0", got.tapName, tc.args)
		require.Equal(t, tc.mac, got.tapMAC, tc.args)
		require.Equal(t, netip.MustParseAddrPort("10.9.0.2:4791"), got.Addr, tc.args)
		require.Nil(t, got.OpenLink, "the command sets the hook, after parsing")
	}
	got, _, err := parsePingpongArgs([]string{"rc", "--t"})
	require.NoError(t, err)
	require.True(t, got.Features.Timestamps, "--t is rdma-core's --ts")
	require.Empty(t, got.tapName)

	ud, _, err := parsePingpongArgs([]string{"ud"})
	require.NoError(t, err)
	require.Equal(t, uint32(1024), ud.Size, "ud_pingpong's default size is 1024 (its usage says 2048)")
	srq, _, err := parsePingpongArgs([]string{"srq", "-q", "4"})
	require.NoError(t, err)
	require.Equal(t, uint32(4), srq.NumQP)
	require.Equal(t, uint32(4096), srq.Size)
}

func TestPingpongArgErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "which pingpong? want rc, uc, ud or srq"},
		{[]string{"xrc"}, `unknown pingpong "xrc"`},
		{[]string{"rc", "-x"}, "invalid option -- 'x' for rc"},
		{[]string{"ud", "-m", "1024"}, "invalid option -- 'm' for ud"},
		{[]string{"rc", "-q", "2"}, "invalid option -- 'q' for rc"},
		{[]string{"uc", "-o"}, "invalid option -- 'o' for uc"},
		{[]string{"rc", "--frob"}, "unrecognized option '--frob' for rc"},
		{[]string{"rc", "--i=1"}, "option '--i' is ambiguous"},
		{[]string{"rc", "--p=1"}, "option '--p' is ambiguous"},
		{[]string{"rc", "--no-gso=1"}, "option '--no-gso' doesn't allow an argument"},
		{[]string{"rc", "-w"}, "option requires an argument -- 'w'"},
		{[]string{"rc", "--pcap="}, "-w/--pcap: no file name"},
		{[]string{"ud", "-N"}, "invalid option -- 'N' for ud"},
		{[]string{"rc", "--events=1"}, "option '--events' doesn't allow an argument"},
		{[]string{"rc", "--size"}, "option '--size' requires an argument"},
		{[]string{"rc", "-s"}, "option requires an argument -- 's'"},
		{[]string{"rc", "-s", "4k"}, `-s/--size: "4k" is not a message size`},
		{[]string{"rc", "-s", "-1"}, `-s/--size: "-1" is not a message size`},
		{[]string{"rc", "-s", "4294967296"}, `"4294967296" is not a message size in bytes (0..2147483648`},
		{[]string{"srq", "-s", "0"}, `"0" is not a message size in bytes (1..2147483648`},
		{[]string{"rc", "-p", "65536"}, `-p/--port: "65536" is not a TCP port`},
		{[]string{"rc", "-i", "0"}, `-i/--ib-port: "0" is not a port number`},
		{[]string{"rc", "-m", "1000"}, `-m/--mtu: "1000" is not an MTU (256, 512, 1024, 2048 or 4096)`},
		{[]string{"rc", "-r", "0"}, `-r/--rx-depth: "0" is not a number of receives`},
		{[]string{"rc", "-n", "1_000"}, `-n/--iters: "1_000" is not a number of iterations`},
		{[]string{"rc", "-l", "16"}, `-l/--sl: "16" is not a service level (0..15)`},
		{[]string{"rc", "-g", "x"}, `-g/--gid-idx: "x" is not a GID index`},
		{[]string{"rc", "-g", "99999999999999999999"}, "out of range"},
		{[]string{"rc", "--addr", "host:1"}, `--addr: "host:1" is not an IP address or address:port`},
		{[]string{"rc", "--peer-port=0"}, `--peer-port: "0" is not a UDP port`},
		{[]string{"rc", "-port-mtu", "9000"}, `--port-mtu: "9000" is not an MTU`},
		{[]string{"rc", "a", "b"}, `one host at most, got ["a" "b"]`},
		{[]string{"rc", "-g", "1", ""}, `the host is "": name the server`},
		{[]string{"rc", "--tap", "tap0"}, "--tap tap0 needs --addr: the device's own IP address"},
		{[]string{"rc", "--tap", "tap0", "10.0.0.1"}, "--tap tap0 needs --addr"},
		{[]string{"rc", "--tap=tap0", "--addr", "10.9.0.2:4800"}, "--tap tap0: --addr 10.9.0.2:4800: a TAP host receives RoCEv2 on UDP port 4791 only"},
		{[]string{"rc", "--tap=tap0", "--addr", "10.9.0.2:0"}, "UDP port 4791 only"},
		{[]string{"rc", "--tap="}, "--tap: no interface name"},
		{[]string{"rc", "--tap", "a-name-of-16-bytes"}, `interface name "a-name-of-16-bytes" is longer than 15 bytes`},
		{[]string{"rc", "--tap"}, "option '--tap' requires an argument"},
		{[]string{"rc", "--tap-mac", "02:00:00:00:00:01", "--addr", "10.9.0.2"}, "--tap-mac is the MAC of a --tap device: give --tap too"},
		{[]string{"rc", "--tap", "t", "--addr", "10.9.0.2", "--tap-mac", "02:00:00:00:01"}, `--tap-mac: "02:00:00:00:01" is not an Ethernet MAC address`},
		{[]string{"rc", "--tap", "t", "--addr", "10.9.0.2", "--tap-mac", "01:00:5e:00:00:01"}, "--tap-mac: 01:00:5e:00:00:01 is not a unicast MAC address"},
		{[]string{"rc", "--tap", "t", "--addr", "10.9.0.2", "--tap-mac", "00:00:00:00:00:00"}, "is not a unicast MAC address"},
		{[]string{"rc", "--ta=t"}, "option '--ta' is ambiguous"},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			_, _, err := parsePingpongArgs(tc.args)
			require.ErrorContains(t, err, tc.want)
			var ue *usageError
			require.True(t, errors.As(err, &ue))

			// The command prints the error and the usage, and exits 1
			// (rdma-core's status for bad usage).
			code, stdout, stderr := runCmd(t, append([]string{"pingpong"}, tc.args...)...)
			require.Equal(t, exitFailure, code)
			require.Empty(t, stdout)
			require.Contains(t, stderr, "softhca pingpong: ")
			require.Contains(t, stderr, tc.want)
			require.Contains(t, stderr, "usage: softhca pingpong {rc|uc|ud|srq}")
		})
	}
}

func TestPingpongHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "pingpong"}, {"pingpong", "-h"}, {"pingpong", "rc", "--help"}} {
		code, stdout, stderr := runCmd(t, args...)
		require.Equal(t, exitOK, code)
		require.Empty(t, stderr)
		require.Contains(t, stdout, "usage: softhca pingpong {rc|uc|ud|srq} [options] [host]")
		require.Contains(t, stdout, "-p, --port=<port>      listen on/connect to port <port> (default 18515)")
	}
}

// pingpongPair runs "softhca pingpong" server and client in this process.
// Their devices bind --addr on two random loopback addresses, port 4791
// (Linux routes all of 127/8 to lo); the server accepts on a listener the
// test made, whose port the client gets with -p. serverArgs and
// clientArgs follow the mode. When one side fails, the other is stopped
// (it would wait forever) unless both are expected to end on their own.
func pingpongPair(t *testing.T, mode string, serverArgs, clientArgs []string, selfEnding bool) (sout, serr, cout, cerr string, scode, ccode int) {
	t.Helper()
	x, y, z := rand.N(254)+1, rand.N(256), rand.N(127)*2
	sa := fmt.Sprintf("127.%d.%d.%d", x, y, z+1)
	ca := fmt.Sprintf("127.%d.%d.%d", x, y, z+2)
	for _, a := range []string{sa, ca} {
		l, err := udp.Open(udp.Config{Addr: netip.AddrPortFrom(netip.MustParseAddr(a), 4791)})
		if errors.Is(err, syscall.EADDRINUSE) {
			t.Skipf("UDP port 4791 is taken on %s (rdma_rxe?)", a)
		}
		require.NoError(t, err)
		l.Close()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	run := func(args []string, adjust func(*pingpong.Config), out, errOut *string, code *int) {
		defer wg.Done()
		var o, e bytes.Buffer
		*code = pingpongMain(ctx, args, &o, &e, adjust)
		*out, *errOut = o.String(), e.String()
		if *code != exitOK && !selfEnding {
			cancel()
		}
	}
	wg.Add(2)
	go run(append([]string{mode, "--addr", sa}, serverArgs...), func(c *pingpong.Config) { c.Listener = ln },
		&sout, &serr, &scode)
	go run(append([]string{mode, "--addr", ca, "-p", port, "127.0.0.1"}, clientArgs...), nil,
		&cout, &cerr, &ccode)
	wg.Wait()
	return
}

func TestPingpongCommand(t *testing.T) {
	for _, tc := range []struct {
		mode string
		args []string
		size int
	}{
		{"rc", []string{"-g", "1", "-n", "50", "-c"}, 4096},
		{"rc", []string{"-g1", "-n50", "-s65536", "-m4096", "-e", "-c"}, 65536},
		{"uc", []string{"-g", "1", "-n", "50", "-s", "64", "-e", "-c"}, 64},
		{"uc", []string{"-g", "1", "-n", "50", "-s", "65536", "-m", "1024", "-c"}, 65536},
		{"ud", []string{"-g", "1", "-n", "50", "-c"}, 1024},
		{"ud", []string{"-g", "1", "-n", "50", "-s", "4096", "--port-mtu", "4096", "-e"}, 4096},
		{"srq", []string{"-g", "1", "-n", "50", "-q", "4", "-r", "16", "-c"}, 4096},
		{"srq", []string{"-g", "1", "-n", "50", "-q", "2", "-s", "65536", "-m", "4096", "-e", "-c"}, 65536},
	} {
		t.Run(fmt.Sprint(tc.mode, tc.args), func(t *testing.T) {
			t.Parallel()
			sout, serr, cout, cerr, scode, ccode := pingpongPair(t, tc.mode, tc.args, tc.args, false)
			for _, s := range []struct{ out, err string }{{sout, serr}, {cout, cerr}} {
				require.Empty(t, s.err)
				lines := fmt.Sprintf("%d bytes in \\d+\\.\\d\\d seconds = \\d+\\.\\d\\d Mbit/sec\n50 iters in \\d+\\.\\d\\d seconds = \\d+\\.\\d\\d usec/iter\n$", tc.size*50*2)
				require.Regexp(t, regexp.MustCompile(lines), s.out)
				require.Regexp(t, `(?m)^  local address:  LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}[,:] GID ::ffff:127\.`, s.out)
				require.Regexp(t, `(?m)^  remote address: LID 0x0000, QPN 0x[0-9a-f]{6}, PSN 0x[0-9a-f]{6}, GID ::ffff:127\.`, s.out)
				require.NotContains(t, s.out, "invalid data")
			}
			require.Equal(t, exitOK, scode)
			require.Equal(t, exitOK, ccode)
		})
	}
}

// Without -g a side sends no GID; RoCE needs a GRH, so its peer cannot
// connect, as with rdma-core on rxe.
func TestPingpongNoGID(t *testing.T) {
	t.Run("client without -g", func(t *testing.T) {
		sout, serr, _, cerr, scode, ccode := pingpongPair(t, "rc", []string{"-g", "1"}, nil, true)
		require.Equal(t, exitFailure, scode)
		require.Equal(t, exitFailure, ccode)
		require.Contains(t, sout, "  local address:  LID 0x0000")
		require.Contains(t, serr, "Failed to modify QP to RTR: modify_qp: ")
		require.Contains(t, serr, "RoCE needs a GRH")
		require.Contains(t, serr, "the peer sent no GID")
		require.Contains(t, serr, "Couldn't connect to remote QP")
		require.Contains(t, cerr, "Couldn't read/write remote address: the peer closed the connection")
	})
	t.Run("server without -g", func(t *testing.T) {
		_, serr, _, _, scode, ccode := pingpongPair(t, "rc", nil, []string{"-g", "1"}, true)
		require.Equal(t, exitFailure, scode)
		require.Equal(t, exitFailure, ccode)
		// As on rxe: the GRH's source GID index is -1 as a uint8, an
		// empty entry.
		require.Contains(t, serr, "Failed to modify QP to RTR: modify_qp: ")
		require.Contains(t, serr, "sgid_index 255")
		require.Contains(t, serr, "(no -g here: the source GID index is -1, that is 255; RoCE needs -g on both sides")
	})
	t.Run("ud", func(t *testing.T) {
		_, serr, _, _, scode, _ := pingpongPair(t, "ud", []string{"-g", "1"}, nil, true)
		require.Equal(t, exitFailure, scode)
		require.Contains(t, serr, "Failed to create AH: ")
		require.Contains(t, serr, "the peer sent no GID")
	})
}

func TestPingpongFailures(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rc", "-d", "mlx5_0"}, "IB device mlx5_0 not found: softhca's device is softhca0\n"},
		{[]string{"rc", "-o"}, "The device isn't ODP capable or does not support RC send and receive with ODP\n"},
		{[]string{"rc", "-O"}, "The device isn't ODP capable or does not support RC send and receive with ODP\n"},
		{[]string{"rc", "-P"}, "prefetch is valid only with on-demand memory region\n"},
		{[]string{"rc", "-o", "-j"}, "DM memory region can't be on demand\n"},
		{[]string{"rc", "-t"}, "The device isn't completion timestamp capable\n"},
		{[]string{"rc", "-j"}, "Device doesn't support dm allocation\n"},
		{[]string{"srq", "-o"}, "The device isn't ODP capable or does not support RC send, receive and srq with ODP\n"},
		{[]string{"srq", "-q", "8", "-r", "4"}, "rx_depth 4 is too small for 8 QPs -- must have at least one receive per QP.\n"},
		{[]string{"srq", "-q", "256", "-r", "500"}, "num_qp 256 must be less than 255\n"},
		{[]string{"ud", "-s", "2048", "--addr", "127.0.0.1:0", "--port-mtu", "1024"}, "Requested size larger than port MTU (1024)\n"},
		{[]string{"rc", "-i", "2", "--addr", "127.0.0.1:0"}, "Failed to modify QP to INIT: modify_qp: "},
		{[]string{"ud", "-i", "2", "--addr", "127.0.0.1:0"}, "Unable to query port info for port 2: "},
		{[]string{"rc", "-g", "1024", "--addr", "127.0.0.1:0"}, "can't read sgid of index 1024: "},
		{[]string{"srq", "-g", "5000", "--addr", "127.0.0.1:0"}, "Could not get local gid for gid index 5000: "},
		{[]string{"rc", "--addr", "192.0.2.1"}, "Couldn't get context for softhca0: UDP 192.0.2.1:4791: "},
		{[]string{"rc", "--addr", "127.0.0.1:0", "-p", "1", "127.0.0.1"}, "Couldn't connect to 127.0.0.1:1: "},
	} {
		t.Run(fmt.Sprint(tc.args), func(t *testing.T) {
			code, stdout, stderr := runCmd(t, append([]string{"pingpong"}, tc.args...)...)
			require.Equal(t, exitFailure, code, "stdout:\n%s", stdout)
			require.Contains(t, stderr, tc.want)
			require.NotContains(t, stderr, "usage:")
		})
	}
}

// -c on the server only: the client's data lacks the pattern, and the
// server says so, as rdma-core does, but exits 1.
func TestPingpongInvalidData(t *testing.T) {
	sout, serr, cout, cerr, scode, ccode := pingpongPair(t, "rc", []string{"-g", "1", "-n", "3", "-c"}, []string{"-g", "1", "-n", "3"}, true)
	require.Equal(t, exitOK, ccode, cerr)
	require.NotContains(t, cout, "invalid data")
	require.Equal(t, exitFailure, scode)
	require.Contains(t, sout, " usec/iter\ninvalid data in page 0\n")
	require.Equal(t, "softhca pingpong rc: -c: the received data differs from what the peer sends\n", serr)
}

// decodeFile runs softhca decode on path and returns its exit status and
// the packet lines (without the summary line).
func decodeFile(t *testing.T, path string) (int, []string, string) {
	t.Helper()
	code, stdout, stderr := runCmd(t, "decode", path)
	require.Empty(t, stderr)
	ls := lines(stdout)
	return code, ls[:len(ls)-1], ls[len(ls)-1]
}

// -w writes every packet the device sends and receives, one frame per
// packet although the link sends with GSO (4 KiB messages at MTU 1024:
// runs of 4 packets), each with headers its ICRC verifies with; tshark
// dissects them as InfiniBand.
func TestPingpongPcap(t *testing.T) {
	dir := t.TempDir()
	sf, cf := filepath.Join(dir, "server.pcap"), filepath.Join(dir, "client.pcap")
	args := []string{"-g", "1", "-n", "5", "-s", "4096", "-m", "1024"}
	sout, serr, cout, cerr, scode, ccode := pingpongPair(t, "rc", append(args, "-w", sf), append(args, "--pcap="+cf), false)
	require.Equal(t, exitOK, scode, "server:\n%s%s", sout, serr)
	require.Equal(t, exitOK, ccode, "client:\n%s%s", cout, cerr)
	for _, s := range []struct{ file, out, err string }{{sf, sout, serr}, {cf, cout, cerr}} {
		m := regexp.MustCompile(`^softhca pingpong: wrote (\d+) packets to (\S+); look at them with: tshark -r (\S+) -d udp.port==4791,infiniband or softhca decode (\S+)\n$`).FindStringSubmatch(s.err)
		require.NotNil(t, m, "stderr: %q", s.err)
		require.Equal(t, []string{s.file, s.file, s.file}, m[2:])
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)

		code, pkts, sum := decodeFile(t, s.file)
		require.Equal(t, exitOK, code, "%s", strings.Join(pkts, "\n"))
		require.Equal(t, fmt.Sprintf("%s: %d packets, %d RoCEv2, %d ok, 0 bad, 0 not RoCEv2", s.file, n, n, n), sum)
		// Five messages of four packets each way, an ACK for each
		// message each way; more if a timer fired on a busy machine.
		require.GreaterOrEqual(t, n, 2*(5*4+5))
		sent, received := 0, 0
		var local string
		for _, l := range pkts {
			require.NotContains(t, l, " gso ", "one packet per frame")
			require.True(t, strings.HasSuffix(l, " icrc ok"), l)
			addrs := regexp.MustCompile(`^frame \d+: \S+ (\S+):4791 -> (\S+):4791: `).FindStringSubmatch(l)
			require.NotNil(t, addrs, l)
			if local == "" {
				local = addrs[1] // the client sends first; the server receives first
				if s.file == sf {
					local = addrs[2]
				}
			}
			switch local {
			case addrs[1]:
				sent++
			case addrs[2]:
				received++
			default:
				t.Fatalf("a packet neither from nor to %s: %s", local, l)
			}
		}
		require.GreaterOrEqual(t, sent, 5*4+5, "sent packets in %s", s.file)
		require.GreaterOrEqual(t, received, 5*4+5, "received packets in %s", s.file)
	}

	tshark := tsharkPath(t)
	var stderr bytes.Buffer
	cmd := exec.Command(tshark, "-r", sf, "-d", "udp.port==4791,infiniband", "-T", "fields", "-e", "infiniband.bth.opcode")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s", stderr.String())
	ops := map[string]int{}
	for _, op := range lines(string(out)) {
		ops[op]++
	}
	// RC SEND First, Middle, Last and Acknowledge, nothing else.
	require.GreaterOrEqual(t, ops["0"], 10, "%v", ops)
	require.GreaterOrEqual(t, ops["1"], 20, "%v", ops)
	require.GreaterOrEqual(t, ops["2"], 10, "%v", ops)
	require.GreaterOrEqual(t, ops["17"], 10, "%v", ops)
	require.Len(t, ops, 4, "%v", ops)
}

// A -w file that cannot be created fails the command at once, before any
// connection.
func TestPingpongPcapUnwritable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "x.pcap")
	code, stdout, stderr := runCmd(t, "pingpong", "rc", "-g", "1", "-w", path)
	require.Equal(t, exitFailure, code)
	require.Empty(t, stdout)
	require.Equal(t, "softhca pingpong: -w: open "+path+": no such file or directory\n", stderr)
}

// noAccept is a listener the server must not use: Accept fails at once
// (a server that waited for a client would otherwise wait forever).
type noAccept struct{ accepts int }

func (l *noAccept) Accept() (net.Conn, error) {
	l.accepts++
	return nil, errors.New("the server waited for a client")
}

func (l *noAccept) Close() error { return nil }

func (l *noAccept) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// A GID index the device has no GID at fails at once, before the server
// waits for a client or the client connects, with rdma-core's message for
// an index it cannot read; index 0, the link-local GID, says why it
// cannot carry traffic here. (-g 5 used to send an all-zero GID, which
// the peer blamed: "the peer sent no GID".)
func TestPingpongGIDIndex(t *testing.T) {
	noGID := func(idx int) string {
		return fmt.Sprintf("softhca0 port 1 has no GID at index %d: it has index 0, the link-local fe80:: GID, and index 1, the device's IP address; use -g 1\n", idx)
	}
	linkLocal := "-g 0: GID index 0 is the link-local GID (fe80::/64 with the interface identifier made from the node GUID, as rxe puts it there); " +
		"softhca0's UDP socket is bound to the device's IP address, not to it, so it cannot carry RoCEv2 traffic here: use -g 1, the device's IP address\n"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rc", "-g", "5"}, "can't read sgid of index 5: " + noGID(5)},
		{[]string{"uc", "-g", "2"}, "can't read sgid of index 2: " + noGID(2)},
		{[]string{"ud", "-g", "5"}, "Could not get local gid for gid index 5: " + noGID(5)},
		{[]string{"srq", "-g", "1023"}, "Could not get local gid for gid index 1023: " + noGID(1023)},
		{[]string{"rc", "-g", "2000"}, "can't read sgid of index 2000: " + noGID(2000)},
		{[]string{"rc", "-g", "0"}, linkLocal},
		{[]string{"ud", "-g0"}, linkLocal},
	} {
		t.Run(fmt.Sprint(c.args), func(t *testing.T) {
			// As the server.
			ln := &noAccept{}
			var out, errb bytes.Buffer
			code := pingpongMain(context.Background(), c.args, &out, &errb, func(cfg *pingpong.Config) { cfg.Listener = ln })
			require.Equal(t, exitFailure, code)
			require.Equal(t, c.want, errb.String())
			require.Empty(t, out.String(), "no device, no address line")
			require.Zero(t, ln.accepts)

			// As the client: no connection to the server.
			tl, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer tl.Close()
			port := strconv.Itoa(tl.Addr().(*net.TCPAddr).Port)
			out.Reset()
			errb.Reset()
			code = pingpongMain(context.Background(), append(c.args, "-p", port, "127.0.0.1"), &out, &errb, nil)
			require.Equal(t, exitFailure, code)
			require.Equal(t, c.want, errb.String())
			// A client that had connected would be in the accept queue
			// by now: Dial returns after the handshake.
			require.NoError(t, tl.(*net.TCPListener).SetDeadline(time.Now()))
			_, err = tl.Accept()
			require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the client connected")
		})
	}
}

// A peer (rdma-core on rxe with -g 0, say) that sends its link-local
// fe80:: GID cannot be reached from the device's socket: the server
// fails before it answers, the client before it sends "done", so that
// neither side is left waiting. Over IPv6 the address family is the same
// and the QP would connect: the server used to answer, and then wait for
// packets the client could never send it.
func TestPingpongPeerLinkLocalGID(t *testing.T) {
	ll := gidOf("fe80::7fff:fe00:1")
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run("server/"+addr, func(t *testing.T) {
			if strings.HasPrefix(addr, "[") {
				skipWithoutIPv6(t)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			done := make(chan struct{})
			var code int
			var out, errb bytes.Buffer
			go func() {
				defer close(done)
				code = pingpongMain(context.Background(), []string{"rc", "-g", "1", "--addr", addr}, &out, &errb,
					func(c *pingpong.Config) { c.Listener = ln })
			}()
			conn, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			defer conn.Close()
			m := pingpong.Dest{QPN: 0x11, PSN: 1, GID: ll}.Message()
			_, err = conn.Write(m[:])
			require.NoError(t, err)
			n, err := io.ReadFull(conn, m[:])
			require.Zero(t, n, "the server answered a GID it cannot reach")
			require.ErrorIs(t, err, io.EOF)
			<-done
			require.Equal(t, exitFailure, code)
			require.Contains(t, errb.String(), "Failed to modify QP to RTR: the peer sent GID fe80::7fff:fe00:1, a link-local fe80:: GID (index 0 on rxe and softhca, made from the node GUID): this device's UDP socket on ")
			require.Contains(t, errb.String(), "the peer needs -g with its IP address's GID index (1 on softhca, and on rxe with one IPv4 address)\nCouldn't connect to remote QP\n")
		})
		t.Run("client/"+addr, func(t *testing.T) {
			if strings.HasPrefix(addr, "[") {
				skipWithoutIPv6(t)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			// The scripted server: it answers with the link-local GID and
			// reads what follows. A client that sent "done" would then
			// wait for packets that cannot come: the server stops it.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			got := make(chan []byte, 1)
			go func() {
				defer close(got)
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				var m [pingpong.MsgSize]byte
				if _, err := io.ReadFull(conn, m[:]); err != nil {
					return
				}
				a := pingpong.Dest{QPN: 0x11, PSN: 1, GID: ll}.Message()
				conn.Write(a[:])
				n, _ := io.ReadFull(conn, m[:len(pingpong.Done)])
				if n > 0 {
					cancel()
				}
				got <- m[:n]
			}()
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			var out, errb bytes.Buffer
			code := pingpongMain(ctx, []string{"rc", "-g", "1", "--addr", addr, "-p", port, "127.0.0.1"}, &out, &errb, nil)
			require.Equal(t, exitFailure, code)
			require.Contains(t, out.String(), "  remote address: LID 0x0000, QPN 0x000011, PSN 0x000001, GID fe80::7fff:fe00:1\n")
			require.Contains(t, errb.String(), "Failed to modify QP to RTR: the peer sent GID fe80::7fff:fe00:1, a link-local fe80:: GID")
			require.NotContains(t, errb.String(), "Couldn't connect to remote QP", "rdma-core's client prints only the failed step")
			require.Empty(t, <-got, `the client sent "done" although it could not connect`)
		})
	}
}

// gidOf is the GID of an IP address.
func gidOf(s string) verbs.GID { return verbs.GIDFromAddr(netip.MustParseAddr(s)) }

// skipWithoutIPv6 skips a test on a machine without IPv6 loopback.
func skipWithoutIPv6(t *testing.T) {
	t.Helper()
	c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Skipf("no IPv6 loopback (::1) here: %v", err)
	}
	c.Close()
}
