package perftest

import (
	"context"
	"fmt"
	"time"

	"github.com/softhca/softhca/verbs"
)

// latWrite is the ping-pong of ib_write_lat (run_iter_lat_write): each
// side RDMA WRITEs size bytes into the other's area, the last byte
// carrying the message's sequence number (mod 256), and waits until the
// last byte of its own area holds the number of the message it expects
// before it writes again. The server writes first.
func (s *session) latWrite(ctx context.Context, size int) (LatReport, error) {
	n := s.o.Iters
	tposted := make([]int64, n)
	post := size - 1            // in the local area: the byte that carries our count
	poll := s.region + size - 1 // in the advertised area: where the peer's arrives
	rem := s.res.Remote
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{s.mr.SGE(0, size)}, RDMA: verbs.RDMAInfo{RemoteAddr: rem.VAddr, RKey: rem.RKey}}
	wcs := make([]verbs.WC, 1)
	pr := s.progress(size)
	base := time.Now()
	pr.report(base, 0)
	scnt, ccnt, rcnt := 0, 0, 0
	for scnt < n || ccnt < n || rcnt < n {
		if rcnt < n && !(scnt < 1 && s.server) {
			rcnt++
			if err := s.waitByte(ctx, poll, byte(rcnt)); err != nil {
				return LatReport{}, fmt.Errorf("waiting for write %d of %d: %w", rcnt, n, err)
			}
		}
		if scnt < n {
			now := time.Now()
			tposted[scnt] = int64(now.Sub(base))
			pr.report(now, scnt)
			scnt++
			s.buf[post] = byte(scnt)
			wr.WRID = uint64(scnt)
			if _, err := s.qp.PostSend(&wr); err != nil {
				return LatReport{}, fmt.Errorf("post_send: %w", err)
			}
		}
		if ccnt < n {
			if _, err := s.wait(ctx, s.sendCQ, wcs); err != nil {
				return LatReport{}, err
			}
			ccnt++
		}
	}
	pr.report(time.Now(), n)
	return s.latReport(size, tposted), nil
}

// waitByte waits until the peer's RDMA WRITE has set s.buf[i] to want.
// No completion tells a responder that a WRITE arrived: like perftest,
// which spins on a volatile char, it polls the byte. softhca's transport
// is the "hardware" here; the byte is read with loadByte, which the race
// detector does not instrument, as it cannot know that the memory belongs
// to the device while the QP is connected. Everything else the tests read
// from the buffers, they read after the QP is destroyed.
//
// Between looks it sleeps for a microsecond rather than spinning: a
// spinning goroutine keeps the scheduler from the network poller, while a
// sleeping one lets the packet's arrival wake the process at once.
func (s *session) waitByte(ctx context.Context, i int, want byte) error {
	for spins := 0; ; spins++ {
		if loadByte(s.buf, i) == want {
			return nil
		}
		if spins&63 == 63 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if s.qp.State() == verbs.QPStateErr {
				return fmt.Errorf("the QP is in the error state; transport drops: %v", s.dev.TransportStats().DropNames())
			}
		}
		time.Sleep(time.Microsecond)
	}
}

// loadByte reads b[i] afresh on every call (not inlined, so the load
// cannot be hoisted out of a polling loop) and outside the race
// detector's view (memory the transport writes with RDMA WRITE).
//
//go:norace
//go:noinline
func loadByte(b []byte, i int) byte { return b[i] }

// latSend is the ping-pong of ib_send_lat (run_iter_lat_send): the
// client sends first; each side then waits for the peer's message before
// it sends the next. Receives were posted before the run; each is posted
// again while more messages are to come.
func (s *session) latSend(ctx context.Context, size int) (LatReport, error) {
	n := s.o.Iters
	tposted := make([]int64, n)
	inc, slots := s.slotting(size)
	wr := verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{s.mr.SGE(0, size)}}
	rwcs := make([]verbs.WC, 1)
	swcs := make([]verbs.WC, 1)
	pr := s.progress(size)
	base := time.Now()
	pr.report(base, 0)
	scnt, rcnt := 0, 0
	for scnt < n || rcnt < n {
		if rcnt < n && !(scnt < 1 && !s.server) {
			if _, err := s.wait(ctx, s.recvCQ, rwcs); err != nil {
				return LatReport{}, err
			}
			if int(rwcs[0].ByteLen) != size {
				return LatReport{}, fmt.Errorf("received %d bytes, want %d (is the peer running the same -s?)", rwcs[0].ByteLen, size)
			}
			rcnt++
			if rcnt+s.o.RxDepth <= n {
				i := int(rwcs[0].WRID)
				rwr := verbs.RecvWR{WRID: rwcs[0].WRID, SGList: []verbs.SGE{s.mr.SGE(s.region+(i%slots)*inc, size)}}
				if _, err := s.qp.PostRecv(&rwr); err != nil {
					return LatReport{}, fmt.Errorf("post_recv: %w", err)
				}
			}
		}
		if scnt < n {
			now := time.Now()
			tposted[scnt] = int64(now.Sub(base))
			pr.report(now, scnt)
			scnt++
			wr.WRID = uint64(scnt)
			wr.SendFlags = 0
			signaled := scnt%s.o.CQMod == 0 || scnt == n
			if signaled {
				wr.SendFlags = verbs.SendSignaled
			}
			if _, err := s.qp.PostSend(&wr); err != nil {
				return LatReport{}, fmt.Errorf("post_send: %w", err)
			}
			if signaled {
				if _, err := s.wait(ctx, s.sendCQ, swcs); err != nil {
					return LatReport{}, err
				}
			}
		}
	}
	pr.report(time.Now(), n)
	return s.latReport(size, tposted), nil
}

// latRequest is the client of ib_read_lat and ib_atomic_lat
// (run_iter_lat): one READ or atomic at a time, each waited for.
func (s *session) latRequest(ctx context.Context, size int) (LatReport, error) {
	n := s.o.Iters
	tposted := make([]int64, n)
	rem := s.res.Remote
	wr := verbs.SendWR{SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{s.mr.SGE(0, size)}}
	if s.o.Verb == Read {
		wr.Opcode = verbs.WRRDMARead
		wr.RDMA = verbs.RDMAInfo{RemoteAddr: rem.VAddr, RKey: rem.RKey}
	} else {
		wr.Opcode = verbs.WRAtomicFetchAndAdd
		wr.Atomic = verbs.AtomicInfo{RemoteAddr: rem.VAddr, RKey: rem.RKey, CompareAdd: 1}
		if s.o.AtomicType == CmpAndSwap {
			wr.Opcode = verbs.WRAtomicCmpAndSwp
			wr.Atomic.CompareAdd = 0
		}
	}
	wcs := make([]verbs.WC, 1)
	pr := s.progress(size)
	base := time.Now()
	for scnt := 0; scnt < n; scnt++ {
		now := time.Now()
		tposted[scnt] = int64(now.Sub(base))
		pr.report(now, scnt)
		wr.WRID = uint64(scnt)
		if _, err := s.qp.PostSend(&wr); err != nil {
			return LatReport{}, fmt.Errorf("post_send: %w", err)
		}
		if _, err := s.wait(ctx, s.sendCQ, wcs); err != nil {
			return LatReport{}, err
		}
	}
	pr.report(time.Now(), n)
	return s.latReport(size, tposted), nil
}
