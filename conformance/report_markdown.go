package conformance

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"
)

// ImplementationTitle is the column title of an implementation in a
// merged report ("softhca (Go API)", "softhca (libibverbs)", "rxe"), or
// "" for a name it does not know.
func ImplementationTitle(impl string) string {
	switch impl {
	case ImplSofthca:
		return "softhca (Go API)"
	case ImplSofthcaLib:
		return "softhca (libibverbs)"
	case ImplRxe:
		return "rxe"
	}
	return ""
}

// reportTitles returns one distinct column title per report: the
// implementation's title, else the target's name; titles that would
// repeat get the target's name, and if they still repeat, the run's
// number.
func reportTitles(reports []*Report) []string {
	titles := make([]string, len(reports))
	for i, r := range reports {
		titles[i] = ImplementationTitle(r.Implementation)
		if titles[i] == "" {
			titles[i] = r.Target
		}
	}
	qualify := func(f func(i int) string) {
		count := map[string]int{}
		for _, t := range titles {
			count[t]++
		}
		for i, t := range titles {
			if count[t] > 1 {
				titles[i] = f(i)
			}
		}
	}
	qualify(func(i int) string {
		if titles[i] == reports[i].Target {
			return titles[i]
		}
		return titles[i] + " — " + reports[i].Target
	})
	qualify(func(i int) string { return fmt.Sprintf("%s (run %d)", titles[i], i+1) })
	return titles
}

// cellWords is how WriteMarkdown shows each outcome in the case table.
func cellWords(o string) string {
	switch o {
	case "PASS":
		return "pass"
	case "SKIP":
		return "skip"
	case "FAIL":
		return "**FAIL**"
	case "XFAIL":
		return "deviation"
	case "XPASS":
		return "**unexpected pass**"
	}
	return mdText(o, 20)
}

// mdDeviation is one declared deviation seen in the merged runs.
type mdDeviation struct {
	n        int // D<n>
	caseName string
	ruleCite string
	dev      ReportDeviation
	seen     []string // "title: outcome" per run that carried it
}

