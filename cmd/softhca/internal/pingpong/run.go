package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"
	"unsafe"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Work request IDs, as in rdma-core; pending is a mask of them.
const (
	recvWRID = 1
	sendWRID = 2
)

// UDGRHSize is the space for the Global Route Header at the start of
// every UD receive buffer; ud_pingpong sends from buf+40 and receives
// into buf, size+40 bytes.
const UDGRHSize = 40

// UD's Q_Key, rdma-core's constant.
const udQKey = 0x11111111

// ErrInvalidData is returned (after the results are printed) when -c
// found received data that differs from what the peer sends.
var ErrInvalidData = errors.New("invalid data received")

// Run runs one side of a pingpong as cfg says, printing what rdma-core's
// example prints on stdout. It returns nil on success; otherwise the
// error's text is what rdma-core prints on stderr in that case (the
// first line rdma-core's own), followed by softhca's reason where one is
// known. ctx ends the run early (for tests: the examples themselves wait
// forever for a peer that went away).
func Run(ctx context.Context, cfg Config, stdout io.Writer) error {
	s := &session{cfg: cfg, out: stdout, pageSize: os.Getpagesize()}
	defer s.writeStats()
	defer s.release()
	return s.run(ctx)
}

// session is one run and the objects it made.
type session struct {
	cfg      Config
	out      io.Writer
	pageSize int

	conn     net.Conn
	addr     netip.Addr // the device's IP address
	dev      *hca.Device
	statsDev *hca.Device // dev, kept for writeStats after it is closed
	borrowed bool        // dev is Config.Device: not this run's to close
	ch       *hca.CompChannel
	pd       *hca.PD
	mr       *hca.MR
	cq       *hca.CQ
	srq      *hca.SRQ
	qps      []*hca.QP
	ah       *hca.AH

	mem       []byte // the registered buffer
	sendFlags verbs.SendFlags
	my        []Dest // one per QP, padded with zero entries to MaxQP for srq
	remote    []Dest
	pending   []int // per QP: the WR IDs still to complete before the next send
	numEvents int
	badPages  map[int]bool // pages -c found wrong
}

