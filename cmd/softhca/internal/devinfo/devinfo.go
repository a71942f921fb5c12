// Package devinfo describes an RDMA device the way rdma-core's ibv_devinfo
// does: a plain data type, [Device], that holds what ibv_devinfo -v
// prints (the device attributes of ibv_query_device_ex, the ports'
// attributes, their GID tables with GID types, and their P_Keys), a
// constructor from a softhca device, [FromDevice], and the text
// formatter, [Write], whose output has ibv_devinfo's fields, order,
// labels and tabs (rdma-core 44, Debian 12: libibverbs/examples/devinfo.c).
//
// A Device holds no pointer into hca: it is a value to print, compare or
// send over a control API. It marshals to JSON with stable snake_case
// names, libibverbs' own field names (struct ibv_device_attr,
// ibv_device_attr_ex, ibv_port_attr). Enumerations (atomic_cap, state,
// mtu, link_layer, ...) are their libibverbs numbers; every 64-bit
// number is a JSON string of its decimal value (max_mr_size is 2^64-1,
// which tools that read numbers as doubles, jq and JavaScript, would
// round); GUIDs are strings in ibv_devinfo's form
// ("0000:0aff:fe4d:0002"), GIDs IPv6 addresses ("::ffff:10.77.0.2").
package devinfo

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
)

// Transport is a device's transport type (enum ibv_transport_type).
type Transport int32

// Transport types.
const (
	TransportUnknown     Transport = -1 // IBV_TRANSPORT_UNKNOWN
	TransportIB          Transport = 0  // IBV_TRANSPORT_IB: InfiniBand and RoCE
	TransportIWARP       Transport = 1  // IBV_TRANSPORT_IWARP
	TransportUSNIC       Transport = 2  // IBV_TRANSPORT_USNIC
	TransportUSNICUDP    Transport = 3  // IBV_TRANSPORT_USNIC_UDP
	TransportUnspecified Transport = 4  // IBV_TRANSPORT_UNSPECIFIED
)

// Device describes one device: what ibv_devinfo -v prints of it.
type Device struct {
	// Name is the device name (ibv_get_device_name: "softhca0", "rxe0").
	Name string `json:"name"`
	// Transport is ibv_device's transport_type; RoCE devices are
	// TransportIB.
	Transport Transport `json:"transport"`
	// BoardID is sysfs's board_id, printed when not empty (softhca has
	// none, and neither has rxe).
	BoardID string `json:"board_id,omitempty"`
	// Attr are the attributes of ibv_query_device.
	Attr Attr `json:"attr"`
	// AttrEx are the extended attributes of ibv_query_device_ex.
	AttrEx AttrEx `json:"attr_ex"`
	// NumCompVectors is ibv_context's num_comp_vectors.
	NumCompVectors int32 `json:"num_comp_vectors"`
	// Ports are the device's ports, in order of their numbers.
	Ports []Port `json:"ports"`
}

