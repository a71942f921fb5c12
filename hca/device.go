package hca

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"syscall"

	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/mr"
	"github.com/softhca/softhca/transport"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// firstQPN is the first QP number handed out: rxe numbers QPs from 0x11,
// after the special QPs 0 and 1.
const firstQPN = 0x11

// Device is an open softhca device (ibv_context).
type Device struct {
	cfg  Config
	gids []verbs.GID // index 0: link-local; then one per address
	mrs  *mr.Table
	ev   asyncQueue
	eng  *transport.Engine // nil without a link
	// local is the link's address and port. srcs are the source
	// addresses its packets can carry: local.Src, or every address of a
	// link.Interface.
	local wire.Net
	srcs  []netip.Addr

	mu      sync.Mutex
	closed  bool
	nextPD  uint32
	nextQPN uint32
	qps     map[uint32]*QP // by QP number; protected by mu
	ahs     int            // address handles alive; protected by mu
	// The live PDs, CQs and SRQs by number (their counts against the
	// device limits, and Resources); protected by mu. CQs and SRQs are
	// numbered from 1 in creation order, as the kernel numbers cqn and
	// srqn.
	pds             map[uint32]*PD
	cqs             map[uint32]*CQ
	srqs            map[uint32]*SRQ
	nextCQ, nextSRQ uint32
}

// Open opens a device with the given configuration (ibv_open_device).
func Open(cfg Config) (*Device, error) {
	var local wire.Net
	ifc, isIfc := cfg.Link.(link.Interface)
	if cfg.Link != nil {
		var err error
		if local, err = cfg.Link.LocalAddr(); err != nil {
			return nil, verbs.Errorf("open_device", syscall.EINVAL, "link address: %v", err)
		}
		if !local.Src.IsValid() || local.Src.IsUnspecified() {
			// The ICRC covers the source address, and a GID names it:
			// the link must be bound to one address.
			return nil, verbs.Errorf("open_device", syscall.EINVAL, "the link is bound to no specific address (%v); bind the address the device's GID should carry", local.Src)
		}
	}
	var srcs []netip.Addr
	switch {
	case isIfc:
		var err error
		if cfg, err = interfaceConfig(cfg, ifc); err != nil {
			return nil, err
		}
		srcs = ifc.Addrs()
	case cfg.Link != nil:
		if len(cfg.Addrs) == 0 {
			cfg.Addrs = []netip.Addr{local.Src}
		}
		srcs = []netip.Addr{local.Src}
	}
	if cfg.BusyPoll && cfg.Link != nil {
		if _, ok := cfg.Link.(link.Poller); !ok {
			// Polls could not read the link: an application spinning on
			// Poll would only starve the goroutines that do.
			return nil, verbs.Errorf("open_device", syscall.EINVAL, "BusyPoll needs a link that can be polled (link.Poller, as link/udp is); %T is not", cfg.Link)
		}
	}
	if err := cfg.Congestion.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.fill()
	for _, a := range cfg.Addrs {
		if !a.IsValid() {
			return nil, verbs.Errorf("open_device", syscall.EINVAL, "invalid address in Config.Addrs")
		}
	}
	d := &Device{
		cfg:     cfg,
		mrs:     mr.NewTable(int(cfg.Attr.MaxMR), cfg.Attr.MaxMRSize),
		nextPD:  1,
		nextQPN: firstQPN,
		qps:     map[uint32]*QP{},
		pds:     map[uint32]*PD{},
		cqs:     map[uint32]*CQ{},
		srqs:    map[uint32]*SRQ{},
		nextCQ:  1,
		nextSRQ: 1,
	}
	d.ev.init()
	d.local = local
	d.srcs = srcs
	d.gids = append(d.gids, linkLocalGID(cfg.Attr.NodeGUID))
	for _, a := range cfg.Addrs {
		d.gids = append(d.gids, verbs.GIDFromAddr(a))
	}
	if len(d.gids) > int(cfg.PortAttr.GIDTblLen) {
		return nil, verbs.Errorf("open_device", syscall.EINVAL, "%d addresses do not fit a GID table of %d", len(cfg.Addrs), cfg.PortAttr.GIDTblLen)
	}
	if cfg.Link != nil {
		d.eng = transport.NewEngine(transport.Config{
			Link:     cfg.Link,
			Clock:    cfg.Clock,
			Mem:      memory{d.mrs},
			Workers:  cfg.Workers,
			BusyPoll: cfg.BusyPoll,
			Trace:    cfg.Trace,
			CC:       cfg.Congestion.transport(),
		})
	}
	return d, nil
}

