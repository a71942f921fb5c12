package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/softhca/softhca/conformance"
)

// writeRunReport writes the results of a run as a JSON report
// (conformance.Report) to path.
func writeRunReport(path string, target conformance.Target, results []conformance.Result) error {
	var buf bytes.Buffer
	r := conformance.NewReport(target, results, time.Now(), softhcaVersion())
	if err := conformance.WriteReport(&buf, r); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// softhcaVersion is the version of this binary for reports: the module
// version the go command stamped from git (a tag, or a pseudo-version
// naming the commit), else the VCS revision, else "devel".
func softhcaVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "-dirty"
	}
	return rev
}

const conformanceReportUsage = `usage: softhca conformance report [-o FILE.md] RUN.json...
merges the reports of 'softhca conformance -report RUN.json' runs into one Markdown document

Examples:

  softhca conformance -report softhca.json      # a run against softhca, kept as JSON
  softhca conformance --target rdma:rxe0 -report rxe.json
  softhca conformance report softhca.json rxe.json   # the Markdown, on stdout
  softhca conformance report -o conformance.md softhca.json rxe.json

Exit status: 0 when the document was written, 1 when a report cannot be
read or the document cannot be written, 2 on usage errors.

Flags:
`

// runConformanceReport is "softhca conformance report [-o FILE.md]
// RUN.json...": it merges the JSON reports of several runs (the same
// suite against softhca's Go API, its drop-in libibverbs, rxe, ...) into
// one Markdown document, written to stdout or to -o.
func runConformanceReport(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("conformance report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write the Markdown to `FILE.md` instead of stdout")
	fs.Usage = func() {
		fmt.Fprint(stderr, conformanceReportUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "softhca conformance report: no report files given")
		fs.Usage()
		return exitUsage
	}
	var reports []*conformance.Report
	for _, path := range fs.Args() {
		r, err := readReportFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "softhca conformance report: %v\n", err)
			return exitFailure
		}
		reports = append(reports, r)
	}
	var buf bytes.Buffer
	if err := conformance.WriteMarkdown(&buf, reports); err != nil {
		fmt.Fprintf(stderr, "softhca conformance report: %v\n", err)
		return exitFailure
	}
	if *out == "" {
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			return exitFailure
		}
		return exitOK
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "softhca conformance report: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func readReportFile(path string) (*conformance.Report, error) {
	if path == "" {
		// os.Open would say "open : no such file or directory".
		return nil, errors.New(`a report file named "" (an empty argument)`)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := conformance.ReadReport(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
