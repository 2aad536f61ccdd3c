package budget

import "time"

// Sweep walks one request's candidates in order for the first attempt and each transfer, skipping those whose
// Health refuses them now (ejected, cooling down, rate-limited, or being probed by another request). When that first pass hands
// out nothing at all because every candidate was refused, a second pass hands them all out anyway, in order and
// regardless of health: never fail closed on health alone (docs/decisions.md, Health). Positions are the proxy's candidate order
// (the strategy's first pick, then declared order); the proxy maps them to targets.
//
// Sweep only picks; whether a transfer may happen at all (Request.TransferAllowed, ElapsedAllows, RetryBudget) is
// asked once Next has found a candidate, so that a transfer with none left spends no budget (the caller releases a
// probe Next handed out when a budget then refuses), and same-target retries never go through it. One Sweep belongs to one request and is
// not safe for concurrent use; re-use it with Reset. Its zero value has no candidates.
type Sweep struct {
	n        int
	next     int
	handed   bool // the first pass handed out at least one candidate
	fallback bool
}

// Reset readies s for a request with n candidates.
func (s *Sweep) Reset(n int) { *s = Sweep{n: n} }

// Next returns the position of the next candidate to attempt, and whether that attempt is the target's probe (its
// outcome must then be reported to that Health). ok=false means the candidates are exhausted. health(pos) returns
// the Health of the candidate at pos; nil means always available.
func (s *Sweep) Next(now time.Time, health func(pos int) *Health) (pos int, probe, ok bool) {
	return s.NextWhere(now, health, nil)
}

// NextWhere is Next restricted to the candidates accept admits (nil admits all): the others are passed over for
// good, as if they were not candidates (a context-window error: only a candidate that sends another model can
// help). They count neither as handed out nor as refused by health.
func (s *Sweep) NextWhere(now time.Time, health func(pos int) *Health, accept func(pos int) bool) (pos int, probe, ok bool) {
	for !s.fallback && s.next < s.n {
		pos = s.next
		s.next++
		if accept != nil && !accept(pos) {
			continue
		}
		h := health(pos)
		if h == nil {
			s.handed = true
			return pos, false, true
		}
		if ok, probe := h.Available(now); ok {
			s.handed = true
			return pos, probe, true
		}
	}
	if !s.fallback {
		if s.handed || s.n == 0 {
			return 0, false, false
		}
		s.fallback, s.next = true, 0
	}
	for s.next < s.n {
		pos = s.next
		s.next++
		if accept != nil && !accept(pos) {
			continue
		}
		return pos, false, true
	}
	return 0, false, false
}

// Untried returns the positions [from, to) that the first pass has not reached yet (none once the sweep has
// fallen back to trying every candidate): the candidates a transfer could still go to, health permitting.
func (s *Sweep) Untried() (from, to int) {
	if s.fallback {
		return s.n, s.n
	}
	return s.next, s.n
}

// Fallback reports whether the sweep has turned to trying every candidate regardless of health (for the ledger).
func (s *Sweep) Fallback() bool { return s.fallback }
