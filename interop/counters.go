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
			err = fmt.Errorf("counter line %q: %v", l, perr)
			return
		}
		c[name] = v
	})
	return c, err
}

// RXECounters reads rxe0's hw_counters in the guest.
func (v *VM) RXECounters(ctx context.Context) (Counters, error) {
	r, err := v.Sh(ctx, 20*time.Second, "grep . "+rxeCounterDir+"/*")
	if err != nil {
		return nil, err
	}
	c, err := parseCounterLines(r.Stdout)
	if err == nil && len(c) == 0 {
		err = fmt.Errorf("no counters in %s: %q", rxeCounterDir, r.Stdout)
	}
	return c, err
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