// Attr are a device's attributes (struct ibv_device_attr), with
// softhca's MaxInlineData.
type Attr struct {
	FWVer                 string               `json:"fw_ver"`
	NodeGUID              GUID                 `json:"node_guid"`
	SysImageGUID          GUID                 `json:"sys_image_guid"`
	MaxMRSize             uint64               `json:"max_mr_size,string"`
	PageSizeCap           uint64               `json:"page_size_cap,string"`
	VendorID              uint32               `json:"vendor_id"`
	VendorPartID          uint32               `json:"vendor_part_id"`
	HWVer                 uint32               `json:"hw_ver"`
	MaxQP                 uint32               `json:"max_qp"`
	MaxQPWR               uint32               `json:"max_qp_wr"`
	DeviceCapFlags        verbs.DeviceCapFlags `json:"device_cap_flags"`
	MaxSGE                uint32               `json:"max_sge"`
	MaxSGERd              uint32               `json:"max_sge_rd"`
	MaxCQ                 uint32               `json:"max_cq"`
	MaxCQE                uint32               `json:"max_cqe"`
	MaxMR                 uint32               `json:"max_mr"`
	MaxPD                 uint32               `json:"max_pd"`
	MaxQPRdAtom           uint32               `json:"max_qp_rd_atom"`
	MaxEERdAtom           uint32               `json:"max_ee_rd_atom"`
	MaxResRdAtom          uint32               `json:"max_res_rd_atom"`
	MaxQPInitRdAtom       uint32               `json:"max_qp_init_rd_atom"`
	MaxEEInitRdAtom       uint32               `json:"max_ee_init_rd_atom"`
	AtomicCap             verbs.AtomicCap      `json:"atomic_cap"`
	MaxEE                 uint32               `json:"max_ee"`
	MaxRDD                uint32               `json:"max_rdd"`
	MaxMW                 uint32               `json:"max_mw"`
	MaxRawIPv6QP          uint32               `json:"max_raw_ipv6_qp"`
	MaxRawEthyQP          uint32               `json:"max_raw_ethy_qp"`
	MaxMcastGrp           uint32               `json:"max_mcast_grp"`
	MaxMcastQPAttach      uint32               `json:"max_mcast_qp_attach"`
	MaxTotalMcastQPAttach uint32               `json:"max_total_mcast_qp_attach"`
	MaxAH                 uint32               `json:"max_ah"`
	MaxFMR                uint32               `json:"max_fmr"`
	MaxMapPerFMR          uint32               `json:"max_map_per_fmr"`
	MaxSRQ                uint32               `json:"max_srq"`
	MaxSRQWR              uint32               `json:"max_srq_wr"`
	MaxSRQSGE             uint32               `json:"max_srq_sge"`
	MaxPKeys              uint16               `json:"max_pkeys"`
	LocalCAAckDelay       uint8                `json:"local_ca_ack_delay"`
	PhysPortCnt           uint8                `json:"phys_port_cnt"`
	// MaxInlineData is not in struct ibv_device_attr (nor printed by
	// ibv_devinfo): it bounds a QP's max_inline_data on softhca
	// (verbs.DeviceAttr.MaxInlineData); 0 where unknown.
	MaxInlineData uint32 `json:"max_inline_data"`
}

// AttrEx are the extended attributes of struct ibv_device_attr_ex
// (without orig_attr, which is Attr, and comp_mask).
type AttrEx struct {
	ODPCaps                 ODPCaps          `json:"odp_caps"`
	CompletionTimestampMask uint64           `json:"completion_timestamp_mask,string"`
	HCACoreClock            uint64           `json:"hca_core_clock,string"` // kHz
	DeviceCapFlagsEx        uint64           `json:"device_cap_flags_ex,string"`
	TSOCaps                 TSOCaps          `json:"tso_caps"`
	RSSCaps                 RSSCaps          `json:"rss_caps"`
	MaxWQTypeRQ             uint32           `json:"max_wq_type_rq"`
	PacketPacingCaps        PacketPacingCaps `json:"packet_pacing_caps"`
	RawPacketCaps           uint32           `json:"raw_packet_caps"`
	TMCaps                  TMCaps           `json:"tm_caps"`
	CQModCaps               CQModCaps        `json:"cq_mod_caps"`
	MaxDMSize               uint64           `json:"max_dm_size,string"`
	XRCODPCaps              uint32           `json:"xrc_odp_caps"`
	PhysPortCntEx           uint32           `json:"phys_port_cnt_ex"`
}

// ODPCaps are the on-demand paging capabilities (struct ibv_odp_caps).
type ODPCaps struct {
	GeneralCaps uint64 `json:"general_caps,string"`
	RCODPCaps   uint32 `json:"rc_odp_caps"`
	UCODPCaps   uint32 `json:"uc_odp_caps"`
	UDODPCaps   uint32 `json:"ud_odp_caps"`
}

// TSOCaps are the TCP segmentation offload capabilities (struct
// ibv_tso_caps).
type TSOCaps struct {
	MaxTSO        uint32 `json:"max_tso"`
	SupportedQPTs uint32 `json:"supported_qpts"`
}

// RSSCaps are the receive side scaling capabilities (struct
// ibv_rss_caps).
type RSSCaps struct {
	SupportedQPTs              uint32 `json:"supported_qpts"`
	MaxRWQIndirectionTables    uint32 `json:"max_rwq_indirection_tables"`
	MaxRWQIndirectionTableSize uint32 `json:"max_rwq_indirection_table_size"`
	RXHashFieldsMask           uint64 `json:"rx_hash_fields_mask,string"`
	RXHashFunction             uint8  `json:"rx_hash_function"`
}

