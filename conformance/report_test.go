package conformance

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var reportDate = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

// syntheticRuns are three small runs of four cases: the Go API passes
// everything but skips one, the library fails one, rxe has a declared
// deviation that shows, one that no longer shows, and lacks a case.
func syntheticRuns() []*Report {
	cite := map[string]string{
		"a/pass-everywhere":   `ibv_post_send(3) (seed 003): "if the QP is in RESET, INIT or RTR, an immediate error"`,
		"b/rxe-deviates":      `IBTA 10.3.1 (Send Queue Error state): a UD QP whose send fails enters SQE`,
		"c/rxe-xpass":         `ibv_modify_qp(3): retry_cnt "A 3 bits value of the total number of times"`,
		"d/not-run-on-rxe":    `ibv_query_port(3): max_msg_sz is the "max message size"`,
		"e/impl-defined-skip": `ibv_create_qp(3) (seed 001): caps above the device limits fail or are clamped`,
	}
	row := func(name, outcome string, msgs ...string) ReportRow {
		label := "spec"
		if strings.HasPrefix(name, "e/") {
			label = "implementation-defined"
		}
		return ReportRow{Name: name, Label: label, Cite: cite[name], Outcome: outcome, Duration: 0.25, Messages: msgs}
	}
	devB := &ReportDeviation{Implementation: ImplRxe, Cite: "drivers/infiniband/sw/rxe/rxe_comp.c: do_complete()", Note: "moves the QP straight to ERROR, never SQE"}
	devC := &ReportDeviation{Implementation: ImplRxe, Cite: "drivers/infiniband/sw/rxe/rxe_comp.c: rxe_completer()", Note: "treats retry_cnt 7 as infinite"}
	go1 := &Report{Format: ReportFormat, Target: "softhca", Implementation: ImplSofthca, Date: reportDate, Version: "v1.2.3", Cases: []ReportRow{
		row("a/pass-everywhere", "PASS"), row("b/rxe-deviates", "PASS"), row("c/rxe-xpass", "PASS"),
		row("d/not-run-on-rxe", "PASS"), row("e/impl-defined-skip", "SKIP", "helpers.go:1: no PairTarget"),
	}}
	lib := &Report{Format: ReportFormat, Target: "rdma:softhca0", Implementation: ImplSofthcaLib, Date: reportDate, Version: "v1.2.3", Cases: []ReportRow{
		row("a/pass-everywhere", "PASS"), row("b/rxe-deviates", "FAIL", "x.go:9: QP in ERR, want SQE | with a pipe"),
		row("c/rxe-xpass", "PASS"), row("d/not-run-on-rxe", "PASS"), row("e/impl-defined-skip", "PASS"),
	}}
	rb, rc := row("b/rxe-deviates", "XFAIL", "x.go:9: QP in ERR, want SQE", "expected failure: ..."), row("c/rxe-xpass", "XPASS", "unexpected pass: rxe no longer deviates")
	rb.Deviation, rc.Deviation = devB, devC
	rxe := &Report{Format: ReportFormat, Target: "rdma:rxe0", Implementation: ImplRxe, Date: reportDate, Version: "v1.2.3", Cases: []ReportRow{
		row("a/pass-everywhere", "PASS"), rb, rc, row("e/impl-defined-skip", "PASS"),
	}}
	return []*Report{go1, lib, rxe}
}

func TestWriteMarkdownMergesRuns(t *testing.T) {
	var buf bytes.Buffer
	// Through JSON and back, as `softhca conformance report` reads them.
	var runs []*Report
	for _, r := range syntheticRuns() {
		buf.Reset()
		require.NoError(t, WriteReport(&buf, r))
		got, err := ReadReport(&buf)
		require.NoError(t, err)
		runs = append(runs, got)
	}
	buf.Reset()
	require.NoError(t, WriteMarkdown(&buf, runs))
	md := buf.String()
	lines := strings.Split(md, "\n")
	has := func(line string) {
		t.Helper()
		require.Contains(t, lines, line, "Markdown:\n%s", md)
	}
	// Summary: Cases, Pass, Expected deviation, Skipped, Failed, Unexpected pass.
	has("| softhca (Go API) | softhca | softhca | 2025-03-04 05:06 UTC | v1.2.3 | 5 | 4 | 0 | 1 | 0 | 0 |")
	has("| softhca (libibverbs) | rdma:softhca0 | softhca-lib | 2025-03-04 05:06 UTC | v1.2.3 | 5 | 4 | 0 | 0 | 1 | 0 |")
	has("| rxe | rdma:rxe0 | rxe | 2025-03-04 05:06 UTC | v1.2.3 | 4 | 2 | 1 | 0 | 0 | 1 |")
	// The case table: one column per run, then Notes.
	has("| Case | Source | softhca (Go API) | softhca (libibverbs) | rxe | Notes |")
	has("| `a/pass-everywhere` | ibv\\_post\\_send(3) (seed 003) | pass | pass | pass |  |")
	has("| `b/rxe-deviates` | IBTA 10.3.1 (Send Queue Error state) | pass | **FAIL** | deviation (D1) | " +
		"softhca (libibverbs): x.go:9: QP in ERR, want SQE \\| with a pipe<br>rxe: moves the QP straight to ERROR, never SQE |")
	has("| `c/rxe-xpass` | ibv\\_modify\\_qp(3) | pass | pass | **unexpected pass** (D2) | rxe: unexpected pass: rxe no longer deviates |")
	has("| `d/not-run-on-rxe` | ibv\\_query\\_port(3) | pass | pass | not run |  |")
	has("| `e/impl-defined-skip` | ibv\\_create\\_qp(3) (seed 001) *(implementation-defined)* | skip | pass | pass | softhca (Go API): helpers.go:1: no PairTarget |")
	// The deviations, numbered in case order, with their citations.
	has("### D1. `b/rxe-deviates` on rxe")
	has("- What rxe does instead: moves the QP straight to ERROR, never SQE")
	has("- Where that comes from: drivers/infiniband/sw/rxe/rxe\\_comp.c: do\\_complete()")
	has("- Observed: rxe: deviation")
	has("### D2. `c/rxe-xpass` on rxe")
	has("- What rxe does instead: treats retry\\_cnt 7 as infinite")
	has("- Observed: rxe: **unexpected pass**")
	require.Equal(t, 1, strings.Count(md, "| `b/rxe-deviates` |"), "one row per case")
}

