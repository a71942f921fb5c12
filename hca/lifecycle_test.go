package hca_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/internal/clock"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/link/udp"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
	"github.com/stretchr/testify/require"
)

var (
	lifecycleIterations    = flag.Int("lifecycle.iterations", 100, "iterations of each TestLifecycleUnderTraffic case over link/pipe (the full run: 1000)")
	lifecycleUDPIterations = flag.Int("lifecycle.udp.iterations", 10, "iterations of each TestLifecycleUnderTraffic case over link/udp")
	lifecycleSeed          = flag.Uint64("lifecycle.seed", 0, "seed of TestLifecycleUnderTraffic's random choices; 0 draws one (it is logged)")
)

// The shape of one iteration: lcConns RC connections between two devices,
// lcWRs send work requests posted on each QP (so 2*lcConns*lcWRs in all,
// both directions), each owning lcSlot bytes of memory on either side.
const (
	lcConns = 3
	lcWRs   = 12
	lcSlot  = 64 << 10
)

// lcSizes are the message sizes drawn: zero, sub-packet, packet edges at
// MTU 1024 and 4096, multi-packet.
var lcSizes = []int{0, 1, 7, 64, 1000, 1024, 1025, 4096, 5000, 9000, 16384, 40000, lcSlot}

// lcAction is what an iteration does to the traffic at a random moment.
type lcAction int

const (
	// Nothing: the control case, which checks the test's own model of
	// the traffic (patterns, atomics, completions) on undisturbed runs.
	actNone lcAction = iota
	// DeregMR of a region remote peers WRITE, READ, SEND and do atomics
	// into (the responder's memory).
	actDeregTarget
	// DeregMR of a region a requester gathers from (WRITE, SEND) and
	// scatters READ responses and atomic results into.
	actDeregSource
	// DeregMR of a target region while only atomics run, on every
	// connection, both ways: the responder's check of the R_Key and its
	// use of the word must be one.
	actDeregAtomicTarget
	// Destroy of a QP in RTS, traffic in flight both ways.
	actDestroyQP
	// Modify to ERR, then Destroy.
	actDestroyQPAfterErr
	// Close of a device with work outstanding on its QPs.
	actCloseDevice
	numActions
)

var lcActionNames = [...]string{"Control", "DeregTarget", "DeregSource", "DeregAtomicTarget", "DestroyQP", "DestroyQPAfterErr", "CloseDevice"}

func (a lcAction) String() string { return lcActionNames[a] }

// TestLifecycleUnderTraffic attacks the lifecycle verbs while RC traffic
// of every kind (RDMA WRITE, RDMA READ, fetch-and-add, compare-and-swap,
// SEND) runs in both directions on several connections between two
// devices. In each iteration, at a random moment (after a random number
// of completions, mostly in the first half, and a random number of
// yields), it does what its case says: DeregMR of a target region,
// DeregMR of a source region, DeregMR of a target region while only
// atomics run, Destroy of a QP (moved to ERR first or not), Close of a
// device; the Control case does nothing and checks the test's own model.
// Then it lets the traffic finish, moves what is left to ERR, closes the
// devices and asserts:
//
//   - Nothing touches a region after its DeregMR returned: the test fills
//     it with a guard pattern at once (the memory is the application's
//     again, ibv_dereg_mr(3)) and finds the guard intact at the end. The
//     same holds, after Destroy returned, for the memory only the
//     destroyed QP's traffic touches.
//   - No stale or foreign byte is delivered: every byte pattern is unique
//     to the iteration, device, region and slot, so a READ that completes
//     successfully must return exactly what the target held, and an
//     atomic exactly the value the in-order model predicts. An operation
//     that cannot be carried out completes with an error status instead.
//   - A WRITE or SEND that completes successfully landed wholly; a SEND
//     that completes successfully has its receive completed too.
//   - After Destroy returned, no completion for the QP reaches its CQ and
//     no packet of the QP is handed to the link.
//   - After Close of a device, every work request outstanding on its QPs
//     (send and receive) completes, successfully or with
//     IBV_WC_WR_FLUSH_ERR, and its CQ can still be polled; no packet
//     leaves the closed device.
//   - Every work request completes at most once, on the QP it was posted
//     to; no goroutine is left once the devices are closed; no panic.
//
// Where a region was deregistered or a QP destroyed while an operation
// was in flight, the test reads the operation's bytes from the snapshot
// it took the moment the verb returned: an operation that completes
// successfully must have landed by then, since nothing may land after.
//
// Over link/pipe the devices run on a fake clock that never advances: no
// transport timer fires, so an operation can end only through the
// protocol itself (ACK, NAK, response) or a flush, and a status such as
// IBV_WC_RETRY_EXC_ERR cannot appear. The pipe makes every ordering
// between the devices visible to the race detector. Over link/udp (real
// clock, fewer iterations) the same assertions hold; the race detector
// sees the memory ordering there too, because the test fills all memory
// before the devices are opened (their goroutines start after it) and
// reads it only after a verb that fences the engine, or after Close.
//
// Some windows are narrow: an atomic whose R_Key check passes just before
// DeregMR and whose add lands just after is caught at once by the race
// detector (the add is not ordered before the test's guard), and only
// rarely, as a panic or a broken guard, without it.
//
// -lifecycle.iterations sets the iterations per case over the pipe
// (default 100; the full run is 1000), -lifecycle.udp.iterations over UDP
// (default 10), -lifecycle.seed the seed (logged, to replay a failure).
func TestLifecycleUnderTraffic(t *testing.T) {
	seed := *lifecycleSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -lifecycle.seed=%d)", seed, seed)
	for _, transport := range []string{"pipe", "udp"} {
		iters := *lifecycleIterations
		if transport == "udp" {
			iters = *lifecycleUDPIterations
		}
		t.Run(transport, func(t *testing.T) {
			for a := range numActions {
				t.Run(a.String(), func(t *testing.T) {
					start := time.Now()
					var tally lcTally
					var mem lcMemory
					for i := range iters {
						r := newLCRun(t, transport, a, seed, i)
						r.mem = &mem
						r.run()
						tally.add(r)
					}
					t.Logf("%d iterations in %v: %s", iters, time.Since(start).Round(time.Millisecond), tally.String())
				})
			}
		})
	}
}

