package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/softhca/softhca/cmd/softhca/internal/control"
	"github.com/softhca/softhca/cmd/softhca/internal/devinfo"
)

// The clients of a running daemon's control API: status, res and stat.
// Each finds the daemon (-d NAME, --control PATH, or the only one
// running), asks, and prints text modelled on the tool people know, or
// the daemon's JSON with -j.

// daemonFlags are the flags every client takes.
type daemonFlags struct {
	name, control string
	json          bool
}

func (f *daemonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "d", "", "the daemon's device `name` (default: the only daemon running)")
	fs.StringVar(&f.control, "control", "", "the daemon's control socket `path`")
	fs.BoolVar(&f.json, "j", false, "print the daemon's JSON")
}

// dial finds and connects to the daemon.
func (f *daemonFlags) dial() (*control.Client, error) {
	path, err := control.Find(f.control, f.name)
	if err != nil {
		return nil, err
	}
	return control.Dial(path)
}

// parseInterleaved parses flags that may come before or after the
// positional arguments (softhca res qp -j), and returns the positionals.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// clientMain runs a client command: parses, dials, calls do, and maps
// errors to exit statuses (1: no daemon or a failed request; 2: usage).
func clientMain(name, usage string, args []string, stdout, stderr io.Writer, maxPos int,
	do func(ctx context.Context, c *control.Client, f *daemonFlags, pos []string) error) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f daemonFlags
	f.register(fs)
	fs.Usage = func() {} // printed once, below, where it belongs
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs, usage)
			return exitOK
		}
		printUsage(stderr, fs, usage)
		return exitUsage
	}
	if len(pos) > maxPos {
		fmt.Fprintf(stderr, "softhca %s: unexpected argument %q\n", name, pos[maxPos])
		return exitUsage
	}
	c, err := f.dial()
	if err != nil {
		fmt.Fprintf(stderr, "softhca %s: %v\n", name, err)
		return exitFailure
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := do(ctx, c, &f, pos); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "softhca %s: %v\n", name, err)
			return exitUsage
		}
		// The client's own errors name the socket already.
		msg := err.Error()
		if !strings.HasPrefix(msg, c.Path()+": ") {
			msg = c.Path() + ": " + msg
		}
		fmt.Fprintf(stderr, "softhca %s: %s\n", name, msg)
		return exitFailure
	}
	return exitOK
}