func TestReportTitlesDistinct(t *testing.T) {
	rs := []*Report{{Target: "rdma:rxe0", Implementation: ImplRxe}, {Target: "rdma:rxe1", Implementation: ImplRxe},
		{Target: "mlx5_0", Implementation: "mlx5"}, {Target: "x"}, {Target: "x"}}
	require.Equal(t, []string{"rxe — rdma:rxe0", "rxe — rdma:rxe1", "mlx5_0", "x (run 4)", "x (run 5)"}, reportTitles(rs))
}

func TestNewReportFromResults(t *testing.T) {
	dev := Deviation{Impl: ImplRxe, Cite: "rxe_req.c: f()", Note: "n"}
	cs := []Case{
		{Name: "z/fails", Cite: "ibv_x(3): y", Label: ImplementationDefined, Run: func(t *T, _ Device) { t.Errorf("boom") }, Deviations: []Deviation{dev}},
		{Name: "z/passes", Cite: "ibv_x(3): z", Run: func(*T, Device) {}},
	}
	r := NewReport(&fakeTarget{ImplRxe}, Run(&fakeTarget{ImplRxe}, cs), reportDate, "devel")
	require.Equal(t, "fake", r.Target)
	require.Equal(t, ImplRxe, r.Implementation)
	require.Len(t, r.Cases, 2)
	require.Equal(t, "XFAIL", r.Cases[0].Outcome)
	require.Equal(t, "implementation-defined", r.Cases[0].Label)
	require.Equal(t, &ReportDeviation{Implementation: ImplRxe, Cite: "rxe_req.c: f()", Note: "n"}, r.Cases[0].Deviation)
	require.Equal(t, "PASS", r.Cases[1].Outcome)
	require.Nil(t, r.Cases[1].Deviation)
	require.Equal(t, Counts{Passed: 1, ExpectedFailures: 1}, r.Counts())

	var buf bytes.Buffer
	require.NoError(t, WriteReport(&buf, r))
	require.Contains(t, buf.String(), `"outcome": "XFAIL"`)
	require.Contains(t, buf.String(), `"format": "softhca-conformance-report/1"`)
}

func TestReadReportRejects(t *testing.T) {
	good := `{"format":"softhca-conformance-report/1","target":"t","date":"2025-01-01T00:00:00Z","softhca_version":"v","cases":[{"name":"a","label":"spec","cite":"c","outcome":"PASS","duration_s":0.5}]}`
	_, err := ReadReport(strings.NewReader(good))
	require.NoError(t, err)
	for name, bad := range map[string]string{
		"format":    strings.Replace(good, "report/1", "report/9", 1),
		"target":    strings.Replace(good, `"target":"t"`, `"target":""`, 1),
		"outcome":   strings.Replace(good, `"PASS"`, `"pass"`, 1),
		"label":     strings.Replace(good, `"spec"`, `"SPEC"`, 1),
		"duration":  strings.Replace(good, `0.5`, `-1`, 1),
		"name":      strings.Replace(good, `"name":"a"`, `"name":""`, 1),
		"twice":     strings.Replace(good, `}]}`, `},{"name":"a","label":"spec","cite":"c","outcome":"PASS","duration_s":0}]}`, 1),
		"deviation": strings.Replace(good, `"duration_s":0.5`, `"duration_s":0.5,"deviation":{"implementation":"rxe","cite":""}`, 1),
		"trailing":  good + `{}`,
		"json":      good[:40],
	} {
		_, err := ReadReport(strings.NewReader(bad))
		require.Error(t, err, name)
	}
}

// FuzzReadReport: ReadReport never panics, and a report it accepts is
// written and read back unchanged.
func FuzzReadReport(f *testing.F) {
	for _, r := range syntheticRuns() {
		b, err := json.Marshal(r)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte(`{"format":"softhca-conformance-report/1","target":"t","date":"2025-01-01T00:00:00+09:00","softhca_version":"","cases":[]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ReadReport(bytes.NewReader(data))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteReport(&buf, r); err != nil {
			t.Fatalf("write back an accepted report: %v", err)
		}
		r2, err := ReadReport(&buf)
		if err != nil {
			t.Fatalf("read back a written report: %v\n%s", err, buf.String())
		}
		if !r.Date.Equal(r2.Date) {
			t.Fatalf("date %v read back as %v", r.Date, r2.Date)
		}
		r.Date, r2.Date = time.Time{}, time.Time{}
		require.Equal(t, r, r2)
		// Merging it does not fail either.
		if err := WriteMarkdown(&bytes.Buffer{}, []*Report{r, r2}); err != nil {
			t.Fatal(err)
		}
	})
}
