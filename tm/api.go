package tm

import "github.com/softhca/softhca/verbs"

// Config sizes a tag list.
type Config struct {
	// MaxNumTags is the most entries in use at once (max_num_tags): at
	// least 1. Handles are 0..MaxNumTags-1.
	MaxNumTags int
	// MaxSGE is the most scatter elements an entry has (max_sge): at
	// least 1.
	MaxSGE int
}

// OpResult is what an op that Apply accepted asks of its caller.
type OpResult struct {
	// Handle is the entry the op is about: the new entry's handle for
	// TAG_ADD (Apply also writes it to the op's TM.Handle), the op's
	// handle for TAG_DEL, 0 for TAG_SYNC.
	Handle uint32
	// Complete: a completion is due on the TM-SRQ's CQ (the op was
	// signaled, or it failed), with Status and, when SyncReq,
	// IBV_WC_TM_SYNC_REQ.
	Complete bool
	Status   verbs.WCStatus // WCSuccess or WCTMErr
	SyncReq  bool           // only with Complete
	// Releases: polling that completion ends the entry; the caller then
	// calls Release(Handle) (rule T3).
	Releases bool
}

// Match is the entry a tagged message consumed.
type Match struct {
	Handle   uint32
	RecvWRID uint64
	Tag      uint64 // the entry's tag and mask
	Mask     uint64
	// SGL is the entry's scatter list; the List keeps it unchanged until
	// Release(Handle).
	SGL []verbs.SGE
}
