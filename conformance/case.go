package conformance

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Label says where a case's expectation comes from.
type Label uint8

// Labels.
const (
	// Spec: the man page or IBTA states the behaviour.
	Spec Label = iota
	// ImplementationDefined: the man pages allow several behaviours; the
	// case checks softhca's documented choice.
	ImplementationDefined
)

// String returns "spec" or "implementation-defined".
func (l Label) String() string {
	if l == ImplementationDefined {
		return "implementation-defined"
	}
	return "spec"
}

// Case is one rule, checked against a Target.
type Case struct {
	// Name is "area/rule", e.g. "post_send/reset-fails".
	Name string
	// Cite names the source and quotes or paraphrases the sentence the
	// case encodes, e.g. `ibv_post_send(3): "..."`.
	Cite  string
	Label Label
	// Run checks the rule. It gets a fresh device and fails through t.
	Run func(t *T, d Device)
	// Deviations are the implementations known not to follow the rule
	// (or, for an ImplementationDefined case, to make another choice),
	// each with where that behaviour comes from. On a target whose
	// Implementation has one, a failure is an ExpectedFailure and a
	// pass an UnexpectedPass (see deviation.go).
	Deviations []Deviation
}

var (
	registryMu sync.Mutex
	registry   = map[string]Case{}
)

// Register adds cases to the suite. It panics on a duplicate name or a
// case without a citation, so the suite cannot silently lose rules.
func Register(cs ...Case) {
	registryMu.Lock()
	defer registryMu.Unlock()
	for _, c := range cs {
		if c.Name == "" || c.Cite == "" || c.Run == nil {
			panic("conformance: case " + c.Name + " needs a name, a citation and a Run function")
		}
		if err := checkDeviations(c.Deviations); err != nil {
			panic("conformance: case " + c.Name + ": " + err.Error())
		}
		if _, dup := registry[c.Name]; dup {
			panic("conformance: duplicate case " + c.Name)
		}
		registry[c.Name] = c
	}
}

// Cases returns every registered case, sorted by name.
func Cases() []Case {
	registryMu.Lock()
	defer registryMu.Unlock()
	cs := make([]Case, 0, len(registry))
	for _, c := range registry {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	return cs
}

// Outcome is the result of running a case.
type Outcome uint8

// Outcomes.
const (
	// Passed: the rule held.
	Passed Outcome = iota
	// Failed: the rule did not hold, and no deviation is declared for
	// the target's implementation. It fails the run.
	Failed
	// Skipped: the target lacks something the case needs.
	Skipped
	// ExpectedFailure: the rule did not hold on an implementation with
	// a declared Deviation (XFAIL). It does not fail the run; reports
	// show the deviation's citation.
	ExpectedFailure
	// UnexpectedPass: the rule held on an implementation with a
	// declared Deviation (XPASS). It fails the run, so that the list of
	// deviations stays true: remove the deviation, or find out why the
	// case no longer sees it.
	UnexpectedPass
)

var outcomeNames = [...]string{"PASS", "FAIL", "SKIP", "XFAIL", "XPASS"}

// String returns "PASS", "FAIL", "SKIP", "XFAIL" or "XPASS".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// FailsRun reports whether the outcome makes the run fail: Failed and
// UnexpectedPass do.
func (o Outcome) FailsRun() bool { return o == Failed || o == UnexpectedPass }

// ParseOutcome is the inverse of Outcome.String.
func ParseOutcome(s string) (Outcome, error) {
	for i, n := range outcomeNames {
		if s == n {
			return Outcome(i), nil
		}
	}
	return 0, fmt.Errorf("unknown outcome %q (want one of %s)", s, strings.Join(outcomeNames[:], ", "))
}

// ParseLabel is the inverse of Label.String.
func ParseLabel(s string) (Label, error) {
	switch s {
	case Spec.String():
		return Spec, nil
	case ImplementationDefined.String():
		return ImplementationDefined, nil
	}
	return 0, fmt.Errorf("unknown label %q (want %q or %q)", s, Spec, ImplementationDefined)
}

// Result is the outcome of one case.
type Result struct {
	Case    Case
	Outcome Outcome
	// Messages are the failure or skip reasons, with file:line; for an
	// UnexpectedPass, the reason it is one.
	Messages []string
	Duration time.Duration
	// Deviation is the case's declared deviation for the target's
	// implementation, or nil.
	Deviation *Deviation
}

// T is the handle a case reports through, shaped like testing.T.
type T struct {
	name     string
	target   Target
	failed   bool
	skipped  bool
	messages []string
	cleanups []func()
}

// errStop unwinds a case after Fatal or Skip.
type errStop struct{}

// Name returns the case's name.
func (t *T) Name() string { return t.name }

// Target returns the target the case runs against.
func (t *T) Target() Target { return t.target }

func (t *T) log(skip int, format string, args ...any) {
	_, file, line, _ := runtime.Caller(skip + 1)
	if i := strings.LastIndex(file, "/"); i >= 0 {
		file = file[i+1:]
	}
	t.messages = append(t.messages, fmt.Sprintf("%s:%d: %s", file, line, fmt.Sprintf(format, args...)))
}

// Errorf records a failure and continues.
func (t *T) Errorf(format string, args ...any) {
	t.failed = true
	t.log(1, format, args...)
}

// Fatalf records a failure and stops the case.
func (t *T) Fatalf(format string, args ...any) {
	t.failed = true
	t.log(1, format, args...)
	panic(errStop{})
}

// Skipf stops the case and reports it skipped (for a capability the
// target lacks).
func (t *T) Skipf(format string, args ...any) {
	t.skipped = true
	t.log(1, format, args...)
	panic(errStop{})
}

// Cleanup registers f to run when the case ends, last registered first.
func (t *T) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

// Helper marks the caller as a helper (a no-op kept for testing.T
// symmetry).
func (t *T) Helper() {}

// Failed reports whether the case has failed.
func (t *T) Failed() bool { return t.failed }

// Run runs the cases against a target, one fresh device each, and
// returns their results in order.
func Run(target Target, cases []Case) []Result {
	results := make([]Result, 0, len(cases))
	for _, c := range cases {
		results = append(results, RunCase(target, c))
	}
	return results
}

// RunCase runs one case on a fresh device.
func RunCase(target Target, c Case) (r Result) {
	t := &T{name: c.Name, target: target}
	start := time.Now()
	impl := ImplementationOf(target)
	defer func() {
		r = Result{Case: c, Duration: time.Since(start), Messages: t.messages, Deviation: c.DeviationFor(impl)}
		switch {
		case t.failed:
			r.Outcome = Failed
		case t.skipped:
			r.Outcome = Skipped
		default:
			r.Outcome = Passed
		}
		r.Outcome, r.Messages = applyDeviation(r.Outcome, r.Deviation, r.Messages)
	}()
	d, err := target.Open()
	if err != nil {
		t.failed = true
		t.messages = append(t.messages, "open device: "+err.Error())
		return
	}
	t.Cleanup(func() { _ = d.Close() })
	func() {
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(errStop); !ok {
					t.failed = true
					buf := make([]byte, 4096)
					n := runtime.Stack(buf, false)
					t.messages = append(t.messages, fmt.Sprintf("panic: %v\n%s", v, buf[:n]))
				}
			}
		}()
		c.Run(t, d)
	}()
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	return
}

