package tm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/verbs"
)

// The model test: the engine (*List) and the reference (refList,
// reference_test.go) are driven with the same random sequence of ops,
// messages and releases, and must agree on every outcome. The reference
// never predicts a handle: it checks the engine's is allowed and records
// the entry under it.

// modelConfigs are the seeds and the list each runs on: small lists, so
// that they fill.
var modelConfigs = []struct {
	seed uint64
	cfg  Config
}{
	{1, Config{MaxNumTags: 1, MaxSGE: 1}},
	{2, Config{MaxNumTags: 2, MaxSGE: 1}},
	{3, Config{MaxNumTags: 4, MaxSGE: 2}},
	{4, Config{MaxNumTags: 8, MaxSGE: 3}},
	{5, Config{MaxNumTags: 16, MaxSGE: 4}},
	{6, Config{MaxNumTags: 3, MaxSGE: 1}},
	{7, Config{MaxNumTags: 12, MaxSGE: 2}},
	{8, Config{MaxNumTags: 6, MaxSGE: 5}},
}

// modelCoverage names the events every run of TestModelAgainstReference
// must have seen (summed over its seeds), so that a generator gone
// degenerate fails the test instead of passing it vacuously.
var modelCoverage = []string{
	"add", "add disabled", "add with sync enabling", "add sge 0",
	"einval opcode", "einval flags", "einval sge", "einval del not in use",
	"einval del out of range", "enomem", "refused with sync flag",
	"del live signaled", "del live unsignaled", "del live disabled",
	"del tm_err consumed", "del tm_err removed",
	"sync signaled", "sync unsignaled", "sync no flag",
	"cnt equal", "cnt stale", "cnt ahead",
	"syncreq true", "syncreq false",
	"match", "match among several", "match wildcard mask", "match full mask",
	"match partial mask", "match skipped disabled", "unmatched with disabled match",
	"unmatchable entry present", "no match",
	"unexpected", "unexpected catches up", "unexpected syncreq", "no buffer",
	"enabled by op", "enabled by unexpected",
	"release consumed", "release removed", "stray release live",
	"stray release free", "stray release out of range",
	"next ignored", "sgl scribbled",
}

func TestModelAgainstReference(t *testing.T) {
	steps := 100_000
	if testing.Short() || raceEnabled {
		steps = 5_000
	}
	cov := make(map[string]int)
	for _, mc := range modelConfigs {
		t.Run(fmt.Sprintf("seed=%d", mc.seed), func(t *testing.T) {
			m := newModel(t, mc.seed, mc.cfg)
			for m.step = 1; m.step <= steps; m.step++ {
				m.randomStep()
			}
			for k, v := range m.cov {
				cov[k] += v
			}
		})
	}
	if t.Failed() {
		return
	}
	for _, k := range modelCoverage {
		assert.NotZero(t, cov[k], "the model never saw %q", k)
	}
	keys := make([]string, 0, len(cov))
	for k := range cov {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-34s %d\n", k, cov[k])
	}
	t.Logf("events over all seeds:\n%s", b.String())
}

// modelPending is a handle whose ending completion the model will poll
// (release) at some later step.
type modelPending struct {
	handle   uint32
	consumed bool        // by a message; else removed by a signaled TAG_DEL
	got      []verbs.SGE // the engine's Match.SGL, kept by the List until Release
	want     []verbs.SGE // the reference's copy of the entry's scatter list
}

// modelRecord is one step, for the failure message.
type modelRecord struct {
	step int
	what string
	op   verbs.OpsWR
	hasO bool
	arg  uint64
}

type model struct {
	t      *testing.T
	rng    *rand.Rand
	seed   uint64
	cfg    Config
	step   int
	eng    *List
	ref    *refList
	pend   []modelPending
	cov    map[string]int
	nextID uint64
	recent [8]modelRecord // ring of the last steps
	cur    *modelRecord
}

func newModel(t *testing.T, seed uint64, cfg Config) *model {
	eng, err := New(cfg)
	require.NoError(t, err, "seed %d: New(%+v)", seed, cfg)
	require.NotNil(t, eng)
	return &model{
		t:    t,
		rng:  rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1)),
		seed: seed,
		cfg:  cfg,
		eng:  eng,
		ref:  newRefList(cfg),
		cov:  make(map[string]int),
	}
}

// String is the failure context: seed, step, the recent steps and the
// reference's state. testify formats it only when an assertion fails.
func (m *model) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d step %d (config %+v)\nrecent steps, oldest first:\n", m.seed, m.step, m.cfg)
	for i := 1; i <= len(m.recent); i++ {
		r := m.recent[(m.step+i)%len(m.recent)]
		if r.step == 0 {
			continue
		}
		fmt.Fprintf(&b, "  step %d: %s", r.step, r.what)
		if r.hasO {
			o := r.op
			fmt.Fprintf(&b, " op{%v flags=%#x cnt=%d handle=%d tag=%#x mask=%#x wrid=%d sge=%d next=%v}",
				o.Opcode, uint32(o.Flags), o.TM.UnexpectedCnt, o.TM.Handle, o.TM.Add.Tag, o.TM.Add.Mask,
				o.TM.Add.RecvWRID, len(o.TM.Add.SGList), o.Next != nil)
		} else {
			fmt.Fprintf(&b, " arg=%#x", r.arg)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "reference after the step (or before it, if the engine was checked first): %v", m.ref)
	return b.String()
}

