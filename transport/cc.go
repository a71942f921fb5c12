package transport

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/softhca/softhca/wire"
)

// Congestion control. A RoCE NIC runs DCQCN (a rate per QP, cut when
// CNPs come back from ECN-marked packets) on a lossless fabric; softhca
// runs on ordinary lossy networks too, so it adds what TCP does, and
// every QP of a device sends under three bounds:
//
//   - the window (RC requester): packets sent and not acknowledged. It
//     starts at CCConfig.InitialWindow, grows by the packets each ACK
//     covers up to ssthresh and by one packet per window after
//     (congestion avoidance), and halves (never below MinWindow) on a
//     sequence-error NAK, three duplicate ACKs or a transport timeout,
//     once per window of packets. It never exceeds the 128 PSNs IBTA
//     and rxe allow.
//   - the rate (every QP: requests, READ responses, UC): DCQCN's reaction
//     point. A QP sends unpaced until its first congestion signal (a
//     CNP, or as a READ responder the duplicate READ that asks for
//     responses it lost); the rate then starts at what the QP was
//     sending at (or CCConfig.LineRate), is cut by DCQCN's
//     rate*(1-alpha/2), and recovers every RateIncreasePeriod (fast
//     recovery towards the rate before the cut, then additive and hyper
//     increase of that target); once back at the rate it started from,
//     the QP is unpaced again. Packets leave a token bucket of RateBurst
//     bytes, so GSO super-packets stay but follow the rate.
//   - the device window: packets of every RC QP of the device sent and
//     not acknowledged (CCConfig.DeviceWindow), so that all QPs' windows
//     together stay below the queue a path can hold.
//   - the device rate (CCConfig.DeviceRate, off by default): the bytes
//     every QP of the device builds (requests, READ responses, UC and UD
//     messages; not ACKs and CNPs), paced at one rate. It is the bound
//     for a path that gives no feedback: a UC peer that sends no CNP
//     (rxe) behind a queue that drains slower than this machine sends.
//
// A QP that receives a packet marked CE (ECN 0b11) answers with a CNP
// (BTH opcode 0x81, RoCEv2 annex A17.9) to its peer QP, at most one per
// CNPInterval, as a DCQCN notification point does.

// CCConfig configures a device's congestion control. The zero value
// takes every default; a negative window or rate turns that bound off.
type CCConfig struct {
	// InitialWindow and MinWindow are the RC window's start and floor,
	// in packets: defaults 16 and 8 (at most 128, the PSN window).
	InitialWindow, MinWindow int
	// DeviceWindow bounds the RC packets in flight across all the
	// device's QPs: default 256 (a quarter of a default 1000-packet
	// interface queue, which a slow peer drains within the 67 ms
	// transport timer rdma-core's tools set); negative: no bound.
	DeviceWindow int
	// LineRate, in bits per second, is the rate a QP's pacing starts
	// and recovers to after its first congestion signal. 0: the rate the
	// QP was sending at when the signal came (a user-space device does
	// not know its line rate).
	LineRate float64
	// MinRate, in bits per second, is the floor of the rate: default 10
	// Mbit/s.
	MinRate float64
	// RateBurst is the token bucket of a paced QP, in bytes: default
	// 65536 (one GSO super-packet).
	RateBurst int
	// RateIncreasePeriod is DCQCN's timer: every period without a CNP,
	// alpha decays and the rate recovers a step; the rate is cut at
	// most once a period. Default 300 us (mlx5's rpg_time_reset).
	RateIncreasePeriod time.Duration
	// AdditiveIncrease and HyperIncrease, in bits per second, raise the
	// target rate per period after FastRecoverySteps periods without a
	// cut (and after twice as many, hyper). Defaults 5 Mbit/s and 50
	// Mbit/s (mlx5's rpg_ai_rate and rpg_hai_rate).
	AdditiveIncrease, HyperIncrease float64
	// FastRecoverySteps is DCQCN's F: default 5.
	FastRecoverySteps int
	// AlphaGain is DCQCN's g: default 1/256.
	AlphaGain float64
	// CNPInterval is the least time between two CNPs a QP sends:
	// default 50 us.
	CNPInterval time.Duration
	// RateCutInterval is the least time between two cuts of a QP's rate
	// for CNPs: the CNPs that answer the marks of one burst ask for the
	// same cut. Default 300 us (a RateIncreasePeriod).
	RateCutInterval time.Duration
	// DeviceRate, in bits per second, paces everything the device's QPs
	// send, together, with bursts of RateBurst bytes. 0 (the default): no
	// device rate.
	DeviceRate float64
}