// Summary counts outcomes in three numbers: failed counts the outcomes
// that fail the run (Failed and UnexpectedPass), passed those that do
// not (Passed and ExpectedFailure), skipped the skipped cases. Tally
// tells the five outcomes apart.
func Summary(results []Result) (passed, failed, skipped int) {
	c := Tally(results)
	return c.Passed + c.ExpectedFailures, c.Failed + c.UnexpectedPasses, c.Skipped
}

// Counts are the number of results of each outcome.
type Counts struct {
	Passed, Failed, Skipped, ExpectedFailures, UnexpectedPasses int
}

// Tally counts the results by outcome.
func Tally(results []Result) Counts {
	var c Counts
	for _, r := range results {
		c.Add(r.Outcome)
	}
	return c
}

// Add counts one outcome.
func (c *Counts) Add(o Outcome) {
	switch o {
	case Passed:
		c.Passed++
	case Failed:
		c.Failed++
	case Skipped:
		c.Skipped++
	case ExpectedFailure:
		c.ExpectedFailures++
	case UnexpectedPass:
		c.UnexpectedPasses++
	}
}

// Total is the number of results counted.
func (c Counts) Total() int {
	return c.Passed + c.Failed + c.Skipped + c.ExpectedFailures + c.UnexpectedPasses
}

// OK reports whether the run passes: no failure and no unexpected pass.
func (c Counts) OK() bool { return c.Failed == 0 && c.UnexpectedPasses == 0 }

// String is the summary line `softhca conformance` prints: "N passed, N
// failed, N skipped", followed by the expected failures and unexpected
// passes when there are any.
func (c Counts) String() string {
	s := fmt.Sprintf("%d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
	if c.ExpectedFailures > 0 || c.UnexpectedPasses > 0 {
		s += fmt.Sprintf(", %d expected failures (declared deviations), %d unexpected passes", c.ExpectedFailures, c.UnexpectedPasses)
	}
	return s
}

// ErrnoOf returns the errno an error wraps, or 0.
func ErrnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}
