package budget

import (
	"sync"
	"sync/atomic"
	"time"
)

// Health is one target's passive health, a small state machine in the manner of Envoy's outlier detection:
//
//	healthy --EjectAfter consecutive failures, or Eject--> ejected (for EjectBase × consecutive ejections, capped at EjectMax)
//	ejected --time passes--> expired: the next Available hands out one probe, everyone else keeps skipping
//	probing --Success--> healthy (failures and ejection count reset)
//	probing --Failure or Eject--> ejected again, for the next (possibly longer) time
//	probing --Release--> expired (the probe told nothing; the next Available probes again)
//
// Failures come in two kinds (docs/decisions.md, Health). A fast one (a refused connection, a 5xx) costs a probing request
// little, so a fast ejection lasts EjectBase (10 s by default) and recovery is quick. A silent one (a timeout,
// SilentFailure) keeps the probing request waiting for the whole timeout, so a silent ejection lasts at least
// EjectSilent (60 s by default): live requests probe it at most that often. In between, a background probe
// (the proxy's, every ProbeInterval) may see the target answer again; ProbeAnswered then ends the ejection at
// once, so the next request probes it. If that probe times out all the same, the background probe lied (the
// target answers it but not real requests): until the target is healthy again, background answers are no
// longer believed, and live probes keep their EjectSilent spacing.
//
// A Retry-After cooldown is apart from this: it makes the target unavailable until it ends, without counting as
// an ejection, and a longer cooldown wins over a shorter one. So is a rate limit (RateLimit, which the proxy feeds
// with each answer's quota figures): while it runs the target is unavailable, no probe is handed out, and nothing
// counts against the target's health.
//
// Reports are not tied to the request that made them. While a target is ejected and not probing, a Failure or
// Eject (from an attempt that began before the ejection, or from the all-ejected fallback) changes nothing,
// so concurrent in-flight failures cannot stack ejections; a Success always restores the target, since the
// upstream just answered.
//
// One Health per target, shared by every request: safe for concurrent use. It is touched once per attempt, under
// a mutex, except Available on a healthy target that is not rate-limited, which is two atomic loads.
type Health struct {
	ejectAfter  int
	ejectBase   time.Duration
	ejectMax    time.Duration
	ejectSilent time.Duration
	rate        *RateLimit

	// calm is true only while the target is neither ejected nor cooling down, so Available can answer without
	// the lock. It is written under mu only.
	calm       atomic.Bool
	ejections  atomic.Uint64 // total, monotonic
	mu         sync.Mutex
	failures   int // consecutive health failures since the last success, the ones that ejected it included
	inRow      int // consecutive ejections, reset by a success
	ejected    bool
	probing    bool // a probe has been handed out and has not reported
	silent     bool // the ejection was caused by a timeout
	freed      bool // a background answer ended the current ejection early
	distrust   bool // a live probe timed out after a background answer: background answers are not believed
	ejectUntil time.Time
	coolUntil  time.Time
}

// NewHealth returns the health of a healthy target under c's ejection settings.
func NewHealth(c *Config) *Health {
	h := &Health{ejectAfter: c.EjectAfter, ejectBase: c.EjectBase, ejectMax: c.EjectMax, ejectSilent: c.EjectSilent,
		rate: NewRateLimit(c)}
	h.calm.Store(true)
	return h
}

// RateLimit returns the target's rate-limit state, which Available, Usable and State consult: the proxy gives it
// each answer's figures (RateLimit.Observe).
func (h *Health) RateLimit() *RateLimit { return h.rate }

// Available reports whether a request may use the target now: not cooling down, not ejected and not
// rate-limited. Once an ejection has expired, exactly one request at a time gets ok=true, probe=true; the others
// get ok=false until the probe reports. Whoever gets probe=true must report exactly once: Success, Failure, Eject
// or Release. A refusal for the rate limit alone counts as one request avoiding the target (RateLimit.Avoided).
func (h *Health) Available(now time.Time) (ok, probe bool) {
	if h.calm.Load() {
		return h.rate.admit(now), false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case now.Before(h.coolUntil):
		return false, false
	case !h.ejected:
		h.calm.Store(true)
		return h.rate.admit(now), false
	case h.probing || now.Before(h.ejectUntil) || !h.rate.admit(now):
		return false, false
	}
	h.probing = true
	return true, true
}

