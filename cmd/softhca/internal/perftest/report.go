package perftest

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// resultLine is perftest's RESULT_LINE.
var resultLine = strings.Repeat("-", 87) + "\n"

// Table headers (RESULT_FMT, RESULT_FMT_G, RESULT_FMT_LAT).
const (
	BWHeader      = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	BWHeaderGbits = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	LatHeader     = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
)

// maxPeakWork bounds the peak search (perftest's is quadratic in the
// iterations; it is sampled beyond this many steps).
const maxPeakWork = 50_000_000

// bwReport computes a bandwidth report as print_report_bw does, from the
// posting and completion times (ns) of each message; signaled lists the
// messages whose completions were asked for. A receiver (tposted nil)
// reports only the average over total ns.
func (s *session) bwReport(size int, tposted, tcompleted []int64, signaled []int, total int64) Report {
	n := s.o.Iters
	format := 1048576.0 // MB/s, as perftest's "MB" means MiB
	if s.o.Gbits {
		format = 125000000 // Gbit/s
	}
	r := Report{Size: uint64(size), Iters: uint64(n)}
	if tposted != nil {
		total = tcompleted[n-1] - tposted[0]
	}
	total = max(total, 1)
	r.Avg = float64(size) * float64(n) * 1e9 / (float64(total) * format)
	r.MsgRate = float64(n) * 1e9 / (float64(total) * 1e6)
	if tposted != nil && !s.o.NoPeak {
		best := peakDelta(tposted, tcompleted, signaled)
		r.Peak = float64(size) * 1e9 / (float64(max(best, 1)) * format)
	}
	return r
}

// peakDelta is the shortest time per message over any run of consecutive
// messages that starts at a posting and ends at a signalled completion
// (the peak search of print_report_bw).
func peakDelta(tposted, tcompleted []int64, signaled []int) int64 {
	best := tcompleted[0] - tposted[0]
	step := 1
	if work := len(tposted) * len(signaled); work > maxPeakWork {
		step = work/maxPeakWork + 1
	}
	for i := 0; i < len(tposted); i += step {
		k, _ := slices.BinarySearch(signaled, i)
		for _, j := range signaled[k:] {
			if t := (tcompleted[j] - tposted[i]) / int64(j-i+1); t < best {
				best = t
			}
		}
	}
	return best
}

// LatReport is a latency test's line (print_report_lat), in
// microseconds.
type LatReport struct {
	Size                          int
	Iters                         int
	Min, Max, Typical, Avg, Stdev float64
	Percentile99, Percentile999   float64
}

// latReport computes a latency report from the posting times (ns) of
// the messages, as print_report_lat does: the intervals between
// consecutive postings, halved for the ping-pong tests (a round trip is
// two messages), sorted, without the two largest.
func (s *session) latReport(size int, tposted []int64) LatReport {
	n := len(tposted)
	factor := 2.0
	if s.o.Verb == Read || s.o.Verb == Atomic {
		factor = 1
	}
	delta := make([]float64, n-1)
	for i := range delta {
		delta[i] = float64(tposted[i+1]-tposted[i]) / 1e3 / factor
	}
	slices.Sort(delta)
	m := max(len(delta)-2, 1) // LAT_MEASURE_TAIL
	r := LatReport{Size: size, Iters: n, Min: delta[0], Max: delta[min(m, len(delta)-1)]}
	if (m-1)%2 != 0 {
		r.Typical = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		r.Typical = delta[m/2]
	}
	var sum float64
	for _, d := range delta[:m] {
		sum += d
	}
	r.Avg = sum / float64(m)
	var ss float64
	for _, d := range delta[:m] {
		ss += (r.Avg - d) * (r.Avg - d)
	}
	r.Stdev = math.Sqrt(ss / float64(m))
	pct := func(p float64) float64 {
		return delta[min(int(math.Ceil(float64(m)*p)), len(delta)-1)]
	}
	r.Percentile99, r.Percentile999 = pct(0.99), pct(0.999)
	return r
}

