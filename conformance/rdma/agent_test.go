package rdma

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/softhca/softhca/verbs"
)

// TestOpenMissingDevice: an agent that cannot open its device exits, and
// Open's error says so with the agent's own words.
func TestOpenMissingDevice(t *testing.T) {
	if err := Prerequisites(); err != nil {
		t.Skip(err)
	}
	_, err := (&Target{Device: "no-such-device9"}).Open()
	// The agent's message depends on the machine: "no device
	// no-such-device9 among ...", or ibv_get_device_list's ENOSYS
	// without any RDMA device.
	if !errors.Is(err, ErrAgentExited) || !strings.Contains(err.Error(), "its stderr: shca-verbs-agent: ") ||
		!strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("open of a missing device: %v; want an error naming the exited agent, its status and its message", err)
	}
}

// TestAgentDeath: when the agent dies, a blocked wait wakes, every call
// fails naming the agent and its exit status, nothing panics, and Close
// reaps it.
func TestAgentDeath(t *testing.T) {
	agent, lib := dropInLib(t)
	dev, err := DropInAt("softhca0", lib, agent, randomLoopback()).Open()
	if err != nil {
		t.Fatal(err)
	}
	d := dev.(*device)
	c, err := d.CreateCQ(4, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := d.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ch.GetEvent(context.Background())
		done <- err
	}()
	if err := d.ag.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	dead := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrAgentExited) || !strings.Contains(err.Error(), "signal: killed") {
			t.Errorf("%s after the agent was killed: %v; want an error wrapping ErrAgentExited with its status", what, err)
		}
	}
	dead("a blocked get_cq_event", <-done)
	_, err = d.AllocPD()
	dead("alloc_pd", err)
	dead("req_notify_cq", c.ReqNotify(false))
	_, err = d.QueryPort(1)
	dead("query_port", err)
	if n := c.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Errorf("poll_cq of a dead agent: %d completions", n)
	}
	if a := d.QueryDevice(); a != (verbs.DeviceAttr{}) {
		t.Errorf("query_device of a dead agent: %+v", a)
	}
	if s := d.TransportDiag(); !strings.Contains(s, "signal: killed") {
		t.Errorf("TransportDiag: %q, want the exit status", s)
	}
	dead("close", d.Close())
	if err := d.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := d.AllocPD(); !errors.Is(err, syscall.EBADF) {
		t.Errorf("alloc_pd after close: %v, want EBADF", err)
	}
}
