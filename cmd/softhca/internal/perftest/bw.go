package perftest

import (
	"context"
	"fmt"
	"time"

	"github.com/softhca/softhca/hca"
	"github.com/softhca/softhca/verbs"
)

// runTest runs the measurement and the closing exchanges, in the order the
// perftest program of the same name has them (perftest 4.5-0.17, non
// duplex):
//
//	write/read/atomic _bw  server: sync, reports, close
//	                       client: sizes..., sync, reports, close
//	send_bw                both, per size: post receives (server), sync,
//	                       run, [sync between sizes with -a]; close
//	write_lat              both: sizes... (no closing exchange)
//	read/atomic _lat       server: close; client: sizes..., close
//	send_lat               both, per size: post receives, sync, run; close
//
// "sync" and "close" are key exchanges (ctx_hand_shake,
// ctx_close_connection); "reports" is xchg_bw_reports.
func (s *session) runTest(ctx context.Context) error {
	o := s.o
	switch {
	case !o.Lat && o.Verb != Send:
		s.printBWHeader()
		if s.server {
			if err := s.sync(); err != nil {
				return err
			}
			r, err := s.exchangeReports(Report{})
			if err != nil {
				return err
			}
			s.res.PeerReport = &r
			s.printBWLine(r)
			if err := s.sync(); err != nil {
				return err
			}
			s.printf("%s", resultLine)
			return nil
		}
		var last Report
		for _, size := range o.sizes() {
			r, err := s.bwClient(ctx, size)
			if err != nil {
				return err
			}
			s.res.Reports = append(s.res.Reports, r)
			s.printBWLine(r)
			last = r
		}
		s.printf("%s", resultLine)
		if err := s.sync(); err != nil {
			return err
		}
		if _, err := s.exchangeReports(last); err != nil {
			return err
		}
		return s.sync()

	case !o.Lat: // send_bw
		s.printBWHeader()
		for _, size := range o.sizes() {
			if s.server {
				if err := s.postRecvs(size, o.RxDepth); err != nil {
					return err
				}
			}
			if err := s.sync(); err != nil {
				return err
			}
			var r Report
			var err error
			if s.server {
				r, err = s.bwServer(ctx, size)
			} else {
				r, err = s.bwClient(ctx, size)
			}
			if err != nil {
				return err
			}
			s.res.Reports = append(s.res.Reports, r)
			s.printBWLine(r)
			if o.All { // -a: sizes are separated by a key exchange
				if err := s.sync(); err != nil {
					return err
				}
			}
		}
		s.printf("%s", resultLine)
		return s.sync()

	case o.Verb == Write: // write_lat
		return s.latSizes(func(size int) (LatReport, error) { return s.latWrite(ctx, size) })

	case o.Verb == Send: // send_lat
		err := s.latSizes(func(size int) (LatReport, error) {
			if err := s.postRecvs(size, o.RxDepth); err != nil {
				return LatReport{}, err
			}
			if err := s.sync(); err != nil {
				return LatReport{}, err
			}
			return s.latSend(ctx, size)
		})
		if err != nil {
			return err
		}
		return s.sync()

	default: // read_lat, atomic_lat
		if s.server {
			if err := s.sync(); err != nil {
				return err
			}
			s.printf("%s", resultLine)
			return nil
		}
		if err := s.latSizes(func(size int) (LatReport, error) { return s.latRequest(ctx, size) }); err != nil {
			return err
		}
		return s.sync()
	}
}

// latSizes runs a latency test once per size (-a: every size), printing
// perftest's table: the header, a line per size and the closing rule.
func (s *session) latSizes(run func(size int) (LatReport, error)) error {
	s.printLatHeader()
	for _, size := range s.o.sizes() {
		r, err := run(size)
		if err != nil {
			return err
		}
		s.res.LatReports = append(s.res.LatReports, r)
		s.printLatLine(r)
	}
	s.printf("%s", resultLine)
	return nil
}

// exchangeReports exchanges bandwidth reports field by field
// (xchg_bw_reports). The server of a one-way test has measured nothing;
// like perftest, it sends a report all the same (zeros here).
func (s *session) exchangeReports(mine Report) (Report, error) {
	var theirs [ReportFields][]byte
	for i, f := range mine.EncodeFields() {
		b, err := s.c.exchange("exchanging results", f, ReportFieldSize)
		if err != nil {
			return Report{}, err
		}
		theirs[i] = b
	}
	r, err := ParseReport(theirs)
	if err != nil {
		return Report{}, fmt.Errorf("the peer's results: %w", err)
	}
	return r, nil
}

// slotting returns how the messages of a size walk through the areas:
// each message moves on by the size rounded up to a cache line, and wraps
// after a cycle buffer, when two messages fit in it (increase_loc_addr,
// increase_rem_addr); bigger messages all use offset 0.
func (s *session) slotting(size int) (inc, slots int) {
	if size > s.res.CycleBuffer/2 {
		return 0, 1
	}
	inc = (size + s.res.CacheLine - 1) / s.res.CacheLine * s.res.CacheLine
	return inc, s.res.CycleBuffer / inc
}

