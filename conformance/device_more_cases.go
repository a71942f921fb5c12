package conformance

import (
	"net/netip"
	"strconv"
	"syscall"

	"github.com/softhca/softhca/verbs"
)

// Device, port, GID and P_Key cases. The limits are those of a Linux rxe
// device (shared/rxe/captures/ibv_devinfo-v.txt), which softhca models:
// they are implementation-defined.

const rxeDevinfo = "ibv_devinfo -v of rxe0 (rxe/captures/ibv_devinfo-v.txt)"

func init() {
	Register(
		Case{
			Name:  "query_device/limits-like-rxe",
			Cite:  rxeDevinfo + `: max_qp 1048560, max_qp_wr 1048576, max_sge 32, max_sge_rd 32, max_cq 1048576, max_cqe 32767, max_mr 524287, max_pd 1048576, max_qp_rd_atom 128, max_qp_init_rd_atom 128, max_res_rd_atom 258048, atomic_cap ATOMIC_HCA, max_ah 32767, max_srq 917503, max_srq_wr 1048576, max_srq_sge 27, max_pkeys 64, local_ca_ack_delay 15, max_mcast_grp 8192, max_mcast_qp_attach 56, phys_port_cnt 1`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				a := d.QueryDevice()
				check := func(name string, got, want uint64) {
					if got != want {
						t.Errorf("%s: got %d, want %d as rxe", name, got, want)
					}
				}
				check("max_qp", uint64(a.MaxQP), 1048560)
				check("max_qp_wr", uint64(a.MaxQPWR), 1048576)
				check("max_sge", uint64(a.MaxSGE), 32)
				check("max_sge_rd", uint64(a.MaxSGERd), 32)
				check("max_cq", uint64(a.MaxCQ), 1048576)
				check("max_cqe", uint64(a.MaxCQE), 32767)
				check("max_mr", uint64(a.MaxMR), 524287)
				check("max_pd", uint64(a.MaxPD), 1048576)
				check("max_qp_rd_atom", uint64(a.MaxQPRdAtom), 128)
				check("max_qp_init_rd_atom", uint64(a.MaxQPInitRdAtom), 128)
				check("max_res_rd_atom", uint64(a.MaxResRdAtom), 258048)
				check("atomic_cap", uint64(a.AtomicCap), uint64(verbs.AtomicHCA))
				check("max_ah", uint64(a.MaxAH), 32767)
				check("max_srq", uint64(a.MaxSRQ), 917503)
				check("max_srq_wr", uint64(a.MaxSRQWR), 1048576)
				check("max_srq_sge", uint64(a.MaxSRQSGE), 27)
				check("max_pkeys", uint64(a.MaxPKeys), 64)
				check("local_ca_ack_delay", uint64(a.LocalCAAckDelay), 15)
				check("max_mcast_grp", uint64(a.MaxMcastGrp), 8192)
				check("max_mcast_qp_attach", uint64(a.MaxMcastQPAttach), 56)
				check("phys_port_cnt", uint64(a.PhysPortCnt), 1)
				check("max_mr_size", a.MaxMRSize, ^uint64(0))
				check("page_size_cap", a.PageSizeCap, 0xfffff000)
				check("vendor_id", uint64(a.VendorID), 0xffffff)
			},
		},
		Case{
			Name:  "query_device/cap-flags-like-rxe",
			Cite:  rxeDevinfo + `: device_cap_flags BAD_PKEY_CNTR BAD_QKEY_CNTR AUTO_PATH_MIG CHANGE_PHY_PORT UD_AV_PORT_ENFORCE PORT_ACTIVE_EVENT SYS_IMAGE_GUID RC_RNR_NAK_GEN SRQ_RESIZE (plus the memory-window flags, which a device without memory windows must not claim)`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				f := d.QueryDevice().DeviceCapFlags
				want := map[string]verbs.DeviceCapFlags{
					"BAD_PKEY_CNTR": verbs.DeviceBadPKeyCntr, "BAD_QKEY_CNTR": verbs.DeviceBadQKeyCntr,
					"AUTO_PATH_MIG": verbs.DeviceAutoPathMig, "CHANGE_PHY_PORT": verbs.DeviceChangePhyPort,
					"UD_AV_PORT_ENFORCE": verbs.DeviceUDAVPortEnforce, "PORT_ACTIVE_EVENT": verbs.DevicePortActiveEvent,
					"SYS_IMAGE_GUID": verbs.DeviceSysImageGUID, "RC_RNR_NAK_GEN": verbs.DeviceRCRNRNAKGen,
					"SRQ_RESIZE": verbs.DeviceSRQResize,
				}
				for name, bit := range want {
					if f&bit == 0 {
						t.Errorf("device_cap_flags %#x lacks %s", uint32(f), name)
					}
				}
			},
		},
		Case{
			Name:  "query_device/guids-like-rxe",
			Cite:  rxeDevinfo + `: node_guid 5054:00ff:fe77:0002 and sys_image_guid 5054:00ff:fe77:0002 — a non-zero EUI-64 (ff:fe in the middle) and the system image GUID equal to it`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				a := d.QueryDevice()
				if a.NodeGUID == 0 {
					t.Fatalf("node_guid is 0")
				}
				Expect(t, a.SysImageGUID, a.NodeGUID, "sys_image_guid")
				if mid := (a.NodeGUID >> 24) & 0xffff; mid != 0xfffe {
					t.Fatalf("node_guid %016x is not an EUI-64 made from a MAC (bytes 3-4 are %04x, want fffe)", a.NodeGUID, mid)
				}
			},
		},
		Case{
			Name:  "query_port/roce-port-like-rxe",
			Cite:  rxeDevinfo + `: state PORT_ACTIVE, max_mtu 4096, link_layer Ethernet, gid_tbl_len 1024, pkey_tbl_len 1, port_lid 0, sm_lid 0, port_lmc 0, max_vl_num 1, phys_state LINK_UP (5), port_cap_flags 0x00010000; max_msg_sz 0x800000 on that kernel, 2^31 since rxe raised RXE_PORT_MAX_MSG_SZ`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				Expect(t, p.State, verbs.PortActive, "state")
				Expect(t, p.LinkLayer, verbs.LinkLayerEthernet, "link_layer")
				Expect(t, p.MaxMTU, verbs.MTU4096, "max_mtu")
				Expect(t, p.GIDTblLen, int32(1024), "gid_tbl_len")
				Expect(t, p.PKeyTblLen, uint16(1), "pkey_tbl_len")
				Expect(t, p.LID, uint16(0), "port_lid (RoCE has no LIDs)")
				Expect(t, p.SMLID, uint16(0), "sm_lid")
				Expect(t, p.LMC, uint8(0), "port_lmc")
				Expect(t, p.MaxVLNum, uint8(1), "max_vl_num")
				Expect(t, p.PhysState, uint8(5), "phys_state (LINK_UP)")
				Expect(t, p.PortCapFlags, uint32(0x00010000), "port_cap_flags")
				if p.MaxMsgSz < 0x800000 || p.MaxMsgSz > 1<<31 {
					t.Fatalf("max_msg_sz %#x not within 0x800000..2^31", p.MaxMsgSz)
				}
			},
		},
		Case{
			Name:  "query_gid/index-0-is-link-local-from-node-guid",
			Cite:  rxeDevinfo + `: "GID[ 0]: fe80::5054:ff:fe77:2, RoCE v2" with node_guid 5054:00ff:fe77:0002 — the link-local prefix fe80::/64 and the node GUID as interface identifier`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				g, err := d.QueryGID(1, 0)
				ExpectOK(t, err, "query_gid 0")
				want := verbs.GID{0: 0xfe, 1: 0x80}
				guid := d.QueryDevice().NodeGUID
				for i := range 8 {
					want[15-i] = byte(guid >> (8 * i))
				}
				Expect(t, g, want, "GID[0]")
			},
		},
		Case{
			Name:  "query_gid/ipv4-address-is-mapped-gid-at-index-1",
			Cite:  rxeDevinfo + `: "GID[ 1]: ::ffff:10.77.0.2, RoCE v2" — a RoCEv2 GID of an IPv4 address is the IPv4-mapped IPv6 address, after the link-local GID`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				addrs := nqPortAddrs(t)
				seen := false
				for i, a := range addrs {
					g, err := d.QueryGID(1, i+1)
					ExpectOK(t, err, "query_gid "+strconv.Itoa(i+1))
					if !a.Is4() {
						continue
					}
					seen = true
					want := verbs.GID{10: 0xff, 11: 0xff}
					copy(want[12:], a.AsSlice())
					Expect(t, g, want, "GID["+strconv.Itoa(i+1)+"] of "+a.String())
				}
				if !seen {
					t.Skipf("the port has no IPv4 address")
				}
			},
		},
		Case{
			Name:  "query_gid/ipv6-address-gid",
			Cite:  `rxe adds one RoCEv2 GID per address of its netdev, after the link-local GID (` + rxeDevinfo + `); the GID of an IPv6 address is the address itself`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				addrs := nqPortAddrs(t)
				seen := false
				for i, a := range addrs {
					if !a.Is6() || a.Is4In6() {
						continue
					}
					seen = true
					g, err := d.QueryGID(1, i+1)
					ExpectOK(t, err, "query_gid "+strconv.Itoa(i+1))
					Expect(t, g, verbs.GID(a.As16()), "GID["+strconv.Itoa(i+1)+"] of "+a.String())
				}
				if !seen {
					t.Skipf("the port has no IPv6 address")
				}
			},
		},
		Case{
			Name:  "query_gid/empty-entry-reads-zero",
			Cite:  `libibverbs ibv_query_gid: "Preserve API behavior for empty GID" — an index inside gid_tbl_len that holds no GID returns the zero GID, not an error`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				n := len(nqPortAddrs(t)) + 1
				for _, i := range []int{n, int(p.GIDTblLen) - 1} {
					g, err := d.QueryGID(1, i)
					ExpectOK(t, err, "query_gid "+strconv.Itoa(i))
					if !g.IsZero() {
						t.Fatalf("GID[%d] is %s, want the zero GID", i, g)
					}
				}
			},
		},
		Case{
			Name:  "query_gid/index-outside-table-einval",
			Cite:  `ibv_query_gid(3): "returns the GID value in entry index" and "-1 on error"; ibv_query_port(3): gid_tbl_len is the length of the GID table; rdma_get_gid_attr: "index < 0 || index >= table->sz" is EINVAL`,
			Label: Spec,
			Run: func(t *T, d Device) {
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				_, err = d.QueryGID(1, int(p.GIDTblLen))
				ExpectErrno(t, err, syscall.EINVAL, "query_gid index gid_tbl_len")
				_, err = d.QueryGID(1, -1)
				ExpectErrno(t, err, syscall.EINVAL, "query_gid index -1")
			},
		},
		Case{
			Name:  "query_gid/bad-port-einval",
			Cite:  `ibv_query_gid(3): the GID is read from "port port_num"; ports are numbered 1..phys_port_cnt (rdma_is_port_valid), anything else is EINVAL`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, err := d.QueryGID(0, 0)
				ExpectErrno(t, err, syscall.EINVAL, "query_gid port 0")
				_, err = d.QueryGID(d.QueryDevice().PhysPortCnt+1, 0)
				ExpectErrno(t, err, syscall.EINVAL, "query_gid port phys_port_cnt+1")
			},
		},
		Case{
			Name:  "query_pkey/index-0-is-default-partition",
			Cite:  rxeDevinfo + `: pkey_tbl_len 1; rxe's only P_Key is the default partition 0xFFFF (IBTA 10.9.1.1: full-member default P_Key)`,
			Label: ImplementationDefined,
			Run: func(t *T, d Device) {
				k, err := d.QueryPKey(1, 0)
				ExpectOK(t, err, "query_pkey 0")
				Expect(t, k, uint16(0xffff), "P_Key[0]")
			},
		},
		Case{
			Name:  "query_pkey/index-outside-table-fails",
			Cite:  `ibv_query_pkey(3): "returns the P_Key value (in network byte order) in entry index" and "-1 on error"; ibv_query_port(3): pkey_tbl_len is the length of the P_Key table. The man page names no errno: softhca sets EINVAL, libibverbs (verbs.c ibv_query_pkey() reads sysfs ports/N/pkeys/I) ENOENT`,
			Label: Spec,
			Run: func(t *T, d Device) {
				p, err := d.QueryPort(1)
				ExpectOK(t, err, "query_port 1")
				_, err = d.QueryPKey(1, int(p.PKeyTblLen))
				nqExpectFails(t, err, "query_pkey index pkey_tbl_len")
				_, err = d.QueryPKey(1, -1)
				nqExpectFails(t, err, "query_pkey index -1")
			},
		},
		Case{
			Name:  "query_pkey/bad-port-fails",
			Cite:  `ibv_query_pkey(3): the P_Key is read from "port port_num" and the call returns "-1 on error"; ports are numbered 1..phys_port_cnt (ibv_query_device(3)). The man page names no errno: softhca sets EINVAL, libibverbs (verbs.c ibv_query_pkey() reads sysfs ports/N/pkeys/I) ENOENT`,
			Label: Spec,
			Run: func(t *T, d Device) {
				_, err := d.QueryPKey(0, 0)
				nqExpectFails(t, err, "query_pkey port 0")
				_, err = d.QueryPKey(d.QueryDevice().PhysPortCnt+1, 0)
				nqExpectFails(t, err, "query_pkey port phys_port_cnt+1")
			},
		},
	)
}

// nqPortAddrs returns the IP addresses of port 1 in GID order (GID[1],
// GID[2], ...) from a target that knows them (AddrTarget, as the softhca
// backend does); for other targets the addresses depend on the host, and
// the case is skipped.
func nqPortAddrs(t *T) []netip.Addr {
	t.Helper()
	l, ok := t.Target().(AddrTarget)
	if !ok {
		t.Skipf("the port's IP addresses on target %q are not known to the suite (no AddrTarget)", t.Target().Name())
	}
	return l.PortAddrs()
}

// nqExpectFails fails the case unless err is an error (the man page of
// the call names no errno).
func nqExpectFails(t *T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want an error", what)
	}
}