// lcTally sums the outcomes of a case's iterations for the log.
type lcTally struct {
	status  map[verbs.WCStatus]int
	recvs   map[verbs.WCStatus]int
	pending int // send WRs of destroyed QPs that never completed
}

func (s *lcTally) add(r *lcRun) {
	if s.status == nil {
		s.status, s.recvs = map[verbs.WCStatus]int{}, map[verbs.WCStatus]int{}
	}
	for _, d := range r.devs {
		for _, q := range d.qps {
			for _, w := range q.wrs {
				if w.wc == nil {
					s.pending++
					continue
				}
				s.status[w.wc.Status]++
			}
			for _, rv := range q.recvs {
				if rv.wc != nil {
					s.recvs[rv.wc.Status]++
				}
			}
		}
	}
}

func (s *lcTally) String() string {
	f := func(m map[verbs.WCStatus]int) string {
		keys := make([]int, 0, len(m))
		for k := range m {
			keys = append(keys, int(k))
		}
		sort.Ints(keys)
		var b strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%d", verbs.WCStatus(k), m[verbs.WCStatus(k)])
		}
		return b.String()
	}
	return fmt.Sprintf("send completions:%s; receive completions:%s; send WRs lost with their destroyed QP: %d", f(s.status), f(s.recvs), s.pending)
}

// lcRun is one iteration.
type lcRun struct {
	t         *testing.T
	transport string
	action    lcAction
	iter      int
	seed      uint64 // the iteration's seed: patterns and choices
	rng       *rand.Rand
	clk       *clock.Fake // nil over UDP
	devs      [2]*lcDev
	qps       []*lcQP
	plan      [2][lcConns][lcWRs]lcPlanned
	mem       *lcMemory
	// Who did what to whom, for failure messages.
	what string
	// closedDev is the device the CloseDevice action closed.
	closedDev *lcDev

	// Violations seen by the trace hooks (engine goroutines) and the
	// completion handler; reported at the end of the iteration.
	mu         sync.Mutex
	violations []string
	nviol      atomic.Int64
}

// lcMemory is the memory of a case's iterations, reused: each iteration
// fills what it uses, and what it does not use still holds an earlier
// iteration's bytes, which no check may ever see.
type lcMemory struct {
	regions [2][2][]byte // [device][L, T]
	snaps   [2][2][]byte
}

func (m *lcMemory) region(dev, kind int) ([]byte, []byte) {
	if m.regions[dev][kind] == nil {
		m.regions[dev][kind] = make([]byte, lcRegionSize)
		m.snaps[dev][kind] = make([]byte, lcRegionSize)
	}
	return m.regions[dev][kind], m.snaps[dev][kind]
}

// lcDev is one device of an iteration.
type lcDev struct {
	r      *lcRun
	idx    int
	dev    *hca.Device
	pd     *hca.PD
	cq     *hca.CQ
	L, T   *lcRegion
	qps    []*lcQP // by connection
	byNum  map[uint32]*lcQP
	sends  map[uint64]*lcWR
	recvs  map[uint64]*lcRecv
	closed atomic.Bool // set once Close returned
	// sender maps a destination QP number to the QP of this device that
	// sends to it: read by the trace hook.
	sender map[uint32]*lcQP
}

// lcRegion is a registered buffer. fences are the byte ranges the
// application took back (DeregMR, or Destroy of the only QP whose traffic
// touches them); snap holds what they held at that moment, and the live
// buffer holds the guard pattern from then on.
type lcRegion struct {
	name   string
	buf    []byte
	mr     *hca.MR
	snap   []byte
	fences []lcFence
}

// lcFence is a range [off, end) the application took back, and the seed
// of the guard pattern it filled the range with.
type lcFence struct {
	off, end int
	guard    uint64
}

// lcQP is one QP of an iteration and the work posted on it.
type lcQP struct {
	dev  *lcDev
	conn int
	qp   *hca.QP
	num  uint32
	peer *lcQP
	// gone is set as soon as Destroy returned; destroyed once the
	// completions pushed before that were polled.
	gone      atomic.Bool
	destroyed atomic.Bool
	wrs       []*lcWR
	recvs     []*lcRecv // receives posted on this QP
	model     uint64    // the peer's atomic word after every atomic of this QP
}

// lcWR is one send work request.
type lcWR struct {
	qp       *lcQP
	idx      int
	id       uint64
	op       verbs.WROpcode
	size     int
	wantOrig uint64  // atomics: the original value the model predicts
	recv     *lcRecv // SEND: the receive it consumes
	wc       *verbs.WC
}

// lcRecv is one receive work request, posted for a SEND of the peer.
type lcRecv struct {
	qp   *lcQP
	id   uint64
	send *lcWR
	wc   *verbs.WC
}

const lcRecvBit = 1 << 63

// Offsets: slot s (lcSlot bytes) of a region belongs to work request
// s%lcWRs of connection s/lcWRs. In the requester's L it is the WRITE or
// SEND source, the READ destination or the atomic result; in the
// responder's T the WRITE target, the READ source or the receive buffer.
// T ends with one 8-byte atomic word per connection.
func lcSlotOff(conn, i int) int { return (conn*lcWRs + i) * lcSlot }
func lcWordOff(conn int) int    { return lcConns*lcWRs*lcSlot + conn*8 }

