package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	svgladder "github.com/softhca/softhca/cmd/softhca/internal/ladder"
	"github.com/softhca/softhca/wire"
	"github.com/softhca/softhca/wire/pcap"
)

const traceUsage = `usage: softhca trace [-d NAME | --control PATH] [-w FILE.pcap] [--svg FILE.svg]
        [-c COUNT] [--recent N] [-j]

Follow the packets a running daemon (softhca serve) sends and receives, one
ladder line each, with the time from the first packet:

      0.000 ms  127.0.0.1:4791 <- 127.0.0.2:4791  RC Send Only  qp=0x11 psn=100 ackreq len=17
      0.061 ms  127.0.0.1:4791 -> 127.0.0.2:4791  RC Acknowledge  qp=0x11 psn=100 aeth{ACK syn=0x1f msn=1} len=0

The daemon's address is on the left: "->" is a packet it sent, "<-" one it
received; a line says so where the trace fell behind and lost packets.
-w writes every packet to a pcap file that Wireshark and tshark read (and
softhca decode, on port 4791); --svg writes the ladder as a sequence
diagram (of at most 200 packets). trace stops after -c packets, or on
Ctrl-C (SIGINT) or SIGTERM, and then writes its files.

Examples:

  softhca trace                                 # the only daemon's packets, until Ctrl-C
  softhca trace -d softhca1 -c 100 -w run.pcap  # 100 packets of daemon softhca1, to a pcap file
  softhca trace --recent 20 -c 20 --svg last.svg   # the last 20 packets the daemon holds, drawn
  softhca trace -j | jq -r .summary             # one JSON object per packet

Exit status: 0 when it stopped after -c packets or on a signal, 1 when no
daemon answers, the daemon keeps no packets, the stream broke or a file
could not be written, 2 on usage errors or an output file it cannot create.

Flags:
`

// traceSignals stop a trace; SIGPIPE too, so that "softhca trace -w F |
// head" still writes F when head exits.
var traceSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE}

// runTrace is the trace command.
func runTrace(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), traceSignals...)
	defer stop()
	return traceCommand(ctx, args, stdout, stderr)
}

