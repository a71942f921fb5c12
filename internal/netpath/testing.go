package netpath

import (
	"errors"
	"os"
	"testing"
)

// ForTest builds a path for a test and closes it when the test ends. A
// machine that cannot build one (not root, no iproute2, no network
// namespaces) skips the test, except with CI=true in the environment,
// where it fails: CI must run these tests.
func ForTest(t testing.TB, opts Options) *Path {
	t.Helper()
	p, err := New(opts)
	if errors.Is(err, errors.ErrUnsupported) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI=true: CI must run the network path tests as root", err)
		}
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}
