package qp

import (
	"syscall"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

const qpAccessFlags = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// Modify changes the QP's attributes and state (ibv_modify_qp). The mask
// must fit the transition from the current state to attr.QPState (or to
// the current state when IBV_QP_STATE is absent) exactly as the
// transition table says, and every value must be in range; otherwise the
// error wraps EINVAL, names what was wrong, and nothing changes.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	const op = "modify_qp"
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.life != alive {
		return verbs.Errorf(op, syscall.EINVAL, "QP %#x is destroyed", q.num)
	}
	cur := q.attr.QPState
	if mask&verbs.AttrCurState != 0 && attr.CurQPState != cur {
		return verbs.Errorf(op, syscall.EINVAL, "QP %#x: IBV_QP_CUR_STATE says %s but the QP is in %s", q.num, attr.CurQPState, cur)
	}
	next := cur
	if mask&verbs.AttrState != 0 {
		next = attr.QPState
	}
	if err := CheckTransition(q.typ, cur, next, mask); err != nil {
		return err
	}
	if err := q.checkValues(attr, mask); err != nil {
		return err
	}
	var path wire.Net
	if mask&verbs.AttrAV != 0 && q.cfg.Resolve != nil {
		var err error
		if path, err = q.cfg.Resolve(&attr.AHAttr); err != nil {
			return verbs.Errorf(op, syscall.EINVAL, "QP %#x: ah_attr: %v", q.num, err)
		}
	}
	q.applyAttrLocked(attr, mask)
	q.syncParamsLocked()
	if mask&verbs.AttrAV != 0 {
		q.tp.P.Path = path
	}
	if mask&(verbs.AttrRetryCnt|verbs.AttrRNRRetry) != 0 {
		q.tp.ParamsChanged() // new budgets apply from now (SQD -> SQD)
	}
	if next != cur || next == verbs.QPStateReset {
		// IBV_QP_EN_SQD_ASYNC_NOTIFY is an input of the one RTS->SQD
		// modify it comes with (IBTA 11.2.5.2), not a lasting attribute.
		notify := mask&verbs.AttrEnSQDAsyncNotify != 0 && attr.EnSQDAsyncNotify
		q.setStateLocked(next, notify)
	}
	return nil
}

