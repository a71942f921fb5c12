package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/softhca/softhca/conformance"
	"github.com/stretchr/testify/require"
)

func TestConformanceReportFlagAndMerge(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.json")
	var out, errb bytes.Buffer
	code := run([]string{"conformance", "-run", "^query_(device|pkey)/", "-report", a}, &out, &errb)
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errb.String(), out.String())

	f, err := os.Open(a)
	require.NoError(t, err)
	r, err := conformance.ReadReport(f)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	require.Equal(t, "softhca", r.Target)
	require.Equal(t, conformance.ImplSofthca, r.Implementation)
	require.NotEmpty(t, r.Version)
	require.False(t, r.Date.IsZero())
	var names []string
	for _, row := range r.Cases {
		names = append(names, row.Name)
		require.Equal(t, "PASS", row.Outcome, row.Name)
		require.NotEmpty(t, row.Cite, row.Name)
	}
	require.Contains(t, names, "query_device/one-port")
	require.Contains(t, names, "query_pkey/bad-port-fails")

	// A second run with fewer cases: the merge shows "not run" for the
	// rest.
	b := filepath.Join(dir, "b.json")
	code = run([]string{"conformance", "-run", "^query_device/one-port$", "-report", b}, &out, &errb)
	require.Equal(t, exitOK, code, "stderr: %s", errb.String())

	md := filepath.Join(dir, "out.md")
	out.Reset()
	code = run([]string{"conformance", "report", "-o", md, a, b}, &out, &errb)
	require.Equal(t, exitOK, code, "stderr: %s", errb.String())
	text, err := os.ReadFile(md)
	require.NoError(t, err)
	doc := string(text)
	// Both runs are softhca: the titles are made distinct.
	n := len(r.Cases)
	require.Contains(t, doc, "| Case | Source | softhca (Go API) — softhca (run 1) | softhca (Go API) — softhca (run 2) | Notes |")
	require.Regexp(t, `\| softhca \(Go API\) — softhca \(run 1\) \| softhca \| softhca \| [^|]+ \| [^|]+ \| `+
		strings.Join([]string{itoa(n), itoa(n), "0", "0", "0", "0"}, ` \| `)+` \|`, doc)
	require.Contains(t, doc, "| `query_device/one-port` | ibv\\_query\\_device(3) | pass | pass |  |")
	require.Contains(t, doc, "| `query_pkey/bad-port-fails` | ibv\\_query\\_pkey(3) | pass | not run |  |")
	require.Contains(t, doc, "No run declared a deviation.")

	// To stdout.
	out.Reset()
	code = run([]string{"conformance", "report", b}, &out, &errb)
	require.Equal(t, exitOK, code)
	require.Contains(t, out.String(), "| `query_device/one-port` | ibv\\_query\\_device(3) | pass |  |")

	// Errors: no file, a missing file, a file that is not a report.
	errb.Reset()
	require.Equal(t, exitUsage, run([]string{"conformance", "report"}, &out, &errb))
	require.Contains(t, errb.String(), "softhca conformance report: no report files given")
	require.Equal(t, exitFailure, run([]string{"conformance", "report", filepath.Join(dir, "none.json")}, &out, &errb))
	errb.Reset()
	require.Equal(t, exitFailure, run([]string{"conformance", "report", a, ""}, &out, &errb))
	require.Equal(t, "softhca conformance report: a report file named \"\" (an empty argument)\n", errb.String())
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"format":"x"}`), 0o644))
	errb.Reset()
	require.Equal(t, exitFailure, run([]string{"conformance", "report", bad}, &out, &errb))
	require.Contains(t, errb.String(), "bad.json")
}

func itoa(n int) string { return strconv.Itoa(n) }
