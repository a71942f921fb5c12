package hca_test

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/link"
	"github.com/softhca/softhca/link/pipe"
	"github.com/softhca/softhca/verbs"
	"github.com/stretchr/testify/require"
)

var soakMessages = flag.Int("soak.messages", 0, "RC messages per soak run; 0: 600, or 150 under the race detector (the full run: -soak.messages=100000)")

var soakTimeout = flag.Int("soak.timeout", 12, "the RC QPs' timeout attribute (transport timer 4.096 us * 2^n): 12 = 16.8 ms tolerates a starved process on a loaded machine; 10 = 4.2 ms recovers lost tails faster on a quiet one")

func soakCount() int {
	switch {
	case *soakMessages > 0:
		return *soakMessages
	case raceEnabled:
		return 150
	}
	return 600
}

// soakSlot is the size of one message's memory: the largest message.
const soakSlot = 1 << 20

// soakDepth is how many messages are in flight.
const soakDepth = 8

// TestSoakRC carries RC messages of random opcodes and sizes (0 B to
// 1 MiB) between two devices over a pipe that loses, duplicates, reorders
// and corrupts packets, at MTU 1024 and 4096, and checks that every
// message arrives exactly once, in order and byte-exact, that every atomic
// returns the right value and that every completion is right. Then it
// checks that closing the devices leaves no goroutine behind.
func TestSoakRC(t *testing.T) {
	faults := pipe.Faults{Loss: 0.10, Duplicate: 0.05, ReorderWindow: 8, Corrupt: 0.01}
	for _, mtu := range []verbs.MTU{verbs.MTU1024, verbs.MTU4096} {
		t.Run("mtu"+mtu.String(), func(t *testing.T) {
			soak(t, mtu, faults, soakCount(), 1)
		})
	}
}

// TestSoakRCOverUDP runs the same workload over real UDP loopback sockets
// (GSO and GRO on), without injected faults.
func TestSoakRCOverUDP(t *testing.T) { soakUDP(t, hca.Config{}, 2) }

// TestSoakRCOverUDPBusyPoll is TestSoakRCOverUDP with devices opened
// with Config.BusyPoll: the test's polling loops drive both transports,
// alongside their receive goroutines.
func TestSoakRCOverUDPBusyPoll(t *testing.T) { soakUDP(t, hca.Config{BusyPoll: true}, 3) }

func soakUDP(t *testing.T, cfg hca.Config, seed uint64) {
	for _, mtu := range []verbs.MTU{verbs.MTU1024, verbs.MTU4096} {
		t.Run("mtu"+mtu.String(), func(t *testing.T) {
			before := runtime.NumGoroutine()
			a, b := udpPairConfig(t, true, 3*soakDepth*soakSlot+4096, cfg)
			soakRun(t, a, b, nil, mtu, soakCount(), seed)
			waitGoroutines(t, before)
		})
	}
}

// soakPair opens two devices over a pipe. Their retry_cnt 7 retries
// forever (Config.RxeRetryCompat, as rxe): with 10% loss, eight go-backs
// in a row that all lose their first packet exhaust seven retries, as
// IBTA specifies, about once in 10^8 go-backs; seed 1 reaches such a run
// of draws at message 203 when the machine is loaded (the a->b pipe's
// loss draws 0.0898, 0.0890, 0.0915, 0.0623, ... fall on the go-back's
// first packet each time). The soak checks what arrives, not the retry
// budget (transport's and the testbench's retry tests do); a QP that
// stops making progress still fails it, after 60 s.
func soakPair(t *testing.T, faults pipe.Faults, seed uint64) (*side, *side, *pipe.Endpoint) {
	la, lb := pipe.New(pipe.Config{Faults: faults, Seed: seed})
	const mem = 3 * soakDepth * soakSlot
	a := openSideConfig(t, hca.Config{Link: la, RxeRetryCompat: true}, mem)
	b := openSideConfig(t, hca.Config{Link: lb, RxeRetryCompat: true}, mem+4096)
	return a, b, la
}

func soak(t *testing.T, mtu verbs.MTU, faults pipe.Faults, n int, seed uint64) {
	before := runtime.NumGoroutine()
	a, b, pa := soakPair(t, faults, seed)
	soakRun(t, a, b, pa, mtu, n, seed)
	waitGoroutines(t, before)
}

