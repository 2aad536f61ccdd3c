//go:build race

package observe

// raceEnabled: the race detector makes sync.Pool drop items at random, so allocation counts
// are only asserted in the ordinary (non-race) test run.
const raceEnabled = true
