package verbs

import (
	"fmt"
	"strings"
)

// QPType is the transport service of a queue pair (enum ibv_qp_type).
type QPType uint8

// QP types.
const (
	QPTypeRC        QPType = 2 // IBV_QPT_RC: reliable connection
	QPTypeUC        QPType = 3 // IBV_QPT_UC: unreliable connection
	QPTypeUD        QPType = 4 // IBV_QPT_UD: unreliable datagram
	QPTypeRawPacket QPType = 8 // IBV_QPT_RAW_PACKET: not supported by softhca
)

// String returns the IBTA abbreviation.
func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeRawPacket:
		return "RAW_PACKET"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is the state of a queue pair (enum ibv_qp_state, IBTA 10.3.1).
//
//	create
//	  |
//	  v        modify          modify          modify
//	RESET ---------> INIT ---------> RTR ---------> RTS <----+
//	  ^                                            |  ^      |
//	  | modify to RESET                     modify |  | modify
//	  | from any state                         v   |  |
//	  |                                         SQD ---+      |
//	  |                          send error (UC/UD)          |
//	  |                                RTS ---> SQE ----------+
//	  |
//	 ERR <-- modify to ERR from any state, or a fatal error
type QPState uint8

// QP states.
const (
	QPStateReset QPState = 0 // IBV_QPS_RESET
	QPStateInit  QPState = 1 // IBV_QPS_INIT
	QPStateRTR   QPState = 2 // IBV_QPS_RTR: ready to receive
	QPStateRTS   QPState = 3 // IBV_QPS_RTS: ready to send
	QPStateSQD   QPState = 4 // IBV_QPS_SQD: send queue drained
	QPStateSQE   QPState = 5 // IBV_QPS_SQE: send queue error
	QPStateErr   QPState = 6 // IBV_QPS_ERR
	// NumQPStates is the number of real states, for tables indexed by state.
	NumQPStates = 7
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the state's name as libibverbs prints it (ibv_qp_state_str
// without the "IBV_QPS_" prefix).
func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// Valid reports whether s is one of the seven states.
func (s QPState) Valid() bool { return s < NumQPStates }

// QPAttrMask says which fields of QPAttr a modify sets or a query fills
// (enum ibv_qp_attr_mask).
type QPAttrMask uint32

// QP attribute mask bits, in libibverbs order.
const (
	AttrState            QPAttrMask = 1 << 0  // IBV_QP_STATE
	AttrCurState         QPAttrMask = 1 << 1  // IBV_QP_CUR_STATE
	AttrEnSQDAsyncNotify QPAttrMask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY
	AttrAccessFlags      QPAttrMask = 1 << 3  // IBV_QP_ACCESS_FLAGS
	AttrPKeyIndex        QPAttrMask = 1 << 4  // IBV_QP_PKEY_INDEX
	AttrPort             QPAttrMask = 1 << 5  // IBV_QP_PORT
	AttrQKey             QPAttrMask = 1 << 6  // IBV_QP_QKEY
	AttrAV               QPAttrMask = 1 << 7  // IBV_QP_AV
	AttrPathMTU          QPAttrMask = 1 << 8  // IBV_QP_PATH_MTU
	AttrTimeout          QPAttrMask = 1 << 9  // IBV_QP_TIMEOUT
	AttrRetryCnt         QPAttrMask = 1 << 10 // IBV_QP_RETRY_CNT
	AttrRNRRetry         QPAttrMask = 1 << 11 // IBV_QP_RNR_RETRY
	AttrRQPSN            QPAttrMask = 1 << 12 // IBV_QP_RQ_PSN
	AttrMaxQPRdAtomic    QPAttrMask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC
	AttrAltPath          QPAttrMask = 1 << 14 // IBV_QP_ALT_PATH
	AttrMinRNRTimer      QPAttrMask = 1 << 15 // IBV_QP_MIN_RNR_TIMER
	AttrSQPSN            QPAttrMask = 1 << 16 // IBV_QP_SQ_PSN
	AttrMaxDestRdAtomic  QPAttrMask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC
	AttrPathMigState     QPAttrMask = 1 << 18 // IBV_QP_PATH_MIG_STATE
	AttrCap              QPAttrMask = 1 << 19 // IBV_QP_CAP
	AttrDestQPN          QPAttrMask = 1 << 20 // IBV_QP_DEST_QPN
	AttrRateLimit        QPAttrMask = 1 << 25 // IBV_QP_RATE_LIMIT
)

var attrNames = [...]string{
	0: "STATE", 1: "CUR_STATE", 2: "EN_SQD_ASYNC_NOTIFY", 3: "ACCESS_FLAGS",
	4: "PKEY_INDEX", 5: "PORT", 6: "QKEY", 7: "AV", 8: "PATH_MTU", 9: "TIMEOUT",
	10: "RETRY_CNT", 11: "RNR_RETRY", 12: "RQ_PSN", 13: "MAX_QP_RD_ATOMIC",
	14: "ALT_PATH", 15: "MIN_RNR_TIMER", 16: "SQ_PSN", 17: "MAX_DEST_RD_ATOMIC",
	18: "PATH_MIG_STATE", 19: "CAP", 20: "DEST_QPN", 25: "RATE_LIMIT",
}

// String lists the mask's bits by their libibverbs names joined with "|"
// ("IBV_QP_AV|IBV_QP_PATH_MTU"), or "0".
func (m QPAttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var parts []string
	for i := 0; i < 32; i++ {
		if m&(1<<i) == 0 {
			continue
		}
		if i < len(attrNames) && attrNames[i] != "" {
			parts = append(parts, "IBV_QP_"+attrNames[i])
		} else {
			parts = append(parts, fmt.Sprintf("bit%d", i))
		}
	}
	return strings.Join(parts, "|")
}

// MTU is an InfiniBand path MTU code (enum ibv_mtu).
type MTU uint8

// MTU codes.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five codes.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// String returns the size, e.g. "1024".
func (m MTU) String() string {
	if !m.Valid() {
		return fmt.Sprintf("MTU(%d)", uint8(m))
	}
	return fmt.Sprint(m.Bytes())
}

// MTUFromBytes returns the largest MTU code not above n bytes, or 0 if n is
// below 256.
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}

