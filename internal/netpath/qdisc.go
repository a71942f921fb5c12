package netpath

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// QueueStats are the counters of a side's bottleneck: its pfifo queue's,
// and tbf's overlimits.
type QueueStats struct {
	// Packets and Bytes are what the queue has passed on to the wire.
	// With a Burst below 64 KiB, tbf has split GSO super-packets, so
	// these are wire packets.
	Packets, Bytes uint64
	// Drops counts packets dropped because the queue was full.
	Drops uint64
	// Backlog and QueueLen are what waits in the queue now, in bytes and
	// packets.
	Backlog, QueueLen uint64
	// Overlimits counts the times tbf found too few tokens for the head
	// packet and held it back: how often the shaper was the limit.
	Overlimits uint64
}

// tcQdisc is one element of `tc -s -j qdisc show`.
type tcQdisc struct {
	Kind       string `json:"kind"`
	Handle     string `json:"handle"`
	Bytes      uint64 `json:"bytes"`
	Packets    uint64 `json:"packets"`
	Drops      uint64 `json:"drops"`
	Overlimits uint64 `json:"overlimits"`
	Backlog    uint64 `json:"backlog"`
	Qlen       uint64 `json:"qlen"`
}

// QdiscStats reads the counters of side's bottleneck (tc -s -j qdisc
// show). The side must be shaped.
func (p *Path) QdiscStats(side int) (QueueStats, error) {
	checkSide(side)
	if !p.shaped[side] {
		return QueueStats{}, fmt.Errorf("netpath: side %d is not shaped (Options.Directions)", side)
	}
	args := []string{"-n", p.ns[side], "-s", "-j", "qdisc", "show", "dev", p.dev[side]}
	cmd := exec.Command("tc", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return QueueStats{}, fmt.Errorf("netpath: tc %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	var qs []tcQdisc
	if err := json.Unmarshal(out, &qs); err != nil {
		return QueueStats{}, fmt.Errorf("netpath: parsing the output of tc %s: %w:\n%s", strings.Join(args, " "), err, out)
	}
	var s QueueStats
	var tbf, fifo bool
	for _, q := range qs {
		switch {
		case q.Kind == "tbf" && q.Handle == "1:":
			tbf = true
			s.Overlimits = q.Overlimits
		case q.Kind == "pfifo" && q.Handle == "10:":
			fifo = true
			s.Packets, s.Bytes, s.Drops = q.Packets, q.Bytes, q.Drops
			s.Backlog, s.QueueLen = q.Backlog, q.Qlen
		}
	}
	if !tbf || !fifo {
		return QueueStats{}, fmt.Errorf("netpath: no tbf 1: with pfifo 10: on %s in %s:\n%s", p.dev[side], p.ns[side], out)
	}
	return s, nil
}
