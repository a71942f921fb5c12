package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// A Report is one run of the suite against one target, as `softhca
// conformance -report FILE.json` writes it: which target and
// implementation, when, which softhca, and one row per case. `softhca
// conformance report` merges several into one Markdown document
// (WriteMarkdown).
//
// The JSON form:
//
//	{
//	  "format": "softhca-conformance-report/1",
//	  "target": "softhca",
//	  "implementation": "softhca",
//	  "date": "2025-01-02T15:04:05Z",
//	  "softhca_version": "v0.3.0-12-gabcdef",
//	  "cases": [
//	    {"name": "post_send/state/RESET-fails", "label": "spec",
//	     "cite": "ibv_post_send(3) ...", "outcome": "PASS",
//	     "duration_s": 0.0012},
//	    {"name": "...", "outcome": "XFAIL", "messages": ["..."],
//	     "deviation": {"implementation": "rxe", "cite": "...", "note": "..."}}
//	  ]
//	}
type Report struct {
	Format         string      `json:"format"`
	Target         string      `json:"target"`
	Implementation string      `json:"implementation,omitempty"`
	Date           time.Time   `json:"date"`
	Version        string      `json:"softhca_version"`
	Cases          []ReportRow `json:"cases"`
}

// ReportFormat is the value of Report.Format this package writes and
// reads.
const ReportFormat = "softhca-conformance-report/1"

// ReportRow is the result of one case.
type ReportRow struct {
	Name  string `json:"name"`
	Label string `json:"label"` // Label.String()
	// Cite is the case's source: the man page or IBTA rule it encodes.
	Cite     string   `json:"cite"`
	Outcome  string   `json:"outcome"` // Outcome.String()
	Duration float64  `json:"duration_s"`
	Messages []string `json:"messages,omitempty"`
	// Deviation is the case's declared deviation for the report's
	// implementation, if any.
	Deviation *ReportDeviation `json:"deviation,omitempty"`
}

// ReportDeviation is a Deviation in a report.
type ReportDeviation struct {
	Implementation string `json:"implementation"`
	Cite           string `json:"cite"`
	Note           string `json:"note"`
}

// NewReport builds the report of a run.
func NewReport(target Target, results []Result, date time.Time, version string) *Report {
	r := &Report{
		Format:         ReportFormat,
		Target:         target.Name(),
		Implementation: ImplementationOf(target),
		Date:           date.UTC().Round(time.Millisecond),
		Version:        version,
		Cases:          make([]ReportRow, 0, len(results)),
	}
	for _, res := range results {
		row := ReportRow{
			Name:     res.Case.Name,
			Label:    res.Case.Label.String(),
			Cite:     res.Case.Cite,
			Outcome:  res.Outcome.String(),
			Duration: res.Duration.Seconds(),
			Messages: res.Messages,
		}
		if d := res.Deviation; d != nil {
			row.Deviation = &ReportDeviation{Implementation: d.Impl, Cite: d.Cite, Note: d.Note}
		}
		r.Cases = append(r.Cases, row)
	}
	return r
}

// WriteReport writes r as indented JSON.
func WriteReport(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// maxReportSize bounds what ReadReport reads: a run of the whole suite
// with long messages is well under a megabyte.
const maxReportSize = 64 << 20

// ReadReport reads and checks a report WriteReport wrote: the format is
// known, the target is named, every case has a name (no name twice), a
// known label and outcome and a duration that is a non-negative number
// of seconds, and a deviation names its implementation and cites its
// source.
func ReadReport(rd io.Reader) (*Report, error) {
	dec := json.NewDecoder(io.LimitReader(rd, maxReportSize))
	var r Report
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("conformance report: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("conformance report: data after the report")
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("conformance report: %w", err)
	}
	return &r, nil
}

func (r *Report) check() error {
	if r.Format != ReportFormat {
		return fmt.Errorf("format %q, want %q", r.Format, ReportFormat)
	}
	if r.Target == "" {
		return errors.New("no target name")
	}
	seen := make(map[string]bool, len(r.Cases))
	for i := range r.Cases {
		if len(r.Cases[i].Messages) == 0 {
			r.Cases[i].Messages = nil // as WriteReport leaves an empty list out
		}
		row := r.Cases[i]
		if row.Name == "" {
			return fmt.Errorf("case %d has no name", i)
		}
		if seen[row.Name] {
			return fmt.Errorf("case %s appears twice", row.Name)
		}
		seen[row.Name] = true
		if _, err := ParseLabel(row.Label); err != nil {
			return fmt.Errorf("case %s: %w", row.Name, err)
		}
		if _, err := ParseOutcome(row.Outcome); err != nil {
			return fmt.Errorf("case %s: %w", row.Name, err)
		}
		if row.Duration < 0 || math.IsNaN(row.Duration) || math.IsInf(row.Duration, 0) {
			return fmt.Errorf("case %s: duration %v s", row.Name, row.Duration)
		}
		if d := row.Deviation; d != nil && (d.Implementation == "" || d.Cite == "") {
			return fmt.Errorf("case %s: a deviation needs an implementation and a citation", row.Name)
		}
	}
	return nil
}

// Counts tallies the report's outcomes (ReadReport has checked them).
func (r *Report) Counts() Counts {
	var c Counts
	for _, row := range r.Cases {
		o, err := ParseOutcome(row.Outcome)
		if err == nil {
			c.Add(o)
		}
	}
	return c
}