// MigState is the path migration state (enum ibv_mig_state).
type MigState uint8

// Path migration states.
const (
	MigMigrated MigState = 0 // IBV_MIG_MIGRATED
	MigRearm    MigState = 1 // IBV_MIG_REARM
	MigArmed    MigState = 2 // IBV_MIG_ARMED
)

// QPCap holds the sizes of a QP's queues (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// GlobalRoute is the GRH part of an address vector (struct ibv_global_route).
// On RoCE the GID carries the peer's IP address.
type GlobalRoute struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr is an address vector (struct ibv_ah_attr). RoCE needs the GRH:
// IsGlobal must be set and GRH.DGID names the peer.
type AHAttr struct {
	GRH         GlobalRoute
	DLID        uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool
	PortNum     uint8
}

// QPAttr holds the attributes a modify sets and a query returns (struct
// ibv_qp_attr). Which fields count is said by a QPAttrMask.
type QPAttr struct {
	QPState          QPState
	CurQPState       QPState
	PathMTU          MTU
	PathMigState     MigState
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPNum        uint32
	QPAccessFlags    AccessFlags
	Cap              QPCap
	AHAttr           AHAttr
	AltAHAttr        AHAttr
	PKeyIndex        uint16
	AltPKeyIndex     uint16
	EnSQDAsyncNotify bool
	SQDraining       bool
	MaxRdAtomic      uint8
	MaxDestRdAtomic  uint8
	MinRNRTimer      uint8
	PortNum          uint8
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	AltPortNum       uint8
	AltTimeout       uint8
	RateLimit        uint32
}
