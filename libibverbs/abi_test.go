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
	dir := t.TempDir()
	bin := filepath.Join(dir, "abi")
	cc := exec.Command("gcc", "-Wall", "-Werror", "-o", bin, filepath.Join("testdata", "abi.c"), "-libverbs")
	out, err := cc.CombinedOutput()
	require.NoError(t, err, "gcc testdata/abi.c:\n%s", out)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, bin)
	run.Env = libEnv(abiAddr)
	run.Dir = dir
	out, err = run.CombinedOutput()
	text := string(out)

	// The program ran on softhca's library, not the system's.
	require.Contains(t, text, "\n# device: softhca0\n", "the first device is not softhca0:\n%s", text)
	require.Contains(t, text, "\n# library: "+filepath.Join(libDir, "libibverbs.so.1")+"\n",
		"the program did not bind the library under test:\n%s", text)

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
		t.Fatalf("abi: %v\nfailed checks:\n%s\n\nfull output:\n%s", err,
			strings.Join(failed, "\n"), text)
	}
	require.Regexp(t, `(?m)^1\.\.\d+$`, text, "no TAP plan: the program stopped early")
	t.Logf("abi output:\n%s", text)
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
