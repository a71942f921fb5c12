package rdma

import (
	"errors"
	"syscall"
	"testing"

	"github.com/softhca/softhca/verbs"
)

// decoderOf returns a decoder of an encoder's bytes without the op code.
func decoderOf(e *encoder) *decoder { return &decoder{b: e.b[4:]} }

func TestQPAttrRoundTrip(t *testing.T) {
	a := verbs.QPAttr{QPState: verbs.QPStateRTS, CurQPState: verbs.QPStateRTR, PathMTU: verbs.MTU4096,
		PathMigState: verbs.MigArmed, QKey: 0x11110000, RQPSN: 0x123456, SQPSN: 0xabcdef, DestQPNum: 0x5a5a,
		QPAccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic,
		Cap:           verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 2, MaxSendSGE: 3, MaxRecvSGE: 4, MaxInlineData: 5},
		AHAttr: verbs.AHAttr{GRH: verbs.GlobalRoute{DGID: verbs.GID{0: 0xfe, 15: 7}, FlowLabel: 0xfffff, SGIDIndex: 1,
			HopLimit: 64, TrafficClass: 0x20}, DLID: 0x1234, SL: 3, SrcPathBits: 1, StaticRate: 2, IsGlobal: true, PortNum: 1},
		AltAHAttr: verbs.AHAttr{DLID: 9, PortNum: 2}, PKeyIndex: 1, AltPKeyIndex: 2, EnSQDAsyncNotify: true,
		SQDraining: true, MaxRdAtomic: 8, MaxDestRdAtomic: 9, MinRNRTimer: 12, PortNum: 1, Timeout: 14,
		RetryCnt: 7, RNRRetry: 6, AltPortNum: 2, AltTimeout: 3, RateLimit: 100000}
	e := newRequest(opModifyQP)
	encodeQPAttr(e, &a)
	d := decoderOf(e)
	got := decodeQPAttr(d)
	if d.err != nil || got != a || d.off != len(d.b) {
		t.Fatalf("round trip: %+v (err %v, %d of %d bytes), want %+v", got, d.err, d.off, len(d.b), a)
	}
}

func TestDeviceAttrRoundTrip(t *testing.T) {
	a := verbs.DeviceAttr{FWVer: "1.2.3", NodeGUID: 0x0102030405060708, SysImageGUID: 0x1112131415161718,
		MaxMRSize: 1 << 40, PageSizeCap: 0xfffff000, VendorID: 1, VendorPartID: 2, HWVer: 3, MaxQP: 4, MaxQPWR: 5,
		DeviceCapFlags: verbs.DeviceRCRNRNAKGen | verbs.DeviceSRQResize, MaxSGE: 6, MaxSGERd: 7, MaxCQ: 8,
		MaxCQE: 9, MaxMR: 10, MaxPD: 11, MaxQPRdAtom: 12, MaxEERdAtom: 13, MaxResRdAtom: 14, MaxQPInitRdAtom: 15,
		MaxEEInitRdAtom: 16, AtomicCap: verbs.AtomicHCA, MaxEE: 17, MaxRDD: 18, MaxMW: 19, MaxRawIPv6QP: 20,
		MaxRawEthyQP: 21, MaxMcastGrp: 22, MaxMcastQPAttach: 23, MaxTotalMcastQPAttach: 24, MaxAH: 25, MaxFMR: 26,
		MaxMapPerFMR: 27, MaxSRQ: 28, MaxSRQWR: 29, MaxSRQSGE: 30, MaxPKeys: 31, LocalCAAckDelay: 32,
		PhysPortCnt: 1, MaxInlineData: 256,
		TM: verbs.TMCaps{MaxRndvHdrSize: 64, MaxNumTags: 33, Flags: verbs.TMCapRC, MaxOps: 34, MaxSGE: 35}}
	e := newRequest(opQueryDevice)
	encodeDeviceAttr(e, &a)
	d := decoderOf(e)
	got := decodeDeviceAttr(d)
	if d.err != nil || got != a || d.off != len(d.b) {
		t.Fatalf("round trip: %+v (err %v), want %+v", got, d.err, a)
	}
}

