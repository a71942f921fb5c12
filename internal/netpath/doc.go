// Package netpath builds a real network bottleneck between two network
// namespaces, for tests that need one: congestion control between two
// softhca devices over real UDP sockets (paced sending, ECN and CNPs).
// It is for tests only, and needs root.
//
// # What New builds
//
//	namespace softhca-netpath-<pid>-<n>-0          namespace softhca-netpath-<pid>-<n>-1
//	  lo, np0 10.77.N.1/24 [fd77:0:0:N::1/64] ===veth=== np1 10.77.N.2/24 [fd77:0:0:N::2/64], lo
//	  np0 egress: tbf rate R burst B -> pfifo limit Q      np1 egress: the same (Options.Directions)
//
// Each Path has two fresh namespaces, named after the process and a
// counter, so parallel tests and test processes never share one, and
// addresses need only be unique within a path (N differs between the
// paths of a process anyway, to keep captures readable). The veth pair
// has the MTU of Options.MTU, static neighbour entries (no ARP or
// neighbour discovery: no first packet waits or is dropped for them) and,
// unless Options.IPv6, IPv6 disabled, so that nothing but the test's
// packets crosses it.
//
// The bottleneck is on the egress of each shaped side: a tbf qdisc (the
// shaper: Options.Rate, Options.Burst) whose child is a pfifo of
// Options.QueuePackets packets (the queue: 1000, a default txqueuelen).
// A packet that finds the queue full is dropped silently (a UDP sender
// without IP_RECVERR is not told) and counted: QdiscStats reads the
// counters with tc -s -j qdisc show. A sender faster than Rate fills the
// queue, then loses packets; a sender paced below Rate loses none.
//
// # Sockets in a namespace
//
// Do runs a function on an OS thread moved into one side's namespace
// (runtime.LockOSThread, setns, and back). A socket takes the namespace
// of the thread that creates it and keeps it, so a link/udp.Link opened
// inside Do sends and receives across the path for its whole life, from
// any goroutine. This package cannot open one itself: the depguard layer
// map in .golangci.yml makes internal/* a leaf that imports no softhca
// package, link/udp included; Do's doc comment shows the three lines that
// open one, to be written in the test that needs them (test files may
// import link/udp).
//
// # The CE marker
//
// MarkCE puts an eBPF program on the egress of one side's veth, ahead of
// the qdiscs (tcx egress runs where clsact's egress does, before the root
// qdisc: it sees packets as they arrive at the bottleneck). It marks
// IPv4 and IPv6 UDP datagrams to port 4791 (RoCEv2) whose ECN field is
// ECT(0) or ECT(1): it sets CE and, over IPv4, fixes the header checksum
// (bpf_l3_csum_replace; a wrong one would make the receiving kernel drop
// the packet). When it marks is MarkOptions': with a probability, or
// when a phantom queue (HULL) fed by every packet leaving the side and
// drained at a rate a little below the bottleneck's exceeds a threshold,
// so that senders see marks before the real queue builds. Its counters
// (ECT packets seen, packets marked) are read back with Marked.
//
// The program is some 120 eBPF instructions written with a small assembler
// in this package, loaded with bpf(BPF_PROG_LOAD) and attached with
// bpf(BPF_LINK_CREATE, BPF_TCX_EGRESS) (Linux 6.6 and later): no clang,
// no library, no bpffs pin and no tc filter command; closing the link's
// file descriptor detaches it. Its state is one element of an array map.
//
// # Who owns what
//
// The Path owns the two namespaces, with the veth pair and the qdiscs in
// them, and the file descriptors it opened: the namespaces' (for setns)
// and each CE marker's map and tcx link. Close detaches the markers,
// deletes the namespaces (ip netns del), which removes the veth pair and
// its qdiscs, and closes the descriptors; it may be called more than
// once, and ForTest calls it when the test ends. The caller owns the
// sockets it makes in Do. A namespace lives on, unnamed, while a socket
// made in it is open, so close them before the Path (with ForTest,
// register their cleanups after it: cleanups run last-in first-out).
// Leftovers lists the namespaces of this process that were not deleted.
//
// # Requirements
//
// Root (CAP_SYS_ADMIN for the namespaces, CAP_NET_ADMIN for the rest),
// iproute2's ip and tc, and a kernel with network namespaces, veth and
// sch_tbf; MarkCE also needs the bpf syscall and tcx. New's error wraps
// errors.ErrUnsupported when the machine lacks what New needs; ForTest
// then skips the test, unless CI=true, where it fails it. MarkCE's
// errors are plain errors: a test that asks for a marker fails without
// one.
package netpath
