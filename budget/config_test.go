package budget

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// defaults is the Config that the envDefault tags describe.
func defaults() Config {
	return Config{
		Enabled:           true,
		SameTargetRetries: 1,
		BackoffBase:       200 * time.Millisecond,
		BackoffMax:        5 * time.Second,
		RetryAfterMax:     10 * time.Second,
		EjectAfter:        5,
		EjectBase:         10 * time.Second,
		EjectMax:          10 * time.Second,
		EjectSilent:       60 * time.Second,
		ProbeInterval:     5 * time.Second,
		RetryBudgetRatio:  0.2,
		RetryBudgetMin:    10,
		RateLimitAware:    true,
	}
}

// TestConfigTagsMatchDefaults parses every envDefault tag the way caarlos0/env does and compares it with
// defaults(), so the README's defaults, the tags and the tests cannot drift apart.
func TestConfigTagsMatchDefaults(t *testing.T) {
	var got Config
	v := reflect.ValueOf(&got).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, def := f.Tag.Get("env"), f.Tag.Get("envDefault")
		if name == "" || def == "" {
			t.Errorf("%s: env tag %q, envDefault %q: both must be set", f.Name, name, def)
			continue
		}
		var err error
		switch fv := v.Field(i); {
		case f.Type == reflect.TypeFor[time.Duration]():
			var d time.Duration
			d, err = time.ParseDuration(def)
			fv.SetInt(int64(d))
		case f.Type.Kind() == reflect.Bool:
			var b bool
			b, err = strconv.ParseBool(def)
			fv.SetBool(b)
		case f.Type.Kind() == reflect.Int:
			var n int64
			n, err = strconv.ParseInt(def, 10, 64)
			fv.SetInt(n)
		case f.Type.Kind() == reflect.Float64:
			var x float64
			x, err = strconv.ParseFloat(def, 64)
			fv.SetFloat(x)
		default:
			t.Fatalf("%s: unhandled type %s", f.Name, f.Type)
		}
		if err != nil {
			t.Errorf("FAILOVER_%s: envDefault %q: %v", name, def, err)
		}
	}
	if want := defaults(); got != want {
		t.Errorf("tags give %+v, want %+v", got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   []string // each error, in order
	}{
		{"defaults are valid", func(*Config) {}, nil},
		{"zeros that disable limits are valid", func(c *Config) {
			c.MaxAttempts, c.MaxElapsed, c.SameTargetRetries = 0, 0, 0
			c.BackoffBase, c.BackoffMax, c.RetryAfterMax, c.EjectAfter = 0, 0, 0, 0
			c.RetryBudgetRatio, c.RetryBudgetMin = 0, 0
		}, nil},
		{"disabled is still validated", func(c *Config) { c.Enabled, c.MaxAttempts = false, -1 },
			[]string{"FAILOVER_MAX_ATTEMPTS: must be >= 0, got -1"}},
		{"negative max elapsed", func(c *Config) { c.MaxElapsed = -time.Second },
			[]string{"FAILOVER_MAX_ELAPSED: must be >= 0, got -1s"}},
		{"negative same-target retries", func(c *Config) { c.SameTargetRetries = -2 },
			[]string{"FAILOVER_SAME_TARGET_RETRIES: must be >= 0, got -2"}},
		{"backoff max below base names both", func(c *Config) { c.BackoffMax = 100 * time.Millisecond },
			[]string{"FAILOVER_BACKOFF_MAX: must be >= FAILOVER_BACKOFF_BASE (200ms) or 0 (no cap), got 100ms"}},
		{"zero backoff max is no cap", func(c *Config) { c.BackoffMax = 0 }, nil},
		{"negative backoff base is reported once", func(c *Config) { c.BackoffBase = -time.Millisecond },
			[]string{"FAILOVER_BACKOFF_BASE: must be >= 0, got -1ms"}},
		{"negative backoff max is reported once", func(c *Config) { c.BackoffMax = -time.Millisecond },
			[]string{"FAILOVER_BACKOFF_MAX: must be >= 0, got -1ms"}},
		{"negative retry-after max", func(c *Config) { c.RetryAfterMax = -time.Second },
			[]string{"FAILOVER_RETRY_AFTER_MAX: must be >= 0, got -1s"}},
		{"negative eject after", func(c *Config) { c.EjectAfter = -1 },
			[]string{"FAILOVER_EJECT_AFTER: must be >= 0, got -1"}},
		{"zero eject base points at EJECT_AFTER", func(c *Config) { c.EjectBase = 0 },
			[]string{"FAILOVER_EJECT_BASE: must be > 0 (set FAILOVER_EJECT_AFTER=0 to never eject on failures), got 0s"}},
		{"eject max below base names both", func(c *Config) { c.EjectMax = 5 * time.Second },
			[]string{"FAILOVER_EJECT_MAX: must be >= FAILOVER_EJECT_BASE (10s) or 0 (no cap), got 5s"}},
		{"negative silent ejection", func(c *Config) { c.EjectSilent = -time.Second },
			[]string{"FAILOVER_EJECT_SILENT: must be >= 0, got -1s"}},
		{"negative probe interval", func(c *Config) { c.ProbeInterval = -time.Second },
			[]string{"FAILOVER_PROBE_INTERVAL: must be >= 0, got -1s"}},
		{"zero probe interval turns the background probe off", func(c *Config) { c.ProbeInterval = 0 }, nil},
		{"zero eject max is no cap", func(c *Config) { c.EjectMax = 0 }, nil},
		{"negative eject max", func(c *Config) { c.EjectMax = -time.Second },
			[]string{"FAILOVER_EJECT_MAX: must be >= 0, got -1s"}},
		{"negative ratio", func(c *Config) { c.RetryBudgetRatio = -0.1 },
			[]string{"FAILOVER_RETRY_BUDGET_RATIO: must be in [0, 1000] (0 = unlimited), got -0.1"}},
		{"ratio above 1000", func(c *Config) { c.RetryBudgetRatio = 1000.5 },
			[]string{"FAILOVER_RETRY_BUDGET_RATIO: must be in [0, 1000] (0 = unlimited), got 1000.5"}},
		{"ratio 1000 is valid", func(c *Config) { c.RetryBudgetRatio = 1000 }, nil},
		{"NaN ratio", func(c *Config) { c.RetryBudgetRatio = nan() },
			[]string{"FAILOVER_RETRY_BUDGET_RATIO: must be in [0, 1000] (0 = unlimited), got NaN"}},
		{"negative budget floor", func(c *Config) { c.RetryBudgetMin = -1 },
			[]string{"FAILOVER_RETRY_BUDGET_MIN: must be >= 0, got -1"}},
		{"rate-limit floor just below 1 is valid", func(c *Config) { c.RateLimitFloor = 0.999 }, nil},
		{"rate-limit floor of 1", func(c *Config) { c.RateLimitFloor = 1 },
			[]string{"FAILOVER_RATELIMIT_FLOOR: must be in [0, 1) (a fraction of the limit; 0 = only when none is left), got 1"}},
		{"rate-limit floor written as a percentage", func(c *Config) { c.RateLimitFloor = 5 },
			[]string{"FAILOVER_RATELIMIT_FLOOR: must be in [0, 1) (a fraction of the limit; 0 = only when none is left), got 5"}},
		{"negative rate-limit floor", func(c *Config) { c.RateLimitFloor = -0.1 },
			[]string{"FAILOVER_RATELIMIT_FLOOR: must be in [0, 1) (a fraction of the limit; 0 = only when none is left), got -0.1"}},
		{"NaN rate-limit floor", func(c *Config) { c.RateLimitFloor = nan() },
			[]string{"FAILOVER_RATELIMIT_FLOOR: must be in [0, 1) (a fraction of the limit; 0 = only when none is left), got NaN"}},
		{"rate-limit awareness off is valid", func(c *Config) { c.RateLimitAware = false }, nil},
		{"every bad field is reported, in field order", func(c *Config) {
			c.MaxAttempts, c.BackoffMax, c.EjectAfter, c.RetryBudgetMin = -1, time.Millisecond, -5, -3
		}, []string{
			"FAILOVER_MAX_ATTEMPTS: must be >= 0, got -1",
			"FAILOVER_BACKOFF_MAX: must be >= FAILOVER_BACKOFF_BASE (200ms) or 0 (no cap), got 1ms",
			"FAILOVER_EJECT_AFTER: must be >= 0, got -5",
			"FAILOVER_RETRY_BUDGET_MIN: must be >= 0, got -3",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaults()
			tt.change(&c)
			var got []string
			for _, err := range c.Validate() {
				got = append(got, err.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Validate() =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}