// begin records the step about to run.
func (m *model) begin(what string, op *verbs.OpsWR, arg uint64) {
	r := &m.recent[m.step%len(m.recent)]
	*r = modelRecord{step: m.step, what: what, arg: arg}
	if op != nil {
		r.op, r.hasO = *op, true
	}
	m.cur = r
}

func (m *model) randomStep() {
	switch p := m.rng.IntN(100); {
	case p < 28:
		m.stepAdd()
	case p < 40:
		m.stepDel()
	case p < 47:
		m.stepSync()
	case p < 80:
		m.stepMessage()
	case p < 94:
		m.stepRelease()
	default:
		m.stepStrayRelease()
	}
	m.checkState()
}

// checkState compares everything the API shows of the state.
func (m *model) checkState() {
	t := m.t
	require.NoError(t, m.ref.selfCheck(), "%v", m)
	sw, hw := m.eng.Counts()
	require.Equal(t, m.ref.sw, sw, "Counts sw: %v", m)
	require.Equal(t, m.ref.hw, hw, "Counts hw: %v", m)
	require.Equal(t, m.ref.inUse(), m.eng.InUse(), "InUse: %v", m)
	require.Equal(t, len(m.ref.list), m.eng.Len(), "Len: %v", m)
}

// Tags and masks come from a small alphabet, so that messages match
// entries, several entries match one message, mask 0 entries (which match
// every message when their tag is 0, none otherwise), full masks, partial
// masks and entries with tag bits outside their mask all happen.
var (
	modelTags  = []uint64{0, 1, 2, 3, 0x10, 0x11, 0x13, 0xff, 1 << 63, 1<<63 | 1, ^uint64(0)}
	modelMasks = []uint64{^uint64(0), ^uint64(0), 0, 0xff, 0x0f, 0xf0, 0x1, 1 << 63, ^uint64(0xff)}
)

func (m *model) pick(s []uint64) uint64 { return s[m.rng.IntN(len(s))] }

// flags returns op flags: mostly valid combinations, sometimes bad bits.
func (m *model) flags() verbs.OpsFlags {
	switch p := m.rng.IntN(20); {
	case p < 5:
		return 0
	case p < 10:
		return verbs.OpsSignaled
	case p < 14:
		return verbs.OpsTMSync
	case p < 19:
		return verbs.OpsSignaled | verbs.OpsTMSync
	default:
		return verbs.OpsFlags(1)<<(2+m.rng.IntN(30)) | verbs.OpsFlags(m.rng.IntN(4))
	}
}

// unexpectedCnt returns the count an op carries: with TM_SYNC, hw (in
// sync), stale, ahead, sw, or anything; without it, junk the engine must
// ignore.
func (m *model) unexpectedCnt(f verbs.OpsFlags) uint32 {
	if f&verbs.OpsTMSync == 0 {
		return m.rng.Uint32()
	}
	hw := m.ref.hw
	switch p := m.rng.IntN(20); {
	case p < 11:
		return hw
	case p < 14:
		return hw - 1 - m.rng.Uint32N(3)
	case p < 17:
		return hw + 1 + m.rng.Uint32N(3)
	case p < 19:
		return m.ref.sw
	default:
		return m.rng.Uint32()
	}
}

func (m *model) opcode(o verbs.OpsOpcode) verbs.OpsOpcode {
	if m.rng.IntN(40) == 0 {
		return verbs.OpsOpcode(3 + m.rng.IntN(253))
	}
	return o
}

func (m *model) stepAdd() {
	f := m.flags()
	op := &verbs.OpsWR{WRID: m.rng.Uint64(), Opcode: m.opcode(verbs.WRTagAdd), Flags: f}
	op.TM.UnexpectedCnt = m.unexpectedCnt(f)
	op.TM.Handle = m.rng.Uint32() // Apply overwrites it
	tag, mask := m.pick(modelTags), m.pick(modelMasks)
	if m.rng.IntN(5) < 3 {
		tag &= mask // a matchable entry; the others often have bits outside the mask
	}
	m.nextID++
	op.TM.Add.Tag, op.TM.Add.Mask, op.TM.Add.RecvWRID = tag, mask, m.nextID
	n := m.rng.IntN(m.cfg.MaxSGE + 1)
	if m.rng.IntN(10) == 0 {
		n = m.cfg.MaxSGE + 1 + m.rng.IntN(2) // T5: EINVAL
	}
	if n > 0 || m.rng.IntN(2) == 0 {
		op.TM.Add.SGList = make([]verbs.SGE, n)
	}
	for i := range op.TM.Add.SGList {
		op.TM.Add.SGList[i] = verbs.SGE{Addr: m.rng.Uint64(), Length: m.rng.Uint32(), LKey: m.rng.Uint32()}
	}
	m.apply("TAG_ADD", op)
}

