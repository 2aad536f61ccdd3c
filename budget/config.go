package budget

import (
	"fmt"
	"time"
)

// Config is the FAILOVER_* section budget owns, read once at start by caarlos0/env (the caller applies the
// FAILOVER_ prefix) and immutable afterwards: one Config may be shared by every Request and Health.
type Config struct {
	Enabled           bool          `env:"ENABLED" envDefault:"true"`
	MaxAttempts       int           `env:"MAX_ATTEMPTS" envDefault:"0"` // transfers allowed after the first target; 0 = every remaining target
	MaxElapsed        time.Duration `env:"MAX_ELAPSED" envDefault:"0"`  // 0 = no limit
	SameTargetRetries int           `env:"SAME_TARGET_RETRIES" envDefault:"1"`
	BackoffBase       time.Duration `env:"BACKOFF_BASE" envDefault:"200ms"`
	BackoffMax        time.Duration `env:"BACKOFF_MAX" envDefault:"5s"` // 0 = no cap
	RetryAfterMax     time.Duration `env:"RETRY_AFTER_MAX" envDefault:"10s"`
	EjectAfter        int           `env:"EJECT_AFTER" envDefault:"5"` // 0 = never eject on consecutive failures
	EjectBase         time.Duration `env:"EJECT_BASE" envDefault:"10s"`
	EjectMax          time.Duration `env:"EJECT_MAX" envDefault:"10s"`          // 0 = no cap
	EjectSilent       time.Duration `env:"EJECT_SILENT" envDefault:"60s"`       // shortest ejection after a timeout
	ProbeInterval     time.Duration `env:"PROBE_INTERVAL" envDefault:"5s"`      // background probe of targets ejected for timing out; 0 = off
	RetryBudgetRatio  float64       `env:"RETRY_BUDGET_RATIO" envDefault:"0.2"` // 0 = unlimited
	RetryBudgetMin    int           `env:"RETRY_BUDGET_MIN" envDefault:"10"`    // floor, per second, over a 10 s window
	RateLimitAware    bool          `env:"RATELIMIT_AWARE" envDefault:"true"`   // skip a target whose answers report its quota spent
	RateLimitFloor    float64       `env:"RATELIMIT_FLOOR" envDefault:"0"`      // fraction of a quota's limit below which it counts as spent
}

// maxRetryBudgetRatio bounds FAILOVER_RETRY_BUDGET_RATIO: past a thousand retries per request the budget no
// longer limits anything, and a value that large is a typo (a percentage written as 20 is still accepted).
const maxRetryBudgetRatio = 1000

// Validate returns one error per bad field, in field order, each naming the full variable. It is kept apart
// from use: the other functions of this package assume a valid Config and only guard against overflow.
func (c *Config) Validate() []error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("FAILOVER_"+name+": "+format, args...))
	}
	nonNegative := func(name string, v int) {
		if v < 0 {
			bad(name, "must be >= 0, got %d", v)
		}
	}
	nonNegativeDuration := func(name string, d time.Duration) bool {
		if d < 0 {
			bad(name, "must be >= 0, got %s", d)
			return false
		}
		return true
	}

	nonNegative("MAX_ATTEMPTS", c.MaxAttempts)
	nonNegativeDuration("MAX_ELAPSED", c.MaxElapsed)
	nonNegative("SAME_TARGET_RETRIES", c.SameTargetRetries)
	baseOK := nonNegativeDuration("BACKOFF_BASE", c.BackoffBase)
	// A cap of 0 is no cap (docs/configuration.md, Configuration reference: 0 disables a limit), so it is not below the base.
	if nonNegativeDuration("BACKOFF_MAX", c.BackoffMax) && baseOK && c.BackoffMax > 0 && c.BackoffMax < c.BackoffBase {
		bad("BACKOFF_MAX", "must be >= FAILOVER_BACKOFF_BASE (%s) or 0 (no cap), got %s", c.BackoffBase, c.BackoffMax)
	}
	nonNegativeDuration("RETRY_AFTER_MAX", c.RetryAfterMax)
	nonNegative("EJECT_AFTER", c.EjectAfter)
	// A zero ejection would hand the target straight back to a probe; FAILOVER_EJECT_AFTER=0 is the way to turn
	// consecutive-failure ejection off, and credential failures must still take a target out for a while.
	if c.EjectBase <= 0 {
		bad("EJECT_BASE", "must be > 0 (set FAILOVER_EJECT_AFTER=0 to never eject on failures), got %s", c.EjectBase)
	}
	switch {
	case c.EjectMax < 0:
		bad("EJECT_MAX", "must be >= 0, got %s", c.EjectMax)
	case c.EjectBase > 0 && c.EjectMax > 0 && c.EjectMax < c.EjectBase:
		bad("EJECT_MAX", "must be >= FAILOVER_EJECT_BASE (%s) or 0 (no cap), got %s", c.EjectBase, c.EjectMax)
	}
	nonNegativeDuration("EJECT_SILENT", c.EjectSilent)
	nonNegativeDuration("PROBE_INTERVAL", c.ProbeInterval)
	// Written so that NaN fails too.
	if !(c.RetryBudgetRatio >= 0 && c.RetryBudgetRatio <= maxRetryBudgetRatio) {
		bad("RETRY_BUDGET_RATIO", "must be in [0, %d] (0 = unlimited), got %g", maxRetryBudgetRatio, c.RetryBudgetRatio)
	}
	nonNegative("RETRY_BUDGET_MIN", c.RetryBudgetMin)
	// A floor of 1 would call every quota spent as soon as anything was used. Written so that NaN fails too.
	if !(c.RateLimitFloor >= 0 && c.RateLimitFloor < 1) {
		bad("RATELIMIT_FLOOR", "must be in [0, 1) (a fraction of the limit; 0 = only when none is left), got %g", c.RateLimitFloor)
	}
	return errs
}