// fail is an error with rdma-core's message and, if known, softhca's
// reason.
func fail(msg string, err error) error {
	if err == nil {
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %w", msg, err)
}

func (s *session) printf(format string, args ...any) { fmt.Fprintf(s.out, format, args...) }

func (s *session) run(ctx context.Context) error {
	c := &s.cfg
	if err := c.check(); err != nil {
		return err
	}
	name := DeviceName
	if c.Device != nil {
		name = c.Device.Name()
	}
	if c.IBDev != "" && c.IBDev != name {
		return fail(fmt.Sprintf("IB device %s not found", c.IBDev), fmt.Errorf("softhca's device is %s", name))
	}
	if err := c.Features.check(c.Mode); err != nil {
		return err
	}
	if err := c.checkGIDIndex(); err != nil {
		return err
	}

	// rdma-core opens the device first and then makes the TCP
	// connection; softhca binds the device to the connection's local
	// address unless told which address to use.
	addr := c.Addr
	if c.Device != nil {
		addr = netip.AddrPortFrom(c.Device.Config().Addrs[0], 0)
	}
	if !addr.IsValid() {
		if err := s.connectTCP(ctx); err != nil {
			return err
		}
		local := s.conn.LocalAddr().(*net.TCPAddr).AddrPort().Addr()
		addr = netip.AddrPortFrom(local.Unmap(), wire.RoCEv2Port)
	}
	if err := s.setup(addr); err != nil {
		return err
	}
	if s.conn == nil {
		if err := s.connectTCP(ctx); err != nil {
			return err
		}
	}
	if err := s.exchange(); err != nil {
		return err
	}
	if c.ServerName == "" {
		s.printRemote()
	}

	start, err := s.start()
	if err != nil {
		return err
	}
	if err := s.loop(ctx); err != nil {
		return err
	}
	elapsed := time.Since(start)
	s.printf("%s", ResultLines(c.Size, c.Iters, elapsed))
	if c.Mode != SRQ {
		s.reportBadPages()
	}
	if err := s.teardown(); err != nil {
		return err
	}
	if c.Mode == SRQ && c.Validate {
		// The QPs share the buffer and are destroyed now: nothing can be
		// placed in it while it is checked.
		s.checkBuffer()
		s.reportBadPages()
	}
	if len(s.badPages) > 0 {
		return ErrInvalidData
	}
	return nil
}

// check rejects what the examples reject before opening a device.
func (c *Config) check() error {
	switch c.Mode {
	case RC, UC, UD, SRQ:
	default:
		return fmt.Errorf("unknown pingpong mode %d", c.Mode)
	}
	if c.Mode == SRQ {
		if c.NumQP > c.RxDepth {
			return fmt.Errorf("rx_depth %d is too small for %d QPs -- must have at least one receive per QP.", c.RxDepth, c.NumQP)
		}
		if c.NumQP >= MaxQP {
			return fmt.Errorf("num_qp %d must be less than %d", c.NumQP, MaxQP-1)
		}
		if c.NumQP == 0 {
			return errors.New("num_qp 0: srq_pingpong needs at least one QP")
		}
	}
	if c.RxDepth == 0 {
		return errors.New("rx_depth 0: at least one receive must be posted")
	}
	if c.Mode != UD && !c.MTU.Valid() {
		return fmt.Errorf("path MTU %d is not 256, 512, 1024, 2048 or 4096", c.MTU)
	}
	if c.IBPort < 1 || c.IBPort > 255 {
		return fmt.Errorf("IB port %d does not exist", c.IBPort)
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("TCP port %d is not in 0..65535", c.Port)
	}
	return nil
}

// gidMsg is rdma-core's message for a GID index ibv_query_gid cannot
// read.
func (c *Config) gidMsg() string {
	if c.Mode == RC || c.Mode == UC {
		return fmt.Sprintf("can't read sgid of index %d", c.GIDIndex)
	}
	return fmt.Sprintf("Could not get local gid for gid index %d", c.GIDIndex)
}

// checkGIDIndex fails, before anything is opened, for a -g that cannot
// work. The device's port has two GIDs, as rxe's has for one IPv4
// address: index 0, the link-local fe80:: GID made from the node GUID,
// and index 1, the device's IP address, the only one its UDP socket is
// bound to. (rdma-core's ibv_query_gid reads an empty entry inside the
// table as an all-zero GID, and the examples then send no GID, so that
// the peer cannot connect; softhca says so at once instead.)
func (c *Config) checkGIDIndex() error {
	switch {
	case c.GIDIndex < 0 || c.GIDIndex == 1:
		return nil
	case c.GIDIndex == 0:
		return fmt.Errorf("-g 0: GID index 0 is the link-local GID (fe80::/64 with the interface identifier made from the node GUID, as rxe puts it there); "+
			"%s's UDP socket is bound to the device's IP address, not to it, so it cannot carry RoCEv2 traffic here: use -g 1, the device's IP address", DeviceName)
	}
	return fail(c.gidMsg(), fmt.Errorf("%s port %d has no GID at index %d: it has index 0, the link-local fe80:: GID, and index 1, the device's IP address; use -g 1",
		DeviceName, c.IBPort, c.GIDIndex))
}

// checkPeerGID fails for a peer's GID that this device cannot send to,
// before a QP is connected to it (and so, on the client, before "done",
// which lets the server fail at once too). A zero GID (the peer was
// given no -g) is left to the examples' own failure (explainAV).
func (s *session) checkPeerGID(d Dest) error {
	if !d.HasGID() {
		return nil
	}
	a := d.GID.Addr()
	switch {
	case a.Is6() && a.IsLinkLocalUnicast():
		return fmt.Errorf("the peer sent GID %s, a link-local fe80:: GID (index 0 on rxe and softhca, made from the node GUID): "+
			"this device's UDP socket on %s cannot send to it (a GID names no interface); the peer needs -g with its IP address's GID index (1 on softhca, and on rxe with one IPv4 address)",
			a, s.addr)
	case a.IsUnspecified() || a.IsMulticast():
		return fmt.Errorf("the peer sent GID %s, which is not a unicast address: the peer needs -g with its IP address's GID index", a)
	case a.Is4() != s.addr.Is4():
		return fmt.Errorf("the peer sent GID %s, and this device's address %s is of the other IP family: no route joins them; run both sides on addresses of one family (--addr)",
			FormatGID(d.GID), s.addr)
	}
	return nil
}

// check fails as rdma-core does on a device without the features asked
// for (as rxe lacks them).
func (f Features) check(mode Mode) error {
	if mode == RC && f.ODP && f.DM {
		return errors.New("DM memory region can't be on demand")
	}
	if mode == RC && !f.ODP && f.Prefetch {
		return errors.New("prefetch is valid only with on-demand memory region")
	}
	switch {
	case f.ODP && mode == SRQ:
		return errors.New("The device isn't ODP capable or does not support RC send, receive and srq with ODP")
	case f.ODP:
		return errors.New("The device isn't ODP capable or does not support RC send and receive with ODP")
	case f.Timestamps:
		return errors.New("The device isn't completion timestamp capable")
	case f.DM:
		return errors.New("Device doesn't support dm allocation")
	}
	return nil
}

// connectTCP makes the exchange's connection: the client connects to
// ServerName, the server accepts one connection on Port (or Listener).
func (s *session) connectTCP(ctx context.Context) error {
	c := &s.cfg
	if c.ServerName != "" {
		hostPort := net.JoinHostPort(c.ServerName, strconv.Itoa(c.Port))
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", hostPort)
		if err != nil {
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) {
				return fmt.Errorf("%s for %s:%d", dnsErr.Err, c.ServerName, c.Port)
			}
			return fail(fmt.Sprintf("Couldn't connect to %s:%d", c.ServerName, c.Port), err)
		}
		s.conn = conn
	} else {
		ln := c.Listener
		if ln == nil {
			var err error
			if ln, err = net.Listen("tcp", ":"+strconv.Itoa(c.Port)); err != nil {
				return fail(fmt.Sprintf("Couldn't listen to port %d", c.Port), err)
			}
		}
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		conn, err := ln.Accept()
		stop()
		ln.Close() // one connection, as rdma-core
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return fail("accept() failed", err)
		}
		s.conn = conn
	}
	context.AfterFunc(ctx, func() { s.conn.Close() })
	return nil
}