// checkValues checks the range of every attribute the mask names.
func (q *QP) checkValues(a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	const op = "modify_qp"
	l := &q.cfg.Limits
	bad := func(format string, args ...any) error {
		return verbs.Errorf(op, syscall.EINVAL, "QP %#x: "+format, append([]any{q.num}, args...)...)
	}
	if mask&verbs.AttrState != 0 && !a.QPState.Valid() {
		return bad("unknown qp_state %d", uint8(a.QPState))
	}
	if mask&verbs.AttrPort != 0 && (a.PortNum < 1 || a.PortNum > l.PhysPortCnt) {
		return bad("port_num %d not in 1..%d", a.PortNum, l.PhysPortCnt)
	}
	if mask&verbs.AttrPKeyIndex != 0 && a.PKeyIndex >= l.PKeyTblLen {
		return bad("pkey_index %d not below the P_Key table length %d", a.PKeyIndex, l.PKeyTblLen)
	}
	if mask&verbs.AttrAccessFlags != 0 && a.QPAccessFlags&^qpAccessFlags != 0 {
		return bad("qp_access_flags %#x has bits other than LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC", uint32(a.QPAccessFlags))
	}
	if mask&verbs.AttrAV != 0 {
		if err := q.checkAV(&a.AHAttr, "ah_attr"); err != nil {
			return err
		}
	}
	if mask&verbs.AttrAltPath != 0 {
		if err := q.checkAV(&a.AltAHAttr, "alt_ah_attr"); err != nil {
			return err
		}
		if a.AltPortNum < 1 || a.AltPortNum > l.PhysPortCnt {
			return bad("alt_port_num %d not in 1..%d", a.AltPortNum, l.PhysPortCnt)
		}
		if a.AltPKeyIndex >= l.PKeyTblLen {
			return bad("alt_pkey_index %d not below %d", a.AltPKeyIndex, l.PKeyTblLen)
		}
		if a.AltTimeout > 31 {
			return bad("alt_timeout %d exceeds 31", a.AltTimeout)
		}
	}
	if mask&verbs.AttrPathMTU != 0 && (!a.PathMTU.Valid() || a.PathMTU > l.MaxMTU) {
		return bad("path_mtu %s is not a valid MTU up to the port's max_mtu %s", a.PathMTU, l.MaxMTU)
	}
	if mask&verbs.AttrTimeout != 0 && a.Timeout > 31 {
		return bad("timeout %d exceeds 31", a.Timeout)
	}
	if mask&verbs.AttrRetryCnt != 0 && a.RetryCnt > 7 {
		return bad("retry_cnt %d exceeds 7", a.RetryCnt)
	}
	if mask&verbs.AttrRNRRetry != 0 && a.RNRRetry > 7 {
		return bad("rnr_retry %d exceeds 7", a.RNRRetry)
	}
	if mask&verbs.AttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return bad("min_rnr_timer %d exceeds 31", a.MinRNRTimer)
	}
	if mask&verbs.AttrMaxQPRdAtomic != 0 && uint32(a.MaxRdAtomic) > l.MaxQPInitRdAtom {
		return bad("max_rd_atomic %d exceeds max_qp_init_rd_atom %d", a.MaxRdAtomic, l.MaxQPInitRdAtom)
	}
	if mask&verbs.AttrMaxDestRdAtomic != 0 && uint32(a.MaxDestRdAtomic) > l.MaxQPRdAtom {
		return bad("max_dest_rd_atomic %d exceeds max_qp_rd_atom %d", a.MaxDestRdAtomic, l.MaxQPRdAtom)
	}
	if mask&verbs.AttrRQPSN != 0 && a.RQPSN > 0xffffff {
		return bad("rq_psn %#x exceeds 24 bits", a.RQPSN)
	}
	if mask&verbs.AttrSQPSN != 0 && a.SQPSN > 0xffffff {
		return bad("sq_psn %#x exceeds 24 bits", a.SQPSN)
	}
	if mask&verbs.AttrDestQPN != 0 && a.DestQPNum > 0xffffff {
		return bad("dest_qp_num %#x exceeds 24 bits", a.DestQPNum)
	}
	if mask&verbs.AttrPathMigState != 0 && a.PathMigState > verbs.MigArmed {
		return bad("path_mig_state %d is not MIGRATED, REARM or ARMED", a.PathMigState)
	}
	return nil
}

// checkAV checks an address vector: RoCE needs the GRH, a source GID index
// inside the GID table, a non-zero destination GID and a valid port.
func (q *QP) checkAV(av *verbs.AHAttr, name string) error {
	l := &q.cfg.Limits
	bad := func(format string, args ...any) error {
		return verbs.Errorf("modify_qp", syscall.EINVAL, "QP %#x: %s: "+format, append([]any{q.num, name}, args...)...)
	}
	switch {
	case !av.IsGlobal:
		return bad("RoCE needs a GRH (is_global)")
	case int(av.GRH.SGIDIndex) >= l.GIDTblLen:
		return bad("sgid_index %d not below the GID table length %d", av.GRH.SGIDIndex, l.GIDTblLen)
	case av.GRH.DGID.IsZero():
		return bad("dgid is zero")
	case av.PortNum < 1 || av.PortNum > l.PhysPortCnt:
		return bad("port_num %d not in 1..%d", av.PortNum, l.PhysPortCnt)
	}
	return nil
}