const lcRegionSize = lcConns*lcWRs*lcSlot + lcConns*8

func newLCRun(t *testing.T, transport string, a lcAction, seed uint64, iter int) *lcRun {
	s := lcMix(seed ^ lcMix(uint64(a)<<32|uint64(iter)))
	if transport == "udp" {
		s = lcMix(s ^ 0x75647000)
	}
	return &lcRun{t: t, transport: transport, action: a, iter: iter, seed: s, rng: rand.New(rand.NewPCG(s, 0x6c6966))}
}

// lcMix is the SplitMix64 finaliser.
func lcMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Pattern seeds: each byte the test ever expects names its iteration,
// device, role and slot, so a stale byte (an earlier iteration, another
// connection, another slot, a transmit buffer's leftovers) cannot match.
func (r *lcRun) seedL(dev, slot int) uint64 {
	return lcMix(r.seed ^ 0x100000000 ^ uint64(dev)<<24 ^ uint64(slot))
}
func (r *lcRun) seedT(dev, slot int) uint64 {
	return lcMix(r.seed ^ 0x200000000 ^ uint64(dev)<<24 ^ uint64(slot))
}
func (r *lcRun) wordInit(dev, conn int) uint64 {
	return lcMix(r.seed ^ 0x300000000 ^ uint64(dev)<<24 ^ uint64(conn))
}
func (r *lcRun) guardSeed(dev int, region string) uint64 {
	return lcMix(r.seed ^ 0x400000000 ^ uint64(dev)<<24 ^ uint64(region[0]))
}

// lcFill fills dst with the pattern of seed; a prefix of a slot's pattern
// is the pattern of the same seed with a shorter length.
func lcFill(dst []byte, seed uint64) {
	x := seed
	var w [8]byte
	for len(dst) > 0 {
		x = x*6364136223846793005 + 1442695040888963407
		binary.LittleEndian.PutUint64(w[:], lcMix(x))
		dst = dst[copy(dst, w[:]):]
	}
}

func lcPattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	lcFill(b, seed)
	return b
}

// violate records an assertion failure seen where t.Fatal cannot be
// called (trace hooks) or should not stop the iteration before its
// remaining checks.
func (r *lcRun) violate(format string, args ...any) {
	if r.nviol.Add(1) > 20 {
		return
	}
	r.mu.Lock()
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// trace is a device's Config.Trace: no packet may leave a QP after its
// Destroy returned, nor a device after its Close returned.
func (d *lcDev) trace(dir hca.Direction, p *link.Packet) {
	if dir != hca.Sent {
		return
	}
	if d.closed.Load() {
		d.r.violate("device %d handed a packet to its link after its Close returned", d.idx)
		return
	}
	if len(p.Buf) < wire.BTHSize {
		return
	}
	bth := wire.BTH(p.Buf[:wire.BTHSize])
	if q := d.sender[bth.DestQP()]; q != nil && q.gone.Load() {
		d.r.violate("QP %#x (device %d) sent %s PSN %d after its Destroy returned", q.num, d.idx, bth.OpCode(), bth.PSN())
	}
}

func (r *lcRun) run() {
	t := r.t
	before := runtime.NumGoroutine()

	// The work first, then the memory it uses, filled before the
	// devices exist (see the test comment on UDP and the race detector):
	// only the bytes a request reads are filled, the rest stays zero.
	r.draw()
	for i := range r.devs {
		d := &lcDev{r: r, idx: i, byNum: map[uint32]*lcQP{}, sends: map[uint64]*lcWR{}, recvs: map[uint64]*lcRecv{}, sender: map[uint32]*lcQP{},
			L: &lcRegion{name: fmt.Sprintf("device %d source region", i)},
			T: &lcRegion{name: fmt.Sprintf("device %d target region", i)}}
		d.L.buf, d.L.snap = r.mem.region(i, 0)
		d.T.buf, d.T.snap = r.mem.region(i, 1)
		r.devs[i] = d
	}
	for i, d := range r.devs {
		peer := r.devs[1-i]
		for c := range lcConns {
			binary.NativeEndian.PutUint64(d.T.buf[lcWordOff(c):], r.wordInit(i, c))
			for k, w := range r.plan[i][c] {
				s := c*lcWRs + k
				switch w.op {
				case verbs.WRRDMAWrite, verbs.WRSend:
					lcFill(d.L.buf[s*lcSlot:][:w.size], r.seedL(i, s))
				case verbs.WRRDMARead:
					lcFill(peer.T.buf[s*lcSlot:][:w.size], r.seedT(1-i, s))
				default: // atomics work on their word, not a slot
				}
			}
		}
	}
	r.openDevices()
	defer func() {
		// On a failed iteration, leave nothing running.
		for _, d := range r.devs {
			if !d.closed.Load() {
				_ = d.dev.Close()
			}
		}
	}()
	mtu := []verbs.MTU{verbs.MTU1024, verbs.MTU4096}[r.rng.IntN(2)]
	for _, d := range r.devs {
		var err error
		d.pd, err = d.dev.AllocPD()
		require.NoError(t, err)
		d.cq, err = d.dev.CreateCQ(4*lcConns*lcWRs, nil, nil, 0)
		require.NoError(t, err)
		acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
		d.L.mr, err = d.pd.RegMR(d.L.buf, acc)
		require.NoError(t, err)
		d.T.mr, err = d.pd.RegMR(d.T.buf, acc)
		require.NoError(t, err)
	}
	for c := range lcConns {
		a, b := r.devs[0].newQP(c), r.devs[1].newQP(c)
		a.peer, b.peer = b, a
		r.devs[0].sender[b.num] = a
		r.devs[1].sender[a.num] = b
		lcConnect(t, a, b, mtu, r.rng)
		lcConnect(t, b, a, mtu, r.rng)
	}

	r.post()

	// The random moment: after k completions, then a few yields.
	total := 0
	for _, q := range r.qps {
		total += len(q.wrs)
	}
	// Mostly while much is in flight: the first half of the completions.
	k := r.rng.IntN(total/2 + 1)
	r.waitFor(fmt.Sprintf("%d of %d completions before the %s", k, total, r.action), func() bool { return r.completed() >= k })
	for range r.rng.IntN(64) {
		runtime.Gosched()
	}
	r.act()

	// Let the traffic end: connections that nothing broke finish on
	// their own, and a closed device's work completes.
	r.waitFor("the traffic to end after the "+r.action.String(), r.settled)
	// The rest (QPs whose peer is gone or in error) is flushed.
	for _, d := range r.devs {
		if d.closed.Load() {
			continue
		}
		for _, q := range d.qps {
			if !q.destroyed.Load() {
				require.NoError(t, q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState))
			}
		}
	}
	r.waitFor("every work request to complete once its QP is in ERR", func() bool { return r.outstanding(func(*lcQP) bool { return true }) == 0 })
	for _, d := range r.devs {
		if !d.closed.Load() {
			require.NoError(t, d.dev.Close())
			d.closed.Store(true)
		}
	}
	r.pollAll() // after Close: nothing more may come
	waitGoroutines(t, before)
	r.check()
}