// openLink opens the device's link on addr (linkConfig).
func (s *session) openLink(addr netip.AddrPort) (link.Link, error) {
	if s.cfg.OpenLink != nil {
		return s.cfg.OpenLink(addr)
	}
	return udp.Open(s.cfg.linkConfig(addr))
}

// linkConfig is the UDP link on addr: with the segmentation offloads
// where the kernel has them (a 64 KiB message at MTU 1024 is 64 packets:
// one sendmmsg/recvmmsg call instead of many; three to five times the
// throughput on loopback, and rxe accepts the segments), unless NoGSO.
func (c *Config) linkConfig(addr netip.AddrPort) udp.Config {
	return udp.Config{Addr: addr, GSO: !c.NoGSO, GRO: !c.NoGSO, ECN: true}
}

// setup opens the device and creates its objects, as pp_init_ctx does,
// posts the receives, and fills in the local address(es), which it
// prints.
func (s *session) setup(addr netip.AddrPort) error {
	c := &s.cfg
	s.addr = addr.Addr()
	if c.Device != nil {
		s.dev, s.statsDev, s.borrowed = c.Device, c.Device, true
		return s.setupObjects()
	}
	l, err := s.openLink(addr)
	if err != nil {
		if c.OpenLink != nil {
			return fail("Couldn't get context for "+DeviceName, fmt.Errorf("%s: %w", addr, err))
		}
		return fail("Couldn't get context for "+DeviceName, fmt.Errorf("UDP %s: %w", addr, err))
	}
	mtu := c.PortMTU
	if _, ok := l.(link.Interface); mtu == 0 && !ok {
		// A link that is a network interface of its own (link/tap)
		// gives the device its MTU, as rxe's netdev does.
		mtu = hca.ActiveMTUFor(addr.Addr())
	}
	dc := hca.Config{
		Name:       DeviceName,
		Link:       l,
		PeerPort:   c.peerPort(),
		PortAttr:   verbs.PortAttr{ActiveMTU: mtu},
		Congestion: hca.Congestion{DeviceRate: c.DeviceRate},
		Trace:      c.Trace,
	}
	if c.Mode == SRQ {
		// srq_pingpong's QPs all receive into and send from one buffer.
		// The transport places and gathers data on a pool of workers,
		// QPs spread over them; with one worker, no two QPs touch the
		// buffer at the same time, so the program has no data race
		// (the bytes are equal, but the Go memory model does not care).
		dc.Workers = 1
	}
	s.dev, err = hca.Open(dc)
	if err != nil {
		l.Close()
		return fail("Couldn't get context for "+DeviceName, err)
	}
	s.statsDev = s.dev
	return s.setupObjects()
}

