package rdma

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softhca/softhca/conformance"
)

// TestDropIn runs every conformance case through the verbs agent on
// softhca's drop-in libibverbs.so.1, built from ../../libibverbs into a
// temporary directory (or taken from $SOFTHCA_LIB, a directory holding
// libibverbs.so.1). SOFTHCA_CONFORMANCE_RUN limits the cases to a
// regular expression. The devices bind random loopback addresses, so
// that other suites running at the same time keep theirs. It takes
// minutes (an agent process per device), and -short skips it.
func TestDropIn(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the whole suite through the drop-in library takes minutes")
	}
	agent, lib := dropInLib(t)
	target := DropInAt("softhca0", lib, agent, randomLoopback())
	cases := conformance.Cases()
	if re := os.Getenv("SOFTHCA_CONFORMANCE_RUN"); re != "" {
		r := regexp.MustCompile(re)
		var kept []conformance.Case
		for _, c := range cases {
			if r.MatchString(c.Name) {
				kept = append(kept, c)
			}
		}
		cases = kept
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := conformance.RunCase(target, c)
			msg := strings.Join(r.Messages, "\n")
			why, known := dropInKnown[c.Name]
			switch {
			case r.Outcome == conformance.Failed && known:
				t.Skipf("known difference: %s\n%s", why, msg)
			case known:
				t.Fatalf("%s %s through the drop-in library: remove it from dropInKnown (%s)", c.Name, r.Outcome, why)
			case r.Outcome == conformance.Failed:
				t.Fatalf("%s [%s]\n%s\n%s", c.Name, c.Label, c.Cite, msg)
			case r.Outcome == conformance.Skipped:
				t.Skip(msg)
			}
		})
	}
}

// TestDropInIPv6 runs the query_gid cases on a drop-in device whose
// address is IPv6 (::1): the library's device has the one address
// SOFTHCA_ADDR gives it, so TestDropIn's IPv4 devices skip
// query_gid/ipv6-address-gid, which must pass here, as it does on the Go
// API (whose devices have both).
func TestDropInIPv6(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the drop-in library is built for it")
	}
	agent, lib := dropInLib(t)
	v6 := netip.MustParseAddr("::1")
	target := DropInAt("softhca0", lib, agent, [3]netip.Addr{v6, v6, v6})
	ran := false
	for _, c := range conformance.Cases() {
		if !strings.HasPrefix(c.Name, "query_gid/") {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			r := conformance.RunCase(target, c)
			msg := strings.Join(r.Messages, "\n")
			switch {
			case r.Outcome == conformance.Failed:
				t.Fatalf("%s\n%s", c.Cite, msg)
			case c.Name == "query_gid/ipv6-address-gid":
				ran = true
				if r.Outcome != conformance.Passed {
					t.Fatalf("%s on an IPv6 device: %s, want PASS\n%s", c.Name, r.Outcome, msg)
				}
			case r.Outcome == conformance.Skipped:
				t.Skip(msg)
			}
		})
	}
	if !ran {
		t.Fatal("the suite has no case query_gid/ipv6-address-gid any more: update this test")
	}
}

// dropInKnown are the cases that pass against softhca's Go API and fail
// through the drop-in library, and why: TestDropIn reports them as
// skipped, and fails when one starts passing. None today.
var dropInKnown = map[string]string{}

var (
	libOnce sync.Once
	libDir  string
	libErr  error
)

// dropInLib builds the agent and returns it with the directory of
// softhca's libibverbs.so.1: $SOFTHCA_LIB, or a build of ../../libibverbs
// made once per test binary (in a directory TestMain removes).
func dropInLib(t *testing.T) (agent, lib string) {
	t.Helper()
	if err := Prerequisites(); err != nil {
		t.Skip(err)
	}
	agent, err := BuildAgent()
	if err != nil {
		t.Fatal(err)
	}
	libOnce.Do(func() {
		if libDir = os.Getenv("SOFTHCA_LIB"); libDir != "" {
			return
		}
		// Not t.TempDir: the library outlives the test that builds it
		// (TestMain removes it).
		if libDir, libErr = os.MkdirTemp("", "softhca-lib"); libErr == nil { //nolint:usetesting // shared by the tests; TestMain removes it
			libErr = buildLibibverbs(libDir)
		}
	})
	if libErr != nil {
		t.Fatal(libErr)
	}
	return agent, libDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if libDir != "" && os.Getenv("SOFTHCA_LIB") == "" {
		os.RemoveAll(libDir)
	}
	os.Exit(code)
}

// randomLoopback picks three distinct addresses in 127.1.0.0-127.254.255.255.
func randomLoopback() [3]netip.Addr {
	base := [3]byte{byte(1 + rand.IntN(254)), byte(rand.IntN(256)), byte(1 + rand.IntN(250))}
	var out [3]netip.Addr
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{127, base[0], base[1], base[2] + byte(i)})
	}
	return out
}

// buildLibibverbs builds softhca's drop-in libibverbs.so.1 into dir, as
// `make libibverbs` does.
func buildLibibverbs(dir string) error {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	mapFile := filepath.Join(root, "libibverbs", "libibverbs.map")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "libibverbs", "-buildmode=c-shared",
		"-ldflags", "-extldflags '-Wl,--version-script="+mapFile+" -Wl,-soname,libibverbs.so.1'",
		"-o", filepath.Join(dir, "libibverbs.so.1"), "github.com/softhca/softhca/libibverbs")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building libibverbs.so.1 (needs gcc and libibverbs-dev): %w\n%s", err, out)
	}
	return nil
}
