package hca_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/verbs"
	"github.com/softhca/softhca/wire"
)

// Tag matching between two devices (docs/tag-matching.md): the server
// has a tag-matching SRQ and an RC QP on it; the client sends EAGER,
// RNDV and NO_TAG messages as ordinary SENDs, as UCX does over mlx5, and
// receives the FINs of rendezvous on its own receive queue.

// tmPair is a client and a server with a tag-matching SRQ.
type tmPair struct {
	c, s *side
	srq  *hca.SRQ
	// Completions polled and not yet looked at, per side.
	pending map[*side][]verbs.WC
}

// next returns a side's oldest completion not yet looked at.
func (p *tmPair) next(t *testing.T, s *side) verbs.WC {
	t.Helper()
	if len(p.pending[s]) == 0 {
		p.pending[s] = waitWC(t, s, 1)
	}
	wc := p.pending[s][0]
	p.pending[s] = p.pending[s][1:]
	return wc
}

// tmSizes: the server's SRQ (ordinary buffers), its tag list, and the
// regions' size.
type tmSizes struct {
	srqWR, tags, mem int
	mtu              verbs.MTU
}

// newTMPair opens the two devices over la and lb and connects them.
func newTMPair(t *testing.T, la, lb link.Link, z tmSizes) *tmPair {
	t.Helper()
	p := &tmPair{c: openSide(t, la, z.mem), s: openSide(t, lb, z.mem), pending: map[*side][]verbs.WC{}}
	p.connectTM(t, z)
	return p
}

// connectTM creates the server's TM-SRQ and both QPs, and connects them.
func (p *tmPair) connectTM(t testing.TB, z tmSizes) {
	t.Helper()
	var err error
	p.srq, err = p.s.pd.CreateSRQ(&hca.SRQInitAttr{
		Attr: verbs.SRQAttr{MaxWR: uint32(z.srqWR), MaxSGE: 2},
		TM:   &hca.TMCap{MaxNumTags: uint32(z.tags), MaxOps: 16},
		CQ:   p.s.cq,
	})
	require.NoError(t, err)
	p.c.createQP(t, verbs.QPTypeRC)
	p.s.qp, err = p.s.pd.CreateQP(&hca.QPInitAttr{SendCQ: p.s.cq, RecvCQ: p.s.cq, SRQ: p.srq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxSendSGE: 1}})
	require.NoError(t, err)
	for _, x := range [][2]*side{{p.c, p.s}, {p.s, p.c}} {
		me, peer := x[0], x[1]
		gid, err := peer.dev.QueryGID(1, 1)
		require.NoError(t, err)
		require.NoError(t, me.qp.Connect(hca.Remote{QPN: peer.qp.Num(), PSN: 100, GID: gid}, &hca.ConnectOptions{
			PathMTU: z.mtu, PSN: 100, MinRNRTimer: 1, MaxRdAtomic: 8, MaxDestRdAtomic: 8, RetryCnt: 7, RNRRetry: 7,
			Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}))
	}
}

// eachLink runs f on a connected pair over each kind of link: a clean
// pipe, a pipe that loses 2%, duplicates 2% and reorders packets, and
// real UDP sockets on loopback.
func eachLink(t *testing.T, z tmSizes, f func(t *testing.T, p *tmPair)) {
	t.Run("pipe", func(t *testing.T) { f(t, tmPipePair(t, pipe.Faults{}, z)) })
	t.Run("lossy-pipe", func(t *testing.T) { f(t, tmPipePair(t, lossy, z)) })
	t.Run("udp", func(t *testing.T) {
		a, b := udpPairConfig(t, true, z.mem, hca.Config{})
		p := &tmPair{c: a, s: b, pending: map[*side][]verbs.WC{}}
		p.connectTM(t, z)
		f(t, p)
	})
}

// lossy are the faults of eachLink's lossy pipe.
var lossy = pipe.Faults{Loss: 0.02, Duplicate: 0.02, ReorderWindow: 4}

// tmPipePair is newTMPair over link/pipe with faults.
func tmPipePair(t *testing.T, f pipe.Faults, z tmSizes) *tmPair {
	la, lb := pipe.New(pipe.Config{Faults: f})
	return newTMPair(t, la, lb, z)
}

// add posts a signaled TAG_ADD and returns its handle and completion.
func (p *tmPair) add(t *testing.T, wrID uint64, tag, mask uint64, off, n uint32, flags verbs.OpsFlags, unexp uint32) (uint32, verbs.WC) {
	t.Helper()
	wr := &verbs.OpsWR{WRID: wrID, Opcode: verbs.WRTagAdd, Flags: verbs.OpsSignaled | flags,
		TM: verbs.TMOp{UnexpectedCnt: unexp, Add: verbs.TagAdd{RecvWRID: wrID, Tag: tag, Mask: mask,
			SGList: []verbs.SGE{p.s.mr.SGE(int(off), int(n))}}}}
	bad, err := p.srq.PostOps(wr)
	require.NoError(t, err)
	require.Nil(t, bad)
	wc := p.next(t, p.s)
	require.Equal(t, verbs.WCTMAdd, wc.Opcode)
	require.Equal(t, wrID, wc.WRID)
	return wr.TM.Handle, wc
}

