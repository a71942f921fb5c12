package testbench

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

// Timeout bounds every wait for something the DUT must do (send a packet,
// post a completion). It is only ever a failure deadline: nothing waits
// for it to pass.
var Timeout = 10 * time.Second

// Default addresses (TEST-NET-1) and the testbench's UDP source port.
var (
	DefaultDUTAddr   = netip.MustParseAddr("192.0.2.1")
	DefaultPeerAddr  = netip.MustParseAddr("192.0.2.2")
	DefaultOtherAddr = netip.MustParseAddr("192.0.2.99")
)

// DefaultPeerPort is the UDP source port of what the testbench injects
// (RoCEv2 senders use 0xC000 | entropy).
const DefaultPeerPort = 0xc0de

// Config describes the DUT and the testbench's place on the link.
type Config struct {
	// DUT is the DUT's address (its link's LocalAddr, GID index 1).
	DUT netip.Addr
	// Peer is the testbench's address, which the DUT's connected QPs are
	// pointed at.
	Peer netip.Addr
	// PeerPort is the UDP source port of injected packets.
	PeerPort uint16
	// PortMTU is the DUT port's active MTU, the UD message limit; zero
	// keeps the device's default (rxe's 1024).
	PortMTU verbs.MTU
	// Device, if set, adjusts the device configuration before Open.
	Device func(*hca.Config)
}

// Option changes the Config of New.
type Option func(*Config)

// Testbench is one DUT (a softhca device on a Link the testbench owns,
// with a fake clock) and the testbench side of its conversations.
type Testbench struct {
	Cfg   Config
	Link  *Link
	Clock *clock.Fake
	Dev   *hca.Device
	PD    *hca.PD

	nextPeerQPN uint32
	sentinel    *RCConn
}

