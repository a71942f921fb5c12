package main

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softhca/softhca/conformance"
	"github.com/softhca/softhca/conformance/rdma"
	"github.com/stretchr/testify/require"
)

func TestConformanceCommand(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"conformance", "-run", "^query_device/"}, &out, &errb)
	require.Equal(t, exitOK, code, "stderr: %s\nstdout: %s", errb.String(), out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	require.Regexp(t, `^[1-9]\d* passed, 0 failed, 0 skipped$`, last)
	require.Regexp(t, `(?m)^PASS +query_device/one-port +spec$`, out.String())

	out.Reset()
	code = run([]string{"conformance", "-run", "("}, &out, &errb)
	require.Equal(t, exitUsage, code)
	errb.Reset()
	code = run([]string{"conformance", "extra"}, &out, &errb)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errb.String(), `softhca conformance: unexpected argument "extra"`)
	errb.Reset()
	code = run([]string{"conformance", "-run", "^query_device/", ""}, &out, &errb)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errb.String(), `softhca conformance: unexpected argument ""`)
}

func TestConformanceTargetFlags(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "agent.c")
	require.NoError(t, os.WriteFile(plain, []byte("int main;\n"), 0o644))
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--target", "rxe0"}, `--target "rxe0": want softhca or rdma:DEVICE`},
		{[]string{"--target", "rdma:"}, `--target "rdma:": want softhca or rdma:DEVICE`},
		{[]string{"--agent", "/bin/true"}, `--agent, --lib and --port-addrs need --target rdma:DEVICE, not "softhca"`},
		{[]string{"--port-addrs", "10.0.0.1"}, `--agent, --lib and --port-addrs need --target rdma:DEVICE, not "softhca"`},
		{[]string{"--target", "rdma:rxe0", "--port-addrs", "10.0.0.1,10.0.0"}, `--port-addrs "10.0.0.1,10.0.0": "10.0.0" is not an IP address`},
		{[]string{"--target", "rdma:softhca0", "--lib", "build", "--port-addrs", "10.0.0.1"}, `--port-addrs: the drop-in library's addresses are set by --lib's devices`},
		{[]string{"--target", "rdma:softhca0", "--lib", "/nonexistent"}, `--lib "/nonexistent"`},
		{[]string{"--target", "rdma:rxe0", "--agent", filepath.Join(dir, "none")}, `--agent "` + filepath.Join(dir, "none") + `": stat ` + filepath.Join(dir, "none") + ": no such file or directory"},
		{[]string{"--target", "rdma:rxe0", "--agent", dir}, `--agent "` + dir + `": is a directory`},
		{[]string{"--target", "rdma:rxe0", "--agent", plain}, `--agent "` + plain + `": is not executable`},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"conformance"}, c.args...), &out, &errb)
		require.Equal(t, exitUsage, code, "%v", c.args)
		require.Contains(t, errb.String(), c.msg, "%v", c.args)
	}
}

// TestConformanceAgentPath: --agent names a file, so that a name without
// a slash is the file in the current directory; it was looked up in
// $PATH, so that "--agent dir" ran coreutils' dir as the agent, and
// "--agent shca-verbs-agent" said "executable file not found in $PATH"
// of the file right there.
func TestConformanceAgentPath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	require.NoError(t, os.WriteFile("shca-verbs-agent", []byte("#!/bin/sh\n"), 0o755))
	target, err := conformanceTarget("rdma:rxe0", "shca-verbs-agent", "", "")
	require.NoError(t, err)
	rt, ok := target.(*rdma.Target)
	require.True(t, ok)
	require.Equal(t, filepath.Join(dir, "shca-verbs-agent"), rt.Agent)

	require.NoError(t, os.Mkdir("dir", 0o755))
	_, err = conformanceTarget("rdma:rxe0", "dir", "", "")
	require.EqualError(t, err, `--agent "dir": is a directory, not a prebuilt shca-verbs-agent`)
}

// TestConformancePortAddrs checks that --port-addrs makes a target that
// tells the query_gid cases the port's addresses, in order, IPv4-mapped
// ones unmapped.
func TestConformancePortAddrs(t *testing.T) {
	target, err := conformanceTarget("rdma:rxe0", "", "", "10.77.0.2, ::ffff:10.1.2.3,2001:db8::5")
	require.NoError(t, err)
	at, ok := target.(conformance.AddrTarget)
	require.True(t, ok, "--port-addrs gives an AddrTarget")
	require.Equal(t, []netip.Addr{netip.MustParseAddr("10.77.0.2"), netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("2001:db8::5")}, at.PortAddrs())
	require.Equal(t, "rdma:rxe0", at.Name())
	plain, err := conformanceTarget("rdma:rxe0", "", "", "")
	require.NoError(t, err)
	_, ok = plain.(conformance.AddrTarget)
	require.False(t, ok, "without --port-addrs the addresses are unknown")
}
