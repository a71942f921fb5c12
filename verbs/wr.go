package verbs

import "fmt"

// AccessFlags are memory and QP access rights (enum ibv_access_flags).
type AccessFlags uint32

// Access flags.
const (
	AccessLocalWrite   AccessFlags = 1 << 0  // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  AccessFlags = 1 << 1  // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead   AccessFlags = 1 << 2  // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic AccessFlags = 1 << 3  // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind       AccessFlags = 1 << 4  // IBV_ACCESS_MW_BIND
	AccessZeroBased    AccessFlags = 1 << 5  // IBV_ACCESS_ZERO_BASED
	AccessOnDemand     AccessFlags = 1 << 6  // IBV_ACCESS_ON_DEMAND
	AccessHugeTLB      AccessFlags = 1 << 7  // IBV_ACCESS_HUGETLB
	AccessRelaxedOrder AccessFlags = 1 << 20 // IBV_ACCESS_RELAXED_ORDERING
)

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at
// virtual address Addr of the memory region whose local key is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite         WROpcode = 0 // IBV_WR_RDMA_WRITE
	WRRDMAWriteWithImm  WROpcode = 1 // IBV_WR_RDMA_WRITE_WITH_IMM
	WRSend              WROpcode = 2 // IBV_WR_SEND
	WRSendWithImm       WROpcode = 3 // IBV_WR_SEND_WITH_IMM
	WRRDMARead          WROpcode = 4 // IBV_WR_RDMA_READ
	WRAtomicCmpAndSwp   WROpcode = 5 // IBV_WR_ATOMIC_CMP_AND_SWP
	WRAtomicFetchAndAdd WROpcode = 6 // IBV_WR_ATOMIC_FETCH_AND_ADD
	WRLocalInv          WROpcode = 7 // IBV_WR_LOCAL_INV
	WRBindMW            WROpcode = 8 // IBV_WR_BIND_MW
	WRSendWithInv       WROpcode = 9 // IBV_WR_SEND_WITH_INV
)

var wrOpcodeNames = [...]string{
	"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ",
	"ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV",
}

// String returns the libibverbs name without "IBV_WR_".
func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) {
		return wrOpcodeNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// IsAtomic reports whether o is one of the two atomic operations.
func (o WROpcode) IsAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAndAdd }

// HasImm reports whether o carries immediate data.
func (o WROpcode) HasImm() bool { return o == WRRDMAWriteWithImm || o == WRSendWithImm }

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0 // IBV_SEND_FENCE
	SendSignaled  SendFlags = 1 << 1 // IBV_SEND_SIGNALED
	SendSolicited SendFlags = 1 << 2 // IBV_SEND_SOLICITED
	SendInline    SendFlags = 1 << 3 // IBV_SEND_INLINE
	SendIPCsum    SendFlags = 1 << 4 // IBV_SEND_IP_CSUM
)

// RDMAInfo is the remote side of an RDMA READ or WRITE (wr.rdma).
type RDMAInfo struct {
	RemoteAddr uint64
	RKey       uint32
}

// AtomicInfo is the remote side and operands of an atomic (wr.atomic).
type AtomicInfo struct {
	RemoteAddr uint64
	CompareAdd uint64 // compare value for CMP_AND_SWP, addend for FETCH_AND_ADD
	Swap       uint64
	RKey       uint32
}

// AH is an address handle as a send work request carries it. The hca
// package's address handles implement it; the transport reads the resolved
// address vector through it.
type AH interface {
	// Attr returns the address vector the handle was created with.
	Attr() AHAttr
}

// UDInfo is the destination of a UD send (wr.ud).
type UDInfo struct {
	AH         AH
	RemoteQPN  uint32
	RemoteQKey uint32
}

// SendWR is a send work request (struct ibv_send_wr). Requests form a
// linked list through Next; a post stops at the first bad one.
type SendWR struct {
	WRID           uint64
	Next           *SendWR
	SGList         []SGE
	Opcode         WROpcode
	SendFlags      SendFlags
	ImmData        uint32 // ImmData in network order semantics: the value the receiver's WC shows
	InvalidateRKey uint32 // for SEND_WITH_INV and LOCAL_INV
	RDMA           RDMAInfo
	Atomic         AtomicInfo
	UD             UDInfo
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID   uint64
	Next   *RecvWR
	SGList []SGE
}

