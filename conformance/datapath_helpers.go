package conformance

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/softhca/softhca/verbs"
)

// PairTarget is a Target that can open two devices that reach each other
// over a network, which the data-path cases need. It is optional: a case
// run against a target without it is skipped. Closing a device releases
// whatever connects it to the other.
type PairTarget interface {
	Target
	OpenPair() (Device, Device, error)
}

// Data-path helpers (prefix dp). A data-path case opens a pair of
// devices with dpOpen, connects QPs across them with dpConnect, and
// waits for completions with dpWaitWC (a poll loop with a deadline).
//
// Memory: the case's own reads and writes of registered memory are
// ordered with the transport's by the verbs themselves (post_send,
// poll_cq) or, for memory remote operations touch, by dpFence, which
// queries the QPs that own it (a query takes the QP's lock in softhca;
// the race detector cannot see through a UDP socket). A case calls it
// between its own access and the transport's next one, in either order.

// dpDeadline bounds every wait for something that must happen.
const dpDeadline = 5 * time.Second

// dpQuiet is how long a case waits to conclude that something does not
// happen (a dropped message, a held send queue, an absent event).
const dpQuiet = 40 * time.Millisecond

// dpMemSize is the size of each side's registered buffer.
const dpMemSize = 128 << 10

// dpAllAccess is every access right a memory region can grant here.
const dpAllAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// dpQKey is the Q_Key of the UD QPs dpConnect creates.
const dpQKey = 0x11110000

// dpSide is one device of a pair with the usual objects: a PD, a send CQ,
// a receive CQ and a registered buffer with every access right.
type dpSide struct {
	Name string // "A" or "B", for messages
	D    Device
	PD   PD
	SCQ  CQ // the send CQ of QPs made by dpConnect
	RCQ  CQ // the receive CQ
	MR   MR
	Buf  []byte    // MR.Bytes(): the registered memory
	GID  verbs.GID // the RoCEv2 GID at index 1
}

// dpOpen opens a pair of devices that reach each other, with their
// objects, or skips the case when the target cannot. Both devices are
// closed when the case ends.
func dpOpen(t *T) (a, b *dpSide) {
	t.Helper()
	pt, ok := t.Target().(PairTarget)
	if !ok {
		t.Skipf("target %s cannot open a connected pair of devices (no PairTarget)", t.Target().Name())
	}
	da, db, err := pt.OpenPair()
	if err != nil {
		t.Fatalf("open a pair of devices: %v", err)
	}
	t.Cleanup(func() { _ = da.Close(); _ = db.Close() })
	return dpNewSide(t, "A", da), dpNewSide(t, "B", db)
}

func dpNewSide(t *T, name string, d Device) *dpSide {
	t.Helper()
	s := &dpSide{Name: name, D: d}
	var err error
	s.PD, err = d.AllocPD()
	ExpectOK(t, err, name+": alloc_pd")
	s.SCQ, err = d.CreateCQ(512, nil, name+" send", 0)
	ExpectOK(t, err, name+": create_cq")
	s.RCQ, err = d.CreateCQ(512, nil, name+" recv", 0)
	ExpectOK(t, err, name+": create_cq")
	s.MR, err = s.PD.RegMR(make([]byte, dpMemSize), dpAllAccess)
	ExpectOK(t, err, name+": reg_mr")
	s.Buf = s.MR.Bytes() // RegMR may copy
	s.GID, err = d.QueryGID(1, 1)
	ExpectOK(t, err, name+": query_gid 1")
	return s
}

// RegMR registers a fresh buffer of n bytes in the side's PD (or in pd
// when it is not nil).
func (s *dpSide) RegMR(t *T, pd PD, n int, access verbs.AccessFlags) MR {
	t.Helper()
	if pd == nil {
		pd = s.PD
	}
	m, err := pd.RegMR(make([]byte, n), access)
	ExpectOK(t, err, s.Name+": reg_mr")
	return m
}

// AH creates an address handle to peer's RoCEv2 GID.
func (s *dpSide) AH(t *T, peer *dpSide) AH {
	t.Helper()
	ah, err := s.PD.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: peer.GID, SGIDIndex: 1, HopLimit: 64}})
	ExpectOK(t, err, s.Name+": create_ah")
	return ah
}

// Diag describes the device's transport counters if the target offers
// them (TransportDiagnoser).
func (s *dpSide) Diag() string {
	if d, ok := s.D.(TransportDiagnoser); ok {
		return s.Name + ": " + d.TransportDiag()
	}
	return ""
}