// ops posts one signaled list op and returns its completion.
func (p *tmPair) ops(t *testing.T, wr *verbs.OpsWR) verbs.WC {
	t.Helper()
	wr.Flags |= verbs.OpsSignaled
	_, err := p.srq.PostOps(wr)
	require.NoError(t, err)
	return p.next(t, p.s)
}

// postSRQ posts an ordinary buffer at off.
func (p *tmPair) postSRQ(t *testing.T, wrID uint64, off, n uint32) {
	t.Helper()
	_, err := p.srq.PostRecv(&verbs.RecvWR{WRID: wrID, SGList: []verbs.SGE{p.s.mr.SGE(int(off), int(n))}})
	require.NoError(t, err)
}

// send sends the client's bytes [off, off+n) as one SEND and waits for
// its completion.
func (p *tmPair) send(t *testing.T, off, n uint32) {
	t.Helper()
	_, err := p.c.qp.PostSend(&verbs.SendWR{WRID: 0x5e, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{p.c.mr.SGE(int(off), int(n))}})
	require.NoError(t, err)
	wc := p.nextSend(t)
	require.Equal(t, verbs.WCSuccess, wc.Status, "the client's SEND")
}

// nextSend returns the client's next SEND completion; receive
// completions polled meanwhile (a FIN may overtake the ACK of the
// rendezvous request) stay for next.
func (p *tmPair) nextSend(t *testing.T) verbs.WC {
	t.Helper()
	for {
		for i, wc := range p.pending[p.c] {
			if wc.Opcode == verbs.WCSend {
				p.pending[p.c] = append(p.pending[p.c][:i], p.pending[p.c][i+1:]...)
				return wc
			}
		}
		p.pending[p.c] = append(p.pending[p.c], waitWC(t, p.c, 1)...)
	}
}

// eager writes an EAGER message (TMH + data) at the client's offset off.
func (p *tmPair) eager(off uint32, op wire.TMOpcode, tag uint64, appCtx uint32, data []byte) uint32 {
	wire.TMH(p.c.buf[off:]).Encode(&wire.TMHFields{Opcode: op, AppCtx: appCtx, Tag: tag})
	copy(p.c.buf[off+wire.TMHSize:], data)
	return wire.TMHSize + uint32(len(data))
}

