package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Config is one run of a test, as server or client.
type Config struct {
	Options *Options
	// DeviceRate is the device's pacing rate in bits per second
	// (hca.Congestion.DeviceRate); 0: none.
	DeviceRate float64
	// BusyPoll opens the device with hca.Config.BusyPoll and polls
	// completions in a loop, as perftest does, instead of sleeping on the
	// completion channel: an empty poll then runs the transport itself.
	BusyPoll bool
	// Stdout receives the banner and the result tables, Stderr notes.
	Stdout, Stderr io.Writer
	// Trace, if set, is the device's trace hook (hca.Config.Trace): it is
	// called with every packet the device sends and receives, on the
	// device's goroutines, until Run returns ("softhca perf -w" writes
	// them to a pcap file).
	Trace func(dir hca.Direction, p *link.Packet)

	// Listener, if set, is where the server accepts its client instead
	// of listening on Options.Port.
	Listener net.Listener
	// Listening, if set, is called with the server's address once it
	// accepts connections.
	Listening func(net.Addr)
	// OpenLink, if set, opens the device's link instead of a UDP socket
	// bound to local; it returns the link and the UDP port of the peer's
	// device. "softhca perf --tap" opens a TAP link (link/tap) with it,
	// tests an in-memory one.
	OpenLink func(local netip.Addr) (link.Link, uint16, error)

	// Progress, if set, is called by the loops that measure with where
	// they stand (see Progress) and the time they read from their clock;
	// ProgressReporter shows it. It runs on the measuring goroutine, so
	// it must be quick.
	Progress func(now time.Time, p Progress)

	// Device, if set, is the device to run on, already open (the
	// daemon's, whose services run perftest servers again and again):
	// the run opens none and leaves it open; Options.Addr, PeerPort,
	// Device, NoGSO, DeviceRate, BusyPoll, Trace and OpenLink, which
	// describe the device to open, are then unused.
	Device *hca.Device
}

// Result is what a run leaves behind for its caller.
type Result struct {
	// Buf is the registered memory, 2*Region bytes: [0, Region) is the
	// local area the QP sends from or fetches into, [Region, 2*Region)
	// the area advertised to the peer (Local.VAddr) and receive buffers.
	Buf    []byte
	Region int

	Local, Remote Dest
	PeerVersion   string
	MTU           verbs.MTU
	CycleBuffer   int
	CacheLine     int
	// Reports are the measured results, one per message size (the
	// client's, or both sides' for send and write latency tests);
	// PeerReport is the client's report as the server of a write, read
	// or atomic bandwidth test received it.
	Reports    []Report
	LatReports []LatReport
	PeerReport *Report
	// Transcript is the size of every message exchanged over TCP, in
	// order.
	Transcript []int
	// Stats are the device's transport counters once it is closed.
	Stats hca.Stats
}

// cacheLineSize is softhca's cache line size for check_sys_data (what
// perftest reads from sysfs; 64 on the machines softhca runs on).
const cacheLineSize = 64

// session is the state of one run.
type session struct {
	o      *Options
	cfg    Config
	out    io.Writer
	c      *conn
	server bool
	res    *Result

	local    netip.AddrPort // the device's UDP address
	peerPort uint16
	dev      *hca.Device
	pd       *hca.PD
	mr       *hca.MR
	sendCQ   *hca.CQ
	recvCQ   *hca.CQ
	sendCh   *hca.CompChannel
	recvCh   *hca.CompChannel
	qp       *hca.QP
	gidIndex int
	buf      []byte
	region   int
	outReads int
}

// Run runs the test cfg.Options names, as the client if Options.Server
// is set and as the server otherwise, against perftest or softhca on the
// other side.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	o := cfg.Options
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	s := &session{o: o, cfg: cfg, out: cfg.Stdout, server: o.Server == "", res: &Result{}}
	defer s.close()
	if err := s.run(ctx); err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return s.res, err
	}
	return s.res, nil
}

func (s *session) printf(format string, args ...any) { fmt.Fprintf(s.out, format, args...) }

func (s *session) run(ctx context.Context) error {
	if err := s.o.checkGIDIndex(); err != nil {
		return err
	}
	if err := s.connect(ctx); err != nil {
		return err
	}
	if err := s.exchangeSystem(); err != nil {
		return err
	}
	if err := s.openDevice(); err != nil {
		return err
	}
	if err := s.exchangeMTU(); err != nil {
		return err
	}
	s.printTestInfo()
	if err := s.createResources(); err != nil {
		return err
	}
	if err := s.handshake(); err != nil {
		return err
	}
	return s.runTest(ctx)
}