// withDefaults returns c with every unset field given its default.
func (c CCConfig) withDefaults() CCConfig {
	setInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setInt(&c.InitialWindow, 16)
	setInt(&c.MinWindow, 8)
	setInt(&c.DeviceWindow, 256)
	setInt(&c.RateBurst, 65536)
	setInt(&c.FastRecoverySteps, 5)
	c.InitialWindow = min(max(c.InitialWindow, 1), maxUnackedPSNs)
	c.MinWindow = min(max(c.MinWindow, 1), c.InitialWindow)
	if c.MinRate == 0 {
		c.MinRate = 10e6
	}
	if c.RateIncreasePeriod == 0 {
		c.RateIncreasePeriod = 300 * time.Microsecond
	}
	if c.AdditiveIncrease == 0 {
		c.AdditiveIncrease = 5e6
	}
	if c.HyperIncrease == 0 {
		c.HyperIncrease = 50e6
	}
	if c.AlphaGain == 0 {
		c.AlphaGain = 1.0 / 256
	}
	if c.CNPInterval == 0 {
		c.CNPInterval = 50 * time.Microsecond
	}
	if c.RateCutInterval == 0 {
		c.RateCutInterval = 300 * time.Microsecond
	}
	return c
}

// Congestion is a device's shared congestion state: its configuration
// and the device window. Every QP's protocol calls reach it through Env.
type Congestion struct {
	cfg CCConfig
	// inflight holds the QPs' packets in flight (window.held), one
	// counter per worker, each on its own cache line: a worker writes
	// only its own, and the device window is their sum.
	inflight []paddedCount
	// pacer is the device rate, shared by every worker.
	pacer devicePacer
}

// devicePacer paces the device's packets at CCConfig.DeviceRate with the
// generic cell rate algorithm (a token bucket kept as one number, so that
// every worker updates it with a compare-and-swap): tat is the time, in
// Unix nanoseconds of the device's clock, at which everything sent so far
// will have left at the rate; a packet may leave while tat is at most
// burst ahead of now.
type devicePacer struct {
	nsPerByte float64 // 0: no device rate
	burst     int64   // ns
	_         [48]byte
	tat       atomic.Int64
}

// maxHeaders bounds the headers of a packet the pacers charge (BTH,
// RETH or AtomicETH or DETH, ImmDt, ICRC): a QP stopped by the device
// rate pays in advance for its MTU plus these.
const maxHeaders = 64

// maxPacerLead bounds how far ahead of now tat may be: a wall clock set
// back (or a clock swapped in tests) must not stop the device for long.
const maxPacerLead = int64(time.Second)

func newDevicePacer(c *CCConfig) devicePacer {
	if c.DeviceRate <= 0 {
		return devicePacer{}
	}
	ns := 8e9 / c.DeviceRate
	return devicePacer{nsPerByte: ns, burst: int64(float64(c.RateBurst) * ns)}
}

// wait returns how long the device rate holds a packet of n more bytes
// than the bucket allows now (0: it may leave).
func (p *devicePacer) wait(now time.Time, n int) time.Duration {
	if p.nsPerByte == 0 {
		return 0
	}
	t := now.UnixNano()
	tat := p.tat.Load()
	if lead := tat + int64(float64(n)*p.nsPerByte) - t; lead > p.burst && tat-t < maxPacerLead {
		return time.Duration(lead - p.burst)
	}
	return 0
}

