package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/softhca/softhca/conformance"
	"github.com/softhca/softhca/conformance/softhca"
)

// runConformance runs the conformance suite against softhca in process and
// prints one row per case and the summary line "N passed, N failed, N
// skipped" (plus expected failures and unexpected passes, when a case
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
	reportFile := fs.String("report", "", "also write the results as JSON to `FILE.json` (merge runs with 'softhca conformance report')")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softhca conformance [-run REGEXP] [-v] [-report FILE.json]")
		fmt.Fprintln(stderr, "       softhca conformance report [-o FILE.md] RUN.json...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 0 {
		fs.Usage()
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
	target := &softhca.Target{}
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
