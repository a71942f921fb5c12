//go:build !race

package tm

const raceEnabled = false