// openDevices opens the two devices over a pipe (fake clock) or UDP.
func (r *lcRun) openDevices() {
	t := r.t
	d0, d1 := r.devs[0], r.devs[1]
	switch r.transport {
	case "pipe":
		r.clk = clock.NewFake(time.Unix(1000, 0))
		// Capacity well above what an iteration has in flight: the pipe
		// never drops, so no transport timer is needed.
		la, lb := pipe.New(pipe.Config{Seed: r.seed, Capacity: 1 << 15})
		var err error
		d0.dev, err = hca.Open(hca.Config{Link: la, Clock: r.clk, Trace: d0.trace})
		require.NoError(t, err)
		d1.dev, err = hca.Open(hca.Config{Link: lb, Clock: r.clk, Trace: d1.trace})
		require.NoError(t, err)
	case "udp":
		open := func() *udp.Link {
			l, err := udp.Open(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0")})
			require.NoError(t, err)
			return l
		}
		la, lb := open(), open()
		na, _ := la.LocalAddr()
		nb, _ := lb.LocalAddr()
		var err error
		d0.dev, err = hca.Open(hca.Config{Link: la, PeerPort: nb.SrcPort, Trace: d0.trace})
		require.NoError(t, err)
		d1.dev, err = hca.Open(hca.Config{Link: lb, PeerPort: na.SrcPort, Trace: d1.trace})
		require.NoError(t, err)
	}
}

func (d *lcDev) newQP(conn int) *lcQP {
	t := d.r.t
	qp, err := d.pd.CreateQP(&hca.QPInitAttr{SendCQ: d.cq, RecvCQ: d.cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: lcWRs, MaxRecvWR: lcWRs, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	q := &lcQP{dev: d, conn: conn, qp: qp, num: qp.Num()}
	d.qps = append(d.qps, q)
	d.byNum[q.num] = q
	d.r.qps = append(d.r.qps, q)
	return q
}

// lcConnect brings q to RTS, connected to p, with random start PSNs.
func lcConnect(t *testing.T, q, p *lcQP, mtu verbs.MTU, rng *rand.Rand) {
	t.Helper()
	gid, err := p.dev.dev.QueryGID(1, 1)
	require.NoError(t, err)
	require.NoError(t, q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1,
		QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	// The PSNs are the same on both sides of a direction: derive them
	// from the QP numbers, not from the shared generator's order.
	psn := func(sender, receiver uint32) uint32 {
		return uint32(lcMix(uint64(sender)<<32|uint64(receiver))) & 0xffffff
	}
	require.NoError(t, q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: mtu, DestQPNum: p.num,
		RQPSN: psn(p.num, q.num), MaxDestRdAtomic: 8, MinRNRTimer: 1,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: 1, HopLimit: 64}}},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	require.NoError(t, q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: psn(q.num, p.num), Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 8},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
}

// lcPlanned is a send work request drawn before the memory is filled.
type lcPlanned struct {
	op   verbs.WROpcode
	size int
	// Atomics: the add, or the swap and whether the compare fails.
	arg     uint64
	cmpFail bool
}

// draw draws every QP's work: plan[device][connection][i].
func (r *lcRun) draw() {
	ops := []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp, verbs.WRSend}
	if r.action == actDeregAtomicTarget {
		ops = []verbs.WROpcode{verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp}
	}
	for d := range r.plan {
		for c := range r.plan[d] {
			for i := range r.plan[d][c] {
				w := lcPlanned{op: ops[r.rng.IntN(len(ops))], size: lcSizes[r.rng.IntN(len(lcSizes))], arg: r.rng.Uint64(), cmpFail: r.rng.IntN(3) == 0}
				if w.op.IsAtomic() {
					w.size = 8
				}
				r.plan[d][c][i] = w
			}
		}
	}
}

// post posts the drawn work: first the receives the SENDs need on the
// peer, then the send work requests round-robin over the QPs so that
// both directions of every connection run at once.
func (r *lcRun) post() {
	t := r.t
	for _, q := range r.qps {
		q.model = r.wordInit(q.peer.dev.idx, q.conn)
		for i, p := range r.plan[q.dev.idx][q.conn] {
			w := &lcWR{qp: q, idx: i, id: uint64(q.dev.idx)<<40 | uint64(q.conn)<<32 | uint64(i), op: p.op, size: p.size}
			if w.op == verbs.WRSend {
				rv := &lcRecv{qp: q.peer, id: lcRecvBit | w.id, send: w}
				w.recv = rv
				q.peer.recvs = append(q.peer.recvs, rv)
				q.peer.dev.recvs[rv.id] = rv
				_, err := q.peer.qp.PostRecv(&verbs.RecvWR{WRID: rv.id, SGList: []verbs.SGE{q.peer.dev.T.mr.SGE(lcSlotOff(q.conn, i), lcSlot)}})
				require.NoError(t, err)
			}
			q.wrs = append(q.wrs, w)
			q.dev.sends[w.id] = w
		}
	}
	for i := range lcWRs {
		for _, q := range r.qps {
			w, p := q.wrs[i], r.plan[q.dev.idx][q.conn][i]
			peerT := q.peer.dev.T.mr
			wr := &verbs.SendWR{WRID: w.id, Opcode: w.op, SendFlags: verbs.SendSignaled,
				SGList: []verbs.SGE{q.dev.L.mr.SGE(lcSlotOff(q.conn, i), w.size)}}
			switch w.op {
			case verbs.WRRDMAWrite, verbs.WRRDMARead:
				wr.RDMA = verbs.RDMAInfo{RemoteAddr: peerT.Addr() + uint64(lcSlotOff(q.conn, i)), RKey: peerT.RKey()}
			case verbs.WRAtomicFetchAndAdd:
				wr.Atomic = verbs.AtomicInfo{RemoteAddr: peerT.Addr() + uint64(lcWordOff(q.conn)), RKey: peerT.RKey(), CompareAdd: p.arg}
				w.wantOrig = q.model
				q.model += p.arg
			case verbs.WRAtomicCmpAndSwp:
				cmp := q.model
				if p.cmpFail {
					cmp = ^cmp
				}
				wr.Atomic = verbs.AtomicInfo{RemoteAddr: peerT.Addr() + uint64(lcWordOff(q.conn)), RKey: peerT.RKey(), CompareAdd: cmp, Swap: p.arg}
				w.wantOrig = q.model
				if !p.cmpFail {
					q.model = p.arg
				}
			default: // SEND: the scatter list is all
			}
			_, err := q.qp.PostSend(wr)
			require.NoError(t, err)
		}
	}
}

// act does the iteration's action at the chosen moment.
func (r *lcRun) act() {
	t := r.t
	d := r.devs[r.rng.IntN(2)]
	switch r.action {
	case actNone:
		r.what = "no action"
	case actDeregTarget, actDeregSource, actDeregAtomicTarget:
		reg := d.T
		if r.action == actDeregSource {
			reg = d.L
		}
		r.what = "DeregMR of the " + reg.name
		require.NoError(t, reg.mr.Dereg())
		reg.fence(0, len(reg.buf), r.guardSeed(d.idx, reg.name))
	case actDestroyQP, actDestroyQPAfterErr:
		q := d.qps[r.rng.IntN(len(d.qps))]
		r.what = fmt.Sprintf("Destroy of QP %#x (device %d, connection %d)", q.num, d.idx, q.conn)
		if r.action == actDestroyQPAfterErr {
			require.NoError(t, q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.AttrState))
		}
		require.NoError(t, q.qp.Destroy(context.Background()))
		q.gone.Store(true)
		// What was pushed before Destroy returned may be polled now;
		// nothing for q may come after.
		r.pollAll()
		q.destroyed.Store(true)
		// The memory only q's traffic touches is the application's
		// again: q's sources and destinations in L, its peer's targets
		// in T and the atomic word.
		g := r.guardSeed(d.idx, "destroy")
		d.L.fence(lcSlotOff(q.conn, 0), lcWRs*lcSlot, g)
		d.T.fence(lcSlotOff(q.conn, 0), lcWRs*lcSlot, g^1)
		d.T.fence(lcWordOff(q.conn), 8, g^2)
	case actCloseDevice:
		r.what = fmt.Sprintf("Close of device %d", d.idx)
		r.closedDev = d
		require.NoError(t, d.dev.Close())
		d.closed.Store(true)
	default:
		t.Fatalf("unknown action %d", r.action)
	}
}