// connect establishes the exchange connection (establish_connection).
func (s *session) connect(ctx context.Context) error {
	var err error
	if !s.server {
		s.c, err = dial(ctx, s.o.Server, s.o.Port)
		return err
	}
	l := s.cfg.Listener
	if l == nil {
		if l, err = net.Listen("tcp", fmt.Sprintf(":%d", s.o.Port)); err != nil {
			return fmt.Errorf("cannot listen on TCP port %d: %w", s.o.Port, err)
		}
	}
	s.printf("\n************************************\n")
	s.printf("* Waiting for client to connect... *\n")
	s.printf("************************************\n")
	if s.o.Port == 0 && s.cfg.Listener == nil {
		fmt.Fprintf(s.cfg.Stderr, "note: listening on TCP port %d\n", l.Addr().(*net.TCPAddr).Port)
	}
	if s.cfg.Listening != nil {
		s.cfg.Listening(l.Addr())
	}
	s.c, err = accept(ctx, l)
	return err
}

// checkGIDIndex fails, before the exchange connection is made, for a -x
// that cannot work. The device's port has two GIDs, as rxe's has for one
// IPv4 address: index 0, the link-local fe80:: GID made from the node
// GUID, and index 1, the device's IP address, the only one its UDP socket
// is bound to. (perftest would read an empty entry as an all-zero GID
// and send it to its peer, which could not reach it.)
func (o *Options) checkGIDIndex() error {
	switch {
	case o.GIDIndex < 0 || o.GIDIndex == 1:
		return nil
	case o.GIDIndex == 0:
		return errors.New("-x 0: GID index 0 is the link-local GID (fe80::/64 with the interface identifier made from the node GUID, as rxe puts it there); " +
			"the device's UDP socket is bound to its IP address, not to it, so it cannot carry RoCEv2 traffic here: use -x 1 (or no -x), the device's IP address")
	}
	return fmt.Errorf("-x %d: the device has no GID at index %d: its port has index 0, the link-local fe80:: GID, and index 1, the device's IP address; use -x 1 (or no -x)",
		o.GIDIndex, o.GIDIndex)
}

// checkPeerGID fails for a peer's GID that the device on local cannot
// send to: a link-local fe80:: GID (index 0 on rxe and softhca), which
// names no interface, or one that is not a unicast address.
func checkPeerGID(g verbs.GID, local netip.Addr) error {
	a := g.Addr()
	switch {
	case a.Is6() && a.IsLinkLocalUnicast():
		return fmt.Errorf("the peer's GID %s is a link-local fe80:: GID (index 0 on rxe and softhca, made from the node GUID): "+
			"the device's UDP socket on %s cannot send to it (a GID names no interface); the peer needs -x with its IP address's GID index (1 on softhca, and on rxe with one IPv4 address)",
			a, local)
	case a.IsUnspecified() || a.IsMulticast():
		return fmt.Errorf("the peer's GID %s is not a unicast address: the peer needs -x with its IP address's GID index", a)
	}
	return nil
}

// exchangeSystem exchanges the versions and the system data
// (exchange_versions, check_version_compatibility, check_sys_data).
func (s *session) exchangeSystem() error {
	b, err := s.c.exchange("exchanging versions", EncodeVersion(Version), VersionSize)
	if err != nil {
		return err
	}
	v, f, err := ParseVersion(b)
	if err != nil {
		return fmt.Errorf("the peer's version: %w", err)
	}
	s.res.PeerVersion = v
	if f < MinPeerVersion {
		return fmt.Errorf("the peer is perftest version %s; perftest %s needs %.2f or later", v, Version, MinPeerVersion)
	}
	if v != Version {
		fmt.Fprintf(s.cfg.Stderr, "note: the peer is perftest version %s; softhca perf speaks the exchange of version %s (perftest 4.5-0.17)\n", v, Version)
	}
	cycle := os.Getpagesize()
	b, err = s.c.exchange("exchanging the page size", EncodeInt32(cycle), SysDataSize)
	if err != nil {
		return err
	}
	rc, err := ParseCycleBuffer(b)
	if err != nil {
		return err
	}
	b, err = s.c.exchange("exchanging the cache line size", EncodeInt32(cacheLineSize), SysDataSize)
	if err != nil {
		return err
	}
	rl, err := ParseCacheLine(b)
	if err != nil {
		return err
	}
	s.res.CycleBuffer, s.res.CacheLine = max(cycle, rc), max(cacheLineSize, rl)
	return nil
}