func (m *model) stepDel() {
	f := m.flags()
	op := &verbs.OpsWR{WRID: m.rng.Uint64(), Opcode: m.opcode(verbs.WRTagDel), Flags: f}
	op.TM.UnexpectedCnt = m.unexpectedCnt(f)
	var h uint32
	switch p := m.rng.IntN(10); {
	case p < 4 && len(m.ref.list) > 0: // live
		h = m.ref.list[m.rng.IntN(len(m.ref.list))].handle
	case p < 6 && len(m.pend) > 0: // consumed, or removed awaiting release
		h = m.pend[m.rng.IntN(len(m.pend))].handle
	case p < 8: // anything in range; often never used or ended
		h = m.rng.Uint32N(uint32(m.cfg.MaxNumTags))
	case p < 9: // just out of range
		h = uint32(m.cfg.MaxNumTags) + m.rng.Uint32N(4)
	default:
		h = m.rng.Uint32()
	}
	op.TM.Handle = h
	m.apply("TAG_DEL", op)
}

func (m *model) stepSync() {
	f := m.flags()
	op := &verbs.OpsWR{WRID: m.rng.Uint64(), Opcode: m.opcode(verbs.WRTagSync), Flags: f}
	op.TM.UnexpectedCnt = m.unexpectedCnt(f)
	op.TM.Handle = m.rng.Uint32() // meaningless for TAG_SYNC; the result's Handle is 0
	m.apply("TAG_SYNC", op)
}

// apply posts op to both and compares the outcome.
func (m *model) apply(what string, op *verbs.OpsWR) {
	t := m.t
	if m.rng.IntN(16) == 0 {
		// Apply applies one op; the caller walks Next. Were the engine
		// to apply this one too, sw would show it.
		op.Next = &verbs.OpsWR{Opcode: verbs.WRTagSync, Flags: verbs.OpsSignaled | verbs.OpsTMSync,
			TM: verbs.TMOp{UnexpectedCnt: m.ref.sw ^ 0x5a5a5a5a}}
		m.cov["next ignored"]++
	}
	m.begin(what, op, 0)
	errs := m.ref.refusal(op)
	enabledBefore := m.ref.enabledCount()
	liveDisabled := false
	if op.Opcode == verbs.WRTagDel {
		if i := m.ref.index(op.TM.Handle); i >= 0 && !m.ref.list[i].enabled {
			liveDisabled = true
		}
	}
	delState := m.ref.stateOf(op.TM.Handle)

	got, err := m.eng.Apply(op)

	if len(errs) != 0 {
		require.Error(t, err, "Apply must refuse with %v: %v", errs, m)
		ok := false
		for _, e := range errs {
			ok = ok || errors.Is(err, e)
		}
		require.True(t, ok, "Apply refused with %v (%v), want one of %v: %v", err, errnoOf(err), errs, m)
		m.coverRefusal(op, errs, err)
		return
	}
	require.NoError(t, err, "Apply: %v", m)

	var h uint32
	if op.Opcode == verbs.WRTagAdd {
		h = got.Handle
		require.Equal(t, h, op.TM.Handle, "TAG_ADD writes its handle to op.TM.Handle: %v", m)
		require.Less(t, uint64(h), uint64(m.cfg.MaxNumTags), "T2: handle out of range: %v", m)
		require.True(t, m.ref.handleFree(h), "T2: TAG_ADD returned handle %d, which is %v: %v", h, m.ref.stateOf(h), m)
	}
	want := m.ref.apply(op, h)
	require.Equal(t, want, normResult(got), "Apply's result (SyncReq compared only with a completion): %v", m)

	// Coverage.
	if op.Flags&verbs.OpsTMSync != 0 {
		switch c := op.TM.UnexpectedCnt; {
		case c == m.ref.hw:
			m.cov["cnt equal"]++
		case m.ref.hw-c <= 3:
			m.cov["cnt stale"]++
		case c-m.ref.hw <= 3:
			m.cov["cnt ahead"]++
		}
	}
	if want.Complete {
		if want.SyncReq {
			m.cov["syncreq true"]++
		} else {
			m.cov["syncreq false"]++
		}
	}
	switch op.Opcode {
	case verbs.WRTagAdd:
		m.cov["add"]++
		if len(op.TM.Add.SGList) == 0 {
			m.cov["add sge 0"]++
		}
		if !m.ref.list[len(m.ref.list)-1].enabled {
			m.cov["add disabled"]++
		} else if m.ref.enabledCount() > enabledBefore+1 {
			m.cov["add with sync enabling"]++
		}
		if m.rng.IntN(4) == 0 {
			// The post is over; the scatter list is the caller's again.
			for i := range op.TM.Add.SGList {
				op.TM.Add.SGList[i] = verbs.SGE{Addr: 0xdead, Length: 1, LKey: 2}
			}
			m.cov["sgl scribbled"]++
		}
	case verbs.WRTagDel:
		switch {
		case want.Status == verbs.WCTMErr && delState == refConsumed:
			m.cov["del tm_err consumed"]++
		case want.Status == verbs.WCTMErr:
			m.cov["del tm_err removed"]++
		case want.Releases:
			m.cov["del live signaled"]++
		default:
			m.cov["del live unsignaled"]++
		}
		if liveDisabled {
			m.cov["del live disabled"]++
		}
		if want.Releases {
			m.pend = append(m.pend, modelPending{handle: op.TM.Handle})
		}
	case verbs.WRTagSync:
		switch {
		case op.Flags&verbs.OpsTMSync == 0:
			m.cov["sync no flag"]++
		case want.Complete:
			m.cov["sync signaled"]++
		default:
			m.cov["sync unsignaled"]++
		}
	}
	if op.Opcode != verbs.WRTagAdd && m.ref.enabledCount() > enabledBefore {
		m.cov["enabled by op"]++
	}
}