// traceCommand is the trace command, stopped early when ctx ends (on a
// signal, or by a test).
func traceCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("d", "", "the daemon's device `NAME` (its socket is in "+control.Dir()+")")
	sock := fs.String("control", "", "the daemon's control socket `PATH`")
	pcapFile := fs.String("w", "", "write every packet to `FILE` (pcap)")
	svgFile := fs.String("svg", "", "write the ladder to `FILE` as an SVG sequence diagram")
	count := fs.Int("c", 0, "stop after `COUNT` packets (0: until interrupted)")
	recent := fs.Int("recent", 0, "start with the last `N` packets the daemon still holds")
	jsonOut := fs.Bool("j", false, "print one JSON object per packet instead of a ladder line")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), traceUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "softhca trace: "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		fs.Usage()
		return usageErr("unexpected argument %q (trace takes flags only)", fs.Arg(0))
	case *name != "" && *sock != "":
		return usageErr("-d and --control both name a daemon: give one")
	case *count < 0:
		return usageErr("-c %d: want 0 (no limit) or more", *count)
	case *recent < 0:
		return usageErr("--recent %d: want 0 or more", *recent)
	case *pcapFile != "" && *pcapFile == *svgFile:
		return usageErr("-w and --svg name the same file %s", *pcapFile)
	}

	path, err := control.Find(*sock, *name)
	if err != nil {
		fmt.Fprintf(stderr, "softhca trace: %v\n", err)
		return exitFailure
	}
	c, err := control.Dial(path)
	if err != nil {
		fmt.Fprintf(stderr, "softhca trace: %v\n", err)
		return exitFailure
	}
	defer c.Close()

	t := &tracer{out: stdout, json: *jsonOut, count: *count, svg: *svgFile != "", ports: map[uint16]bool{}}
	var pcapF, svgF *os.File
	if *pcapFile != "" {
		if pcapF, err = os.Create(*pcapFile); err != nil {
			return usageErr("%v", err)
		}
		defer pcapF.Close()
		t.pcapBuf = bufio.NewWriter(pcapF)
		if t.pcap, err = pcap.NewWriter(t.pcapBuf); err != nil {
			fmt.Fprintf(stderr, "softhca trace: %s: %v\n", *pcapFile, err)
			return exitFailure
		}
	}
	if *svgFile != "" {
		if svgF, err = os.Create(*svgFile); err != nil {
			return usageErr("%v", err)
		}
		defer svgF.Close()
	}

	err = c.Trace(ctx, *recent, t.packet)
	status := exitOK
	switch {
	case err == nil, errors.Is(err, errTraceDone):
	case errors.Is(err, syscall.EPIPE):
		// Whoever read stdout is gone ("| head"): stop as on a signal.
	case errors.Is(err, errTraceFile):
		fmt.Fprintf(stderr, "softhca trace: %s: %v\n", *pcapFile, err)
		status = exitFailure
	default:
		fmt.Fprintf(stderr, "softhca trace: %v\n", err)
		status = exitFailure
	}

	// Write the files whatever stopped the trace: they hold what came.
	if pcapF != nil {
		err := t.pcapErr
		if err == nil {
			err = t.pcapBuf.Flush()
		}
		if err == nil {
			err = pcapF.Close()
		}
		if err != nil {
			if !errors.Is(err, errTraceFile) {
				fmt.Fprintf(stderr, "softhca trace: %s: %v\n", *pcapFile, err)
			}
			status = exitFailure
		} else {
			fmt.Fprintf(stderr, "softhca trace: wrote %d packets to %s; show them with:\n  %s\n", t.pcapPkts, *pcapFile, tsharkCommand(*pcapFile, t.portList()))
			if ports := t.portList(); len(ports) == 1 && ports[0] == wire.RoCEv2Port {
				fmt.Fprintf(stderr, "or check every ICRC with: softhca decode %s\n", *pcapFile)
			}
		}
	}
	if svgF != nil {
		opt := svgladder.Options{Title: fmt.Sprintf("softhca trace: %d packets", t.seen), More: t.more}
		if t.seen > 0 {
			opt.Title += " from " + time.Unix(0, t.t0).Format("2006-01-02 15:04:05.000 MST")
			opt.Endpoints = []string{t.local} // on the left, as on the ladder
		}
		w := bufio.NewWriter(svgF)
		err := svgladder.WriteSVG(w, t.events, opt)
		if err == nil {
			err = w.Flush()
		}
		if err == nil {
			err = svgF.Close()
		}
		if err != nil {
			fmt.Fprintf(stderr, "softhca trace: %s: %v\n", *svgFile, err)
			status = exitFailure
		} else {
			what := fmt.Sprintf("%d packets", len(t.events))
			if t.more > 0 {
				what = fmt.Sprintf("the first %d of %d packets", len(t.events), t.seen)
			}
			fmt.Fprintf(stderr, "softhca trace: wrote the ladder of %s to %s\n", what, *svgFile)
		}
	}
	return status
}

var (
	// errTraceDone stops the stream after -c packets.
	errTraceDone = errors.New("done")
	// errTraceFile wraps a failure to write the pcap file.
	errTraceFile = errors.New("writing the capture")
)

// pcapFlushEvery bounds how long a packet waits in the pcap file's
// buffer, so that the file can be read while the trace runs.
const pcapFlushEvery = 100 * time.Millisecond

// tracer prints, records and writes the packets of one trace.
type tracer struct {
	out   io.Writer
	json  bool
	count int // stop after this many (0: never)
	svg   bool

	seen  int    // packets so far
	t0    int64  // the first packet's time (ns since the epoch)
	local string // the daemon's address in the first packet

	pcap      *pcap.Writer // nil without -w
	pcapBuf   *bufio.Writer
	pcapErr   error
	pcapPkts  int
	lastFlush time.Time
	ports     map[uint16]bool // the UDP destination ports of the packets written

	events []svgladder.Event // the first MaxArrows packets, for --svg
	more   int               // packets after those
	wp     wire.Packet
	line   []byte
}

// traceJSON is what -j prints for a packet.
type traceJSON struct {
	*control.Packet
	// Lost counts the packets the stream left out just before this one.
	Lost uint64 `json:"lost,omitempty"`
}