// openDevice opens the softhca device on a UDP socket at the local
// address of the exchange connection (or --addr), port 4791.
func (s *session) openDevice() error {
	if d := s.cfg.Device; d != nil {
		dc := d.Config()
		local, err := dc.Link.LocalAddr()
		if err != nil {
			return fmt.Errorf("the device's link: %w", err)
		}
		s.dev = d
		s.local = netip.AddrPortFrom(local.Src, local.SrcPort)
		s.peerPort = dc.PeerPort
		if s.peerPort == 0 {
			s.peerPort = wire.RoCEv2Port
		}
		return s.deviceReady()
	}
	addr := s.o.Addr.Addr()
	port := s.o.Addr.Port()
	if !addr.IsValid() {
		addr = s.c.local()
	}
	if port == 0 {
		port = wire.RoCEv2Port
	}
	s.peerPort = s.o.PeerPort
	if s.peerPort == 0 {
		s.peerPort = wire.RoCEv2Port
	}
	var lk link.Link
	if s.cfg.OpenLink != nil {
		l, pp, err := s.cfg.OpenLink(addr)
		if err != nil {
			return fmt.Errorf("cannot open the device's link on %s: %w", addr, err)
		}
		lk, s.peerPort = l, pp
	} else {
		l, err := udp.Open(s.o.linkConfig(netip.AddrPortFrom(addr, port)))
		if err != nil {
			hint := ""
			if errors.Is(err, syscall.EADDRINUSE) {
				hint = " (another RoCEv2 stack such as rdma_rxe, or another softhca, has the port; --addr chooses another address or port)"
			}
			return fmt.Errorf("cannot open the device's UDP socket on %s: %w%s", netip.AddrPortFrom(addr, port), err, hint)
		}
		lk = l
	}
	local, err := lk.LocalAddr()
	if err != nil {
		lk.Close()
		return err
	}
	s.local = netip.AddrPortFrom(local.Src, local.SrcPort)
	name := s.o.Device
	if name == "" {
		name = "softhca0"
	}
	var pattr verbs.PortAttr
	if _, ok := lk.(link.Interface); !ok {
		// A link that is a network interface of its own (link/tap)
		// gives the device its MTU, as rxe's netdev does.
		pattr.ActiveMTU = hca.ActiveMTUFor(local.Src)
	}
	s.dev, err = hca.Open(hca.Config{Name: name, Link: lk, PeerPort: s.peerPort, PortAttr: pattr,
		Congestion: hca.Congestion{DeviceRate: s.cfg.DeviceRate}, BusyPoll: s.cfg.BusyPoll, Trace: s.cfg.Trace})
	if err != nil {
		lk.Close()
		return fmt.Errorf("cannot open the device: %w", err)
	}
	return s.deviceReady()
}

// deviceReady takes what the run needs from the open device: the
// outstanding reads it offers and its GID index.
func (s *session) deviceReady() error {
	// Outstanding reads: the responder resources offered to the peer
	// (ctx_set_out_reads): -o, at most the device's max_qp_rd_atom, for
	// READ and atomics; 1 otherwise.
	s.outReads = 1
	if s.o.Verb == Read || s.o.Verb == Atomic {
		s.outReads = int(s.dev.QueryDevice().MaxQPRdAtom)
		if s.o.OutReads > 0 && s.o.OutReads < s.outReads {
			s.outReads = s.o.OutReads
		}
	}
	src := s.local.Addr()
	s.gidIndex = s.dev.GIDIndex(src)
	if s.o.GIDIndex >= 0 && s.o.GIDIndex != s.gidIndex {
		g, _ := s.dev.QueryGID(1, s.o.GIDIndex)
		return fmt.Errorf("-x %d: GID %d is %v; softhca's RoCEv2 GID for %s is index %d", s.o.GIDIndex, s.o.GIDIndex, g, src, s.gidIndex)
	}
	return nil
}

// linkConfig is the device's UDP link on addr: with the segmentation
// offloads (GSO and GRO) unless --no-gso.
func (o *Options) linkConfig(addr netip.AddrPort) udp.Config {
	return udp.Config{Addr: addr, GSO: !o.NoGSO, GRO: !o.NoGSO, ECN: true}
}

