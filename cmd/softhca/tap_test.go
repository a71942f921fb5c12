package main

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMAC(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want [6]byte
		err  string
	}{
		{"02:00:0a:00:00:02", [6]byte{2, 0, 10, 0, 0, 2}, ""},
		{"02-AA-BB-CC-DD-EE", [6]byte{2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}, ""},
		{"0200.0a00.0002", [6]byte{2, 0, 10, 0, 0, 2}, ""},
		{"02:00:0a:00:00", [6]byte{}, "is not an Ethernet MAC address"},
		{"00:00:5e:00:53:00:00:01", [6]byte{}, "is not an Ethernet MAC address"}, // EUI-64
		{"nope", [6]byte{}, "is not an Ethernet MAC address"},
		{"00:00:00:00:00:00", [6]byte{}, "is not a unicast MAC address"},
		{"33:33:00:00:00:01", [6]byte{}, "is not a unicast MAC address"},
	} {
		got, err := parseMAC(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

// tapHint names what the machine lacks for the errors that mean it lacks
// something, and says nothing for other errors or errors that did not
// come from opening a TAP link.
func TestTapHint(t *testing.T) {
	wrap := func(err error) error {
		return fmt.Errorf("Couldn't get context for softhca0: 10.9.0.2:4791: %w", &tapOpenError{fmt.Errorf("link/tap: creating TAP interface t: %w", err)})
	}
	for _, errno := range []syscall.Errno{syscall.EPERM, syscall.EACCES} {
		h := tapHint(wrap(errno))
		require.Contains(t, h, "needs root, or CAP_NET_ADMIN and read-write access to /dev/net/tun", errno)
		require.Contains(t, h, "--cap-add NET_ADMIN --device /dev/net/tun", errno)
		require.Contains(t, h, "without CAP_NET_ADMIN, use a TAP interface made for you beforehand: ip tuntap add mode tap user $USER name NAME; ip link set NAME up", errno)
	}
	for _, errno := range []syscall.Errno{syscall.ENOENT, syscall.ENODEV} {
		require.Contains(t, tapHint(wrap(errno)), "needs the TUN/TAP driver's /dev/net/tun: modprobe tun", errno)
	}
	require.Empty(t, tapHint(wrap(syscall.EINVAL)))
	require.Empty(t, tapHint(fmt.Errorf("UDP: %w", syscall.EPERM)), "not from a TAP link")
	require.Empty(t, tapHint(nil))
}

// The commands open the TAP link --tap names: an interface that exists
// and is not a TAP is refused (no privileges are needed to find that
// out), and the command fails with link/tap's reason.
func TestTapNotATap(t *testing.T) {
	code, stdout, stderr := runCmd(t, "pingpong", "rc", "-g", "1", "--tap", "lo", "--addr", "10.9.0.2")
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Equal(t, "Couldn't get context for softhca0: 10.9.0.2:4791: link/tap: lo exists and is not a TUN/TAP interface: invalid argument\n", stderr)

	// The demo's -tap-name.
	code, stdout, stderr = runCmd(t, "demo", "-tap", "-tap-name", "lo")
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Equal(t, "softhca demo: FAILED: device A: link/tap: lo exists and is not a TUN/TAP interface: invalid argument\n", stderr)
	require.Empty(t, stdout)

	// perf makes the exchange connection first, then opens the device:
	// the server fails once a client came, and the client with it.
	listening := make(chan net.Addr, 1)
	perfListening = func(a net.Addr) { listening <- a }
	defer func() { perfListening = nil }()
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() {
		done <- runPerf([]string{"write", "-p", "0", "--tap", "lo", "--addr", "10.9.0.2", "--timeout", "20s"}, &out, &errb)
	}()
	a := (<-listening).(*net.TCPAddr)
	var cout, cerr bytes.Buffer
	ccode := runPerf([]string{"write", "-p", strconv.Itoa(a.Port), "--addr", "127.0.0.1:0", "--timeout", "20s", "127.0.0.1"}, &cout, &cerr)
	code = <-done
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", &out, &errb)
	require.Contains(t, errb.String(), "softhca perf ib_write_bw: cannot open the device's link on 10.9.0.2: link/tap: lo exists and is not a TUN/TAP interface: invalid argument\n")
	require.Equal(t, exitFailure, ccode, "the client fails with the server: stdout:\n%s\nstderr:\n%s", &cout, &cerr)
}
