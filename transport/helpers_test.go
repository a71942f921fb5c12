package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/softhca/softhca/internal/ring"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// Fakes and helpers for the protocol tests. The protocol parts are
// driven as quic-go's ackhandler is: no goroutine, no link, no device;
// every call gets an Env whose time the test chooses, whose Emitter
// records the packets, and whose Memory is Go byte slices.

// ---------------------------------------------------------------------
// Memory

// region is a registered memory region of the fake Memory: its key
// serves as both L_Key and R_Key.
type region struct {
	pd     uint32
	va     uint64
	buf    []byte
	access verbs.AccessFlags
}

// fakeMem is registered memory over Go byte slices, keyed by L_Key/R_Key,
// with protection domains and access rights, as mr.Table checks them.
type fakeMem struct {
	regions map[uint32]*region
	lookups int
	// refused counts lookups that failed.
	refused int
}

func newFakeMem() *fakeMem { return &fakeMem{regions: map[uint32]*region{}} }

// reg registers size bytes at va under key and returns them. The bytes
// are 8-byte aligned (atomics operate on them with sync/atomic).
func (m *fakeMem) reg(key, pd uint32, va uint64, size int, access verbs.AccessFlags) []byte {
	words := make([]uint64, (size+7)/8)
	var buf []byte
	if size > 0 {
		buf = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), size)
	}
	m.regions[key] = &region{pd: pd, va: va, buf: buf, access: access}
	return buf
}

// dereg removes a region: from now on its key names nothing.
func (m *fakeMem) dereg(key uint32) { delete(m.regions, key) }

// Lookup implements Memory.
func (m *fakeMem) Lookup(key, pd uint32, va uint64, n uint32, need verbs.AccessFlags) ([]byte, bool) {
	m.lookups++
	r := m.regions[key]
	if r == nil || r.pd != pd || need&^r.access != 0 || va < r.va ||
		va-r.va+uint64(n) > uint64(len(r.buf)) {
		m.refused++
		return nil, false
	}
	off := va - r.va
	return r.buf[off : off+uint64(n)], true
}

// ---------------------------------------------------------------------
// Completion and receive queues

// fakeCQ records completions.
type fakeCQ struct {
	wcs       []verbs.WC
	solicited []bool
}

func (c *fakeCQ) Push(wc verbs.WC, solicited bool) bool {
	c.wcs = append(c.wcs, wc)
	c.solicited = append(c.solicited, solicited)
	return true
}

// take returns the completions recorded since the last take.
func (c *fakeCQ) take() []verbs.WC {
	w := c.wcs
	c.wcs, c.solicited = nil, nil
	return w
}

// fakeRQ is a receive queue of receive WQEs.
type fakeRQ struct{ q []verbs.RecvWQE }

func (r *fakeRQ) post(wrid uint64, sgl ...verbs.SGE) {
	r.q = append(r.q, verbs.RecvWQE{WRID: wrid, SGL: append([]verbs.SGE(nil), sgl...)})
}

func (r *fakeRQ) Take(dst *verbs.RecvWQE) bool {
	if len(r.q) == 0 {
		return false
	}
	dst.WRID = r.q[0].WRID
	dst.SGL = append(dst.SGL[:0], r.q[0].SGL...)
	r.q = r.q[1:]
	return true
}

func (r *fakeRQ) TakeIfFits(dst *verbs.RecvWQE, need uint64) (taken, present bool) {
	if len(r.q) == 0 {
		return false, false
	}
	if sglLength(r.q[0].SGL) < need {
		return false, true
	}
	return r.Take(dst), true
}

// ---------------------------------------------------------------------
// Emitter

// sent is a packet the QP emitted, parsed.
type sent struct {
	raw []byte
	dst wire.Net
	p   wire.Packet
	// inPlace is the payload slice of a packet emitted with EmitGather
	// (sent from where it lies); nil for a packet built whole.
	inPlace []byte
}

