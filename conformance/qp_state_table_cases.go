package conformance

import (
	"fmt"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// The generated family "modify_qp/table/<type>/<from>-><to>": for every
// pair of the seven QP states and each of RC, UC and UD, a fresh QP is
// brought to <from> and modified to <to>.
//
//   - A legal transition must succeed with exactly its required attributes
//     (plus IBV_QP_STATE), and query_qp must then report <to>. Before that,
//     the same modify missing any single required attribute, and the same
//     modify with one attribute that is neither required nor optional,
//     must each fail with EINVAL and leave the QP in <from>. On a second
//     fresh QP the modify with every required and optional attribute must
//     succeed too.
//   - An illegal transition must fail with EINVAL and leave the QP in
//     <from>, both with IBV_QP_STATE alone and with the attributes that
//     carry a QP into <to> along the usual path.
//
// The expectation below is transcribed independently from ibv_modify_qp(3)
// (required attributes for Reset -> Init -> RTR -> RTS) and the Linux
// kernel's qp_state_table in drivers/infiniband/core/verbs.c (IBTA 1.2.1
// §10.3.1, table 91), which every optional attribute comes from. It must
// not be derived from the implementation's own table (qp.Transitions): that
// table is what this family tests.
//
// SQE as a starting state is not registered: a QP enters SQE only through a
// send error on a UC or UD QP (nothing in ibv_modify_qp leads there), and
// without a transport nothing can fail a send. That leaves 7 target states
// x 3 types = 21 pairs (SQE->RESET, SQE->RTS, SQE->ERR legal for UC/UD)
// uncovered; they are counted in qpTableUnregistered. Modifying *to* SQE is
// covered: it is illegal from every state.

// qpTableEntry is one legal transition: required and optional attributes
// per transport, indexed by qpCol.
type qpTableEntry struct {
	req, opt [3]verbs.QPAttrMask
}

// qpCol is the column of a QP type in qpTableEntry.
func qpCol(typ verbs.QPType) int {
	switch typ {
	case verbs.QPTypeRC:
		return 0
	case verbs.QPTypeUC:
		return 1
	case verbs.QPTypeUD:
		return 2
	default:
		panic("conformance: the QP state table has no column for " + typ.String())
	}
}

// qpPer builds a per-transport mask triple in the order RC, UC, UD.
func qpPer(rc, uc, ud verbs.QPAttrMask) [3]verbs.QPAttrMask { return [3]verbs.QPAttrMask{rc, uc, ud} }

type qpStatePair struct{ from, to verbs.QPState }

const (
	qsReset = verbs.QPStateReset
	qsInit  = verbs.QPStateInit
	qsRTR   = verbs.QPStateRTR
	qsRTS   = verbs.QPStateRTS
	qsSQD   = verbs.QPStateSQD
	qsSQE   = verbs.QPStateSQE
	qsErr   = verbs.QPStateErr
)

// qpAllStates lists the seven states in enum order.
var qpAllStates = []verbs.QPState{qsReset, qsInit, qsRTR, qsRTS, qsSQD, qsSQE, qsErr}

// qpExpectedTable holds the legal transitions; a pair not in it is
// illegal for every type.
var qpExpectedTable = func() map[qpStatePair]qpTableEntry {
	const (
		cur      = verbs.AttrCurState
		sqdNote  = verbs.AttrEnSQDAsyncNotify
		access   = verbs.AttrAccessFlags
		pkey     = verbs.AttrPKeyIndex
		port     = verbs.AttrPort
		qkey     = verbs.AttrQKey
		av       = verbs.AttrAV
		mtu      = verbs.AttrPathMTU
		timeout  = verbs.AttrTimeout
		retry    = verbs.AttrRetryCnt
		rnrRetry = verbs.AttrRNRRetry
		rqPSN    = verbs.AttrRQPSN
		rdAtomic = verbs.AttrMaxQPRdAtomic
		altPath  = verbs.AttrAltPath
		rnrTimer = verbs.AttrMinRNRTimer
		sqPSN    = verbs.AttrSQPSN
		dstAtom  = verbs.AttrMaxDestRdAtomic
		mig      = verbs.AttrPathMigState
		destQPN  = verbs.AttrDestQPN
	)
	// Any state may go to RESET and to ERR with no other attribute.
	t := map[qpStatePair]qpTableEntry{}
	for _, s := range qpAllStates {
		t[qpStatePair{s, qsReset}] = qpTableEntry{}
		t[qpStatePair{s, qsErr}] = qpTableEntry{}
	}
	// ibv_modify_qp(3): Init needs PKEY_INDEX, PORT and QKEY (UD) or
	// ACCESS_FLAGS (RC, UC).
	t[qpStatePair{qsReset, qsInit}] = qpTableEntry{
		req: qpPer(pkey|port|access, pkey|port|access, pkey|port|qkey),
	}
	t[qpStatePair{qsInit, qsInit}] = qpTableEntry{
		opt: qpPer(pkey|port|access, pkey|port|access, pkey|port|qkey),
	}
	// ibv_modify_qp(3): RTR needs AV, PATH_MTU, DEST_QPN, RQ_PSN (RC, UC)
	// and MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER (RC); nothing for UD.
	t[qpStatePair{qsInit, qsRTR}] = qpTableEntry{
		req: qpPer(av|mtu|destQPN|rqPSN|dstAtom|rnrTimer, av|mtu|destQPN|rqPSN, 0),
		opt: qpPer(altPath|access|pkey, altPath|access|pkey, pkey|qkey),
	}
	// ibv_modify_qp(3): RTS needs SQ_PSN, and for RC also TIMEOUT,
	// RETRY_CNT, RNR_RETRY, MAX_QP_RD_ATOMIC.
	t[qpStatePair{qsRTR, qsRTS}] = qpTableEntry{
		req: qpPer(timeout|retry|rnrRetry|sqPSN|rdAtomic, sqPSN, sqPSN),
		opt: qpPer(cur|altPath|access|rnrTimer|mig, cur|altPath|access|mig, cur|qkey),
	}
	t[qpStatePair{qsRTS, qsRTS}] = qpTableEntry{
		opt: qpPer(cur|access|altPath|mig|rnrTimer, cur|access|altPath|mig, cur|qkey),
	}
	t[qpStatePair{qsRTS, qsSQD}] = qpTableEntry{
		opt: qpPer(sqdNote, sqdNote, sqdNote),
	}
	t[qpStatePair{qsSQD, qsRTS}] = qpTableEntry{
		opt: qpPer(cur|altPath|access|rnrTimer|mig, cur|altPath|access|mig, cur|qkey),
	}
	t[qpStatePair{qsSQD, qsSQD}] = qpTableEntry{
		opt: qpPer(port|av|timeout|retry|rnrRetry|rdAtomic|dstAtom|altPath|access|pkey|rnrTimer|mig,
			av|altPath|access|pkey|mig,
			pkey|qkey),
	}
	// SQE -> RTS: RC never enters SQE; the kernel lists no attribute for it.
	t[qpStatePair{qsSQE, qsRTS}] = qpTableEntry{
		opt: qpPer(0, cur|access, cur|qkey),
	}
	return t
}()

// qpTableUnregistered counts the pairs of the family that are not
// registered (every pair starting in SQE, for each type).
const qpTableUnregistered = 7 * 3

// qpUsualPredecessor is the state before s on RESET -> INIT -> RTR -> RTS
// -> SQD, whose transition into s names the attributes an illegal modify
// to s carries.
var qpUsualPredecessor = map[verbs.QPState]verbs.QPState{qsInit: qsReset, qsRTR: qsInit, qsRTS: qsRTR, qsSQD: qsRTS}

// qpExtraCandidates are attributes tried, in order, as "neither required
// nor optional"; the first that is outside a transition's required and
// optional sets is used. Every value qpValidAttr gives them is in range, so
// only the mask can make the modify fail.
var qpExtraCandidates = []verbs.QPAttrMask{
	verbs.AttrQKey, verbs.AttrRQPSN, verbs.AttrSQPSN, verbs.AttrDestQPN, verbs.AttrPathMTU,
	verbs.AttrTimeout, verbs.AttrMinRNRTimer, verbs.AttrAccessFlags, verbs.AttrPKeyIndex,
}

// qpValidAttr returns attributes with an in-range value in every field,
// for a modify of a QP in state from to state to.
func qpValidAttr(t *T, f *Fixture, from, to verbs.QPState) verbs.QPAttr {
	t.Helper()
	av := verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: f.PeerGID(t), SGIDIndex: 1, HopLimit: 64}}
	return verbs.QPAttr{
		QPState:          to,
		CurQPState:       from,
		PathMTU:          verbs.MTU1024,
		PathMigState:     verbs.MigRearm,
		QKey:             0x22222222,
		RQPSN:            0x1234,
		SQPSN:            0x4567,
		DestQPNum:        qpPeerQPN,
		QPAccessFlags:    verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
		AHAttr:           av,
		AltAHAttr:        av,
		PKeyIndex:        0,
		AltPKeyIndex:     0,
		EnSQDAsyncNotify: true,
		MaxRdAtomic:      1,
		MaxDestRdAtomic:  1,
		MinRNRTimer:      12,
		PortNum:          1,
		Timeout:          14,
		RetryCnt:         7,
		RNRRetry:         7,
		AltPortNum:       1,
		AltTimeout:       14,
	}
}

