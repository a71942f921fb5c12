package hca

import (
	"math"
	"net/netip"
	"reflect"
	"syscall"
	"time"

	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/transport"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Config describes a device to open. The zero value is a working device
// with rxe's attributes and no addresses; Open fills every unset field
// with its default.
type Config struct {
	// Name is the device name (ibv_get_device_name); default "softhca0".
	Name string
	// Addrs are the port's IP addresses. Each becomes a RoCEv2 GID after
	// the link-local GID at index 0, as with rxe (GID[1] is the first
	// address; IPv4 addresses appear IPv4-mapped).
	Addrs []netip.Addr
	// Attr overrides the device attributes; zero fields take rxe's values
	// (DefaultDeviceAttr).
	Attr verbs.DeviceAttr
	// PortAttr overrides the port attributes; zero fields take rxe's
	// values (DefaultPortAttr).
	PortAttr verbs.PortAttr
	// ClampQPCaps makes create_qp clamp caps above the device limits and
	// write them back, instead of failing with EINVAL (both behaviours
	// exist; ibv_create_qp(3)).
	ClampQPCaps bool
	// AllowPostRecvInReset accepts ibv_post_recv on a QP in RESET, as some
	// HCAs do. By default it fails, as IBTA C10-97.2.1 requires.
	AllowPostRecvInReset bool
	// DeferRecvSGEChecks checks receive scatter elements (key, PD,
	// bounds, LOCAL_WRITE) when data is placed, completing with
	// IBV_WC_LOC_PROT_ERR as rxe does, instead of failing the post.
	DeferRecvSGEChecks bool
	// InlineFromAnyAddress reads the data of an IBV_SEND_INLINE request
	// from any address of the process, as libibverbs does, instead of
	// only from the PD's registered regions. It is for the C ABI
	// (libibverbs/), whose programs send inline from their stack; the
	// library copies that data into memory it keeps for the post (so
	// that a wild address faults before the send queue is touched) and
	// hands that address here. An address that is not mapped faults in
	// PostSend: a Go program should leave it off.
	InlineFromAnyAddress bool

	// Link carries the device's packets (link/udp on a network). nil
	// opens a device without a transport: every verb works, and posted
	// work stays queued.
	//
	// The device owns the link once Open succeeds: its transport is the
	// link's only reader, so a link serves one device, and Device.Close
	// closes it. If Open fails, the link is still the caller's to close.
	// The link must be bound to one address, not a wildcard: the
	// device's GIDs name the address its packets carry. With Addrs empty,
	// that address is the port's only one (GID index 1).
	//
	// A link.Interface (link/tap) is a host of its own, as rxe's netdev
	// is: the device sends from any of its addresses, and takes from it
	// what Addrs, Attr.NodeGUID and PortAttr.ActiveMTU leave unset (the
	// interface's addresses, GID 0 its link-local one; the GUID of its
	// MAC; rxe's MTU for its MTU). Addrs may pick some of its addresses,
	// no others.
	Link link.Link
	// PeerPort is the UDP destination port of every packet: 4791 (the
	// default) on a network; tests with several devices on one IP address
	// give each its own port.
	PeerPort uint16
	// Clock drives the transport's timers; default the wall clock.
	Clock clock.Clock
	// Workers is the size of the transport's worker pool; default 2.
	Workers int
	// RxeRetryCompat makes retry_cnt 7 mean "retry forever", as rxe does
	// (the spec's 7 is seven retries).
	RxeRetryCompat bool
	// UDOversizeError completes a UD send longer than the port MTU with
	// IBV_WC_LOC_LEN_ERR. By default nothing is sent and the send
	// completes successfully, as IBTA C10-93.1.1 requires ("the CI shall
	// not emit any packets for this message. Further, the CI shall not
	// generate an error") and rxe does.
	UDOversizeError bool
	// BusyPoll lets an application that polls its CQs drive the
	// transport: a Poll that finds a CQ empty first reads and handles
	// what the link has queued, in the caller's goroutine, and looks
	// again (PollWait spins doing so); a PostSend to an idle send queue
	// sends the request before it returns. It trades CPU for
	// latency, as the kernel's busy polling does: a request and its
	// answer then cross no goroutine switch. Applications that wait on
	// completion channels gain nothing from it. Polling needs a link that
	// can be polled (link.Poller, as link/udp is). Without it, goroutines
	// that spin on Poll and keep every core busy leave the network to the
	// Go scheduler's periodic poll (about every 10 ms), which a short
	// QP Timeout may not survive.
	BusyPoll bool
	// Trace is called for every packet the transport sends and receives.
	Trace func(dir Direction, p *link.Packet)
	// Congestion configures congestion control; the zero value needs no
	// tuning on loopback, a bridge or a LAN.
	Congestion Congestion
}

// Congestion configures how a device's QPs share the network (see
// docs/congestion.md). Every QP sends under three bounds: an RC
// requester's congestion window (packets sent and not acknowledged:
// grows with ACKs, halves on a sequence NAK, duplicate ACKs or a
// timeout), a rate (DCQCN: cut by CNPs that answer ECN-marked packets,
// and for a READ responder by lost responses; recovers with time), and
// the device window (the RC packets in flight across the device). Zero
// fields take their defaults; a negative window turns that bound off.
type Congestion struct {
	// InitialWindow and MinWindow are the RC window's start and floor,
	// in packets: defaults 16 and 8 (at most 128, the PSN window).
	InitialWindow, MinWindow int
	// DeviceWindow bounds the RC packets in flight across the device:
	// default 256, a quarter of a default 1000-packet interface queue;
	// negative: no bound.
	DeviceWindow int
	// LineRate, in bits per second, is the rate pacing starts from and
	// recovers to after a congestion signal; 0 (the default): the rate
	// the QP was sending at, and pacing ends once it has recovered.
	LineRate float64
	// MinRate is the lowest rate, in bits per second: default 10 Mbit/s.
	MinRate float64
	// RateBurst is a paced QP's token bucket in bytes: default 65536.
	RateBurst int
	// RateIncreasePeriod, AdditiveIncrease and HyperIncrease (bits per
	// second) are DCQCN's rate increase timer and steps: defaults 300 us,
	// 5 Mbit/s, 50 Mbit/s (mlx5's).
	RateIncreasePeriod              time.Duration
	AdditiveIncrease, HyperIncrease float64
	// CNPInterval is the least time between two CNPs a QP sends:
	// default 50 us.
	CNPInterval time.Duration
	// RateCutInterval is the least time between two cuts of a QP's rate
	// for CNPs: default 300 us.
	RateCutInterval time.Duration
	// NoECT sends packets without ECT(0) in their IP header, so that
	// ECN-capable queues drop them instead of marking them. (A link/udp
	// link also needs udp.Config.ECN for its socket to set it.)
	NoECT bool
	// DeviceRate, in bits per second, paces everything the device's QPs
	// send (requests, READ responses, UC and UD messages), together, in
	// bursts of at most RateBurst bytes. It is for a path that gives no
	// congestion feedback and drains slower than this machine sends:
	// UC to a peer that sends no CNPs (rxe does not) behind a slow link
	// or virtual machine. 0 (the default): no device rate.
	DeviceRate float64
}

// validate checks the rates: each finite and not negative (0 takes the
// default), the device rate from 1 kbit/s to 10 Tbit/s when set.
func (c Congestion) validate() error {
	for _, r := range []struct {
		name string
		v    float64
	}{{"LineRate", c.LineRate}, {"MinRate", c.MinRate}, {"AdditiveIncrease", c.AdditiveIncrease},
		{"HyperIncrease", c.HyperIncrease}, {"DeviceRate", c.DeviceRate}} {
		if math.IsNaN(r.v) || math.IsInf(r.v, 0) || r.v < 0 {
			return verbs.Errorf("open_device", syscall.EINVAL, "Congestion.%s %v: want a rate in bits per second, not negative (0: the default, or no device rate)", r.name, r.v)
		}
	}
	if c.DeviceRate != 0 && (c.DeviceRate < 1e3 || c.DeviceRate > 1e13) {
		return verbs.Errorf("open_device", syscall.EINVAL, "Congestion.DeviceRate %v: from 1e3 to 1e13 bits per second, or 0 for none", c.DeviceRate)
	}
	if c.RateBurst < 0 || c.RateIncreasePeriod < 0 || c.CNPInterval < 0 || c.RateCutInterval < 0 {
		return verbs.Errorf("open_device", syscall.EINVAL, "Congestion: RateBurst and the intervals may not be negative")
	}
	return nil
}

// transport returns the transport's form of c.
func (c Congestion) transport() transport.CCConfig {
	return transport.CCConfig{
		InitialWindow: c.InitialWindow, MinWindow: c.MinWindow, DeviceWindow: c.DeviceWindow,
		LineRate: c.LineRate, MinRate: c.MinRate, RateBurst: c.RateBurst,
		RateIncreasePeriod: c.RateIncreasePeriod, AdditiveIncrease: c.AdditiveIncrease,
		HyperIncrease: c.HyperIncrease, CNPInterval: c.CNPInterval, RateCutInterval: c.RateCutInterval,
		DeviceRate: c.DeviceRate,
	}
}

// DefaultDeviceAttr returns the attributes of a Linux rxe device on a
// current kernel (ibv_devinfo -v of rxe0; rxe_param.h).
func DefaultDeviceAttr() verbs.DeviceAttr {
	return verbs.DeviceAttr{
		FWVer:       "0.0.0",
		MaxMRSize:   ^uint64(0),
		PageSizeCap: 0xfffff000,
		VendorID:    0xffffff,
		MaxQP:       1048560,
		MaxQPWR:     1 << 20,
		DeviceCapFlags: verbs.DeviceBadPKeyCntr | verbs.DeviceBadQKeyCntr | verbs.DeviceAutoPathMig |
			verbs.DeviceChangePhyPort | verbs.DeviceUDAVPortEnforce | verbs.DevicePortActiveEvent |
			verbs.DeviceSysImageGUID | verbs.DeviceRCRNRNAKGen | verbs.DeviceSRQResize,
		MaxSGE:                32,
		MaxSGERd:              32,
		MaxCQ:                 1 << 20,
		MaxCQE:                32767,
		MaxMR:                 524287,
		MaxPD:                 1 << 20,
		MaxQPRdAtom:           128,
		MaxResRdAtom:          258048,
		MaxQPInitRdAtom:       128,
		AtomicCap:             verbs.AtomicHCA,
		MaxMcastGrp:           8192,
		MaxMcastQPAttach:      56,
		MaxTotalMcastQPAttach: 458752,
		MaxAH:                 32767,
		MaxSRQ:                917503,
		MaxSRQWR:              1 << 20,
		MaxSRQSGE:             27,
		MaxPKeys:              64,
		LocalCAAckDelay:       15,
		PhysPortCnt:           1,
		MaxInlineData:         512,
		// Tag matching in software (docs/tag-matching.md); rxe has none.
		TM: verbs.TMCaps{
			MaxRndvHdrSize: 64,
			MaxNumTags:     1024,
			Flags:          verbs.TMCapRC,
			MaxOps:         1024,
			MaxSGE:         4,
		},
	}
}

// DefaultPortAttr returns the attributes of rxe's port 1 on a 1500-byte
// Ethernet link, except max_msg_sz, which current kernels raise to 2^31.
func DefaultPortAttr() verbs.PortAttr {
	return verbs.PortAttr{
		State:        verbs.PortActive,
		MaxMTU:       verbs.MTU4096,
		ActiveMTU:    verbs.MTU1024,
		GIDTblLen:    1024,
		PortCapFlags: 0x00010000,
		MaxMsgSz:     1 << 31,
		PKeyTblLen:   1,
		MaxVLNum:     1,
		ActiveWidth:  1,
		ActiveSpeed:  1,
		PhysState:    5,
		LinkLayer:    verbs.LinkLayerEthernet,
	}
}

// fill returns c with every unset field given its default.
func (c Config) fill() Config {
	if c.Name == "" {
		c.Name = "softhca0"
	}
	c.Attr = mergeNonZero(c.Attr, DefaultDeviceAttr())
	c.PortAttr = mergeNonZero(c.PortAttr, DefaultPortAttr())
	if c.Attr.NodeGUID == 0 {
		c.Attr.NodeGUID = guidFor(c.Addrs)
	}
	if c.Attr.SysImageGUID == 0 {
		c.Attr.SysImageGUID = c.Attr.NodeGUID
	}
	return c
}

// NodeGUIDFor returns the node GUID a device whose first address is addr
// gets by default (DeviceAttr.NodeGUID): what a device list shows before
// the device is opened.
func NodeGUIDFor(addr netip.Addr) uint64 { return guidFor([]netip.Addr{addr}) }

// guidFor derives a node GUID as rxe does from its netdev's MAC (the
// modified EUI-64, universal/local bit flipped), here from the MAC
// wire.MACFromAddr makes of the first address (02:00 and its last four
// bytes; 02:00:00:00:00:00 without one).
func guidFor(addrs []netip.Addr) uint64 {
	var mac [6]byte
	mac[0] = 0x02
	if len(addrs) > 0 {
		mac = wire.MACFromAddr(addrs[0])
	}
	return wire.GUIDFromMAC(mac)
}

// mergeNonZero returns v with each zero field replaced by def's.
func mergeNonZero[T any](v, def T) T {
	rv, rd := reflect.ValueOf(&v).Elem(), reflect.ValueOf(def)
	for i := 0; i < rv.NumField(); i++ {
		if rv.Field(i).IsZero() {
			rv.Field(i).Set(rd.Field(i))
		}
	}
	return v
}