// PacketPacingCaps are the rate limits of struct ibv_packet_pacing_caps
// (kbit/s).
type PacketPacingCaps struct {
	QPRateLimitMin uint32 `json:"qp_rate_limit_min"`
	QPRateLimitMax uint32 `json:"qp_rate_limit_max"`
	SupportedQPTs  uint32 `json:"supported_qpts"`
}

// TMCaps are the tag-matching limits (struct ibv_tm_caps).
type TMCaps struct {
	MaxRndvHdrSize uint32 `json:"max_rndv_hdr_size"`
	MaxNumTags     uint32 `json:"max_num_tags"`
	Flags          uint32 `json:"flags"`
	MaxOps         uint32 `json:"max_ops"`
	MaxSGE         uint32 `json:"max_sge"`
}

// CQModCaps are the CQ moderation limits (struct
// ibv_cq_moderation_caps).
type CQModCaps struct {
	MaxCQCount  uint16 `json:"max_cq_count"`
	MaxCQPeriod uint16 `json:"max_cq_period"` // microseconds
}

// Port describes one port: its attributes, GID table and P_Key table.
type Port struct {
	// Num is the port number, from 1.
	Num uint8 `json:"port_num"`
	// Attr are the attributes of ibv_query_port.
	Attr PortAttr `json:"attr"`
	// GIDs are the entries of the GID table that hold a GID, in index
	// order; the other entries of the Attr.GIDTblLen are zero.
	GIDs []GIDEntry `json:"gids"`
	// PKeys is the P_Key table, Attr.PKeyTblLen entries.
	PKeys []uint16 `json:"pkeys"`
}

// PortAttr are a port's attributes (struct ibv_port_attr of rdma-core
// 44).
type PortAttr struct {
	State         verbs.PortState `json:"state"`
	MaxMTU        verbs.MTU       `json:"max_mtu"`
	ActiveMTU     verbs.MTU       `json:"active_mtu"`
	GIDTblLen     int32           `json:"gid_tbl_len"`
	PortCapFlags  uint32          `json:"port_cap_flags"`
	MaxMsgSz      uint32          `json:"max_msg_sz"`
	BadPKeyCntr   uint32          `json:"bad_pkey_cntr"`
	QKeyViolCntr  uint32          `json:"qkey_viol_cntr"`
	PKeyTblLen    uint16          `json:"pkey_tbl_len"`
	LID           uint16          `json:"lid"`
	SMLID         uint16          `json:"sm_lid"`
	LMC           uint8           `json:"lmc"`
	MaxVLNum      uint8           `json:"max_vl_num"`
	SMSL          uint8           `json:"sm_sl"`
	SubnetTimeout uint8           `json:"subnet_timeout"`
	InitTypeReply uint8           `json:"init_type_reply"`
	ActiveWidth   uint8           `json:"active_width"`
	ActiveSpeed   uint8           `json:"active_speed"`
	PhysState     uint8           `json:"phys_state"`
	LinkLayer     verbs.LinkLayer `json:"link_layer"`
	PortCapFlags2 uint16          `json:"port_cap_flags2"`
}

// GIDEntry is one entry of a GID table.
type GIDEntry struct {
	Index int     `json:"index"`
	GID   GID     `json:"gid"`
	Type  GIDType `json:"type"`
}

// NumCompVectors is the number of completion vectors a softhca context
// has: 1, as the drop-in libibverbs sets ibv_context's num_comp_vectors
// (and as rxe has).
const NumCompVectors = 1

// FromDevice describes an open softhca device as ibv_devinfo, run on
// softhca's drop-in libibverbs.so.1, prints it: the attributes of
// QueryDevice, QueryPort, QueryGID and QueryPKey, and the extended
// attributes the library's query_device_ex reports (tag matching, the
// capability flags in device_cap_flags_ex, the port count; zero for what
// softhca does not have: on-demand paging, timestamps, TSO, RSS, packet
// pacing, CQ moderation, device memory). Every GID is a RoCE v2 GID.
func FromDevice(d *hca.Device) (Device, error) {
	if d == nil {
		return Device{}, fmt.Errorf("devinfo: %w: no device (nil *hca.Device)", syscall.EINVAL)
	}
	a := d.QueryDevice()
	dev := Device{
		Name:           d.Name(),
		Transport:      TransportIB,
		Attr:           attrFromVerbs(a),
		NumCompVectors: NumCompVectors,
		AttrEx: AttrEx{
			// The kernel's device_cap_flags_ex holds device_cap_flags in
			// its low 32 bits (ib_uverbs_ex_query_device), and so does the
			// drop-in library's.
			DeviceCapFlagsEx: uint64(a.DeviceCapFlags),
			TMCaps:           TMCaps(a.TM),
			PhysPortCntEx:    uint32(a.PhysPortCnt),
		},
	}
	for n := 1; n <= int(a.PhysPortCnt); n++ {
		p, err := portFromDevice(d, uint8(n))
		if err != nil {
			return Device{}, err
		}
		dev.Ports = append(dev.Ports, p)
	}
	return dev, nil
}

