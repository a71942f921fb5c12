// Command softhca is the command-line front end of softhca, the user-space
// RDMA host channel adapter that speaks RoCEv2 (InfiniBand transport in UDP
// port 4791) and interoperates with Linux rdma_rxe.
//
// Usage:
//
//	softhca <command> [flags] [arguments]
//	softhca help [command]
//
// Commands:
//
//	demo         run two devices over UDP loopback (or a TAP device: -tap) and show the verbs on the wire
//	decode       print the RoCEv2 packets of pcap/pcapng files and check them
//	conformance  run the verbs conformance suite and print a table
//	pingpong     rdma-core's ibv_{rc,uc,ud,srq}_pingpong, either side, on a softhca device
//	perf         perftest's ib_{send,write,read,atomic}_{bw,lat}, either side, on a softhca device
//	run          run an unmodified libibverbs program on a softhca device (the drop-in libibverbs.so.1)
//	env          print the environment that puts a program on a softhca device
//	serve        run a soft HCA until stopped: a device on UDP, its control socket, web page and metrics
//	status       describe a running daemon
//	res          list a running daemon's verbs objects (rdma resource show)
//	stat         print a running daemon's counters (rdma statistic)
//	trace        follow a daemon's packets as a ladder; write pcap and an SVG sequence diagram
//	devinfo      rdma-core's ibv_devinfo [-v]: the attributes of softhca's device (the daemon's, when one runs)
//
// # demo
//
//	softhca demo [-port N] [-addrs A,B] [-pcap FILE] [-svg FILE] [-loss P]
//
// demo opens two devices, A and B, in one process, each on its own UDP
// socket (A on 127.0.0.1, B on 127.0.0.2, port 4791), connects an RC and a
// UD queue pair between them and runs six steps: RC SEND (B has posted a
// receive), RDMA WRITE, RDMA READ, ATOMIC FETCH_AND_ADD, ATOMIC
// CMP_AND_SWP and UD SEND. Each step prints a heading, a line or two on
// what happens, the packet ladder, the completions (wr_id, status, opcode,
// byte_len, imm) and a check of the data that moved:
//
//	Step 1: RC SEND
//	  B posts a receive (a buffer for the next message); A SENDs 17 bytes into it.
//
//	     0.000 ms  A -> B  RC Send Only  qp=0x11 psn=100 ackreq len=17
//	     0.077 ms  A <- B  RC Acknowledge  qp=0x11 psn=100 aeth{ACK syn=0x1f msn=1} len=0
//	  ...
//	  B's buffer now holds: "Hello from A to B"
//
// The ladder comes from the devices' Trace hooks and lists sent packets
// only, so each packet appears once, in the order the senders sent it;
// "A -> B" was sent by A, "A <- B" by B. The packet fields are decode's.
//
// If the port is taken on 127.0.0.1/127.0.0.2 (by rdma_rxe, say), demo
// tries 127.0.0.3/127.0.0.4 and 127.0.0.5/127.0.0.6 on the same port, then
// free ports, and prints a note saying so; -port 0 asks for free ports and
// -addrs A,B for other addresses, IPv6 ones too (-port 0 -addrs ::1,::1).
// The UD step shows what the 40-byte GRH area at the start of a UD
// receive buffer holds, as rxe fills it: for IPv4, 20 zero bytes and the
// packet's IPv4 header; for IPv6, the packet's IPv6 header itself (the
// layout of a GRH); either way with the TTL or hop limit the packet
// arrived with. -pcap writes the packets that crossed
// the wire to a pcap file and prints the tshark command that shows them as
// InfiniBand (on port 4791, decode reads the file too; it takes no other
// port for RoCEv2). -svg draws the ladders of all the steps as one SVG
// sequence diagram (A's and B's lifelines, an arrow per packet). -loss
// drops RC packets with the given probability to show retransmissions.
//
// The exit status is 0 when every completion is successful and every data
// check passes, 1 when a step fails (the message says which and why), and
// 2 on usage errors.
//
// # conformance
//
//	softhca conformance [-run REGEXP] [-v] [--target softhca|rdma:DEVICE [--agent PATH] [--lib DIR] [--port-addrs IP,...]] [-report FILE.json]
//	softhca conformance report [-o FILE.md] RUN.json...
//
// conformance runs every case of package conformance against softhca in
// process (--target softhca, the default) or against a device libibverbs
// drives (--target rdma:rxe0), through a verbs agent process per device
// (package conformance/rdma; --agent names a prebuilt one, otherwise the
// embedded agent.c is compiled, which needs gcc and libibverbs-dev; --lib
// runs the agents on softhca's drop-in libibverbs.so.1 in that
// directory; --port-addrs tells the query_gid cases the addresses of a
// device it does not set up itself). It prints PASS/FAIL/SKIP per case with its label (spec or
// implementation-defined), and ends with "N passed, N failed, N skipped".
// A case that declares a deviation for the target's implementation
// reports XFAIL when it fails (with the deviation's citation) and XPASS
// when it passes. The exit status is 1 if any case failed or passed
// unexpectedly. -report writes the run as JSON; "conformance report"
// merges such runs (softhca, its libibverbs, rxe, ...) into one Markdown
// document: counts per run, one row per case with a column per run, and
// every deviation with its citation.
//
// # decode
//
//	softhca decode [-v] FILE.pcap...
//
// decode reads capture files (pcap with Ethernet, raw IP, Linux cooked or
// BSD loopback framing, or pcapng) and prints one line per RoCEv2 frame,
// that is per UDP datagram to port 4791. Each frame goes through wire.Parse,
// which checks the IP and UDP headers, the InfiniBand headers the opcode
// calls for, the pad, and the invariant CRC, exactly as softhca's receive
// path does:
//
//	frame 1: 0.000000 10.77.0.2:50241 -> 10.77.0.3:4791: RC Fetch Add qp=0x21 psn=12453421 ackreq atomic{va=0x55d631cd0000 rkey=0xffa add=0x1 cmp=0x0} len=0 icrc ok
//
// A frame that wire.Parse drops ends with "DROP <reason>" instead, after
// whatever could still be decoded. Other frames are counted as "not
// RoCEv2" and listed only with -v. After each file comes a summary line,
// and after several files a total line.
//
// A capture on loopback (tcpdump -i lo) sees softhca's UDP GSO sends
// before the kernel splits them: one datagram holding several RoCEv2
// packets back to back, all of the segment size (the first packet's
// length) but the last, which may be shorter. decode recognises such a
// GSO super-datagram by finding the segment size at which the first
// packet's ICRC verifies, and prints each packet on its own line, with
// its place in the datagram ("gso 2/3") and, for IPv4, the
// Identification the kernel gives that segment (the datagram's plus its
// index, which the ICRC covers):
//
//	frame 4: 0.001502 127.0.0.2:4791 -> 127.0.0.1:4791: gso 1/2 RC Send Only qp=0x11 psn=10438426 ackreq len=100 icrc ok
//	frame 4: 0.001502 127.0.0.2:4791 -> 127.0.0.1:4791: gso 2/2 RC Acknowledge qp=0x11 psn=8745029 aeth{ACK syn=0x1f msn=1} len=0 icrc ok
//
// The summary counts the datagrams as frames and each of their packets
// as ok or bad. (pingpong's and perf's -w writes the packets one by one
// from inside softhca, and their --no-gso sends them so.)
//
// The exit status is 0 when every RoCEv2 packet parsed and its ICRC
// verified, 1 when any was dropped, and 2 on usage errors or files that
// cannot be read.
//
// # pingpong
//
//	softhca pingpong {rc|uc|ud|srq} [-p port] [-d dev] [-i port] [-s size] [-m mtu]
//	        [-q num_qp] [-r rx_depth] [-n iters] [-l sl] [-e] [-g gid_idx] [-c]
//	        [--addr ip[:port]] [--peer-port port] [--port-mtu mtu] [--no-gso] [-w file] [host]
//
// pingpong is one side of rdma-core's ping-pong examples: without host a
// server that waits for a TCP connection on port 18515, with host a client
// that connects to it. The two exchange "LID:QPN:PSN:GID" messages over
// TCP as rdma-core does, connect their QPs (rc: one RC QP; uc: one UC QP;
// ud: one UD QP and an address handle; srq: -q RC QPs sharing one SRQ),
// and bounce -n messages of -s bytes, printing what the rdma-core tool
// prints:
//
//	  local address:  LID 0x0000, QPN 0x000011, PSN 0x3ef50d, GID ::ffff:10.77.0.1
//	  remote address: LID 0x0000, QPN 0x000011, PSN 0xbb54bd, GID ::ffff:10.77.0.2
//	8192000 bytes in 0.12 seconds = 530.84 Mbit/sec
//	1000 iters in 0.12 seconds = 123.46 usec/iter
//
// Either side may be ibv_rc_pingpong (and so on) on Linux rxe: options,
// defaults and messages are rdma-core 44's (Debian 12). The device binds
// UDP port 4791 on this side's address of the TCP connection (--addr
// chooses another) and GID index 1 is that address, as with rxe; RoCE
// needs a GRH, so both sides need -g 1 (without it the peer fails to move
// its QP to RTR, as on rxe). The exit status is 0 on success and 1 on any
// failure or usage error, as rdma-core's.
//
// Index 0 holds the link-local fe80:: GID made from the node GUID, as on
// rxe, but the device's socket is bound to its IP address only: -g 0
// fails at once and says why, and so does an index where the device has
// no GID, with rdma-core's "can't read sgid of index N" (rdma-core on rxe
// reads an empty entry as an all-zero GID and sends that, so that the
// peer cannot connect). A peer's GID the device cannot send to (a
// link-local one, or of the other IP family) fails the connect with a
// reason; the client connects before it sends "done" (rdma-core's sends
// it first), so that a server whose client cannot connect fails too
// instead of waiting forever for its first message.
//
// -w FILE (--pcap) writes every packet the device sends and receives to
// a pcap file, from inside softhca (the device's Trace hook, as demo
// -pcap): one Ethernet frame per RoCEv2 packet, with the IP and UDP
// headers its ICRC covers, which Wireshark's InfiniBand dissector and
// decode read; at the end a line on stderr says how many packets went
// there and gives the tshark command that shows them.
//
// The device's UDP socket uses the kernel's segmentation offloads, UDP
// GSO and GRO: a run of packets to the peer leaves as one super-datagram
// that the kernel splits. A capture on loopback (tcpdump -i lo) sees it
// before the split, several packets in one frame, which Wireshark shows
// as one packet (decode splits it). --no-gso sends and receives one
// datagram per packet, for tcpdump's sake; it costs throughput, and -w
// needs no such help.
//
// # run, env
//
//	softhca run --addr IP [--port N] [--peer-port N] [--device NAME] [--mtu N]
//	        [--busy-poll] [--rate R] [--log N] [--lib DIR] -- CMD [ARGS...]
//	softhca env --addr IP [the same flags]
//
// run runs an unmodified libibverbs program on a softhca device: with
// softhca's drop-in libibverbs.so.1 (make libibverbs) in front of the
// system's through LD_LIBRARY_PATH, and the device described in SOFTHCA_*
// variables (package hcaenv), which the library reads. It returns the
// program's exit status. env prints the same variables as shell export
// lines.
//
// # perf
//
//	softhca perf {send|write|read|atomic}[_bw|_lat] [perftest options]
//	        [--addr ip[:port]] [--peer-port port] [--timeout d] [--no-gso] [-w file] [server]
//
// perf is one side of perftest's ib_send_bw, ib_write_bw, ib_read_bw,
// ib_atomic_bw and their _lat variants ("softhca perf write" is
// ib_write_bw, "softhca perf read_lat" or "ib_read_lat" ib_read_lat):
// without server it waits on TCP port 18515 (-p), with server it connects.
// Either side may be perftest 4.5-0.17 (Debian 12) on Linux rxe: the
// exchange (versions, page and cache line sizes, MTU, the 108-byte QP
// addresses, the closing handshakes and the client's results), the QP
// attributes, the defaults and the output are perftest's:
//
//	#bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
//	65536      5000             1010.12            1009.87		   0.016158
//
// It runs RC with one QP and takes -s, -a, -n, -m, -x, -p, -d, -i, -A, -o,
// -t, -r, -Q, -u, -N, -F and --report_gbits; other perftest options are
// refused by name. The device binds UDP port 4791 on this side's address
// of the TCP connection (--addr chooses another, --peer-port the peer's
// port) and GID index 1 is that address, as with rxe: -x 0 (the
// link-local GID) and an index without a GID fail before the exchange
// connection, and a peer's link-local GID before the QP is connected to
// it. -w FILE writes the
// device's packets to a pcap file and --no-gso turns the UDP segmentation
// offloads off, as for pingpong; perftest's own -w (--limit_bw) is not
// implemented, and a number after -w is refused as one. The exit status
// is 0 when the test ran, 1 when it failed and 2 on usage errors.
//
// Progress, sweeps and plots are softhca's own additions:
//
//	softhca perf TEST [--sweep] [--plot FILE.svg|FILE.png] [--progress] ... [server]
//
// A measurement that runs longer than a second shows its progress on
// stderr: the message size (and which of the sizes), the iterations done
// and the rate since the last report (bandwidth in MB/sec or Gb/sec, or
// for latency tests the average latency in usec), as one line kept up to
// date when stderr is a terminal, and as a line a second with --progress
// when it is not (nothing otherwise). stdout carries perftest's output
// alone, byte for byte, so that it compares with perftest's. --sweep is
// -a under a name that says what it is for: every power of two from 2 B
// to 8 MiB, as perftest's -a (with its CQ moderation, and the same
// exchanges, so the peer runs -a or --sweep too and may be perftest);
// the atomic tests have one size, 8 B, and refuse both, as perftest
// does. --plot writes the curves of what this side measured, a point per
// size, against the size on a log2 axis, as SVG or PNG by the file's
// extension: a _bw test's BW average and BW peak, a _lat test's t_typical
// and 99% percentile (on a log scale when they span two decades). A _bw
// run measures no latency and a _lat run no bandwidth, as in perftest,
// whose programs may be the peer: the latency curve is a second run, of
// the _lat test. Only a side that measures can plot (the client; either
// side of send_bw, write_lat and send_lat); the file is written when the
// test ran, whole or not at all.
//
//	server:  softhca perf write --sweep
//	client:  softhca perf write --sweep --plot bw.svg 10.0.0.1
//	server:  softhca perf write_lat --sweep
//	client:  softhca perf write_lat --sweep --plot lat.png 10.0.0.1
//
// # serve, status, res, stat
//
//	softhca serve [--listen ADDR] [--name NAME] [--region NAME:SIZE[:ACCESS]]...
//	        [--pingpong ARGS]... [--perftest ARGS]... [--http ADDR] [--metrics ADDR]
//	        [--control PATH] [--config FILE] [--log-format text|json]
//	softhca status|stat [-d NAME | --control PATH] [-j]
//	softhca res [pd|mr|cq|qp|srq] [-d NAME | --control PATH] [-j]
//
// serve runs a softhca device until SIGTERM or SIGINT (package
// internal/daemon): on a UDP address, with named target memory regions
// whose address and rkey status publishes, the responders of --pingpong
// and --perftest served one client after another, a control socket
// (docs/control-api.md), a web page (--http, 127.0.0.1:8791 by default)
// and a Prometheus endpoint (--metrics). Stopping moves every QP to the
// error state, delivers the flush completions and removes the socket.
// status, res and stat are the control socket's clients, modelled on
// iproute2's rdma resource show and rdma statistic; -j prints the
// daemon's JSON. docs/daemon.md has the details and the exit statuses.
//
// # trace
//
//	softhca trace [-d NAME | --control PATH] [-w FILE.pcap] [--svg FILE.svg]
//	        [-c COUNT] [--recent N] [-j]
//
// trace follows the packets a daemon (softhca serve) sends and receives,
// through its control socket (-d names the device, whose socket is in
// $XDG_RUNTIME_DIR/softhca or /run/softhca; --control gives the path;
// without either, the only daemon running). Each packet is a ladder line:
// the time from the first packet, the daemon's address and the peer's
// ("->" sent, "<-" received) and decode's summary:
//
//	0.000 ms  127.0.0.1:4791 <- 127.0.0.2:4791  RC Send Only  qp=0x11 psn=100 ackreq len=17
//	0.061 ms  127.0.0.1:4791 -> 127.0.0.2:4791  RC Acknowledge  qp=0x11 psn=100 aeth{ACK syn=0x1f msn=1} len=0
//
// A trace that reads more slowly than the device moves packets loses
// some (the daemon keeps a ring of them); a line says how many, where.
// --recent N starts with the last N packets the daemon still holds; -j
// prints each packet as a JSON object (the control API's, with "lost")
// instead of a line. -w writes every packet to a pcap file with the IP
// and UDP headers rebuilt (the IPv4 Identification recovered from the
// ICRC, so that every ICRC verifies in decode), and prints the tshark
// command that shows it as InfiniBand. --svg writes the ladder as an SVG
// sequence diagram: a lifeline per address, an arrow per packet, at most
// 200 (a note says how many were left out).
//
// trace stops after -c packets, or on SIGINT or SIGTERM, and then writes
// its files. The exit status is 0 then, 1 when no daemon answers, the
// daemon keeps no packets (--trace-ring 0), the stream breaks (the daemon
// stopped) or a file cannot be written, and 2 on usage errors or an
// output file that cannot be created.
// # devinfo
//
//	softhca devinfo [-v] [-d DEVICE] [-i PORT] [-l] [-j] [--addr IP]
//
// devinfo prints the device's attributes as rdma-core's ibv_devinfo
// prints a device's (rdma-core 44, Debian 12): the same fields in the
// same order, with the same labels and tabs; with -v every attribute,
// as ibv_devinfo -v prints them for rxe:
//
//	hca_id:	softhca0
//		transport:			InfiniBand (0)
//		fw_ver:				0.0.0
//		node_guid:			0000:0aff:fe4d:0002
//		...
//			port:	1
//				state:			PORT_ACTIVE (4)
//				...
//				GID[  1]:		::ffff:10.77.0.2, RoCE v2
//
// The values are those softhca's drop-in libibverbs.so.1 gives
// ibv_devinfo itself ("softhca run --addr IP -- ibv_devinfo -v" prints
// the same text; a test holds them to it), and differ from rxe's where the
// device does: its node GUID (from the address, not a MAC), no memory
// windows (device_cap_flags, max_mw), tag matching (tm_caps), max_msg_sz
// 2^31. -d, -i, -l and -v are ibv_devinfo's, and so are the messages
// and exit statuses: 0 on success, 1 for an -i that is not a port
// number, 4 for a port the device lacks, 255 for other usage errors,
// "IB device 'X' wasn't found" and "No IB devices found". -j prints
// the devices as JSON (package cmd/softhca/internal/devinfo's Device:
// libibverbs' snake_case field names; -l -j the names).
//
// Which device: a running daemon's, when one answers (queryDaemon, set
// by the daemon client); otherwise the one "softhca run" would give a
// program, described in process without binding a socket (rxe or a
// daemon may hold UDP port 4791): named SOFTHCA_DEVICE (default
// softhca0), on --addr, SOFTHCA_ADDR or else the host's primary address
// (the source address of its default route, 127.0.0.1 without one),
// which is GID 1 as on rxe, with the MTU SOFTHCA_MTU or the interface's.
//
// # Structure
//
// Each command lives in its own file as a function with the signature of
// [command.run], which parses its own flag.FlagSet and returns the exit
// status, so tests run commands in-process.
package main

