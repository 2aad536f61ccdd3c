//go:build race

package main

// raceEnabled: the race detector allocates on its own, so allocation counts are only
// asserted in the ordinary (non-race) test run.
const raceEnabled = true