// rndv writes a rendezvous request at off naming the client's bytes
// [dataOff, dataOff+n).
func (p *tmPair) rndv(off uint32, tag uint64, appCtx uint32, dataOff, n uint32) uint32 {
	wire.TMH(p.c.buf[off:]).Encode(&wire.TMHFields{Opcode: wire.TMRendezvous, AppCtx: appCtx, Tag: tag})
	va := p.c.mr.SGE(int(dataOff), int(n)).Addr
	wire.RVH(p.c.buf[off+wire.TMHSize:]).Encode(&wire.RVHFields{VirtualAddress: va, RKey: p.c.mr.RKey(), Length: n})
	return wire.TMHSize + wire.RVHSize
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

func TestTMEagerMatched(t *testing.T) {
	eachLink(t, tmSizes{srqWR: 4, tags: 8, mem: 1 << 20, mtu: verbs.MTU1024}, func(t *testing.T, p *tmPair) {
		h, wc := p.add(t, 77, 0x1234, ^uint64(0), 4096, 8192, 0, 0)
		require.Equal(t, verbs.WCSuccess, wc.Status)
		require.Zero(t, wc.WCFlags&verbs.WCFlagTMSyncReq, "in sync: no sync asked")
		data := make([]byte, 3000) // three packets at MTU 1024
		fill(data, 3)
		n := p.eager(0, wire.TMEager, 0x1234, 0xabcdef01, data)
		p.send(t, 0, n)
		got := p.next(t, p.s)
		require.Equal(t, verbs.WCSuccess, got.Status)
		require.Equal(t, verbs.WCTMRecv, got.Opcode)
		require.Equal(t, uint64(77), got.WRID, "the tag's recv_wr_id")
		require.Equal(t, verbs.WCFlagTMMatch|verbs.WCFlagTMDataValid, got.WCFlags)
		require.Equal(t, verbs.TMInfo{Tag: 0x1234, Priv: 0xabcdef01}, got.TMInfo)
		require.EqualValues(t, len(data), got.ByteLen, "the data after the TMH")
		require.True(t, bytes.Equal(data, p.s.buf[4096:4096+len(data)]), "the TMH is not placed")

		// Consumed and polled: the handle is free, so deleting it is refused.
		_, err := p.srq.PostOps(&verbs.OpsWR{Opcode: verbs.WRTagDel, TM: verbs.TMOp{Handle: h}})
		require.True(t, errors.Is(err, syscall.EINVAL), "%v", err)
	})
}

func TestTMUnexpectedAndPhaseSync(t *testing.T) {
	eachLink(t, tmSizes{srqWR: 8, tags: 8, mem: 1 << 20, mtu: verbs.MTU1024}, func(t *testing.T, p *tmPair) {
		p.postSRQ(t, 501, 0, 4096)
		p.postSRQ(t, 502, 4096, 4096)
		data := []byte("unexpected payload")
		n := p.eager(0, wire.TMEager, 9, 1, data)
		p.send(t, 0, n)
		got := p.next(t, p.s)
		require.Equal(t, verbs.WCTMRecv, got.Opcode)
		require.Equal(t, uint64(501), got.WRID, "an ordinary buffer")
		require.Zero(t, got.WCFlags, "neither MATCH nor DATA_VALID (and no sync request: software is not far behind)")
		require.Equal(t, n, got.ByteLen, "the whole message, TMH included")
		require.True(t, bytes.Equal(p.c.buf[:n], p.s.buf[:n]))

		// A tag added before software reports the unexpected message is
		// disabled: the TM_ADD asks for a sync and a matching message is
		// unexpected too.
		_, wc := p.add(t, 600, 9, ^uint64(0), 64<<10, 4096, 0, 0)
		require.NotZero(t, wc.WCFlags&verbs.WCFlagTMSyncReq, "sw 0, hw 1")
		p.send(t, 0, n)
		got = p.next(t, p.s)
		require.Equal(t, uint64(502), got.WRID, "the disabled tag does not match")
		require.Zero(t, got.WCFlags)

		// Software reports both: the tag is enabled and the next message
		// matches it.
		wc = p.ops(t, &verbs.OpsWR{WRID: 27, Opcode: verbs.WRTagSync, Flags: verbs.OpsTMSync, TM: verbs.TMOp{UnexpectedCnt: 2}})
		require.Equal(t, verbs.WCTMSync, wc.Opcode)
		require.Equal(t, uint64(27), wc.WRID)
		require.Zero(t, wc.WCFlags)
		p.send(t, 0, n)
		got = p.next(t, p.s)
		require.Equal(t, uint64(600), got.WRID)
		require.Equal(t, verbs.WCFlagTMMatch|verbs.WCFlagTMDataValid, got.WCFlags)
		require.True(t, bytes.Equal(data, p.s.buf[64<<10:64<<10+len(data)]))
	})
}

func TestTMNoTag(t *testing.T) {
	eachLink(t, tmSizes{srqWR: 2, tags: 2, mem: 1 << 20, mtu: verbs.MTU1024}, func(t *testing.T, p *tmPair) {
		p.add(t, 1, 0x55, ^uint64(0), 8192, 4096, 0, 0)
		p.postSRQ(t, 9, 0, 4096)
		n := p.eager(0, wire.TMNoTag, 0x55, 0, []byte("no tag, even with a tag that would match"))
		p.send(t, 0, n)
		got := p.next(t, p.s)
		require.Equal(t, verbs.WCTMNoTag, got.Opcode)
		require.Equal(t, uint64(9), got.WRID)
		require.Equal(t, n, got.ByteLen)
		require.Zero(t, got.WCFlags)
		require.Zero(t, got.TMInfo)
		require.True(t, bytes.Equal(p.c.buf[:n], p.s.buf[:n]))
	})
}

// rndvMatched runs one matched rendezvous of size bytes and checks every
// completion and byte.
func rndvMatched(t *testing.T, p *tmPair, size uint32) {
	t.Helper()
	const dataOff, tagOff = 1 << 20, 1 << 20
	fill(p.c.buf[dataOff:dataOff+size], byte(size))
	clear(p.s.buf[tagOff : tagOff+size])
	_, err := p.c.qp.PostRecv(&verbs.RecvWR{WRID: 0xf1, SGList: []verbs.SGE{p.c.mr.SGE(4096, 64)}})
	require.NoError(t, err)
	p.add(t, 42, 0x7000, 0xf000, tagOff, size, 0, 0)
	n := p.rndv(0, 0x7abc, 0x600d, dataOff, size)
	p.send(t, 0, n)
	first := p.next(t, p.s)
	require.Equal(t, verbs.WCSuccess, first.Status)
	require.Equal(t, verbs.WCTMRecv, first.Opcode)
	require.Equal(t, uint64(42), first.WRID)
	require.Equal(t, verbs.WCFlagTMMatch, first.WCFlags, "matched; the data is not there yet")
	require.Equal(t, verbs.TMInfo{Tag: 0x7abc, Priv: 0x600d}, first.TMInfo)
	second := p.next(t, p.s)
	require.Equal(t, verbs.WCSuccess, second.Status, "%s", second.Status)
	require.Equal(t, verbs.WCTMRecv, second.Opcode)
	require.Equal(t, uint64(42), second.WRID)
	require.Equal(t, verbs.WCFlagTMDataValid, second.WCFlags)
	require.Equal(t, size, second.ByteLen)
	require.True(t, bytes.Equal(p.c.buf[dataOff:dataOff+size], p.s.buf[tagOff:tagOff+size]), "the READ brought the sender's bytes")
	fin := p.next(t, p.c)
	require.Equal(t, verbs.WCRecv, fin.Opcode, "the FIN is an ordinary SEND to the sender")
	require.Equal(t, uint64(0xf1), fin.WRID)
	require.EqualValues(t, wire.TMHSize, fin.ByteLen)
	tmh := wire.TMH(p.c.buf[4096 : 4096+wire.TMHSize])
	require.Equal(t, wire.TMHFields{Opcode: wire.TMFin, AppCtx: 0x600d, Tag: 0x7abc}, tmh.Fields())
}

func TestTMRendezvousMatched(t *testing.T) {
	eachLink(t, tmSizes{srqWR: 2, tags: 4, mem: 2<<20 + 16<<20, mtu: verbs.MTU4096}, func(t *testing.T, p *tmPair) {
		for _, size := range []uint32{1, 4096, 1 << 20, 16 << 20} {
			rndvMatched(t, p, size)
		}
	})
}

// TestTMOverFaultyPipe: every kind of tagged message, and a phase sync,
// over a pipe that loses, duplicates and reorders packets: each message
// is delivered once, where its tag says.
func TestTMOverFaultyPipe(t *testing.T) {
	p := tmPipePair(t, lossy, tmSizes{srqWR: 4, tags: 4, mem: 4 << 20, mtu: verbs.MTU1024})
	for i := range 20 {
		// Unexpected (no tag 1000+i), then NO_TAG, then a sync.
		p.postSRQ(t, uint64(500+2*i), 0x20000, 4096)
		p.postSRQ(t, uint64(501+2*i), 0x21000, 4096)
		n := p.eager(0, wire.TMEager, uint64(1000+i), 0, []byte("unexpected"))
		p.send(t, 0, n)
		got := p.next(t, p.s)
		require.Equal(t, uint64(500+2*i), got.WRID)
		require.Equal(t, verbs.WCTMRecv, got.Opcode)
		require.Zero(t, got.WCFlags)
		n = p.eager(0, wire.TMNoTag, 0, 0, []byte("no tag"))
		p.send(t, 0, n)
		got = p.next(t, p.s)
		require.Equal(t, uint64(501+2*i), got.WRID)
		require.Equal(t, verbs.WCTMNoTag, got.Opcode)
		wc := p.ops(t, &verbs.OpsWR{WRID: 27, Opcode: verbs.WRTagSync, Flags: verbs.OpsTMSync, TM: verbs.TMOp{UnexpectedCnt: uint32(i + 1)}})
		require.Zero(t, wc.WCFlags, "in sync after %d unexpected messages", i+1)

		rndvMatched(t, p, uint32(1000+i*40000))
		data := make([]byte, 1000+i*100)
		fill(data, byte(i))
		p.add(t, uint64(100+i), uint64(i), ^uint64(0), 8192, 1<<16, 0, 0)
		n = p.eager(0, wire.TMEager, uint64(i), uint32(i), data)
		p.send(t, 0, n)
		got = p.next(t, p.s)
		require.Equal(t, uint64(100+i), got.WRID)
		require.Equal(t, verbs.WCFlagTMMatch|verbs.WCFlagTMDataValid, got.WCFlags)
		require.True(t, bytes.Equal(data, p.s.buf[8192:8192+len(data)]))
	}
}

func TestTMRendezvousUnexpected(t *testing.T) {
	eachLink(t, tmSizes{srqWR: 2, tags: 2, mem: 1 << 20, mtu: verbs.MTU1024}, func(t *testing.T, p *tmPair) {
		p.postSRQ(t, 3, 0, 4096)
		n := p.rndv(0, 0x99, 7, 8192, 5000)
		p.send(t, 0, n)
		got := p.next(t, p.s)
		require.Equal(t, verbs.WCTMRecv, got.Opcode)
		require.Equal(t, uint64(3), got.WRID)
		require.Zero(t, got.WCFlags)
		require.Equal(t, n, got.ByteLen, "TMH and RVH go to software whole")
		require.True(t, bytes.Equal(p.c.buf[:n], p.s.buf[:n]))
		// Counted as unexpected: a tag added without a sync is disabled.
		_, wc := p.add(t, 8, 0x99, ^uint64(0), 8192, 64, 0, 0)
		require.NotZero(t, wc.WCFlags&verbs.WCFlagTMSyncReq, "sw 0, hw 1")
	})
}

func TestTMDeleteRacingConsumption(t *testing.T) {
	eachLink(t, tmSizes{srqWR: 2, tags: 2, mem: 1 << 20, mtu: verbs.MTU1024}, func(t *testing.T, p *tmPair) {
		h, _ := p.add(t, 5, 0x10, ^uint64(0), 8192, 4096, 0, 0)
		n := p.eager(0, wire.TMEager, 0x10, 0, []byte("consumed first"))
		require.NoError(t, p.s.cq.ReqNotify(false))
		p.send(t, 0, n)
		// The message consumed the tag; the application has not polled
		// that yet and deletes the tag.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := p.s.ch.GetEvent(ctx) // the consumption is queued, not polled
		require.NoError(t, err)
		p.s.cq.AckEvents(1)
		_, err = p.srq.PostOps(&verbs.OpsWR{WRID: 66, Opcode: verbs.WRTagDel, TM: verbs.TMOp{Handle: h}})
		require.NoError(t, err, "the handle is still in use: the TAG_DEL is accepted")
		wcs := []verbs.WC{p.next(t, p.s), p.next(t, p.s)}
		require.Equal(t, verbs.WCTMRecv, wcs[0].Opcode)
		require.Equal(t, verbs.WCSuccess, wcs[0].Status)
		require.Equal(t, verbs.WCTMDel, wcs[1].Opcode)
		require.Equal(t, verbs.WCTMErr, wcs[1].Status, "unsignaled, but a failed TAG_DEL completes")
		require.Equal(t, uint64(66), wcs[1].WRID)
	})
}

func TestTMListFullAndBadOps(t *testing.T) {
	p := tmPipePair(t, pipe.Faults{}, tmSizes{srqWR: 2, tags: 2, mem: 1 << 20, mtu: verbs.MTU1024})
	sge := []verbs.SGE{p.s.mr.SGE(0, 64)}
	a := &verbs.OpsWR{WRID: 1, Opcode: verbs.WRTagAdd, TM: verbs.TMOp{Add: verbs.TagAdd{Tag: 1, Mask: ^uint64(0), SGList: sge}}}
	b := &verbs.OpsWR{WRID: 2, Opcode: verbs.WRTagAdd, TM: verbs.TMOp{Add: verbs.TagAdd{Tag: 2, Mask: ^uint64(0), SGList: sge}}}
	c := &verbs.OpsWR{WRID: 3, Opcode: verbs.WRTagAdd, TM: verbs.TMOp{Add: verbs.TagAdd{Tag: 3, Mask: ^uint64(0), SGList: sge}}}
	a.Next, b.Next = b, c
	bad, err := p.srq.PostOps(a)
	require.True(t, errors.Is(err, syscall.ENOMEM), "%v", err)
	require.Same(t, c, bad, "the third TAG_ADD finds the list full")
	require.NotEqual(t, a.TM.Handle, b.TM.Handle)

	for name, wr := range map[string]*verbs.OpsWR{
		"opcode":         {Opcode: 9},
		"flags":          {Opcode: verbs.WRTagSync, Flags: 1 << 5},
		"handle":         {Opcode: verbs.WRTagDel, TM: verbs.TMOp{Handle: 1000}},
		"too many sges":  {Opcode: verbs.WRTagAdd, TM: verbs.TMOp{Add: verbs.TagAdd{SGList: make([]verbs.SGE, 5)}}},
		"no local write": {Opcode: verbs.WRTagAdd, TM: verbs.TMOp{Add: verbs.TagAdd{SGList: []verbs.SGE{{Addr: 1, Length: 8, LKey: 0xdead}}}}},
	} {
		bad, err := p.srq.PostOps(wr)
		require.True(t, errors.Is(err, syscall.EINVAL), "%s: %v", name, err)
		require.Same(t, wr, bad, name)
	}
	// A list longer than max_ops (16).
	ops := make([]verbs.OpsWR, 17)
	for i := range ops {
		ops[i].Opcode = verbs.WRTagSync
		if i > 0 {
			ops[i-1].Next = &ops[i]
		}
	}
	bad, err = p.srq.PostOps(&ops[0])
	require.True(t, errors.Is(err, syscall.ENOMEM), "%v", err)
	require.Same(t, &ops[16], bad)
	require.Zero(t, p.s.cq.Poll(make([]verbs.WC, 4)), "nothing was signaled")

	// Not a tag-matching SRQ.
	plain, err := p.s.pd.CreateSRQ(&hca.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 1, MaxSGE: 1}})
	require.NoError(t, err)
	_, err = plain.PostOps(&verbs.OpsWR{Opcode: verbs.WRTagSync})
	require.True(t, errors.Is(err, syscall.EINVAL), "%v", err)
}