func (m *model) coverRefusal(op *verbs.OpsWR, errs []syscall.Errno, err error) {
	if op.Flags&verbs.OpsTMSync != 0 {
		m.cov["refused with sync flag"]++
	}
	if len(errs) > 1 {
		m.cov["ambiguous refusal: engine said "+errnoOf(err)]++
	}
	switch {
	case op.Opcode > verbs.WRTagSync:
		m.cov["einval opcode"]++
	case op.Flags&^(verbs.OpsSignaled|verbs.OpsTMSync) != 0:
		m.cov["einval flags"]++
	case op.Opcode == verbs.WRTagAdd && len(op.TM.Add.SGList) > m.cfg.MaxSGE:
		m.cov["einval sge"]++
	case op.Opcode == verbs.WRTagAdd:
		m.cov["enomem"]++
	case uint64(op.TM.Handle) >= uint64(m.cfg.MaxNumTags):
		m.cov["einval del out of range"]++
	default:
		m.cov["einval del not in use"]++
	}
}

func errnoOf(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		return fmt.Sprintf("%d (%v)", uintptr(e), e)
	}
	return "no errno"
}

// normResult drops what an OpResult without a completion does not carry:
// P3's SyncReq qualifies a completion, and the rule book says nothing of
// it when there is none.
func normResult(r OpResult) OpResult {
	if !r.Complete {
		r.SyncReq = false
	}
	return r
}

// msgTag returns a message's tag: from the alphabet, or built to hit an
// entry in the list (any bits outside its mask), or something else.
func (m *model) msgTag() uint64 {
	switch p := m.rng.IntN(10); {
	case p < 4:
		return m.pick(modelTags)
	case p < 8 && len(m.ref.list) > 0:
		e := m.ref.list[m.rng.IntN(len(m.ref.list))]
		return e.tag | m.rng.Uint64()&^e.mask
	default:
		return m.rng.Uint64() & 0x1ff
	}
}

func (m *model) stepMessage() {
	t := m.t
	tag := m.msgTag()
	m.begin("message", nil, tag)
	nEnabled, nDisabled := 0, 0
	for _, e := range m.ref.list {
		switch {
		case e.matches(tag) && e.enabled:
			nEnabled++
		case e.matches(tag):
			nDisabled++
		}
		if e.enabled && e.tag&^e.mask != 0 {
			m.cov["unmatchable entry present"]++
		}
	}

	got, ok := m.eng.Match(tag)
	want, wantOK := m.ref.match(tag)
	require.Equal(t, wantOK, ok, "Match(%#x) found: %v", tag, m)
	if ok {
		require.Equal(t, want.Handle, got.Handle, "Match(%#x) entry (M2: earliest-added enabled match): %v", tag, m)
		require.Equal(t, want.RecvWRID, got.RecvWRID, "Match(%#x) RecvWRID: %v", tag, m)
		require.Equal(t, want.Tag, got.Tag, "Match(%#x) Tag: %v", tag, m)
		require.Equal(t, want.Mask, got.Mask, "Match(%#x) Mask: %v", tag, m)
		require.True(t, slices.Equal(want.SGL, got.SGL), "Match(%#x) SGL: got %v, want %v: %v", tag, got.SGL, want.SGL, m)
		m.pend = append(m.pend, modelPending{handle: got.Handle, consumed: true, got: got.SGL, want: want.SGL})
		m.cov["match"]++
		if nEnabled > 1 {
			m.cov["match among several"]++
		}
		switch want.Mask {
		case 0:
			m.cov["match wildcard mask"]++
		case ^uint64(0):
			m.cov["match full mask"]++
		default:
			m.cov["match partial mask"]++
		}
		if nDisabled > 0 {
			m.cov["match skipped disabled"]++
		}
		return
	}
	m.cov["no match"]++
	if nDisabled > 0 {
		m.cov["unmatched with disabled match"]++
	}
	if m.rng.IntN(8) == 0 {
		m.cov["no buffer"]++ // dropped: nothing happens
		return
	}
	m.begin("unexpected", nil, tag)
	before := m.ref.enabledCount()
	gotSR := m.eng.Unexpected()
	wantSR := m.ref.unexpected()
	require.Equal(t, wantSR, gotSR, "Unexpected's SyncReq (P3): %v", m)
	m.cov["unexpected"]++
	if wantSR {
		m.cov["unexpected syncreq"]++
	} else {
		m.cov["unexpected catches up"]++
	}
	if m.ref.enabledCount() > before {
		m.cov["enabled by unexpected"]++
	}
}

