//go:build race

package bufpool

// raceEnabled: the race detector makes sync.Pool drop items at random.
const raceEnabled = true