// TestTMOrderingAndWildcards: of several matching entries the earliest
// added wins; mask 0 with tag 0 matches everything; a tag with bits
// outside its mask never matches (docs/tag-matching.md M1, M2).
func TestTMOrderingAndWildcards(t *testing.T) {
	eachLink(t, tmSizes{srqWR: 4, tags: 8, mem: 1 << 20, mtu: verbs.MTU1024}, func(t *testing.T, p *tmPair) {
		p.add(t, 1, 0x01ff, 0xff00, 0x10000, 256, 0, 0) // bits outside its mask: never matches
		p.add(t, 2, 0x0100, 0xff00, 0x20000, 256, 0, 0)
		p.add(t, 3, 0x0123, ^uint64(0), 0x30000, 256, 0, 0)
		p.add(t, 4, 0, 0, 0x40000, 256, 0, 0)
		for _, want := range []uint64{2, 3, 4} {
			n := p.eager(0, wire.TMEager, 0x0123, 0, []byte{byte(want)})
			p.send(t, 0, n)
			got := p.next(t, p.s)
			require.Equal(t, want, got.WRID, "the earliest added matching entry")
		}
		p.postSRQ(t, 90, 0, 4096)
		n := p.eager(0, wire.TMEager, 0x01ff, 0, []byte{1})
		p.send(t, 0, n)
		got := p.next(t, p.s)
		require.Equal(t, uint64(90), got.WRID, "0x01ff & 0xff00 is 0x0100, never the entry's 0x01ff: unexpected")
	})
}