// setupObjects creates the run's objects on s.dev, as pp_init_ctx does
// after opening the device.
func (s *session) setupObjects() error {
	c := &s.cfg
	port := uint8(c.IBPort)
	var err error

	if c.Mode == UD {
		pa, err := s.dev.QueryPort(port)
		if err != nil {
			return fail(fmt.Sprintf("Unable to query port info for port %d", c.IBPort), err)
		}
		if n := pa.ActiveMTU.Bytes(); int64(c.Size) > int64(n) {
			return fmt.Errorf("Requested size larger than port MTU (%d)", n)
		}
	}
	// The buffer: page aligned, as memalign(page_size, size); filled
	// with 0x7b (0 for srq) as rdma-core fills it. UD has the GRH area
	// in front.
	n := int(c.Size)
	if c.Mode == UD {
		n += UDGRHSize
	}
	s.mem = s.alignedBuffer(n)
	fill := byte(0x7b)
	if c.Mode == SRQ {
		fill = 0
	}
	for i := range s.mem {
		s.mem[i] = fill
	}

	// With -e the examples sleep on the channel; without, they poll
	// busily, and softhca sleeps on it after a while (waitCompletions).
	if s.ch, err = s.dev.CreateCompChannel(); err != nil {
		return fail("Couldn't create completion channel", err)
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fail("Couldn't allocate PD", err)
	}
	if s.mr, err = s.pd.RegMR(s.regionBytes(), verbs.AccessLocalWrite); err != nil {
		return fail("Couldn't register MR", err)
	}
	cqe := int(c.RxDepth) + 1
	if c.Mode == SRQ {
		cqe = int(c.RxDepth) + int(c.NumQP)
	}
	if s.cq, err = s.dev.CreateCQ(cqe, s.ch, nil, 0); err != nil {
		return fail("Couldn't create CQ", err)
	}
	if err := s.createQPs(port); err != nil {
		return err
	}

	posted := s.postRecv(int(c.RxDepth))
	if posted < int(c.RxDepth) {
		return fmt.Errorf("Couldn't post receive (%d)", posted)
	}
	s.pending = make([]int, len(s.qps))
	if c.Events {
		if err := s.cq.ReqNotify(false); err != nil {
			return fail("Couldn't request CQ notification", err)
		}
	}

	pa, err := s.dev.QueryPort(port)
	if err != nil {
		return fail("Couldn't get port info", err)
	}
	if c.Mode != UD && pa.LinkLayer != verbs.LinkLayerEthernet && pa.LID == 0 {
		return errors.New("Couldn't get local LID")
	}
	var gid verbs.GID
	if c.GIDIndex >= 0 {
		if gid, err = s.dev.QueryGID(port, c.GIDIndex); err != nil {
			return fail(c.gidMsg(), err)
		}
	}
	count := len(s.qps)
	if c.Mode == SRQ {
		count = SRQMessages
	}
	s.my = make([]Dest, count)
	for i, q := range s.qps {
		s.my[i] = Dest{LID: pa.LID, QPN: q.Num(), PSN: rand.Uint32() & 0xffffff, GID: gid}
		s.printf("%s", AddressLine("local", s.my[i], c.Mode == UD))
	}
	return nil
}

// alignedBuffer returns n bytes (at least one) starting on a page
// boundary, as memalign(page_size, n): -c marks the start of each page.
func (s *session) alignedBuffer(n int) []byte {
	raw := make([]byte, max(n, 1)+s.pageSize)
	off := 0
	if r := int(uintptrOf(raw) % uintptr(s.pageSize)); r != 0 {
		off = s.pageSize - r
	}
	return raw[off : off+n : off+max(n, 1)]
}

// regionBytes is the memory to register: the buffer, or one byte for an
// empty one (a zero-length region has no address).
func (s *session) regionBytes() []byte {
	if len(s.mem) == 0 {
		return s.mem[:1]
	}
	return s.mem
}

