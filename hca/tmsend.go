package hca

import (
	"syscall"

	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// The sender's side of tag matching needs no device support
// (rdma-core Documentation/tag_matching.md: "no special HW support is
// needed at the sender"): a tag-matching message is an ordinary RC SEND
// whose payload begins with a TMH, and for a rendezvous an RVH. These
// helpers write the header into registered memory and return the SEND
// that carries it, followed by the data's scatter elements, as UCX builds
// its messages over mlx5. Post the work request with QP.PostSend; the
// header's bytes must stay as they are until the SEND completes.

// TMHeader is where a message's header is written: n bytes at offset Off
// of MR (16 for a TMH, 32 for a TMH and an RVH).
type TMHeader struct {
	MR  *MR
	Off int
}

// EagerSend returns a SEND of an EAGER message: its TMH (tag, app_ctx)
// written at h, then data. A receiver's tag entry that matches tag gets
// data alone (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID).
func EagerSend(wrID uint64, h TMHeader, tag uint64, appCtx uint32, data ...verbs.SGE) (*verbs.SendWR, error) {
	return tmSend(wrID, h, wire.TMEager, tag, appCtx, nil, data)
}

// NoTagSend returns a SEND of a NO_TAG message: a TMH with opcode NO_TAG,
// then data. A tag-matching SRQ delivers it whole to an ordinary buffer
// (IBV_WC_TM_NO_TAG), as UCX sends its active messages.
func NoTagSend(wrID uint64, h TMHeader, data ...verbs.SGE) (*verbs.SendWR, error) {
	return tmSend(wrID, h, wire.TMNoTag, 0, 0, nil, data)
}

// RendezvousSend returns a SEND of a rendezvous request: a TMH and an RVH
// naming data (an element of a region registered with
// IBV_ACCESS_REMOTE_READ, whose R_Key the RVH carries), then meta, which
// a receiver that finds no tag gets with the headers. A matching receiver
// READs data itself and answers with a FIN (FinTag reads it).
func RendezvousSend(wrID uint64, h TMHeader, tag uint64, appCtx uint32, data *MR, off, n int, meta ...verbs.SGE) (*verbs.SendWR, error) {
	const op = "post_send"
	if data == nil || off < 0 || n < 0 || off > data.Len()-n {
		return nil, verbs.Errorf(op, syscall.EINVAL, "rendezvous data [%d, %d) is not within the region", off, off+n)
	}
	if data.Access()&verbs.AccessRemoteRead == 0 {
		return nil, verbs.Errorf(op, syscall.EINVAL, "the rendezvous data's region lacks IBV_ACCESS_REMOTE_READ")
	}
	rvh := &wire.RVHFields{VirtualAddress: data.Addr() + uint64(off), RKey: data.RKey(), Length: uint32(n)}
	return tmSend(wrID, h, wire.TMRendezvous, tag, appCtx, rvh, meta)
}

// FinSend returns a SEND of a FIN: a TMH with opcode FIN. softhca's
// tag-matching SRQ sends FINs itself; this is for software that completes
// a rendezvous it received unexpected, as the device would have.
func FinSend(wrID uint64, h TMHeader, tag uint64, appCtx uint32) (*verbs.SendWR, error) {
	return tmSend(wrID, h, wire.TMFin, tag, appCtx, nil, nil)
}

// FinTag returns the tag and app_ctx of a received FIN, and false when b
// does not begin with a TMH whose opcode is FIN.
func FinTag(b []byte) (tag uint64, appCtx uint32, ok bool) {
	if len(b) < wire.TMHSize || wire.TMH(b).Opcode() != wire.TMFin {
		return 0, 0, false
	}
	t := wire.TMH(b)
	return t.Tag(), t.AppCtx(), true
}

// tmSend writes a header at h and returns the SEND of it and data.
func tmSend(wrID uint64, h TMHeader, opc wire.TMOpcode, tag uint64, appCtx uint32, rvh *wire.RVHFields, data []verbs.SGE) (*verbs.SendWR, error) {
	n := wire.TMHSize
	if rvh != nil {
		n += wire.RVHSize
	}
	if h.MR == nil || h.Off < 0 || h.Off > h.MR.Len()-n {
		return nil, verbs.Errorf("post_send", syscall.EINVAL, "no room for the %d-byte header at offset %d of its region", n, h.Off)
	}
	b := h.MR.Bytes()[h.Off : h.Off+n]
	wire.TMH(b).Encode(&wire.TMHFields{Opcode: opc, AppCtx: appCtx, Tag: tag})
	if rvh != nil {
		wire.RVH(b[wire.TMHSize:]).Encode(rvh)
	}
	sgl := make([]verbs.SGE, 0, 1+len(data))
	sgl = append(sgl, h.MR.SGE(h.Off, n))
	sgl = append(sgl, data...)
	return &verbs.SendWR{WRID: wrID, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: sgl}, nil
}
