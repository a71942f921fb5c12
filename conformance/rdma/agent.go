package rdma

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // agent.c
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softhca/softhca/verbs"
)

//go:embed agent.c
var agentSource []byte

// verbsHeader is where libibverbs-dev installs verbs.h.
const verbsHeader = "/usr/include/infiniband/verbs.h"

// Prerequisites reports what building the agent needs and this machine
// lacks: a C compiler and libibverbs' header (Debian: gcc and
// libibverbs-dev). It returns nil when both are there.
func Prerequisites() error {
	var missing []string
	if _, err := compiler(); err != nil {
		missing = append(missing, "a C compiler (cc or gcc; Debian package gcc)")
	}
	if _, err := os.Stat(verbsHeader); err != nil {
		missing = append(missing, verbsHeader+" (Debian package libibverbs-dev)")
	}
	if missing != nil {
		return fmt.Errorf("rdma: building the verbs agent needs %s", strings.Join(missing, " and "))
	}
	return nil
}

func compiler() (string, error) {
	for _, cc := range []string{"cc", "gcc"} {
		if p, err := exec.LookPath(cc); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no cc or gcc in PATH")
}

var (
	buildMu    sync.Mutex
	builtAgent string // the path BuildAgent returned, for this process
)

// BuildAgent compiles the embedded agent.c, once per process and once per
// source version on the machine: the binary is cached in the user's cache
// directory under the source's hash. It returns the binary's path.
func BuildAgent() (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if builtAgent != "" {
		return builtAgent, nil
	}
	if err := Prerequisites(); err != nil {
		return "", err
	}
	sum := sha256.Sum256(agentSource)
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "softhca", "verbs-agent-"+hex.EncodeToString(sum[:8]))
	bin := filepath.Join(dir, "shca-verbs-agent")
	if _, err := os.Stat(bin); err == nil {
		builtAgent = bin
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("rdma: the agent's cache directory: %w", err)
	}
	src := filepath.Join(dir, "agent.c")
	if err := os.WriteFile(src, agentSource, 0o644); err != nil {
		return "", fmt.Errorf("rdma: writing agent.c: %w", err)
	}
	cc, _ := compiler()
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	out, err := exec.Command(cc, "-O2", "-Wall", "-Werror", "-o", tmp, src, "-libverbs").CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("rdma: building the verbs agent (%s -O2 -Wall -Werror -o shca-verbs-agent agent.c -libverbs; needs the Debian packages gcc and libibverbs-dev): %w\n%s", cc, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("rdma: installing the verbs agent: %w", err)
	}
	builtAgent = bin
	return bin, nil
}

// ErrAgentExited is wrapped by every error of a call whose agent is gone.
var ErrAgentExited = errors.New("the verbs agent exited")

// agent is one running shca-verbs-agent and the runner's end of its
// socket. Calls are serialised by mu: one request, one response. The
// goroutine started by start waits for the process and closes exited.
type agent struct {
	device string
	cmd    *exec.Cmd
	stderr *tail

	sock int // the runner's end of the socket; closed by close

	mu     sync.Mutex
	closed bool
	buf    []byte
	oob    []byte
	exited chan struct{}
	state  *os.ProcessState // set before exited is closed
	killed bool             // close killed it

	closeOnce sync.Once
	closeErr  error
}

// startAgent starts the agent binary at path on the libibverbs device,
// with env added to this process's environment, and checks its protocol
// version. It returns the agent and the device's async fd (a copy).
func startAgent(path, device string, env []string) (*agent, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, fmt.Errorf("rdma: socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "agent socket")
	a := &agent{device: device, stderr: &tail{max: 4096}, sock: fds[0],
		buf: make([]byte, maxMsg+1), oob: make([]byte, unix.CmsgSpace(4)), exited: make(chan struct{})}
	a.cmd = exec.Command(path, device)
	a.cmd.Env = append(os.Environ(), env...)
	a.cmd.ExtraFiles = []*os.File{theirs} // fd 3
	a.cmd.Stderr = a.stderr
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = a.cmd.Start()
	theirs.Close()
	if err != nil {
		unix.Close(fds[0])
		return nil, -1, fmt.Errorf("rdma: starting the verbs agent %s: %w", path, err)
	}
	go func() {
		_ = a.cmd.Wait()
		a.state = a.cmd.ProcessState
		close(a.exited)
	}()
	errno, d, fd, err := a.call(newRequest(opHello), -1)
	if err == nil && errno != 0 {
		err = fmt.Errorf("rdma: the verbs agent for %s: hello: %w", device, errno)
	}
	var v uint32
	if err == nil {
		v = d.u32("version")
		err = d.err
	}
	if err == nil && v != protoVersion {
		err = fmt.Errorf("rdma: the verbs agent %s speaks protocol %d, want %d", path, v, protoVersion)
	}
	if err == nil && fd < 0 {
		err = fmt.Errorf("rdma: the verbs agent for %s sent no async fd", device)
	}
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		a.close()
		return nil, -1, err
	}
	return a, fd, nil
}