func (s *sent) op() wire.OpCode { return s.p.BTH.OpCode() }
func (s *sent) psn() uint32     { return uint32(s.p.BTH.PSN()) }
func (s *sent) syn() wire.Syndrome {
	if s.p.AETH == nil {
		return 0xff
	}
	return s.p.AETH.Syndrome()
}

func (s *sent) String() string {
	str := fmt.Sprintf("%s psn=%d", s.op(), s.psn())
	if s.p.AETH != nil {
		str += fmt.Sprintf(" %s msn=%d", s.p.AETH.Syndrome(), s.p.AETH.MSN())
	}
	return str
}

// recorder is an Emitter that parses and keeps every packet, failing the
// test on a packet that does not parse or whose ICRC is wrong.
type recorder struct {
	t    testing.TB
	buf  []byte
	pkts []sent
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, buf: make([]byte, link.MaxPacketSize)}
}

func (r *recorder) Buffer() []byte {
	clear(r.buf)
	return r.buf
}

func (r *recorder) Emit(n int, dst *wire.Net) {
	r.t.Helper()
	r.record(sent{raw: bytes.Clone(r.buf[:n]), dst: *dst})
}

// EmitGather (GatherEmitter) records the packet as the link would send
// it: the headers, the payload where it lies, then the pad and ICRC.
func (r *recorder) EmitGather(hdr int, payload []byte, tail int, dst *wire.Net) {
	r.t.Helper()
	raw := append(append(bytes.Clone(r.buf[:hdr]), payload...), r.buf[hdr:hdr+tail]...)
	r.record(sent{raw: raw, dst: *dst, inPlace: payload})
}

// record checks an emitted packet and keeps it.
func (r *recorder) record(s sent) {
	r.t.Helper()
	n := len(s.raw)
	dst := &s.dst
	if d := wire.ParseTransport(s.raw, &s.p); d != wire.DropNone {
		r.t.Fatalf("emitted packet does not parse: %v (% x)", d, s.raw)
	}
	s.p.Net = *dst
	if !wire.CheckICRC(dst, s.raw) {
		r.t.Fatalf("emitted packet %s has a bad ICRC", &s)
	}
	if n > link.MaxPacketSize {
		r.t.Fatalf("emitted packet of %d bytes exceeds link.MaxPacketSize", n)
	}
	r.pkts = append(r.pkts, s)
}

// take returns the packets emitted since the last take.
func (r *recorder) take() []sent {
	p := r.pkts
	r.pkts = nil
	return p
}

// ---------------------------------------------------------------------
// The QP under test

