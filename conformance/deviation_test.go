package conformance

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeTarget opens devices that only close: the cases run here never
// touch them.
type fakeTarget struct{ impl string }

func (f *fakeTarget) Name() string           { return "fake" }
func (f *fakeTarget) Implementation() string { return f.impl }
func (f *fakeTarget) Open() (Device, error)  { return fakeDevice{}, nil }

type fakeDevice struct{ Device }

func (fakeDevice) Close() error { return nil }

// anonTarget does not implement ImplementationNamer.
type anonTarget struct{}

func (anonTarget) Name() string          { return "anon" }
func (anonTarget) Open() (Device, error) { return fakeDevice{}, nil }

var _ ImplementationNamer = (*fakeTarget)(nil)

func TestDeviationOutcomes(t *testing.T) {
	dev := Deviation{Impl: ImplRxe, Cite: "drivers/x.c: f()", Note: "does y"}
	pass := func(*T, Device) {}
	fail := func(t *T, _ Device) { t.Errorf("the rule did not hold") }
	skip := func(t *T, _ Device) { t.Skipf("no capability") }
	mk := func(run func(*T, Device), devs ...Deviation) Case {
		return Case{Name: "x/y", Cite: "z(3)", Run: run, Deviations: devs}
	}
	for _, tc := range []struct {
		name   string
		target Target
		c      Case
		want   Outcome
		msg    string // a substring of the last message
	}{
		{"fail-no-deviation", &fakeTarget{ImplRxe}, mk(fail), Failed, "did not hold"},
		{"pass-no-deviation", &fakeTarget{ImplRxe}, mk(pass), Passed, ""},
		{"fail-with-deviation", &fakeTarget{ImplRxe}, mk(fail, dev), ExpectedFailure, "expected failure: rxe deviates: does y (drivers/x.c: f())"},
		{"pass-with-deviation", &fakeTarget{ImplRxe}, mk(pass, dev), UnexpectedPass, "unexpected pass"},
		{"skip-with-deviation", &fakeTarget{ImplRxe}, mk(skip, dev), Skipped, "no capability"},
		{"other-implementation", &fakeTarget{ImplSofthca}, mk(fail, dev), Failed, "did not hold"},
		{"unnamed-implementation", anonTarget{}, mk(fail, dev), Failed, "did not hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := RunCase(tc.target, tc.c)
			require.Equal(t, tc.want, r.Outcome, "messages: %q", r.Messages)
			if tc.msg != "" {
				require.NotEmpty(t, r.Messages)
				require.Contains(t, r.Messages[len(r.Messages)-1], tc.msg)
			}
			if tc.want == ExpectedFailure || tc.want == UnexpectedPass {
				require.NotNil(t, r.Deviation)
				require.Equal(t, dev, *r.Deviation)
			}
			require.Equal(t, tc.want == Failed || tc.want == UnexpectedPass, r.Outcome.FailsRun())
		})
	}
}

func TestTallyAndSummary(t *testing.T) {
	var rs []Result
	for o, n := range map[Outcome]int{Passed: 5, Failed: 1, Skipped: 2, ExpectedFailure: 3, UnexpectedPass: 4} {
		for range n {
			rs = append(rs, Result{Outcome: o})
		}
	}
	c := Tally(rs)
	require.Equal(t, Counts{Passed: 5, Failed: 1, Skipped: 2, ExpectedFailures: 3, UnexpectedPasses: 4}, c)
	require.Equal(t, 15, c.Total())
	require.False(t, c.OK())
	require.Equal(t, "5 passed, 1 failed, 2 skipped, 3 expected failures (declared deviations), 4 unexpected passes", c.String())
	p, f, s := Summary(rs)
	require.Equal(t, [3]int{8, 5, 2}, [3]int{p, f, s})

	require.True(t, Counts{Passed: 1, ExpectedFailures: 2, Skipped: 1}.OK())
	require.Equal(t, "3 passed, 0 failed, 1 skipped", Counts{Passed: 3, Skipped: 1}.String())
}

func TestOutcomeAndLabelNames(t *testing.T) {
	for o := Passed; o <= UnexpectedPass; o++ {
		got, err := ParseOutcome(o.String())
		require.NoError(t, err)
		require.Equal(t, o, got)
	}
	_, err := ParseOutcome("pass")
	require.Error(t, err)
	require.Equal(t, "Outcome(9)", Outcome(9).String())
	for _, l := range []Label{Spec, ImplementationDefined} {
		got, err := ParseLabel(l.String())
		require.NoError(t, err)
		require.Equal(t, l, got)
	}
	_, err = ParseLabel("SPEC")
	require.Error(t, err)
}

func TestRegisterRejectsBadDeviations(t *testing.T) {
	run := func(*T, Device) {}
	for _, tc := range []struct {
		name string
		devs []Deviation
		want string
	}{
		{"no-implementation", []Deviation{{Cite: "c", Note: "n"}}, "needs an implementation name"},
		{"no-citation", []Deviation{{Impl: ImplRxe, Note: "n"}}, "needs a citation"},
		{"no-note", []Deviation{{Impl: ImplRxe, Cite: "c"}}, "needs a note"},
		{"twice", []Deviation{{Impl: ImplRxe, Cite: "c", Note: "n"}, {Impl: ImplRxe, Cite: "d", Note: "m"}}, "two deviations for rxe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "test-only/bad-deviation-" + tc.name
			defer func() {
				v := recover()
				require.NotNil(t, v, "Register accepted %v", tc.devs)
				require.True(t, strings.Contains(v.(string), tc.want), "panic %q, want it to say %q", v, tc.want)
				for _, c := range Cases() {
					require.NotEqual(t, name, c.Name, "the rejected case was registered")
				}
			}()
			Register(Case{Name: name, Cite: "x(3)", Run: run, Deviations: tc.devs})
		})
	}
}

// TestDeclaredDeviationsAreWellFormed checks the suite's own deviations
// name a known implementation (a typo would make one never apply).
func TestDeclaredDeviationsAreWellFormed(t *testing.T) {
	known := map[string]bool{ImplSofthca: true, ImplSofthcaLib: true, ImplRxe: true}
	for _, c := range Cases() {
		for _, d := range c.Deviations {
			require.True(t, known[d.Impl], "case %s: deviation for unknown implementation %q", c.Name, d.Impl)
			require.NotContains(t, d.Note, "\n", "case %s: a deviation's note is one line", c.Name)
		}
	}
}
