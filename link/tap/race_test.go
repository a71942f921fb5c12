//go:build race

package tap_test

const raceEnabled = true
