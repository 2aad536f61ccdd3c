package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/llm-failover/failover/classify"
)

// Describe renders the effective policy for `failover -check`, one setting per line, with
// every secret masked: keys are reported as set or not, header values are left out.
func (c *Config) Describe() string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	s := &c.Server
	line("# server")
	line("FAILOVER_LISTEN=%s", s.Listen)
	line("FAILOVER_METRICS_LISTEN=%s", s.MetricsListen)
	line("FAILOVER_LOG_LEVEL=%s  FAILOVER_LOG_FORMAT=%s", s.LogLevel, s.LogFormat)
	line("FAILOVER_SHUTDOWN_TIMEOUT=%s", s.ShutdownTimeout)
	if s.InboundToken != "" {
		line("FAILOVER_INBOUND_TOKEN=<set>")
	} else {
		line("FAILOVER_INBOUND_TOKEN=<not set: any local client may call>")
	}
	line("FAILOVER_MAX_REQUEST_BYTES=%s  FAILOVER_MAX_RESPONSE_BYTES=%s  FAILOVER_MAX_INFLIGHT=%d", s.MaxRequestBytes, s.MaxResponseBytes, s.MaxInflight)
	line("FAILOVER_ALLOW_UNDERSCORE_HEADERS=%t", s.AllowUnderscoreHeaders)
	line("# targets")
	for i, t := range c.Targets {
		key := "<client credentials forwarded>"
		if t.APIKey != "" {
			key = "<set>"
			if t.APIKeyFile != "" {
				key = "<set from " + t.APIKeyFile + ">"
			}
		}
		line("FAILOVER_TARGET_%d: name=%s url=%s auth=%s key=%s", i, t.Name, MaskURL(t.URL), t.Auth, key)
		if f, _ := t.Fields(); len(f.Headers) > 0 {
			names := make([]string, len(f.Headers))
			for j, h := range f.Headers {
				names[j] = string(h[0])
			}
			line("    headers: %s (values hidden)", strings.Join(names, ", "))
		}
		var extra []string
		if t.Model != "" {
			extra = append(extra, "model="+t.Model)
		}
		if t.Models != "" {
			extra = append(extra, "models="+t.Models)
		}
		if t.Paths != "" {
			extra = append(extra, "paths="+t.Paths)
		}
		extra = append(extra, fmt.Sprintf("weight=%d retries=%d", t.Weight, t.Retries))
		if t.Resume != "" {
			extra = append(extra, "resume="+t.Resume)
		}
		line("    %s", strings.Join(extra, " "))
	}
	line("# policy")
	line("FAILOVER_STRATEGY=%s%s", s.Strategy, map[bool]string{true: "  FAILOVER_STICKY_HEADER=" + s.StickyHeader}[s.Strategy == "sticky"])
	bc := &c.Budget
	line("FAILOVER_ENABLED=%t  FAILOVER_MAX_ATTEMPTS=%d  FAILOVER_MAX_ELAPSED=%s", bc.Enabled, bc.MaxAttempts, limitText(bc.MaxElapsed))
	line("FAILOVER_SAME_TARGET_RETRIES=%d  FAILOVER_BACKOFF_BASE=%s  FAILOVER_BACKOFF_MAX=%s  FAILOVER_RETRY_AFTER_MAX=%s",
		bc.SameTargetRetries, bc.BackoffBase, capText(bc.BackoffMax), bc.RetryAfterMax)
	line("FAILOVER_CONNECT_TIMEOUT=%s  FAILOVER_FIRST_BYTE_TIMEOUT=%s  FAILOVER_IDLE_TIMEOUT=%s  FAILOVER_ATTEMPT_TIMEOUT=%s",
		limitText(s.ConnectTimeout), limitText(s.FirstByteTimeout), limitText(s.IdleTimeout), limitText(s.AttemptTimeout))
	line("FAILOVER_PEEK_BYTES=%s", s.PeekBytes)
	line("FAILOVER_EJECT_AFTER=%d  FAILOVER_EJECT_BASE=%s  FAILOVER_EJECT_MAX=%s  FAILOVER_EJECT_SILENT=%s  FAILOVER_PROBE_INTERVAL=%s",
		bc.EjectAfter, bc.EjectBase, capText(bc.EjectMax), bc.EjectSilent, offText(bc.ProbeInterval))
	line("FAILOVER_RETRY_BUDGET_RATIO=%g  FAILOVER_RETRY_BUDGET_MIN=%d", bc.RetryBudgetRatio, bc.RetryBudgetMin)
	line("FAILOVER_RATELIMIT_AWARE=%t  FAILOVER_RATELIMIT_FLOOR=%g", bc.RateLimitAware, bc.RateLimitFloor)
	line("%s", c.Resume.describe(c.Targets))
	line("%s", c.Hedge.describe())
	for _, l := range classify.NewPolicy(c.Classify, c.StopRules, c.SuccessRules, bc.RetryAfterMax).Describe() {
		line("%s", l)
	}
	return b.String()
}

// limitText renders a time limit for -check: 0 turns it off (docs/configuration.md),
// which a bare "0s" would not say.
func limitText(d time.Duration) string {
	if d == 0 {
		return "<no limit>"
	}
	return d.String()
}

// offText renders a setting for -check that 0 turns off.
func offText(d time.Duration) string {
	if d == 0 {
		return "<off>"
	}
	return d.String()
}

// capText renders a cap for -check. A bare "0s" would read as "capped at nothing" where it
// means the opposite (docs/configuration.md: 0 disables a limit).
func capText(d time.Duration) string {
	if d == 0 {
		return "<no cap>"
	}
	return d.String()
}

// describe renders the FAILOVER_RESUME line for -check.
func (c *ResumeConfig) describe(targets []TargetConfig) string {
	line := fmt.Sprintf("FAILOVER_RESUME=%s  FAILOVER_RESUME_MAX=%d", c.Mode, c.Max)
	if c.Instruction != "" {
		line += fmt.Sprintf("  FAILOVER_RESUME_INSTRUCTION=%q", c.Instruction)
	}
	if c.Mode == "on" && c.Max == 0 {
		return line + "  (FAILOVER_RESUME_MAX=0: no stream is resumed, as with FAILOVER_RESUME=off)"
	}
	if !c.On() {
		return line
	}
	for _, t := range targets {
		if t.Resume != "" {
			return line
		}
	}
	return line + "  (no target is marked resumable: set FAILOVER_TARGET_<i>_RESUME)"
}
