//go:build !race

package hca_test

const raceEnabled = false