func TestPortAttrRoundTrip(t *testing.T) {
	a := verbs.PortAttr{State: verbs.PortActive, MaxMTU: verbs.MTU4096, ActiveMTU: verbs.MTU1024, GIDTblLen: 16,
		PortCapFlags: 0x10000, MaxMsgSz: 1 << 31, BadPKeyCntr: 1, QKeyViolCntr: 2, PKeyTblLen: 1, LID: 0, SMLID: 3,
		LMC: 4, MaxVLNum: 5, SMSL: 6, SubnetTimeout: 7, InitTypeReply: 8, ActiveWidth: 1, ActiveSpeed: 2,
		PhysState: 5, LinkLayer: verbs.LinkLayerEthernet}
	e := newRequest(opQueryPort)
	encodePortAttr(e, &a)
	d := decoderOf(e)
	got := decodePortAttr(d)
	if d.err != nil || got != a || d.off != len(d.b) {
		t.Fatalf("round trip: %+v (err %v), want %+v", got, d.err, a)
	}
}

func TestWCRoundTrip(t *testing.T) {
	wcs := []verbs.WC{
		{WRID: 1, Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: 100, ImmData: 0xcafef00d,
			QPNum: 0x11, SrcQP: 0x12, WCFlags: verbs.WCFlagWithImm | verbs.WCFlagGRH, PKeyIndex: 1, SLID: 2, SL: 3,
			DLIDPathBits: 4, TMInfo: verbs.TMInfo{Tag: 0xdeadbeef00, Priv: 7}},
		{WRID: 2, Status: verbs.WCWRFlushErr, VendorErr: 0x244},
	}
	e := newRequest(opPollCQ)
	e.u32(uint32(len(wcs)))
	for i := range wcs {
		encodeWC(e, &wcs[i])
	}
	if len(e.b)-8 != len(wcs)*wcSize {
		t.Fatalf("a WC record is %d bytes, want wcSize %d", (len(e.b)-8)/len(wcs), wcSize)
	}
	out := make([]verbs.WC, 4)
	d := decoderOf(e)
	n := decodeWCs(d, out)
	if d.err != nil || n != 2 || out[0] != wcs[0] || out[1] != wcs[1] {
		t.Fatalf("round trip: %d %+v (err %v), want %+v", n, out[:n], d.err, wcs)
	}
	// More completions than asked for is a protocol error.
	d = decoderOf(e)
	if n := decodeWCs(d, out[:1]); n != 0 || !errors.Is(d.err, syscall.EPROTO) {
		t.Fatalf("two completions into a slice of one: %d, %v; want 0 and EPROTO", n, d.err)
	}
}

func TestSendWRList(t *testing.T) {
	ah := &ah{h: 7}
	wr := &verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled | verbs.SendFence,
		SGList: []verbs.SGE{{Addr: 0x1000, Length: 8, LKey: 3}},
		Atomic: verbs.AtomicInfo{RemoteAddr: 0x2000, CompareAdd: 1, Swap: 2, RKey: 4},
		Next: &verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithImm, ImmData: 5, UD: verbs.UDInfo{AH: ah, RemoteQPN: 6, RemoteQKey: 7},
			Next: &verbs.SendWR{WRID: 3, Opcode: verbs.WRSend}}}
	e := newRequest(opPostSend)
	list := encodeSendWRs(e, wr, func(a verbs.AH) uint32 {
		if a == verbs.AH(ah) {
			return 7
		}
		return 0
	})
	if len(list) != 3 || list[1] != wr.Next {
		t.Fatalf("list %v", list)
	}
	want := 4 + 3*sendWRBase + sgeSize
	if len(e.b)-4 != want {
		t.Fatalf("three send WRs with one SGE are %d bytes, want %d", len(e.b)-4, want)
	}
	d := decoderOf(e)
	if n := d.u32("count"); n != 3 {
		t.Fatalf("count %d", n)
	}
	if id, op := d.u64("wr_id"), d.u32("opcode"); id != 1 || op != uint32(verbs.WRAtomicCmpAndSwp) {
		t.Fatalf("first WR: wr_id %d opcode %d", id, op)
	}
}

