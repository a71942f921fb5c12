package pingpong

import (
	"net"
	"net/netip"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Mode is the transport and queue layout: one of rdma-core's four
// pingpong examples.
type Mode uint8

// The modes, named after the examples.
const (
	RC  Mode = iota + 1 // ibv_rc_pingpong: one RC QP
	UC                  // ibv_uc_pingpong: one UC QP
	UD                  // ibv_ud_pingpong: one UD QP and an address handle
	SRQ                 // ibv_srq_pingpong: NumQP RC QPs sharing one SRQ
)

// String returns the mode's name on the command line: "rc", "uc", "ud"
// or "srq".
func (m Mode) String() string {
	switch m {
	case RC:
		return "rc"
	case UC:
		return "uc"
	case UD:
		return "ud"
	case SRQ:
		return "srq"
	}
	return "Mode(?)"
}

// ParseMode returns the mode named s, or false.
func ParseMode(s string) (Mode, bool) {
	for _, m := range []Mode{RC, UC, UD, SRQ} {
		if m.String() == s {
			return m, true
		}
	}
	return 0, false
}

// Tool returns the name of the rdma-core example the mode stands in for.
func (m Mode) Tool() string { return "ibv_" + m.String() + "_pingpong" }

// Defaults are rdma-core 44's (Debian 12). ud_pingpong's usage text says
// 2048 for -s, but its code uses 1024; the code is what counts.
const (
	DefaultTCPPort = 18515
	DefaultIBPort  = 1
	DefaultSize    = 4096
	DefaultUDSize  = 1024
	DefaultMTU     = verbs.MTU1024
	DefaultRxDepth = 500
	DefaultIters   = 1000
	DefaultNumQP   = 16
	// MaxQP is srq_pingpong's MAX_QP: the number of address messages
	// it exchanges, and one more than the QPs it allows.
	MaxQP = SRQMessages
)

// DeviceName is the name of the one device softhca offers to the
// pingpong commands (what -d must say, if given).
const DeviceName = "softhca0"

// Features are the rdma-core options for device features softhca does not
// have. Asking for one fails with rdma-core's message for a device that
// lacks it (as on rxe), except NewSend, which only changes the API the
// example posts with: softhca posts the same SEND with post_send.
type Features struct {
	ODP         bool // -o: on-demand paging
	ImplicitODP bool // -O: implicit on-demand paging (rc)
	Prefetch    bool // -P: prefetch an ODP MR (rc)
	Timestamps  bool // -t: completion timestamps (rc)
	DM          bool // -j: device memory (rc)
	NewSend     bool // -N: the ibv_wr_* send API (rc)
}

// Config is one run of a pingpong, server or client. The zero values of
// the rdma-core options are not their defaults: NewConfig fills them in.
type Config struct {
	Mode Mode
	// ServerName is the host to connect to; empty makes this side the
	// server.
	ServerName string

	// rdma-core's options.
	Port     int       // -p: TCP port of the exchange
	IBDev    string    // -d: device name; empty takes the first (the only one)
	IBPort   int       // -i: port of the device
	Size     uint32    // -s: message size
	MTU      verbs.MTU // -m: path MTU (rc, uc, srq)
	RxDepth  uint32    // -r: receives posted at a time
	Iters    uint32    // -n: exchanges
	SL       uint8     // -l: service level
	Events   bool      // -e: sleep on CQ events instead of polling
	GIDIndex int       // -g: local GID index; negative for none
	Validate bool      // -c: check the received data
	NumQP    uint32    // -q: QPs sharing the SRQ (srq)
	Features Features

	// softhca's choices, which rdma-core gets from the kernel.

	// Addr is the local IP address and UDP port of the device. The zero
	// value takes the local address of the TCP connection of the
	// exchange, port 4791 (wire.RoCEv2Port); the device is then opened
	// after the TCP connection instead of before it.
	Addr netip.AddrPort
	// PeerPort is the UDP port the peer's device listens on; 0 means
	// 4791.
	PeerPort uint16
	// PortMTU is the port's active MTU (the limit of a UD message). 0
	// derives it from the MTU of the network interface that holds the
	// device's address, as rxe derives it from its netdev's: interface
	// MTU minus 80 bytes of headers, rounded down to an InfiniBand MTU
	// (1500 gives 1024; loopback's 65536 gives 4096); on a link that is
	// an interface of its own (a link.Interface: link/tap), from that
	// link's MTU.
	PortMTU verbs.MTU
	// NoGSO opens the UDP link without the segmentation offloads (UDP GSO
	// and GRO): one datagram per packet each way, so that a capture on
	// loopback (tcpdump -i lo) shows each packet as a frame of its own.
	// (A capture sees a GSO send before the kernel splits it, several
	// packets in one datagram.)
	NoGSO bool

	// StatsFile, if set, receives the device's transport counters as
	// JSON (StatsJSON) when the run ends, successful or not.
	StatsFile string
	// DeviceRate is the device's pacing rate in bits per second
	// (hca.Congestion.DeviceRate); 0: none.
	DeviceRate float64
	// Trace, if set, is the device's trace hook (hca.Config.Trace): it is
	// called with every packet the device sends and receives, on the
	// device's goroutines, until Run returns ("softhca pingpong -w"
	// writes them to a pcap file).
	Trace func(dir hca.Direction, p *link.Packet)

	// Device, if set, is the device to run on, already open (the
	// daemon's, whose services run pingpong servers again and again):
	// the run opens no device, uses this one's first address and name,
	// and leaves it open. Addr, PeerPort, PortMTU, DeviceRate, NoGSO,
	// Trace and OpenLink, which describe the device to open, are then
	// unused. srq mode shares one buffer among its QPs, which is safe
	// only on a device with one worker (hca.Config.Workers).
	Device *hca.Device

	// OpenLink, if set, opens the device's link on the address instead
	// of a UDP socket (link/udp) bound to it: "softhca pingpong --tap"
	// opens a TAP link (link/tap) with it, tests an in-memory one.
	OpenLink func(addr netip.AddrPort) (link.Link, error)

	// Test hooks.

	// Listener, if set, is where the server accepts the connection,
	// instead of listening on Port.
	Listener net.Listener
}

// NewConfig returns a configuration for mode with rdma-core's defaults.
func NewConfig(mode Mode) Config {
	c := Config{
		Mode:     mode,
		Port:     DefaultTCPPort,
		IBPort:   DefaultIBPort,
		Size:     DefaultSize,
		MTU:      DefaultMTU,
		RxDepth:  DefaultRxDepth,
		Iters:    DefaultIters,
		GIDIndex: -1,
	}
	if mode == UD {
		c.Size = DefaultUDSize
	}
	if mode == SRQ {
		c.NumQP = DefaultNumQP
	}
	return c
}

// peerPort is the UDP port the peer's packets go to.
func (c *Config) peerPort() uint16 {
	if c.PeerPort == 0 {
		return wire.RoCEv2Port
	}
	return c.PeerPort
}