// reserve returns 0 if a packet may leave now; otherwise it pays for n
// bytes in advance and returns when the packet may leave. The QPs the
// device rate stops thus leave in the order they were stopped: a QP
// whose turn comes does not find the room taken by one that happened to
// run first.
func (p *devicePacer) reserve(now time.Time, n int) time.Duration {
	if p.nsPerByte == 0 {
		return 0
	}
	t := now.UnixNano()
	cost := int64(float64(n) * p.nsPerByte)
	for {
		old := p.tat.Load()
		lead := old - t
		if lead <= p.burst || lead >= maxPacerLead {
			return 0
		}
		if p.tat.CompareAndSwap(old, old+cost) {
			return time.Duration(lead - p.burst)
		}
	}
}

// settle charges n more bytes than a reservation paid for, or gives
// back -n bytes it paid for and did not use.
func (p *devicePacer) settle(now time.Time, n int) {
	if p.nsPerByte == 0 || n == 0 {
		return
	}
	if n > 0 {
		p.sent(now, n)
		return
	}
	p.tat.Add(-int64(float64(-n) * p.nsPerByte))
}

// sent charges n bytes sent at now.
func (p *devicePacer) sent(now time.Time, n int) {
	if p.nsPerByte == 0 {
		return
	}
	t := now.UnixNano()
	cost := int64(float64(n) * p.nsPerByte)
	for {
		old := p.tat.Load()
		next := max(old, t) + cost
		if old-t >= maxPacerLead {
			next = t + cost
		}
		if p.tat.CompareAndSwap(old, next) {
			return
		}
	}
}

type paddedCount struct {
	n atomic.Int64
	_ [56]byte
}

// ccShards is how many counters a Congestion keeps: QPs of workers
// beyond it share them.
const ccShards = 8

// NewCongestion returns the congestion state of a device.
func NewCongestion(cfg CCConfig) *Congestion { return newCongestion(cfg, 1) }

// newCongestion returns the congestion state of a device whose QPs run
// on shards workers.
func newCongestion(cfg CCConfig, shards int) *Congestion {
	c := &Congestion{cfg: cfg.withDefaults(), inflight: make([]paddedCount, min(max(shards, 1), ccShards))}
	c.pacer = newDevicePacer(&c.cfg)
	return c
}

// Config returns the configuration with its defaults.
func (c *Congestion) Config() CCConfig { return c.cfg }

// room returns how many more packets the device window lets the QPs send
// now (a large number without a device window).
func (c *Congestion) room() int {
	if c.cfg.DeviceWindow < 0 {
		return Unlimited
	}
	return c.cfg.DeviceWindow - c.InFlight()
}

// InFlight returns the RC packets in flight across the device.
func (c *Congestion) InFlight() int {
	n := int64(0)
	for i := range c.inflight {
		n += c.inflight[i].n.Load()
	}
	return int(n)
}

// defaultCongestion serves protocol calls whose Env has none (unit
// tests): defaults, no device window.
var defaultCongestion = NewCongestion(CCConfig{DeviceWindow: -1})

func (e *Env) cc() *Congestion {
	if e.CC == nil {
		return defaultCongestion
	}
	return e.CC
}

// window is the RC requester's congestion window.
type window struct {
	cwnd, ssthresh int // packets; cwnd 0 until first used
	acc            int // congestion avoidance: packets acknowledged towards the next increase
	// recover: a congestion signal for a PSN before it belongs to the
	// episode already answered by a cut.
	recover wire.PSN
	cut     bool
	dupAcks int
	// held is what this QP counts in the device window, in dev's
	// counter shard (dev nil until the first count).
	held  int
	dev   *Congestion
	shard int
}