// FormatBWLine formats a bandwidth report as perftest prints it
// (REPORT_FMT, or REPORT_FMT_EXT for small Gb/s figures), with the
// newline.
func FormatBWLine(r Report, gbits bool) string {
	if gbits && r.Avg < 0.1 {
		return fmt.Sprintf(" %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.Peak, r.Avg, r.MsgRate)
	}
	return fmt.Sprintf(" %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.Peak, r.Avg, r.MsgRate)
}

// FormatLatLine formats a latency report as perftest prints it
// (REPORT_FMT_LAT), with the newline.
func FormatLatLine(r LatReport) string {
	return fmt.Sprintf(" %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		r.Size, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.Percentile99, r.Percentile999)
}

func (s *session) printBWHeader() {
	h := BWHeader
	if s.o.Gbits {
		h = BWHeaderGbits
	}
	s.printf("%s%s\n", resultLine, h)
}

func (s *session) printBWLine(r Report) { s.printf("%s", FormatBWLine(r, s.o.Gbits)) }

func (s *session) printLatHeader() { s.printf("%s%s\n", resultLine, LatHeader) }

func (s *session) printLatLine(r LatReport) { s.printf("%s", FormatLatLine(r)) }

// printTestInfo prints perftest's banner (ctx_print_test_info).
func (s *session) printTestInfo() {
	o := s.o
	w := s.out
	fmt.Fprint(w, resultLine)
	fmt.Fprintf(w, "                    %s ", o.Verb.title())
	if o.Verb == Atomic {
		fmt.Fprintf(w, "%s ", o.AtomicType)
	}
	if o.Lat {
		fmt.Fprint(w, "Latency ")
	} else {
		fmt.Fprint(w, "BW ")
	}
	fmt.Fprint(w, "Test\n")
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", s.dev.Name())
	fmt.Fprintf(w, " Number of qps   : 1\t\tTransport type : IB\n")
	fmt.Fprintf(w, " Connection type : RC\t\tUsing SRQ      : OFF\n")
	fmt.Fprintf(w, " PCIe relax order: OFF\n")
	fmt.Fprintf(w, " ibv_wr* API     : OFF\n")
	if !s.server {
		fmt.Fprintf(w, " TX depth        : %d\n", o.TxDepth)
	}
	if o.Verb == Send && s.server {
		fmt.Fprintf(w, " RX depth        : %d\n", o.RxDepth)
	}
	if !o.Lat {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", o.CQMod)
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", s.res.MTU.Bytes())
	fmt.Fprintf(w, " Link type       : Ethernet\n")
	fmt.Fprintf(w, " GID index       : %d\n", s.gidIndex)
	if o.Verb == Read || o.Verb == Atomic {
		fmt.Fprintf(w, " Outstand reads  : %d\n", s.outReads)
	} else {
		fmt.Fprintf(w, " Max inline data : 0[B]\n")
	}
	fmt.Fprintf(w, " rdma_cm QPs\t : OFF\n")
	fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	fmt.Fprintf(w, " UDP address     : %s (peer port %d)\n", s.local, s.peerPort)
	fmt.Fprint(w, resultLine)
}

// printDest prints a QP's address as ctx_print_pingpong_data does.
func (s *session) printDest(side string, d *Dest) {
	printDest(s.out, side, d, s.o.Verb)
}

func printDest(w io.Writer, side string, d *Dest, v Verb) {
	fmt.Fprintf(w, " %s address: LID %s QPN %s PSN %s", side, cAltHex(uint64(d.LID), 4), cAltHex(uint64(d.QPN), 6), cAltHex(uint64(d.PSN), 6))
	if v == Read {
		fmt.Fprintf(w, " OUT %s", cAltHex(uint64(d.OutReads), 4))
	}
	if v == Read || v == Write {
		fmt.Fprintf(w, " RKey %s VAddr %s", cAltHex(uint64(d.RKey), 8), cAltHex(d.VAddr, 16))
	}
	fmt.Fprint(w, "\n GID: ")
	for i, b := range d.GID {
		if i > 0 {
			fmt.Fprint(w, ":")
		}
		fmt.Fprintf(w, "%02d", b)
	}
	fmt.Fprint(w, "\n")
}

// cAltHex formats v as C's printf "%#0<width>x" does: 0x and zero-padded
// hex, the prefix counting towards the width; zero gets no prefix.
func cAltHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, v)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}