// TestTMSRQLimit: the limit event of a tag-matching SRQ fires when an
// unexpected message takes its buffers below srq_limit.
func TestTMSRQLimit(t *testing.T) {
	eachLink(t, tmSizes{srqWR: 4, tags: 2, mem: 1 << 20, mtu: verbs.MTU1024}, func(t *testing.T, p *tmPair) {
		for i := range 3 {
			p.postSRQ(t, uint64(i), uint32(i)*4096, 4096)
		}
		require.NoError(t, p.srq.Modify(&verbs.SRQAttr{SRQLimit: 3}, verbs.SRQLimit))
		n := p.eager(0, wire.TMEager, 5, 0, []byte("x"))
		p.send(t, 0, n)
		p.next(t, p.s)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ev, err := p.s.dev.GetAsyncEvent(ctx)
		require.NoError(t, err)
		require.Equal(t, verbs.EventSRQLimitReached, ev.Type)
		require.Same(t, p.srq, ev.SRQ)
		p.s.dev.AckAsyncEvent(ev)
	})
}

// TestTMErrors: the completion status of each failure
// (docs/tag-matching.md; ibv_post_recv(3) for a message longer than its
// buffer).
func TestTMErrors(t *testing.T) {
	z := tmSizes{srqWR: 2, tags: 4, mem: 4 << 20, mtu: verbs.MTU1024}
	t.Run("eager longer than the tag", func(t *testing.T) {
		p := tmPipePair(t, pipe.Faults{}, z)
		p.add(t, 11, 1, ^uint64(0), 8192, 100, 0, 0)
		n := p.eager(0, wire.TMEager, 1, 0, make([]byte, 101))
		_, err := p.c.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{p.c.mr.SGE(0, int(n))}})
		require.NoError(t, err)
		got := p.next(t, p.s)
		require.Equal(t, verbs.WCLocLenErr, got.Status, "%s", got.Status)
		require.Equal(t, verbs.WCTMRecv, got.Opcode)
		require.Equal(t, uint64(11), got.WRID)
		sent := p.next(t, p.c)
		require.Equal(t, verbs.WCRemInvReqErr, sent.Status, "the sender is told, as for any receive too short")
	})
	t.Run("rendezvous longer than the tag", func(t *testing.T) {
		p := tmPipePair(t, pipe.Faults{}, z)
		_, err := p.c.qp.PostRecv(&verbs.RecvWR{WRID: 0xf1, SGList: []verbs.SGE{p.c.mr.SGE(4096, 64)}})
		require.NoError(t, err)
		p.add(t, 12, 2, ^uint64(0), 8192, 1000, 0, 0)
		n := p.rndv(0, 2, 0, 1<<20, 1001)
		p.send(t, 0, n)
		first := p.next(t, p.s)
		require.Equal(t, verbs.WCFlagTMMatch, first.WCFlags)
		second := p.next(t, p.s)
		require.Equal(t, verbs.WCLocLenErr, second.Status, "%s", second.Status)
		require.Equal(t, uint64(12), second.WRID)
		require.Zero(t, second.WCFlags&verbs.WCFlagTMDataValid)
		fin := p.next(t, p.c)
		require.Equal(t, verbs.WCRecv, fin.Opcode, "the FIN still frees the sender's buffer")
	})
	t.Run("rendezvous READ refused", func(t *testing.T) {
		p := tmPipePair(t, pipe.Faults{}, z)
		p.add(t, 13, 3, ^uint64(0), 8192, 4096, 0, 0)
		n := p.rndv(0, 3, 0, 1<<20, 4096)
		wire.RVH(p.c.buf[wire.TMHSize:]).Encode(&wire.RVHFields{VirtualAddress: p.c.mr.SGE(1<<20, 4096).Addr, RKey: p.c.mr.RKey() ^ 0xff00, Length: 4096})
		// The sender answers the READ with a remote access error NAK
		// and moves to the error state (IBTA class C), so its SEND may
		// be flushed before its ACK arrives.
		_, err := p.c.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{p.c.mr.SGE(0, int(n))}})
		require.NoError(t, err)
		require.Equal(t, verbs.WCFlagTMMatch, p.next(t, p.s).WCFlags)
		second := p.next(t, p.s)
		require.Equal(t, verbs.WCRemAccessErr, second.Status, "%s", second.Status)
		require.Equal(t, verbs.WCTMRecv, second.Opcode)
		require.Equal(t, uint64(13), second.WRID)
	})
}