// qpMaskBits splits a mask into its single bits.
func qpMaskBits(m verbs.QPAttrMask) []verbs.QPAttrMask {
	var bits []verbs.QPAttrMask
	for i := 0; i < 32; i++ {
		if b := verbs.QPAttrMask(1) << i; m&b != 0 {
			bits = append(bits, b)
		}
	}
	return bits
}

func init() {
	for _, typ := range qpTypes {
		for _, from := range qpAllStates {
			if from == qsSQE {
				continue // see qpTableUnregistered
			}
			for _, to := range qpAllStates {
				Register(qpTableCase(typ, from, to))
			}
		}
	}
}

const qpTableCite = `ibv_modify_qp(3): "the following tables indicate for each QP Transport Service Type, the minimum list of attributes that must be changed upon transitioning QP state from: Reset --> Init --> RTR --> RTS"; IBTA 1.2.1 §10.3.1 table 91 (QP state transition properties) as the kernel's qp_state_table/ib_modify_qp_is_ok encodes it: a transition not in the table, a missing required attribute or an attribute neither required nor optional fails (EINVAL) and, per ibv_modify_qp(3) NOTES, "none of the attributes will be modified (including the QP state)"`

func qpTableCase(typ verbs.QPType, from, to verbs.QPState) Case {
	e, legal := qpExpectedTable[qpStatePair{from, to}]
	return Case{
		Name:       fmt.Sprintf("modify_qp/table/%s/%s->%s", typ, from, to),
		Cite:       qpTableCite,
		Label:      Spec,
		Deviations: qpTableDeviations(typ, from, to, e, legal),
		Run: func(t *T, d Device) {
			if legal {
				qpTableLegal(t, d, typ, from, to, e)
			} else {
				qpTableIllegal(t, d, typ, from, to)
			}
		},
	}
}

