// Command interoptap runs one side of an rdma-core pingpong example or of
// a perftest program on a softhca device on a TAP interface (link/tap):
// softhca as a host of its own on an Ethernet, with its own MAC and IP
// address, as rxe is on its netdev. The interop harness (package interop)
// builds it and runs it against rdma_rxe in its qemu guest, with the TAP
// on the guest's bridge:
//
//	interoptap -tap shsh0 -addr 10.77.0.10 pingpong rc -g 1 -p 18600 -c [10.77.0.2]
//	interoptap -tap shsh0 -addr 10.77.0.10 perf write -x 1 -s 65536 [10.77.0.2]
//
// It opens the device itself, hca.Config{Link: the TAP link}, so that the
// device takes its GIDs (GID 1 is the TAP address), node GUID (from the
// MAC) and active MTU (from the interface's MTU) from the link, and hands
// it to the tool through pingpong's and perftest's Config.Device. The
// tools' TCP exchange (QPN, PSN, GID) goes through the host's kernel as
// usually: the TAP host answers only ARP, neighbour discovery, ping and
// RoCEv2, and the peer reaches it at the GID it was given.
//
// The pingpong options are the ones the harness passes (-p -s -n -m -g
// -q -c -e, and the server's name); the perf options are perftest's, read
// by perftest.ParseArgs. An existing TAP interface is attached and left as
// it was (Up in package interop makes one, persistent, on the bridge); a
// missing one is created, and then only the kernel's side of it exists:
// nothing joins it to a network.
//
// With SOFTHCA_STATS=<file> in the environment, the device's counters are
// written there as JSON when the run ends (pingpong.StatsJSON, the
// format the harness reads from softhca pingpong and softhca perf), the
// TAP link's own drop counters among them.
//
// It lives under cmd/softhca because it uses that command's internal
// packages; it is a test tool, not part of softhca's command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/softhca/softhca/cmd/softhca/internal/perftest"
	"github.com/softhca/softhca/cmd/softhca/internal/pingpong"
	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link/tap"
	"github.com/softhca/softhca/verbs"
)

const usage = `usage: interoptap -tap NAME -addr IP pingpong MODE [-p PORT] [-s SIZE] [-n ITERS] [-m MTU] [-g GIDX] [-q NUMQP] [-c] [-e] [SERVER]
       interoptap -tap NAME -addr IP perf TEST [perftest options] [SERVER]
`

// Exit statuses, as softhca's.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// tool is one parsed run: the device it needs and how to run on it.
type tool struct {
	name    string // for messages: "pingpong rc", "perf write_bw"
	workers int    // hca.Config.Workers; 0: the default
	run     func(ctx context.Context, dev *hca.Device) error
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("interoptap", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	tapName := fs.String("tap", "", "the TAP interface")
	addrArg := fs.String("addr", "", "softhca's IP address on it")
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "interoptap: %v\n%s", err, usage)
		return exitUsage
	}
	if *tapName == "" || *addrArg == "" || fs.NArg() < 2 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	addr, err := netip.ParseAddr(*addrArg)
	if err != nil {
		fmt.Fprintf(stderr, "interoptap: -addr: %v\n", err)
		return exitUsage
	}
	var t tool
	switch rest := fs.Args(); rest[0] {
	case "pingpong":
		t, err = pingpongTool(rest[1], rest[2:], stdout)
	case "perf":
		t, err = perfTool(rest[1], rest[2:], stdout, stderr)
	default:
		err = fmt.Errorf("unknown tool %q: pingpong or perf", rest[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "interoptap: %v\n%s", err, usage)
		return exitUsage
	}

	l, err := tap.Open(tap.LinkConfig{Name: *tapName, Host: tap.Config{Addrs: []netip.Addr{addr}}})
	if err != nil {
		fmt.Fprintf(stderr, "interoptap: %v\n", err)
		return exitFailure
	}
	dev, err := hca.Open(hca.Config{Name: pingpong.DeviceName, Link: l, Workers: t.workers})
	if err != nil {
		l.Close()
		fmt.Fprintf(stderr, "interoptap: opening the device on %s: %v\n", l.Name(), err)
		return exitFailure
	}
	pa, _ := dev.QueryPort(1)
	mac := l.MAC()
	fmt.Fprintf(stderr, "interoptap: %s on TAP %s: %v, MAC %s, interface MTU %d, active MTU %d; %s\n",
		dev.Name(), l.Name(), dev.Config().Addrs, net.HardwareAddr(mac[:]), l.MTU(), pa.ActiveMTU.Bytes(), t.name)
	runErr := t.run(ctx, dev)
	closeErr := dev.Close()
	if f := os.Getenv("SOFTHCA_STATS"); f != "" {
		if err := os.WriteFile(f, pingpong.StatsJSON(dev.TransportStats()), 0o644); err != nil {
			fmt.Fprintf(stderr, "interoptap: %v\n", err)
		}
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "interoptap: %s: %v\n", t.name, runErr)
		return exitFailure
	}
	if closeErr != nil {
		fmt.Fprintf(stderr, "interoptap: closing the device: %v\n", closeErr)
		return exitFailure
	}
	return exitOK
}