// stepRelease polls the ending completion of a pending handle.
func (m *model) stepRelease() {
	if len(m.pend) == 0 {
		m.stepStrayRelease()
		return
	}
	m.release(m.pend[m.rng.IntN(len(m.pend))].handle, "release")
}

// stepStrayRelease releases a handle whose entry has not ended: live, not
// in use, out of range; or sometimes one that has (early).
func (m *model) stepStrayRelease() {
	var h uint32
	switch p := m.rng.IntN(10); {
	case p < 4 && len(m.ref.list) > 0:
		h = m.ref.list[m.rng.IntN(len(m.ref.list))].handle
	case p < 6 && len(m.pend) > 0:
		h = m.pend[m.rng.IntN(len(m.pend))].handle
	case p < 8:
		h = m.rng.Uint32N(uint32(m.cfg.MaxNumTags))
	case p < 9:
		h = uint32(m.cfg.MaxNumTags) + m.rng.Uint32N(4)
	default:
		h = m.rng.Uint32()
	}
	m.release(h, "stray release")
}

func (m *model) release(h uint32, what string) {
	t := m.t
	m.begin(what, nil, uint64(h))
	s := m.ref.stateOf(h)
	if i := slices.IndexFunc(m.pend, func(p modelPending) bool { return p.handle == h }); i >= 0 {
		p := m.pend[i]
		require.NotEqual(t, refFree, s, "model: pending handle %d is free in the reference: %v", h, m)
		if p.consumed {
			require.True(t, slices.Equal(p.want, p.got),
				"the SGL Match returned for handle %d changed before Release: got %v, want %v: %v", h, p.got, p.want, m)
		}
		m.pend = slices.Delete(m.pend, i, i+1)
	}
	switch s {
	case refConsumed:
		m.cov["release consumed"]++
	case refRemoved:
		m.cov["release removed"]++
	case refLive:
		m.cov["stray release live"]++
	default:
		if uint64(h) < uint64(m.cfg.MaxNumTags) {
			m.cov["stray release free"]++
		} else {
			m.cov["stray release out of range"]++
		}
	}
	m.eng.Release(h)
	m.ref.release(h)
}

// ---------------------------------------------------------------------
// Hand-written scenarios, run against the engine and the reference alike,
// with the expected values written out: they test the reference too.

func TestReferenceRules(t *testing.T) {
	impls := []struct {
		name string
		new  func(Config) (refMatcher, error)
	}{
		{"engine", func(cfg Config) (refMatcher, error) {
			l, err := New(cfg)
			if err != nil {
				return nil, err
			}
			return l, nil
		}},
		{"reference", newRefAlone},
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			mk := func(t *testing.T, cfg Config) *ruleRig {
				m, err := impl.new(cfg)
				require.NoError(t, err)
				return &ruleRig{t: t, m: m, cfg: cfg}
			}
			t.Run("config", func(t *testing.T) {
				for _, cfg := range []Config{{0, 1}, {1, 0}, {-1, 1}, {1, -1}, {0, 0}} {
					_, err := impl.new(cfg)
					assert.ErrorIs(t, err, syscall.EINVAL, "%+v", cfg)
				}
				m, err := impl.new(Config{MaxNumTags: 1, MaxSGE: 1})
				require.NoError(t, err)
				sw, hw := m.Counts()
				assert.Equal(t, [4]int{0, 0, 0, 0}, [4]int{int(sw), int(hw), m.InUse(), m.Len()})
			})
			t.Run("earliest added wins", func(t *testing.T) { ruleEarliest(mk(t, Config{MaxNumTags: 8, MaxSGE: 2})) })
			t.Run("disabled until sync", func(t *testing.T) { ruleDisabled(mk(t, Config{MaxNumTags: 8, MaxSGE: 1})) })
			t.Run("del of consumed is TM_ERR", func(t *testing.T) { ruleDelConsumed(mk(t, Config{MaxNumTags: 4, MaxSGE: 1})) })
			t.Run("full is ENOMEM", func(t *testing.T) { ruleFull(mk(t, Config{MaxNumTags: 2, MaxSGE: 2})) })
			t.Run("tag outside mask never matches", func(t *testing.T) { ruleOutsideMask(mk(t, Config{MaxNumTags: 4, MaxSGE: 1})) })
		})
	}
}

// ruleRig drives one refMatcher with explicit expectations.
type ruleRig struct {
	t   *testing.T
	m   refMatcher
	cfg Config
}

const (
	refSig  = verbs.OpsSignaled
	refSync = verbs.OpsTMSync
	refFull = ^uint64(0)
)