// exchangeMTU agrees on the path MTU (check_mtu): each side's MTU is -m
// or the port's active MTU, and both take the smaller.
func (s *session) exchangeMTU() error {
	pa, err := s.dev.QueryPort(1)
	if err != nil {
		return err
	}
	m := pa.ActiveMTU
	if s.o.MTU != 0 {
		if want := verbs.MTUFromBytes(s.o.MTU); want <= m {
			m = want
		} else {
			s.printf("Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", m)
		}
	}
	b, err := s.c.exchange("exchanging the MTU", EncodeMTU(m), MTUSize)
	if err != nil {
		return err
	}
	rm, err := ParseMTU(b)
	if err != nil {
		return err
	}
	s.res.MTU = min(m, rm)
	return nil
}

// buffSize is perftest's BUFF_SIZE: the area of one QP, at least the
// cycle buffer.
func (s *session) buffSize() int { return max(s.o.bufSize(), s.res.CycleBuffer) }

// createResources creates the PD, the memory, the CQs and the QP, and
// moves the QP to INIT (ctx_init).
func (s *session) createResources() error {
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	s.region = s.buffSize()
	s.buf = make([]byte, 2*s.region)
	s.res.Buf, s.res.Region = s.buf, s.region
	fill(s.buf[:s.region], 0)
	if s.o.Verb == Read {
		fill(s.buf[s.region:], 1) // what the peer reads
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if s.mr, err = s.pd.RegMR(s.buf, access); err != nil {
		return err
	}
	// Each CQ has its own completion channel, which wait sleeps on.
	for _, c := range []struct {
		cq  **hca.CQ
		ch  **hca.CompChannel
		cqe int
	}{{&s.sendCQ, &s.sendCh, s.o.TxDepth + 1}, {&s.recvCQ, &s.recvCh, s.o.RxDepth + 1}} {
		if *c.ch, err = s.dev.CreateCompChannel(); err != nil {
			return err
		}
		if *c.cq, err = s.dev.CreateCQ(c.cqe, *c.ch, nil, 0); err != nil {
			return err
		}
	}
	s.qp, err = s.pd.CreateQP(&hca.QPInitAttr{SendCQ: s.sendCQ, RecvCQ: s.recvCQ, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: uint32(s.o.TxDepth), MaxRecvWR: uint32(s.o.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return err
	}
	return s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QPAccessFlags: access},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
}

// fill writes the test pattern: softhca sends recognisable data, so that
// its tests can check what arrived.
func fill(b []byte, salt byte) {
	for i := range b {
		b[i] = byte(i*131+7) ^ salt
	}
}

// handshake exchanges the QPs' addresses and connects the QP. Every test
// makes three key exchanges before it runs: the addresses, the
// addresses again (printed as they arrive), and one after the QP is
// connected, so that neither side sends before the other is ready. Which
// of the last two comes first differs between tests, but they carry the
// same message. ib_write_lat, ib_read_lat and ib_atomic_lat of perftest
// 4.5-0.17 exchange the addresses twice before connecting (once for all
// QPs, once per QP): four exchanges.
func (s *session) handshake() error {
	gid, err := s.dev.QueryGID(1, s.gidIndex)
	if err != nil {
		return err
	}
	my := Dest{OutReads: uint16(s.outReads), QPN: s.qp.Num(), PSN: rand.Uint32() & 0xffffff,
		RKey: s.mr.RKey(), VAddr: s.mr.Addr() + uint64(s.region), GID: gid}
	s.res.Local = my
	rem, err := s.keys(my)
	if err != nil {
		return err
	}
	if s.o.Lat && s.o.Verb != Send {
		if rem, err = s.keys(my); err != nil {
			return err
		}
	}
	s.res.Remote = rem
	if rem.GID.Addr().Is4() != my.GID.Addr().Is4() {
		return fmt.Errorf("found incompatibility issue with GID types: local %v, remote %v; use the same IP version on both sides", my.GID, rem.GID)
	}
	if err := checkPeerGID(rem.GID, s.local.Addr()); err != nil {
		return err
	}
	if err := s.connectQP(my, rem); err != nil {
		return err
	}
	if _, err := s.keys(my); err != nil {
		return err
	}
	if _, err := s.keys(my); err != nil {
		return err
	}
	s.printDest("local", &my)
	s.printDest("remote", &rem)
	return nil
}

// keys makes one key exchange (ctx_hand_shake) and returns the peer's.
func (s *session) keys(my Dest) (Dest, error) {
	b, err := s.c.exchange("exchanging QP addresses", my.Encode(), DestSize)
	if err != nil {
		return Dest{}, err
	}
	d, err := ParseDest(b)
	if err != nil {
		return Dest{}, fmt.Errorf("the peer's QP address: %w", err)
	}
	return d, nil
}

// sync is a key exchange used only to wait for the peer.
func (s *session) sync() error {
	_, err := s.keys(s.res.Local)
	return err
}

// connectQP moves the QP to RTR, and to RTS unless it only responds
// (the server of a bandwidth test), with perftest's attributes
// (ctx_connect). It does not use hca's QP.Connect on purpose: the tool
// mirrors perftest, whose attributes differ from Connect's defaults
// (max_dest_rd_atomic and max_rd_atomic from the exchanged out_reads,
// hop_limit 0xff, -u's timeout), and whose server stays in RTR.
func (s *session) connectQP(my, rem Dest) error {
	err := s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: s.res.MTU,
		DestQPNum: rem.QPN, RQPSN: rem.PSN, MaxDestRdAtomic: uint8(min(int(my.OutReads), 255)), MinRNRTimer: 12,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1,
			GRH: verbs.GlobalRoute{DGID: rem.GID, SGIDIndex: uint8(s.gidIndex), HopLimit: 0xff}}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|
			verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
	if err != nil {
		return fmt.Errorf("QP to RTR: %w", err)
	}
	if s.server && !s.o.Lat {
		return nil
	}
	// The initiator depth is the peer's responder resources, within this
	// device's limit (perftest would fail the modify beyond it).
	rd := min(int(rem.OutReads), int(s.dev.QueryDevice().MaxQPInitRdAtom), 255)
	err = s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: my.PSN, Timeout: uint8(s.o.QPTimeout),
		RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: uint8(rd)},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
	if err != nil {
		return fmt.Errorf("QP to RTS: %w", err)
	}
	return nil
}

