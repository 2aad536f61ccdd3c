//go:build race

package netio

// raceEnabled: the race detector makes sync.Pool drop items at random and instruments
// allocations, so allocation counts are only asserted in the ordinary (non-race) test run.
const raceEnabled = true