// Usable reports, taking nothing, whether Available would let a request use the target now: neither cooling
// down nor ejected, or ejected with the ejection over and its probe not yet handed out, and not rate-limited. A strategy asks it to
// choose a first candidate among the targets a request may use, so that a skipped target's share is not all
// passed to whichever target follows it. The answer may be stale by the time Available is asked.
func (h *Health) Usable(now time.Time) bool {
	if h.calm.Load() {
		return h.rate.Usable(now)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return !now.Before(h.coolUntil) && (!h.ejected || !h.probing && !now.Before(h.ejectUntil)) && h.rate.Usable(now)
}

// Success records a successful attempt: consecutive failures and the ejection count reset, and an ejected (or
// probing) target is restored, which restored reports (log target_restored). A running cooldown stays.
func (h *Health) Success(now time.Time) (restored bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	restored = h.ejected
	h.failures, h.inRow = 0, 0
	h.ejected, h.probing, h.silent, h.freed, h.distrust = false, false, false, false, false
	h.calm.Store(!now.Before(h.coolUntil))
	return restored
}

// Failure counts a fast health failure (network error, 5xx, 429: classify says which outcomes count). At
// EjectAfter consecutive failures (0 = never) the target is ejected; a failed probe re-ejects at once for the
// next time. ejected reports whether this call ejected the target, and d for how long.
func (h *Health) Failure(now time.Time) (ejected bool, d time.Duration) {
	return h.failure(now, false)
}

// SilentFailure counts a failure by timing out (connect, first byte, whole attempt). It counts as Failure does,
// but an ejection it causes lasts at least EjectSilent, and may be ended early by ProbeAnswered.
func (h *Health) SilentFailure(now time.Time) (ejected bool, d time.Duration) {
	return h.failure(now, true)
}

func (h *Health) failure(now time.Time, silent bool) (ejected bool, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.probing:
		h.failures++
		if silent && h.freed {
			h.distrust = true
		}
	case h.ejected:
		return false, 0
	default:
		h.failures++
		if h.ejectAfter <= 0 || h.failures < h.ejectAfter {
			return false, 0
		}
	}
	return true, h.eject(now, silent)
}

// Eject ejects the target at once (a credential failure: bad key, quota exhausted) under the same duration rule
// and returns the duration. An already ejected target that is not probing is left as it is, and 0 is returned.
func (h *Health) Eject(now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ejected && !h.probing {
		return 0
	}
	h.failures++
	return h.eject(now, false)
}

// eject starts the next ejection, silent or fast. h.mu must be held. The failure count is
// left as it is, for the target table (docs/operations.md, The target table): only an ejected target's
// success sets it back to 0, and nothing reads it while the target is ejected.
func (h *Health) eject(now time.Time, silent bool) time.Duration {
	h.inRow++
	d := ejectFor(h.ejectBase, h.ejectMax, h.inRow)
	if silent {
		d = max(d, h.ejectSilent)
	}
	h.ejected, h.probing, h.silent, h.freed = true, false, silent, false
	h.ejectUntil = now.Add(d)
	h.calm.Store(false)
	h.ejections.Add(1)
	return d
}

// WantsProbe reports whether the background probe should look at this target now: it is ejected for timing
// out, its ejection is still running, no request is probing it, and background answers are still believed.
func (h *Health) WantsProbe(now time.Time) bool {
	if h.calm.Load() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.wantsProbe(now)
}

func (h *Health) wantsProbe(now time.Time) bool {
	return h.ejected && h.silent && !h.distrust && !h.probing && now.Before(h.ejectUntil)
}

// ProbeAnswered records that the background probe got an answer from the target: a silent ejection that
// WantsProbe would still probe ends now, so the next request probes the target with real traffic. It reports
// whether it ended one (log target_probe_answered).
func (h *Health) ProbeAnswered(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.wantsProbe(now) {
		return false
	}
	h.ejectUntil, h.freed = now, true
	return true
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

// State is what a target's health lets requests do with it now (failover_target_state, docs/decisions.md, Health).
type State uint8

const (
	StateUp          State = iota // requests use it
	StateCooling                  // it asked for a pause (a Retry-After longer than FAILOVER_RETRY_AFTER_MAX): skipped until then
	StateProbing                  // its ejection is over: one request at a time tries it, the others skip it until one succeeds
	StateEjected                  // skipped until its ejection ends
	StateRateLimited              // its answers report a quota spent: skipped until the reset they gave, or an answer shows quota again
	NumStates
)

var stateNames = [NumStates]string{"up", "cooling", "probing", "ejected", "ratelimited"}

func (s State) String() string {
	if s < NumStates {
		return stateNames[s]
	}
	return "unknown"
}

// State returns the target's state now. An ejected target stays ejected or probing until a request shows it
// healthy, except that an expired ejection shows ratelimited while a rate limit keeps its probe back; a cooldown
// shows only when the target is not ejected, a rate limit only when it is neither ejected nor cooling down.
func (h *Health) State(now time.Time) State {
	if h.calm.Load() {
		if !h.rate.Usable(now) {
			return StateRateLimited
		}
		return StateUp
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state(now, h.rate.Usable(now))
}

// state is State under h.mu, given whether the rate limit lets the target be used now.
func (h *Health) state(now time.Time, rateUsable bool) State {
	switch {
	case h.ejected && now.Before(h.ejectUntil) && !h.probing:
		return StateEjected
	case h.ejected && !h.probing && !rateUsable:
		return StateRateLimited
	case h.ejected:
		return StateProbing
	case now.Before(h.coolUntil):
		return StateCooling
	case !rateUsable:
		return StateRateLimited
	}
	return StateUp
}

// Ejections returns how many times the target has been ejected (monotonic, for failover_target_ejections_total).
func (h *Health) Ejections() uint64 { return h.ejections.Load() }
