//go:build race

package classify

// raceEnabled: the race detector makes sync.Pool drop items at random, so allocation counts
// are only asserted in the ordinary (non-race) test run, which .ci/run also makes.
const raceEnabled = true
