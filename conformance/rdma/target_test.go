package rdma

import (
	"testing"

	"github.com/softhca/softhca/conformance"
)

// TestImplementation checks the implementation names deviations are
// declared under: from the device's name, from Impl, and the drop-in
// library's.
func TestImplementation(t *testing.T) {
	for _, c := range []struct {
		t    *Target
		want string
	}{
		{&Target{Device: "rxe0"}, conformance.ImplRxe},
		{&Target{Device: "rxe12"}, conformance.ImplRxe},
		{&Target{Device: "mlx5_0"}, "mlx5"},
		{&Target{Device: "siw0", Impl: "siw-custom"}, "siw-custom"},
		{&DropIn("softhca0", "/lib", "").Target, conformance.ImplSofthcaLib},
	} {
		if got := conformance.ImplementationOf(c.t); got != c.want {
			t.Errorf("Implementation of %+v = %q, want %q", c.t, got, c.want)
		}
	}
}