func TestBadIndex(t *testing.T) {
	for _, c := range []struct {
		body []byte
		n    int
		want int
		bad  bool
	}{
		{nil, 3, -1, false},                            // no body: none
		{[]byte{0xff, 0xff, 0xff, 0xff}, 3, -1, false}, // -1
		{[]byte{2, 0, 0, 0}, 3, 2, false},
		{[]byte{3, 0, 0, 0}, 3, -1, true}, // outside the list
		{[]byte{0xfe, 0xff, 0xff, 0xff}, 3, -1, true},
		{[]byte{1, 0}, 3, -1, true}, // short
	} {
		d := &decoder{b: c.body}
		got := decodeBadIndex(d, c.n)
		if got != c.want || (d.err != nil) != c.bad {
			t.Errorf("% x of %d: %d, %v; want %d, error %v", c.body, c.n, got, d.err, c.want, c.bad)
		}
	}
}

func TestHeader(t *testing.T) {
	errno, d, err := decodeHeader([]byte{22, 0, 0, 0, 9})
	if err != nil || errno != syscall.EINVAL || d.u8("x") != 9 {
		t.Fatalf("header: %v %v", errno, err)
	}
	if _, _, err := decodeHeader([]byte{1, 2}); !errors.Is(err, syscall.EPROTO) {
		t.Fatalf("a 2-byte response: %v, want EPROTO", err)
	}
}

// FuzzDecodeResponse feeds arbitrary bytes to every response decoder, as
// a dying or hostile agent could: each must return (with an error or
// not), never panic, and never read past the message.
func FuzzDecodeResponse(f *testing.F) {
	e := newRequest(opPollCQ)
	e.u32(1)
	encodeWC(e, &verbs.WC{WRID: 1})
	f.Add(append([]byte{0, 0, 0, 0}, e.b[4:]...))
	f.Add([]byte{0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f})
	f.Add([]byte{11, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, d, err := decodeHeader(b)
		if err != nil {
			return
		}
		body := d.b[d.off:]
		run := func(decode func(d *decoder)) {
			d := &decoder{b: body}
			decode(d)
			if d.off > len(d.b) {
				t.Fatalf("read %d of %d bytes", d.off, len(d.b))
			}
		}
		run(func(d *decoder) { decodeDeviceAttr(d) })
		run(func(d *decoder) { decodePortAttr(d) })
		run(func(d *decoder) { decodeQPAttr(d) })
		run(func(d *decoder) { decodeWCs(d, make([]verbs.WC, 8)) })
		run(func(d *decoder) { decodeWCs(d, make([]verbs.WC, maxPoll)) })
		run(func(d *decoder) { decodeBadIndex(d, 4) })
		run(func(d *decoder) { decodeBadIndex(d, 4); decodeOpsHandles(d, 4) })
		run(func(d *decoder) { decodeAsync(d) })
		run(func(d *decoder) { decodeMR(d) })
		run(func(d *decoder) { decodeCap(d) })
		run(func(d *decoder) { d.take(16, "gid"); d.count(1, "n") })
	})
}

func TestAsyncAndMRRoundTrip(t *testing.T) {
	ar := asyncRecord{Type: uint32(verbs.EventQPLastWQEReached), Kind: evQP, Handle: 9, Port: 1}
	e := newRequest(opGetAsyncEvent)
	encodeAsync(e, ar)
	d := decoderOf(e)
	if got := decodeAsync(d); got != ar || d.err != nil || d.off != len(d.b) {
		t.Fatalf("async event: %+v (%v), want %+v", got, d.err, ar)
	}
	mr := mrRecord{Handle: 3, Addr: 0x7f0000001064, LKey: 0x101, RKey: 0x202, Length: 4097}
	e = newRequest(opRegMR)
	encodeMR(e, mr)
	d = decoderOf(e)
	if got := decodeMR(d); got != mr || d.err != nil || d.off != len(d.b) {
		t.Fatalf("reg_mr: %+v (%v), want %+v", got, d.err, mr)
	}
}