// qpTableDeviations returns the known deviations of a pair: the kernel's
// table has no RESET -> ERR, and the kernel refuses alternate path
// attributes on a RoCE port (rxe reports APM, so the case includes them
// in "every optional attribute").
func qpTableDeviations(typ verbs.QPType, from, to verbs.QPState, e qpTableEntry, legal bool) []Deviation {
	switch {
	case from == qsReset && to == qsErr:
		return []Deviation{{Impl: ImplRxe, Cite: rxeNoResetToErr,
			Note: "RESET -> ERR is refused with EINVAL (the kernel's state table has no such transition)"}}
	case legal && e.opt[qpCol(typ)]&verbs.AttrAltPath != 0:
		if typ == verbs.QPTypeUC && from == qsSQD && to == qsSQD {
			return []Deviation{{Impl: ImplRxe, Cite: rxeNoAltPath + "; " + rxeSQDAVAddsPort,
				Note: "the modify with every optional attribute is refused with EINVAL: IBV_QP_ALT_PATH is refused on a RoCE port, and IBV_QP_AV without IBV_QP_PORT becomes both, which UC SQD -> SQD does not allow"}}
		}
		return []Deviation{{Impl: ImplRxe, Cite: rxeNoAltPath,
			Note: "the modify with every optional attribute is refused with EINVAL: IBV_QP_ALT_PATH is refused on a RoCE port although the device reports IBV_DEVICE_AUTO_PATH_MIG"}}
	}
	return nil
}