// New opens a DUT for the test and creates its protection domain and the
// barrier's sentinel QP. The device runs one transport worker, so every
// packet the DUT receives, whichever QP it is for, is handled in arrival
// order: that is what makes Barrier work across QPs. The device is closed
// when the test ends.
func New(t testing.TB, opts ...Option) *Testbench {
	t.Helper()
	cfg := Config{DUT: DefaultDUTAddr, Peer: DefaultPeerAddr, PeerPort: DefaultPeerPort}
	for _, o := range opts {
		o(&cfg)
	}
	tb := &Testbench{
		Cfg:         cfg,
		Link:        NewLink(wire.Net{Src: cfg.DUT, SrcPort: wire.RoCEv2Port}),
		Clock:       clock.NewFake(time.Unix(1_700_000_000, 0)),
		nextPeerQPN: 0xc0de00,
	}
	hc := hca.Config{Link: tb.Link, Clock: tb.Clock, Workers: 1}
	hc.PortAttr.ActiveMTU = cfg.PortMTU
	if cfg.Device != nil {
		cfg.Device(&hc)
	}
	dev, err := hca.Open(hc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	tb.Dev = dev
	tb.PD, err = dev.AllocPD()
	require.NoError(t, err)
	tb.sentinel = tb.NewRC(t, func(c *QPConfig) { c.Access = verbs.AccessRemoteWrite })
	return tb
}

// WithPortMTU sets the DUT port's active MTU.
func WithPortMTU(m verbs.MTU) Option { return func(c *Config) { c.PortMTU = m } }

// WithDevice adjusts the device configuration.
func WithDevice(f func(*hca.Config)) Option { return func(c *Config) { c.Device = f } }

// PeerNet returns the IP/UDP fields of a packet the testbench injects: from
// the testbench's address to the DUT's RoCEv2 port, IPv4 ID 0 and DF set,
// as a UDP socket shows a RoCEv2 datagram.
func (tb *Testbench) PeerNet() wire.Net {
	return wire.Net{
		Src:          tb.Cfg.Peer,
		Dst:          tb.Cfg.DUT,
		SrcPort:      tb.Cfg.PeerPort,
		DstPort:      wire.RoCEv2Port,
		HopLimit:     64,
		DontFragment: true,
	}
}

// Inject builds p (with the faults) and hands it to the DUT. p is taken as
// given: DestQP nil is QP 0 and PSN nil is PSN 0 here; the connections
// fill in their defaults before calling it.
func (tb *Testbench) Inject(t testing.TB, p *Pkt, faults ...Fault) {
	t.Helper()
	pkt, n := build(p, tb.PeerNet(), faults)
	tb.Link.Inject(pkt, n)
}

// InjectRaw hands the DUT a datagram exactly as given.
func (tb *Testbench) InjectRaw(pkt []byte, n wire.Net) { tb.Link.Inject(pkt, n) }

// Next returns the next packet the DUT sends, failing the test when none
// comes within Timeout or when the packet is malformed (every packet the
// DUT sends must parse, carry a good ICRC and zero pad bytes).
func (tb *Testbench) Next(t testing.TB) *Packet {
	t.Helper()
	c, ok := tb.Link.Next(Timeout)
	if !ok {
		t.Fatalf("the DUT sent nothing within %v; drop counters %v", Timeout, tb.Drops())
	}
	pk, err := parseCaptured(c)
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

// Expect returns the next packet the DUT sends and fails the test unless
// it matches m.
func (tb *Testbench) Expect(t testing.TB, m Match) *Packet {
	t.Helper()
	pk := tb.Next(t)
	if bad := m.mismatches(pk); len(bad) > 0 {
		t.Fatalf("the DUT sent %s\n\twhich differs: %s", pk, strings.Join(bad, "; "))
	}
	return pk
}

// Barrier makes sure the DUT has handled everything injected before it,
// and fails the test if the DUT sent anything in answer (or on its own)
// that was not taken yet. It injects a zero-length RDMA WRITE with AckReq
// to the sentinel QP and requires the sentinel's ACK to be the next
// packet the DUT sends. The DUT handles packets in arrival order (one
// worker), and sends what a packet causes before what a later packet
// causes, so a packet sent before the ACK was caused by something earlier,
// and once the ACK has arrived every earlier packet has been handled.
func (tb *Testbench) Barrier(t testing.TB) {
	t.Helper()
	tb.BarrierSkipping(t, nil)
}

// BarrierSkipping is Barrier, except that packets sent before the
// barrier's ACK that allow accepts are taken and returned instead of
// failing the test (for a packet the DUT may or may not send, such as a
// retransmission that is allowed but not required).
func (tb *Testbench) BarrierSkipping(t testing.TB, allow func(*Packet) bool) []*Packet {
	t.Helper()
	s := tb.sentinel
	psn := s.SendPSN
	s.SendPSN = psn.Add(1)
	tb.Inject(t, &Pkt{Op: wire.RCRDMAWriteOnly, PSN: &psn, DestQP: &s.DUTQPN, AckReq: true, RETH: &wire.RETHFields{}})
	m := ACK(psn)
	m.DestQP = &s.TBQPN
	var skipped []*Packet
	for {
		pk := tb.Next(t)
		if len(m.mismatches(pk)) == 0 {
			return skipped
		}
		if allow == nil || !allow(pk) {
			t.Fatalf("the DUT sent %s before the barrier's ACK (it should have sent nothing)", pk)
		}
		skipped = append(skipped, pk)
	}
}

// ExpectNothing fails the test if the DUT sends anything in answer to what
// was injected so far (see Barrier).
func (tb *Testbench) ExpectNothing(t testing.TB) {
	t.Helper()
	tb.Barrier(t)
}

// Drops returns the DUT's non-zero drop counters by name.
func (tb *Testbench) Drops() map[string]uint64 { return dropCounters(tb.Dev) }

// DropDelta returns the counters that changed since before, by how much.
func (tb *Testbench) DropDelta(before map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range tb.Drops() {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// ExpectDropped runs inject, then a Barrier, and requires that the DUT
// answered nothing and counted exactly one dropped packet, under name; an
// empty name accepts any one counter (for a drop whose counter does not
// exist yet). Every dropped packet increments exactly one counter.
func (tb *Testbench) ExpectDropped(t testing.TB, name string, inject func()) {
	t.Helper()
	before := tb.Drops()
	inject()
	tb.Barrier(t)
	d := tb.DropDelta(before)
	if name == "" {
		require.Len(t, d, 1, "want exactly one drop counter to increase, got %v", d)
		for k, v := range d {
			require.EqualValues(t, 1, v, "drop counter %q", k)
			t.Logf("dropped and counted as %q", k)
		}
		return
	}
	require.Equal(t, map[string]uint64{name: 1}, d, "drop counters that changed")
}

// Region is registered memory of the DUT.
type Region struct {
	MR  *hca.MR
	Buf []byte
}

// Mem registers size bytes in the testbench's PD with the access flags.
func (tb *Testbench) Mem(t testing.TB, size int, access verbs.AccessFlags) *Region {
	t.Helper()
	return tb.MemIn(t, tb.PD, size, access)
}

// MemIn registers size bytes in pd.
func (tb *Testbench) MemIn(t testing.TB, pd *hca.PD, size int, access verbs.AccessFlags) *Region {
	t.Helper()
	buf := make([]byte, size)
	mr, err := pd.RegMR(buf, access)
	require.NoError(t, err)
	return &Region{MR: mr, Buf: buf}
}

// AllAccess is every MR access right.
const AllAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// VA returns the virtual address of offset off.
func (r *Region) VA(off int) uint64 { return r.MR.Addr() + uint64(off) }

// RKey returns the region's R_Key.
func (r *Region) RKey() uint32 { return r.MR.RKey() }

// SGE returns a scatter/gather element for n bytes at offset off.
func (r *Region) SGE(off, n int) verbs.SGE {
	return verbs.SGE{Addr: r.VA(off), Length: uint32(n), LKey: r.MR.LKey()}
}

// RETH returns a RETH naming n bytes at offset off of the region.
func (r *Region) RETH(off, n int) *wire.RETHFields {
	return &wire.RETHFields{VirtualAddress: r.VA(off), RKey: r.RKey(), DMALength: uint32(n)}
}

// CQ is a completion queue of the DUT with its own completion channel,
// so that waiting for a completion blocks on the channel instead of
// polling.
type CQ struct {
	*hca.CQ
	getEvent func(ctx context.Context) error
	pending  []verbs.WC
}

// NewCQ creates a CQ with a completion channel.
func (tb *Testbench) NewCQ(t testing.TB) *CQ {
	t.Helper()
	ch, err := tb.Dev.CreateCompChannel()
	require.NoError(t, err)
	c, err := tb.Dev.CreateCQ(256, ch, nil, 0)
	require.NoError(t, err)
	return &CQ{CQ: c, getEvent: func(ctx context.Context) error {
		_, err := ch.GetEvent(ctx)
		return err
	}}
}

func (c *CQ) take(n int) []verbs.WC {
	buf := make([]verbs.WC, 64)
	for len(c.pending) < n {
		k := c.Poll(buf)
		if k == 0 {
			break
		}
		c.pending = append(c.pending, buf[:k]...)
	}
	k := min(n, len(c.pending))
	out := append([]verbs.WC(nil), c.pending[:k]...)
	c.pending = c.pending[k:]
	return out
}

// Wait returns the next n completions, failing the test if they do not
// all arrive within Timeout.
func (c *CQ) Wait(t testing.TB, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	var out []verbs.WC
	for {
		out = append(out, c.take(n-len(out))...)
		if len(out) == n {
			return out
		}
		require.NoError(t, c.ReqNotify(false))
		// A completion added before the arm fires nothing: look again.
		if out = append(out, c.take(n-len(out))...); len(out) == n {
			return out
		}
		if err := c.getEvent(ctx); err != nil {
			t.Fatalf("waited for %d completions, got %d: %s", n, len(out), FormatWCs(out))
		}
		c.AckEvents(1)
	}
}

// Next returns the next completion (see Wait).
func (c *CQ) Next(t testing.TB) verbs.WC {
	t.Helper()
	return c.Wait(t, 1)[0]
}

// Drain returns the completions queued now, without waiting.
func (c *CQ) Drain() []verbs.WC { return c.take(1 << 30) }

// RequireEmpty fails the test if a completion is queued. Call it after a
// Barrier to know that the DUT has handled what could have completed.
func (c *CQ) RequireEmpty(t testing.TB) {
	t.Helper()
	if wcs := c.Drain(); len(wcs) > 0 {
		t.Fatalf("unexpected completions: %s", FormatWCs(wcs))
	}
}

// FormatWCs describes completions for failure messages.
func FormatWCs(wcs []verbs.WC) string {
	var b strings.Builder
	b.WriteString("[")
	for i, w := range wcs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{wr_id %#x %s %s len %d}", w.WRID, w.Opcode, w.Status, w.ByteLen)
	}
	b.WriteString("]")
	return b.String()
}

// RequireWC checks a completion's WR ID, status and opcode.
func RequireWC(t testing.TB, wc verbs.WC, wrid uint64, status verbs.WCStatus, op verbs.WCOpcode) {
	t.Helper()
	require.Equal(t, wrid, wc.WRID, "wr_id of %s", FormatWCs([]verbs.WC{wc}))
	require.Equal(t, status.String(), wc.Status.String(), "status of wr_id %#x", wc.WRID)
	if status == verbs.WCSuccess {
		require.Equal(t, op.String(), wc.Opcode.String(), "opcode of wr_id %#x", wc.WRID)
	}
}

// RequireAllReturned requires that wcs hold exactly one completion for
// each of the WR IDs, none of them successful, and returns them by WR ID:
// libibverbs users get every posted receive back, completed with an error
// or flushed (ibv_poll_cq(3), IBTA 10.3.1).
func RequireAllReturned(t testing.TB, wcs []verbs.WC, wrids ...uint64) map[uint64]verbs.WC {
	t.Helper()
	got := map[uint64]verbs.WC{}
	for _, w := range wcs {
		_, dup := got[w.WRID]
		require.False(t, dup, "wr_id %#x completed twice: %s", w.WRID, FormatWCs(wcs))
		got[w.WRID] = w
		require.NotEqual(t, verbs.WCSuccess.String(), w.Status.String(), "wr_id %#x", w.WRID)
	}
	var ids []uint64
	for id := range got {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	want := append([]uint64(nil), wrids...)
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	require.Equal(t, want, ids, "receive WR IDs returned: %s", FormatWCs(wcs))
	return got
}

// TransportTimeout is the requester's transport timer for the QP
// attribute timeout: 4.096 us * 2^timeout (IBTA 9.7.6.1.3).
func TransportTimeout(timeout uint8) time.Duration {
	return time.Duration(4096*(uint64(1)<<timeout)) * time.Nanosecond
}

// RNRDelay is the minimum RNR NAK delay the 5-bit timer code stands for
// (IBTA 9.7.5.2.8, table 45).
func RNRDelay(code uint8) time.Duration {
	return time.Duration(wire.RNRTimerMicros(code)) * time.Microsecond
}