// call sends a request, with fdIn (if not negative) as SCM_RIGHTS, and
// returns the response's errno, a decoder of its body and the fd that
// came with it (or -1). err is set when the exchange failed: the agent
// is gone or answered nonsense.
func (a *agent) call(req *encoder, fdIn int) (syscall.Errno, *decoder, int, error) {
	op := uint32(0)
	if len(req.b) >= 4 {
		op = binary.LittleEndian.Uint32(req.b)
	}
	if len(req.b) > maxMsg {
		return 0, nil, -1, verbs.Errorf(opName(op), syscall.E2BIG, "request of %d bytes is larger than the agent protocol's %d", len(req.b), maxMsg)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, nil, -1, fmt.Errorf("rdma: %s on %s: %w: the device is closed", opName(op), a.device, syscall.EBADF)
	}
	var oob []byte
	if fdIn >= 0 {
		oob = unix.UnixRights(fdIn)
	}
	for {
		err := unix.Sendmsg(a.sock, req.b, oob, nil, unix.MSG_NOSIGNAL)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, nil, -1, a.gone(op)
		}
		break
	}
	var n, oobn, flags int
	for {
		var err error
		n, oobn, flags, _, err = unix.Recvmsg(a.sock, a.buf, a.oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0, nil, -1, a.gone(op)
		}
		break
	}
	fd := -1
	if oobn > 0 {
		if msgs, err := unix.ParseSocketControlMessage(a.oob[:oobn]); err == nil {
			for _, m := range msgs {
				if fds, err := unix.ParseUnixRights(&m); err == nil {
					for _, f := range fds {
						if fd < 0 {
							fd = f
						} else {
							unix.Close(f)
						}
					}
				}
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > maxMsg {
		if fd >= 0 {
			unix.Close(fd)
		}
		return 0, nil, -1, fmt.Errorf("rdma: %s: %w: the agent's response was truncated", opName(op), syscall.EPROTO)
	}
	body := make([]byte, n)
	copy(body, a.buf[:n])
	errno, d, err := decodeHeader(body)
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return 0, nil, -1, fmt.Errorf("rdma: %s: %w", opName(op), err)
	}
	return errno, d, fd, nil
}

// gone describes a call that found the agent gone: its exit status and
// the end of its stderr. The agent closes its socket only by exiting, so
// the process is waited for (briefly: it may be a stuck child).
func (a *agent) gone(op uint32) error {
	select {
	case <-a.exited:
	case <-time.After(2 * time.Second):
	}
	return fmt.Errorf("rdma: %s on %s: %w: %s", opName(op), a.device, ErrAgentExited, a.status())
}

// status says whether the agent runs and how it ended, with the end of
// its stderr.
func (a *agent) status() string {
	var s string
	select {
	case <-a.exited:
		s = fmt.Sprintf("shca-verbs-agent %s (pid %d) %s", a.device, a.state.Pid(), a.state)
	default:
		s = fmt.Sprintf("shca-verbs-agent %s (pid %d) is running", a.device, a.cmd.Process.Pid)
	}
	if e := strings.TrimSpace(a.stderr.String()); e != "" {
		s += "; its stderr: " + e
	}
	return s
}

// close ends the agent: it shuts the socket down (which wakes a call
// waiting for a response and makes the agent exit), then reaps the
// process, killing it if it has not exited within five seconds. It
// returns an error if the agent had failed (not if close killed it).
func (a *agent) close() error {
	a.closeOnce.Do(func() {
		// The fd stays open until the call in flight (if any) returns.
		_ = unix.Shutdown(a.sock, unix.SHUT_RDWR)
		a.mu.Lock()
		a.closed = true
		unix.Close(a.sock)
		a.mu.Unlock()
		select {
		case <-a.exited:
		case <-time.After(5 * time.Second):
			a.killed = true
			_ = a.cmd.Process.Kill()
			<-a.exited
		}
		if !a.killed && !a.state.Success() {
			a.closeErr = fmt.Errorf("rdma: %w: %s", ErrAgentExited, a.status())
		}
	})
	return a.closeErr
}

// tail keeps the last max bytes written to it (the agent's stderr).
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.ToValidUTF8(t.b, []byte("?")))
}