func portFromDevice(d *hca.Device, n uint8) (Port, error) {
	pa, err := d.QueryPort(n)
	if err != nil {
		return Port{}, fmt.Errorf("devinfo: port %d: %w", n, err)
	}
	p := Port{Num: n, Attr: portAttrFromVerbs(pa), GIDs: []GIDEntry{}, PKeys: []uint16{}}
	for i := 0; i < int(pa.GIDTblLen); i++ {
		g, err := d.QueryGID(n, i)
		if err != nil {
			return Port{}, fmt.Errorf("devinfo: port %d GID %d: %w", n, i, err)
		}
		if !g.IsZero() {
			p.GIDs = append(p.GIDs, GIDEntry{Index: i, GID: GID(g), Type: GIDTypeRoCEv2})
		}
	}
	for i := 0; i < int(pa.PKeyTblLen); i++ {
		k, err := d.QueryPKey(n, i)
		if err != nil {
			return Port{}, fmt.Errorf("devinfo: port %d P_Key %d: %w", n, i, err)
		}
		p.PKeys = append(p.PKeys, k)
	}
	return p, nil
}

// attrFromVerbs converts the attributes of ibv_query_device; the
// tag-matching limits go to AttrEx.
func attrFromVerbs(a verbs.DeviceAttr) Attr {
	return Attr{
		FWVer: a.FWVer, NodeGUID: GUID(a.NodeGUID), SysImageGUID: GUID(a.SysImageGUID),
		MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap,
		VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer,
		MaxQP: a.MaxQP, MaxQPWR: a.MaxQPWR, DeviceCapFlags: a.DeviceCapFlags,
		MaxSGE: a.MaxSGE, MaxSGERd: a.MaxSGERd, MaxCQ: a.MaxCQ, MaxCQE: a.MaxCQE,
		MaxMR: a.MaxMR, MaxPD: a.MaxPD,
		MaxQPRdAtom: a.MaxQPRdAtom, MaxEERdAtom: a.MaxEERdAtom, MaxResRdAtom: a.MaxResRdAtom,
		MaxQPInitRdAtom: a.MaxQPInitRdAtom, MaxEEInitRdAtom: a.MaxEEInitRdAtom,
		AtomicCap: a.AtomicCap, MaxEE: a.MaxEE, MaxRDD: a.MaxRDD, MaxMW: a.MaxMW,
		MaxRawIPv6QP: a.MaxRawIPv6QP, MaxRawEthyQP: a.MaxRawEthyQP,
		MaxMcastGrp: a.MaxMcastGrp, MaxMcastQPAttach: a.MaxMcastQPAttach,
		MaxTotalMcastQPAttach: a.MaxTotalMcastQPAttach, MaxAH: a.MaxAH,
		MaxFMR: a.MaxFMR, MaxMapPerFMR: a.MaxMapPerFMR,
		MaxSRQ: a.MaxSRQ, MaxSRQWR: a.MaxSRQWR, MaxSRQSGE: a.MaxSRQSGE,
		MaxPKeys: a.MaxPKeys, LocalCAAckDelay: a.LocalCAAckDelay, PhysPortCnt: a.PhysPortCnt,
		MaxInlineData: a.MaxInlineData,
	}
}

