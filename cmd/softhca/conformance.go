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
// skipped". The exit status is 1 if any case failed.
func runConformance(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	run := fs.String("run", "", "run only cases whose name matches this regular expression")
	verbose := fs.Bool("v", false, "print the citation of every case and the messages of skipped cases")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: softhca conformance [-run REGEXP] [-v]")
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
		if r.Outcome == conformance.Failed || (*verbose && r.Outcome == conformance.Skipped) {
			for _, m := range r.Messages {
				for _, line := range strings.Split(m, "\n") {
					fmt.Fprintf(w, "\t  %s\t\n", line)
				}
			}
		}
	}
	w.Flush()
	passed, failed, skipped := conformance.Summary(results)
	fmt.Fprintf(stdout, "target %s: %d cases\n", target.Name(), len(results))
	fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 {
		return exitFailure
	}
	return exitOK
}
