package budget

import (
	"sync"
	"sync/atomic"
	"time"
)

// Health is one target's passive health, a small state machine in the manner of Envoy's outlier detection:
//
//	healthy --EjectAfter consecutive Failure, or Eject--> ejected (for EjectBase × consecutive ejections, capped at EjectMax)
//	ejected --time passes--> expired: the next Available hands out one probe, everyone else keeps skipping
//	probing --Success--> healthy (failures and ejection count reset)
//	probing --Failure or Eject--> ejected again, for the next, longer time
//	probing --Release--> expired (the probe told nothing; the next Available probes again)
//
// A Retry-After cooldown is apart from this: it makes the target unavailable until it ends, without counting as
// an ejection, and a longer cooldown wins over a shorter one.
//
// Reports are not tied to the request that made them. While a target is ejected and not probing, a Failure or
// Eject (from an attempt that began before the ejection, or from the all-ejected fallback) changes nothing,
// so concurrent in-flight failures cannot stack ejections; a Success always restores the target, since the
// upstream just answered.
//
// One Health per target, shared by every request: safe for concurrent use. It is touched once per attempt, under
// a mutex, except Available on a healthy target, which is one atomic load.
type Health struct {
	ejectAfter int
	ejectBase  time.Duration
	ejectMax   time.Duration

	// calm is true only while the target is neither ejected nor cooling down, so Available can answer without
	// the lock. It is written under mu only.
	calm       atomic.Bool
	ejections  atomic.Uint64 // total, monotonic
	mu         sync.Mutex
	failures   int // consecutive health failures
	inRow      int // consecutive ejections, reset by a success
	ejected    bool
	probing    bool // a probe has been handed out and has not reported
	ejectUntil time.Time
	coolUntil  time.Time
}

// NewHealth returns the health of a healthy target under c's ejection settings.
func NewHealth(c *Config) *Health {
	h := &Health{ejectAfter: c.EjectAfter, ejectBase: c.EjectBase, ejectMax: c.EjectMax}
	h.calm.Store(true)
	return h
}

// Available reports whether a request may use the target now: not cooling down and not ejected. Once an
// ejection has expired, exactly one request at a time gets ok=true, probe=true; the others get ok=false until the
// probe reports. Whoever gets probe=true must report exactly once: Success, Failure, Eject or Release.
func (h *Health) Available(now time.Time) (ok, probe bool) {
	if h.calm.Load() {
		return true, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case now.Before(h.coolUntil):
		return false, false
	case !h.ejected:
		h.calm.Store(true)
		return true, false
	case h.probing || now.Before(h.ejectUntil):
		return false, false
	}
	h.probing = true
	return true, true
}

// Usable reports, taking nothing, whether Available would let a request use the target now: neither cooling
// down nor ejected, or ejected with the ejection over and its probe not yet handed out. A strategy asks it to
// choose a first candidate among the targets a request may use, so that a skipped target's share is not all
// passed to whichever target follows it. The answer may be stale by the time Available is asked.
func (h *Health) Usable(now time.Time) bool {
	if h.calm.Load() {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return !now.Before(h.coolUntil) && (!h.ejected || !h.probing && !now.Before(h.ejectUntil))
}

// Success records a successful attempt: consecutive failures and the ejection count reset, and an ejected (or
// probing) target is restored, which restored reports (log target_restored). A running cooldown stays.
func (h *Health) Success(now time.Time) (restored bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	restored = h.ejected
	h.failures, h.inRow = 0, 0
	h.ejected, h.probing = false, false
	h.calm.Store(!now.Before(h.coolUntil))
	return restored
}

// Failure counts a health failure (network error, timeout, 5xx, 429: classify says which outcomes count). At
// EjectAfter consecutive failures (0 = never) the target is ejected; a failed probe re-ejects at once for the
// next, longer time. ejected reports whether this call ejected the target, and d for how long.
func (h *Health) Failure(now time.Time) (ejected bool, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.probing:
	case h.ejected:
		return false, 0
	default:
		h.failures++
		if h.ejectAfter <= 0 || h.failures < h.ejectAfter {
			return false, 0
		}
	}
	return true, h.eject(now)
}

// Eject ejects the target at once (a credential failure: bad key, quota exhausted) under the same duration rule
// and returns the duration. An already ejected target that is not probing is left as it is, and 0 is returned.
func (h *Health) Eject(now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ejected && !h.probing {
		return 0
	}
	return h.eject(now)
}

// eject starts the next ejection. h.mu must be held.
func (h *Health) eject(now time.Time) time.Duration {
	h.inRow++
	d := ejectFor(h.ejectBase, h.ejectMax, h.inRow)
	h.failures = 0
	h.ejected, h.probing = true, false
	h.ejectUntil = now.Add(d)
	h.calm.Store(false)
	h.ejections.Add(1)
	return d
}

// ejectFor returns base × n, capped at limit (when limit > 0), without overflow.
func ejectFor(base, limit time.Duration, n int) time.Duration {
	if base <= 0 || n <= 0 {
		return 0
	}
	if limit <= 0 {
		limit = maxDuration
	}
	// n <= limit/base is exactly "base·n <= limit", tested without computing the product.
	if int64(n) > int64(limit/base) {
		return limit
	}
	return base * time.Duration(n)
}

const maxDuration = time.Duration(1<<63 - 1)

// Cooldown makes the target unavailable until now+d (a Retry-After longer than FAILOVER_RETRY_AFTER_MAX). It is
// not an ejection and does not count as one; a longer cooldown wins over a shorter one. d <= 0 does nothing.
func (h *Health) Cooldown(now time.Time, d time.Duration) {
	if d <= 0 {
		return
	}
	until := now.Add(d)
	h.mu.Lock()
	if until.After(h.coolUntil) {
		h.coolUntil = until
	}
	h.calm.Store(false)
	h.mu.Unlock()
}

// Release gives back a probe slot without any health effect (the client went away, or the outcome does not
// count against a target). Call it only for a request that got probe=true; otherwise it does nothing.
func (h *Health) Release() {
	h.mu.Lock()
	h.probing = false
	h.mu.Unlock()
}

// Ejected reports whether the target is ejected now, for failover_target_up and /readyz. An ejection that has
// expired no longer counts even before a probe reports: readiness must recover with time alone, or a pod whose
// targets were all ejected would never be sent the traffic that probes them.
func (h *Health) Ejected(now time.Time) bool {
	if h.calm.Load() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ejected && now.Before(h.ejectUntil)
}

// Ejections returns how many times the target has been ejected (monotonic, for failover_target_ejections_total).
func (h *Health) Ejections() uint64 { return h.ejections.Load() }