// createQPs creates the QP(s) (and the SRQ) and moves them to INIT.
func (s *session) createQPs(port uint8) error {
	c := &s.cfg
	typ := verbs.QPTypeRC
	switch c.Mode {
	case RC, SRQ: // RC QPs
	case UC:
		typ = verbs.QPTypeUC
	case UD:
		typ = verbs.QPTypeUD
	}
	nqp := 1
	caps := verbs.QPCap{MaxSendWR: 1, MaxRecvWR: c.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}
	if c.Mode == SRQ {
		var err error
		if s.srq, err = s.pd.CreateSRQ(&hca.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: c.RxDepth, MaxSGE: 1}}); err != nil {
			return fail("Couldn't create SRQ", err)
		}
		nqp = int(c.NumQP)
		caps = verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}
	}
	s.sendFlags = verbs.SendSignaled
	for i := range nqp {
		q, err := s.pd.CreateQP(&hca.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, SRQ: s.srq, Cap: caps, QPType: typ})
		if err != nil {
			return fail(s.qpMsg("Couldn't create QP", i), err)
		}
		s.qps = append(s.qps, q)
		if q.Cap().MaxInlineData >= c.Size && !c.Features.DM {
			s.sendFlags |= verbs.SendInline
		}
	}
	for i, q := range s.qps {
		attr := verbs.QPAttr{QPState: verbs.QPStateInit, PKeyIndex: 0, PortNum: port}
		mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
		if c.Mode == UD {
			attr.QKey = udQKey
			mask |= verbs.AttrQKey
		} else {
			mask |= verbs.AttrAccessFlags
		}
		if err := q.Modify(&attr, mask); err != nil {
			return fail(s.qpMsg("Failed to modify QP", i)+" to INIT", err)
		}
	}
	return nil
}

// qpMsg is "<what>" or, for srq, "<what>[i]", as the examples word it.
func (s *session) qpMsg(what string, i int) string {
	if s.cfg.Mode == SRQ {
		return fmt.Sprintf("%s[%d]", what, i)
	}
	return what
}

// recvSGE and sendSGE are the buffer as the examples post it.
func (s *session) recvSGE() verbs.SGE {
	return s.mr.SGE(0, len(s.mem))
}

func (s *session) sendSGE() verbs.SGE {
	if s.cfg.Mode == UD {
		return s.mr.SGE(UDGRHSize, int(s.cfg.Size))
	}
	return s.mr.SGE(0, int(s.cfg.Size))
}

// postRecv posts up to n receives (on the SRQ for srq) and returns how
// many were posted.
func (s *session) postRecv(n int) int {
	wr := verbs.RecvWR{WRID: recvWRID, SGList: []verbs.SGE{s.recvSGE()}}
	for i := range n {
		var err error
		if s.srq != nil {
			_, err = s.srq.PostRecv(&wr)
		} else {
			_, err = s.qps[0].PostRecv(&wr)
		}
		if err != nil {
			return i
		}
	}
	return n
}

// postSend posts one SEND of the buffer on QP i.
func (s *session) postSend(i int) error {
	wr := verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, SendFlags: s.sendFlags,
		SGList: []verbs.SGE{s.sendSGE()}}
	if s.cfg.Mode == UD {
		wr.UD = verbs.UDInfo{AH: s.ah, RemoteQPN: s.remote[0].QPN, RemoteQKey: udQKey}
	}
	_, err := s.qps[i].PostSend(&wr)
	return err
}

// exchange swaps addresses with the peer over the TCP connection and
// connects the QPs to the peer's: the server before it answers, the
// client before it sends "done" (after printing the peer's address, as
// rdma-core does before it connects).
func (s *session) exchange() error {
	var err error
	if s.cfg.ServerName != "" {
		s.remote, err = ClientExchange(s.conn, s.my, func(remote []Dest) error {
			s.remote = remote
			s.printRemote()
			return s.connectQPs()
		})
	} else {
		s.remote, err = ServerExchange(s.conn, s.my, func(remote []Dest) error {
			s.remote = remote
			return s.connectQPs()
		})
	}
	s.conn.Close()
	return err
}