// size returns the window in packets.
func (w *window) size(env *Env) int {
	if w.cwnd == 0 {
		c := &env.cc().cfg
		w.cwnd, w.ssthresh = c.InitialWindow, maxUnackedPSNs
	}
	return w.cwnd
}

// onAck grows the window by n newly acknowledged packets.
func (w *window) onAck(env *Env, n int) {
	if n <= 0 || w.cwnd == 0 {
		return
	}
	w.dupAcks = 0
	before := w.cwnd
	if w.cwnd < w.ssthresh {
		w.cwnd += n // slow start
	} else {
		w.acc += n
		for w.acc >= w.cwnd {
			w.acc -= w.cwnd
			w.cwnd++
		}
	}
	w.cwnd = min(w.cwnd, maxUnackedPSNs)
	if w.cwnd > before {
		env.Stats.WindowIncreases.Add(1)
	}
}

// congestion halves the window for a loss signal about psn, once per
// window of packets: a signal for a PSN sent before the last cut
// belongs to the episode that cut answered. A timeout always cuts.
func (w *window) congestion(env *Env, psn, maxPSN wire.PSN, timeout bool) {
	if w.cwnd == 0 {
		w.size(env)
	}
	if !timeout && w.cut && psn.Diff(w.recover) < 0 {
		return
	}
	c := &env.cc().cfg
	w.ssthresh = max(w.cwnd/2, c.MinWindow)
	w.cwnd, w.acc = w.ssthresh, 0
	w.recover, w.cut = maxPSN, true
	env.Stats.WindowCuts.Add(1)
}

// duplicateAck counts a repeated acknowledgement: the third in a row is
// a congestion signal (the peer received packets twice: a go-back
// resent more than was lost).
func (w *window) duplicateAck(env *Env, psn, maxPSN wire.PSN) {
	w.dupAcks++
	if w.dupAcks == 3 {
		w.congestion(env, psn, maxPSN, false)
	}
}

// settle makes the device window count what the QP has in flight now.
func (w *window) settle(env *Env, inflight int) {
	if inflight == w.held {
		return
	}
	if w.dev == nil {
		if env.CC == nil {
			return
		}
		w.dev, w.shard = env.CC, env.CCShard%len(env.CC.inflight)
	}
	w.dev.inflight[w.shard].n.Add(int64(inflight - w.held))
	w.held = inflight
}

// release gives back what the QP counts in the device window (the QP
// stopped sending: SQE, ERR, RESET).
func (w *window) release() {
	if w.dev != nil && w.held != 0 {
		w.dev.inflight[w.shard].n.Add(int64(-w.held))
	}
	w.held = 0
}

// deviceRoom returns how many more packets the device window lets the
// QPs send now (a large number without a device window).
func (w *window) deviceRoom(env *Env) int {
	if env.CC == nil {
		return Unlimited
	}
	return env.CC.room()
}

// rateControl is a QP's DCQCN reaction point and pacer, and its
// notification point (the CNPs it sends).
type rateControl struct {
	paced bool
	// rate is the current rate (DCQCN's Rc), target the rate before the
	// last cut (Rt), ceiling the rate pacing started from; bytes/s.
	rate, target, ceiling float64
	alpha                 float64
	steps                 int       // increase periods since the last cut
	updated               time.Time // the last period's end
	// The token bucket: tokens bytes at tokensAt.
	tokens   float64
	tokensAt time.Time
	// waitUntil: the QP stopped for the pacer until then (Deadline).
	waitUntil time.Time
	// The rate the QP has been sending at, measured over at least
	// measurePeriod.
	measured   float64
	measBytes  float64
	measPkts   uint32
	measureAt  time.Time
	lastCNP    time.Time
	cnpEverSet bool
	cutAt      time.Time // the last cut
	lastSent   time.Time // when the QP last built a packet
	// The device rate: bytes paid for in advance, for a packet that may
	// leave from devSlot on.
	devReserved int
	devSlot     time.Time
}