// WCStatus is the outcome of a work request (enum ibv_wc_status).
type WCStatus uint8

// Work completion status codes.
const (
	WCSuccess          WCStatus = iota // IBV_WC_SUCCESS
	WCLocLenErr                        // IBV_WC_LOC_LEN_ERR
	WCLocQPOpErr                       // IBV_WC_LOC_QP_OP_ERR
	WCLocEECOpErr                      // IBV_WC_LOC_EEC_OP_ERR
	WCLocProtErr                       // IBV_WC_LOC_PROT_ERR
	WCWRFlushErr                       // IBV_WC_WR_FLUSH_ERR
	WCMWBindErr                        // IBV_WC_MW_BIND_ERR
	WCBadRespErr                       // IBV_WC_BAD_RESP_ERR
	WCLocAccessErr                     // IBV_WC_LOC_ACCESS_ERR
	WCRemInvReqErr                     // IBV_WC_REM_INV_REQ_ERR
	WCRemAccessErr                     // IBV_WC_REM_ACCESS_ERR
	WCRemOpErr                         // IBV_WC_REM_OP_ERR
	WCRetryExcErr                      // IBV_WC_RETRY_EXC_ERR
	WCRNRRetryExcErr                   // IBV_WC_RNR_RETRY_EXC_ERR
	WCLocRDDViolErr                    // IBV_WC_LOC_RDD_VIOL_ERR
	WCRemInvRDReqErr                   // IBV_WC_REM_INV_RD_REQ_ERR
	WCRemAbortErr                      // IBV_WC_REM_ABORT_ERR
	WCInvEECNErr                       // IBV_WC_INV_EECN_ERR
	WCInvEECStateErr                   // IBV_WC_INV_EEC_STATE_ERR
	WCFatalErr                         // IBV_WC_FATAL_ERR
	WCRespTimeoutErr                   // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr                       // IBV_WC_GENERAL_ERR
	WCTMErr                            // IBV_WC_TM_ERR
	WCTMRndvIncomplete                 // IBV_WC_TM_RNDV_INCOMPLETE
)

// wcStatusNames are ibv_wc_status_str's strings.
var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error",
	"local EE context operation error", "local protection error",
	"Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error",
	"remote access error", "remote operation error", "transport retry counter exceeded",
	"RNR retry counter exceeded", "local RDD violation error",
	"remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error",
	"general error", "TM error", "TM software rendezvous",
}

// String returns the status as ibv_wc_status_str prints it.
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// WCOpcode is the operation a completion reports (enum ibv_wc_opcode).
type WCOpcode uint8

// Work completion opcodes. Receive opcodes have bit 7 set.
const (
	WCSend            WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = 5   // IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = 6   // IBV_WC_LOCAL_INV
	WCRecv            WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
	WCTMAdd           WCOpcode = 130 // IBV_WC_TM_ADD
	WCTMDel           WCOpcode = 131 // IBV_WC_TM_DEL
	WCTMSync          WCOpcode = 132 // IBV_WC_TM_SYNC
	WCTMRecv          WCOpcode = 133 // IBV_WC_TM_RECV
	WCTMNoTag         WCOpcode = 134 // IBV_WC_TM_NO_TAG
)

// String returns the libibverbs name without "IBV_WC_".
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	case WCTMAdd:
		return "TM_ADD"
	case WCTMDel:
		return "TM_DEL"
	case WCTMSync:
		return "TM_SYNC"
	case WCTMRecv:
		return "TM_RECV"
	case WCTMNoTag:
		return "TM_NO_TAG"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCOpcodeFor returns the completion opcode of a send work request.
func WCOpcodeFor(o WROpcode) WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	case WRSend, WRSendWithImm, WRSendWithInv:
		return WCSend
	}
	return WCSend // not a send work request opcode
}