var (
	localAddr = netip.MustParseAddr("10.0.0.1")
	peerAddr  = netip.MustParseAddr("10.0.0.2")
	t0        = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Keys, PSNs and numbers the tests use.
const (
	testPD      = 7
	testQPN     = 0x11
	testPeerQPN = 0x22
	testQKey    = 0x1234
	testMTU     = 256
	testSQPSN   = 1000 // the requester's first PSN
	testRQPSN   = 5000 // the responder's first expected PSN

	lkeySrc  = 0x100 // local source buffer (sends, writes)
	lkeyDst  = 0x200 // local destination buffer (READ, ATOMIC results; receives)
	rkeyPeer = 0x300 // a remote key as the peer names it
	rkeyMem  = 0x400 // the responder's region for WRITE/READ/ATOMIC
	srcVA    = 0x10000
	dstVA    = 0x20000
	memVA    = 0x30000
	peerVA   = 0x40000
	memSize  = 64 << 10
)

// qpt is a transport.QP with fake queues, memory and emitter, driven by
// a test through calls that take the current fake time.
type qpt struct {
	t     testing.TB
	q     *QP
	sq    ring.Ring[SendWQE]
	rq    *fakeRQ
	scq   *fakeCQ
	rcq   *fakeCQ
	mem   *fakeMem
	out   *recorder
	stats *Counters
	now   time.Time
	// budget is the Budget of the next Run (Unlimited by default).
	budget int
	// cc is the device's congestion state (nil: the defaults, no device
	// window).
	cc *Congestion
	// gather: the emitter takes payloads where they lie (Env.Gather).
	gather bool

	src, dst, mem0 []byte // the regions lkeySrc, lkeyDst, rkeyMem
}

// defaultParams are an RC QP's attributes in the tests: path MTU 256,
// every remote access right, transport timer 4.096 us * 2^14 = 67 ms,
// retry_cnt and rnr_retry 3, min_rnr_timer 12 (0.64 ms).
func defaultParams(typ verbs.QPType) Params {
	return Params{
		Type:    typ,
		QPN:     testQPN,
		PD:      testPD,
		DestQPN: testPeerQPN,
		MTU:     testMTU,
		Path: wire.Net{Src: localAddr, Dst: peerAddr, SrcPort: 49152, DstPort: wire.RoCEv2Port,
			DontFragment: true},
		Access:          verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic,
		QKey:            testQKey,
		Timeout:         14,
		RetryCnt:        3,
		RNRRetry:        3,
		MinRNRTimer:     12,
		MaxRdAtomic:     4,
		MaxDestRdAtomic: 4,
	}
}

// newQPT returns a QP of the given parameters in RTS, with three
// registered regions: a readable source, a writable destination, and a
// region the peer may write, read and use for atomics.
func newQPT(t testing.TB, p Params) *qpt { return newQPTSized(t, p, memSize) }

// newQPTSized is newQPT with regions of size bytes.
func newQPTSized(t testing.TB, p Params, size int) *qpt {
	h := &qpt{t: t, rq: &fakeRQ{}, scq: &fakeCQ{}, rcq: &fakeCQ{}, mem: newFakeMem(),
		out: newRecorder(t), stats: &Counters{}, now: t0, budget: Unlimited}
	h.sq = ring.New[SendWQE](64)
	h.q = &QP{P: p, SQ: &h.sq, RQ: h.rq, SendCQ: h.scq, RecvCQ: h.rcq}
	h.src = h.mem.reg(lkeySrc, testPD, srcVA, size, 0)
	h.dst = h.mem.reg(lkeyDst, testPD, dstVA, size, verbs.AccessLocalWrite)
	h.mem0 = h.mem.reg(rkeyMem, testPD, memVA, size,
		verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	for i := range h.src {
		h.src[i] = byte(i*7 + i>>8)
	}
	h.q.SetState(verbs.QPStateInit, 0, 0)
	h.q.SetState(verbs.QPStateRTR, testRQPSN, 0)
	h.q.SetState(verbs.QPStateRTS, testRQPSN, testSQPSN)
	return h
}

func newRC(t testing.TB) *qpt { return newQPT(t, defaultParams(verbs.QPTypeRC)) }

func (h *qpt) env() *Env {
	env := &Env{Now: h.now, Out: h.out, Mem: h.mem, Stats: h.stats, Budget: h.budget, CC: h.cc}
	if h.gather {
		env.Gather = h.out
	}
	return env
}

// fullWindow starts the QP's congestion window at the 128 PSNs IBTA
// allows, for tests of the window itself.
func (h *qpt) fullWindow() *qpt {
	h.cc = NewCongestion(CCConfig{InitialWindow: maxUnackedPSNs, DeviceWindow: -1})
	return h
}

// advance moves the fake time.
func (h *qpt) advance(d time.Duration) { h.now = h.now.Add(d) }

// run calls QP.Run and returns its effects and the packets it emitted.
func (h *qpt) run() (Effects, []sent) {
	fx := h.q.Run(h.env())
	return fx, h.out.take()
}

// runBudget calls QP.Run with a budget of n bytes.
func (h *qpt) runBudget(n int) (Effects, []sent) {
	h.budget = n
	defer func() { h.budget = Unlimited }()
	return h.run()
}

// timer calls QP.Timer.
func (h *qpt) timer() (Effects, []sent) {
	fx := h.q.Timer(h.env())
	return fx, h.out.take()
}

// drops returns the drop counters.
func (h *qpt) drops() map[string]uint64 { return h.stats.Snapshot().DropNames() }

// requireDrops checks the drop counters against want (name: count).
func (h *qpt) requireDrops(want map[DropReason]uint64) {
	h.t.Helper()
	w := map[string]uint64{}
	for d, n := range want {
		w[d.String()] = n
	}
	require.Equal(h.t, w, h.drops())
}

// post queues a send WQE as the qp package does (signaled unless told).
func (h *qpt) post(w SendWQE) {
	h.t.Helper()
	if w.WR.SendFlags&verbs.SendSignaled != 0 {
		w.Signaled = true
	}
	require.True(h.t, h.sq.Push(w), "send queue full")
}

// sendWR returns a signaled SEND of n bytes from the source region at off.
func sendWR(wrid uint64, off, n uint32) SendWQE {
	return SendWQE{
		WR:       verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend},
		SGL:      []verbs.SGE{{Addr: srcVA + uint64(off), Length: n, LKey: lkeySrc}},
		Signaled: true,
	}
}

// writeWR returns a signaled RDMA WRITE of n bytes to the peer.
func writeWR(wrid uint64, n uint32) SendWQE {
	w := sendWR(wrid, 0, n)
	w.WR.Opcode = verbs.WRRDMAWrite
	w.WR.RDMA = verbs.RDMAInfo{RemoteAddr: peerVA, RKey: rkeyPeer}
	return w
}

// readWR returns a signaled RDMA READ of n bytes from the peer into the
// destination region at off.
func readWR(wrid uint64, off, n uint32) SendWQE {
	return SendWQE{
		WR: verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMARead,
			RDMA: verbs.RDMAInfo{RemoteAddr: peerVA, RKey: rkeyPeer}},
		SGL:      []verbs.SGE{{Addr: dstVA + uint64(off), Length: n, LKey: lkeyDst}},
		Signaled: true,
	}
}