// dpOpts are the attributes of QPs dpConnect creates. Zero fields take
// the defaults in brackets.
type dpOpts struct {
	Type   verbs.QPType // [RC]
	Cap    verbs.QPCap  // [dpCap]
	SigAll bool
	SRQ    SRQ
	RCQ    CQ        // receive CQ [the side's RCQ]
	MTU    verbs.MTU // path_mtu [1024]
	// QP access flags of the responder [REMOTE_WRITE|READ|ATOMIC]; set
	// NoAccess for none.
	Access   verbs.AccessFlags
	NoAccess bool
	QKey     uint32 // UD [dpQKey]
	// RC timers: timeout [14], retry_cnt [7], rnr_retry [7],
	// min_rnr_timer [1, 0.01 ms]; Set* makes a zero value count.
	Timeout, RetryCnt, RNRRetry, MinRNRTimer uint8
	SetTimeout, SetRetryCnt, SetRNRRetry     bool
	MaxRdAtomic                              uint8 // [8], also max_dest_rd_atomic
	NoDestRdAtomic                           bool  // max_dest_rd_atomic 0
	// PSN is the first PSN of both directions [0x100]; SetPSN makes 0
	// count.
	PSN    uint32
	SetPSN bool
}

// dpCap are the queue sizes of dpConnect's QPs unless a case asks.
var dpCap = verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}

func (o dpOpts) filled() dpOpts {
	if o.Type == 0 {
		o.Type = verbs.QPTypeRC
	}
	if o.Cap == (verbs.QPCap{}) {
		o.Cap = dpCap
	}
	if o.MTU == 0 {
		o.MTU = verbs.MTU1024
	}
	if o.Access == 0 && !o.NoAccess {
		o.Access = verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	if o.QKey == 0 {
		o.QKey = dpQKey
	}
	if o.Timeout == 0 && !o.SetTimeout {
		o.Timeout = 14
	}
	if o.RetryCnt == 0 && !o.SetRetryCnt {
		o.RetryCnt = 7
	}
	if o.RNRRetry == 0 && !o.SetRNRRetry {
		o.RNRRetry = 7
	}
	if o.MinRNRTimer == 0 {
		o.MinRNRTimer = 1
	}
	if o.MaxRdAtomic == 0 {
		o.MaxRdAtomic = 8
	}
	if o.PSN == 0 && !o.SetPSN {
		o.PSN = 0x100
	}
	return o
}

// dpCreateQP creates a QP on the side with the options.
func dpCreateQP(t *T, s *dpSide, o dpOpts) QP {
	t.Helper()
	o = o.filled()
	rcq := o.RCQ
	if rcq == nil {
		rcq = s.RCQ
	}
	q, err := s.PD.CreateQP(&QPInitAttr{SendCQ: s.SCQ, RecvCQ: rcq, SRQ: o.SRQ, Cap: o.Cap, QPType: o.Type, SQSigAll: o.SigAll})
	ExpectOK(t, err, s.Name+": create_qp "+o.Type.String())
	return q
}

// dpBringUp moves q from RESET through INIT and RTR to RTS, addressed to
// QP number destQPN at GID dgid (ignored for UD).
func dpBringUp(t *T, s *dpSide, q QP, o dpOpts, dgid verbs.GID, destQPN uint32) {
	t.Helper()
	dpToInit(t, s, q, o)
	dpToRTR(t, s, q, o, dgid, destQPN)
	dpToRTSFromRTR(t, s, q, o)
}

// dpToInit moves q from RESET to INIT.
func dpToInit(t *T, s *dpSide, q QP, o dpOpts) {
	t.Helper()
	o = o.filled()
	init := verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1, QKey: o.QKey, QPAccessFlags: o.Access}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if o.Type == verbs.QPTypeUD {
		mask |= verbs.AttrQKey
	} else {
		mask |= verbs.AttrAccessFlags
	}
	ExpectOK(t, q.Modify(&init, mask), s.Name+": modify to INIT")
}

// dpToRTR moves q from INIT to RTR; the receive PSN is o.PSN.
func dpToRTR(t *T, s *dpSide, q QP, o dpOpts, dgid verbs.GID, destQPN uint32) {
	t.Helper()
	o = o.filled()
	rtr := verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: o.MTU, DestQPNum: destQPN, RQPSN: o.PSN,
		MaxDestRdAtomic: o.MaxRdAtomic, MinRNRTimer: o.MinRNRTimer,
		AHAttr: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: dgid, SGIDIndex: 1, HopLimit: 64}}}
	if o.NoDestRdAtomic {
		rtr.MaxDestRdAtomic = 0
	}
	mask := verbs.AttrState
	switch o.Type {
	case verbs.QPTypeRC:
		mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	case verbs.QPTypeUC:
		mask |= verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
	case verbs.QPTypeUD, verbs.QPTypeRawPacket: // the state alone
	}
	ExpectOK(t, q.Modify(&rtr, mask), s.Name+": modify to RTR")
}