// VerbsAttr returns the device attributes as verbs has them: Attr and
// the tag-matching limits of AttrEx.
func (d Device) VerbsAttr() verbs.DeviceAttr {
	a := d.Attr
	return verbs.DeviceAttr{
		FWVer: a.FWVer, NodeGUID: uint64(a.NodeGUID), SysImageGUID: uint64(a.SysImageGUID),
		MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap,
		VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer,
		MaxQP: a.MaxQP, MaxQPWR: a.MaxQPWR, DeviceCapFlags: a.DeviceCapFlags,
		MaxSGE: a.MaxSGE, MaxSGERd: a.MaxSGERd, MaxCQ: a.MaxCQ, MaxCQE: a.MaxCQE,
		MaxMR: a.MaxMR, MaxPD: a.MaxPD,
		MaxQPRdAtom: a.MaxQPRdAtom, MaxEERdAtom: a.MaxEERdAtom, MaxResRdAtom: a.MaxResRdAtom,
		MaxQPInitRdAtom: a.MaxQPInitRdAtom, MaxEEInitRdAtom: a.MaxEEInitRdAtom,
		AtomicCap: a.AtomicCap, MaxEE: a.MaxEE, MaxRDD: a.MaxRDD, MaxMW: a.MaxMW,
		MaxRawIPv6QP: a.MaxRawIPv6QP, MaxRawEthyQP: a.MaxRawEthyQP,
		MaxMcastGrp: a.MaxMcastGrp, MaxMcastQPAttach: a.MaxMcastQPAttach,
		MaxTotalMcastQPAttach: a.MaxTotalMcastQPAttach, MaxAH: a.MaxAH,
		MaxFMR: a.MaxFMR, MaxMapPerFMR: a.MaxMapPerFMR,
		MaxSRQ: a.MaxSRQ, MaxSRQWR: a.MaxSRQWR, MaxSRQSGE: a.MaxSRQSGE,
		MaxPKeys: a.MaxPKeys, LocalCAAckDelay: a.LocalCAAckDelay, PhysPortCnt: a.PhysPortCnt,
		MaxInlineData: a.MaxInlineData,
		TM:            verbs.TMCaps(d.AttrEx.TMCaps),
	}
}

func portAttrFromVerbs(p verbs.PortAttr) PortAttr {
	return PortAttr{
		State: p.State, MaxMTU: p.MaxMTU, ActiveMTU: p.ActiveMTU, GIDTblLen: p.GIDTblLen,
		PortCapFlags: p.PortCapFlags, MaxMsgSz: p.MaxMsgSz,
		BadPKeyCntr: p.BadPKeyCntr, QKeyViolCntr: p.QKeyViolCntr,
		PKeyTblLen: p.PKeyTblLen, LID: p.LID, SMLID: p.SMLID, LMC: p.LMC,
		MaxVLNum: p.MaxVLNum, SMSL: p.SMSL, SubnetTimeout: p.SubnetTimeout,
		InitTypeReply: p.InitTypeReply, ActiveWidth: p.ActiveWidth, ActiveSpeed: p.ActiveSpeed,
		PhysState: p.PhysState, LinkLayer: p.LinkLayer,
	}
}

// VerbsAttr returns the port attributes as verbs has them (verbs has no
// port_cap_flags2).
func (p Port) VerbsAttr() verbs.PortAttr {
	a := p.Attr
	return verbs.PortAttr{
		State: a.State, MaxMTU: a.MaxMTU, ActiveMTU: a.ActiveMTU, GIDTblLen: a.GIDTblLen,
		PortCapFlags: a.PortCapFlags, MaxMsgSz: a.MaxMsgSz,
		BadPKeyCntr: a.BadPKeyCntr, QKeyViolCntr: a.QKeyViolCntr,
		PKeyTblLen: a.PKeyTblLen, LID: a.LID, SMLID: a.SMLID, LMC: a.LMC,
		MaxVLNum: a.MaxVLNum, SMSL: a.SMSL, SubnetTimeout: a.SubnetTimeout,
		InitTypeReply: a.InitTypeReply, ActiveWidth: a.ActiveWidth, ActiveSpeed: a.ActiveSpeed,
		PhysState: a.PhysState, LinkLayer: a.LinkLayer,
	}
}

// Port returns the port numbered n, and whether the device has it.
func (d Device) Port(n uint8) (Port, bool) {
	for _, p := range d.Ports {
		if p.Num == n {
			return p, true
		}
	}
	return Port{}, false
}

// errBadText is the error of text that does not parse as a GUID, GID or
// GID type.
var errBadText = errors.New("devinfo: bad text")
