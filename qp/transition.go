package qp

import (
	"fmt"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// The QP state transition table (IBTA 10.3.1, table 91 "QP State
// Transition Properties"; the Linux kernel's qp_state_table in
// drivers/infiniband/core/verbs.c; ibv_modify_qp(3)). For every legal
// (current, next) pair it gives, per transport, the attributes a modify
// must supply and those it may supply. Any pair not in the table, any
// missing required attribute and any attribute outside required|optional
// (IBV_QP_STATE aside) makes the modify fail with EINVAL.

// transportIndex maps the QP types the table covers to its columns.
type transportIndex uint8

const (
	colRC transportIndex = iota
	colUC
	colUD
	numCols
)

func column(t verbs.QPType) (transportIndex, bool) {
	switch t {
	case verbs.QPTypeRC:
		return colRC, true
	case verbs.QPTypeUC:
		return colUC, true
	case verbs.QPTypeUD:
		return colUD, true
	default:
		return 0, false
	}
}

// Transition is one entry of the table.
type Transition struct {
	Valid    bool
	Required [numCols]verbs.QPAttrMask
	Optional [numCols]verbs.QPAttrMask
}

const (
	rs    = verbs.QPStateReset
	ini   = verbs.QPStateInit
	rtr   = verbs.QPStateRTR
	rts   = verbs.QPStateRTS
	sqd   = verbs.QPStateSQD
	sqe   = verbs.QPStateSQE
	errSt = verbs.QPStateErr
)

// per builds a per-transport mask triple in the order RC, UC, UD.
func per(rc, uc, ud verbs.QPAttrMask) [numCols]verbs.QPAttrMask {
	return [numCols]verbs.QPAttrMask{colRC: rc, colUC: uc, colUD: ud}
}

// all repeats one mask for every transport.
func all(m verbs.QPAttrMask) [numCols]verbs.QPAttrMask { return per(m, m, m) }

const (
	aState    = verbs.AttrState
	aCur      = verbs.AttrCurState
	aSQDNote  = verbs.AttrEnSQDAsyncNotify
	aAccess   = verbs.AttrAccessFlags
	aPKey     = verbs.AttrPKeyIndex
	aPort     = verbs.AttrPort
	aQKey     = verbs.AttrQKey
	aAV       = verbs.AttrAV
	aMTU      = verbs.AttrPathMTU
	aTimeout  = verbs.AttrTimeout
	aRetry    = verbs.AttrRetryCnt
	aRNRRetry = verbs.AttrRNRRetry
	aRQPSN    = verbs.AttrRQPSN
	aRdAtom   = verbs.AttrMaxQPRdAtomic
	aAltPath  = verbs.AttrAltPath
	aRNRTimer = verbs.AttrMinRNRTimer
	aSQPSN    = verbs.AttrSQPSN
	aDestAtom = verbs.AttrMaxDestRdAtomic
	aMig      = verbs.AttrPathMigState
	aDestQPN  = verbs.AttrDestQPN
)

// Transitions is the table, indexed [current][next].
var Transitions = [verbs.NumQPStates][verbs.NumQPStates]Transition{
	rs: {
		rs: {Valid: true},
		ini: {Valid: true,
			Required: per(aPKey|aPort|aAccess, aPKey|aPort|aAccess, aPKey|aPort|aQKey)},
		errSt: {Valid: true},
	},
	ini: {
		rs:    {Valid: true},
		errSt: {Valid: true},
		ini: {Valid: true,
			Optional: per(aPKey|aPort|aAccess, aPKey|aPort|aAccess, aPKey|aPort|aQKey)},
		rtr: {Valid: true,
			Required: per(aAV|aMTU|aDestQPN|aRQPSN|aDestAtom|aRNRTimer, aAV|aMTU|aDestQPN|aRQPSN, 0),
			Optional: per(aAltPath|aAccess|aPKey, aAltPath|aAccess|aPKey, aPKey|aQKey)},
	},
	rtr: {
		rs:    {Valid: true},
		errSt: {Valid: true},
		rts: {Valid: true,
			Required: per(aTimeout|aRetry|aRNRRetry|aSQPSN|aRdAtom, aSQPSN, aSQPSN),
			Optional: per(aCur|aAltPath|aAccess|aRNRTimer|aMig, aCur|aAltPath|aAccess|aMig, aCur|aQKey)},
	},
	rts: {
		rs:    {Valid: true},
		errSt: {Valid: true},
		rts: {Valid: true,
			Optional: per(aCur|aAccess|aAltPath|aMig|aRNRTimer, aCur|aAccess|aAltPath|aMig, aCur|aQKey)},
		sqd: {Valid: true, Optional: all(aSQDNote)},
	},
	sqd: {
		rs:    {Valid: true},
		errSt: {Valid: true},
		rts: {Valid: true,
			Optional: per(aCur|aAltPath|aAccess|aRNRTimer|aMig, aCur|aAltPath|aAccess|aMig, aCur|aQKey)},
		sqd: {Valid: true,
			Optional: per(
				aPort|aAV|aTimeout|aRetry|aRNRRetry|aRdAtom|aDestAtom|aAltPath|aAccess|aPKey|aRNRTimer|aMig,
				aAV|aAltPath|aAccess|aPKey|aMig,
				aPKey|aQKey)},
	},
	sqe: {
		rs:    {Valid: true},
		errSt: {Valid: true},
		rts:   {Valid: true, Optional: per(0, aCur|aAccess, aCur|aQKey)},
	},
	errSt: {
		rs:    {Valid: true},
		errSt: {Valid: true},
	},
}

// ModifyError says why a state transition is not allowed. It wraps EINVAL.
type ModifyError struct {
	Type     verbs.QPType
	From, To verbs.QPState
	// Illegal is set when the table has no such transition.
	Illegal bool
	// Missing are required attributes the mask lacks; Extra are attributes
	// the mask has that the transition does not accept.
	Missing, Extra verbs.QPAttrMask
	// BadCurState is set when IBV_QP_CUR_STATE is given for a state from
	// which it is not accepted.
	BadCurState bool
}

// Error names the transition and what was wrong with the mask.
func (e *ModifyError) Error() string {
	s := fmt.Sprintf("modify_qp: %s QP %s -> %s", e.Type, e.From, e.To)
	switch {
	case e.Illegal:
		return s + " is not a legal transition"
	case e.BadCurState:
		return s + ": IBV_QP_CUR_STATE is only accepted from RTR, RTS, SQD or SQE"
	}
	if e.Missing != 0 {
		s += ": missing " + e.Missing.String()
	}
	if e.Extra != 0 {
		s += ": not allowed " + e.Extra.String()
	}
	return s
}

// Unwrap returns EINVAL.
func (e *ModifyError) Unwrap() error { return syscall.EINVAL }

// CheckTransition reports whether a QP of type t may go from cur to next
// with the attributes in mask, as ib_modify_qp_is_ok does: the transition
// must be in the table, mask must hold every required attribute and
// nothing beyond the required, optional and IBV_QP_STATE bits, and
// IBV_QP_CUR_STATE is only accepted from RTR, RTS, SQD and SQE.
func CheckTransition(t verbs.QPType, cur, next verbs.QPState, mask verbs.QPAttrMask) error {
	col, ok := column(t)
	if !ok || !cur.Valid() || !next.Valid() {
		return &ModifyError{Type: t, From: cur, To: next, Illegal: true}
	}
	if mask&aCur != 0 && cur != rtr && cur != rts && cur != sqd && cur != sqe {
		return &ModifyError{Type: t, From: cur, To: next, BadCurState: true}
	}
	tr := &Transitions[cur][next]
	if !tr.Valid {
		return &ModifyError{Type: t, From: cur, To: next, Illegal: true}
	}
	req, opt := tr.Required[col], tr.Optional[col]
	missing := req &^ mask
	extra := mask &^ (req | opt | aState)
	if missing != 0 || extra != 0 {
		return &ModifyError{Type: t, From: cur, To: next, Missing: missing, Extra: extra}
	}
	return nil
}