// atomicWR returns a signaled ATOMIC whose result goes to the
// destination region at off.
func atomicWR(wrid uint64, op verbs.WROpcode, off uint32, compareAdd, swap uint64) SendWQE {
	return SendWQE{
		WR: verbs.SendWR{WRID: wrid, Opcode: op,
			Atomic: verbs.AtomicInfo{RemoteAddr: peerVA, CompareAdd: compareAdd, Swap: swap, RKey: rkeyPeer}},
		SGL:      []verbs.SGE{{Addr: dstVA + uint64(off), Length: 8, LKey: lkeyDst}},
		Signaled: true,
	}
}

// peerNet is the IP and UDP fields of a packet from the peer.
func (h *qpt) peerNet() wire.Net {
	p := h.q.P.Path
	return wire.Net{Src: p.Dst, Dst: p.Src, SrcPort: 50000, DstPort: wire.RoCEv2Port, DontFragment: true}
}

// packet builds and parses a packet from the peer.
func (h *qpt) packet(hd wire.Headers, payload []byte) *wire.Packet {
	h.t.Helper()
	n := h.peerNet()
	return buildPacket(h.t, &n, hd, payload)
}

func buildPacket(t testing.TB, n *wire.Net, hd wire.Headers, payload []byte) *wire.Packet {
	t.Helper()
	if hd.BTH.PKey == 0 {
		hd.BTH.PKey = 0xffff
	}
	raw := wire.AppendPacket(nil, n, &hd, payload)
	p := new(wire.Packet)
	require.Equal(t, wire.DropNone, wire.ParseTransport(raw, p), "test packet does not parse")
	p.Net = *n
	return p
}

// receive hands the QP a packet from the peer and returns the effects and
// what the QP emitted at once.
func (h *qpt) receive(hd wire.Headers, payload []byte) (Effects, []sent) {
	h.t.Helper()
	fx := h.q.Receive(h.env(), h.packet(hd, payload))
	return fx, h.out.take()
}

