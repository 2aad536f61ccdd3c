package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/llm-failover/failover/budget"
)

// HedgeConfig is the FAILOVER_HEDGE_* section (docs/streams.md#hedging): read once at start,
// immutable afterwards.
type HedgeConfig struct {
	After HedgeAfter `env:"HEDGE_AFTER" envDefault:"0"`
	// AfterMin is the least delay of the percentile form: a percentile below it counts as it. The
	// fixed form does not read it.
	AfterMin time.Duration `env:"HEDGE_AFTER_MIN" envDefault:"500ms"`
	// BudgetRatio bounds hedges to this fraction of first attempts over ten seconds, plus a floor
	// (budget.HedgeBudget); 0 allows none.
	BudgetRatio float64 `env:"HEDGE_BUDGET_RATIO" envDefault:"0.05"`
}

// HedgeAfter is FAILOVER_HEDGE_AFTER: how long an attempt may go without committing before a
// second one starts beside it. The zero value is off. At most one of its fields is set.
type HedgeAfter struct {
	Fixed      time.Duration // > 0: this long, whatever the target
	Percentile int           // 50 to 99: this percentile of the target's own recent times to commit (budget.CommitTimes)
}

// On reports whether hedging is configured.
func (h HedgeAfter) On() bool { return h.Fixed > 0 || h.Percentile > 0 }

// String returns the setting as it is best written: "0" (off), a duration, or "p95".
func (h HedgeAfter) String() string {
	switch {
	case h.Percentile > 0:
		return "p" + strconv.Itoa(h.Percentile)
	case h.Fixed > 0:
		return h.Fixed.String()
	}
	return "0"
}

// The percentiles FAILOVER_HEDGE_AFTER accepts: below p50 nearly every request would be hedged, and
// p100 is the slowest sample, one slow answer's time.
const minHedgePercentile, maxHedgePercentile = 50, 99

// maxHedgeBudgetRatio bounds FAILOVER_HEDGE_BUDGET_RATIO: at 1 every request may be hedged, which is
// the most hedging can cost (at most two attempts in flight).
const maxHedgeBudgetRatio = 1

// UnmarshalText reads FAILOVER_HEDGE_AFTER (for caarlos0/env): 0 or any zero duration (off), a
// positive Go duration, or p50 to p99 in any case. Its errors say what to write instead.
func (h *HedgeAfter) UnmarshalText(text []byte) error {
	v := strings.TrimSpace(string(text))
	if len(v) > 1 && (v[0] == 'p' || v[0] == 'P') && digitsOnly(v[1:]) {
		n, err := strconv.Atoi(v[1:])
		inRange := err == nil && n >= minHedgePercentile && n <= maxHedgePercentile
		if !inRange || len(v) != 3 {
			hint := ""
			if inRange {
				hint = fmt.Sprintf(" (did you mean p%d?)", n) // p095
			}
			return fmt.Errorf("a percentile is p%d to p%d, like p95%s", minHedgePercentile, maxHedgePercentile, hint)
		}
		*h = HedgeAfter{Percentile: n}
		return nil
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return fmt.Errorf("not a duration or a percentile: use a Go duration with a unit like 2s, p%d to p%d like p95, or 0 (off)%s",
			minHedgePercentile, maxHedgePercentile, hedgeAfterHint(v))
	case d < 0:
		return errors.New("must be >= 0 (0 = off)")
	}
	*h = HedgeAfter{Fixed: d}
	return nil
}

func digitsOnly(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) > 0
}

// hedgeAfterHint suggests what a FAILOVER_HEDGE_AFTER value that does not parse was meant as: a
// percentile written another way (95p, p95%, 95%, 95th, P 95), a word for off, a bare number
// without its unit, or a near miss of a percentile's spelling (valueHint). "" when none is close.
func hedgeAfterHint(v string) string {
	lv := strings.ToLower(strings.Join(strings.Fields(v), ""))
	for _, words := range valueSynonyms {
		if contains(words, lv) && contains(words, "off") {
			return " (did you mean 0?)"
		}
	}
	if _, err := time.ParseDuration(lv); err == nil && lv != v {
		return fmt.Sprintf(" (did you mean %s?)", lv)
	}
	i := strings.IndexAny(lv, "0123456789")
	if i < 0 {
		return ""
	}
	j := i
	for j < len(lv) && lv[j] >= '0' && lv[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(lv[i:j])
	inRange := err == nil && n >= minHedgePercentile && n <= maxHedgePercentile
	rest := lv[:i] + lv[j:]
	switch {
	case rest == "" && inRange:
		return fmt.Sprintf(" (did you mean p%d, or %ds?)", n, n)
	case rest == "" && err == nil:
		return fmt.Sprintf(" (did you mean %ds?)", n)
	case inRange && strings.Trim(rest, "p%th") == "":
		return fmt.Sprintf(" (did you mean p%d?)", n)
	}
	names := make([]string, 0, maxHedgePercentile-minHedgePercentile+1)
	for p := minHedgePercentile; p <= maxHedgePercentile; p++ {
		names = append(names, "p"+strconv.Itoa(p))
	}
	return valueHint(lv, names)
}

// validateHedge checks FAILOVER_HEDGE_AFTER_MIN and FAILOVER_HEDGE_BUDGET_RATIO
// (FAILOVER_HEDGE_AFTER was checked as it was read).
func (l *loader) validateHedge(c *Config) {
	h := &c.Hedge
	if h.AfterMin < 0 {
		l.problem("%s: must be >= 0", l.shown(envPrefix+"HEDGE_AFTER_MIN"))
	}
	// Written so that NaN fails too.
	if !(h.BudgetRatio >= 0 && h.BudgetRatio <= maxHedgeBudgetRatio) {
		l.problem("%s: must be in [0, %d], a fraction of first attempts (0.05 = 5%%; 0 = no hedge)", l.shown(envPrefix+"HEDGE_BUDGET_RATIO"), maxHedgeBudgetRatio)
	}
}

// describe renders the FAILOVER_HEDGE_* line for -check.
func (h *HedgeConfig) describe() string {
	after := "<off>"
	if h.After.On() {
		after = h.After.String()
	}
	line := fmt.Sprintf("FAILOVER_HEDGE_AFTER=%s  FAILOVER_HEDGE_AFTER_MIN=%s  FAILOVER_HEDGE_BUDGET_RATIO=%g", after, h.AfterMin, h.BudgetRatio)
	switch {
	case h.After.On() && h.BudgetRatio == 0:
		return line + "  (FAILOVER_HEDGE_BUDGET_RATIO=0: no request is hedged)"
	case h.After.Percentile > 0:
		return line + fmt.Sprintf("  (of each target's own recent times to commit; %s until it has %d within %s)",
			max(budget.HedgeDelayDefault, h.AfterMin), budget.CommitMinSamples, budget.CommitWindow)
	}
	return line
}
