//go:build libibverbs

package main

/*
#include <string.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math/bits"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/hcaenv"
	"github.com/softhca/softhca/verbs"
)

// device is the process's softhca device: configured once from the
// environment, opened by the first ibv_open_device and shared by every
// context (one UDP port, one QP number space, as one kernel device is),
// closed with the last.
var device struct {
	once     sync.Once
	settings hcaenv.Settings
	err      error // the configuration's error

	mu   sync.Mutex
	d    *hca.Device
	refs int
}

func configure() {
	device.once.Do(func() {
		device.settings, device.err = hcaenv.FromEnv()
		device.settings.InlineFromAnyAddress = true // C programs send inline from their stack
		logLevel = device.settings.Log
		if device.err != nil {
			fmt.Fprintf(os.Stderr, "softhca: no device: %v\n", device.err)
			return
		}
		if !device.settings.Addr.IsValid() {
			device.err = hcaenv.ErrNoDevice
			fmt.Fprintf(os.Stderr, "softhca: no device: set %s to an address of this machine (softhca env --addr IP prints the lines)\n", hcaenv.VarAddr)
		}
	})
}

// ctxObj is the Go half of an ibv_context.
type ctxObj struct {
	d *hca.Device
}

//export shca_go_device
func shca_go_device(name *C.char, size C.size_t, guid *C.uint64_t) (ret C.int) {
	defer guardInt("shca_go_device", &ret, C.int(syscall.EFAULT))
	configure()
	if device.err != nil {
		return errnoOf(device.err)
	}
	s := device.settings
	b := cbytes(unsafe.Pointer(name), int(size))
	n := copy(b[:len(b)-1], s.Device)
	b[n] = 0
	*guid = C.uint64_t(hca.NodeGUIDFor(s.Addr))
	return 0
}

//export shca_go_open
func shca_go_open(errp *C.int) (h C.shca_handle) {
	defer guardHandle("shca_go_open", &h, errp)
	configure()
	if device.err != nil {
		setErr(errp, device.err)
		return 0
	}
	device.mu.Lock()
	defer device.mu.Unlock()
	if device.d == nil {
		d, err := hcaenv.Open(device.settings)
		if err != nil {
			fmt.Fprintf(os.Stderr, "softhca: cannot open %s: %v\n", device.settings.Device, err)
			setErr(errp, err)
			return 0
		}
		logf("%s on %s, UDP port %d", d.Name(), device.settings.Addr, device.settings.Port)
		device.d = d
	}
	device.refs++
	return newHandle(&ctxObj{d: device.d})
}

//export shca_go_close
func shca_go_close(h C.shca_handle) (ret C.int) {
	defer guardInt("shca_go_close", &ret, C.int(syscall.EFAULT))
	c := value[ctxObj](h)
	if c == nil {
		return C.int(syscall.EINVAL)
	}
	release(h)
	device.mu.Lock()
	defer device.mu.Unlock()
	if device.refs--; device.refs == 0 {
		err := device.d.Close()
		device.d = nil
		if err != nil {
			return fail(err)
		}
	}
	return 0
}

// beGUID stores a GUID in network order (__be64) on this little-endian
// machine (amd64, arm64: what the library is built for).
func beGUID(g uint64) C.__be64 { return C.__be64(bits.ReverseBytes64(g)) }

func fillDeviceAttr(a *C.struct_ibv_device_attr, v *verbs.DeviceAttr) {
	C.memset(unsafe.Pointer(a), 0, C.sizeof_struct_ibv_device_attr)
	fw := cbytes(unsafe.Pointer(&a.fw_ver[0]), len(a.fw_ver))
	copy(fw[:len(fw)-1], v.FWVer)
	a.node_guid = beGUID(v.NodeGUID)
	a.sys_image_guid = beGUID(v.SysImageGUID)
	a.max_mr_size = C.uint64_t(v.MaxMRSize)
	a.page_size_cap = C.uint64_t(v.PageSizeCap)
	a.vendor_id = C.uint32_t(v.VendorID)
	a.vendor_part_id = C.uint32_t(v.VendorPartID)
	a.hw_ver = C.uint32_t(v.HWVer)
	a.max_qp = C.int(v.MaxQP)
	a.max_qp_wr = C.int(v.MaxQPWR)
	a.device_cap_flags = C.uint(v.DeviceCapFlags)
	a.max_sge = C.int(v.MaxSGE)
	a.max_sge_rd = C.int(v.MaxSGERd)
	a.max_cq = C.int(v.MaxCQ)
	a.max_cqe = C.int(v.MaxCQE)
	a.max_mr = C.int(v.MaxMR)
	a.max_pd = C.int(v.MaxPD)
	a.max_qp_rd_atom = C.int(v.MaxQPRdAtom)
	a.max_ee_rd_atom = C.int(v.MaxEERdAtom)
	a.max_res_rd_atom = C.int(v.MaxResRdAtom)
	a.max_qp_init_rd_atom = C.int(v.MaxQPInitRdAtom)
	a.max_ee_init_rd_atom = C.int(v.MaxEEInitRdAtom)
	a.atomic_cap = uint32(v.AtomicCap)
	a.max_ee = C.int(v.MaxEE)
	a.max_rdd = C.int(v.MaxRDD)
	a.max_mw = C.int(v.MaxMW)
	a.max_raw_ipv6_qp = C.int(v.MaxRawIPv6QP)
	a.max_raw_ethy_qp = C.int(v.MaxRawEthyQP)
	a.max_mcast_grp = C.int(v.MaxMcastGrp)
	a.max_mcast_qp_attach = C.int(v.MaxMcastQPAttach)
	a.max_total_mcast_qp_attach = C.int(v.MaxTotalMcastQPAttach)
	a.max_ah = C.int(v.MaxAH)
	a.max_fmr = C.int(v.MaxFMR)
	a.max_map_per_fmr = C.int(v.MaxMapPerFMR)
	a.max_srq = C.int(v.MaxSRQ)
	a.max_srq_wr = C.int(v.MaxSRQWR)
	a.max_srq_sge = C.int(v.MaxSRQSGE)
	a.max_pkeys = C.uint16_t(v.MaxPKeys)
	a.local_ca_ack_delay = C.uint8_t(v.LocalCAAckDelay)
	a.phys_port_cnt = C.uint8_t(v.PhysPortCnt)
}

//export shca_go_query_device
func shca_go_query_device(h C.shca_handle, a *C.struct_ibv_device_attr) (ret C.int) {
	defer guardInt("shca_go_query_device", &ret, C.int(syscall.EFAULT))
	c := value[ctxObj](h)
	if c == nil || a == nil {
		return C.int(syscall.EINVAL)
	}
	v := c.d.QueryDevice()
	fillDeviceAttr(a, &v)
	return 0
}

// shca_go_query_device_ex fills the extended attributes; the C half has
// checked attr_size and zeroed the struct, and copies what fits.
//
//export shca_go_query_device_ex
func shca_go_query_device_ex(h C.shca_handle, a *C.struct_ibv_device_attr_ex) (ret C.int) {
	defer guardInt("shca_go_query_device_ex", &ret, C.int(syscall.EFAULT))
	c := value[ctxObj](h)
	if c == nil || a == nil {
		return C.int(syscall.EINVAL)
	}
	v := c.d.QueryDevice()
	fillDeviceAttr(&a.orig_attr, &v)
	// The kernel reports the capability flags in device_cap_flags_ex
	// too, whole, of which device_cap_flags is the low 32 bits
	// (ib_uverbs_ex_query_device): ibv_devinfo -v prints them there.
	a.device_cap_flags_ex = C.uint64_t(v.DeviceCapFlags)
	a.tm_caps.max_rndv_hdr_size = C.uint32_t(v.TM.MaxRndvHdrSize)
	a.tm_caps.max_num_tags = C.uint32_t(v.TM.MaxNumTags)
	a.tm_caps.flags = C.uint32_t(v.TM.Flags)
	a.tm_caps.max_ops = C.uint32_t(v.TM.MaxOps)
	a.tm_caps.max_sge = C.uint32_t(v.TM.MaxSGE)
	a.phys_port_cnt_ex = C.uint32_t(v.PhysPortCnt)
	return 0
}

//export shca_go_query_port
func shca_go_query_port(h C.shca_handle, port C.uint8_t, a *C.struct_ibv_port_attr) (ret C.int) {
	defer guardInt("shca_go_query_port", &ret, C.int(syscall.EFAULT))
	c := value[ctxObj](h)
	if c == nil || a == nil {
		return C.int(syscall.EINVAL)
	}
	p, err := c.d.QueryPort(uint8(port))
	if err != nil {
		return fail(err)
	}
	C.memset(unsafe.Pointer(a), 0, C.sizeof_struct_ibv_port_attr)
	a.state = uint32(p.State)
	a.max_mtu = uint32(p.MaxMTU)
	a.active_mtu = uint32(p.ActiveMTU)
	a.gid_tbl_len = C.int(p.GIDTblLen)
	a.port_cap_flags = C.uint32_t(p.PortCapFlags)
	a.max_msg_sz = C.uint32_t(p.MaxMsgSz)
	a.bad_pkey_cntr = C.uint32_t(p.BadPKeyCntr)
	a.qkey_viol_cntr = C.uint32_t(p.QKeyViolCntr)
	a.pkey_tbl_len = C.uint16_t(p.PKeyTblLen)
	a.lid = C.uint16_t(p.LID)
	a.sm_lid = C.uint16_t(p.SMLID)
	a.lmc = C.uint8_t(p.LMC)
	a.max_vl_num = C.uint8_t(p.MaxVLNum)
	a.sm_sl = C.uint8_t(p.SMSL)
	a.subnet_timeout = C.uint8_t(p.SubnetTimeout)
	a.init_type_reply = C.uint8_t(p.InitTypeReply)
	a.active_width = C.uint8_t(p.ActiveWidth)
	a.active_speed = C.uint8_t(p.ActiveSpeed)
	a.phys_state = C.uint8_t(p.PhysState)
	a.link_layer = C.uint8_t(p.LinkLayer)
	return 0
}

//export shca_go_query_gid
func shca_go_query_gid(h C.shca_handle, port C.uint8_t, index C.int, gid *C.union_ibv_gid) (ret C.int) {
	defer guardInt("shca_go_query_gid", &ret, C.int(syscall.EFAULT))
	c := value[ctxObj](h)
	if c == nil || gid == nil {
		return C.int(syscall.EINVAL)
	}
	g, err := c.d.QueryGID(uint8(port), int(index))
	if err != nil {
		return fail(err)
	}
	*(*[16]byte)(unsafe.Pointer(gid)) = g
	return 0
}

// shca_go_gid_in_use reports whether a GID entry holds a GID (query_gid
// answers an empty slot with zeros, as rdma-core reads an unset sysfs
// entry); ENODATA when it does not, as _ibv_query_gid_ex says.
//
//export shca_go_gid_in_use
func shca_go_gid_in_use(h C.shca_handle, port C.uint8_t, index C.int) (ret C.int) {
	defer guardInt("shca_go_gid_in_use", &ret, C.int(syscall.EFAULT))
	c := value[ctxObj](h)
	if c == nil {
		return C.int(syscall.EINVAL)
	}
	g, err := c.d.QueryGID(uint8(port), int(index))
	if err != nil {
		return fail(err)
	}
	if g.IsZero() {
		return C.int(syscall.ENODATA)
	}
	return 0
}

//export shca_go_query_pkey
func shca_go_query_pkey(h C.shca_handle, port C.uint8_t, index C.int, pkey *C.__be16) (ret C.int) {
	defer guardInt("shca_go_query_pkey", &ret, C.int(syscall.EFAULT))
	c := value[ctxObj](h)
	if c == nil || pkey == nil {
		return C.int(syscall.EINVAL)
	}
	k, err := c.d.QueryPKey(uint8(port), int(index))
	if err != nil {
		return fail(err)
	}
	*pkey = C.__be16(bits.ReverseBytes16(k))
	return 0
}

//export shca_go_async_fd
func shca_go_async_fd(h C.shca_handle) (ret C.int) {
	defer guardInt("shca_go_async_fd", &ret, -1)
	c := value[ctxObj](h)
	if c == nil {
		return -1
	}
	return C.int(c.d.AsyncFD())
}
