//go:build interop

package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softhca/softhca/interop/agent"
)

// env is the harness's one guest for the whole run, set up by the first
// test that needs it and torn down by TestMain.
type env struct {
	dir     string // run directory: logs, pcaps, the report
	img     *Image
	net     Net
	vm      *VM
	gidx    int    // rxe0's RoCEv2 GID index
	softhca string // the softhca binary
	// libErr is why softhca's drop-in libibverbs.so.1 (built into dir)
	// could not be built; nil when it was.
	libErr  error
	cmds    string // softhca's command list (softhca help)
	tapQLen int    // the tap's txqueuelen, as read back once qemu attached

	mu        sync.Mutex
	results   []caseResult
	shcaStats Counters  // softhca's counters summed over the exchanges that reported them
	port      int       // next TCP port for an exchange
	budget    time.Time // cases that start after this fail at once
	began     time.Time
	setup     time.Duration
}

// caseResult is one row of the final report.
type caseResult struct {
	Name     string
	Passed   bool
	Skipped  bool
	Duration time.Duration
	Note     string
}

var (
	envOnce sync.Once
	theEnv  *env
	envErr  error
	envSkip bool // envErr is a missing prerequisite, not a failure
)

// inCI reports whether the run must not skip (CI=true).
func inCI() bool { return os.Getenv("CI") == "true" }

// getEnv returns the running guest, setting it up on first use. A missing
// prerequisite skips the test (fails it in CI); a broken set-up fails it.
func getEnv(t *testing.T) *env {
	t.Helper()
	envOnce.Do(func() { theEnv, envErr = newEnv() })
	if envErr != nil {
		if envSkip && !inCI() {
			t.Skip(envErr)
		}
		t.Fatal(envErr)
	}
	return theEnv
}

// missingPrereqs lists what the harness needs and this machine lacks.
func missingPrereqs() []string {
	var miss []string
	if os.Geteuid() != 0 {
		miss = append(miss, "root (the harness creates a bridge and a tap)")
	}
	miss = append(miss, MissingVMTools()...)
	miss = append(miss, MissingNetTools()...)
	miss = append(miss, MissingImageTools()...)
	if _, err := lookPath("tc"); err != nil {
		miss = append(miss, "tc (iproute2)")
	}
	return miss
}

func newEnv() (*env, error) {
	start := time.Now()
	if miss := missingPrereqs(); len(miss) > 0 {
		envSkip = true
		msg := "interop harness needs: " + strings.Join(miss, "; ")
		if len(miss) > 1 || os.Geteuid() == 0 {
			msg += "\n(on Debian 12: apt-get update && apt-get install -y --no-install-recommends " + strings.Join(HostPackages, " ") + ")"
		}
		return nil, errors.New(msg)
	}
	e := &env{port: 18600, began: start, budget: start.Add(15 * time.Minute)}
	if v := os.Getenv("SOFTHCA_INTEROP_BUDGET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("SOFTHCA_INTEROP_BUDGET=%q: %w", v, err)
		}
		e.budget = start.Add(d)
	}
	e.dir = os.Getenv("SOFTHCA_INTEROP_DIR")
	if e.dir == "" {
		d, err := os.MkdirTemp("", "softhca-interop-run-")
		if err != nil {
			return nil, err
		}
		e.dir = d
	}
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return nil, err
	}
	logf("run directory %s", e.dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var err error
	e.img, err = BuildImage(ctx, ImageConfig{Log: logWriter{}})
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	agentBin, err := BuildAgent(ctx, e.dir)
	if err != nil {
		return nil, err
	}
	e.softhca = filepath.Join(e.dir, "softhca")
	if out, err := goCmd(ctx, "build", "-o", e.softhca, "github.com/softhca/softhca/cmd/softhca").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building softhca: %w\n%s", err, out)
	}
	e.libErr = buildLibibverbs(ctx, e.dir)
	help, _ := exec.CommandContext(ctx, e.softhca, "help").CombinedOutput()
	e.cmds = string(help)
	logf("built the guest agent and softhca in %v", time.Since(t0).Round(time.Millisecond))

	e.net = Slot(0)
	if v := os.Getenv("SOFTHCA_INTEROP_SLOT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 255 {
			return nil, fmt.Errorf("SOFTHCA_INTEROP_SLOT=%q: want a number 0..255", v)
		}
		e.net = Slot(n)
	}
	if err := e.net.Up(ctx); err != nil {
		return nil, err
	}
	e.vm, err = StartVM(ctx, VMConfig{Image: e.img, Net: e.net, Dir: filepath.Join(e.dir, "vm"), Agent: agentBin,
		Accel: os.Getenv("SOFTHCA_INTEROP_ACCEL")})
	if err != nil {
		e.net.Down()
		return nil, err
	}
	logf("guest booted in %v (kernel %s)", e.vm.BootTime.Round(time.Millisecond), e.vm.Kernel)
	// The cases run at the tap queue a real interface has (a txqueuelen
	// of 1000): a sender that outruns the guest loses packets there.
	if e.tapQLen, err = e.net.TapQueueLen(); err != nil {
		e.close()
		return nil, fmt.Errorf("the tap %s's txqueuelen: %w", e.net.Tap, err)
	}
	if e.tapQLen != e.net.TxQueueLen {
		e.close()
		return nil, fmt.Errorf("the tap %s's txqueuelen is %d, want %d", e.net.Tap, e.tapQLen, e.net.TxQueueLen)
	}
	logf("tap %s: txqueuelen %d", e.net.Tap, e.tapQLen)
	e.gidx, err = e.vm.SetupRXE(ctx)
	if err != nil {
		e.close()
		return nil, err
	}
	e.setup = time.Since(start)
	logf("rxe0 ready, RoCEv2 GID index %d; set-up took %v", e.gidx, e.setup.Round(time.Millisecond))
	return e, nil
}

