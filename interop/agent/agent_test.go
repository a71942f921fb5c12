package agent

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serve starts an agent on a loopback port and returns a client for it.
func serve(t *testing.T) *Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go Serve(l, t.Logf)
	t.Cleanup(func() { l.Close() })
	return &Client{Addr: l.Addr().String()}
}

func TestRunOutputAndStatus(t *testing.T) {
	c := serve(t)
	r, err := c.Run(context.Background(), Request{
		Argv:  []string{"sh", "-c", "echo out; echo err >&2; cat; exit 3"},
		Stdin: []byte("in\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(r.Stdout), "out\nin\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := string(r.Stderr), "err\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
	if r.Exit.Code != 3 || r.Exit.OK() {
		t.Errorf("exit = %+v, want code 3 and not OK", r.Exit)
	}
}

func TestRunNotFound(t *testing.T) {
	c := serve(t)
	r, err := c.Run(context.Background(), Request{Argv: []string{"/nonexistent/cmd"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Exit.Err == "" || r.Exit.OK() {
		t.Errorf("exit = %+v, want a start error", r.Exit)
	}
}

// TestTimeoutKillsGroup checks that the agent's timeout kills the command
// and what it started in the background.
func TestTimeoutKillsGroup(t *testing.T) {
	c := serve(t)
	pidFile := t.TempDir() + "/pid"
	r, err := c.Run(context.Background(), Request{
		Argv:    []string{"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; wait"},
		Timeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Exit.TimedOut || r.Exit.Signal == "" {
		t.Errorf("exit = %+v, want timed out and killed by a signal", r.Exit)
	}
	checkGone(t, pidFile)
}

// TestCloseKillsCommand checks that abandoning a command kills it.
func TestCloseKillsCommand(t *testing.T) {
	c := serve(t)
	pidFile := t.TempDir() + "/pid"
	p, err := c.Start(context.Background(), Request{
		Argv: []string{"sh", "-c", "echo $$ > " + pidFile + "; echo ready; exec sleep 60"},
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(string(p.Stdout()), "ready") {
		if time.Now().After(deadline) {
			t.Fatal("command did not print ready within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Close()
	if _, err := p.Wait(); err == nil {
		t.Error("Wait after Close: want an error (no exit status), got nil")
	}
	checkGone(t, pidFile)
}

func checkGone(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		// Gone, or a zombie waiting for its (test process) parent.
		if err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running 5 s after its command was killed", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWaitListen(t *testing.T) {
	c := serve(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if err := c.WaitListen(context.Background(), port, 2*time.Second); err != nil {
		t.Errorf("WaitListen on a listening port: %v", err)
	}
	// A port nobody listens on (the listener's, once closed).
	l.Close()
	if err := c.WaitListen(context.Background(), port, 100*time.Millisecond); err == nil {
		t.Errorf("WaitListen on closed port %d: want an error, got nil", port)
	}
}

func TestListeningParsesProcNetTCP(t *testing.T) {
	table := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:4A63 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0200A8C0:4A64 0100A8C0:D431 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
`)
	if !Listening(0x4A63, table) {
		t.Error("port 0x4A63 is in LISTEN (0A): want true")
	}
	if Listening(0x4A64, table) {
		t.Error("port 0x4A64 is ESTABLISHED (01): want false")
	}
}