// printUsage prints a command's usage text and its flags on w: on
// stdout for -h, on stderr after the flag package's error line.
func printUsage(w io.Writer, fs *flag.FlagSet, text string) {
	fmt.Fprint(w, text)
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// printRaw prints a JSON result on one line.
func printRaw(w io.Writer, raw json.RawMessage) {
	fmt.Fprintf(w, "%s\n", strings.TrimSpace(string(raw)))
}

const statusUsage = `usage: softhca status [-d NAME | --control PATH] [-j]

status describes a running daemon: its device, addresses, servers,
regions, object counts and packet counts.

Examples:

  softhca status
  softhca status -d softhca1 -j

Exit status: 0 on success, 1 when no daemon answers, 2 on usage errors.

Flags:
`

func runStatus(args []string, stdout, stderr io.Writer) int {
	return clientMain("status", statusUsage, args, stdout, stderr, 0, func(ctx context.Context, c *control.Client, f *daemonFlags, _ []string) error {
		raw, err := c.Raw(ctx, control.Request{Op: control.OpStatus})
		if err != nil {
			return err
		}
		if f.json {
			printRaw(stdout, raw)
			return nil
		}
		var s control.Status
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		up := time.Duration(s.Uptime * float64(time.Second)).Round(time.Second)
		where := "UDP " + s.Listen
		if s.Tap != "" {
			where = fmt.Sprintf("TAP %s as %s (MAC %s)", s.Tap, s.Listen, s.MAC)
		}
		fmt.Fprintf(stdout, "%s: serving on %s (pid %d, up %v, version %s)\n", s.Device, where, s.PID, up, s.Version)
		fmt.Fprintf(stdout, "  control   %s\n", s.Control)
		if s.HTTP != "" {
			fmt.Fprintf(stdout, "  web page  http://%s/\n", s.HTTP)
		}
		if s.Metrics != "" {
			fmt.Fprintf(stdout, "  metrics   http://%s/metrics\n", s.Metrics)
		}
		fmt.Fprintf(stdout, "  mtu       %d\n", s.ActiveMTU)
		for i, g := range s.GIDs {
			fmt.Fprintf(stdout, "  gid %d     %s\n", i, g)
		}
		fmt.Fprintf(stdout, "  objects   pd %d cq %d qp %d mr %d srq %d\n",
			s.Objects["pd"], s.Objects["cq"], s.Objects["qp"], s.Objects["mr"], s.Objects["srq"])
		fmt.Fprintf(stdout, "  packets   rx %d tx %d dropped %d\n", s.RxPackets, s.TxPackets, s.Dropped)
		for _, sv := range s.Services {
			fmt.Fprintf(stdout, "  service   %s on %s (%d served)\n", sv.Name, sv.Listen, sv.Served)
		}
		for _, r := range s.Regions {
			fmt.Fprintf(stdout, "  region    %s addr %#x length %d rkey %#x access %s\n", r.Name, r.Addr, r.Length, r.RKey, strings.Join(r.Access, ","))
		}
		return nil
	})
}

const resUsage = `usage: softhca res [pd|mr|cq|qp|srq] [-d NAME | --control PATH] [-j]

res lists a running daemon's verbs objects, as iproute2's
"rdma resource show" lists a kernel device's: without an object, a
count of each kind; with one, a line per object.

Examples:

  softhca res
  softhca res qp
  softhca res mr -j

Exit status: 0 on success, 1 when no daemon answers, 2 on usage errors.

Flags:
`

func runRes(args []string, stdout, stderr io.Writer) int {
	return clientMain("res", resUsage, args, stdout, stderr, 1, func(ctx context.Context, c *control.Client, f *daemonFlags, pos []string) error {
		if len(pos) == 0 {
			var s control.Status
			if err := c.Call(ctx, control.Request{Op: control.OpStatus}, &s); err != nil {
				return err
			}
			if f.json {
				b, _ := json.Marshal([]map[string]any{{"ifindex": 0, "ifname": s.Device, "pd": s.Objects["pd"],
					"cq": s.Objects["cq"], "qp": s.Objects["qp"], "mr": s.Objects["mr"], "srq": s.Objects["srq"]}})
				printRaw(stdout, b)
				return nil
			}
			fmt.Fprintf(stdout, "0: %s: pd %d cq %d qp %d mr %d srq %d\n", s.Device,
				s.Objects["pd"], s.Objects["cq"], s.Objects["qp"], s.Objects["mr"], s.Objects["srq"])
			return nil
		}
		obj := pos[0]
		if !slices.Contains(control.Objects, obj) {
			return usagef("unknown object %q (pd, mr, cq, qp or srq)", obj)
		}
		raw, err := c.Raw(ctx, control.Request{Op: control.OpRes, Object: obj})
		if err != nil {
			return err
		}
		if f.json {
			printRaw(stdout, raw)
			return nil
		}
		return printRes(stdout, obj, raw)
	})
}

// printRes prints objects in rdma resource show's layout.
func printRes(w io.Writer, obj string, raw json.RawMessage) error {
	switch obj {
	case "qp":
		var qps []control.QP
		if err := json.Unmarshal(raw, &qps); err != nil {
			return err
		}
		for _, q := range qps {
			fmt.Fprintf(w, "link %s/%d lqpn %d", q.Device, q.Port, q.LQPN)
			if q.Type != "UD" {
				fmt.Fprintf(w, " rqpn %d", q.RQPN)
			}
			fmt.Fprintf(w, " type %s state %s", q.Type, q.State)
			if q.Type != "UD" {
				fmt.Fprintf(w, " rq-psn %d", q.RQPSN)
			}
			fmt.Fprintf(w, " sq-psn %d", q.SQPSN)
			if q.Type == "RC" {
				fmt.Fprintf(w, " path-mig-state %s", q.PathMigState)
			}
			fmt.Fprintf(w, " pdn %d send-cqn %d recv-cqn %d", q.PDN, q.SendCQN, q.RecvCQN)
			if q.SRQN != 0 {
				fmt.Fprintf(w, " srqn %d", q.SRQN)
			}
			fmt.Fprintf(w, " sq-outstanding %d rq-posted %d tx-pkts %d rx-pkts %d retransmits %d pid %d comm %s\n",
				q.SendQueued, q.RecvQueued, q.TxPackets, q.RxPackets, q.Retransmits, q.PID, q.Comm)
		}
	case "cq":
		var cqs []control.CQ
		if err := json.Unmarshal(raw, &cqs); err != nil {
			return err
		}
		for _, c := range cqs {
			fmt.Fprintf(w, "dev %s cqn %d cqe %d users %d queued %d", c.Device, c.CQN, c.CQE, c.Users, c.Queued)
			if c.Error {
				fmt.Fprint(w, " error overrun")
			}
			fmt.Fprintf(w, " pid %d comm %s\n", c.PID, c.Comm)
		}
	case "mr":
		var mrs []control.MR
		if err := json.Unmarshal(raw, &mrs); err != nil {
			return err
		}
		for _, m := range mrs {
			fmt.Fprintf(w, "dev %s rkey %#x lkey %#x mrlen %d pdn %d", m.Device, m.RKey, m.LKey, m.Len, m.PDN)
			if m.Name != "" {
				fmt.Fprintf(w, " name %s addr %#x", m.Name, m.Addr)
			}
			fmt.Fprintf(w, " pid %d comm %s\n", m.PID, m.Comm)
		}
	case "pd":
		var pds []control.PD
		if err := json.Unmarshal(raw, &pds); err != nil {
			return err
		}
		for _, p := range pds {
			fmt.Fprintf(w, "dev %s pdn %d users %d pid %d comm %s\n", p.Device, p.PDN, p.Users, p.PID, p.Comm)
		}
	case "srq":
		var srqs []control.SRQ
		if err := json.Unmarshal(raw, &srqs); err != nil {
			return err
		}
		for _, s := range srqs {
			qpns := make([]string, len(s.LQPN))
			for i, n := range s.LQPN {
				qpns[i] = fmt.Sprint(n)
			}
			fmt.Fprintf(w, "dev %s srqn %d type %s", s.Device, s.SRQN, s.Type)
			if len(qpns) > 0 {
				fmt.Fprintf(w, " lqpn %s", strings.Join(qpns, ","))
			}
			fmt.Fprintf(w, " pdn %d max-wr %d queued %d limit %d pid %d comm %s\n", s.PDN, s.MaxWR, s.Queued, s.Limit, s.PID, s.Comm)
		}
	}
	return nil
}

const statUsage = `usage: softhca stat [-d NAME | --control PATH] [-j]

stat prints a running daemon's counters, as iproute2's "rdma statistic"
prints a kernel device's: the counters rxe has under rxe's names
(sent_pkts, rcvd_pkts, duplicate_request, ...), softhca's own after them,
then every dropped packet by reason.

Examples:

  softhca stat
  softhca stat -j

Exit status: 0 on success, 1 when no daemon answers, 2 on usage errors.

Flags:
`

func runStat(args []string, stdout, stderr io.Writer) int {
	return clientMain("stat", statUsage, args, stdout, stderr, 0, func(ctx context.Context, c *control.Client, f *daemonFlags, _ []string) error {
		raw, err := c.Raw(ctx, control.Request{Op: control.OpStat})
		if err != nil {
			return err
		}
		if f.json {
			printRaw(stdout, raw)
			return nil
		}
		var s control.Stat
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "link %s/%d", s.Device, s.Port)
		for _, n := range s.Names {
			fmt.Fprintf(stdout, " %s %d", n, s.Counters[n])
		}
		fmt.Fprintln(stdout)
		if len(s.Drops) > 0 {
			fmt.Fprintln(stdout, "drops:")
			reasons := make([]string, 0, len(s.Drops))
			for r := range s.Drops {
				reasons = append(reasons, r)
			}
			slices.Sort(reasons)
			for _, r := range reasons {
				fmt.Fprintf(stdout, "  %-50s %d\n", r, s.Drops[r])
			}
		}
		return nil
	})
}

func init() { queryDaemon = daemonDevices }

// daemonDevices asks every daemon with a socket in control.Dir for its
// device, in the order of their names (devinfo's hook): ok is false when
// none answers (no socket, or only stale ones).
func daemonDevices(ctx context.Context) ([]devinfo.Device, bool, error) {
	socks, _ := filepath.Glob(filepath.Join(control.Dir(), "*.sock"))
	slices.Sort(socks)
	var devs []devinfo.Device
	for _, path := range socks {
		c, err := control.Dial(path)
		if errors.Is(err, control.ErrNoDaemon) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		var d devinfo.Device
		err = c.Call(ctx, control.Request{Op: control.OpDevinfo}, &d)
		c.Close()
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		devs = append(devs, d)
	}
	return devs, len(devs) > 0, nil
}