// packet handles one packet of the stream (control.Client.Trace's
// callback).
func (t *tracer) packet(p *control.Packet, lost uint64) error {
	if t.seen == 0 {
		t.t0 = p.Time
	}
	t.seen++
	rel := time.Duration(p.Time - t.t0)
	summary := t.summary(p)
	local, arrow, peer := p.Src, "->", p.Dst
	if p.Dir == "received" {
		local, arrow, peer = p.Dst, "<-", p.Src
	}
	if t.seen == 1 {
		t.local = local
	}

	if t.json {
		b, err := json.Marshal(traceJSON{Packet: p, Lost: lost})
		if err != nil {
			return err
		}
		if _, err := t.out.Write(append(b, '\n')); err != nil {
			return err
		}
	} else {
		if lost > 0 {
			if _, err := fmt.Fprintf(t.out, "  (%d packets lost here: the trace read more slowly than the device moved them)\n", lost); err != nil {
				return err
			}
		}
		t.line = fmt.Appendf(t.line[:0], "  %8.3f ms  %s %s %s  %s\n", float64(rel.Microseconds())/1000, local, arrow, peer, summary)
		if _, err := t.out.Write(t.line); err != nil {
			return err
		}
	}

	if t.svg {
		if len(t.events) < svgladder.MaxArrows {
			t.events = append(t.events, svgladder.Event{Time: rel, From: p.Src, To: p.Dst, Label: summary,
				Dropped: strings.HasPrefix(summary, "DROP "), Lost: lost})
		} else {
			t.more++
		}
	}
	if t.pcap != nil {
		if err := t.writePcap(p); err != nil {
			return err
		}
	}
	if t.count > 0 && t.seen >= t.count {
		return errTraceDone
	}
	return nil
}

// summary is the packet's summary line: the daemon's, or decode's own
// when the daemon sent none.
func (t *tracer) summary(p *control.Packet) string {
	if p.Summary != "" {
		return p.Summary
	}
	n, err := packetNet(p)
	if err != nil {
		return err.Error()
	}
	if r := wire.ParseDatagram(p.Data, &n, &t.wp); r != wire.DropNone {
		return "DROP " + r.String()
	}
	return packetSummary(&t.wp)
}

// writePcap writes p to the capture. A packet whose addresses make no
// IP header is left out, with a note on the ladder; a failed write ends
// the trace.
func (t *tracer) writePcap(p *control.Packet) error {
	n, err := packetNet(p)
	if err != nil {
		if !t.json {
			fmt.Fprintf(t.out, "  (not in the capture: %v)\n", err)
		}
		return nil
	}
	if err := t.pcap.WritePacket(time.Unix(0, p.Time), &n, p.Data); err != nil {
		t.pcapErr = fmt.Errorf("%w: %w", errTraceFile, err)
		return t.pcapErr
	}
	t.pcapPkts++
	// Destination ports only: a peer may send from any source port (rxe
	// picks one per QP), and tshark's udp.port matches either.
	t.ports[n.DstPort] = true
	if now := time.Now(); now.Sub(t.lastFlush) >= pcapFlushEvery {
		t.lastFlush = now
		if err := t.pcapBuf.Flush(); err != nil {
			t.pcapErr = fmt.Errorf("%w: %w", errTraceFile, err)
			return t.pcapErr
		}
	}
	return nil
}

// portList lists the UDP destination ports of the packets written, in
// order.
func (t *tracer) portList() []uint16 {
	var ports []uint16
	for p := range t.ports {
		ports = append(ports, p)
	}
	slices.Sort(ports)
	return ports
}

// packetNet rebuilds the IP and UDP fields a traced packet had on the
// wire, those its ICRC covers: the addresses, ports, traffic class and
// hop limit the stream gives, the DF flag RoCEv2 senders set and, for
// IPv4, the Identification field, which the stream does not carry: it
// is recovered from the ICRC, as the receive path does (the daemon's
// sent packets have ID 0, the received ones the sender's ID), so that
// the capture's ICRC verifies.
func packetNet(p *control.Packet) (wire.Net, error) {
	src, err := netip.ParseAddrPort(p.Src)
	if err != nil {
		return wire.Net{}, fmt.Errorf("source %q: %w", p.Src, err)
	}
	dst, err := netip.ParseAddrPort(p.Dst)
	if err != nil {
		return wire.Net{}, fmt.Errorf("destination %q: %w", p.Dst, err)
	}
	if src.Addr().Is4() != dst.Addr().Is4() {
		return wire.Net{}, fmt.Errorf("from %s to %s: not both IPv4 or both IPv6", p.Src, p.Dst)
	}
	n := wire.Net{Src: src.Addr(), Dst: dst.Addr(), SrcPort: src.Port(), DstPort: dst.Port(),
		TrafficClass: p.TrafficClass, HopLimit: p.HopLimit, DontFragment: true}
	if !n.IsIPv6() {
		if id, ok := wire.SolveIPv4ID(&n, p.Data); ok {
			n.ID = id
		}
	}
	return n, nil
}