// close releases everything in reverse order. Destroying the QP takes its
// lock, after which the memory the transport wrote may be read (Result).
func (s *session) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.dev != nil && s.o.Stats {
		st := s.dev.TransportStats()
		fmt.Fprintf(s.cfg.Stderr, "transport: %d packets sent, %d received; %d retransmitted (%d timeouts); RNR NAKs %d sent, %d received; sequence NAKs %d sent, %d received; %d ACKs sent; %d duplicates answered; drops %v\n",
			st.TxPackets, st.RxPackets, st.Retransmits, st.RetryTimeouts, st.RNRNAKsSent, st.RNRNAKsReceived,
			st.SeqNAKsSent, st.SeqNAKsReceived, st.AcksSent, st.DuplicatesAnswered, st.DropNames())
		fmt.Fprintf(s.cfg.Stderr, "congestion: %d packets sent again; window %d increases, %d cuts; rate %d cuts, %d increases, %d back to unpaced; %d pacer waits, %d device window waits, %d device rate waits; %d CE received, CNPs %d sent (%d for UC losses), %d received\n",
			st.RetransmittedPackets, st.WindowIncreases, st.WindowCuts, st.RateCuts, st.RateIncreases, st.RateUnpaced,
			st.PacerWaits, st.DeviceWaits, st.DeviceRateWaits, st.CEReceived, st.CNPsSent, st.LossCNPs, st.CNPsReceived)
	}
	if s.qp != nil {
		_ = s.qp.Destroy(ctx)
	}
	for _, c := range []*hca.CQ{s.sendCQ, s.recvCQ} {
		if c != nil {
			_ = c.Destroy(ctx)
		}
	}
	for _, ch := range []*hca.CompChannel{s.sendCh, s.recvCh} {
		if ch != nil {
			_ = ch.Close()
		}
	}
	if s.mr != nil {
		_ = s.mr.Dereg()
	}
	if s.pd != nil {
		_ = s.pd.Dealloc()
	}
	if s.dev != nil && s.cfg.Device == nil {
		_ = s.dev.Close()
		s.res.Stats = s.dev.TransportStats()
	}
	if s.c != nil {
		s.res.Transcript = s.c.sizes
		s.c.close()
	}
}
