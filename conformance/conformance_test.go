package conformance

import (
	"strings"
	"testing"

	"github.com/softhca/softhca/hca"
)

// TestSofthca runs every case against softhca in process, one subtest per
// case.
func TestSofthca(t *testing.T) { runSofthca(t, &Softhca{}) }

// TestSofthcaBusyPoll runs every case against devices opened with
// hca.Config.BusyPoll: the verbs rules hold when the application's polls
// and posts drive the transport.
func TestSofthcaBusyPoll(t *testing.T) {
	runSofthca(t, &Softhca{Config: hca.Config{BusyPoll: true}})
}

func runSofthca(t *testing.T, target *Softhca) {
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
