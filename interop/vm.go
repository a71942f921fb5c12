package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/softhca/softhca/interop/agent"
)

// VMConfig describes a guest to boot.
type VMConfig struct {
	Image *Image
	Net   Net
	// Dir is the VM's run directory: the 9p share (Dir/share, /host in the
	// guest), the serial console log, qemu's own output and the state
	// file the vm command reads.
	Dir string
	// Agent is the guest agent binary (built by BuildAgent); it is copied
	// into the share, where the guest's /init finds it.
	Agent string
	// MemMB is the guest's memory (default 1024).
	MemMB int
	// Accel is qemu's accelerator: "tcg" (the default; a stock guest
	// kernel does not run under KVM on the machines this was written on)
	// or "kvm".
	Accel string
	// BootTimeout bounds the wait for the guest's agent (default 120 s).
	BootTimeout time.Duration
}

// VM is a running guest.
type VM struct {
	// State is what the vm command needs to find the guest again.
	State
	// Agent runs commands in the guest.
	Agent *agent.Client
	// BootTime is from starting qemu to the agent's first answer.
	BootTime time.Duration

	cmd    *exec.Cmd     // nil when attached from a state file
	exited chan struct{} // closed when cmd has been waited for
}

// State is a running VM's description, saved as Dir/vm.json.
type State struct {
	PID     int       `json:"pid"`
	Dir     string    `json:"dir"`
	Net     Net       `json:"net"`
	Agent   string    `json:"agent"` // the agent's TCP address
	Kernel  string    `json:"kernel"`
	Started time.Time `json:"started"`
}

// MissingVMTools says what booting a guest needs and the host lacks.
func MissingVMTools() []string {
	var miss []string
	if _, err := lookPath("qemu-system-x86_64"); err != nil {
		miss = append(miss, "qemu-system-x86_64 (qemu-system-x86)")
	}
	return miss
}

// BuildAgent builds the guest agent (static, for linux/amd64) into dir and
// returns its path. It must run inside the softhca module.
func BuildAgent(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "shca-agent")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "github.com/softhca/softhca/interop/cmd/shca-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the guest agent: %w\n%s", err, b)
	}
	return out, nil
}

// StartVM boots a guest and waits until its agent answers. The network
// must be up. The qemu process is in its own session, so it survives the
// caller's exit when the caller does not stop it (the vm command relies on
// that); the State in Dir/vm.json finds it again.
func StartVM(ctx context.Context, cfg VMConfig) (*VM, error) {
	if cfg.MemMB == 0 {
		cfg.MemMB = 1024
	}
	if cfg.Accel == "" {
		cfg.Accel = "tcg"
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 120 * time.Second
	}
	share := filepath.Join(cfg.Dir, "share")
	if err := os.MkdirAll(share, 0o755); err != nil {
		return nil, err
	}
	if err := copyFile(cfg.Agent, filepath.Join(share, "shca-agent"), 0o755); err != nil {
		return nil, err
	}
	qemu, err := lookPath("qemu-system-x86_64")
	if err != nil {
		return nil, err
	}
	cpu := "max"
	if cfg.Accel == "kvm" {
		cpu = "host"
	}
	console := filepath.Join(cfg.Dir, "console.log")
	args := []string{
		"-name", "softhca-interop-" + cfg.Net.Tap,
		"-nodefaults", "-no-user-config",
		"-accel", cfg.Accel, "-cpu", cpu, "-m", strconv.Itoa(cfg.MemMB), "-smp", "1",
		"-kernel", cfg.Image.Kernel, "-initrd", cfg.Image.Initrd,
		"-append", fmt.Sprintf("console=ttyS0 quiet panic=-1 shca.ip=%s shca.mtu=%d", cfg.Net.Guest, cfg.Net.MTU),
		"-display", "none", "-serial", "file:" + console, "-no-reboot",
		"-netdev", "tap,id=n0,ifname=" + cfg.Net.Tap + ",script=no,downscript=no",
		"-device", "virtio-net-pci,netdev=n0,mac=" + cfg.Net.GuestMAC(),
		"-virtfs", "local,path=" + share + ",mount_tag=host,security_model=none,id=host",
	}
	qlog, err := os.Create(filepath.Join(cfg.Dir, "qemu.log"))
	if err != nil {
		return nil, err
	}
	defer qlog.Close()
	cmd := exec.Command(qemu, args...)
	cmd.Stdout = qlog
	cmd.Stderr = qlog
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting qemu: %w", err)
	}
	v := &VM{
		State: State{
			PID: cmd.Process.Pid, Dir: cfg.Dir, Net: cfg.Net,
			Agent:   net.JoinHostPort(cfg.Net.Guest.Addr().String(), strconv.Itoa(agent.DefaultPort)),
			Kernel:  cfg.Image.KernelVersion,
			Started: start,
		},
		cmd:    cmd,
		exited: make(chan struct{}),
	}
	v.Agent = &agent.Client{Addr: v.State.Agent}
	go func() { cmd.Wait(); close(v.exited) }()
	if err := v.waitAgent(ctx, cfg.BootTimeout); err != nil {
		v.Stop()
		return nil, err
	}
	v.BootTime = time.Since(start)
	b, _ := json.MarshalIndent(v.State, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.Dir, "vm.json"), b, 0o644); err != nil {
		v.Stop()
		return nil, err
	}
	return v, nil
}