// printRemote prints the peer's address line(s).
func (s *session) printRemote() {
	for i := range s.qps {
		s.printf("%s", AddressLine("remote", s.remote[i], false))
	}
}

// connectQPs moves the QPs to RTR and RTS towards the peer's (and, for
// ud, creates the address handle), with the attributes the examples use.
// It does not use hca's QP.Connect on purpose: the tool mirrors
// pp_connect_ctx of rdma-core's examples step by step, their quirks
// included (an address vector without a GRH when the peer sent no GID, a
// GID index of -1 as 255, the LID and SL), so that it fails where they
// fail and with their messages.
func (s *session) connectQPs() error {
	c := &s.cfg
	port := uint8(c.IBPort)
	// The examples use a GRH only if the peer sent a GID (RoCE cannot do
	// without one, so a side without -g cannot connect), with the
	// local -g index as source: -1 becomes 255 in the uint8 field.
	// srq takes the GID of the first entry for every QP.
	peer := s.remote[0]
	rtr := s.qpMsg("Failed to modify QP", 0) + " to RTR"
	if c.Mode == UD {
		rtr = "Failed to create AH"
	}
	if err := s.checkPeerGID(peer); err != nil {
		return fail(rtr, err)
	}
	av := verbs.AHAttr{DLID: peer.LID, SL: c.SL, PortNum: port}
	if peer.HasGID() {
		av.IsGlobal = true
		av.GRH = verbs.GlobalRoute{DGID: peer.GID, SGIDIndex: uint8(c.GIDIndex), HopLimit: 1}
	}
	if c.Mode == UD {
		if err := s.qps[0].Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR}, verbs.AttrState); err != nil {
			return fail("Failed to modify QP to RTR", err)
		}
		if err := s.qps[0].Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: s.my[0].PSN},
			verbs.AttrState|verbs.AttrSQPSN); err != nil {
			return fail("Failed to modify QP to RTS", err)
		}
		ah, err := s.pd.CreateAH(av)
		if err != nil {
			return fail("Failed to create AH", s.explainAV(err))
		}
		s.ah = ah
		return nil
	}

	for i, q := range s.qps {
		d := s.remote[i]
		attr := verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: c.MTU, DestQPNum: d.QPN, RQPSN: d.PSN, AHAttr: av}
		attr.AHAttr.DLID = d.LID
		mask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		if c.Mode != UC {
			attr.MaxDestRdAtomic = 1
			attr.MinRNRTimer = 12
			mask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		}
		if err := s.explainAV(q.Modify(&attr, mask)); err != nil {
			return fail(s.qpMsg("Failed to modify QP", i)+" to RTR", err)
		}
		attr.QPState = verbs.QPStateRTS
		attr.SQPSN = s.my[i].PSN
		mask = verbs.AttrState | verbs.AttrSQPSN
		if c.Mode != UC {
			attr.Timeout = 14
			attr.RetryCnt = 7
			attr.RNRRetry = 7
			attr.MaxRdAtomic = 1
			mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
		}
		if err := q.Modify(&attr, mask); err != nil {
			return fail(s.qpMsg("Failed to modify QP", i)+" to RTS", err)
		}
	}
	return nil
}

// explainAV adds a hint to the library's refusal of an address vector:
// RoCE needs a GRH, so both sides need -g. Without a GID from the peer
// the examples set no GRH; without -g here its source GID index is -1,
// which is 255 in the uint8 field, an empty entry (rxe refuses both too).
func (s *session) explainAV(err error) error {
	switch {
	case err == nil:
		return nil
	case !s.remote[0].HasGID():
		return fmt.Errorf("%w (the peer sent no GID: RoCE needs -g on both sides; GID index 1 holds the IPv4 address)", err)
	case s.cfg.GIDIndex < 0:
		return fmt.Errorf("%w (no -g here: the source GID index is -1, that is 255; RoCE needs -g on both sides; GID index 1 holds the IPv4 address)", err)
	}
	return err
}

// start posts the client's first send(s) (after -c's pattern) and
// returns the start time; the server waits for the client's message.
func (s *session) start() (time.Time, error) {
	for i := range s.pending {
		s.pending[i] = recvWRID
	}
	if s.cfg.ServerName != "" {
		if s.cfg.Validate {
			s.writePattern()
		}
		for i := range s.qps {
			if err := s.postSend(i); err != nil {
				return time.Time{}, fail("Couldn't post send", err)
			}
			s.pending[i] |= sendWRID
		}
	}
	return time.Now(), nil
}

