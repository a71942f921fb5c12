//go:build libibverbs

package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// abiAddr is the address TestABI's program binds: TestTools uses
// 127.0.0.1 and 127.0.0.2.
const abiAddr = "127.0.0.3"

// TestABI compiles testdata/abi.c against the system's verbs.h and runs it
// on the library: it calls every exported function, with bad arguments
// too, and checks the results against rdma-core's documented behaviour
// (TAP output, non-zero exit if a check fails).
func TestABI(t *testing.T) {
	text := runTAP(t, "abi.c", abiAddr)
	// The program ran on softhca's library, not the system's.
	require.Contains(t, text, "\n# device: softhca0\n", "the first device is not softhca0:\n%s", text)
	require.Contains(t, text, "\n# library: "+filepath.Join(libDir, "libibverbs.so.1")+"\n",
		"the program did not bind the library under test:\n%s", text)
	t.Logf("abi output:\n%s", text)
}

// TestThreads runs testdata/threads.c on the library: threads that each
// ping-pong on their own QPs of one device, two threads posting to one
// QP while a third polls, and a thread creating and destroying objects
// on the same PD all the while; every message is checked.
func TestThreads(t *testing.T) {
	text := runTAP(t, "threads.c", threadsAddr, "-pthread")
	t.Logf("threads output:\n%s", text)
}

// threadsAddr is TestThreads' address (TestABI has 127.0.0.3).
const threadsAddr = "127.0.0.4"

// runTAP compiles testdata/src with gcc against the system's verbs.h,
// runs it on the library with a device on addr, and fails the test with
// the failed checks and the whole output unless it exits 0 after
// printing its TAP plan. The program must have bound softhca's library.
func runTAP(t *testing.T, src, addr string, cflags ...string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, strings.TrimSuffix(src, ".c"))
	args := append([]string{"-Wall", "-Werror"}, cflags...)
	args = append(args, "-o", bin, filepath.Join("testdata", src), "-libverbs")
	out, err := exec.Command("gcc", args...).CombinedOutput()
	require.NoError(t, err, "gcc testdata/%s:\n%s", src, out)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, bin)
	run.Env = libEnv(addr)
	run.Dir = dir
	out, err = run.CombinedOutput()
	text := string(out)
	if strings.Contains(text, "Bail out!") {
		t.Fatalf("%s bailed out (did it bind softhca's library?):\n%s", src, text)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err() // killed: the last line shows where it hung
		}
		var failed []string
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "not ok ") && !strings.Contains(l, "# TODO") {
				failed = append(failed, l)
			}
		}
		t.Fatalf("%s: %v\nfailed checks:\n%s\n\nfull output:\n%s", src, err,
			strings.Join(failed, "\n"), text)
	}
	require.Regexp(t, `(?m)^1\.\.\d+$`, text, "no TAP plan: the program stopped early")
	return text
}

// realLibibverbs is rdma-core's library the symbol table is compared with.
const realLibibverbs = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"

// ibverbsVersion is a public version node of rdma-core's libibverbs.
var ibverbsVersion = regexp.MustCompile(`^IBVERBS_1\.\d+$`)

// TestExportedSymbols compares the library's dynamic symbols with
// rdma-core's: every IBVERBS_1.x symbol of the real library must be
// exported with the same version, default (@@) or hidden (@) as there,
// and nothing may be exported outside the IBVERBS_* version nodes (no Go
// runtime or cgo symbol leaks out).
func TestExportedSymbols(t *testing.T) {
	if _, err := os.Stat(realLibibverbs); err != nil {
		t.Skipf("rdma-core's library is not installed (%v): nothing to compare with", err)
	}
	ours := filepath.Join(libDir, "libibverbs.so.1")
	nmOut, err := exec.Command("nm", "-D", "--with-symbol-versions", "--defined-only", ours).Output()
	require.NoError(t, err, "nm -D %s", ours)
	odOut, err := exec.Command("objdump", "-T", realLibibverbs).Output()
	require.NoError(t, err, "objdump -T %s", realLibibverbs)

	have := map[string]bool{} // name@VER (hidden) or name@@VER (default)
	var leaks []string
	sc := bufio.NewScanner(bytes.NewReader(nmOut))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		sym := f[len(f)-1]
		typ := f[len(f)-2]
		name, ver, ok := splitVersion(sym)
		switch {
		case typ == "A" && (!ok || name == ver):
			// a version node's own symbol
			if !strings.HasPrefix(name, "IBVERBS_") {
				leaks = append(leaks, sc.Text())
			}
		case !ok || !strings.HasPrefix(ver, "IBVERBS_"):
			leaks = append(leaks, sc.Text())
		default:
			have[sym] = true
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, have, "nm listed no versioned symbol:\n%s", nmOut)
	require.Empty(t, leaks, "symbols exported outside the IBVERBS_* version nodes")

	var want, missing []string
	sc = bufio.NewScanner(bytes.NewReader(odOut))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// addr flags... section size version name; skip imports
		if len(f) < 4 || strings.Contains(sc.Text(), "*UND*") {
			continue
		}
		ver, name := f[len(f)-2], f[len(f)-1]
		hidden := strings.HasPrefix(ver, "(") && strings.HasSuffix(ver, ")")
		ver = strings.Trim(ver, "()")
		if !ibverbsVersion.MatchString(ver) || name == ver {
			continue // PRIVATE, unversioned, or the version node itself
		}
		sym := name + "@@" + ver
		if hidden {
			sym = name + "@" + ver
		}
		want = append(want, sym)
		if !have[sym] {
			missing = append(missing, sym)
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, want, "objdump listed no IBVERBS_1.x symbol of %s", realLibibverbs)
	sort.Strings(missing)
	require.Empty(t, missing, "IBVERBS_1.x symbols of rdma-core's library missing (or of another version or visibility) in ours")

	// For the log: what ours has in IBVERBS_1.x beyond rdma-core's.
	wantSet := map[string]bool{}
	for _, s := range want {
		wantSet[s] = true
	}
	var extra []string
	for s := range have {
		if _, ver, _ := splitVersion(s); ibverbsVersion.MatchString(ver) && !wantSet[s] {
			extra = append(extra, s)
		}
	}
	sort.Strings(extra)
	t.Logf("%d IBVERBS_1.x symbols match rdma-core's; ours has %d more: %v", len(want), len(extra), extra)
}

// splitVersion splits nm's name@@VER or name@VER.
func splitVersion(sym string) (name, ver string, ok bool) {
	if i := strings.Index(sym, "@@"); i >= 0 {
		return sym[:i], sym[i+2:], true
	}
	if i := strings.Index(sym, "@"); i >= 0 {
		return sym[:i], sym[i+1:], true
	}
	return sym, "", false
}