// soakRun carries n messages from a to b and checks them; pa, if not nil,
// is the pipe whose injected faults are reported.
func soakRun(t *testing.T, a, b *side, pa *pipe.Endpoint, mtu verbs.MTU, n int, seed uint64) {
	connect(t, a, b, verbs.QPTypeRC, mtu)
	// The transport timer (-soak.timeout): lost tails and lost final ACKs
	// are recovered only by it, as RC specifies; seven retries must also
	// outlast a process starved on a loaded machine.
	for _, s := range []*side{a, b} {
		require.NoError(t, s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateSQD}, verbs.AttrState))
		require.NoError(t, s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateSQD, Timeout: uint8(*soakTimeout), RetryCnt: 7, RNRRetry: 7},
			verbs.AttrState|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry))
		require.NoError(t, s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS}, verbs.AttrState))
	}

	// Memory: a's slots are [src | read destination | atomic results];
	// b's are [recv buffer | write target | read source], one slot per
	// message in flight, plus b's atomic word at the end.
	region := soakDepth * soakSlot
	aSrc, aRead := 0, region
	bRecv, bWrite, bReadSrc := 0, region, 2*region
	bAtomic := 3 * region
	aAtomic := 2 * region
	binary.NativeEndian.PutUint64(b.buf[bAtomic:], 1000)
	counter := uint64(1000)

	rng := rand.New(rand.NewPCG(seed, 99))
	ops := []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm,
		verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp}
	type msg struct {
		op        verbs.WROpcode
		size      int
		imm       uint32
		add       uint64
		cmp, swap uint64
		wantOrig  uint64
	}
	msgs := make([]msg, n)
	fill := func(dst []byte, i int) {
		x := uint32(i)*2654435761 + 1
		for j := range dst {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			dst[j] = byte(x)
		}
	}
	size := func() int {
		// Log-uniform over 0 B .. 1 MiB: every scale is exercised.
		if rng.IntN(16) == 0 {
			return 0
		}
		return min(soakSlot, int(float64(1)*pow2(rng.Float64()*20)))
	}
	post := func(i int) {
		m := &msgs[i]
		m.op = ops[rng.IntN(len(ops))]
		m.size = size()
		slot := i % soakDepth
		wr := &verbs.SendWR{WRID: uint64(i), Opcode: m.op, SendFlags: verbs.SendSignaled}
		switch m.op {
		case verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
			m.size = 8
			wr.SGList = []verbs.SGE{a.mr.SGE(aAtomic+slot*8, 8)}
			wr.Atomic = verbs.AtomicInfo{RemoteAddr: b.mr.Addr() + uint64(bAtomic), RKey: b.mr.RKey()}
			m.wantOrig = counter
			if m.op == verbs.WRAtomicFetchAndAdd {
				m.add = uint64(rng.IntN(1000))
				wr.Atomic.CompareAdd = m.add
				counter += m.add
			} else {
				m.cmp, m.swap = counter, uint64(rng.Int64())
				if rng.IntN(3) == 0 {
					m.cmp++ // a compare that fails
				} else {
					counter = m.swap
				}
				wr.Atomic.CompareAdd, wr.Atomic.Swap = m.cmp, m.swap
			}
		case verbs.WRRDMARead:
			fill(b.buf[bReadSrc+slot*soakSlot:][:m.size], i)
			fence(b) // b's responder reads this under its QP's lock
			wr.SGList = []verbs.SGE{a.mr.SGE(aRead+slot*soakSlot, m.size)}
			wr.RDMA = verbs.RDMAInfo{RemoteAddr: b.mr.Addr() + uint64(bReadSrc+slot*soakSlot), RKey: b.mr.RKey()}
		default:
			fill(a.buf[aSrc+slot*soakSlot:][:m.size], i)
			wr.SGList = []verbs.SGE{a.mr.SGE(aSrc+slot*soakSlot, m.size)}
			wr.RDMA = verbs.RDMAInfo{RemoteAddr: b.mr.Addr() + uint64(bWrite+slot*soakSlot), RKey: b.mr.RKey()}
			m.imm = rng.Uint32()
			wr.ImmData = m.imm
		}
		consumesRecv := m.op == verbs.WRSend || m.op == verbs.WRSendWithImm || m.op == verbs.WRRDMAWriteWithImm
		postRecv := func() {
			_, err := b.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(bRecv+slot*soakSlot, soakSlot)}})
			require.NoError(t, err)
		}
		late := consumesRecv && rng.IntN(10) == 0 // exercise RNR: the receive comes after the send
		if consumesRecv && !late {
			postRecv()
		}
		_, err := a.qp.PostSend(wr)
		require.NoError(t, err)
		if late {
			postRecv()
		}
	}

	var bwcs []verbs.WC
	takeRecv := func(i int) verbs.WC {
		deadline := time.Now().Add(30 * time.Second)
		wcs := make([]verbs.WC, 16)
		for {
			for k, wc := range bwcs {
				if wc.WRID == uint64(i) {
					bwcs = append(bwcs[:k], bwcs[k+1:]...)
					return wc
				}
			}
			k := b.cq.Poll(wcs)
			bwcs = append(bwcs, wcs[:k]...)
			if k == 0 && time.Now().After(deadline) {
				t.Fatalf("message %d: no receive completion; b transport %v", i, b.dev.TransportStats().DropNames())
			}
		}
	}

	verify := func(i int, wc verbs.WC) {
		fence(b) // b's responder wrote under its QP's lock
		m := &msgs[i]
		slot := i % soakDepth
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("message %d (%s, %d B): %s\na: %+v\nb: %+v", i, m.op, m.size, wc.Status, a.dev.TransportStats(), b.dev.TransportStats())
		}
		require.Equal(t, verbs.WCOpcodeFor(m.op), wc.Opcode, "message %d", i)
		require.Equal(t, a.qp.Num(), wc.QPNum)
		switch m.op {
		case verbs.WRSend, verbs.WRSendWithImm:
			rwc := takeRecv(i)
			require.Equal(t, verbs.WCSuccess, rwc.Status)
			require.Equal(t, uint32(m.size), rwc.ByteLen, "message %d", i)
			require.Equal(t, verbs.WCRecv, rwc.Opcode)
			if m.op == verbs.WRSendWithImm {
				require.Equal(t, verbs.WCFlagWithImm, rwc.WCFlags)
				require.Equal(t, m.imm, rwc.ImmData)
			} else {
				require.Zero(t, rwc.WCFlags)
			}
			require.True(t, bytes.Equal(a.buf[aSrc+slot*soakSlot:][:m.size], b.buf[bRecv+slot*soakSlot:][:m.size]), "message %d: SEND data differs", i)
		case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
			require.True(t, bytes.Equal(a.buf[aSrc+slot*soakSlot:][:m.size], b.buf[bWrite+slot*soakSlot:][:m.size]), "message %d: WRITE data differs", i)
			if m.op == verbs.WRRDMAWriteWithImm {
				rwc := takeRecv(i)
				require.Equal(t, verbs.WCRecvRDMAWithImm, rwc.Opcode)
				require.Equal(t, m.imm, rwc.ImmData)
				require.Equal(t, uint32(m.size), rwc.ByteLen)
			}
		case verbs.WRRDMARead:
			require.Equal(t, uint32(m.size), wc.ByteLen)
			require.True(t, bytes.Equal(b.buf[bReadSrc+slot*soakSlot:][:m.size], a.buf[aRead+slot*soakSlot:][:m.size]), "message %d: READ data differs", i)
		default:
			got := binary.NativeEndian.Uint64(a.buf[aAtomic+slot*8:])
			require.Equal(t, m.wantOrig, got, "message %d (%s): original value", i, m.op)
		}
	}

	posted, completed := 0, 0
	wcs := make([]verbs.WC, 16)
	lastProgress := time.Now()
	for completed < n {
		for posted < n && posted-completed < soakDepth {
			post(posted)
			posted++
		}
		k := a.cq.Poll(wcs)
		for _, wc := range wcs[:k] {
			require.Equal(t, uint64(completed), wc.WRID, "completions in order")
			verify(completed, wc)
			completed++
			lastProgress = time.Now()
		}
		if k == 0 && time.Since(lastProgress) > 60*time.Second {
			t.Fatalf("stalled at message %d of %d; a %v; b %v", completed, n,
				a.dev.TransportStats().DropNames(), b.dev.TransportStats().DropNames())
		}
	}
	fence(b)
	require.Equal(t, counter, binary.NativeEndian.Uint64(b.buf[bAtomic:]), "the atomic word holds every operation's effect")
	require.Empty(t, bwcs, "no receive completion beyond the messages")

	sa, sb := a.dev.TransportStats(), b.dev.TransportStats()
	var ps link.Stats
	if pa != nil {
		ps = pa.Stats()
	}
	var ms runtime.MemStats
	runtime.GC() // the live heap, not what the collector has yet to reclaim
	runtime.ReadMemStats(&ms)
	t.Logf("%d messages: pipe a->b injected loss %d dup %d reorder %d corrupt %d; a: tx %d rx %d retransmits %d timeouts %d seq-NAKs %d RNR-NAKs %d; b: tx %d rx %d acks %d seq-NAKs %d RNR-NAKs %d dups %d; drops a %v b %v; heap in use %d MiB",
		n, ps.InjectedLoss, ps.InjectedDuplicate, ps.InjectedReorder, ps.InjectedCorrupt,
		sa.TxPackets, sa.RxPackets, sa.Retransmits, sa.RetryTimeouts, sa.SeqNAKsReceived, sa.RNRNAKsReceived,
		sb.TxPackets, sb.RxPackets, sb.AcksSent, sb.SeqNAKsSent, sb.RNRNAKsSent, sb.DuplicatesAnswered,
		sa.DropNames(), sb.DropNames(), ms.HeapInuse>>20)
	require.Less(t, ms.HeapInuse, uint64(512<<20), "memory stays bounded")

	require.NoError(t, a.dev.Close())
	require.NoError(t, b.dev.Close())
}

// fence orders the test's accesses to s's registered memory with its
// transport's: the transport touches that memory holding the QP's lock,
// which Query takes too. Over a real UDP socket the race detector cannot
// see the ordering the kernel gives, so without this it reports the
// test's reads and writes as races.
func fence(s *side) { _ = s.qp.Query() }

func pow2(x float64) float64 {
	r := 1.0
	for x >= 1 {
		r *= 2
		x--
	}
	return r * (1 + x*0.6931471805599453*(1+x*0.34657359027997264))
}

// waitGoroutines fails if goroutines started by the test are still
// running once everything was closed (timers of the real clock may need a
// moment to return).
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutine leak: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
	}
}