const measurePeriod = 200 * time.Microsecond

// quietPeriods: a QP that sent nothing for this many rate increase
// periods is quiet, and its quiet time earns no increase.
const quietPeriods = 10

// sent records size bytes built. The measured rate is the highest
// rate over a measurePeriod seen lately (it decays by a tenth a
// period), so that pauses between bursts do not hide how fast the QP
// sends.
func (rc *rateControl) sent(env *Env, size int) {
	if p := &env.cc().pacer; p.nsPerByte != 0 {
		if rc.devReserved > 0 {
			// Paid for when the device rate stopped the QP (for the
			// largest packet: what this one did not use goes back).
			p.settle(env.Now, size-rc.devReserved)
			rc.devReserved = 0
		} else {
			p.sent(env.Now, size)
		}
	}
	rc.lastSent = env.Now
	if rc.paced {
		rc.tokens -= float64(size)
	}
	rc.measBytes += float64(size)
	if rc.measureAt.IsZero() {
		rc.measureAt = env.Now
		return
	}
	if rc.measPkts++; rc.measPkts&7 != 0 {
		return // the clock is read every 8th packet
	}
	if d := env.Now.Sub(rc.measureAt); d >= measurePeriod {
		rc.measured = max(rc.measBytes/d.Seconds(), rc.measured*0.9)
		rc.measBytes, rc.measureAt = 0, env.Now
	}
}

// pacing reports whether a pacer may hold the QP back (its rate, or the
// device rate): when not, allow and hasRoomAfter need not be asked. It
// does not change during a Run (a rate starts with a CNP or a loss, which
// a receive brings).
func (rc *rateControl) pacing(env *Env) bool {
	return rc.paced || rc.devReserved > 0 || env.cc().pacer.nsPerByte != 0
}

// allow reports whether the pacers let the QP build another packet, of
// at most maxSize bytes, now; if not, waitUntil says when they will.
func (rc *rateControl) allow(env *Env, maxSize int) bool {
	if !rc.waitUntil.IsZero() {
		rc.waitUntil = time.Time{} // Run is running: the wait, if any, is over
	}
	if !rc.pacing(env) {
		return true // the common case: nothing paces the QP
	}
	switch {
	case rc.devReserved > 0:
		if env.Now.Before(rc.devSlot) {
			rc.waitUntil = rc.devSlot // run early (an ACK): the turn has not come
			return false
		}
	default:
		if wait := env.cc().pacer.reserve(env.Now, maxSize); wait > 0 {
			rc.devReserved, rc.devSlot = maxSize, env.Now.Add(wait)
			rc.waitUntil = rc.devSlot
			env.Stats.DeviceRateWaits.Add(1)
			return false
		}
	}
	if !rc.paced {
		return true
	}
	rc.recoverTo(env)
	if !rc.paced {
		return true
	}
	c := &env.cc().cfg
	if el := env.Now.Sub(rc.tokensAt); el > 0 {
		rc.tokens = min(float64(c.RateBurst), rc.tokens+el.Seconds()*rc.rate)
		rc.tokensAt = env.Now
	}
	if rc.tokens > 0 {
		return true
	}
	wait := time.Duration(-rc.tokens/rc.rate*1e9) + time.Microsecond
	rc.waitUntil = env.Now.Add(wait)
	env.Stats.PacerWaits.Add(1)
	return false
}

// hasRoomAfter reports whether the pacers will let another packet go
// after one of n bytes (an estimate: the buckets refill meanwhile).
func (rc *rateControl) hasRoomAfter(env *Env, n uint32) bool {
	if p := &env.cc().pacer; p.nsPerByte != 0 && p.wait(env.Now, int(n)) > 0 {
		return false
	}
	return !rc.paced || rc.tokens > float64(n)
}