// wait polls cq until it returns completions. perftest busy-polls; a Go
// program that does starves its own network goroutines (the scheduler
// runs a yielding poller ahead of the network poller), so softhca sleeps
// on the CQ's completion channel, armed before a last poll as
// ibv_req_notify_cq(3) says, when a poll finds nothing.
//
// With Config.BusyPoll it polls in a loop, as perftest does: the device
// then runs its transport inside the empty polls.
func (s *session) wait(ctx context.Context, cq *hca.CQ, wcs []verbs.WC) (int, error) {
	for spins := 0; ; spins++ {
		n := cq.Poll(wcs)
		if n == 0 && s.cfg.BusyPoll {
			if spins&1023 == 1023 {
				if err := ctx.Err(); err != nil {
					return 0, err
				}
			}
			continue
		}
		if n == 0 {
			if err := cq.ReqNotify(false); err != nil {
				return 0, fmt.Errorf("req_notify_cq: %w", err)
			}
			n = cq.Poll(wcs)
		}
		if n > 0 {
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess {
					return 0, fmt.Errorf("completion with error: wr_id %d %s (%s); transport drops: %v",
						wc.WRID, wc.Status, wc.Opcode, s.dev.TransportStats().DropNames())
				}
			}
			return n, nil
		}
		if _, err := cq.Channel().GetEvent(ctx); err != nil {
			return 0, fmt.Errorf("waiting for a completion: %w", err)
		}
		cq.AckEvents(1)
	}
}

// bwClient posts Iters messages of size with at most TxDepth
// outstanding, signalling every CQMod-th and the last (run_iter_bw), and
// reports the bandwidth.
func (s *session) bwClient(ctx context.Context, size int) (Report, error) {
	o := s.o
	n := o.Iters
	tposted := make([]int64, n)
	tcompleted := make([]int64, n)
	var signaled []int // indexes of the signalled requests
	inc, slots := s.slotting(size)
	wr := verbs.SendWR{SGList: []verbs.SGE{{}}}
	switch o.Verb {
	case Send:
		wr.Opcode = verbs.WRSend
	case Write:
		wr.Opcode = verbs.WRRDMAWrite
	case Read:
		wr.Opcode = verbs.WRRDMARead
	case Atomic:
		wr.Opcode = verbs.WRAtomicFetchAndAdd
		wr.Atomic.CompareAdd = 1 // ATOMIC_ADD_VALUE
		if o.AtomicType == CmpAndSwap {
			wr.Opcode = verbs.WRAtomicCmpAndSwp
			wr.Atomic.CompareAdd, wr.Atomic.Swap = 0, 0 // ATOMIC_SWAP_VALUE
		}
	}
	rem := s.res.Remote
	wcs := make([]verbs.WC, 16)
	pr := s.progress(size)
	base := time.Now()
	pr.report(base, 0)
	scnt, ccnt := 0, 0
	for ccnt < n {
		for scnt < n && scnt-ccnt < o.TxDepth {
			off := (scnt % slots) * inc
			wr.WRID = uint64(scnt)
			wr.SGList[0] = s.mr.SGE(off, size)
			wr.RDMA = verbs.RDMAInfo{RemoteAddr: rem.VAddr + uint64(off), RKey: rem.RKey}
			wr.Atomic.RemoteAddr, wr.Atomic.RKey = rem.VAddr+uint64(off), rem.RKey
			wr.SendFlags = 0
			if scnt%o.CQMod == o.CQMod-1 || scnt == n-1 {
				wr.SendFlags = verbs.SendSignaled
				signaled = append(signaled, scnt)
			}
			tposted[scnt] = int64(time.Since(base))
			if _, err := s.qp.PostSend(&wr); err != nil {
				return Report{}, fmt.Errorf("post_send %d of %d: %w", scnt, n, err)
			}
			scnt++
		}
		k, err := s.wait(ctx, s.sendCQ, wcs)
		if err != nil {
			return Report{}, err
		}
		t := time.Now()
		now := int64(t.Sub(base))
		for _, wc := range wcs[:k] {
			// A signalled completion completes the unsignalled requests
			// posted before it.
			for ; ccnt <= int(wc.WRID); ccnt++ {
				tcompleted[ccnt] = now
			}
		}
		pr.report(t, ccnt)
	}
	return s.bwReport(size, tposted, tcompleted, signaled, 0), nil
}

// postRecvs posts count receives of size bytes into the advertised area,
// walking through it as the send side does (ctx_set_recv_wqes).
func (s *session) postRecvs(size, count int) error {
	inc, slots := s.slotting(size)
	for i := range count {
		wr := verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{s.mr.SGE(s.region+(i%slots)*inc, size)}}
		if _, err := s.qp.PostRecv(&wr); err != nil {
			return fmt.Errorf("post_recv: %w", err)
		}
	}
	return nil
}

// bwServer receives Iters messages, posting each receive again while
// more are to come (run_iter_bw_server), and reports the average
// bandwidth over the time from the start to the last message (no peak).
func (s *session) bwServer(ctx context.Context, size int) (Report, error) {
	n := s.o.Iters
	inc, slots := s.slotting(size)
	wcs := make([]verbs.WC, 16)
	pr := s.progress(size)
	start := time.Now()
	pr.report(start, 0)
	for rcnt := 0; rcnt < n; {
		k, err := s.wait(ctx, s.recvCQ, wcs)
		if err != nil {
			return Report{}, err
		}
		for _, wc := range wcs[:k] {
			if int(wc.ByteLen) != size {
				return Report{}, fmt.Errorf("received %d bytes, want %d (is the peer running the same -s?)", wc.ByteLen, size)
			}
			rcnt++
			if rcnt+s.o.RxDepth <= n {
				i := int(wc.WRID)
				wr := verbs.RecvWR{WRID: wc.WRID, SGList: []verbs.SGE{s.mr.SGE(s.region+(i%slots)*inc, size)}}
				if _, err := s.qp.PostRecv(&wr); err != nil {
					return Report{}, fmt.Errorf("post_recv: %w", err)
				}
			}
		}
		if pr != nil {
			pr.report(time.Now(), rcnt)
		}
	}
	return s.bwReport(size, nil, nil, nil, int64(time.Since(start))), nil
}
