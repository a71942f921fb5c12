package conformance

import (
	"errors"
	"fmt"
)

// Implementation names. A Target names the implementation it drives
// through ImplementationNamer; a Deviation names the implementation it
// is known for.
const (
	// ImplSofthca is softhca through its Go API (the conformance/softhca
	// backend).
	ImplSofthca = "softhca"
	// ImplSofthcaLib is softhca's drop-in libibverbs.so.1, driven by the
	// rdma backend like any libibverbs device.
	ImplSofthcaLib = "softhca-lib"
	// ImplRxe is Linux soft-RoCE (the rdma_rxe kernel driver and
	// rdma-core's rxe provider), driven by the rdma backend.
	ImplRxe = "rxe"
)

// ImplementationNamer is a Target that says which implementation it
// drives. It is optional: a target without it has no implementation
// name, so no deviation applies to it and every failure is a failure.
//
// The softhca backend (conformance/softhca) returns ImplSofthca. The
// rdma backend, which runs the cases against any libibverbs device,
// returns ImplRxe for an rxe device and ImplSofthcaLib for softhca's
// drop-in library; a device of another driver (a NIC) returns that
// driver's name ("mlx5", ...), so that deviations can be declared for
// it the same way.
type ImplementationNamer interface {
	Implementation() string
}

// ImplementationOf returns the target's implementation name, or "" if
// it does not say.
func ImplementationOf(t Target) string {
	if n, ok := t.(ImplementationNamer); ok {
		return n.Implementation()
	}
	return ""
}

// Deviation declares that an implementation is known not to follow a
// case's rule (or, for an ImplementationDefined case, to make another of
// the allowed choices).
type Deviation struct {
	// Impl is the implementation's name (ImplRxe, ...).
	Impl string
	// Cite says where the behaviour comes from: a driver source file and
	// function ("drivers/infiniband/sw/rxe/rxe_comp.c: rxe_completer():
	// ...") or a captured run. Never a guess.
	Cite string
	// Note says in one line what the implementation does instead.
	Note string
}

// DeviationFor returns the case's deviation for the implementation, or
// nil (always nil for the empty name).
func (c *Case) DeviationFor(impl string) *Deviation {
	if impl == "" {
		return nil
	}
	for i := range c.Deviations {
		if c.Deviations[i].Impl == impl {
			d := c.Deviations[i]
			return &d
		}
	}
	return nil
}

// checkDeviations is Register's check of a case's deviations: each names
// an implementation, cites its source and says what it does, and no
// implementation has two.
func checkDeviations(ds []Deviation) error {
	seen := map[string]bool{}
	for i, d := range ds {
		switch {
		case d.Impl == "":
			return fmt.Errorf("deviation %d needs an implementation name", i)
		case d.Cite == "":
			return fmt.Errorf("deviation %d (%s) needs a citation of where the behaviour comes from", i, d.Impl)
		case d.Note == "":
			return fmt.Errorf("deviation %d (%s) needs a note of what the implementation does instead", i, d.Impl)
		case seen[d.Impl]:
			return errors.New("two deviations for " + d.Impl)
		}
		seen[d.Impl] = true
	}
	return nil
}

// applyDeviation turns the raw outcome of a case into the reported one
// when a deviation is declared for the target's implementation.
func applyDeviation(o Outcome, d *Deviation, msgs []string) (Outcome, []string) {
	if d == nil {
		return o, msgs
	}
	switch o {
	case Failed:
		return ExpectedFailure, append(msgs, fmt.Sprintf("expected failure: %s deviates: %s (%s)", d.Impl, d.Note, d.Cite))
	case Passed:
		return UnexpectedPass, append(msgs, fmt.Sprintf("unexpected pass: the case declares that %s deviates (%s; %s), but the rule held: remove the deviation or find out why the case no longer sees it", d.Impl, d.Note, d.Cite))
	case Skipped, ExpectedFailure, UnexpectedPass:
	}
	return o, msgs
}