// deadline is when a QP the pacer stopped may send again; zero if none.
// It stays set until Timer runs the QP, even if a rate change (a CNP,
// the end of pacing) lets the QP send sooner: only a Run restarts it.
func (rc *rateControl) deadline() time.Time { return rc.waitUntil }

// startPacing starts pacing a QP that was not paced, at the rate it
// starts from: CCConfig.LineRate, or the rate it was sending at.
func (rc *rateControl) startPacing(env *Env) {
	c := &env.cc().cfg
	start := c.LineRate / 8
	if start <= 0 {
		start = rc.measured
		if d := env.Now.Sub(rc.measureAt); rc.measBytes > 0 && d > 0 {
			start = max(start, rc.measBytes/d.Seconds())
		}
	}
	if start <= 0 {
		start = 1e9 / 8
	}
	start = max(start, c.MinRate/8)
	rc.paced, rc.ceiling, rc.rate, rc.target, rc.alpha = true, start, start, start, 1
	rc.tokens, rc.tokensAt = float64(c.RateBurst), env.Now
	rc.steps, rc.updated = 0, env.Now
}

// congestion cuts the rate for a CNP, as DCQCN's reaction point:
// Rt = Rc, Rc = Rc(1 - alpha/2), alpha = (1-g)alpha + g; at most once a
// RateCutInterval (the CNPs that follow one burst's marks ask for the
// same cut: on a path whose queue delays the marks, cutting for each
// would take the rate to its floor).
func (rc *rateControl) congestion(env *Env) {
	c := &env.cc().cfg
	if rc.paced {
		if env.Now.Sub(rc.cutAt) < c.RateCutInterval {
			return
		}
		rc.recoverTo(env)
	}
	if !rc.paced {
		rc.startPacing(env)
	}
	rc.target = rc.rate
	rc.rate = max(c.MinRate/8, rc.rate*(1-rc.alpha/2))
	rc.alpha = (1-c.AlphaGain)*rc.alpha + c.AlphaGain
	rc.steps, rc.updated, rc.cutAt = 0, env.Now, env.Now
	env.Stats.RateCuts.Add(1)
}

// lossCut cuts the rate for lost packets (a READ responder asked again
// for responses it sent): to the rate the path delivered, when known,
// else to half. Loss is a late and costly signal, so
// the rate then grows additively from there (no fast recovery to the rate
// that overflowed the path).
func (rc *rateControl) lossCut(env *Env, delivered float64) {
	c := &env.cc().cfg
	wasPaced := rc.paced
	if rc.paced {
		rc.recoverTo(env)
	}
	if !rc.paced {
		rc.startPacing(env)
	}
	next := rc.rate / 2
	if delivered > 0 {
		next = delivered
		if wasPaced {
			next = min(next, rc.rate)
		}
	}
	rc.rate = max(c.MinRate/8, next)
	rc.target = rc.rate
	rc.steps, rc.updated = c.FastRecoverySteps, env.Now
	env.Stats.RateCuts.Add(1)
}

