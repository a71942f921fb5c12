// Package agent is the interop harness's command channel into the guest:
// a small server that runs in the guest (cmd/shca-agent) and a client the
// host uses to run commands there and collect their output and exit
// status while the VM stays up.
//
// # Why TCP
//
// The guest and the host already share a network (the bridge the RoCEv2
// traffic crosses), so the channel is one TCP connection per command to
// the guest's agent port. The alternatives were worse: polling command
// files on the 9p share costs CPU on every poll in an emulated guest and
// adds the poll interval to every command, and file semantics carry
// streaming output and "the host has gone" poorly; the serial console is
// one byte stream that would need multiplexing. With a connection per
// command, commands run concurrently (a guest server waits in one while the
// host's client runs), output streams as it is produced, and the
// connection is the command's lifetime: when the host closes it (its
// deadline passed, the test failed, the process died) the agent kills the
// command's whole process group, so nothing is left running in the guest.
// The agent port is TCP; the loss tests drop only UDP port 4791.
//
// # Protocol
//
// The client sends one JSON Request; the agent answers with a stream of
// JSON Frames: output chunks ("out", "err") as they come, then exactly one
// frame with Exit set, after which the agent closes the connection.
package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// DefaultPort is the TCP port the guest agent listens on.
const DefaultPort = 17070

// Request asks the agent to run a command, or (with WaitListen) to wait
// until something in the guest listens on a TCP port.
type Request struct {
	// Argv is the command and its arguments; Argv[0] is looked up in PATH.
	Argv []string `json:"argv,omitempty"`
	// Env is added to the agent's environment.
	Env []string `json:"env,omitempty"`
	// Dir is the working directory; empty means the agent's.
	Dir string `json:"dir,omitempty"`
	// Stdin is the command's standard input (empty: /dev/null).
	Stdin []byte `json:"stdin,omitempty"`
	// Timeout bounds the command: when it expires the agent kills the
	// command's process group and reports TimedOut. Zero means no limit
	// other than the connection's.
	Timeout time.Duration `json:"timeout,omitempty"`
	// WaitListen, when non-zero, makes the request a wait: the agent polls
	// /proc/net/tcp{,6} until a socket listens on this TCP port, then
	// answers with exit code 0, or 1 when Timeout expires first.
	WaitListen int `json:"wait_listen,omitempty"`
}

// Frame is one message from the agent.
type Frame struct {
	// Stream is "out" or "err" for an output chunk.
	Stream string `json:"s,omitempty"`
	// Data is the chunk.
	Data []byte `json:"d,omitempty"`
	// Exit is set on the last frame.
	Exit *Exit `json:"exit,omitempty"`
}

// Exit is how a command ended.
type Exit struct {
	// Code is the exit status, or -1 when the command was killed by a
	// signal or could not be started.
	Code int `json:"code"`
	// Signal names the signal that killed the command, if one did.
	Signal string `json:"signal,omitempty"`
	// TimedOut reports that the agent killed the command because
	// Request.Timeout expired.
	TimedOut bool `json:"timed_out,omitempty"`
	// Err says why the command could not run (not found, bad directory).
	Err string `json:"err,omitempty"`
	// Elapsed is the command's run time as the guest measured it.
	Elapsed time.Duration `json:"elapsed"`
}

// String describes the exit for failure messages: "exit 0",
// "killed by signal killed after timeout 30s", "could not start: ...".
func (e Exit) String() string {
	var s string
	switch {
	case e.Err != "":
		s = "could not run: " + e.Err
	case e.Signal != "":
		s = "killed by signal " + e.Signal
	default:
		s = "exit " + strconv.Itoa(e.Code)
	}
	if e.TimedOut {
		s += " (timed out)"
	}
	return s
}

// OK reports a zero exit status.
func (e Exit) OK() bool { return e.Code == 0 && e.Err == "" && e.Signal == "" && !e.TimedOut }

// Listening reports whether a TCP socket in state LISTEN has local port
// port, according to the /proc/net/tcp-format tables given.
func Listening(port int, tables ...[]byte) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, t := range tables {
		sc := bufio.NewScanner(bytes.NewReader(t))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			// sl local_address rem_address st ...
			if len(f) < 4 || f[0] == "sl" {
				continue
			}
			if strings.HasSuffix(f[1], want) && f[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// ListeningHere reports whether a local TCP socket listens on port, from
// this machine's /proc/net/tcp and /proc/net/tcp6.
func ListeningHere(port int) bool {
	var tables [][]byte
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if b, err := os.ReadFile(f); err == nil {
			tables = append(tables, b)
		}
	}
	return Listening(port, tables...)
}