import (
	"fmt"
	"io"
	"os"
)

// command is one subcommand of softhca.
type command struct {
	name    string
	summary string // one line for the command list
	// run executes the command with the arguments after its name and
	// returns the process exit status: 0 success, 1 failure found, 2 usage
	// error or unreadable input.
	run func(args []string, stdout, stderr io.Writer) int
}

// commands lists the subcommands in the order usage shows them.
var commands = []command{
	{"demo", "run two devices over UDP loopback (or a TAP device: -tap) and show the verbs on the wire", runDemo},
	{"decode", "print the RoCEv2 packets of pcap/pcapng files and check their ICRC", runDecode},
	{"conformance", "run the verbs conformance suite against softhca or a libibverbs device and print a table", runConformance},
	{"pingpong", "rdma-core's ibv_{rc,uc,ud,srq}_pingpong, either side, on a softhca device", runPingpong},
	{"perf", "perftest's ib_{send,write,read,atomic}_{bw,lat}, either side, on a softhca device", runPerf},
	{"run", "run an unmodified libibverbs program on a softhca device (the drop-in libibverbs.so.1)", runRun},
	{"env", "print the environment that puts a program on a softhca device", runEnv},
	{"serve", "run a soft HCA until stopped: a device on UDP, its control socket, web page and metrics", runServe},
	{"status", "describe a running daemon", runStatus},
	{"res", "list a running daemon's verbs objects (rdma resource show)", runRes},
	{"stat", "print a running daemon's counters (rdma statistic)", runStat},
	{"trace", "follow a daemon's packets as a ladder; write pcap (-w) and an SVG sequence diagram (--svg)", runTrace},
	{"devinfo", "rdma-core's ibv_devinfo [-v]: the attributes of softhca's device", runDevinfo},
}

// Exit statuses shared by the commands.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args (the command line without the program name) to a
// subcommand and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		return runHelp(rest, stdout, stderr)
	}
	if c := lookup(name); c != nil {
		return c.run(rest, stdout, stderr)
	}
	fmt.Fprintf(stderr, "softhca: unknown command %q\n\n", name)
	usage(stderr)
	return exitUsage
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// runHelp prints the general usage, or a command's own usage for
// "help <command>".
func runHelp(args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		usage(stdout)
		return exitOK
	case 1:
		c := lookup(args[0])
		if c == nil {
			fmt.Fprintf(stderr, "softhca help: unknown command %q\n\n", args[0])
			usage(stderr)
			return exitUsage
		}
		// Every command prints its usage on -h and returns exitOK.
		return c.run([]string{"-h"}, stdout, stdout)
	}
	fmt.Fprintln(stderr, "usage: softhca help [command]")
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, "softhca is a user-space RDMA HCA speaking RoCEv2.\n\n")
	fmt.Fprint(w, "Usage:\n\n\tsofthca <command> [flags] [arguments]\n\nCommands:\n\n")
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-12s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun \"softhca help <command>\" for a command's flags.\n")
}