// TestTMObjects: a TM-SRQ holds its CQ; creation checks its limits.
func TestTMObjects(t *testing.T) {
	p := tmPipePair(t, pipe.Faults{}, tmSizes{srqWR: 2, tags: 4, mem: 1 << 20, mtu: verbs.MTU1024})
	ctx := context.Background()
	require.True(t, errors.Is(p.s.cq.Destroy(ctx), syscall.EBUSY), "the TM-SRQ uses the CQ")
	tc := p.s.dev.QueryDevice().TM
	require.Equal(t, verbs.TMCapRC, tc.Flags&verbs.TMCapRC)
	for name, init := range map[string]*hca.SRQInitAttr{
		"no CQ":             {Attr: verbs.SRQAttr{MaxWR: 1, MaxSGE: 1}, TM: &hca.TMCap{MaxNumTags: 1, MaxOps: 1}},
		"no tags":           {Attr: verbs.SRQAttr{MaxWR: 1, MaxSGE: 1}, TM: &hca.TMCap{MaxNumTags: 0, MaxOps: 1}, CQ: p.s.cq},
		"too many tags":     {Attr: verbs.SRQAttr{MaxWR: 1, MaxSGE: 1}, TM: &hca.TMCap{MaxNumTags: tc.MaxNumTags + 1, MaxOps: 1}, CQ: p.s.cq},
		"too many ops":      {Attr: verbs.SRQAttr{MaxWR: 1, MaxSGE: 1}, TM: &hca.TMCap{MaxNumTags: 1, MaxOps: tc.MaxOps + 1}, CQ: p.s.cq},
		"no ordinary queue": {Attr: verbs.SRQAttr{MaxWR: 0, MaxSGE: 1}, TM: &hca.TMCap{MaxNumTags: 1, MaxOps: 1}, CQ: p.s.cq},
	} {
		_, err := p.s.pd.CreateSRQ(init)
		require.True(t, errors.Is(err, syscall.EINVAL), "%s: %v", name, err)
	}
	_, err := p.s.pd.CreateQP(&hca.QPInitAttr{SendCQ: p.s.cq, RecvCQ: p.s.cq, SRQ: p.srq, QPType: verbs.QPTypeUD,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}})
	require.True(t, errors.Is(err, syscall.EINVAL), "a UD QP on a TM-SRQ: %v", err)

	// Destroying the SRQ (after its QP) gives the CQ back.
	require.NoError(t, p.s.qp.Destroy(ctx))
	require.NoError(t, p.srq.Destroy(ctx))
	require.NoError(t, p.s.cq.Destroy(ctx))
}