// dataOffset is where the message starts in the buffer.
func (s *session) dataOffset() int {
	if s.cfg.Mode == UD {
		return UDGRHSize
	}
	return 0
}

// writePattern is -c's pattern: rdma-core 44 sets the first byte of
// every page of the message to i / page_size % sizeof(char), which is
// always 0; the rest keeps the initial fill. (srq's fill is 0 too, so
// there the pattern changes nothing.)
func (s *session) writePattern() {
	data := s.mem[s.dataOffset():]
	for i := 0; i < int(s.cfg.Size); i += s.pageSize {
		data[i] = 0
	}
}

// checkBuffer compares the message in the buffer with what the peer
// sends: the pattern of writePattern over the initial fill. rdma-core
// checks only the first byte of each page, on the server; softhca checks
// every byte, on both sides. Wrong pages are remembered for
// reportBadPages.
func (s *session) checkBuffer() {
	fill := byte(0x7b)
	if s.cfg.Mode == SRQ {
		fill = 0
	}
	data := s.mem[s.dataOffset():][:s.cfg.Size]
	for i, b := range data {
		want := fill
		if i%s.pageSize == 0 {
			want = 0
		}
		if b != want {
			if s.badPages == nil {
				s.badPages = map[int]bool{}
			}
			s.badPages[i/s.pageSize] = true
		}
	}
}

// reportBadPages prints rdma-core's line for each page -c found wrong.
func (s *session) reportBadPages() {
	for p := 0; p*s.pageSize < int(s.cfg.Size); p++ {
		if s.badPages[p] {
			s.printf("invalid data in page %d\n", p)
		}
	}
}

// loop is the ping-pong: each QP sends when its previous send and the
// peer's answer have both completed, until iters sends and receives
// have completed.
func (s *session) loop(ctx context.Context) error {
	c := &s.cfg
	iters := int(c.Iters)
	rxDepth := int(c.RxDepth)
	refillAt := 1
	batch := 2
	if c.Mode == SRQ {
		refillAt = int(c.NumQP)
		batch = int(c.NumQP) + rxDepth
	}
	wcs := make([]verbs.WC, batch)
	routs := rxDepth
	rcnt, scnt := 0, 0
	for rcnt < iters || scnt < iters {
		if c.Events {
			evCQ, err := s.ch.GetEvent(ctx)
			if err != nil {
				return fail("Failed to get cq_event", err)
			}
			s.numEvents++
			if evCQ != s.cq {
				return fmt.Errorf("CQ event for unknown CQ %p", evCQ)
			}
			if err := s.cq.ReqNotify(false); err != nil {
				return fail("Couldn't request CQ notification", err)
			}
		}
		n := s.cq.Poll(wcs)
		if n == 0 && !c.Events {
			var err error
			if n, err = s.waitCompletions(ctx, wcs); err != nil {
				return err
			}
		}
		for i := range wcs[:n] {
			if err := s.handleWC(&wcs[i], &rcnt, &scnt, &routs, refillAt); err != nil {
				if c.Mode == RC {
					return fmt.Errorf("%w\nparse WC failed %d", err, n)
				}
				return err
			}
		}
	}
	return nil
}

// waitCompletions is the poll mode's wait for completions, called when
// a poll found none. rdma-core's examples poll the CQ in a busy loop; a
// Go program that does that starves its own network goroutines on a busy
// machine (the scheduler runs the poller ahead of the network poller:
// milliseconds per message), and spinning a while first measured slower
// than not. So softhca sleeps on its completion channel, armed before a
// last poll, as ibv_req_notify_cq(3) says, so that no completion is
// missed; the worker that completes the work wakes it directly.
func (s *session) waitCompletions(ctx context.Context, wcs []verbs.WC) (int, error) {
	if err := s.cq.ReqNotify(false); err != nil {
		return 0, fail("Couldn't request CQ notification", err)
	}
	if n := s.cq.Poll(wcs); n > 0 {
		return n, nil
	}
	if _, err := s.ch.GetEvent(ctx); err != nil {
		return 0, fail("poll CQ failed", err)
	}
	s.cq.AckEvents(1)
	return s.cq.Poll(wcs), nil
}