// fence takes back [off, off+n) for the application: it keeps what the
// range holds and fills it with the guard pattern.
func (g *lcRegion) fence(off, n int, seed uint64) {
	copy(g.snap[off:off+n], g.buf[off:off+n])
	lcFill(g.buf[off:off+n], seed)
	g.fences = append(g.fences, lcFence{off, off + n, seed})
}

// view returns the bytes [off, off+n) as they are now, or as they were
// when the range was fenced.
func (g *lcRegion) view(t *testing.T, off, n int) []byte {
	for _, f := range g.fences {
		switch {
		case off >= f.off && off+n <= f.end:
			return g.snap[off : off+n]
		case off < f.end && off+n > f.off:
			t.Fatalf("%s: range %d+%d straddles the fence [%d, %d)", g.name, off, n, f.off, f.end)
		}
	}
	return g.buf[off : off+n]
}

// pollAll takes every completion queued on every device's CQ.
func (r *lcRun) pollAll() {
	wcs := make([]verbs.WC, 32)
	for _, d := range r.devs {
		for {
			n := d.cq.Poll(wcs)
			for i := range wcs[:n] {
				d.handle(wcs[i])
			}
			if n == 0 {
				break
			}
		}
	}
}

func (d *lcDev) handle(wc verbs.WC) {
	r := d.r
	q := d.byNum[wc.QPNum]
	if q == nil {
		r.violate("device %d: completion for unknown QP %#x: %+v", d.idx, wc.QPNum, wc)
		return
	}
	if q.destroyed.Load() {
		r.violate("device %d: completion for QP %#x pushed after its Destroy returned: WRID %#x %s %s", d.idx, q.num, wc.WRID, wc.Opcode, wc.Status)
		return
	}
	if wc.WRID&lcRecvBit != 0 {
		rv := d.recvs[wc.WRID]
		switch {
		case rv == nil:
			r.violate("device %d QP %#x: receive completion with unknown WRID %#x", d.idx, q.num, wc.WRID)
		case rv.qp != q:
			r.violate("device %d: receive %#x posted on QP %#x completed on QP %#x", d.idx, wc.WRID, rv.qp.num, q.num)
		case rv.wc != nil:
			r.violate("device %d QP %#x: receive %#x completed twice (%s, then %s)", d.idx, q.num, wc.WRID, rv.wc.Status, wc.Status)
		default:
			c := wc
			rv.wc = &c
		}
		return
	}
	w := d.sends[wc.WRID]
	switch {
	case w == nil:
		r.violate("device %d QP %#x: send completion with unknown WRID %#x", d.idx, q.num, wc.WRID)
	case w.qp != q:
		r.violate("device %d: send WR %#x posted on QP %#x completed on QP %#x", d.idx, wc.WRID, w.qp.num, q.num)
	case w.wc != nil:
		r.violate("device %d QP %#x: send WR %#x completed twice (%s, then %s)", d.idx, q.num, wc.WRID, w.wc.Status, wc.Status)
	default:
		c := wc
		w.wc = &c
	}
}

