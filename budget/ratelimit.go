package budget

import (
	"sync"
	"sync/atomic"
	"time"
)

// rateLimitGuess is how long a target is skipped when an answer reports a quota spent without saying when it
// comes back (Azure often sends only the remaining-* headers). It is a guess, so it is short: long enough that
// the requests right behind the answer go elsewhere instead of into a 429, short enough that a wrong guess costs
// the target one second of traffic. Azure enforces its per-minute quotas over windows of 1 s and 10 s.
const rateLimitGuess = time.Second

// rateLimitMaxWait caps how long one answer can have a target skipped, whatever reset it gives: a daily quota, a
// typo'd duration or a skewed clock behind an RFC 3339 reset must not take a target out for a day. Once it runs
// out, the next request to the target either shows the quota back or sets another limit.
const rateLimitMaxWait = time.Hour

// RateLimit is what one target's answers say about its provider quotas (docs/decisions.md, Rate limits): the last figures
// reported, and, when they showed a quota spent, until when the target should be skipped so that the requests
// that follow go to the next candidate before a 429 costs them an attempt.
//
//	usable --an answer shows a quota spent (0 left, or below FAILOVER_RATELIMIT_FLOOR × its limit)--> limited until its reset
//	limited --the reset passes--> usable
//	limited --an answer shows every quota it reports above the floor--> usable (the quota came back early)
//	limited --an answer shows a quota spent--> limited until that answer's reset (the latest answer is the freshest word)
//
// An answer that reports no remaining figure changes nothing; neither does anything while FAILOVER_RATELIMIT_AWARE
// is off, except that the figures are still recorded for the table and the gauge.
//
// One RateLimit per target, shared by every request: safe for concurrent use. Usable on a target that is not
// limited is one atomic load; Observe takes a mutex once per answer.
type RateLimit struct {
	aware bool
	floor float64

	// limited is true while a limit may be running, so Usable can answer without the lock. It is written under
	// mu only.
	limited atomic.Bool
	avoided atomic.Uint64 // requests that passed the target over for its limit, monotonic
	mu      sync.Mutex
	until   time.Time
	figures RateFigures
}

// NewRateLimit returns the rate-limit state of a target no answer has reported on, under c's
// FAILOVER_RATELIMIT_* settings.
func NewRateLimit(c *Config) *RateLimit {
	return &RateLimit{aware: c.RateLimitAware, floor: c.RateLimitFloor}
}

// Observe records the figures of an answer that arrived at now (RateLimitScan) and decides from them whether the
// target is limited, and until when: the latest reset among the quotas the answer shows spent, now +
// rateLimitGuess for one without a reset, at most now + rateLimitMaxWait. A spent quota whose reset has already
// passed limits nothing. An answer whose figures show no quota spent ends a running limit.
//
// until is the end of the limit this answer leaves running (zero for none), and began whether this answer
// started it on a target that was usable (log target_ratelimited). Figures without any remaining figure change
// nothing and give zero, false.
func (r *RateLimit) Observe(now time.Time, f RateFigures) (until time.Time, began bool) {
	if !f.Reported() {
		return time.Time{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.figures = f
	if !r.aware {
		return time.Time{}, false
	}
	until = r.spentUntil(now, &f)
	if !until.After(now) {
		r.until = time.Time{}
		r.limited.Store(false)
		return time.Time{}, false
	}
	began = !r.limited.Load() || !now.Before(r.until)
	r.until = until
	r.limited.Store(true)
	return until, began
}

// spentUntil returns when the quotas f shows spent are all back, capped; now or earlier when none is spent.
func (r *RateLimit) spentUntil(now time.Time, f *RateFigures) time.Time {
	until := now
	for i := range f {
		q := &f[i]
		if !r.spent(q) {
			continue
		}
		back := q.Reset
		if back.IsZero() {
			back = now.Add(rateLimitGuess)
		}
		if back.After(until) {
			until = back
		}
	}
	if limit := now.Add(rateLimitMaxWait); until.After(limit) {
		until = limit
	}
	return until
}

// spent reports whether q shows its quota spent: nothing left, or, with a floor and a known limit, less than
// floor × limit left.
func (r *RateLimit) spent(q *QuotaFigures) bool {
	switch {
	case !q.HasRemaining:
		return false
	case q.Remaining == 0:
		return true
	}
	return r.floor > 0 && q.HasLimit && float64(q.Remaining) < r.floor*float64(q.Limit)
}

// Usable reports whether no rate limit is running at now. The answer may be stale by the time a request uses it.
func (r *RateLimit) Usable(now time.Time) bool {
	if !r.limited.Load() {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Before(r.until) {
		return false
	}
	r.limited.Store(false)
	return true
}

// admit is Usable for a request's sweep (Health.Available): a refusal counts as one request avoiding the target.
func (r *RateLimit) admit(now time.Time) bool {
	if r.Usable(now) {
		return true
	}
	r.avoided.Add(1)
	return false
}

// Until returns the end of the running limit or of the last one, zero when none was set since the target last
// showed its quota back. Usable says whether it is running.
func (r *RateLimit) Until() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.until
}

// Figures returns the last figures an answer reported (for the target table and the remaining-quota gauge); the
// zero RateFigures before any did.
func (r *RateLimit) Figures() RateFigures {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.figures
}

// Avoided returns how many times a request passed the target over because of its rate limit alone (monotonic,
// for failover_ratelimit_avoided_total): once per request that would otherwise have used or probed it.
func (r *RateLimit) Avoided() uint64 { return r.avoided.Load() }