// recoverTo applies the increase periods that passed since the last one
// (DCQCN's rate increase timer, evaluated when the QP next sends): alpha
// decays; the rate moves halfway to the target, which itself rises after
// FastRecoverySteps periods (additive, then hyper increase). Back at the
// ceiling, the QP is unpaced again.
func (rc *rateControl) recoverTo(env *Env) {
	c := &env.cc().cfg
	// Only time spent sending earns increases (as TCP validates its
	// window, RFC 7661): a QP that was quiet learned nothing about the
	// path, and a READ responder waiting for a requester's timer would
	// otherwise be back at full speed when the request comes.
	busyUntil := rc.lastSent.Add(quietPeriods * c.RateIncreasePeriod)
	if env.Now.Before(busyUntil) {
		busyUntil = env.Now
	}
	n := int(busyUntil.Sub(rc.updated) / c.RateIncreasePeriod)
	if n <= 0 {
		if env.Now.Sub(rc.updated) > quietPeriods*c.RateIncreasePeriod {
			rc.updated = env.Now // quiet since: no credit for the gap
		}
		return
	}
	rc.updated = rc.updated.Add(time.Duration(n) * c.RateIncreasePeriod)
	if env.Now.Sub(rc.updated) > quietPeriods*c.RateIncreasePeriod {
		rc.updated = env.Now // the quiet time after the last send earns nothing
	}
	if n > 64 {
		// Long past fast recovery: the rate has reached its target,
		// which rose by a hyper increase each period.
		rc.alpha *= math.Pow(1-c.AlphaGain, float64(n-64))
		rc.target = min(rc.ceiling, max(rc.target, rc.rate)+float64(n-64)*c.HyperIncrease/8)
		rc.rate, rc.steps = rc.target, rc.steps+n-64
		n = 64
	}
	for range n {
		rc.alpha *= 1 - c.AlphaGain
		rc.steps++
		switch f := c.FastRecoverySteps; {
		case rc.steps > 2*f:
			rc.target += c.HyperIncrease / 8
		case rc.steps > f:
			rc.target += c.AdditiveIncrease / 8
		}
		rc.target = min(rc.target, rc.ceiling)
		rc.rate = min((rc.rate+rc.target)/2, rc.ceiling)
	}
	env.Stats.RateIncreases.Add(uint64(n))
	if rc.rate >= rc.ceiling*0.99 && c.LineRate <= 0 {
		rc.paced = false
		env.Stats.RateUnpaced.Add(1)
	}
}

// Rate returns the QP's pacing rate in bits per second, 0 when it is
// not paced (for inspection and tests).
func (q *QP) Rate() float64 {
	if !q.rate.paced {
		return 0
	}
	return q.rate.rate * 8
}

// Window returns the RC requester's congestion window in packets.
func (q *QP) Window() int { return q.req.win.cwnd }

// noteECN answers a CE-marked packet with a CNP to the peer QP (RoCEv2
// annex A17.9.2: BTH opcode CNP, BECN set, the destination QP the
// originator of the marked flow, 16 reserved bytes), at most one per
// CNPInterval.
func (q *QP) noteECN(env *Env, p *wire.Packet) {
	if p.Net.TrafficClass&3 != 3 {
		return
	}
	env.Stats.CEReceived.Add(1)
	q.sendCNP(env)
}

// lossCNP answers packets lost on a UC QP's way (a PSN gap) with a CNP:
// UC has no acknowledgements, and a sender that does not slow down loses
// every message a full queue cuts (an extension of the annex: a CNP only
// asks the sender to lower its rate).
func (q *QP) lossCNP(env *Env) {
	if q.sendCNP(env) {
		env.Stats.LossCNPs.Add(1)
	}
}

// sendCNP sends a CNP to the peer QP, at most one per CNPInterval, and
// reports whether it did.
func (q *QP) sendCNP(env *Env) bool {
	rc := &q.rate
	if rc.cnpEverSet && env.Now.Sub(rc.lastCNP) < env.cc().cfg.CNPInterval {
		return false
	}
	rc.lastCNP, rc.cnpEverSet = env.Now, true
	var h wire.Headers
	h.BTH = wire.BTHFields{OpCode: wire.CNP, PKey: 0xffff, BECN: true, DestQP: q.P.DestQPN}
	buf := env.Out.Buffer()
	h.Encode(buf, 0)
	size := h.PacketLen(0)
	q.icrc.Seal(&q.P.Path, buf[:size])
	q.emit(env, size, &q.P.Path)
	env.Stats.CNPsSent.Add(1)
	return true
}

// receiveCNP handles a CNP: the QP's rate is cut (DCQCN).
func (q *QP) receiveCNP(env *Env) {
	env.Stats.CNPsReceived.Add(1)
	q.rate.congestion(env)
}