// completed returns how many send work requests completed so far.
func (r *lcRun) completed() int {
	n := 0
	for _, q := range r.qps {
		for _, w := range q.wrs {
			if w.wc != nil {
				n++
			}
		}
	}
	return n
}

// outstanding counts the work requests (send and receive) without a
// completion on the QPs that match, destroyed QPs excepted.
func (r *lcRun) outstanding(match func(*lcQP) bool) int {
	n := 0
	for _, q := range r.qps {
		if q.destroyed.Load() || !match(q) {
			continue
		}
		for _, w := range q.wrs {
			if w.wc == nil {
				n++
			}
		}
		for _, rv := range q.recvs {
			if rv.wc == nil {
				n++
			}
		}
	}
	return n
}

// broken reports whether q's connection can no longer make progress on
// its own: one side is destroyed, on a closed device, or in an error
// state (its peer then waits for a transport timer that, on the fake
// clock, never fires).
func (q *lcQP) broken() bool {
	for _, x := range []*lcQP{q, q.peer} {
		if x.gone.Load() || x.dev.closed.Load() {
			return true
		}
		if st := x.qp.State(); st == verbs.QPStateErr || st == verbs.QPStateSQE {
			return true
		}
	}
	return false
}

// settled reports whether the traffic has ended: every send on a
// connection that nothing broke completed, and every work request on a
// closed device's QPs completed.
func (r *lcRun) settled() bool {
	for _, q := range r.qps {
		if q.dev.closed.Load() {
			if r.outstanding(func(x *lcQP) bool { return x == q }) > 0 {
				return false
			}
			continue
		}
		if q.broken() {
			continue
		}
		for _, w := range q.wrs {
			if w.wc == nil {
				return false
			}
		}
	}
	return true
}

// waitFor polls the CQs until cond holds, failing after a generous
// deadline (a hang, not slowness: it is 30 s).
func (r *lcRun) waitFor(what string, cond func() bool) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.pollAll()
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("iteration %d (%s, %s): timed out waiting for %s\n%s", r.iter, r.transport, r.what, what, r.dump())
		}
		runtime.Gosched()
	}
}

// dump describes the work still outstanding, for failure messages.
func (r *lcRun) dump() string {
	var b strings.Builder
	for _, q := range r.qps {
		var open []string
		for _, w := range q.wrs {
			if w.wc == nil {
				open = append(open, fmt.Sprintf("%d:%s/%d", w.idx, w.op, w.size))
			}
		}
		nrecv := 0
		for _, rv := range q.recvs {
			if rv.wc == nil {
				nrecv++
			}
		}
		fmt.Fprintf(&b, "  device %d QP %#x (conn %d, peer %#x) state %s destroyed=%v closed=%v: %d sends outstanding %v, %d receives outstanding\n",
			q.dev.idx, q.num, q.conn, q.peer.num, q.qp.State(), q.destroyed.Load(), q.dev.closed.Load(), len(open), open, nrecv)
	}
	for _, d := range r.devs {
		fmt.Fprintf(&b, "  device %d transport: %v\n", d.idx, d.dev.TransportStats().DropNames())
	}
	return b.String()
}