// memory is the device's memory regions as the transport reaches them.
type memory struct{ t *mr.Table }

func (m memory) Lookup(key, pd uint32, va uint64, n uint32, need verbs.AccessFlags) ([]byte, bool) {
	b, st := m.t.Lookup(key, pd, va, n, need)
	return b, st == mr.OK
}

// resolve turns an address vector into the IP and UDP fields of the
// packets sent with it: the source address is the GID sgid_index names,
// the destination the dgid's. It fails when the index holds no GID, when
// the two addresses are of different families (no route joins them), or
// when the device's link cannot send from the source address (a UDP
// socket sends from the address it is bound to).
func (d *Device) resolve(av *verbs.AHAttr) (wire.Net, error) {
	i := int(av.GRH.SGIDIndex)
	if i >= len(d.gids) {
		return wire.Net{}, fmt.Errorf("sgid_index %d holds no GID (the table holds %d)", i, len(d.gids))
	}
	src, dst := d.gids[i].Addr(), av.GRH.DGID.Addr()
	if src.Is4() != dst.Is4() {
		return wire.Net{}, fmt.Errorf("sgid_index %d (%s) and dgid %s are of different address families", i, src, dst)
	}
	if d.eng != nil && !slices.Contains(d.srcs, src) {
		return wire.Net{}, fmt.Errorf("sgid_index %d names %s, but the device's link sends only from %v", i, src, d.srcs)
	}
	port := d.cfg.PeerPort
	if port == 0 {
		port = wire.RoCEv2Port
	}
	n := wire.Net{Src: src, Dst: dst, SrcPort: d.local.SrcPort, DstPort: port, DontFragment: true, HopLimit: 64}
	if !d.cfg.Congestion.NoECT {
		n.TrafficClass = ecnECT0 // RoCEv2 senders are ECN-capable (a link/udp socket sets it itself)
	}
	return n, nil
}

// ecnECT0 is the ECN field's ECN-Capable Transport (0) codepoint (RFC
// 3168).
const ecnECT0 = 0b10

// TransportStats returns the transport's counters (zero without a link).
func (d *Device) TransportStats() Stats {
	if d.eng == nil {
		return Stats{}
	}
	return d.eng.Stats()
}

// linkLocalGID is fe80::/64 with the node GUID as interface identifier,
// the GID rxe puts at index 0 (wire.LinkLocalFromGUID).
func linkLocalGID(guid uint64) verbs.GID {
	return verbs.GIDFromAddr(wire.LinkLocalFromGUID(guid))
}

// Name returns the device name.
func (d *Device) Name() string { return d.cfg.Name }

// Config returns the configuration the device was opened with, defaults
// filled in.
func (d *Device) Config() Config { return d.cfg }

// Close closes the device (ibv_close_device); EINVAL if it is already
// closed. The transport first sends what it owes (the acknowledgements of
// requests it executed, so that a peer whose message was delivered does
// not retry it), then every QP moves to the error state, which completes
// each of its outstanding work requests with IBV_WC_WR_FLUSH_ERR, and the
// device closes its link (Config.Link; the error of closing it is
// Close's). Objects still open stay valid: CQs can be polled and objects
// queried and destroyed, but no new object can be created and no packet
// moves. ibv_close_device(3) asks a program to release its objects
// first; softhca's Close does not require it, though a long-running
// program should (QPs first, then SRQs and CQs, MRs and AHs, PDs last),
// as destroying is what releases their memory and counts.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return verbs.Errorf("close_device", syscall.EINVAL, "device is already closed")
	}
	d.closed = true
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.mu.Unlock()
	// Outside d.mu: QP state changes take the QPs' locks.
	if d.eng != nil {
		d.eng.Sync()
	}
	for _, q := range qps {
		_ = q.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState) // fails only if destroyed meanwhile
	}
	d.ev.closeFD()
	if d.eng != nil {
		return d.eng.Close()
	}
	return nil
}

