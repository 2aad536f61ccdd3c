package config

import "fmt"

// Warning is a setting that loads but likely does not do what it was set for
// (docs/configuration.md): a target URL on a well-known provider's host without the path its
// SDKs use, or a setting that has no effect with the others.
type Warning struct {
	Variable string // the variable's name
	Message  string // the whole line: the variable, its value masked as in errors, and why
}

func (w Warning) String() string { return w.Message }

// warn records a warning about the variable name: one per variable, the first reason found.
func (l *loader) warn(name, format string, args ...any) {
	for _, w := range l.warnings {
		if w.Variable == name {
			return
		}
	}
	l.warnings = append(l.warnings, Warning{Variable: name, Message: l.shown(name) + ": " + fmt.Sprintf(format, args...)})
}

// warnNoEffect warns about each setting that the rest of a valid configuration leaves without
// effect (docs/configuration.md): it was likely set for something another setting turns off.
// Only variables that are set (not empty) are named, each once, with the first reason below; a
// setting that still changes anything, however little, is not named.
func (l *loader) warnNoEffect(c *Config) {
	set := func(name string) bool { return l.vars[name] != "" }
	tv := func(i int, field string) string { return fmt.Sprintf("%sTARGET_%d_%s", envPrefix, i, field) }
	b, s, r := &c.Budget, &c.Server, &c.Resume

	// Disabled, a request gets one attempt: nothing retries, transfers or resumes, so nothing
	// that bounds or paces those is ever asked (classify.Limit, classify.Resume).
	if !b.Enabled {
		const why = "has no effect with FAILOVER_ENABLED=false, which allows one attempt: no retry, transfer or resume"
		for _, n := range []string{"SAME_TARGET_RETRIES", "MAX_ATTEMPTS", "MAX_ELAPSED", "BACKOFF_BASE", "BACKOFF_MAX",
			"RETRY_BUDGET_RATIO", "RETRY_BUDGET_MIN", "RESUME_MAX"} {
			if set(envPrefix + n) {
				l.warn(envPrefix+n, why)
			}
		}
		if r.Mode == "on" {
			l.warn(envPrefix+"RESUME", why)
		}
		for i := range c.Targets {
			for _, f := range []string{"RETRIES", "RESUME"} {
				if set(tv(i, f)) {
					l.warn(tv(i, f), why)
				}
			}
		}
	}

	// A stream is continued only with FAILOVER_RESUME=on, within FAILOVER_RESUME_MAX, on a
	// target marked _RESUME.
	resumable := false
	for _, t := range c.Targets {
		resumable = resumable || t.Resume != ""
	}
	switch {
	case r.Mode != "on":
		if set(envPrefix + "RESUME_MAX") {
			l.warn(envPrefix+"RESUME_MAX", "has no effect while FAILOVER_RESUME=off")
		}
		for i, t := range c.Targets {
			if t.Resume != "" {
				l.warn(tv(i, "RESUME"), "has no effect while FAILOVER_RESUME=off: set FAILOVER_RESUME=on to continue cut streams on this target")
			}
		}
	case r.Max == 0:
		l.warn(envPrefix+"RESUME", "has no effect with FAILOVER_RESUME_MAX=0, which allows no resume")
		for i, t := range c.Targets {
			if t.Resume != "" {
				l.warn(tv(i, "RESUME"), "has no effect with FAILOVER_RESUME_MAX=0, which allows no resume")
			}
		}
	case !resumable && len(c.Targets) > 0:
		l.warn(envPrefix+"RESUME", "has no effect: no target is marked resumable; set FAILOVER_TARGET_<i>_RESUME on the targets a cut stream may continue on")
	}

	// A hedge is a second attempt, on the next target, while the first goes on
	// (docs/streams.md#hedging): off, disabled or with one target there is none, and only the
	// percentile form has a minimum.
	h := &c.Hedge
	switch {
	case !h.After.On():
		for _, n := range []string{"HEDGE_AFTER_MIN", "HEDGE_BUDGET_RATIO"} {
			if set(envPrefix + n) {
				l.warn(envPrefix+n, "has no effect while FAILOVER_HEDGE_AFTER=0, which turns hedging off")
			}
		}
	case !b.Enabled:
		for _, n := range []string{"HEDGE_AFTER", "HEDGE_AFTER_MIN", "HEDGE_BUDGET_RATIO"} {
			if set(envPrefix + n) {
				l.warn(envPrefix+n, "has no effect with FAILOVER_ENABLED=false, which allows one attempt: no hedge")
			}
		}
	case len(c.Targets) == 1:
		l.warn(envPrefix+"HEDGE_AFTER", "has no effect with one target: a hedge goes to the next target")
	case h.BudgetRatio == 0:
		l.warn(envPrefix+"HEDGE_AFTER", "has no effect with FAILOVER_HEDGE_BUDGET_RATIO=0, which allows no hedge")
	}
	if h.After.Fixed > 0 && set(envPrefix+"HEDGE_AFTER_MIN") {
		l.warn(envPrefix+"HEDGE_AFTER_MIN", "has no effect with FAILOVER_HEDGE_AFTER=%s: the minimum bounds only a percentile (p50 to p99)", h.After)
	}

	// Only sticky reads the header, and only round-robin and sticky weigh targets (proxy's
	// selection.go).
	if s.Strategy != "sticky" && set(envPrefix+"STICKY_HEADER") {
		l.warn(envPrefix+"STICKY_HEADER", "has no effect with FAILOVER_STRATEGY=%s: only sticky hashes it", s.Strategy)
	}
	if s.Strategy != "round-robin" && s.Strategy != "sticky" {
		for i := range c.Targets {
			if set(tv(i, "WEIGHT")) {
				l.warn(tv(i, "WEIGHT"), "has no effect with FAILOVER_STRATEGY=%s: only round-robin and sticky weigh targets", s.Strategy)
			}
		}
	}

	// A ratio of 0 turns the retry budget off, floor and all (budget.RetryBudget).
	if b.RetryBudgetRatio == 0 && set(envPrefix+"RETRY_BUDGET_MIN") {
		l.warn(envPrefix+"RETRY_BUDGET_MIN", "has no effect with FAILOVER_RETRY_BUDGET_RATIO=0, which turns the retry budget off")
	}
	// Unaware, no quota is ever judged spent, so the floor that judges it is never read.
	if !b.RateLimitAware && set(envPrefix+"RATELIMIT_FLOOR") {
		l.warn(envPrefix+"RATELIMIT_FLOOR", "has no effect with FAILOVER_RATELIMIT_AWARE=false: no target is skipped for a spent quota")
	}

	// The backoff paces same-target retries only; FAILOVER_SAME_TARGET_RETRIES is only the
	// default of the targets' own _RETRIES.
	retries, own := false, true
	for i, t := range c.Targets {
		retries = retries || t.Retries > 0
		own = own && set(tv(i, "RETRIES"))
	}
	if len(c.Targets) > 0 && !retries {
		for _, n := range []string{"BACKOFF_BASE", "BACKOFF_MAX"} {
			if set(envPrefix + n) {
				l.warn(envPrefix+n, "has no effect: no target retries (FAILOVER_SAME_TARGET_RETRIES and every FAILOVER_TARGET_<i>_RETRIES are 0)")
			}
		}
	}
	if len(c.Targets) > 0 && own && set(envPrefix+"SAME_TARGET_RETRIES") {
		l.warn(envPrefix+"SAME_TARGET_RETRIES", "has no effect: every target sets its own FAILOVER_TARGET_<i>_RETRIES")
	}

	// _AUTH says how the target's own key is sent; without one the client's credentials go
	// upstream as they came, whatever _AUTH says (proxy's newTarget).
	for i := range c.Targets {
		if set(tv(i, "AUTH")) && !set(tv(i, "API_KEY")) && !set(tv(i, "API_KEY_FILE")) {
			l.warn(tv(i, "AUTH"), "has no effect without a key: the client's own credentials are forwarded as they came; set %s or %s to send the target's",
				tv(i, "API_KEY"), tv(i, "API_KEY_FILE"))
		}
	}
}