// applyAttrLocked stores the attributes the mask names.
//
// Preconditions: q.mu is held; the values were checked.
func (q *QP) applyAttrLocked(a *verbs.QPAttr, mask verbs.QPAttrMask) {
	t := &q.attr
	set := func(bit verbs.QPAttrMask, f func()) {
		if mask&bit != 0 {
			f()
		}
	}
	set(verbs.AttrAccessFlags, func() { t.QPAccessFlags = a.QPAccessFlags })
	set(verbs.AttrPKeyIndex, func() { t.PKeyIndex = a.PKeyIndex })
	set(verbs.AttrPort, func() { t.PortNum = a.PortNum })
	set(verbs.AttrQKey, func() { t.QKey = a.QKey })
	set(verbs.AttrAV, func() { t.AHAttr = a.AHAttr })
	set(verbs.AttrPathMTU, func() { t.PathMTU = a.PathMTU })
	set(verbs.AttrTimeout, func() { t.Timeout = a.Timeout })
	set(verbs.AttrRetryCnt, func() { t.RetryCnt = a.RetryCnt })
	set(verbs.AttrRNRRetry, func() { t.RNRRetry = a.RNRRetry })
	set(verbs.AttrRQPSN, func() { t.RQPSN = a.RQPSN })
	set(verbs.AttrMaxQPRdAtomic, func() { t.MaxRdAtomic = a.MaxRdAtomic })
	set(verbs.AttrAltPath, func() {
		t.AltAHAttr, t.AltPortNum, t.AltPKeyIndex, t.AltTimeout = a.AltAHAttr, a.AltPortNum, a.AltPKeyIndex, a.AltTimeout
	})
	set(verbs.AttrMinRNRTimer, func() { t.MinRNRTimer = a.MinRNRTimer })
	set(verbs.AttrSQPSN, func() { t.SQPSN = a.SQPSN })
	set(verbs.AttrMaxDestRdAtomic, func() { t.MaxDestRdAtomic = a.MaxDestRdAtomic })
	set(verbs.AttrPathMigState, func() { t.PathMigState = a.PathMigState })
	set(verbs.AttrDestQPN, func() { t.DestQPNum = a.DestQPNum })
}

// setStateLocked is the single place a QP changes state, and owns every
// side effect of a change:
//
//   - to RESET: both queues are emptied without completions and the
//     attributes return to their defaults (IBTA 10.3.1: a QP in RESET has
//     no outstanding work);
//   - to ERR: every outstanding send and then receive work request is
//     completed with IBV_WC_WR_FLUSH_ERR, in order (IBTA 10.3.1;
//     ibv_modify_qp(3)); the receive WQE of a message being received, if
//     any, is the oldest and is flushed first, whether it came from the
//     QP's receive queue or its SRQ; a QP on an SRQ raises
//     IBV_EVENT_QP_LAST_WQE_REACHED (IBTA 11.6.3.3);
//   - RTS to SQD: the send queue is drained; when the modify asked for
//     it (sqdNotify, IBV_QP_EN_SQD_ASYNC_NOTIFY) the QP raises
//     IBV_EVENT_SQ_DRAINED once nothing is in flight.
//
// The transport learns of every change (q.tp.SetState) and starts or
// stops its requester, completer and responder.
//
// Preconditions: q.mu is held.
func (q *QP) setStateLocked(next verbs.QPState, sqdNotify bool) {
	prev := q.attr.QPState
	q.attr.QPState = next
	q.stateRO.Store(uint32(next))
	q.tp.SetState(next, q.attr.RQPSN, q.attr.SQPSN)
	switch next {
	case verbs.QPStateReset:
		q.sq.Reset()
		q.rq.Reset()
		q.attr = q.defaultAttr()
		q.syncParamsLocked()
		q.tp.P.Path = wire.Net{}
	case verbs.QPStateInit, verbs.QPStateRTR:
	case verbs.QPStateRTS:
		q.kickLocked()
	case verbs.QPStateErr:
		if prev == verbs.QPStateErr {
			return
		}
		q.flushSendLocked()
		var wqe verbs.RecvWQE
		if q.tp.TakeRecvInProgress(&wqe) {
			q.flushRecvWRLocked(wqe.WRID)
		}
		q.flushRecvLocked()
		if q.srq != nil {
			q.raiseLocked(verbs.EventQPLastWQEReached)
		}
	case verbs.QPStateSQE:
		// A send error (UC, UD): the failed WQE was completed; the rest
		// of the send queue is flushed (IBTA 10.3.1, SQE).
		q.flushSendLocked()
	case verbs.QPStateSQD:
		// The drain completes when no started WQE is left (IBTA 11.6.3.1,
		// Send Queue Drained): at once when nothing is in flight,
		// otherwise when the last started WQE completes.
		if prev == verbs.QPStateRTS && sqdNotify && q.tp.SQDrainNotify() {
			q.raiseLocked(verbs.EventSQDrained)
		}
	}
}

// kickLocked tells the transport's scheduler that the QP may have work.
//
// Preconditions: q.mu is held.
func (q *QP) kickLocked() {
	if q.h != nil && q.life == alive {
		q.h.Kick()
	}
}

// raiseLocked raises an affiliated asynchronous event.
//
// Preconditions: q.mu is held.
func (q *QP) raiseLocked(t verbs.EventType) {
	if q.cfg.OnEvent != nil {
		q.cfg.OnEvent(q, t)
	}
}
