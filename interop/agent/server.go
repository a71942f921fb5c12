package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Serve accepts connections on l and runs one request per connection
// until l is closed. logf, if not nil, reports each command and its exit.
func Serve(l net.Listener, logf func(format string, args ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go handle(c, logf)
	}
}

// frameWriter sends frames on a connection; output of stdout and stderr
// arrives from two goroutines, so writes are serialised.
type frameWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
	err error
}

func (w *frameWriter) send(f Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = w.enc.Encode(f)
	}
	return w.err
}

// streamWriter is an io.Writer for one output stream.
type streamWriter struct {
	fw   *frameWriter
	name string
}

func (s streamWriter) Write(p []byte) (int, error) {
	// The encoder copies p before returning, so the caller may reuse it.
	if err := s.fw.send(Frame{Stream: s.name, Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

func handle(c net.Conn, logf func(string, ...any)) {
	defer c.Close()
	var req Request
	dec := json.NewDecoder(c)
	if err := dec.Decode(&req); err != nil {
		logf("agent: bad request from %s: %v", c.RemoteAddr(), err)
		return
	}
	fw := &frameWriter{enc: json.NewEncoder(c)}
	// The client sends nothing after the request: a read that returns
	// means it closed the connection (or it broke), and the command must
	// not outlive it.
	gone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, io.MultiReader(dec.Buffered(), c))
		close(gone)
	}()
	var ex Exit
	if req.WaitListen != 0 {
		ex = waitListen(req, gone)
	} else {
		ex = run(req, fw, gone, logf)
	}
	_ = fw.send(Frame{Exit: &ex})
}

func waitListen(req Request, gone <-chan struct{}) Exit {
	start := time.Now()
	var deadline <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if ListeningHere(req.WaitListen) {
			return Exit{Code: 0, Elapsed: time.Since(start)}
		}
		select {
		case <-gone:
			return Exit{Code: 1, Err: "client went away", Elapsed: time.Since(start)}
		case <-deadline:
			return Exit{Code: 1, TimedOut: true, Elapsed: time.Since(start)}
		case <-tick.C:
		}
	}
}

func run(req Request, fw *frameWriter, gone <-chan struct{}, logf func(string, ...any)) Exit {
	start := time.Now()
	if len(req.Argv) == 0 {
		return Exit{Code: -1, Err: "empty argv"}
	}
	cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
	cmd.Env = append(os.Environ(), req.Env...)
	cmd.Dir = req.Dir
	if len(req.Stdin) > 0 {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	cmd.Stdout = streamWriter{fw, "out"}
	cmd.Stderr = streamWriter{fw, "err"}
	// Its own process group, so that killing it kills what it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A background child that keeps the output pipes open must not keep
	// Wait (and the client) waiting once the command itself has exited.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return Exit{Code: -1, Err: err.Error(), Elapsed: time.Since(start)}
	}
	pgid := cmd.Process.Pid
	logf("agent: [%d] start %q", pgid, req.Argv)
	kill := func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

	done := make(chan struct{})
	var timedOut, abandoned bool
	var mu sync.Mutex
	go func() {
		var deadline <-chan time.Time
		if req.Timeout > 0 {
			t := time.NewTimer(req.Timeout)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-done:
		case <-deadline:
			mu.Lock()
			timedOut = true
			mu.Unlock()
			kill()
		case <-gone:
			mu.Lock()
			abandoned = true
			mu.Unlock()
			kill()
		}
	}()
	err := cmd.Wait()
	close(done)
	// Whatever the command left behind in its group goes with it.
	kill()
	ex := Exit{Code: cmd.ProcessState.ExitCode(), Elapsed: time.Since(start)}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ex.Signal = ws.Signal().String()
	}
	mu.Lock()
	ex.TimedOut = timedOut
	if abandoned {
		ex.Err = "client went away"
	}
	mu.Unlock()
	if err != nil && ex.Code == 0 && ex.Signal == "" {
		// Wait's own failure (the output copy was cut short by WaitDelay).
		ex.Err = err.Error()
	}
	logf("agent: [%d] %s after %v", pgid, ex, ex.Elapsed.Round(time.Millisecond))
	return ex
}

// Logger returns a logf for Serve that writes to the standard logger.
func Logger() func(string, ...any) { return log.Printf }