// close stops the guest and removes the network.
func (e *env) close() {
	if e.vm != nil {
		e.vm.Stop()
	}
	Loss{Dev: e.net.Tap}.Remove()
	e.net.Down()
}

// buildLibibverbs builds softhca's drop-in libibverbs.so.1 into dir, as
// make libibverbs does.
func buildLibibverbs(ctx context.Context, dir string) error {
	_, self, _, _ := runtime.Caller(0)
	mapFile := filepath.Join(filepath.Dir(self), "..", "libibverbs", "libibverbs.map")
	ld := "-extldflags '-Wl,--version-script=" + mapFile + " -Wl,-soname,libibverbs.so.1'"
	cmd := goCmd(ctx, "build", "-tags", "libibverbs", "-buildmode=c-shared", "-ldflags", ld,
		"-o", filepath.Join(dir, "libibverbs.so.1"), "github.com/softhca/softhca/libibverbs")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building libibverbs.so.1 (needs gcc and libibverbs-dev): %w\n%s", err, out)
	}
	return nil
}

// goCmd runs the go command: go test puts its own $GOROOT/bin first in
// the test's PATH (go.dev/issue/51473), so "go" is the toolchain that
// runs the test.
func goCmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "go", args...)
}

// logf prints a progress line to stderr (go test shows it as it happens,
// unlike t.Log).
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "interop: "+format+"\n", args...)
}

type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	os.Stderr.Write([]byte("interop: "))
	return os.Stderr.Write(p)
}

// nextPort returns a fresh TCP port for an exchange.
func (e *env) nextPort() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.port++
	return e.port
}

// record adds a case to the report when the (sub)test ends.
func (e *env) record(t *testing.T, start time.Time, note *string) {
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		r := caseResult{Name: t.Name(), Passed: !t.Failed(), Skipped: t.Skipped(), Duration: time.Since(start)}
		if note != nil {
			r.Note = *note
		}
		e.results = append(e.results, r)
	})
}

// addSofthca adds an exchange's softhca counters to the run's total.
func (e *env) addSofthca(c Counters) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shcaStats == nil {
		e.shcaStats = Counters{}
	}
	e.shcaStats.Add(c)
}

// finalCounters describes rxe0's counters since boot and softhca's summed
// over the run.
func (e *env) finalCounters(ctx context.Context) string {
	var b strings.Builder
	if c, err := e.vm.RXECounters(ctx); err != nil {
		fmt.Fprintf(&b, "rxe0 counters: %v\n", err)
	} else {
		delete(c, "lifespan")
		fmt.Fprintf(&b, "rxe0 hw_counters after the run: %s\n", c)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.shcaStats) == 0 {
		b.WriteString("softhca counters: none reported\n")
	} else {
		fmt.Fprintf(&b, "softhca counters (summed over the exchanges that reported them): %s\n", e.shcaStats)
	}
	return b.String()
}