// BenchmarkTMThroughput: tagged messages of 4 KiB, 64 KiB and 1 MiB
// between two devices over UDP loopback (GSO/GRO on, MTU 4096), eager
// (the data in the SEND, after its TMH) against rendezvous (a 32-byte
// request; the receiver READs the data and sends a FIN), four messages in
// flight, each to a tag added for it. Reports payload Gbit/s.
func BenchmarkTMThroughput(b *testing.B) {
	for _, proto := range []string{"eager", "rndv"} {
		for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%dKiB", proto, size>>10), func(b *testing.B) {
				tmThroughput(b, proto == "rndv", size)
			})
		}
	}
}

func tmThroughput(b *testing.B, rndv bool, size int) {
	const depth = 4
	mem := 2*depth*(size+4096) + 1<<20
	x, y := udpPairConfig(b, true, mem, hca.Config{})
	p := &tmPair{c: x, s: y}
	p.connectTM(b, tmSizes{srqWR: 4, tags: 2 * depth, mem: mem, mtu: verbs.MTU4096})
	slot := size + 4096
	dataBase := depth * slot // the client's rendezvous data, after its requests
	for i := range depth {
		if _, err := p.c.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{p.c.mr.SGE(dataBase+depth*slot+i*64, 64)}}); err != nil {
			b.Fatal(err)
		}
	}
	wcs := make([]verbs.WC, 32)
	add := &verbs.OpsWR{Opcode: verbs.WRTagAdd}
	send := &verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	posted, done := 0, 0
	for done < b.N {
		for posted < b.N && posted-done < depth {
			k := posted % depth
			add.TM.Add = verbs.TagAdd{RecvWRID: uint64(posted), Tag: uint64(posted), Mask: ^uint64(0), SGList: []verbs.SGE{p.s.mr.SGE(k*slot, size)}}
			if _, err := p.srq.PostOps(add); err != nil {
				b.Fatal(err)
			}
			var n uint32
			if rndv {
				n = p.rndv(uint32(k*slot), uint64(posted), 0, uint32(dataBase+k*slot), uint32(size))
			} else {
				wire.TMH(p.c.buf[k*slot:]).Encode(&wire.TMHFields{Opcode: wire.TMEager, Tag: uint64(posted)})
				n = uint32(wire.TMHSize + size)
			}
			send.SGList = []verbs.SGE{p.c.mr.SGE(k*slot, int(n))}
			if _, err := p.c.qp.PostSend(send); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		ns, nc := p.s.cq.Poll(wcs[:16]), p.c.cq.Poll(wcs[16:])
		if ns+nc == 0 {
			runtime.Gosched() // the devices' workers share the two cores
		}
		for _, wc := range wcs[:ns] {
			if wc.Status != verbs.WCSuccess {
				b.Fatalf("server: %s", wc.Status)
			}
			if wc.Opcode == verbs.WCTMRecv && wc.WCFlags&verbs.WCFlagTMDataValid != 0 {
				done++
			}
		}
		for _, wc := range wcs[16 : 16+nc] {
			if wc.Status != verbs.WCSuccess {
				b.Fatalf("client: %s", wc.Status)
			}
			if wc.Opcode == verbs.WCRecv { // a FIN
				if _, err := p.c.qp.PostRecv(&verbs.RecvWR{WRID: wc.WRID, SGList: []verbs.SGE{p.c.mr.SGE(dataBase+depth*slot+int(wc.WRID)*64, 64)}}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.ReportMetric(float64(b.N)*float64(size)*8/time.Since(start).Seconds()/1e9, "Gbit/s")
	sc, ss := p.c.dev.TransportStats(), p.s.dev.TransportStats()
	b.Logf("N=%d client: tx %d rx %d rnr %d timeouts %d retransmits %d drops %v; server: tx %d rx %d rnr sent %d drops %v",
		b.N, sc.TxPackets, sc.RxPackets, sc.RNRNAKsReceived, sc.RetryTimeouts, sc.Retransmits, sc.DropNames(),
		ss.TxPackets, ss.RxPackets, ss.RNRNAKsSent, ss.DropNames())
}

// TestTMSendHelpers: EagerSend, NoTagSend and RendezvousSend build the
// messages a tag-matching SRQ takes apart, with the data in separate
// scatter elements; FinTag reads the FIN; bad arguments are EINVAL.
func TestTMSendHelpers(t *testing.T) {
	eachLink(t, tmSizes{srqWR: 2, tags: 4, mem: 1 << 20, mtu: verbs.MTU1024}, func(t *testing.T, p *tmPair) {
		data := []byte("data in its own scatter element")
		copy(p.c.buf[8192:], data)
		p.add(t, 1, 0x31, ^uint64(0), 0x10000, 4096, 0, 0)
		wr, err := hca.EagerSend(1, hca.TMHeader{MR: p.c.mr, Off: 0}, 0x31, 0x99, p.c.mr.SGE(8192, len(data)))
		require.NoError(t, err)
		_, err = p.c.qp.PostSend(wr)
		require.NoError(t, err)
		got := p.next(t, p.s)
		require.Equal(t, verbs.WCFlagTMMatch|verbs.WCFlagTMDataValid, got.WCFlags)
		require.Equal(t, verbs.TMInfo{Tag: 0x31, Priv: 0x99}, got.TMInfo)
		require.True(t, bytes.Equal(data, p.s.buf[0x10000:0x10000+len(data)]))
		require.Equal(t, verbs.WCSend, p.nextSend(t).Opcode)

		p.postSRQ(t, 7, 0x20000, 4096)
		wr, err = hca.NoTagSend(2, hca.TMHeader{MR: p.c.mr, Off: 64}, p.c.mr.SGE(8192, len(data)))
		require.NoError(t, err)
		_, err = p.c.qp.PostSend(wr)
		require.NoError(t, err)
		got = p.next(t, p.s)
		require.Equal(t, verbs.WCTMNoTag, got.Opcode)
		require.EqualValues(t, wire.TMHSize+len(data), got.ByteLen)
		p.nextSend(t)

		_, err = p.c.qp.PostRecv(&verbs.RecvWR{WRID: 0xf1, SGList: []verbs.SGE{p.c.mr.SGE(4096, 64)}})
		require.NoError(t, err)
		p.add(t, 3, 0x32, ^uint64(0), 0x30000, 4096, 0, 0)
		wr, err = hca.RendezvousSend(3, hca.TMHeader{MR: p.c.mr, Off: 128}, 0x32, 0x77, p.c.mr, 8192, len(data))
		require.NoError(t, err)
		_, err = p.c.qp.PostSend(wr)
		require.NoError(t, err)
		require.Equal(t, verbs.WCFlagTMMatch, p.next(t, p.s).WCFlags)
		require.Equal(t, verbs.WCFlagTMDataValid, p.next(t, p.s).WCFlags)
		require.True(t, bytes.Equal(data, p.s.buf[0x30000:0x30000+len(data)]))
		p.nextSend(t)
		fin := p.next(t, p.c)
		require.Equal(t, verbs.WCRecv, fin.Opcode)
		tag, appCtx, ok := hca.FinTag(p.c.buf[4096 : 4096+int(fin.ByteLen)])
		require.True(t, ok)
		require.Equal(t, uint64(0x32), tag)
		require.Equal(t, uint32(0x77), appCtx)
		_, _, ok = hca.FinTag(p.c.buf[8192:])
		require.False(t, ok, "not a FIN")

		for name, f := range map[string]func() error{
			"header past the end": func() error {
				_, err := hca.EagerSend(1, hca.TMHeader{MR: p.c.mr, Off: p.c.mr.Len() - 8}, 1, 1)
				return err
			},
			"no header region": func() error { _, err := hca.NoTagSend(1, hca.TMHeader{}); return err },
			"data outside": func() error {
				_, err := hca.RendezvousSend(1, hca.TMHeader{MR: p.c.mr}, 1, 1, p.c.mr, p.c.mr.Len(), 1)
				return err
			},
		} {
			require.True(t, errors.Is(f(), syscall.EINVAL), name)
		}
		ro, err := p.c.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
		require.NoError(t, err)
		_, err = hca.RendezvousSend(1, hca.TMHeader{MR: p.c.mr}, 1, 1, ro, 0, 64)
		require.True(t, errors.Is(err, syscall.EINVAL), "no REMOTE_READ: %v", err)
	})
}
