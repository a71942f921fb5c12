//go:build libibverbs

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The unmodified binaries of Debian's ibverbs-utils and perftest, run on
// the library: a server on 127.0.0.1 and a client on 127.0.0.2, two
// processes with a softhca device each.

type toolCase struct {
	name string
	bin  string
	args []string // both ends
	// port is the TCP port the server listens on for the exchange of
	// addresses (-p), distinct per case so that no case waits for
	// another's TIME_WAIT.
	port int
}

func toolCases() []toolCase {
	var cs []toolCase
	port := 18515
	add := func(bin string, args ...string) {
		name := bin
		if len(args) > 0 {
			name += "/" + strings.Join(args, "_")
		}
		port++
		cs = append(cs, toolCase{name: name, bin: bin, args: args, port: port})
	}
	// rdma-core's pingpongs: -g 1 is the IPv4 GID, -c checks the data.
	for _, bin := range []string{"ibv_rc_pingpong", "ibv_uc_pingpong"} {
		add(bin, "-g", "1", "-c")
		add(bin, "-g", "1", "-c", "-e")
		add(bin, "-g", "1", "-c", "-s", "65536", "-n", "200")
	}
	add("ibv_ud_pingpong", "-g", "1", "-c")
	add("ibv_ud_pingpong", "-g", "1", "-c", "-e")
	add("ibv_srq_pingpong", "-g", "1", "-c")
	add("ibv_srq_pingpong", "-g", "1", "-c", "-e")
	add("ibv_srq_pingpong", "-g", "1", "-c", "-q", "16")
	// perftest: -x 1 is the IPv4 GID.
	for _, bin := range []string{"ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_atomic_bw"} {
		add(bin, "-x", "1")
		add(bin, "-x", "1", "-q", "4")
		if bin != "ib_atomic_bw" {
			add(bin, "-x", "1", "-a", "-n", "200")
		}
	}
	add("ib_send_bw", "-x", "1", "-e")
	for _, bin := range []string{"ib_send_lat", "ib_write_lat", "ib_read_lat", "ib_atomic_lat"} {
		add(bin, "-x", "1")
		if bin != "ib_atomic_lat" {
			add(bin, "-x", "1", "-a", "-n", "100")
		}
	}
	add("ib_send_lat", "-x", "1", "-e")
	return cs
}

// TestTools runs each case: the server, then the client once the server
// listens; both must exit 0.
func TestTools(t *testing.T) {
	for _, c := range toolCases() {
		t.Run(c.name, func(t *testing.T) {
			path := lookTool(t, c.bin)
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			portArgs := []string{"-p", strconv.Itoa(c.port)}
			srv := exec.CommandContext(ctx, path, append(append([]string{}, c.args...), portArgs...)...)
			srv.Env = libEnv("127.0.0.1")
			var sout bytes.Buffer
			srv.Stdout, srv.Stderr = &sout, &sout
			require.NoError(t, srv.Start())
			srvDone := make(chan error, 1)
			go func() { srvDone <- srv.Wait() }()
			if err := waitListen(ctx, c.port, srvDone); err != nil {
				t.Fatalf("server never listened: %v\n%s", err, sout.String())
			}
			cli := exec.CommandContext(ctx, path, append(append(append([]string{}, c.args...), portArgs...), "127.0.0.1")...)
			cli.Env = libEnv("127.0.0.2")
			cout, cerr := cli.CombinedOutput()
			serr := <-srvDone
			elapsed := time.Since(start)
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v, server: %v\n--- client\n%s\n--- server\n%s", cerr, serr, cout, sout.String())
			}
			t.Logf("passed in %v\n%s", elapsed.Round(time.Millisecond), lastLines(string(cout), 3))
			report(c.name, elapsed)
		})
	}
}

// lookTool finds a tool, skipping the test without it, or failing it in
// CI (CI=true), which installs them.
func lookTool(t *testing.T, bin string) string {
	path, err := exec.LookPath(bin)
	if err != nil {
		msg := fmt.Sprintf("%s is not installed (apt-get install ibverbs-utils perftest)", bin)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}

// waitListen waits until a TCP socket listens on port (read from
// /proc/net/tcp: a test connection would be the server's one accept),
// or the server exits.
func waitListen(ctx context.Context, port int, done <-chan error) error {
	want := fmt.Sprintf(":%04X", port)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(bytes.NewReader(b))
			for sc.Scan() {
				fs := strings.Fields(sc.Text())
				// local_address is fs[1]; state 0A is LISTEN.
				if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
					return nil
				}
			}
		}
		select {
		case err := <-done:
			return fmt.Errorf("server exited: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// report appends a case's result to the file SOFTHCA_LIB_REPORT names.
func report(name string, d time.Duration) {
	f := os.Getenv("SOFTHCA_LIB_REPORT")
	if f == "" {
		return
	}
	fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer fh.Close()
	fmt.Fprintf(fh, "| %s | pass | %.2f s |\n", name, d.Seconds())
}

// TestDevinfo: ibv_devinfo -v prints the device's attributes from the
// library.
func TestDevinfo(t *testing.T) {
	path := lookTool(t, "ibv_devinfo")
	cmd := exec.Command(path, "-v")
	cmd.Env = libEnv("127.0.0.1", "SOFTHCA_DEVICE=softhca7", "SOFTHCA_MTU=1024")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	s := string(out)
	for _, want := range []string{
		"hca_id:\tsofthca7", "max_qp_wr:", "IBV_TM_CAP_RC", "max_num_tags:\t\t\t1024",
		"device_cap_flags:\t\t0x00003c76", "device_cap_flags_ex:\t\t0x3C76\n",
		"state:\t\t\tPORT_ACTIVE (4)", "active_mtu:\t\t1024 (3)", "link_layer:\t\tEthernet",
		"GID[  1]:\t\t::ffff:127.0.0.1, RoCE v2",
	} {
		require.Contains(t, s, want)
	}
	// Without SOFTHCA_ADDR there is no device, as on a machine without
	// RDMA hardware.
	cmd = exec.Command(path)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libDir, "SOFTHCA_ADDR=")
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "No IB devices found")
}