// waitAgent polls the agent until it runs a command, qemu exits or the
// timeout expires.
func (v *VM) waitAgent(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	probe := &agent.Client{Addr: v.State.Agent, DialTimeout: time.Second}
	lastErr := errors.New("no probe was sent")
	for time.Now().Before(deadline) {
		if !v.Running() {
			return fmt.Errorf("qemu exited while the guest was booting\n%s", v.Diagnostics())
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := probe.Run(pctx, agent.Request{Argv: []string{"true"}})
		cancel()
		if err == nil && !r.Exit.OK() {
			err = fmt.Errorf("true: %v", r.Exit)
		}
		if err == nil {
			return nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return fmt.Errorf("the guest agent at %s did not answer within %v (last error: %w)\n%s",
		v.State.Agent, timeout, lastErr, v.Diagnostics())
}

// Attach finds the VM whose state is in dir (started by StartVM, possibly
// by another process).
func Attach(dir string) (*VM, error) {
	b, err := os.ReadFile(filepath.Join(dir, "vm.json"))
	if err != nil {
		return nil, fmt.Errorf("no VM state in %s: %w", dir, err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s/vm.json: %w", dir, err)
	}
	v := &VM{State: st, Agent: &agent.Client{Addr: st.Agent}}
	return v, nil
}

// Running reports whether the VM's qemu process is alive.
func (v *VM) Running() bool {
	if v.cmd != nil {
		select {
		case <-v.exited:
			return false
		default:
			return true
		}
	}
	return isQemu(v.PID, v.Net.Tap)
}

// isQemu reports whether pid is a live qemu started for tap (a pid from
// a state file may have been reused).
func isQemu(pid int, tap string) bool {
	cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(st), ") Z ") {
		return false
	}
	return strings.Contains(string(cl), "softhca-interop-"+tap+"\x00")
}

// Stop ends the VM: SIGTERM to qemu (the guest runs from an initramfs and
// has nothing to save), SIGKILL if it has not exited 5 s later.
func (v *VM) Stop() error {
	if !v.Running() {
		return nil
	}
	syscall.Kill(v.PID, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for v.Running() {
		if time.Now().After(deadline) {
			syscall.Kill(v.PID, syscall.SIGKILL)
			deadline = time.Now().Add(5 * time.Second)
		}
		if v.cmd != nil {
			select {
			case <-v.exited:
			case <-time.After(50 * time.Millisecond):
			}
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	os.Remove(filepath.Join(v.Dir, "vm.json"))
	return nil
}

// Diagnostics returns the tail of the serial console and qemu's output.
func (v *VM) Diagnostics() string {
	var b strings.Builder
	for _, f := range []string{"console.log", "qemu.log"} {
		data, err := os.ReadFile(filepath.Join(v.Dir, f))
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", f, err)
			continue
		}
		fmt.Fprintf(&b, "--- %s (last 3000 bytes) ---\n%s\n", f, lastBytes(data, 3000))
	}
	return b.String()
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		return "..." + string(b[len(b)-n:])
	}
	return string(b)
}

// Run runs argv in the guest with a timeout and returns its result; err
// is set when the command did not exit 0, with its output.
func (v *VM) Run(ctx context.Context, timeout time.Duration, argv ...string) (agent.Result, error) {
	r, err := v.Agent.Run(ctx, agent.Request{Argv: argv, Timeout: timeout})
	if err != nil {
		return r, err
	}
	if !r.Exit.OK() {
		return r, fmt.Errorf("guest: %s: %s\n%s", strings.Join(argv, " "), r.Exit, r.Output(4000))
	}
	return r, nil
}

// Sh runs a bash script in the guest (see Run).
func (v *VM) Sh(ctx context.Context, timeout time.Duration, script string) (agent.Result, error) {
	return v.Run(ctx, timeout, "bash", "-c", script)
}

// ErrNoVM is returned by the vm command's helpers when no VM runs.
var ErrNoVM = errors.New("no VM is running")