// check runs the iteration's assertions once everything is closed.
func (r *lcRun) check() {
	t := r.t
	fail := func(format string, args ...any) { r.violate(format, args...) }
	for _, q := range r.qps {
		d, peer := q.dev, q.peer.dev
		allAtomicsOK := true
		for _, w := range q.wrs {
			if w.wc == nil {
				if !q.destroyed.Load() {
					fail("QP %#x WR %d (%s) never completed", q.num, w.idx, w.op)
				}
				if w.op.IsAtomic() {
					allAtomicsOK = false
				}
				continue
			}
			wc := w.wc
			if r.closedDev == d && wc.Status != verbs.WCSuccess && wc.Status != verbs.WCWRFlushErr {
				fail("QP %#x of the closed device: WR %d (%s) completed with %s; outstanding work must complete successfully or with IBV_WC_WR_FLUSH_ERR", q.num, w.idx, w.op, wc.Status)
			}
			if wc.Status != verbs.WCSuccess {
				if w.op.IsAtomic() {
					allAtomicsOK = false
				}
				continue
			}
			if wc.Opcode != verbs.WCOpcodeFor(w.op) {
				fail("QP %#x WR %d (%s): completion opcode %s", q.num, w.idx, w.op, wc.Opcode)
			}
			slot := lcSlotOff(q.conn, w.idx)
			switch w.op {
			case verbs.WRRDMAWrite, verbs.WRSend:
				got := peer.T.view(t, slot, w.size)
				if want := lcPattern(w.size, r.seedL(d.idx, q.conn*lcWRs+w.idx)); !bytes.Equal(got, want) {
					fail("QP %#x WR %d: %s of %d bytes completed successfully but the target holds other bytes (%s)", q.num, w.idx, w.op, w.size, lcDiff(got, want))
				}
				if w.op == verbs.WRSend {
					if rv := w.recv; rv.wc == nil || rv.wc.Status != verbs.WCSuccess {
						fail("QP %#x WR %d: SEND completed successfully but its receive on QP %#x completed with %v", q.num, w.idx, q.peer.num, lcStatus(rv.wc))
					}
				}
			case verbs.WRRDMARead:
				if wc.ByteLen != uint32(w.size) {
					fail("QP %#x WR %d: READ of %d bytes completed with byte_len %d", q.num, w.idx, w.size, wc.ByteLen)
				}
				got := d.L.view(t, slot, w.size)
				if want := lcPattern(w.size, r.seedT(peer.idx, q.conn*lcWRs+w.idx)); !bytes.Equal(got, want) {
					fail("QP %#x WR %d: READ of %d bytes completed successfully with bytes the target never held (%s)", q.num, w.idx, w.size, lcDiff(got, want))
				}
			default:
				if got := binary.NativeEndian.Uint64(d.L.view(t, slot, 8)); got != w.wantOrig {
					fail("QP %#x WR %d: %s completed successfully returning %#x, the word held %#x", q.num, w.idx, w.op, got, w.wantOrig)
				}
			}
		}
		if allAtomicsOK {
			if got := binary.NativeEndian.Uint64(peer.T.view(t, lcWordOff(q.conn), 8)); got != q.model {
				fail("QP %#x: every atomic completed successfully, but the peer's word is %#x, not %#x", q.num, got, q.model)
			}
		}
		for _, rv := range q.recvs {
			if rv.wc == nil {
				if !q.destroyed.Load() {
					fail("QP %#x: receive for WR %d of QP %#x never completed", q.num, rv.send.idx, q.peer.num)
				}
				continue
			}
			if r.closedDev == d && rv.wc.Status != verbs.WCSuccess && rv.wc.Status != verbs.WCWRFlushErr {
				fail("QP %#x of the closed device: a receive completed with %s", q.num, rv.wc.Status)
			}
			if rv.wc.Status != verbs.WCSuccess {
				continue
			}
			s := rv.send
			if rv.wc.ByteLen != uint32(s.size) || rv.wc.Opcode != verbs.WCRecv {
				fail("QP %#x: receive for a SEND of %d bytes completed as %s with byte_len %d", q.num, s.size, rv.wc.Opcode, rv.wc.ByteLen)
			}
			got := d.T.view(t, lcSlotOff(q.conn, s.idx), s.size)
			if want := lcPattern(s.size, r.seedL(peer.idx, q.conn*lcWRs+s.idx)); !bytes.Equal(got, want) {
				fail("QP %#x: receive completed successfully but the buffer holds other bytes than the SEND's (%s)", q.num, lcDiff(got, want))
			}
		}
	}
	// Guards: nothing landed after the application took memory back.
	for _, d := range r.devs {
		for _, g := range []*lcRegion{d.L, d.T} {
			for _, f := range g.fences {
				if want := lcPattern(f.end-f.off, f.guard); !bytes.Equal(g.buf[f.off:f.end], want) {
					fail("%s: bytes [%d, %d) were written after the application took them back (%s): %s", g.name, f.off, f.end, r.what, lcDiff(g.buf[f.off:f.end], want))
				}
			}
		}
	}
	if n := r.nviol.Load(); n > 0 {
		t.Fatalf("iteration %d (%s, seed %#x): %s: %d violations:\n  %s", r.iter, r.transport, r.seed, r.what, n, strings.Join(r.violations, "\n  "))
	}
}

func lcStatus(wc *verbs.WC) string {
	if wc == nil {
		return "nothing"
	}
	return wc.Status.String()
}

// lcDiff describes where got first differs from want.
func lcDiff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	first, n := -1, 0
	for i := range got {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	if first < 0 {
		return "equal"
	}
	end := min(first+8, len(got))
	return fmt.Sprintf("%d of %d bytes differ, first at offset %d: % x, want % x", n, len(got), first, got[first:end], want[first:end])
}

var benchObjects = flag.Int("bench.objects", 100_000, "QPs (BenchmarkCreateQPs) or MRs (BenchmarkRegMRs) created and destroyed per benchmark op")

// benchWindows times n calls of f (i = 0..n-1) and returns the time taken
// by the first and by the last window of calls: equal per-call times say
// the cost of a call does not grow with the number of objects.
func benchWindows(n, window int, f func(i int)) (first, last, total time.Duration) {
	start := time.Now()
	var lastStart time.Time
	for i := range n {
		switch i {
		case window:
			first = time.Since(start)
		case n - window:
			lastStart = time.Now()
		}
		f(i)
	}
	if n == window {
		first = time.Since(start)
		lastStart = start
	}
	return first, time.Since(lastStart), time.Since(start)
}

