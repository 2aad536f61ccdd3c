package budget

import "time"

// Request is what one request may still spend: transfers against FAILOVER_MAX_ATTEMPTS, time against
// FAILOVER_MAX_ELAPSED, and retries on the current target. It only counts and answers; the proxy asks before
// every retry or transfer, and nothing here can interrupt an attempt already running.
//
// One Request belongs to one request and is not safe for concurrent use. It holds no pointers into the Config,
// so it may be pooled and re-used with Reset. The zero value is a disabled Request (no retry, no transfer).
type Request struct {
	enabled     bool
	maxAttempts int
	maxElapsed  time.Duration

	start     time.Time // the first attempt's start, the elapsed origin
	attempts  int
	transfers int
	retries   int // on the current target
	target    int
}

// Reset readies r for a new request under c. A nil c gives a disabled Request.
func (r *Request) Reset(c *Config) {
	if c == nil {
		*r = Request{}
		return
	}
	*r = Request{enabled: c.Enabled, maxAttempts: c.MaxAttempts, maxElapsed: c.MaxElapsed}
}

// Begin records that an attempt on target (an index) starts now. The first call sets the elapsed origin; after
// that an attempt on the previous attempt's target is a retry and on any other target a transfer. Targets the
// proxy skipped (ejected, cooling down, not serving the model or path) never reach Begin, so they never count.
func (r *Request) Begin(now time.Time, target int) {
	switch {
	case r.attempts == 0:
		r.start = now
	case target == r.target:
		r.retries++
	default:
		r.transfers++
		r.retries = 0
	}
	r.target = target
	r.attempts++
}

// BeginBeside records a hedge (docs/streams.md#hedging) starting now beside the running attempt: an attempt, and
// a transfer against FAILOVER_MAX_ATTEMPTS. The current target, and the retries made on it, stay the running
// attempt's until the race ends: the sweep goes on from whichever attempt ended it (Follow).
func (r *Request) BeginBeside(now time.Time) {
	r.attempts++
	r.transfers++
}

// Follow makes target the current one without counting an attempt: the hedge that ended its race, whose
// verdict the sweep goes on from. Its retries start at none.
func (r *Request) Follow(target int) {
	if target != r.target {
		r.target, r.retries = target, 0
	}
}

// Attempts returns the attempts begun, retries included (the X-Failover-Attempts value).
func (r *Request) Attempts() int { return r.attempts }

// Transfers returns the changes of target so far.
func (r *Request) Transfers() int { return r.transfers }

// RetriesOnTarget returns the retries made on the current target.
func (r *Request) RetriesOnTarget() int { return r.retries }

// TransferAllowed reports whether another transfer fits FAILOVER_MAX_ATTEMPTS (0 = unlimited). Always false when
// failover is disabled.
func (r *Request) TransferAllowed() bool {
	return r.enabled && (r.maxAttempts == 0 || r.transfers < r.maxAttempts)
}

// RetryAllowed reports whether the current target has a retry left under limit (the target's _RETRIES, or
// FAILOVER_SAME_TARGET_RETRIES). Always false when failover is disabled.
func (r *Request) RetryAllowed(limit int) bool {
	return r.enabled && r.retries < limit
}

// ElapsedAllows reports whether starting something after sleeping sleep from now still fits FAILOVER_MAX_ELAPSED:
// asked before every attempt or retry (sleep 0) and before a backoff or Retry-After sleep, so a sleep that would
// overrun the budget is never started. Always true when the budget is 0 or no attempt has begun. Starting exactly
// at the deadline is refused: it would leave the attempt no time at all.
func (r *Request) ElapsedAllows(now time.Time, sleep time.Duration) bool {
	if r.maxElapsed <= 0 || r.attempts == 0 {
		return true
	}
	// Both terms are in [0, maxElapsed], so the subtraction cannot overflow whatever sleep is.
	return max(sleep, 0) < r.maxElapsed-min(r.Elapsed(now), r.maxElapsed)
}

// Elapsed returns the time since the first attempt began; 0 before it, and never negative.
func (r *Request) Elapsed(now time.Time) time.Duration {
	if r.attempts == 0 {
		return 0
	}
	return max(now.Sub(r.start), 0)
}