// add posts a TAG_ADD that must succeed and returns its result.
func (r *ruleRig) add(tag, mask, wrid uint64, f verbs.OpsFlags, cnt uint32, sgl ...verbs.SGE) OpResult {
	r.t.Helper()
	op := &verbs.OpsWR{Opcode: verbs.WRTagAdd, Flags: f, TM: verbs.TMOp{UnexpectedCnt: cnt, Handle: 0xffff,
		Add: verbs.TagAdd{RecvWRID: wrid, SGList: sgl, Tag: tag, Mask: mask}}}
	res, err := r.m.Apply(op)
	require.NoError(r.t, err)
	require.Equal(r.t, res.Handle, op.TM.Handle, "the handle is written to op.TM.Handle")
	require.Less(r.t, int(res.Handle), r.cfg.MaxNumTags)
	assert.Equal(r.t, f&refSig != 0, res.Complete)
	assert.Equal(r.t, verbs.WCSuccess, res.Status)
	assert.False(r.t, res.Releases)
	return res
}

// h adds an unsignaled, unsynced entry and returns its handle.
func (r *ruleRig) h(tag, mask, wrid uint64, sgl ...verbs.SGE) uint32 {
	r.t.Helper()
	return r.add(tag, mask, wrid, 0, 0, sgl...).Handle
}

func (r *ruleRig) op(opc verbs.OpsOpcode, f verbs.OpsFlags, cnt, handle uint32) (OpResult, error) {
	return r.m.Apply(&verbs.OpsWR{Opcode: opc, Flags: f, TM: verbs.TMOp{UnexpectedCnt: cnt, Handle: handle}})
}

// ok posts an op that must be accepted and checks its whole result
// (SyncReq only with a completion).
func (r *ruleRig) ok(opc verbs.OpsOpcode, f verbs.OpsFlags, cnt, handle uint32, want OpResult) {
	r.t.Helper()
	res, err := r.op(opc, f, cnt, handle)
	require.NoError(r.t, err)
	assert.Equal(r.t, want, normResult(res), "%v flags %#x handle %d", opc, uint32(f), handle)
}

// refused posts an op that must be refused with errno and change nothing.
func (r *ruleRig) refused(errno syscall.Errno, op *verbs.OpsWR) {
	r.t.Helper()
	sw, hw := r.m.Counts()
	inUse, n := r.m.InUse(), r.m.Len()
	_, err := r.m.Apply(op)
	assert.ErrorIs(r.t, err, errno, "%v flags %#x", op.Opcode, uint32(op.Flags))
	r.state(sw, hw, inUse, n)
}

func (r *ruleRig) state(sw, hw uint32, inUse, n int) {
	r.t.Helper()
	gsw, ghw := r.m.Counts()
	assert.Equal(r.t, [2]uint32{sw, hw}, [2]uint32{gsw, ghw}, "Counts (sw, hw)")
	assert.Equal(r.t, inUse, r.m.InUse(), "InUse")
	assert.Equal(r.t, n, r.m.Len(), "Len")
}

// matchOne expects tag to consume the entry h with recvWRID wrid.
func (r *ruleRig) matchOne(tag uint64, h uint32, wrid, etag, emask uint64, sgl ...verbs.SGE) {
	r.t.Helper()
	m, ok := r.m.Match(tag)
	require.True(r.t, ok, "Match(%#x)", tag)
	assert.Equal(r.t, h, m.Handle, "Match(%#x) handle", tag)
	assert.Equal(r.t, wrid, m.RecvWRID, "Match(%#x) RecvWRID", tag)
	assert.Equal(r.t, etag, m.Tag, "Match(%#x) Tag", tag)
	assert.Equal(r.t, emask, m.Mask, "Match(%#x) Mask", tag)
	assert.True(r.t, slices.Equal(sgl, m.SGL), "Match(%#x) SGL %v, want %v", tag, m.SGL, sgl)
}

// noMatch expects tag to match nothing and nothing to change.
func (r *ruleRig) noMatch(tag uint64) {
	r.t.Helper()
	sw, hw := r.m.Counts()
	inUse, n := r.m.InUse(), r.m.Len()
	_, ok := r.m.Match(tag)
	require.False(r.t, ok, "Match(%#x)", tag)
	r.state(sw, hw, inUse, n)
}

