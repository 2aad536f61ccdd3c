package budget

import (
	"math"
	"slices"
	"sync"
	"time"
)

// What a target's recent times to commit are (docs/streams.md#hedging): FAILOVER_HEDGE_AFTER's percentile form
// reads them.
const (
	// CommitSamples is how many of a target's commits are kept: the last 128. At a few requests a second that
	// is the last minute or so; a percentile of 128 samples moves with the target within a few dozen commits.
	CommitSamples = 128
	// CommitWindow is how long a sample counts: a target's times from five minutes ago say little of it now,
	// and a target that was idle (or out) that long starts again from HedgeDelayDefault.
	CommitWindow = 5 * time.Minute
	// CommitMinSamples is how many samples in the window a percentile needs: below 20, a p95 would be the
	// largest sample or close to it, one slow answer's time.
	CommitMinSamples = 20
	// HedgeDelayDefault is the percentile form's delay while a target has fewer than CommitMinSamples samples
	// in the window (never below FAILOVER_HEDGE_AFTER_MIN): a first token later than 2 s is slow for most
	// chat models, and a reasoning model's own samples replace it after 20 commits.
	HedgeDelayDefault = 2 * time.Second

	// The computed percentile is cached: it is computed again only once something changed (a sample came in
	// or left the window) and the cached one is 100 ms old or 16 samples behind, or while there are too few
	// samples (so the percentile is there from the 20th on).
	commitRecomputeAfter   = 100 * time.Millisecond
	commitRecomputeSamples = 16
)

// CommitTimes is one target's recent times to commit (for a stream, from the request being sent to the gate
// passing; for a non-streaming request, to the complete answer that classified as a success): the last
// CommitSamples of them, each counting for CommitWindow. Percentile reads their nearest-rank percentile, which
// is kept computed (sorted once, read by every request) rather than sorted on every call.
//
// An attempt that a hedge race cut before it committed (ObserveLost) is a sample too, of which only a lower
// bound is known: it would have taken at least as long as it ran. Without it, the slow answers that hedging
// cuts would never be seen, and a percentile would forget the tail it is meant to find. Such a sample counts
// in the rank, as at least its time, but is never the value a percentile returns: the rank walks down to the
// nearest time that was seen to commit. Were it returned, each hedge would raise the delay of the next by the
// time the hedge itself took, with no end.
//
// The zero value is ready to use. Safe for concurrent use (a mutex, held for a copy and at most a sort of 128
// durations); Observe and Percentile never allocate. It must not be copied after first use.
type CommitTimes struct {
	mu      sync.Mutex
	started bool      // a sample came in: origin is set
	origin  time.Time // the first sample's time; times are kept as nanoseconds since it
	at      [CommitSamples]int64
	d       [CommitSamples]int64 // the time in nanoseconds, shifted left by one; the low bit marks a lost attempt's
	next    int                  // where the next sample goes in the ring
	n       int                  // samples in the ring, up to CommitSamples

	// The cache: the samples in the window when it was computed, sorted (as in d).
	sorted     [CommitSamples]int64
	sortedN    int
	computed   bool
	computedAt int64 // since origin
	expires    int64 // since origin: when the oldest sample in sorted leaves the window
	fresh      int   // samples observed since it was computed
}

// Observe records that an attempt committed d after it started, at now (from the clock the caller reads for
// every call). A negative d counts as 0.
func (c *CommitTimes) Observe(now time.Time, d time.Duration) { c.observe(now, d, 0) }

// ObserveLost records that an attempt was cut at now before it committed, d after it started: it would
// have taken at least d.
func (c *CommitTimes) ObserveLost(now time.Time, d time.Duration) { c.observe(now, d, 1) }

func (c *CommitTimes) observe(now time.Time, d time.Duration, lost int64) {
	c.mu.Lock()
	if !c.started {
		c.started, c.origin = true, now
	}
	c.at[c.next], c.d[c.next] = int64(now.Sub(c.origin)), int64(max(d, 0))<<1|lost
	c.next = (c.next + 1) % CommitSamples
	c.n = min(c.n+1, CommitSamples)
	c.fresh++
	c.mu.Unlock()
}

// Percentile returns the p-th percentile (nearest rank: the smallest sample at or above p% of them; p is
// clamped to 1..100) of the samples within CommitWindow of now, or, when that sample is a lost attempt's,
// the largest commit below it. ok is false while there are fewer than CommitMinSamples of them, or no
// commit at or below the rank. The value may be up to 100 ms or 16 samples behind the latest (the cache).
func (c *CommitTimes) Percentile(now time.Time, p int) (d time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		return 0, false
	}
	t := int64(now.Sub(c.origin))
	if c.stale(t) {
		c.recompute(t)
	}
	if c.sortedN < CommitMinSamples {
		return 0, false
	}
	k := (min(max(p, 1), 100)*c.sortedN + 99) / 100 // ceil(p/100 × n), from 1 to n
	for k > 0 && c.sorted[k-1]&1 == 1 {
		k-- // a lost attempt's lower bound: the nearest commit below it
	}
	if k == 0 {
		return 0, false
	}
	return time.Duration(c.sorted[k-1] >> 1), true
}

// HedgeDelay is how long an attempt on this target waits to commit before a hedge starts, in
// FAILOVER_HEDGE_AFTER's percentile form: the p-th percentile of the recent times to commit, or
// HedgeDelayDefault while there are too few, and never less than atLeast (FAILOVER_HEDGE_AFTER_MIN).
func (c *CommitTimes) HedgeDelay(now time.Time, p int, atLeast time.Duration) time.Duration {
	d, ok := c.Percentile(now, p)
	if !ok {
		d = HedgeDelayDefault
	}
	return max(d, atLeast)
}

// stale reports whether the cache must be computed again at t (c.mu held).
func (c *CommitTimes) stale(t int64) bool {
	switch {
	case !c.computed:
		return true
	case c.fresh == 0 && t < c.expires:
		return false // nothing changed
	case c.fresh > 0 && c.sortedN < CommitMinSamples:
		return true
	}
	return t-c.computedAt >= int64(commitRecomputeAfter) || c.fresh >= commitRecomputeSamples
}

// recompute sorts the samples within the window at t into the cache (c.mu held). A sample from after t (the
// clock was set back) counts.
func (c *CommitTimes) recompute(t int64) {
	m, expires := 0, int64(math.MaxInt64)
	for i := range c.n {
		if t-c.at[i] >= int64(CommitWindow) {
			continue
		}
		c.sorted[m] = c.d[i]
		m++
		expires = min(expires, c.at[i]+int64(CommitWindow))
	}
	slices.Sort(c.sorted[:m])
	c.sortedN, c.computed, c.computedAt, c.expires, c.fresh = m, true, t, expires, 0
}
