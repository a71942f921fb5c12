package pingpong

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/softhca/softhca/verbs"
)

// ResultLines returns the two lines every pingpong example prints at the
// end, computed as rdma-core computes them:
//
//	float usec = <elapsed microseconds>;
//	long long bytes = (long long) size * iters * 2;
//	printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n",
//	       bytes, usec / 1000000., bytes * 8. / usec);
//	printf("%d iters in %.2f seconds = %.2f usec/iter\n",
//	       iters, usec / 1000000., usec / iters);
//
// usec is a single-precision float of whole microseconds (gettimeofday),
// and usec / iters is a single-precision division; infinities and NaNs
// (no time elapsed, no iterations) print as glibc prints them.
func ResultLines(size, iters uint32, elapsed time.Duration) string {
	usec := float32(elapsed.Microseconds())
	bytes := int64(size) * int64(iters) * 2
	secs := float64(usec) / 1000000.
	mbit := float64(bytes) * 8. / float64(usec)
	perIter := float64(usec / float32(iters))
	return fmt.Sprintf("%d bytes in %s seconds = %s Mbit/sec\n%d iters in %s seconds = %s usec/iter\n",
		bytes, cfloat2(secs), cfloat2(mbit), int32(iters), cfloat2(secs), cfloat2(perIter))
}

// cfloat2 formats f as C's printf("%.2f") does, including "inf", "-inf",
// "nan" and "-nan".
func cfloat2(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		if math.Signbit(f) {
			return "-nan"
		}
		return "nan"
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

// FormatGID formats a GID as the examples print it, with glibc's
// inet_ntop(AF_INET6): the longest run of two or more zero groups becomes
// "::" (the first of equal runs), groups are lower-case hex without
// leading zeros, and an IPv4-mapped address (::ffff:a.b.c.d) or one whose
// first six groups are zero and seventh is not (::a.b.c.d) ends in dotted
// decimal.
func FormatGID(g verbs.GID) string {
	var w [8]int
	for i := range w {
		w[i] = int(g[2*i])<<8 | int(g[2*i+1])
	}
	bestBase, bestLen := -1, 0
	curBase, curLen := -1, 0
	for i := range w {
		if w[i] == 0 {
			if curBase < 0 {
				curBase, curLen = i, 1
			} else {
				curLen++
			}
			continue
		}
		if curBase >= 0 {
			if bestBase < 0 || curLen > bestLen {
				bestBase, bestLen = curBase, curLen
			}
			curBase = -1
		}
	}
	if curBase >= 0 && (bestBase < 0 || curLen > bestLen) {
		bestBase, bestLen = curBase, curLen
	}
	if bestBase >= 0 && bestLen < 2 {
		bestBase = -1
	}
	var b strings.Builder
	for i := 0; i < 8; i++ {
		if bestBase >= 0 && i >= bestBase && i < bestBase+bestLen {
			if i == bestBase {
				b.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			b.WriteByte(':')
		}
		if i == 6 && bestBase == 0 && (bestLen == 6 || (bestLen == 5 && w[5] == 0xffff)) {
			fmt.Fprintf(&b, "%d.%d.%d.%d", g[12], g[13], g[14], g[15])
			return b.String()
		}
		fmt.Fprintf(&b, "%x", w[i])
	}
	if bestBase >= 0 && bestBase+bestLen == 8 {
		b.WriteByte(':')
	}
	return b.String()
}

// AddressLine is the "  local address:  ..." or "  remote address: ..."
// line. ud_pingpong's local line has a colon before "GID" where the
// others have a comma (a typo in rdma-core, kept so that output compares
// equal).
func AddressLine(which string, d Dest, udLocal bool) string {
	sep := ","
	if udLocal {
		sep = ":"
	}
	label := "  local address: "
	if which == "remote" {
		label = "  remote address:"
	}
	return fmt.Sprintf("%s LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", label, d.LID, d.QPN, d.PSN, sep, FormatGID(d.GID))
}
