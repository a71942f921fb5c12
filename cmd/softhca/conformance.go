package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/softhca/softhca/conformance"
	"github.com/softhca/softhca/conformance/rdma"
	"github.com/softhca/softhca/conformance/softhca"
)

const conformanceUsage = `usage: softhca conformance [-run REGEXP] [-v] [--target softhca|rdma:DEVICE [--agent PATH] [--lib DIR] [--port-addrs IP,...]] [-report FILE.json]
       softhca conformance report [-o FILE.md] RUN.json...

Examples:

  softhca conformance                           # every case against softhca, in process
  softhca conformance -run '^create_ah/' -v     # some cases, with their citations
  softhca conformance --target rdma:rxe0 -report rxe.json   # the kernel's rxe, through libibverbs
  softhca conformance report -o conformance.md softhca.json rxe.json

Exit status: 0 when every case passed or was skipped (or failed as its
declared deviation), 1 when a case failed or passed unexpectedly or the
-report file could not be written, 2 on usage errors.

Flags:
`

// runConformance runs the conformance suite against a target (softhca in
// process by default, or a libibverbs device through the verbs agent)
// and prints one row per case and the summary line "N passed, N failed,
// N skipped" (plus expected failures and unexpected passes, when a case
// declares a deviation for the target's implementation); -report writes
// the results as JSON too. The exit status is 1 if any case failed or
// passed unexpectedly. "softhca conformance report" merges JSON reports
// (conformance_report.go).
func runConformance(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "report" {
		return runConformanceReport(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	run := fs.String("run", "", "run only cases whose name matches this regular expression")
	verbose := fs.Bool("v", false, "print the citation of every case and the messages of skipped cases")
	targetName := fs.String("target", "softhca", "`softhca` (in process) or rdma:DEVICE (a libibverbs device, e.g. rdma:rxe0)")
	agent := fs.String("agent", "", "a prebuilt shca-verbs-agent for rdma:DEVICE (default: build the embedded agent.c; needs gcc and libibverbs-dev)")
	lib := fs.String("lib", "", "for rdma:DEVICE, run the agents on softhca's drop-in libibverbs.so.1 in this `directory`, devices on 127.0.0.3 and the pair on 127.0.0.1 and 127.0.0.2")
	portAddrs := fs.String("port-addrs", "", "for rdma:DEVICE, the IP `addresses` of the device's port 1 in GID order from GID[1], comma-separated, so that the query_gid cases can check the GID table against them")
	reportFile := fs.String("report", "", "also write the results as JSON to `FILE.json` (merge runs with 'softhca conformance report')")
	fs.Usage = func() {
		fmt.Fprint(stderr, conformanceUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "softhca conformance: unexpected argument %q (flags only; \"conformance report\" merges runs)\n", fs.Arg(0))
		fs.Usage()
		return exitUsage
	}
	target, err := conformanceTarget(*targetName, *agent, *lib, *portAddrs)
	if err != nil {
		fmt.Fprintf(stderr, "softhca conformance: %v\n", err)
		return exitUsage
	}
	cases := conformance.Cases()
	if *run != "" {
		re, err := regexp.Compile(*run)
		if err != nil {
			fmt.Fprintf(stderr, "softhca conformance: -run: %v\n", err)
			return exitUsage
		}
		var kept []conformance.Case
		for _, c := range cases {
			if re.MatchString(c.Name) {
				kept = append(kept, c)
			}
		}
		cases = kept
	}
	results := conformance.Run(target, cases)

	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "RESULT\tCASE\tLABEL\n")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.Outcome, r.Case.Name, r.Case.Label)
		if *verbose {
			fmt.Fprintf(w, "\t  %s\t\n", r.Case.Cite)
		}
		msgs := r.Messages
		if r.Outcome == conformance.ExpectedFailure && !*verbose && len(msgs) > 0 {
			msgs = msgs[len(msgs)-1:] // the deviation and its citation
		}
		if r.Outcome.FailsRun() || r.Outcome == conformance.ExpectedFailure || (*verbose && r.Outcome == conformance.Skipped) {
			for _, m := range msgs {
				for _, line := range strings.Split(m, "\n") {
					fmt.Fprintf(w, "\t  %s\t\n", line)
				}
			}
		}
	}
	w.Flush()
	counts := conformance.Tally(results)
	fmt.Fprintf(stdout, "target %s: %d cases\n", target.Name(), len(results))
	fmt.Fprintf(stdout, "%s\n", counts)
	if *reportFile != "" {
		if err := writeRunReport(*reportFile, target, results); err != nil {
			fmt.Fprintf(stderr, "softhca conformance: -report: %v\n", err)
			return exitFailure
		}
	}
	if !counts.OK() {
		return exitFailure
	}
	return exitOK
}

// conformanceTarget turns --target, --agent, --lib and --port-addrs into
// a target.
func conformanceTarget(name, agent, lib, portAddrs string) (conformance.Target, error) {
	dev, isRDMA := strings.CutPrefix(name, "rdma:")
	switch {
	case name == "softhca":
		if agent != "" || lib != "" || portAddrs != "" {
			return nil, fmt.Errorf("--agent, --lib and --port-addrs need --target rdma:DEVICE, not %q", name)
		}
		return &softhca.Target{}, nil
	case !isRDMA || dev == "" || strings.ContainsAny(dev, "/ \t"):
		return nil, fmt.Errorf("--target %q: want softhca or rdma:DEVICE (a libibverbs device name such as rxe0)", name)
	}
	if agent != "" {
		var err error
		if agent, err = agentPath(agent); err != nil {
			return nil, err
		}
	}
	switch {
	case lib != "":
		if portAddrs != "" {
			return nil, fmt.Errorf("--port-addrs: the drop-in library's addresses are set by --lib's devices, not given")
		}
		dir, err := libraryDir(lib)
		if err != nil {
			return nil, fmt.Errorf("--lib %q: %w", lib, err)
		}
		return rdma.DropIn(dev, dir, agent), nil
	case portAddrs != "":
		var addrs []netip.Addr
		for _, f := range strings.Split(portAddrs, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(f))
			if err != nil {
				return nil, fmt.Errorf("--port-addrs %q: %q is not an IP address", portAddrs, f)
			}
			addrs = append(addrs, a.Unmap())
		}
		return &rdma.AddrTarget{Target: rdma.Target{Device: dev, Agent: agent}, Addrs: addrs}, nil
	}
	return &rdma.Target{Device: dev, Agent: agent}, nil
}

// agentPath checks that --agent names an executable file and returns its
// absolute path, so that a name without a slash is the file here, not a
// program of that name found in $PATH.
func agentPath(agent string) (string, error) {
	fi, err := os.Stat(agent)
	switch {
	case err != nil:
		return "", fmt.Errorf("--agent %q: %w", agent, err)
	case fi.IsDir():
		return "", fmt.Errorf("--agent %q: is a directory, not a prebuilt shca-verbs-agent", agent)
	case fi.Mode()&0o111 == 0:
		return "", fmt.Errorf("--agent %q: is not executable", agent)
	}
	abs, err := filepath.Abs(agent)
	if err != nil {
		return "", fmt.Errorf("--agent %q: %w", agent, err)
	}
	return abs, nil
}