// WCFlags qualify a completion (enum ibv_wc_flags).
type WCFlags uint32

// Work completion flags.
const (
	WCFlagGRH         WCFlags = 1 << 0 // IBV_WC_GRH: the first 40 bytes hold a GRH
	WCFlagWithImm     WCFlags = 1 << 1 // IBV_WC_WITH_IMM
	WCFlagIPCsumOK    WCFlags = 1 << 2 // IBV_WC_IP_CSUM_OK
	WCFlagWithInv     WCFlags = 1 << 3 // IBV_WC_WITH_INV
	WCFlagTMSyncReq   WCFlags = 1 << 4 // IBV_WC_TM_SYNC_REQ
	WCFlagTMMatch     WCFlags = 1 << 5 // IBV_WC_TM_MATCH
	WCFlagTMDataValid WCFlags = 1 << 6 // IBV_WC_TM_DATA_VALID
)

// WC is a work completion (struct ibv_wc).
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	// ImmData is the immediate data (with WCFlagWithImm) or the invalidated
	// R_Key (with WCFlagWithInv). libibverbs keeps imm_data in network
	// order; here it is the number the sender put in SendWR.ImmData.
	ImmData      uint32
	QPNum        uint32
	SrcQP        uint32
	WCFlags      WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	// TMInfo is the tag-matching information of TM completions.
	TMInfo TMInfo
}

// TMInfo is the tag-matching part of a completion (ibv_wc_tm_info).
type TMInfo struct {
	Tag  uint64
	Priv uint32
}

// RecvWQE is a receive work request as the transport takes it from a
// receive queue or a shared receive queue: its ID and its scatter list.
// Taking one copies the scatter list into SGL, reusing its backing array.
type RecvWQE struct {
	WRID uint64
	SGL  []SGE
}

// OpsOpcode is a tag-matching list operation (enum ibv_ops_wr_opcode).
type OpsOpcode uint8

// Tag-matching list operations (ibv_post_srq_ops(3)).
const (
	WRTagAdd  OpsOpcode = iota // IBV_WR_TAG_ADD: add an entry; returns its handle
	WRTagDel                   // IBV_WR_TAG_DEL: remove the entry a handle names
	WRTagSync                  // IBV_WR_TAG_SYNC: only report unexpected_cnt
)

// String returns the libibverbs name without "IBV_WR_".
func (o OpsOpcode) String() string {
	switch o {
	case WRTagAdd:
		return "TAG_ADD"
	case WRTagDel:
		return "TAG_DEL"
	case WRTagSync:
		return "TAG_SYNC"
	}
	return fmt.Sprintf("OpsOpcode(%d)", uint8(o))
}

// OpsFlags qualify a list operation (enum ibv_ops_flags).
type OpsFlags uint32

// List operation flags.
const (
	OpsSignaled OpsFlags = 1 << 0 // IBV_OPS_SIGNALED: a completion for this op
	OpsTMSync   OpsFlags = 1 << 1 // IBV_OPS_TM_SYNC: TM.UnexpectedCnt is valid
)

// OpsWR is a tag-matching list operation (struct ibv_ops_wr).
type OpsWR struct {
	WRID   uint64
	Next   *OpsWR
	Opcode OpsOpcode
	Flags  OpsFlags
	TM     TMOp
}

// TMOp is the tag-matching part of an OpsWR (ibv_ops_wr's tm).
type TMOp struct {
	// UnexpectedCnt is how many unexpected messages software has
	// handled; it counts only with OpsTMSync.
	UnexpectedCnt uint32
	// Handle names the entry TAG_DEL removes; TAG_ADD sets it.
	Handle uint32
	Add    TagAdd
}

// TagAdd describes the entry TAG_ADD adds (ibv_ops_wr's tm.add).
type TagAdd struct {
	RecvWRID uint64 // the wr_id of the TM_RECV completions
	SGList   []SGE
	// A message whose TMH tag t has t&Mask == Tag matches the entry.
	Tag, Mask uint64
}