// ack is the peer's acknowledgement of psn.
func ack(psn uint32, msn uint32) wire.Headers {
	return aethPacket(wire.RCAcknowledge, psn, wire.ACKSyndrome(wire.CreditsInvalid), msn)
}

// nak is the peer's NAK of psn.
func nak(psn uint32, code wire.NAKCode) wire.Headers {
	return aethPacket(wire.RCAcknowledge, psn, wire.NAKSyndrome(code), 0)
}

// rnrNak is the peer's RNR NAK of psn with the given timer code.
func rnrNak(psn uint32, timer uint8) wire.Headers {
	return aethPacket(wire.RCAcknowledge, psn, wire.RNRNAKSyndrome(timer), 0)
}

func aethPacket(op wire.OpCode, psn uint32, syn wire.Syndrome, msn uint32) wire.Headers {
	var hd wire.Headers
	hd.BTH = wire.BTHFields{OpCode: op, DestQP: testQPN, PSN: wire.MakePSN(psn)}
	hd.AETH = wire.AETHFields{Syndrome: syn, MSN: msn}
	return hd
}

// readResp is a READ response packet.
func readResp(op wire.OpCode, psn uint32) wire.Headers {
	return aethPacket(op, psn, wire.ACKSyndrome(wire.CreditsInvalid), 0)
}

// atomicAck is an ATOMIC acknowledge carrying orig.
func atomicAck(psn uint32, orig uint64) wire.Headers {
	hd := aethPacket(wire.RCAtomicAcknowledge, psn, wire.ACKSyndrome(wire.CreditsInvalid), 0)
	hd.AtomicAckETH = orig
	return hd
}

// request is a request packet from the peer to the QP.
func request(op wire.OpCode, psn uint32) wire.Headers {
	var hd wire.Headers
	hd.BTH = wire.BTHFields{OpCode: op, DestQP: testQPN, PSN: wire.MakePSN(psn), AckReq: op.Info().Pos.Last()}
	return hd
}

// withRETH adds a RETH.
func withRETH(hd wire.Headers, va uint64, rkey, n uint32) wire.Headers {
	hd.RETH = wire.RETHFields{VirtualAddress: va, RKey: rkey, DMALength: n}
	return hd
}

// pattern returns n bytes of a pattern that depends on seed.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i) + byte(i>>8)*3
	}
	return b
}

// ops returns the opcodes of packets.
func ops(pkts []sent) []wire.OpCode {
	o := make([]wire.OpCode, len(pkts))
	for i := range pkts {
		o[i] = pkts[i].op()
	}
	return o
}

// psns returns the PSNs of packets.
func psns(pkts []sent) []uint32 {
	o := make([]uint32, len(pkts))
	for i := range pkts {
		o[i] = pkts[i].psn()
	}
	return o
}

// seq returns n consecutive PSNs from first.
func seq(first uint32, n int) []uint32 {
	o := make([]uint32, n)
	for i := range o {
		o[i] = uint32(wire.MakePSN(first).Add(uint32(i)))
	}
	return o
}

// wcs summarises completions as "wrid:status".
func wcs(ws []verbs.WC) []string {
	o := make([]string, len(ws))
	for i, w := range ws {
		o[i] = fmt.Sprintf("%d:%s", w.WRID, w.Status)
	}
	return o
}

// applyFail does what the qp package does with Effects.Fail: it
// completes the failed work request and moves the QP to its error state.
func (h *qpt) applyFail(fx Effects) {
	switch fx.Fail {
	case FailSend:
		h.q.CompleteHead(fx.Status)
		if h.q.P.Type == verbs.QPTypeRC {
			h.q.SetState(verbs.QPStateErr, 0, 0)
		} else {
			h.q.SetState(verbs.QPStateSQE, 0, 0)
		}
	case FailRecv:
		h.q.CompleteRecvInProgress(fx.Status)
		h.q.SetState(verbs.QPStateErr, 0, 0)
	case FailNone:
	}
}

func u64(b []byte) uint64 { return binary.NativeEndian.Uint64(b) }