// qpTableModify tries a modify that must fail with EINVAL and leave the
// QP in from.
func qpTableRejected(t *T, q QP, a *verbs.QPAttr, mask verbs.QPAttrMask, from verbs.QPState, why string) {
	t.Helper()
	err := q.Modify(a, mask)
	ExpectErrno(t, err, syscall.EINVAL, fmt.Sprintf("modify %s -> %s with mask %s (%s)", from, a.QPState, mask, why))
	Expect(t, State(t, q), from, fmt.Sprintf("state after the rejected modify (%s)", why))
}

func qpTableLegal(t *T, d Device, typ verbs.QPType, from, to verbs.QPState, e qpTableEntry) {
	col := qpCol(typ)
	req, opt := e.req[col], e.opt[col]
	f, q := qpAt(t, d, typ, from)
	a := qpValidAttr(t, f, from, to)

	for _, b := range qpMaskBits(req) {
		qpTableRejected(t, q, &a, verbs.AttrState|(req&^b), from, "required "+b.String()+" missing")
	}
	for _, x := range qpExtraCandidates {
		if x&(req|opt) == 0 {
			qpTableRejected(t, q, &a, verbs.AttrState|req|x, from, x.String()+" is neither required nor optional")
			break
		}
	}
	mask := verbs.AttrState | req
	ExpectOK(t, q.Modify(&a, mask), fmt.Sprintf("modify %s -> %s with exactly the required mask %s", from, to, mask))
	Expect(t, State(t, q), to, "state after the modify")

	// Every optional attribute is accepted as well. Alternate paths and
	// path migration are optional only for HCAs with APM.
	if d.QueryDevice().DeviceCapFlags&verbs.DeviceAutoPathMig == 0 {
		opt &^= verbs.AttrAltPath | verbs.AttrPathMigState
	}
	if opt == 0 {
		return
	}
	f2, q2 := qpAt(t, d, typ, from)
	a2 := qpValidAttr(t, f2, from, to)
	mask = verbs.AttrState | req | opt
	ExpectOK(t, q2.Modify(&a2, mask), fmt.Sprintf("modify %s -> %s with every required and optional attribute %s", from, to, mask))
	Expect(t, State(t, q2), to, "state after the modify with the optional attributes")
}

func qpTableIllegal(t *T, d Device, typ verbs.QPType, from, to verbs.QPState) {
	f, q := qpAt(t, d, typ, from)
	a := qpValidAttr(t, f, from, to)
	qpTableRejected(t, q, &a, verbs.AttrState, from, "not a legal transition")
	if p, ok := qpUsualPredecessor[to]; ok {
		if req := qpExpectedTable[qpStatePair{p, to}].req[qpCol(typ)]; req != 0 {
			qpTableRejected(t, q, &a, verbs.AttrState|req, from,
				"not a legal transition, even with the attributes "+p.String()+" -> "+to.String()+" requires")
		}
	}
}
