//go:build race

package hca_test

// The race detector slows the transport about tenfold: the soak test
// carries fewer messages under it.
const raceEnabled = true