// dpToRTSFromRTR moves q from RTR to RTS; the send PSN is o.PSN.
func dpToRTSFromRTR(t *T, s *dpSide, q QP, o dpOpts) {
	t.Helper()
	o = o.filled()
	rts := verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: o.PSN, Timeout: o.Timeout, RetryCnt: o.RetryCnt,
		RNRRetry: o.RNRRetry, MaxRdAtomic: o.MaxRdAtomic}
	mask := verbs.AttrState | verbs.AttrSQPSN
	if o.Type == verbs.QPTypeRC {
		mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	}
	ExpectOK(t, q.Modify(&rts, mask), s.Name+": modify to RTS")
}

// dpConnect creates a QP on each side, with options oa for a's and ob
// for b's, and brings both to RTS addressed to each other.
func dpConnect(t *T, a, b *dpSide, oa, ob dpOpts) (qa, qb QP) {
	t.Helper()
	qa, qb = dpCreateQP(t, a, oa), dpCreateQP(t, b, ob)
	dpBringUp(t, a, qa, oa, b.GID, qb.Num())
	dpBringUp(t, b, qb, ob, a.GID, qa.Num())
	return qa, qb
}

// dpConnect1 is dpConnect with the same options on both sides.
func dpConnect1(t *T, a, b *dpSide, o dpOpts) (qa, qb QP) {
	t.Helper()
	return dpConnect(t, a, b, o, o)
}

// dpFence orders the case's accesses to memory with what the transport
// did on behalf of the QPs (see the comment at the top of the file).
func dpFence(t *T, qs ...QP) {
	t.Helper()
	for _, q := range qs {
		_, err := q.Query(verbs.AttrState)
		ExpectOK(t, err, "query_qp")
	}
}

// dpSend builds a send WR.
func dpSend(id uint64, op verbs.WROpcode, flags verbs.SendFlags, sges ...verbs.SGE) *verbs.SendWR {
	return &verbs.SendWR{WRID: id, Opcode: op, SendFlags: flags, SGList: sges}
}

// dpRDMA builds an RDMA WRITE or READ WR to remote address addr.
func dpRDMA(id uint64, op verbs.WROpcode, addr uint64, rkey uint32, sges ...verbs.SGE) *verbs.SendWR {
	return &verbs.SendWR{WRID: id, Opcode: op, SendFlags: verbs.SendSignaled, SGList: sges,
		RDMA: verbs.RDMAInfo{RemoteAddr: addr, RKey: rkey}}
}

// dpList links WRs into a list and returns its head.
func dpList(wrs ...*verbs.SendWR) *verbs.SendWR {
	for i := 0; i+1 < len(wrs); i++ {
		wrs[i].Next = wrs[i+1]
	}
	return wrs[0]
}

// dpPost posts send WRs and fails the case if the post fails.
func dpPost(t *T, q QP, wr *verbs.SendWR) {
	t.Helper()
	bad, err := q.PostSend(wr)
	if err != nil || bad != nil {
		t.Fatalf("post_send wr_id %#x: %v", wr.WRID, err)
	}
}

// dpRecv posts one receive WR.
func dpRecv(t *T, q QP, id uint64, sges ...verbs.SGE) {
	t.Helper()
	bad, err := q.PostRecv(&verbs.RecvWR{WRID: id, SGList: sges})
	if err != nil || bad != nil {
		t.Fatalf("post_recv wr_id %#x: %v", id, err)
	}
}

// dpWaitWC polls c until n completions arrived and returns them; it fails
// the case after dpDeadline. It does not look for more.
func dpWaitWC(t *T, c CQ, n int, what string, sides ...*dpSide) []verbs.WC {
	t.Helper()
	return dpWaitWCFor(t, c, n, dpDeadline, what, sides...)
}

// dpWaitWCFor is dpWaitWC with a deadline of d, for completions that
// follow one already seen without any further network exchange (flushes).
func dpWaitWCFor(t *T, c CQ, n int, d time.Duration, what string, sides ...*dpSide) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	wcs := make([]verbs.WC, 32)
	deadline := time.Now().Add(d)
	for len(out) < n {
		k := c.Poll(wcs[:min(len(wcs), n-len(out))])
		out = append(out, wcs[:k]...)
		if k > 0 {
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d completions after %v: %s%s", what, len(out), n, d, dpWCs(out), dpDiag(sides))
		}
		runtime.Gosched()
	}
	return out
}

