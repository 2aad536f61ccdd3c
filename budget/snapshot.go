package budget

import "time"

// Snapshot is one target's health at one moment, for the target table (docs/operations.md, The target
// table): every field read under the Health's lock, so that the state, its end and the counts
// agree with each other. A plain value: it shares no memory with the Health.
type Snapshot struct {
	State State
	// Until is when the state ends by itself: the ejection's end (ejected), the cooldown's
	// (cooling), the rate limit's reset (ratelimited). Zero for up and probing, which a
	// request ends.
	Until time.Time
	// Failures are the consecutive health failures since the target last succeeded, towards
	// FAILOVER_EJECT_AFTER: an ejected target keeps the ones that ejected it (an ejection for a
	// credential failure counts as one), each failed probe adds one, and a success sets it to 0.
	Failures  int
	Ejections uint64      // ejections since start
	Figures   RateFigures // what the last answer that reported quota said
}

// Snapshot returns the target's health at now.
func (h *Health) Snapshot(now time.Time) Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	rateUsable, rateUntil, figures := h.rate.snapshot(now)
	s := Snapshot{State: h.state(now, rateUsable), Failures: h.failures, Ejections: h.ejections.Load(), Figures: figures}
	switch s.State {
	case StateEjected:
		s.Until = h.ejectUntil
	case StateCooling:
		s.Until = h.coolUntil
	case StateRateLimited:
		s.Until = rateUntil
	}
	return s
}

// snapshot returns, under one lock, whether no limit is running at now (as Usable, without
// counting anything), the end of the running or last limit (as Until), and the last figures.
func (r *RateLimit) snapshot(now time.Time) (usable bool, until time.Time, f RateFigures) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.limited.Load() || !now.Before(r.until), r.until, r.figures
}