// M1, M2: of the enabled entries that match, the earliest added wins; a
// mask 0 tag 0 entry matches everything.
func ruleEarliest(r *ruleRig) {
	sgeA := verbs.SGE{Addr: 0x1000, Length: 64, LKey: 7}
	sgeB := []verbs.SGE{{Addr: 0x2000, Length: 1, LKey: 8}, {Addr: 0x3000, Length: 2, LKey: 9}}
	x := r.h(2, refFull, 10)
	resA := r.add(1, 0xff, 11, refSig, 0, sgeA)
	assert.False(r.t, resA.SyncReq)
	a := resA.Handle
	b := r.h(1, refFull, 12, sgeB...)
	w := r.h(0, 0, 13)
	handles := []uint32{x, a, b, w}
	slices.Sort(handles)
	assert.Len(r.t, slices.Compact(handles), 4, "T2: distinct handles")
	r.state(0, 0, 4, 4)

	r.matchOne(0x101, a, 11, 1, 0xff, sgeA) // a and w match; b does not
	r.state(0, 0, 4, 3)
	r.matchOne(1, b, 12, 1, refFull, sgeB...) // b and w match
	r.matchOne(7, w, 13, 0, 0)                // only w
	r.noMatch(7)
	r.matchOne(2, x, 10, 2, refFull)
	r.state(0, 0, 4, 0)

	// The consumed handles stay in use until released (T3); a second
	// release is ignored.
	r.m.Release(a)
	r.m.Release(b)
	r.state(0, 0, 2, 0)
	r.m.Release(a)
	r.state(0, 0, 2, 0)
	assert.False(r.t, r.m.Unexpected(), "P3: hw 1, sw 0: not far behind")
	r.state(0, 1, 2, 0)
}

// P1, P2, P3: an entry added while sw != hw matches nothing until a
// moment with sw == hw; an entry enabled earlier stays enabled.
func ruleDisabled(r *ruleRig) {
	a := r.h(5, refFull, 20)
	r.noMatch(9)
	assert.False(r.t, r.m.Unexpected(), "P3: sw 0, hw 1: not far behind")
	r.state(0, 1, 1, 1)

	b := r.h(9, refFull, 21)
	resC := r.add(9, refFull, 22, refSig, 0)
	assert.True(r.t, resC.SyncReq, "P3 on TM_ADD")
	c := resC.Handle
	r.noMatch(9) // b, c disabled
	r.state(0, 1, 3, 3)
	r.matchOne(5, a, 20, 5, refFull) // a was enabled before the unexpected message
	r.state(0, 1, 3, 2)

	r.ok(verbs.WRTagSync, refSig|refSync, 0, 0, OpResult{Complete: true, SyncReq: true}) // stale
	r.noMatch(9)
	r.ok(verbs.WRTagSync, refSig, 1, 0, OpResult{Complete: true, SyncReq: true}) // no flag: cnt ignored
	r.state(0, 1, 3, 2)
	r.noMatch(9)
	r.ok(verbs.WRTagSync, refSync, 1, 0, OpResult{}) // unsignaled: no completion
	r.state(1, 1, 3, 2)
	r.matchOne(9, b, 21, 9, refFull)
	r.matchOne(9, c, 22, 9, refFull)

	// sw ahead of hw: the unexpected message that catches up enables.
	r.ok(verbs.WRTagSync, refSig|refSync, 2, 0, OpResult{Complete: true, SyncReq: true})
	d := r.h(11, refFull, 23)
	r.noMatch(11)
	assert.False(r.t, r.m.Unexpected(), "P3: sw 2 == hw 2")
	r.state(2, 2, 4, 1)
	r.matchOne(11, d, 23, 11, refFull)

	// A TAG_ADD with TM_SYNC that brings sw to hw enables the earlier
	// disabled entries too, and itself.
	assert.False(r.t, r.m.Unexpected())
	e := r.h(12, refFull, 24)
	r.noMatch(12)
	resF := r.add(13, refFull, 25, refSig|refSync, 3)
	assert.False(r.t, resF.SyncReq)
	r.matchOne(12, e, 24, 12, refFull)
	r.matchOne(13, resF.Handle, 25, 13, refFull)
	r.state(3, 3, 6, 0)
}

// O3, T3: TAG_DEL of a consumed entry is TM_ERR (even unsignaled);
// releases; stray releases; second TAG_DEL of a removed entry.
func ruleDelConsumed(r *ruleRig) {
	a := r.add(3, refFull, 30, refSig, 0).Handle
	r.matchOne(3, a, 30, 3, refFull)
	r.state(0, 0, 1, 0)
	r.ok(verbs.WRTagDel, 0, 0, a, OpResult{Handle: a, Complete: true, Status: verbs.WCTMErr})
	r.state(0, 0, 1, 0)
	// P1 applies even though the op fails.
	r.ok(verbs.WRTagDel, refSig|refSync, 5, a, OpResult{Handle: a, Complete: true, Status: verbs.WCTMErr, SyncReq: true})
	r.state(5, 0, 1, 0)
	r.m.Release(a)
	r.state(5, 0, 0, 0)
	r.refused(syscall.EINVAL, &verbs.OpsWR{Opcode: verbs.WRTagDel, Flags: refSig | refSync, TM: verbs.TMOp{Handle: a}})
	r.ok(verbs.WRTagSync, refSync, 0, 0, OpResult{})
	r.state(0, 0, 0, 0)

	b := r.h(4, refFull, 31)
	r.m.Release(b) // stray: b is live
	r.state(0, 0, 1, 1)
	r.ok(verbs.WRTagDel, refSig, 0, b, OpResult{Handle: b, Complete: true, Releases: true})
	r.state(0, 0, 1, 0)
	r.noMatch(4)
	r.ok(verbs.WRTagDel, 0, 0, b, OpResult{Handle: b, Complete: true, Status: verbs.WCTMErr})
	r.state(0, 0, 1, 0)
	r.m.Release(b)
	r.state(0, 0, 0, 0)

	c := r.h(5, refFull, 32)
	r.ok(verbs.WRTagDel, 0, 0, c, OpResult{Handle: c})
	r.state(0, 0, 0, 0) // unsignaled: the handle is free at once
	r.m.Release(c)
	r.state(0, 0, 0, 0)

	for _, h := range []uint32{0, 3, 4, 1 << 31} {
		r.refused(syscall.EINVAL, &verbs.OpsWR{Opcode: verbs.WRTagDel, TM: verbs.TMOp{Handle: h}})
	}
}