// benchReport reports a phase's per-object cost over b.N runs: its
// average, and over its first and last windows.
func benchReport(b *testing.B, what string, first, last, total time.Duration, n, window int) {
	per := func(d time.Duration, k int) float64 { return float64(d.Nanoseconds()) / float64(k*b.N) }
	b.ReportMetric(per(total, n), "ns/"+what)
	w := strconv.Itoa(window)
	if window%1000 == 0 {
		w = strconv.Itoa(window/1000) + "k"
	}
	b.ReportMetric(per(first, window), "ns/"+what+"-first"+w)
	b.ReportMetric(per(last, window), "ns/"+what+"-last"+w)
}

func benchWindow(n int) int { return max(1, min(10_000, n/10)) }

// BenchmarkCreateQPs creates -bench.objects RC QPs (small caps, one CQ)
// on a device with a link, then destroys them in the order they were
// created, and reports the cost per QP of the first and the last 10,000
// of each: with an O(1) amortised create and destroy they are equal. One
// op is the whole cycle.
func BenchmarkCreateQPs(b *testing.B) {
	n, window := *benchObjects, benchWindow(*benchObjects)
	la, lb := pipe.New(pipe.Config{})
	defer func() { _ = lb.Close() }()
	dev, err := hca.Open(hca.Config{Link: la})
	require.NoError(b, err)
	defer func() { _ = dev.Close() }()
	pd, err := dev.AllocPD()
	require.NoError(b, err)
	cq, err := dev.CreateCQ(16, nil, nil, 0)
	require.NoError(b, err)
	init := &hca.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	qps := make([]*hca.QP, n)
	var cf, cl, ct, df, dl, dt time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f, l, tot := benchWindows(n, window, func(i int) {
			if qps[i], err = pd.CreateQP(init); err != nil {
				b.Fatalf("create_qp %d: %v", i, err)
			}
		})
		cf, cl, ct = cf+f, cl+l, ct+tot
		f, l, tot = benchWindows(n, window, func(i int) {
			if err := qps[i].Destroy(context.Background()); err != nil {
				b.Fatalf("destroy_qp %d: %v", i, err)
			}
			qps[i] = nil
		})
		df, dl, dt = df+f, dl+l, dt+tot
	}
	benchReport(b, "create", cf, cl, ct, n, window)
	benchReport(b, "destroy", df, dl, dt, n, window)
}

// BenchmarkRegMRs registers -bench.objects memory regions of 64 bytes
// each, then deregisters them in the order they were registered, and
// reports the cost per MR of the first and the last 10,000 of each: with
// an O(1) amortised registration they are equal. One op is the whole
// cycle.
func BenchmarkRegMRs(b *testing.B) {
	n, window := *benchObjects, benchWindow(*benchObjects)
	la, lb := pipe.New(pipe.Config{})
	defer func() { _ = lb.Close() }()
	dev, err := hca.Open(hca.Config{Link: la})
	require.NoError(b, err)
	defer func() { _ = dev.Close() }()
	pd, err := dev.AllocPD()
	require.NoError(b, err)
	const size = 64
	mem := make([]byte, n*size)
	mrs := make([]*hca.MR, n)
	var rf, rl, rt, df, dl, dt time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		f, l, tot := benchWindows(n, window, func(i int) {
			if mrs[i], err = pd.RegMR(mem[i*size:(i+1)*size:(i+1)*size], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
				b.Fatalf("reg_mr %d: %v", i, err)
			}
		})
		rf, rl, rt = rf+f, rl+l, rt+tot
		f, l, tot = benchWindows(n, window, func(i int) {
			if err := mrs[i].Dereg(); err != nil {
				b.Fatalf("dereg_mr %d: %v", i, err)
			}
			mrs[i] = nil
		})
		df, dl, dt = df+f, dl+l, dt+tot
	}
	benchReport(b, "reg", rf, rl, rt, n, window)
	benchReport(b, "dereg", df, dl, dt, n, window)
}

// TestBusyPollPollWaitAfterClose: with BusyPoll, a PollWait on a CQ of a
// closed device sleeps in the CQ's wait, as without busy polling,
// instead of spinning until its context ends (its polls no longer drive
// anything); a flush completion, or the context's end, wakes it.
func TestBusyPollPollWaitAfterClose(t *testing.T) {
	x, y := udpPairConfig(t, true, 4096, hca.Config{BusyPoll: true})
	connect(t, x, y, verbs.QPTypeRC, verbs.MTU1024)
	require.NoError(t, x.dev.Close())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	wcs := make([]verbs.WC, 4)
	go func() {
		n, err := x.cq.PollWait(ctx, wcs)
		done <- result{n, err}
	}()
	// The waiter must reach the CQ's wait: a spinning one never does
	// (it would return only when ctx ends).
	deadline := time.Now().Add(10 * time.Second)
	for !goroutineIn("cq.(*CQ).Wait", "TestBusyPollPollWaitAfterClose") {
		if time.Now().After(deadline) {
			cancel()
			r := <-done
			t.Fatalf("PollWait on a closed BusyPoll device did not sleep: it spun until its context ended (%d, %v)", r.n, r.err)
		}
		runtime.Gosched()
	}
	// A receive posted now is flushed at once, and wakes the waiter.
	_, err := x.qp.PostRecv(&verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{x.mr.SGE(0, 64)}})
	require.NoError(t, err)
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, 1, r.n)
	require.Equal(t, uint64(7), wcs[0].WRID)
	require.Equal(t, verbs.WCWRFlushErr, wcs[0].Status)
}

// goroutineIn reports whether a goroutine created by creator (a function
// name) has fn on its stack.
func goroutineIn(fn, creator string) bool {
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, fn) && strings.Contains(g, "created by") && strings.Contains(g[strings.Index(g, "created by"):], creator) {
			return true
		}
	}
	return false
}