// WriteMarkdown merges reports (ReadReport's) into one Markdown
// document: a summary table of outcome counts per run; a table with one
// row per case (its source, its result in one column per run, "not run"
// where a run lacks it, and notes on anything but a pass); and a section
// listing every declared deviation with its citation and what the
// implementation does instead.
func WriteMarkdown(w io.Writer, reports []*Report) error {
	bw := bufio.NewWriter(w)
	titles := reportTitles(reports)

	fmt.Fprintf(bw, "# Conformance report\n\n")
	fmt.Fprintf(bw, "Merged from %d run(s) of the softhca conformance suite. Each case encodes one rule of the "+
		"libibverbs man pages or the IBTA specification; *Source* is the start of its citation (the JSON "+
		"reports hold it whole). A *deviation* is a failure an implementation is known for and declared "+
		"with the source of that behaviour; it does not fail a run. An *unexpected pass* is a declared "+
		"deviation that no longer shows, and fails the run like a failure.\n\n", len(reports))

	fmt.Fprintf(bw, "## Summary\n\n")
	fmt.Fprintf(bw, "| Run | Target | Implementation | Date | softhca | Cases | Pass | Expected deviation | Skipped | Failed | Unexpected pass |\n")
	fmt.Fprintf(bw, "|---|---|---|---|---|--:|--:|--:|--:|--:|--:|\n")
	for i, r := range reports {
		c := r.Counts()
		impl := r.Implementation
		if impl == "" {
			impl = "(unnamed)"
		}
		fmt.Fprintf(bw, "| %s | %s | %s | %s | %s | %d | %d | %d | %d | %d | %d |\n",
			mdText(titles[i], 80), mdText(r.Target, 80), mdText(impl, 40), r.Date.UTC().Format("2006-01-02 15:04 MST"),
			mdText(r.Version, 60), c.Total(), c.Passed, c.ExpectedFailures, c.Skipped, c.Failed, c.UnexpectedPasses)
	}

	// The union of the cases, each with the first citation and label a
	// run gives for it.
	type caseInfo struct{ cite, label string }
	info := map[string]caseInfo{}
	rows := make([]map[string]*ReportRow, len(reports))
	for i, r := range reports {
		rows[i] = make(map[string]*ReportRow, len(r.Cases))
		for j := range r.Cases {
			row := &r.Cases[j]
			rows[i][row.Name] = row
			if _, ok := info[row.Name]; !ok {
				info[row.Name] = caseInfo{row.Cite, row.Label}
			}
		}
	}
	names := make([]string, 0, len(info))
	for n := range info {
		names = append(names, n)
	}
	sort.Strings(names)

	// Number the deviations in case order, then run order.
	var devs []*mdDeviation
	devIndex := map[string]*mdDeviation{} // case + "\x00" + implementation
	for _, name := range names {
		for i := range reports {
			row := rows[i][name]
			if row == nil || row.Deviation == nil {
				continue
			}
			key := name + "\x00" + row.Deviation.Implementation
			d := devIndex[key]
			if d == nil {
				d = &mdDeviation{n: len(devs) + 1, caseName: name, ruleCite: info[name].cite, dev: *row.Deviation}
				devs = append(devs, d)
				devIndex[key] = d
			}
			d.seen = append(d.seen, titles[i]+": "+cellWords(row.Outcome))
		}
	}

	fmt.Fprintf(bw, "\n## Cases\n\n")
	fmt.Fprintf(bw, "| Case | Source |")
	for _, t := range titles {
		fmt.Fprintf(bw, " %s |", mdText(t, 80))
	}
	fmt.Fprintf(bw, " Notes |\n|---|---|")
	for range titles {
		fmt.Fprintf(bw, "---|")
	}
	fmt.Fprintf(bw, "---|\n")
	for _, name := range names {
		src := mdText(ShortSource(info[name].cite), 120)
		if info[name].label == ImplementationDefined.String() {
			src += " *(implementation-defined)*"
		}
		fmt.Fprintf(bw, "| %s | %s |", mdCode(name), src)
		var notes []string
		for i := range reports {
			row := rows[i][name]
			if row == nil {
				fmt.Fprintf(bw, " not run |")
				continue
			}
			cell := cellWords(row.Outcome)
			if row.Deviation != nil {
				d := devIndex[name+"\x00"+row.Deviation.Implementation]
				cell += fmt.Sprintf(" (D%d)", d.n)
				if row.Outcome == "XFAIL" {
					notes = append(notes, mdText(titles[i]+": "+row.Deviation.Note, 160))
				}
			}
			fmt.Fprintf(bw, " %s |", cell)
			if row.Outcome == "FAIL" || row.Outcome == "XPASS" || row.Outcome == "SKIP" {
				msg := "(no message)"
				if len(row.Messages) > 0 {
					msg = row.Messages[0]
					if row.Outcome == "XPASS" {
						msg = row.Messages[len(row.Messages)-1]
					}
				}
				notes = append(notes, mdText(titles[i]+": "+msg, 160))
			}
		}
		fmt.Fprintf(bw, " %s |\n", strings.Join(notes, "<br>"))
	}

	fmt.Fprintf(bw, "\n## Deviations\n\n")
	if len(devs) == 0 {
		fmt.Fprintf(bw, "No run declared a deviation.\n")
	}
	for _, d := range devs {
		fmt.Fprintf(bw, "### D%d. %s on %s\n\n", d.n, mdCode(d.caseName), mdText(d.dev.Implementation, 40))
		fmt.Fprintf(bw, "- What %s does instead: %s\n", mdText(d.dev.Implementation, 40), mdText(d.dev.Note, 0))
		fmt.Fprintf(bw, "- Where that comes from: %s\n", mdText(d.dev.Cite, 0))
		fmt.Fprintf(bw, "- The rule: %s\n", mdText(d.ruleCite, 0))
		fmt.Fprintf(bw, "- Observed: %s\n\n", strings.Join(d.seen, "; "))
	}
	return bw.Flush()
}

// ShortSource is the start of a citation, up to the colon that ends its
// first source ("ibv_post_send(3) (seed 003)", "IBTA 10.3.1 (Error
// state)"), or its first 100 characters.
func ShortSource(cite string) string {
	depth := 0
	for i, r := range cite {
		switch r {
		case '(':
			depth++
		case ')':
			if depth > 0 {
				depth--
			}
		case ':':
			if depth == 0 && i+1 < len(cite) && (cite[i+1] == ' ' || cite[i+1] == '"') {
				return cite[:i]
			}
		}
		if i >= 100 {
			return cite[:i] + "…"
		}
	}
	return cite
}

// mdText makes s safe inside a Markdown table cell: one line, no
// character that Markdown or HTML would read as markup, at most max
// runes (0: no limit) with an ellipsis when cut.
func mdText(s string, max int) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if max > 0 && n == max {
			b.WriteString("…")
			break
		}
		n++
		switch r {
		case '\n', '\r', '\t':
			b.WriteByte(' ')
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '\\', '|', '*', '_', '`', '[', ']', '#', '~':
			b.WriteByte('\\')
			b.WriteRune(r)
		case utf8.RuneError:
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// mdCode formats a case name as code in a table cell (a pipe escaped as
// GFM tables require), or as text when it holds a backtick or a line
// break.
func mdCode(s string) string {
	if s == "" || strings.ContainsAny(s, "`\n\r") {
		return mdText(s, 0)
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}
