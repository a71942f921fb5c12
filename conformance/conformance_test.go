package conformance

import (
	"strings"
	"testing"
)

// TestSofthca runs every case against softhca in process, one subtest per
// case.
func TestSofthca(t *testing.T) {
	target := &Softhca{}
	cases := Cases()
	if len(cases) == 0 {
		t.Fatal("no conformance cases registered")
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := RunCase(target, c)
			msg := strings.Join(r.Messages, "\n")
			switch r.Outcome {
			case Failed:
				t.Fatalf("%s [%s]\n%s\n%s", c.Name, c.Label, c.Cite, msg)
			case Skipped:
				t.Skip(msg)
			}
		})
	}
}
