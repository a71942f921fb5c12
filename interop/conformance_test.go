//go:build interop

package interop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softhca/softhca/conformance"
	"github.com/softhca/softhca/conformance/rdma"
)

// testConformance runs the whole conformance suite inside the guest
// against rxe0, through the same verbs agent (conformance/rdma's
// agent.c, built here against the host's libibverbs-dev, the guest's
// libibverbs1 being the same Debian release) that TestDropIn runs on the
// host against softhca's drop-in library. softhca itself goes into the
// guest built without cgo. The run's JSON report is kept in the run
// directory as conformance-rxe.json (docs/conformance.md is made from
// it); every case must pass, be skipped with the capability named, or
// fail as a deviation the case declares for rxe with its citation.
func (e *env) testConformance(t *testing.T) {
	t.Run("rxe", func(t *testing.T) {
		var note string
		e.leaf(t, &note)
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
		defer cancel()
		share := filepath.Join(e.dir, "vm", "share")
		cmd := goCmd(ctx, "build", "-buildvcs=auto", "-o", filepath.Join(share, "softhca-static"), "github.com/softhca/softhca/cmd/softhca")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building softhca without cgo: %v\n%s", err, out)
		}
		agent, err := rdma.BuildAgent()
		if err != nil {
			t.Fatalf("building the verbs agent: %v", err)
		}
		if err := copyFile(agent, filepath.Join(share, "shca-verbs-agent"), 0o755); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r, err := e.vm.Run(ctx, 24*time.Minute, "/host/softhca-static", "conformance", "--target", "rdma:"+RXEDevice,
			"--agent", "/host/shca-verbs-agent", "--port-addrs", e.guestAddr().String(), "-report", "/host/conformance-rxe.json")
		// The exit status says whether a case failed; the report says
		// which, so an error here is looked at only without a report.
		f, ferr := os.Open(filepath.Join(share, "conformance-rxe.json"))
		if ferr != nil {
			t.Fatalf("no report from the guest's run (%v): %v\n%s\n%s", ferr, err, r.Stdout, r.Stderr)
		}
		defer f.Close()
		rep, rerr := conformance.ReadReport(f)
		if rerr != nil {
			t.Fatalf("the guest's report: %v", rerr)
		}
		if err := copyFile(filepath.Join(share, "conformance-rxe.json"), filepath.Join(e.dir, "conformance-rxe.json"), 0o644); err != nil {
			t.Error(err)
		}
		count := map[string]int{}
		var bad []string
		for _, c := range rep.Cases {
			count[c.Outcome]++
			if c.Outcome == conformance.Failed.String() || c.Outcome == conformance.UnexpectedPass.String() {
				bad = append(bad, fmt.Sprintf("%s %s\n    %s", c.Outcome, c.Name, strings.Join(c.Messages, "\n    ")))
			}
		}
		note = fmt.Sprintf("%d cases in %v: %d pass, %d expected deviations, %d skipped, %d failed, %d unexpected passes",
			len(rep.Cases), time.Since(start).Round(time.Second), count[conformance.Passed.String()],
			count[conformance.ExpectedFailure.String()], count[conformance.Skipped.String()],
			count[conformance.Failed.String()], count[conformance.UnexpectedPass.String()])
		if len(rep.Cases) != len(conformance.Cases()) {
			t.Errorf("the guest ran %d cases, the suite has %d", len(rep.Cases), len(conformance.Cases()))
		}
		if len(bad) > 0 {
			t.Errorf("%d cases failed on rxe without a declared deviation:\n%s", len(bad), strings.Join(bad, "\n"))
		}
	})
}
