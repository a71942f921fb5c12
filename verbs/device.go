package verbs

import (
	"fmt"
	"net/netip"
)

// GID is a 128-bit global identifier (union ibv_gid). On RoCEv2 it is the
// port's IP address: IPv6 as is, IPv4 as an IPv4-mapped IPv6 address
// (::ffff:a.b.c.d).
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the GID as an IP address, unmapping IPv4-mapped GIDs.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsZero reports whether every byte is zero.
func (g GID) IsZero() bool { return g == GID{} }

// String formats the GID as libibverbs tools do: eight groups of four hex
// digits ("0000:0000:0000:0000:0000:ffff:0a4d:0002").
func (g GID) String() string {
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
		g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15])
}

// AtomicCap says how atomics are atomic (enum ibv_atomic_cap).
type AtomicCap uint8

// Atomic capabilities.
const (
	AtomicNone AtomicCap = 0 // IBV_ATOMIC_NONE
	AtomicHCA  AtomicCap = 1 // IBV_ATOMIC_HCA: atomic with respect to this HCA
	AtomicGlob AtomicCap = 2 // IBV_ATOMIC_GLOB
)

// DeviceCapFlags are device capabilities (enum ibv_device_cap_flags).
type DeviceCapFlags uint32

// Device capability flags that rxe reports (ibv_devinfo -v).
const (
	DeviceBadPKeyCntr      DeviceCapFlags = 1 << 1
	DeviceBadQKeyCntr      DeviceCapFlags = 1 << 2
	DeviceAutoPathMig      DeviceCapFlags = 1 << 4
	DeviceChangePhyPort    DeviceCapFlags = 1 << 5
	DeviceUDAVPortEnforce  DeviceCapFlags = 1 << 6
	DevicePortActiveEvent  DeviceCapFlags = 1 << 10
	DeviceSysImageGUID     DeviceCapFlags = 1 << 11
	DeviceRCRNRNAKGen      DeviceCapFlags = 1 << 12
	DeviceSRQResize        DeviceCapFlags = 1 << 13
	DeviceMemWindow        DeviceCapFlags = 1 << 17
	DeviceMemMgtExtensions DeviceCapFlags = 1 << 21
	DeviceMemWindowType2B  DeviceCapFlags = 1 << 24
)

// DeviceAttr are a device's attributes and limits (struct
// ibv_device_attr), with the tag-matching limits of ibv_device_attr_ex.
type DeviceAttr struct {
	FWVer                 string
	NodeGUID              uint64
	SysImageGUID          uint64
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 uint32
	MaxQPWR               uint32
	DeviceCapFlags        DeviceCapFlags
	MaxSGE                uint32
	MaxSGERd              uint32
	MaxCQ                 uint32
	MaxCQE                uint32
	MaxMR                 uint32
	MaxPD                 uint32
	MaxQPRdAtom           uint32
	MaxEERdAtom           uint32
	MaxResRdAtom          uint32
	MaxQPInitRdAtom       uint32
	MaxEEInitRdAtom       uint32
	AtomicCap             AtomicCap
	MaxEE                 uint32
	MaxRDD                uint32
	MaxMW                 uint32
	MaxRawIPv6QP          uint32
	MaxRawEthyQP          uint32
	MaxMcastGrp           uint32
	MaxMcastQPAttach      uint32
	MaxTotalMcastQPAttach uint32
	MaxAH                 uint32
	MaxFMR                uint32
	MaxMapPerFMR          uint32
	MaxSRQ                uint32
	MaxSRQWR              uint32
	MaxSRQSGE             uint32
	MaxPKeys              uint16
	LocalCAAckDelay       uint8
	PhysPortCnt           uint8
	// MaxInlineData is not in struct ibv_device_attr; rxe reports it
	// through its create_qp limits. It bounds QPCap.MaxInlineData.
	MaxInlineData uint32
	// TM holds the tag-matching limits (struct ibv_tm_caps).
	TM TMCaps
}

// TMCaps are the tag-matching limits (struct ibv_tm_caps).
type TMCaps struct {
	MaxRndvHdrSize uint32
	MaxNumTags     uint32
	Flags          uint32
	MaxOps         uint32
	MaxSGE         uint32
}