// hasCommand reports whether the softhca binary offers a command.
func (e *env) hasCommand(name string) bool {
	for _, l := range strings.Split(e.cmds, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// hostProc is a softhca process on the host.
type hostProc struct {
	argv []string
	cmd  *exec.Cmd
	out  bytes.Buffer // stdout and stderr, interleaved
	done chan struct{}
	err  error
}

// startHost starts the softhca binary with args; it is killed (its whole
// process group) after timeout.
func (e *env) startHost(timeout time.Duration, env []string, args ...string) (*hostProc, error) {
	p := &hostProc{argv: append([]string{"softhca"}, args...), done: make(chan struct{})}
	p.cmd = exec.Command(e.softhca, args...)
	p.cmd.Env = append(os.Environ(), env...)
	w := &syncWriter{b: &p.out}
	p.cmd.Stdout = w
	p.cmd.Stderr = w
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	timer := time.AfterFunc(timeout, func() { p.kill() })
	go func() {
		p.err = p.cmd.Wait()
		timer.Stop()
		close(p.done)
	}()
	return p, nil
}

func (p *hostProc) kill() { syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

// wait waits for the process and describes how it ended.
func (p *hostProc) wait() (ok bool, status string, out string) {
	<-p.done
	status = "exit 0"
	if p.err != nil {
		status = p.err.Error()
	}
	return p.err == nil, status, p.output()
}

func (p *hostProc) output() string {
	w := p.cmd.Stdout.(*syncWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return p.out.String()
}

func (p *hostProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// waitHostListen waits until the host process listens on TCP port, or
// exits, or timeout passes.
func waitHostListen(p *hostProc, port int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !agent.ListeningHere(port) {
		if p.exited() {
			_, st, out := p.wait()
			return fmt.Errorf("%s exited (%s) before listening on TCP port %d:\n%s", strings.Join(p.argv, " "), st, port, out)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s does not listen on TCP port %d after %v:\n%s", strings.Join(p.argv, " "), port, timeout, p.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// guestAddr is the guest's IP address.
func (e *env) guestAddr() netip.Addr { return e.net.Guest.Addr() }

// hostAddr is the host's (softhca's) IP address.
func (e *env) hostAddr() netip.Addr { return e.net.Host.Addr() }

// report prints the per-case results, the timings and the counters.
func (e *env) report() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "interop report: image %s (kernel %s, %d packages, %v), guest boot %v, set-up %v, total %v; tap %s txqueuelen %d\n",
		e.img.Key, e.img.KernelVersion, len(e.img.Debs), e.img.BuildTime.Round(time.Millisecond),
		e.vm.BootTime.Round(time.Millisecond), e.setup.Round(time.Millisecond), time.Since(e.began).Round(time.Second),
		e.net.Tap, e.tapQLen)
	pass, fail, skip := 0, 0, 0
	for _, r := range e.results {
		st := "PASS"
		switch {
		case r.Skipped:
			st = "SKIP"
			skip++
		case !r.Passed:
			st = "FAIL"
			fail++
		default:
			pass++
		}
		fmt.Fprintf(&b, "%-4s %7.2fs  %s", st, r.Duration.Seconds(), r.Name)
		if r.Note != "" {
			fmt.Fprintf(&b, "  [%s]", r.Note)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "%d passed, %d failed, %d skipped\n", pass, fail, skip)
	// Time per group (the name up to the role: TestInterop/pingpong/mtu1024/rc).
	var groups []string
	sum := map[string]time.Duration{}
	count := map[string]int{}
	for _, r := range e.results {
		parts := strings.Split(r.Name, "/")
		g := strings.Join(parts[:min(len(parts), 4)], "/")
		if len(parts) > 2 && parts[1] != "pingpong" {
			g = strings.Join(parts[:2], "/")
		}
		if count[g] == 0 {
			groups = append(groups, g)
		}
		sum[g] += r.Duration
		count[g]++
	}
	for _, g := range groups {
		fmt.Fprintf(&b, "  %-36s %3d cases %7.1fs\n", g, count[g], sum[g].Seconds())
	}
	return b.String()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if theEnv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		counters := theEnv.finalCounters(ctx)
		cancel()
		rep := theEnv.report() + counters
		fmt.Fprint(os.Stderr, "\n"+rep)
		os.WriteFile(filepath.Join(theEnv.dir, "report.txt"), []byte(rep), 0o644)
		theEnv.close()
		// The binaries are rebuilt every run; the logs, captures and
		// report stay.
		for _, f := range []string{theEnv.softhca, filepath.Join(theEnv.dir, "shca-agent"), filepath.Join(theEnv.dir, "vm", "share", "shca-agent")} {
			os.Remove(f)
		}
		fmt.Fprintf(os.Stderr, "interop: logs, captures of failed cases and report.txt in %s\n", theEnv.dir)
	}
	os.Exit(code)
}

// noCache keeps go test from caching the result: a run of the harness
// tests softhca against a live guest and must run every time, even
// without -count=1. go test does not cache a run that read a file of the
// module modified in its last two seconds, so write one (.lastrun, which
// .gitignore lists) and read it back as the last thing the test does.
func noCache() {
	f := ".lastrun" // the test runs in the package directory
	if err := os.WriteFile(f, []byte(time.Now().Format(time.RFC3339Nano)+"\n"), 0o644); err == nil {
		os.ReadFile(f)
	}
}
