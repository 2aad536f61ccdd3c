//go:build race

package stream

// raceEnabled: the race detector makes sync.Pool drop items at random (the gate's JSON parsers
// are pooled), so allocation counts are only asserted in the ordinary (non-race) test run,
// which .ci/run also makes.
const raceEnabled = true
