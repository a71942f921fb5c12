package hca

import (
	"fmt"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// Remote is what a QP needs to know of the QP it connects to: what
// rdma-core's examples exchange out of band (ibv_rc_pingpong's
// "remote address: LID, QPN, PSN, GID").
type Remote struct {
	// QPN is the peer QP's number: this QP's dest_qp_num.
	QPN uint32
	// PSN is the first PSN the peer sends (its sq_psn, ConnectOptions.PSN
	// on its side): this QP's rq_psn.
	PSN uint32
	// GID is the peer port's GID (Device.QueryGID on its side): the
	// dgid of this QP's address vector.
	GID verbs.GID
}

// ConnectOptions are the attributes Connect gives a QP beyond its peer's.
// A zero field takes a default: the value rdma-core's ibv_rc_pingpong (or,
// for the Q_Key, ibv_ud_pingpong) uses, where each field does not say
// otherwise. So a zero cannot be asked for where zero means the default
// (Timeout 0, the infinite timer; RetryCnt 0; MaxDestRdAtomic 0; ...):
// for those, and for any attribute not here, walk the QP with Modify.
type ConnectOptions struct {
	// Port is the port_num; 0 takes 1 (ibv_rc_pingpong's -i default).
	Port uint8
	// SGIDIndex is the sgid_index of the address vector: the local GID
	// the QP sends from. 0 takes 1, the device's first address
	// (ibv_rc_pingpong needs -g for RoCE; 1 is what rxe users give it).
	// Index 0 is the link-local GID, which only a device on a
	// link.Interface (link/tap) can send from.
	SGIDIndex uint8
	// PathMTU is the path_mtu (RC, UC); 0 takes the port's active MTU
	// (ibv_rc_pingpong's default is 1024, rxe's active MTU on a
	// 1500-byte Ethernet link).
	PathMTU verbs.MTU
	// PSN is the sq_psn: the PSN of the first packet this QP sends,
	// which the peer gives as its Remote.PSN. ibv_rc_pingpong picks it at
	// random; here the zero value is PSN 0.
	PSN uint32
	// Access is the qp_access_flags (RC, UC): what a peer may do to the
	// memory of this QP's protection domain besides SEND
	// (verbs.AccessRemoteWrite, AccessRemoteRead, AccessRemoteAtomic).
	// The zero value grants nothing more than SEND, as ibv_rc_pingpong
	// does: remote access is opened on purpose, as with ibv_reg_mr, and
	// needs both the QP's and the memory region's consent. UC carries
	// RDMA WRITE only.
	Access verbs.AccessFlags
	// QKey is the Q_Key of a UD QP; 0 takes 0x11111111, ibv_ud_pingpong's.
	QKey uint32
	// HopLimit is the address vector's hop_limit, the IP TTL rxe sends
	// with (softhca's transport sends with 64 whatever it says); 0 takes
	// 1, ibv_rc_pingpong's: the peer is on the same link.
	HopLimit uint8
	// MinRNRTimer is the RC min_rnr_timer code (the delay a peer is
	// asked to wait when no receive is posted); 0 takes 12 (0.64 ms).
	MinRNRTimer uint8
	// Timeout is the RC local ACK timeout, 4.096 us * 2^Timeout; 0 takes
	// 14 (about 67 ms).
	Timeout uint8
	// RetryCnt and RNRRetry are the RC retry counts after a timeout and
	// after an RNR NAK; 0 takes 7 (for RNRRetry, retry forever).
	RetryCnt uint8
	RNRRetry uint8
	// MaxRdAtomic (max_rd_atomic) is how many RDMA READ and atomic
	// requests this RC QP may have outstanding towards its peer;
	// MaxDestRdAtomic (max_dest_rd_atomic) how many of the peer's it
	// serves at once. 0 takes 1 for each.
	MaxRdAtomic     uint8
	MaxDestRdAtomic uint8
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Connect takes the QP from RESET (or INIT) through INIT, RTR and RTS
// with the usual attributes, three calls of Modify with the attribute
// masks ibv_modify_qp(3) requires for the QP's type. For RC and UC it
// points the QP at r: dest_qp_num r.QPN, rq_psn r.PSN, and an address
// vector to r.GID from o.SGIDIndex. A UD QP has no peer and ignores r
// (each send names its destination); it gets o.QKey. o may be nil: every
// option then takes its default (see ConnectOptions).
//
// A QP already in INIT (say, to post receives before the peer is known,
// as ibv_rc_pingpong does) keeps its INIT attributes (port, P_Key index,
// access flags, Q_Key): Connect moves it to RTR and RTS only.
//
// Errors are Modify's, wrapping EINVAL, prefixed with the step that
// failed ("connect: QP 0x11 to RTR: ..."); the steps before it stay done.
// A QP in any other state than RESET and INIT is EINVAL, and nothing
// changes.
func (q *QP) Connect(r Remote, o *ConnectOptions) error {
	if o == nil {
		o = &ConnectOptions{}
	}
	port := orDefault(o.Port, 1)
	typ := q.Type()
	step := func(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
		if err := q.Modify(attr, mask|verbs.AttrState); err != nil {
			return fmt.Errorf("connect: QP %#x to %s: %w", q.Num(), attr.QPState, err)
		}
		return nil
	}
	switch st := q.State(); st {
	case verbs.QPStateReset:
		init := verbs.QPAttr{QPState: verbs.QPStateInit, PKeyIndex: 0, PortNum: port}
		mask := verbs.AttrPKeyIndex | verbs.AttrPort
		if typ == verbs.QPTypeUD {
			init.QKey = orDefault(o.QKey, 0x11111111)
			mask |= verbs.AttrQKey
		} else {
			init.QPAccessFlags = o.Access
			mask |= verbs.AttrAccessFlags
		}
		if err := step(&init, mask); err != nil {
			return err
		}
	case verbs.QPStateInit:
	default:
		return verbs.Errorf("connect", syscall.EINVAL, "QP %#x is in %s; Connect takes a QP in RESET or INIT", q.Num(), st)
	}

	rtr := verbs.QPAttr{QPState: verbs.QPStateRTR}
	var mask verbs.QPAttrMask
	if typ != verbs.QPTypeUD {
		mtu := o.PathMTU
		if mtu == 0 {
			pa, err := q.pd.dev.QueryPort(port)
			if err != nil {
				return fmt.Errorf("connect: QP %#x to RTR: %w", q.Num(), err)
			}
			mtu = pa.ActiveMTU
		}
		rtr.PathMTU, rtr.DestQPNum, rtr.RQPSN = mtu, r.QPN, r.PSN
		rtr.AHAttr = verbs.AHAttr{IsGlobal: true, PortNum: port, GRH: verbs.GlobalRoute{
			DGID: r.GID, SGIDIndex: orDefault(o.SGIDIndex, 1), HopLimit: orDefault(o.HopLimit, 1)}}
		mask = verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		if typ == verbs.QPTypeRC {
			rtr.MaxDestRdAtomic = orDefault(o.MaxDestRdAtomic, 1)
			rtr.MinRNRTimer = orDefault(o.MinRNRTimer, 12)
			mask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		}
	}
	if err := step(&rtr, mask); err != nil {
		return err
	}

	rts := verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: o.PSN}
	mask = verbs.AttrSQPSN
	if typ == verbs.QPTypeRC {
		rts.Timeout = orDefault(o.Timeout, 14)
		rts.RetryCnt = orDefault(o.RetryCnt, 7)
		rts.RNRRetry = orDefault(o.RNRRetry, 7)
		rts.MaxRdAtomic = orDefault(o.MaxRdAtomic, 1)
		mask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	}
	return step(&rts, mask)
}
