package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/softhca/softhca/cmd/softhca/internal/perftest"
	"github.com/softhca/softhca/cmd/softhca/internal/pingpong"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/wire"
)

const perfUsage = `usage: softhca perf TEST [OPTIONS] [SERVER]

Run one of perftest's tests on a softhca device, as the server (without
SERVER) or as the client of SERVER. The other side may be perftest itself
(the ib_*_bw and ib_*_lat programs of perftest 4.5-0.17, Debian 12's
package, on Linux rdma_rxe or a RoCE NIC) or another softhca perf: the
out-of-band exchange over TCP, the QP setup and the result tables are
perftest's.

TEST is send, write, read or atomic, with _bw (the default) or _lat, and
an optional ib_ prefix: "softhca perf write" is ib_write_bw,
"softhca perf ib_read_lat" is ib_read_lat.

perftest options (the same meaning, defaults and getopt syntax):
  -p, --port=PORT          TCP port of the exchange (18515)
  -s, --size=BYTES         message size (65536 for bw, 2 for lat, 8 for atomic)
  -a, --all                every size from 2 to 2^23 bytes
  -n, --iters=N            iterations (5000 for write_bw, else 1000; at least 5)
  -m, --mtu=MTU            path MTU 256..4096 (at most the port's active MTU)
  -x, --gid-index=N        GID index; softhca's address is GID 1 (GID 0 is the
                           link-local fe80:: GID, no socket is bound to it)
  -d, --ib-dev=NAME        device name (softhca names its device so)
  -i, --ib-port=1          port (softhca has one)
  -A, --atomic_type=TYPE   CMP_AND_SWAP or FETCH_AND_ADD (atomic tests)
  -o, --outs=N             outstanding reads (read and atomic tests)
  -t, --tx-depth=N         send queue depth (128 for bw, 1 for lat)
  -r, --rx-depth=N         receive queue depth (512 for send tests)
  -Q, --cq-mod=N           signal every Nth send (100; 1 above 8 KiB)
  -u, --qp-timeout=N       local ACK timeout exponent (14)
  -N, --noPeak             do not compute the peak bandwidth
  -c, --connection=RC      transport (RC only)
  -q, --qp=1               QPs (one only)
  -F, --CPU-freq           accepted; softhca measures with the monotonic clock
      --report_gbits       report Gb/s instead of MB/s
  -h, --help, -V, --version
Other perftest options are refused by name.

softhca options:
  --addr=IP[:PORT]   the device's UDP address (default: the local address
                     of the exchange connection, port 4791)
  --peer-port=PORT   the UDP port of the peer's device (4791)
  --timeout=DURATION give up after this long (default: never, as perftest)
  --stats            print the transport's counters (retransmissions, drops)
  --no-gso           one UDP datagram per packet (no GSO/GRO offloads), so
                     that tcpdump -i lo shows every packet as a frame of its
                     own (with GSO it sees several in one datagram)
  -w, --pcap=FILE    write every packet the device sends and receives to FILE
                     (pcap, one frame per packet, for Wireshark's InfiniBand
                     dissector and softhca decode); perftest's -w
                     (--limit_bw) is not implemented
  --tap=NAME         put the device on TAP interface NAME instead of a UDP
                     socket: a host of its own there, whose IP address is
                     --addr (required; port 4791 only), GID 1 as usual
  --tap-mac=MAC      the TAP host's MAC (default 02:00 and the last four
                     bytes of --addr)

` + tapHelp + `

Examples:
  server:  softhca perf write -s 4096
  client:  softhca perf write -s 4096 10.0.0.1
  with rxe on the other host: ib_write_bw -d rxe0 -x 1 -s 4096 [SERVER]
  on a TAP:  softhca perf write --tap tap0 --addr 10.9.0.2

` + perfSweepHelp + `
With SOFTHCA_STATS=<file> in the environment, the device's transport
counters are written to file as JSON at the end, as pingpong does.
` + rateHelp + `

Exit status: 0 when the test ran, 1 when it failed, 2 on usage errors.
`

// Test hooks: perfListening, if set, is called with the server's address
// once it accepts connections; perfDone with what a run left behind.
var (
	perfListening func(net.Addr)
	perfDone      func(*perftest.Options, *perftest.Result)
)

// runPerf is the perf command.
func runPerf(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, perfUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stderr, perfUsage)
		return exitOK
	}
	test, err := perftest.ParseTest(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "softhca perf: %v\n\n%s", err, perfUsage)
		return exitUsage
	}
	o, err := perftest.ParseArgs(test, args[1:])
	switch {
	case errors.Is(err, perftest.ErrHelp):
		fmt.Fprint(stderr, perfUsage)
		return exitOK
	case errors.Is(err, perftest.ErrVersion):
		fmt.Fprintf(stdout, "softhca perf %s: speaks the exchange of perftest 4.5-0.17 (version %s)\n", test, perftest.Version)
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "softhca perf %s: %v\n", test, err)
		return exitUsage
	}
	rate, err := rateFromEnv()
	if err != nil {
		fmt.Fprintf(stderr, "softhca perf %s: %v\n", test, err)
		return exitUsage
	}
	busy, err := busyPollFromEnv()
	if err != nil {
		fmt.Fprintf(stderr, "softhca perf %s: %v\n", test, err)
		return exitUsage
	}
	cfg := perftest.Config{Options: o, Stdout: stdout, Stderr: stderr, Listening: perfListening, DeviceRate: rate, BusyPoll: busy}
	if o.Tap != "" {
		cfg.OpenLink = func(local netip.Addr) (link.Link, uint16, error) {
			l, err := openTAP(o.Tap, o.TapMAC, []netip.Addr{local}, nil)
			if err != nil {
				return nil, 0, err
			}
			peer := o.PeerPort
			if peer == 0 {
				peer = wire.RoCEv2Port
			}
			return l, peer, nil
		}
	}
	var pf *pcapFile
	if o.PcapFile != "" {
		if pf, err = createPcapFile(o.PcapFile); err != nil {
			fmt.Fprintf(stderr, "softhca perf %s: %v\n", test, err)
			return exitUsage
		}
		cfg.Trace = pf.trace
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	extras, err := startPerfExtras(o, &cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "softhca perf %s: %v\n", test, err)
		return exitUsage
	}
	res, err := perftest.Run(ctx, cfg)
	if xerr := extras.finish(res, err); err == nil {
		err = xerr
	}
	if perfDone != nil {
		perfDone(o, res)
	}
	if f := os.Getenv("SOFTHCA_STATS"); f != "" && res != nil {
		// The same counters, in the same format, as pingpong writes.
		_ = os.WriteFile(f, pingpong.StatsJSON(res.Stats), 0o644)
	}
	status := exitOK
	if err != nil {
		fmt.Fprintf(stderr, "softhca perf %s: %v\n", test, err)
		if hint := tapHint(err); hint != "" {
			fmt.Fprintf(stderr, "softhca perf %s: --tap %s: %s\n", test, o.Tap, hint)
		}
		status = exitFailure
	}
	if pf != nil {
		// Run has closed the device: no packet is traced any more.
		n, err := pf.close()
		if err != nil {
			fmt.Fprintf(stderr, "softhca perf %s: %v\n", test, err)
			return exitFailure
		}
		local, peer := o.Addr.Port(), o.PeerPort
		if local == 0 {
			local = wire.RoCEv2Port
		}
		if peer == 0 {
			peer = wire.RoCEv2Port
		}
		fmt.Fprintf(stderr, "softhca perf %s: %s\n", test, pf.note(n, local, peer))
	}
	return status
}
