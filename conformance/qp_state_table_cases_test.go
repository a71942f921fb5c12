package conformance

import (
	"strings"
	"testing"

	"github.com/softhca/softhca/verbs"
)

// TestQPStateTableFamily checks the bookkeeping of the generated
// modify_qp/table family: every (from, to, type) triple is either
// registered or counted in qpTableUnregistered (the SQE rows), and the
// expected table has the 20 legal transitions per type that start in a
// state ibv_modify_qp can reach.
func TestQPStateTableFamily(t *testing.T) {
	registered := map[string]bool{}
	for _, c := range Cases() {
		if strings.HasPrefix(c.Name, "modify_qp/table/") {
			registered[c.Name] = true
			if strings.Contains(c.Name, "/SQE->") {
				t.Errorf("%s is registered, but SQE cannot be reached by ibv_modify_qp", c.Name)
			}
		}
	}
	if got, want := len(registered)+qpTableUnregistered, verbs.NumQPStates*verbs.NumQPStates*len(qpTypes); got != want {
		t.Errorf("%d registered + %d unregistered table cases, want %d", len(registered), qpTableUnregistered, want)
	}
	legal := 0
	for p := range qpExpectedTable {
		if p.from != qsSQE {
			legal++
		}
	}
	if legal != 20 {
		t.Errorf("%d legal transitions from modify-reachable states, want 20", legal)
	}
}
