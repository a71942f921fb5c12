//go:build race

package tm

// raceEnabled: the race detector is on. A List is used under its owner's
// lock and has no concurrency of its own; the model test then runs its
// short length, since the full one takes minutes under the detector.
const raceEnabled = true