// pingpongTool parses a pingpong command line (parsePingpong).
func pingpongTool(modeName string, args []string, stdout io.Writer) (tool, error) {
	cfg, err := parsePingpong(modeName, args)
	if err != nil {
		return tool{}, err
	}
	t := tool{name: "pingpong " + cfg.Mode.String()}
	if cfg.Mode == pingpong.SRQ {
		// The QPs share one buffer: one worker (see Config.Device).
		t.workers = 1
	}
	t.run = func(ctx context.Context, dev *hca.Device) error {
		c := cfg
		c.Device = dev
		err := pingpong.Run(ctx, c, stdout)
		if errors.Is(err, pingpong.ErrInvalidData) {
			return fmt.Errorf("-c: the received data differs from what the peer sends: %w", err)
		}
		return err
	}
	return t, nil
}

// parsePingpong parses the options the interop harness gives softhca
// pingpong, with rdma-core's meanings and defaults.
func parsePingpong(modeName string, args []string) (pingpong.Config, error) {
	mode, ok := pingpong.ParseMode(modeName)
	if !ok {
		return pingpong.Config{}, fmt.Errorf("unknown pingpong mode %q: rc, uc, ud or srq", modeName)
	}
	cfg := pingpong.NewConfig(mode)
	fs := flag.NewFlagSet("pingpong", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&cfg.Port, "p", cfg.Port, "TCP port of the exchange")
	size := fs.Uint("s", uint(cfg.Size), "message size")
	iters := fs.Uint("n", uint(cfg.Iters), "exchanges")
	mtu := fs.Int("m", cfg.MTU.Bytes(), "path MTU")
	fs.IntVar(&cfg.GIDIndex, "g", cfg.GIDIndex, "GID index")
	numQP := fs.Uint("q", uint(cfg.NumQP), "QPs (srq)")
	fs.BoolVar(&cfg.Validate, "c", false, "check the received data")
	fs.BoolVar(&cfg.Events, "e", false, "sleep on completion events")
	if err := fs.Parse(args); err != nil {
		return cfg, fmt.Errorf("pingpong: %w", err)
	}
	switch fs.NArg() {
	case 0:
	case 1:
		cfg.ServerName = fs.Arg(0)
	default:
		return cfg, fmt.Errorf("pingpong: one server at most, got %q", fs.Args())
	}
	cfg.Size, cfg.Iters, cfg.NumQP = uint32(*size), uint32(*iters), uint32(*numQP)
	if cfg.MTU = verbs.MTUFromBytes(*mtu); cfg.MTU.Bytes() != *mtu {
		return cfg, fmt.Errorf("pingpong: -m %d is not 256, 512, 1024, 2048 or 4096", *mtu)
	}
	return cfg, nil
}

// perfTool parses a perf command line with perftest's options.
func perfTool(testName string, args []string, stdout, stderr io.Writer) (tool, error) {
	test, err := perftest.ParseTest(testName)
	if err != nil {
		return tool{}, fmt.Errorf("perf: %w", err)
	}
	o, err := perftest.ParseArgs(test, args)
	if err != nil {
		return tool{}, fmt.Errorf("perf %s: %w", test, err)
	}
	return tool{name: "perf " + test.String(), run: func(ctx context.Context, dev *hca.Device) error {
		_, err := perftest.Run(ctx, perftest.Config{Options: o, Stdout: stdout, Stderr: stderr, Device: dev})
		return err
	}}, nil
}
