package devinfo

import (
	"fmt"
	"io"

	"github.com/softhca/softhca/verbs"
)

// Write prints d as ibv_devinfo prints a device (print_hca_cap of
// rdma-core 44's devinfo.c), without verbose the short form, with it
// what ibv_devinfo -v prints: the same fields, in the same order, with
// the same labels, tabs and number formats. It prints every port in
// d.Ports (ibv_devinfo -i N prints a Device with port N only). Numbers
// that devinfo.c prints with %d from a C int print as that int would
// (a uint32 above 2^31-1 is negative). It returns w's first error.
func Write(w io.Writer, d Device, verbose bool) error {
	p := &printer{w: w}
	a := &d.Attr
	p.f("hca_id:\t%s\n", d.Name)
	p.f("\ttransport:\t\t\t%s (%d)\n", transportStr(d.Transport), d.Transport)
	if a.FWVer != "" {
		p.f("\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	}
	p.f("\tnode_guid:\t\t\t%s\n", a.NodeGUID)
	p.f("\tsys_image_guid:\t\t\t%s\n", a.SysImageGUID)
	p.f("\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	p.f("\tvendor_part_id:\t\t\t%d\n", int32(a.VendorPartID))
	p.f("\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	if d.BoardID != "" {
		p.f("\tboard_id:\t\t\t%s\n", d.BoardID)
	}
	p.f("\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		writeVerboseDevice(p, &d)
	}
	for _, port := range d.Ports {
		writePort(p, &d, &port, verbose)
	}
	return p.err
}

// WriteList prints the device names as ibv_devinfo -l does.
func WriteList(w io.Writer, names []string) error {
	p := &printer{w: w}
	s := "s"
	if len(names) == 1 {
		s = ""
	}
	p.f("%d HCA%s found:\n", len(names), s)
	for _, n := range names {
		p.f("\t%s\n", n)
	}
	p.f("\n")
	return p.err
}

// printer is an io.Writer that keeps its first error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func writeVerboseDevice(p *printer, d *Device) {
	a, x := &d.Attr, &d.AttrEx
	p.f("\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
	p.f("\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
	p.f("\tmax_qp:\t\t\t\t%d\n", int32(a.MaxQP))
	p.f("\tmax_qp_wr:\t\t\t%d\n", int32(a.MaxQPWR))
	p.f("\tdevice_cap_flags:\t\t0x%08x\n", uint32(a.DeviceCapFlags))
	writeDeviceCapFlags(p, uint32(a.DeviceCapFlags))
	p.f("\tmax_sge:\t\t\t%d\n", int32(a.MaxSGE))
	p.f("\tmax_sge_rd:\t\t\t%d\n", int32(a.MaxSGERd))
	p.f("\tmax_cq:\t\t\t\t%d\n", int32(a.MaxCQ))
	p.f("\tmax_cqe:\t\t\t%d\n", int32(a.MaxCQE))
	p.f("\tmax_mr:\t\t\t\t%d\n", int32(a.MaxMR))
	p.f("\tmax_pd:\t\t\t\t%d\n", int32(a.MaxPD))
	p.f("\tmax_qp_rd_atom:\t\t\t%d\n", int32(a.MaxQPRdAtom))
	p.f("\tmax_ee_rd_atom:\t\t\t%d\n", int32(a.MaxEERdAtom))
	p.f("\tmax_res_rd_atom:\t\t%d\n", int32(a.MaxResRdAtom))
	p.f("\tmax_qp_init_rd_atom:\t\t%d\n", int32(a.MaxQPInitRdAtom))
	p.f("\tmax_ee_init_rd_atom:\t\t%d\n", int32(a.MaxEEInitRdAtom))
	p.f("\tatomic_cap:\t\t\t%s (%d)\n", atomicCapStr(a.AtomicCap), a.AtomicCap)
	p.f("\tmax_ee:\t\t\t\t%d\n", int32(a.MaxEE))
	p.f("\tmax_rdd:\t\t\t%d\n", int32(a.MaxRDD))
	p.f("\tmax_mw:\t\t\t\t%d\n", int32(a.MaxMW))
	p.f("\tmax_raw_ipv6_qp:\t\t%d\n", int32(a.MaxRawIPv6QP))
	p.f("\tmax_raw_ethy_qp:\t\t%d\n", int32(a.MaxRawEthyQP))
	p.f("\tmax_mcast_grp:\t\t\t%d\n", int32(a.MaxMcastGrp))
	p.f("\tmax_mcast_qp_attach:\t\t%d\n", int32(a.MaxMcastQPAttach))
	p.f("\tmax_total_mcast_qp_attach:\t%d\n", int32(a.MaxTotalMcastQPAttach))
	p.f("\tmax_ah:\t\t\t\t%d\n", int32(a.MaxAH))
	p.f("\tmax_fmr:\t\t\t%d\n", int32(a.MaxFMR))
	if a.MaxFMR != 0 {
		p.f("\tmax_map_per_fmr:\t\t%d\n", int32(a.MaxMapPerFMR))
	}
	p.f("\tmax_srq:\t\t\t%d\n", int32(a.MaxSRQ))
	if a.MaxSRQ != 0 {
		p.f("\tmax_srq_wr:\t\t\t%d\n", int32(a.MaxSRQWR))
		p.f("\tmax_srq_sge:\t\t\t%d\n", int32(a.MaxSRQSGE))
	}
	p.f("\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
	p.f("\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)

	writeODPCaps(p, x)
	if x.CompletionTimestampMask != 0 {
		p.f("\tcompletion timestamp_mask:\t\t\t0x%016x\n", x.CompletionTimestampMask)
	} else {
		p.f("\tcompletion_timestamp_mask not supported\n")
	}
	if x.HCACoreClock != 0 {
		p.f("\thca_core_clock:\t\t\t%dkHZ\n", x.HCACoreClock)
	} else {
		p.f("\tcore clock not supported\n")
	}
	if x.RawPacketCaps != 0 {
		writeRawPacketCaps(p, x.RawPacketCaps)
	}
	p.f("\tdevice_cap_flags_ex:\t\t0x%X\n", x.DeviceCapFlagsEx)
	writeDeviceCapFlagsEx(p, x.DeviceCapFlagsEx)
	writeTSOCaps(p, &x.TSOCaps)
	writeRSSCaps(p, &x.RSSCaps)
	p.f("\tmax_wq_type_rq:\t\t\t%d\n", x.MaxWQTypeRQ)
	writePacketPacingCaps(p, &x.PacketPacingCaps)
	writeTMCaps(p, &x.TMCaps)
	if c := x.CQModCaps; c.MaxCQCount != 0 && c.MaxCQPeriod != 0 {
		p.f("\n\tcq moderation caps:\n")
		p.f("\t\tmax_cq_count:\t%d\n", c.MaxCQCount)
		p.f("\t\tmax_cq_period:\t%d us\n\n", c.MaxCQPeriod)
	}
	if x.MaxDMSize != 0 {
		p.f("\tmaximum available device memory:\t%dBytes\n\n", x.MaxDMSize)
	}
	p.f("\tnum_comp_vectors:\t\t%d\n", d.NumCompVectors)
}

func writePort(p *printer, d *Device, port *Port, verbose bool) {
	a := &port.Attr
	p.f("\t\tport:\t%d\n", port.Num)
	p.f("\t\t\tstate:\t\t\t%s (%d)\n", portStateStr(a.State), a.State)
	p.f("\t\t\tmax_mtu:\t\t%s (%d)\n", mtuStr(a.MaxMTU), a.MaxMTU)
	p.f("\t\t\tactive_mtu:\t\t%s (%d)\n", mtuStr(a.ActiveMTU), a.ActiveMTU)
	p.f("\t\t\tsm_lid:\t\t\t%d\n", a.SMLID)
	p.f("\t\t\tport_lid:\t\t%d\n", a.LID)
	p.f("\t\t\tport_lmc:\t\t0x%02x\n", a.LMC)
	p.f("\t\t\tlink_layer:\t\t%s\n", linkLayerStr(a.LinkLayer))
	if verbose {
		p.f("\t\t\tmax_msg_sz:\t\t0x%x\n", a.MaxMsgSz)
		p.f("\t\t\tport_cap_flags:\t\t0x%08x\n", a.PortCapFlags)
		p.f("\t\t\tport_cap_flags2:\t0x%04x\n", a.PortCapFlags2)
		p.f("\t\t\tmax_vl_num:\t\t%s (%d)\n", vlStr(a.MaxVLNum), a.MaxVLNum)
		p.f("\t\t\tbad_pkey_cntr:\t\t0x%x\n", a.BadPKeyCntr)
		p.f("\t\t\tqkey_viol_cntr:\t\t0x%x\n", a.QKeyViolCntr)
		p.f("\t\t\tsm_sl:\t\t\t%d\n", a.SMSL)
		p.f("\t\t\tpkey_tbl_len:\t\t%d\n", a.PKeyTblLen)
		p.f("\t\t\tgid_tbl_len:\t\t%d\n", a.GIDTblLen)
		p.f("\t\t\tsubnet_timeout:\t\t%d\n", a.SubnetTimeout)
		p.f("\t\t\tinit_type_reply:\t%d\n", a.InitTypeReply)
		p.f("\t\t\tactive_width:\t\t%sX (%d)\n", widthStr(a.ActiveWidth), a.ActiveWidth)
		p.f("\t\t\tactive_speed:\t\t%s (%d)\n", speedStr(a.ActiveSpeed), a.ActiveSpeed)
		if d.Transport == TransportIB {
			p.f("\t\t\tphys_state:\t\t%s (%d)\n", physStateStr(a.PhysState), a.PhysState)
		}
		writeGIDs(p, port)
	}
	p.f("\n")
}

// writeGIDs is print_all_port_gids: the entries inside gid_tbl_len
// whose interface identifier (the last 8 bytes) is not zero, of a known
// type.
func writeGIDs(p *printer, port *Port) {
	for _, e := range port.GIDs {
		if e.Index < 0 || e.Index >= int(port.Attr.GIDTblLen) || nullGID(e.GID) {
			continue
		}
		suffix := ""
		if port.Attr.LinkLayer == verbs.LinkLayerEthernet {
			suffix = ", " + gidTypeStr(e.Type)
		}
		g := e.GID
		switch e.Type {
		case GIDTypeIBRoCEv1:
			p.f("\t\t\tGID[%3d]:\t\t%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x%s\n",
				e.Index, g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7],
				g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15], suffix)
		case GIDTypeRoCEv2:
			p.f("\t\t\tGID[%3d]:\t\t%s%s\n", e.Index, inetNtop6(g), suffix)
		}
	}
}

// nullGID is devinfo.c's null_gid: it looks at the interface identifier
// only.
func nullGID(g GID) bool {
	for _, b := range g[8:] {
		if b != 0 {
			return false
		}
	}
	return true
}

// Device capability flags (enum ibv_device_cap_flags) and the names
// print_device_cap_flags gives them, in its order.
var deviceCapFlagNames = []struct {
	bit  uint32
	name string
}{
	{1 << 0, "RESIZE_MAX_WR"},
	{1 << 1, "BAD_PKEY_CNTR"},
	{1 << 2, "BAD_QKEY_CNTR"},
	{1 << 3, "RAW_MULTI"},
	{1 << 4, "AUTO_PATH_MIG"},
	{1 << 5, "CHANGE_PHY_PORT"},
	{1 << 6, "UD_AV_PORT_ENFORCE"},
	{1 << 7, "CURR_QP_STATE_MOD"},
	{1 << 8, "SHUTDOWN_PORT"},
	{1 << 9, "INIT_TYPE"},
	{1 << 10, "PORT_ACTIVE_EVENT"},
	{1 << 11, "SYS_IMAGE_GUID"},
	{1 << 12, "RC_RNR_NAK_GEN"},
	{1 << 13, "SRQ_RESIZE"},
	{1 << 14, "N_NOTIFY_CQ"},
	{1 << 17, "MEM_WINDOW"},
	{1 << 18, "UD_IP_CSUM"},
	{1 << 20, "XRC"},
	{1 << 21, "MEM_MGT_EXTENSIONS"},
	{1 << 23, "MEM_WINDOW_TYPE_2A"},
	{1 << 24, "MEM_WINDOW_TYPE_2B"},
	{1 << 25, "RC_IP_CSUM"},
	{1 << 26, "RAW_IP_CSUM"},
	{1 << 29, "MANAGED_FLOW_STEERING"},
}

func writeDeviceCapFlags(p *printer, flags uint32) {
	var known uint32
	for _, f := range deviceCapFlagNames {
		known |= f.bit
		if flags&f.bit != 0 {
			p.f("\t\t\t\t\t%s\n", f.name)
		}
	}
	if u := flags &^ known; u != 0 {
		p.f("\t\t\t\t\tUnknown flags: 0x%X\n", u)
	}
}

// The extended capability flags print_device_cap_flags_ex names (the
// upper 32 bits of device_cap_flags_ex).
const (
	deviceRawScatterFCS       = uint64(1) << 34 // IBV_DEVICE_RAW_SCATTER_FCS
	devicePCIWriteEndPadding  = uint64(1) << 36 // IBV_DEVICE_PCI_WRITE_END_PADDING
	deviceCapFlagsExUpperMask = 0xffffffff00000000
)

func writeDeviceCapFlagsEx(p *printer, flags uint64) {
	ex := flags & deviceCapFlagsExUpperMask
	if ex&deviceRawScatterFCS != 0 {
		p.f("\t\t\t\t\tRAW_SCATTER_FCS\n")
	}
	if ex&devicePCIWriteEndPadding != 0 {
		p.f("\t\t\t\t\tPCI_WRITE_END_PADDING\n")
	}
	if u := ex &^ (deviceRawScatterFCS | devicePCIWriteEndPadding); u != 0 {
		p.f("\t\t\t\t\tUnknown flags: 0x%X\n", u)
	}
}

// On-demand paging capability bits (enum ibv_odp_general_caps, enum
// ibv_odp_transport_cap_bits).
const (
	odpSupport         = 1 << 0
	odpSupportImplicit = 1 << 1
)

var odpTransportNames = []struct {
	bit  uint32
	name string
}{
	{1 << 0, "SUPPORT_SEND"},
	{1 << 1, "SUPPORT_RECV"},
	{1 << 2, "SUPPORT_WRITE"},
	{1 << 3, "SUPPORT_READ"},
	{1 << 4, "SUPPORT_ATOMIC"},
	{1 << 5, "SUPPORT_SRQ"},
}

func writeODPCaps(p *printer, x *AttrEx) {
	c := &x.ODPCaps
	p.f("\tgeneral_odp_caps:\n")
	if c.GeneralCaps&odpSupport != 0 {
		p.f("\t\t\t\t\tODP_SUPPORT\n")
	}
	if c.GeneralCaps&odpSupportImplicit != 0 {
		p.f("\t\t\t\t\tODP_SUPPORT_IMPLICIT\n")
	}
	if u := c.GeneralCaps &^ (odpSupport | odpSupportImplicit); u != 0 {
		p.f("\t\t\t\t\tUnknown flags: 0x%X\n", u)
	}
	p.f("\trc_odp_caps:\n")
	writeODPTransportCaps(p, c.RCODPCaps)
	p.f("\tuc_odp_caps:\n")
	writeODPTransportCaps(p, c.UCODPCaps)
	p.f("\tud_odp_caps:\n")
	writeODPTransportCaps(p, c.UDODPCaps)
	p.f("\txrc_odp_caps:\n")
	writeODPTransportCaps(p, x.XRCODPCaps)
}

func writeODPTransportCaps(p *printer, caps uint32) {
	if caps == 0 {
		p.f("\t\t\t\t\tNO SUPPORT\n")
		return
	}
	var known uint32
	for _, f := range odpTransportNames {
		known |= f.bit
		if caps&f.bit != 0 {
			p.f("\t\t\t\t\t%s\n", f.name)
		}
	}
	if u := caps &^ known; u != 0 {
		p.f("\t\t\t\t\tUnknown flags: 0x%X\n", u)
	}
}

// QP types as bits of a supported_qpts mask (1 << enum ibv_qp_type).
const (
	qptRC        = 1 << 2
	qptUD        = 1 << 4
	qptRawPacket = 1 << 8
)

// writeSupportedQPTs prints the RAW_PACKET and UD bits of a
// supported_qpts mask, and the rest as unknown.
func writeSupportedQPTs(p *printer, qpts uint32) {
	if qpts&qptRawPacket != 0 {
		p.f("\t\t\t\t\tSUPPORT_RAW_PACKET\n")
	}
	if qpts&qptUD != 0 {
		p.f("\t\t\t\t\tSUPPORT_UD\n")
	}
	if u := qpts &^ (qptRawPacket | qptUD); u != 0 {
		p.f("\t\t\t\t\tUnknown flags: 0x%X\n", u)
	}
}

func writeTSOCaps(p *printer, c *TSOCaps) {
	p.f("\ttso_caps:\n")
	p.f("\t\tmax_tso:\t\t\t%d\n", int32(c.MaxTSO))
	if c.MaxTSO != 0 {
		p.f("\t\tsupported_qp:\n")
		writeSupportedQPTs(p, c.SupportedQPTs)
	}
}

func writeRSSCaps(p *printer, c *RSSCaps) {
	p.f("\trss_caps:\n")
	p.f("\t\tmax_rwq_indirection_tables:\t\t\t%d\n", c.MaxRWQIndirectionTables)
	p.f("\t\tmax_rwq_indirection_table_size:\t\t\t%d\n", c.MaxRWQIndirectionTableSize)
	p.f("\t\trx_hash_function:\t\t\t\t0x%x\n", c.RXHashFunction)
	p.f("\t\trx_hash_fields_mask:\t\t\t\t0x%X\n", c.RXHashFieldsMask)
	if c.SupportedQPTs != 0 {
		p.f("\t\tsupported_qp:\n")
		writeSupportedQPTs(p, c.SupportedQPTs)
	}
}

// writePacketPacingCaps is rdma-core 44's print_packet_pacing_caps,
// which names RAW_PACKET and UD (later versions also RC).
func writePacketPacingCaps(p *printer, c *PacketPacingCaps) {
	p.f("\tpacket_pacing_caps:\n")
	p.f("\t\tqp_rate_limit_min:\t%dkbps\n", c.QPRateLimitMin)
	p.f("\t\tqp_rate_limit_max:\t%dkbps\n", c.QPRateLimitMax)
	if c.QPRateLimitMax != 0 {
		p.f("\t\tsupported_qp:\n")
		writeSupportedQPTs(p, c.SupportedQPTs)
	}
}

func writeTMCaps(p *printer, c *TMCaps) {
	if c.MaxNumTags == 0 {
		p.f("\ttag matching not supported\n")
		return
	}
	p.f("\tmax_rndv_hdr_size:\t\t%d\n", c.MaxRndvHdrSize)
	p.f("\tmax_num_tags:\t\t\t%d\n", c.MaxNumTags)
	p.f("\tmax_ops:\t\t\t%d\n", c.MaxOps)
	p.f("\tmax_sge:\t\t\t%d\n", c.MaxSGE)
	p.f("\tflags:\n")
	if c.Flags&verbs.TMCapRC != 0 {
		p.f("\t\t\t\t\tIBV_TM_CAP_RC\n")
	}
}

// Raw packet capability bits (enum ibv_raw_packet_caps).
var rawPacketCapNames = []struct {
	bit  uint32
	name string
}{
	{1 << 0, "C-VLAN stripping offload"},
	{1 << 1, "Scatter FCS offload"},
	{1 << 2, "IP csum offload"},
	{1 << 3, "Delay drop"},
}

func writeRawPacketCaps(p *printer, caps uint32) {
	p.f("\traw packet caps:\n")
	for _, f := range rawPacketCapNames {
		if caps&f.bit != 0 {
			p.f("\t\t\t\t\t%s\n", f.name)
		}
	}
}

func transportStr(t Transport) string {
	switch t {
	case TransportIB:
		return "InfiniBand"
	case TransportIWARP:
		return "iWARP"
	case TransportUSNIC:
		return "usNIC"
	case TransportUSNICUDP:
		return "usNIC UDP"
	case TransportUnspecified:
		return "unspecified"
	default:
		return "invalid transport"
	}
}

func portStateStr(s verbs.PortState) string {
	switch s {
	case verbs.PortDown:
		return "PORT_DOWN"
	case verbs.PortInit:
		return "PORT_INIT"
	case verbs.PortArmed:
		return "PORT_ARMED"
	case verbs.PortActive:
		return "PORT_ACTIVE"
	default:
		return "invalid state"
	}
}

func physStateStr(s uint8) string {
	switch s {
	case 1:
		return "SLEEP"
	case 2:
		return "POLLING"
	case 3:
		return "DISABLED"
	case 4:
		return "PORT_CONFIGURATION TRAINNING" // sic, devinfo.c
	case 5:
		return "LINK_UP"
	case 6:
		return "LINK_ERROR_RECOVERY"
	case 7:
		return "PHY TEST"
	default:
		return "invalid physical state"
	}
}

func atomicCapStr(c verbs.AtomicCap) string {
	switch c {
	case verbs.AtomicNone:
		return "ATOMIC_NONE"
	case verbs.AtomicHCA:
		return "ATOMIC_HCA"
	case verbs.AtomicGlob:
		return "ATOMIC_GLOB"
	default:
		return "invalid atomic capability"
	}
}

func mtuStr(m verbs.MTU) string {
	if !m.Valid() {
		return "invalid MTU"
	}
	return fmt.Sprint(m.Bytes())
}

func widthStr(w uint8) string {
	switch w {
	case 1:
		return "1"
	case 2:
		return "4"
	case 4:
		return "8"
	case 8:
		return "12"
	case 16:
		return "2"
	default:
		return "invalid width"
	}
}

// speedStr is rdma-core 44's speed_str (of an 8-bit active_speed).
func speedStr(s uint8) string {
	switch s {
	case 1:
		return "2.5 Gbps"
	case 2:
		return "5.0 Gbps"
	case 4, 8:
		return "10.0 Gbps"
	case 16:
		return "14.0 Gbps"
	case 32:
		return "25.0 Gbps"
	case 64:
		return "50.0 Gbps"
	case 128:
		return "100.0 Gbps"
	default:
		return "invalid speed"
	}
}

func vlStr(n uint8) string {
	switch n {
	case 1:
		return "1"
	case 2:
		return "2"
	case 3:
		return "4"
	case 4:
		return "8"
	case 5:
		return "15"
	default:
		return "invalid value"
	}
}

func gidTypeStr(t GIDType) string {
	switch t {
	case GIDTypeIBRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	default:
		return "Invalid gid type"
	}
}

func linkLayerStr(l verbs.LinkLayer) string {
	switch l {
	case verbs.LinkLayerUnspecified:
		return "Unspecified"
	case verbs.LinkLayerInfiniBand:
		return "InfiniBand"
	case verbs.LinkLayerEthernet:
		return "Ethernet"
	default:
		return "Unknown"
	}
}
