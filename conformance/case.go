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
	Passed Outcome = iota
	Failed
	Skipped
)

// String returns "PASS", "FAIL" or "SKIP".
func (o Outcome) String() string {
	return [...]string{"PASS", "FAIL", "SKIP"}[o]
}

// Result is the outcome of one case.
type Result struct {
	Case     Case
	Outcome  Outcome
	Messages []string // failure or skip reasons, with file:line
	Duration time.Duration
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
	defer func() {
		r = Result{Case: c, Duration: time.Since(start), Messages: t.messages}
		switch {
		case t.failed:
			r.Outcome = Failed
		case t.skipped:
			r.Outcome = Skipped
		default:
			r.Outcome = Passed
		}
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

// Summary counts outcomes: "N passed, N failed, N skipped".
func Summary(results []Result) (passed, failed, skipped int) {
	for _, r := range results {
		switch r.Outcome {
		case Passed:
			passed++
		case Failed:
			failed++
		case Skipped:
			skipped++
		}
	}
	return
}

// ErrnoOf returns the errno an error wraps, or 0.
func ErrnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}