// T4, T5, O4: refusals change nothing, not even sw.
func ruleFull(r *ruleRig) {
	s1 := verbs.SGE{Addr: 1, Length: 2, LKey: 3}
	r.refused(syscall.EINVAL, &verbs.OpsWR{Opcode: verbs.WRTagAdd, Flags: refSync, TM: verbs.TMOp{UnexpectedCnt: 9,
		Add: verbs.TagAdd{Tag: 1, Mask: refFull, SGList: []verbs.SGE{s1, s1, s1}}}})
	r.refused(syscall.EINVAL, &verbs.OpsWR{Opcode: verbs.WRTagAdd, Flags: refSync | 4, TM: verbs.TMOp{UnexpectedCnt: 9}})
	r.refused(syscall.EINVAL, &verbs.OpsWR{Opcode: 3, Flags: refSync, TM: verbs.TMOp{UnexpectedCnt: 9}})
	r.refused(syscall.EINVAL, &verbs.OpsWR{Opcode: 255, Flags: refSig})
	r.refused(syscall.EINVAL, &verbs.OpsWR{Opcode: verbs.WRTagSync, Flags: refSync | 1<<31, TM: verbs.TMOp{UnexpectedCnt: 9}})
	r.state(0, 0, 0, 0)

	a := r.h(1, refFull, 40, s1, s1)
	b := r.h(2, refFull, 41)
	assert.NotEqual(r.t, a, b)
	r.state(0, 0, 2, 2)
	addOp := func() *verbs.OpsWR {
		return &verbs.OpsWR{Opcode: verbs.WRTagAdd, Flags: refSig | refSync, TM: verbs.TMOp{UnexpectedCnt: 9,
			Add: verbs.TagAdd{Tag: 3, Mask: refFull, RecvWRID: 42}}}
	}
	r.refused(syscall.ENOMEM, addOp())
	r.matchOne(1, a, 40, 1, refFull, s1, s1) // still enabled: sw did not move
	r.state(0, 0, 2, 1)
	r.refused(syscall.ENOMEM, addOp()) // a is consumed, still in use
	r.m.Release(b)                     // stray: b is live
	r.refused(syscall.ENOMEM, addOp())
	r.m.Release(a)
	r.state(0, 0, 1, 1)
	c := r.h(3, refFull, 43)
	assert.NotEqual(r.t, b, c)
	r.state(0, 0, 2, 2)
	r.refused(syscall.ENOMEM, addOp())
	r.ok(verbs.WRTagDel, 0, 0, b, OpResult{Handle: b})
	d := r.h(4, refFull, 44)
	assert.NotEqual(r.t, c, d)
	r.state(0, 0, 2, 2)
	r.matchOne(4, d, 44, 4, refFull)
	r.matchOne(3, c, 43, 3, refFull)
}

// M1 as written: an entry whose tag has bits outside its mask never
// matches; it ends only by TAG_DEL.
func ruleOutsideMask(r *ruleRig) {
	a := r.h(0x13, 0x0f, 50)
	z := r.h(1, 0, 51)
	for tag := range uint64(0x200) {
		r.noMatch(tag)
	}
	r.noMatch(refFull)
	r.noMatch(1 << 63)
	r.state(0, 0, 2, 2)
	w := r.h(0x03, 0x0f, 52)
	r.matchOne(0x13, w, 52, 0x03, 0x0f)
	r.ok(verbs.WRTagDel, refSig, 0, a, OpResult{Handle: a, Complete: true, Releases: true})
	r.ok(verbs.WRTagDel, 0, 0, z, OpResult{Handle: z})
	r.state(0, 0, 2, 0)
}

// TestSyncRequestFarBehind: an unexpected message's completion asks for
// a sync only once software has fallen more than 16,383 behind (P3).
func TestSyncRequestFarBehind(t *testing.T) {
	l, err := New(Config{MaxNumTags: 1, MaxSGE: 1})
	require.NoError(t, err)
	for i := 1; i <= 16383; i++ {
		require.False(t, l.Unexpected(), "hw - sw = %d", i)
	}
	require.True(t, l.Unexpected(), "hw - sw = 16384")
	_, err = l.Apply(&verbs.OpsWR{Opcode: verbs.WRTagSync, Flags: verbs.OpsTMSync, TM: verbs.TMOp{UnexpectedCnt: 16384}})
	require.NoError(t, err)
	require.False(t, l.Unexpected(), "in step again, one behind")
}
