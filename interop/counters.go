package interop

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Counters are named event counts: rxe's hw_counters or softhca's
// transport statistics.
type Counters map[string]uint64

// rxeCounterDir is where rxe0's port counters are in the guest.
const rxeCounterDir = "/sys/class/infiniband/rxe0/ports/1/hw_counters"

// parseCounterLines reads "path/name:value" lines (grep . dir/*).
func parseCounterLines(b []byte) (Counters, error) {
	c := Counters{}
	var err error
	scanLines(b, func(l string) {
		i := strings.LastIndexByte(l, ':')
		if i < 0 {
			return
		}
		name := l[:i]
		if j := strings.LastIndexByte(name, '/'); j >= 0 {
			name = name[j+1:]
		}
		v, perr := strconv.ParseUint(strings.TrimSpace(l[i+1:]), 10, 64)
		if perr != nil {
			err = fmt.Errorf("counter line %q: %w", l, perr)
			return
		}
		c[name] = v
	})
	return c, err
}

// guestNetCounters prints, as name:value lines, where the guest's network
// stack drops packets before rxe sees them: eth0's receive drops, the
// per-CPU backlog's drops (/proc/net/softnet_stat, second column) and
// UDP's receive errors.
const guestNetCounters = `for f in rx_dropped rx_missed_errors rx_fifo_errors rx_errors; do
	echo "net.eth0.$f:$(cat /sys/class/net/eth0/statistics/$f)"
done
n=0; while read -r _ d _; do n=$((n + 0x$d)); done < /proc/net/softnet_stat; echo "net.softnet.dropped:$n"
awk '/^Udp:/ { if (!h) { for (i = 2; i <= NF; i++) k[i] = $i; h = 1 } else for (i = 2; i <= NF; i++) if (k[i] ~ /Errors$/) print "net.udp." k[i] ":" $i }' /proc/net/snmp
`

// RXECounters reads rxe0's hw_counters in the guest, and the guest
// network stack's drop counters (named net.*).
func (v *VM) RXECounters(ctx context.Context) (Counters, error) {
	r, err := v.Sh(ctx, 20*time.Second, "grep . "+rxeCounterDir+"/*\n"+guestNetCounters)
	if err != nil {
		return nil, err
	}
	c, err := parseCounterLines(r.Stdout)
	if err == nil && c["rcvd_pkts"] == 0 && c["sent_pkts"] == 0 && len(c) < 5 {
		err = fmt.Errorf("no counters in %s: %q", rxeCounterDir, r.Stdout)
	}
	return c, err
}

// NetDrops sums the guest network stack's drop counters in c.
func (c Counters) NetDrops() uint64 {
	var n uint64
	for k, v := range c {
		if strings.HasPrefix(k, "net.") {
			n += v
		}
	}
	return n
}

// Sub returns c - before, counter by counter (lifespan, a setting, is
// left out).
func (c Counters) Sub(before Counters) Counters {
	d := Counters{}
	for k, v := range c {
		if k == "lifespan" {
			continue
		}
		d[k] = v - before[k]
	}
	return d
}

// Add adds o to c.
func (c Counters) Add(o Counters) {
	for k, v := range o {
		c[k] += v
	}
}

// String lists the counters by name, the zero ones left out unless all
// are zero.
func (c Counters) String() string {
	keys := make([]string, 0, len(c))
	for k, v := range c {
		if v != 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "all zero"
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, c[k])
	}
	return strings.Join(parts, " ")
}