// QueryDevice returns the device attributes (ibv_query_device).
func (d *Device) QueryDevice() verbs.DeviceAttr { return d.cfg.Attr }

// QueryPort returns a port's attributes (ibv_query_port); the device has
// one port, number 1.
func (d *Device) QueryPort(port uint8) (verbs.PortAttr, error) {
	if err := d.checkPort("query_port", port); err != nil {
		return verbs.PortAttr{}, err
	}
	return d.cfg.PortAttr, nil
}

func (d *Device) checkPort(op string, port uint8) error {
	if port < 1 || port > d.cfg.Attr.PhysPortCnt {
		return verbs.Errorf(op, syscall.EINVAL, "port %d does not exist (the device has %d)", port, d.cfg.Attr.PhysPortCnt)
	}
	return nil
}

// QueryGID returns the GID at index of a port's GID table (ibv_query_gid).
// Indexes inside the table that hold no address return the zero GID.
func (d *Device) QueryGID(port uint8, index int) (verbs.GID, error) {
	if err := d.checkPort("query_gid", port); err != nil {
		return verbs.GID{}, err
	}
	if index < 0 || index >= int(d.cfg.PortAttr.GIDTblLen) {
		return verbs.GID{}, verbs.Errorf("query_gid", syscall.EINVAL, "index %d outside the GID table (length %d)", index, d.cfg.PortAttr.GIDTblLen)
	}
	if index < len(d.gids) {
		return d.gids[index], nil
	}
	return verbs.GID{}, nil
}

// GIDIndex returns the index of the GID that holds addr, or -1.
func (d *Device) GIDIndex(addr netip.Addr) int {
	g := verbs.GIDFromAddr(addr)
	for i, x := range d.gids {
		if x == g {
			return i
		}
	}
	return -1
}

// QueryPKey returns the P_Key at index (ibv_query_pkey): the default
// partition 0xFFFF at index 0, as rxe has.
func (d *Device) QueryPKey(port uint8, index int) (uint16, error) {
	if err := d.checkPort("query_pkey", port); err != nil {
		return 0, err
	}
	if index < 0 || index >= int(d.cfg.PortAttr.PKeyTblLen) {
		return 0, verbs.Errorf("query_pkey", syscall.EINVAL, "index %d outside the P_Key table (length %d)", index, d.cfg.PortAttr.PKeyTblLen)
	}
	if index == 0 {
		return 0xffff, nil
	}
	return 0, nil
}

// roomLocked checks that the device is open and that, holding have
// objects of a kind, it may make one more under the kind's limit.
//
// Preconditions: d.mu is held.
func (d *Device) roomLocked(op string, have int, limit uint32, what string) error {
	if d.closed {
		return verbs.Errorf(op, syscall.EINVAL, "device is closed")
	}
	if have >= int(limit) {
		return verbs.Errorf(op, syscall.ENOMEM, "device holds its maximum of %d %s", limit, what)
	}
	return nil
}

// AH is an address handle (ibv_ah).
type AH struct {
	attr verbs.AHAttr
	pd   *PD
	dead bool
}

// Attr returns the address vector.
func (a *AH) Attr() verbs.AHAttr { return a.attr }

// Destroy destroys the address handle (ibv_destroy_ah).
func (a *AH) Destroy() error {
	d := a.pd.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if a.dead {
		return verbs.Errorf("destroy_ah", syscall.EINVAL, "address handle is already destroyed")
	}
	a.dead = true
	d.ahs--
	a.pd.refs--
	return nil
}

// String describes the device for logs.
func (d *Device) String() string {
	return fmt.Sprintf("%s (%d GIDs)", d.cfg.Name, len(d.gids))
}