// TMCapRC is IBV_TM_CAP_RC: tag matching on RC QPs (TMCaps.Flags).
const TMCapRC uint32 = 1 << 0

// PortState is a port's logical state (enum ibv_port_state).
type PortState uint8

// Port states.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

// String returns ibv_port_state_str's name.
func (s PortState) String() string {
	switch s {
	case PortNop:
		return "PORT_NOP"
	case PortDown:
		return "PORT_DOWN"
	case PortInit:
		return "PORT_INIT"
	case PortArmed:
		return "PORT_ARMED"
	case PortActive:
		return "PORT_ACTIVE"
	case PortActiveDefer:
		return "PORT_ACTIVE_DEFER"
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// LinkLayer is a port's link layer.
type LinkLayer uint8

// Link layers (IBV_LINK_LAYER_*).
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

// PortAttr are a port's attributes (struct ibv_port_attr).
type PortAttr struct {
	State         PortState
	MaxMTU        MTU
	ActiveMTU     MTU
	GIDTblLen     int32
	PortCapFlags  uint32
	MaxMsgSz      uint32
	BadPKeyCntr   uint32
	QKeyViolCntr  uint32
	PKeyTblLen    uint16
	LID           uint16
	SMLID         uint16
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8
	ActiveSpeed   uint8
	PhysState     uint8
	LinkLayer     LinkLayer
}

// SRQAttr are a shared receive queue's attributes (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
}

// SRQAttrMask says which SRQAttr fields a modify sets (enum
// ibv_srq_attr_mask).
type SRQAttrMask uint32

// SRQ attribute mask bits.
const (
	SRQMaxWR SRQAttrMask = 1 << 0 // IBV_SRQ_MAX_WR: resize
	SRQLimit SRQAttrMask = 1 << 1 // IBV_SRQ_LIMIT: arm the limit event
)

// EventType is the type of an asynchronous event (enum ibv_event_type).
type EventType uint8

// Asynchronous event types.
const (
	EventCQErr            EventType = iota // IBV_EVENT_CQ_ERR
	EventQPFatal                           // IBV_EVENT_QP_FATAL
	EventQPReqErr                          // IBV_EVENT_QP_REQ_ERR
	EventQPAccessErr                       // IBV_EVENT_QP_ACCESS_ERR
	EventCommEst                           // IBV_EVENT_COMM_EST
	EventSQDrained                         // IBV_EVENT_SQ_DRAINED
	EventPathMig                           // IBV_EVENT_PATH_MIG
	EventPathMigErr                        // IBV_EVENT_PATH_MIG_ERR
	EventDeviceFatal                       // IBV_EVENT_DEVICE_FATAL
	EventPortActive                        // IBV_EVENT_PORT_ACTIVE
	EventPortErr                           // IBV_EVENT_PORT_ERR
	EventLIDChange                         // IBV_EVENT_LID_CHANGE
	EventPKeyChange                        // IBV_EVENT_PKEY_CHANGE
	EventSMChange                          // IBV_EVENT_SM_CHANGE
	EventSRQErr                            // IBV_EVENT_SRQ_ERR
	EventSRQLimitReached                   // IBV_EVENT_SRQ_LIMIT_REACHED
	EventQPLastWQEReached                  // IBV_EVENT_QP_LAST_WQE_REACHED
	EventClientReregister                  // IBV_EVENT_CLIENT_REREGISTER
	EventGIDChange                         // IBV_EVENT_GID_CHANGE
	EventWQFatal                           // IBV_EVENT_WQ_FATAL
)

var eventNames = [...]string{
	"CQ error", "local work queue catastrophic error", "invalid request local work queue error",
	"local access violation work queue error", "communication established", "send queue drained",
	"path migration successful", "path migration request error", "local catastrophic error",
	"port active", "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error",
	"SRQ limit reached", "last WQE reached", "client reregistration", "GID table change",
	"WQ fatal",
}

// String returns the event as ibv_event_type_str prints it.
func (e EventType) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return fmt.Sprintf("EventType(%d)", uint8(e))
}