// handleWC accounts for one completion (parse_single_wc) and posts the
// QP's next send when it is due.
func (s *session) handleWC(wc *verbs.WC, rcnt, scnt, routs *int, refillAt int) error {
	c := &s.cfg
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("Failed status %s (%d) for wr_id %d", wc.Status, wc.Status, int(wc.WRID))
	}
	qi := 0
	if c.Mode == SRQ {
		qi = -1
		for i, q := range s.qps {
			if q.Num() == wc.QPNum {
				qi = i
			}
		}
		if qi < 0 {
			return fmt.Errorf("Couldn't find QPN %06x", wc.QPNum)
		}
	}
	switch wc.WRID {
	case sendWRID:
		*scnt++
	case recvWRID:
		if *routs--; *routs <= refillAt {
			*routs += s.postRecv(int(c.RxDepth) - *routs)
			if *routs < int(c.RxDepth) {
				return fmt.Errorf("Couldn't post receive (%d)", *routs)
			}
		}
		*rcnt++
		if c.Validate && c.Mode != SRQ {
			// One message at a time: nothing else is placed in the
			// buffer until this side answers.
			s.checkBuffer()
		}
	default:
		return fmt.Errorf("Completion for unknown wr_id %d", int(wc.WRID))
	}
	s.pending[qi] &^= int(wc.WRID)
	if *scnt < int(c.Iters) && s.pending[qi] == 0 {
		if err := s.postSend(qi); err != nil {
			return fail("Couldn't post send", err)
		}
		s.pending[qi] = recvWRID | sendWRID
	}
	return nil
}

// teardown acknowledges the events and destroys the objects in
// pp_close_ctx's order.
func (s *session) teardown() error {
	if s.numEvents > 0 {
		s.cq.AckEvents(s.numEvents)
		s.numEvents = 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, q := range s.qps {
		if err := q.Destroy(ctx); err != nil {
			return fail(s.qpMsg("Couldn't destroy QP", i), err)
		}
	}
	s.qps = nil
	if s.srq != nil {
		if err := s.srq.Destroy(ctx); err != nil {
			return fail("Couldn't destroy SRQ", err)
		}
		s.srq = nil
	}
	if err := s.cq.Destroy(ctx); err != nil {
		return fail("Couldn't destroy CQ", err)
	}
	s.cq = nil
	if err := s.mr.Dereg(); err != nil {
		return fail("Couldn't deregister MR", err)
	}
	s.mr = nil
	if s.ah != nil {
		if err := s.ah.Destroy(); err != nil {
			return fail("Couldn't destroy AH", err)
		}
		s.ah = nil
	}
	if err := s.pd.Dealloc(); err != nil {
		return fail("Couldn't deallocate PD", err)
	}
	s.pd = nil
	if s.ch != nil {
		if err := s.ch.Close(); err != nil {
			return fail("Couldn't destroy completion channel", err)
		}
		s.ch = nil
	}
	if s.borrowed {
		s.dev = nil
		return nil
	}
	err := s.dev.Close()
	s.dev = nil
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fail("Couldn't release context", err)
	}
	return nil
}

// release frees what a failed run left, ignoring errors: closing the
// device stops its transport and closes its socket; the channel's eventfd
// can be closed only after its CQ is destroyed, which needs the QPs and
// the SRQ gone first.
func (s *session) release() {
	if s.conn != nil {
		s.conn.Close()
	}
	if s.dev == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.cq != nil && s.numEvents > 0 {
		s.cq.AckEvents(s.numEvents)
	}
	for _, q := range s.qps {
		q.Destroy(ctx)
	}
	if s.srq != nil {
		s.srq.Destroy(ctx)
	}
	if s.cq != nil {
		s.cq.Destroy(ctx)
	}
	if s.ch != nil {
		s.ch.Close()
	}
	if !s.borrowed {
		s.dev.Close() // frees what is left
		return
	}
	// A borrowed device stays open: release the rest one by one.
	if s.mr != nil {
		s.mr.Dereg()
	}
	if s.ah != nil {
		s.ah.Destroy()
	}
	if s.pd != nil {
		s.pd.Dealloc()
	}
}

// uintptrOf is the address of b's first byte.
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