// dpWait1 waits for one completion.
func dpWait1(t *T, c CQ, what string, sides ...*dpSide) verbs.WC {
	t.Helper()
	return dpWaitWC(t, c, 1, what, sides...)[0]
}

// dpNoWC fails the case if a completion arrives on c within dpQuiet.
func dpNoWC(t *T, c CQ, what string) {
	t.Helper()
	wcs := make([]verbs.WC, 8)
	deadline := time.Now().Add(dpQuiet)
	for time.Now().Before(deadline) {
		if k := c.Poll(wcs); k > 0 {
			t.Fatalf("%s: unexpected completions %s", what, dpWCs(wcs[:k]))
		}
		time.Sleep(time.Millisecond)
	}
}

// dpWaitState polls a QP's state until it is want (a hardware device may
// change state a little after the completion that reports why).
func dpWaitState(t *T, q QP, want verbs.QPState, what string) {
	t.Helper()
	deadline := time.Now().Add(dpDeadline)
	for {
		st := State(t, q)
		if st == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: QP %#x is in %s, want %s", what, q.Num(), st, want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func dpDiag(sides []*dpSide) string {
	var b strings.Builder
	for _, s := range sides {
		if d := s.Diag(); d != "" {
			b.WriteString("; " + d)
		}
	}
	return b.String()
}

// dpWCs formats completions for messages.
func dpWCs(wcs []verbs.WC) string {
	parts := make([]string, len(wcs))
	for i, wc := range wcs {
		parts[i] = dpWC(wc)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func dpWC(wc verbs.WC) string {
	return fmt.Sprintf("{wr_id %#x %s %q byte_len %d qp %#x src_qp %#x flags %#x imm %#x}",
		wc.WRID, wc.Opcode, wc.Status.String(), wc.ByteLen, wc.QPNum, wc.SrcQP, uint32(wc.WCFlags), wc.ImmData)
}

// dpExpectWC checks a completion's wr_id, status and, for successful
// ones, opcode.
func dpExpectWC(t *T, wc verbs.WC, id uint64, st verbs.WCStatus, op verbs.WCOpcode, what string) {
	t.Helper()
	if wc.WRID != id || wc.Status != st || (st == verbs.WCSuccess && wc.Opcode != op) {
		want := fmt.Sprintf("wr_id %#x status %q", id, st.String())
		if st == verbs.WCSuccess {
			want += " opcode " + op.String()
		}
		t.Fatalf("%s: got %s, want %s", what, dpWC(wc), want)
	}
}

// dpExpectOK checks a successful completion of wr_id id and opcode op.
func dpExpectOK(t *T, wc verbs.WC, id uint64, op verbs.WCOpcode, what string) {
	t.Helper()
	dpExpectWC(t, wc, id, verbs.WCSuccess, op, what)
}

// dpExpectFlushed checks that wcs are flush errors for ids, in order.
func dpExpectFlushed(t *T, wcs []verbs.WC, what string, ids ...uint64) {
	t.Helper()
	if len(wcs) != len(ids) {
		t.Fatalf("%s: %d completions %s, want %d flushed", what, len(wcs), dpWCs(wcs), len(ids))
	}
	for i, wc := range wcs {
		if wc.WRID != ids[i] || wc.Status != verbs.WCWRFlushErr {
			t.Fatalf("%s: completion %d is %s, want wr_id %#x flushed (WR_FLUSH_ERR); all: %s", what, i, dpWC(wc), ids[i], dpWCs(wcs))
		}
	}
}

// dpFill writes a pattern that depends on seed into b.
func dpFill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed ^ byte(i>>8)
	}
}

// dpExpectBytes fails the case unless got equals want.
func dpExpectBytes(t *T, got, want []byte, what string) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Fatalf("%s: %d bytes differ from offset %d (got % x..., want % x...)", what, len(want), i,
		got[i:min(i+8, len(got))], want[i:min(i+8, len(want))])
}

// dpExpectUntouched fails the case unless b holds only the byte v.
func dpExpectUntouched(t *T, b []byte, v byte, what string) {
	t.Helper()
	if i := slices.IndexFunc(b, func(c byte) bool { return c != v }); i >= 0 {
		t.Fatalf("%s: byte %d is %#x, want the untouched %#x", what, i, b[i], v)
	}
}
