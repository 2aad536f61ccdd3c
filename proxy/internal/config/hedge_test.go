package config

import (
	"strings"
	"testing"
	"time"
)

// FAILOVER_HEDGE_AFTER, FAILOVER_HEDGE_AFTER_MIN and FAILOVER_HEDGE_BUDGET_RATIO
// (docs/configuration.md): off by default; a duration or a percentile in any case.
func TestLoadHedge(t *testing.T) {
	base := []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_1_URL=http://b/v1"}
	c, err := Load(base, true)
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Hedge; h.After.On() || h.After != (HedgeAfter{}) || h.AfterMin != 500*time.Millisecond || h.BudgetRatio != 0.05 {
		t.Fatalf("defaults: %+v", h)
	}
	for _, tc := range []struct {
		value string
		want  HedgeAfter
	}{
		{"0", HedgeAfter{}},
		{"0s", HedgeAfter{}},
		{"2s", HedgeAfter{Fixed: 2 * time.Second}},
		{"1m30s", HedgeAfter{Fixed: 90 * time.Second}},
		{"750ms", HedgeAfter{Fixed: 750 * time.Millisecond}},
		{"p95", HedgeAfter{Percentile: 95}},
		{"P95", HedgeAfter{Percentile: 95}},
		{" p50 ", HedgeAfter{Percentile: 50}},
		{"p99", HedgeAfter{Percentile: 99}},
		{"p73", HedgeAfter{Percentile: 73}},
	} {
		t.Run(tc.value, func(t *testing.T) {
			c, err := Load(append(base, "FAILOVER_HEDGE_AFTER="+tc.value), true)
			if err != nil {
				t.Fatal(err)
			}
			if c.Hedge.After != tc.want || c.Hedge.After.On() != (tc.want != HedgeAfter{}) {
				t.Fatalf("%+v (on %v), want %+v", c.Hedge.After, c.Hedge.After.On(), tc.want)
			}
		})
	}
}

// A value that does not parse is an error naming the variable and what to write, with a
// suggestion where the value is a near miss.
func TestLoadHedgeErrors(t *testing.T) {
	const usage = "not a duration or a percentile: use a Go duration with a unit like 2s, p50 to p99 like p95, or 0 (off)"
	for _, tc := range []struct {
		name, env, want string
	}{
		{"percentile written after", "FAILOVER_HEDGE_AFTER=95p", `FAILOVER_HEDGE_AFTER="95p": ` + usage + " (did you mean p95?)"},
		{"percentile with a percent sign", "FAILOVER_HEDGE_AFTER=p95%", "(did you mean p95?)"},
		{"a percent", "FAILOVER_HEDGE_AFTER=95%", "(did you mean p95?)"},
		{"an ordinal", "FAILOVER_HEDGE_AFTER=95th", "(did you mean p95?)"},
		{"a space inside", "FAILOVER_HEDGE_AFTER=P 90", "(did you mean p90?)"},
		{"a letter off", "FAILOVER_HEDGE_AFTER=o95", "(did you mean p95?)"},
		{"a leading zero", "FAILOVER_HEDGE_AFTER=p095", `FAILOVER_HEDGE_AFTER="p095": a percentile is p50 to p99, like p95 (did you mean p95?)`},
		{"p100", "FAILOVER_HEDGE_AFTER=p100", `FAILOVER_HEDGE_AFTER="p100": a percentile is p50 to p99, like p95`},
		{"below p50", "FAILOVER_HEDGE_AFTER=p10", "a percentile is p50 to p99"},
		{"a bare number", "FAILOVER_HEDGE_AFTER=2", usage + " (did you mean 2s?)"},
		{"a bare number that may be a percentile", "FAILOVER_HEDGE_AFTER=95", "(did you mean p95, or 95s?)"},
		{"a space before the unit", "FAILOVER_HEDGE_AFTER=500 ms", "(did you mean 500ms?)"},
		{"off as a word", "FAILOVER_HEDGE_AFTER=off", "(did you mean 0?)"},
		{"negative", "FAILOVER_HEDGE_AFTER=-1s", `FAILOVER_HEDGE_AFTER="-1s": must be >= 0 (0 = off)`},
		{"a negative minimum", "FAILOVER_HEDGE_AFTER_MIN=-1s", `FAILOVER_HEDGE_AFTER_MIN="-1s": must be >= 0`},
		{"a minimum without a unit", "FAILOVER_HEDGE_AFTER_MIN=500", `FAILOVER_HEDGE_AFTER_MIN="500": not a duration`},
		{"a ratio above 1", "FAILOVER_HEDGE_BUDGET_RATIO=5", `FAILOVER_HEDGE_BUDGET_RATIO="5": must be in [0, 1], a fraction of first attempts (0.05 = 5%; 0 = no hedge)`},
		{"a negative ratio", "FAILOVER_HEDGE_BUDGET_RATIO=-0.1", "must be in [0, 1]"},
		{"a NaN ratio", "FAILOVER_HEDGE_BUDGET_RATIO=NaN", "must be in [0, 1]"},
		{"a ratio as a percentage", "FAILOVER_HEDGE_BUDGET_RATIO=5%", `FAILOVER_HEDGE_BUDGET_RATIO="5%": not a number`},
		{"a misspelt name", "FAILOVER_HEDGE_AFTR=p95", "FAILOVER_HEDGE_AFTR: unknown variable (did you mean FAILOVER_HEDGE_AFTER?)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]string{"FAILOVER_TARGET_0_URL=http://a/v1", tc.env}, true)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("message lacks %q:\n%v", tc.want, err)
			}
		})
	}
	_, err := Load([]string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_HEDGE_AFTER=soon"}, true)
	if err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("a value close to nothing: %v", err)
	}
}

// -check prints the hedge line, and says what the percentile form reads and when nothing is hedged.
func TestCheckShowsHedge(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"off", nil, "\nFAILOVER_HEDGE_AFTER=<off>  FAILOVER_HEDGE_AFTER_MIN=500ms  FAILOVER_HEDGE_BUDGET_RATIO=0.05\n"},
		{"fixed", []string{"FAILOVER_HEDGE_AFTER=1500ms"}, "\nFAILOVER_HEDGE_AFTER=1.5s  FAILOVER_HEDGE_AFTER_MIN=500ms  FAILOVER_HEDGE_BUDGET_RATIO=0.05\n"},
		{"percentile", []string{"FAILOVER_HEDGE_AFTER=P95", "FAILOVER_HEDGE_BUDGET_RATIO=0.1"},
			"\nFAILOVER_HEDGE_AFTER=p95  FAILOVER_HEDGE_AFTER_MIN=500ms  FAILOVER_HEDGE_BUDGET_RATIO=0.1  (of each target's own recent times to commit; 2s until it has 20 within 5m0s)\n"},
		{"percentile with a minimum above the default", []string{"FAILOVER_HEDGE_AFTER=p90", "FAILOVER_HEDGE_AFTER_MIN=3s"},
			"FAILOVER_HEDGE_AFTER_MIN=3s  FAILOVER_HEDGE_BUDGET_RATIO=0.05  (of each target's own recent times to commit; 3s until it has 20"},
		{"no budget", []string{"FAILOVER_HEDGE_AFTER=p95", "FAILOVER_HEDGE_BUDGET_RATIO=0"}, "FAILOVER_HEDGE_BUDGET_RATIO=0  (FAILOVER_HEDGE_BUDGET_RATIO=0: no request is hedged)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(append([]string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_1_URL=http://b/v1"}, tc.env...), true)
			if err != nil {
				t.Fatal(err)
			}
			if d := c.Describe(); !strings.Contains(d, tc.want) {
				t.Errorf("-check lacks %q:\n%s", tc.want, d)
			}
		})
	}
}

// With one target there is no next one to hedge to.
func TestLoadWarnsAboutHedgingOneTarget(t *testing.T) {
	c, err := Load([]string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_HEDGE_AFTER=p95"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || c.Warnings[0].Message != `FAILOVER_HEDGE_AFTER="p95": has no effect with one target: a hedge goes to the next target` {
		t.Fatalf("warnings: %v", c.Warnings)
	}
}

// FuzzHedgeAfter: FAILOVER_HEDGE_AFTER's parser never panics, and a value it accepts is written
// back by String as a value that parses to the same setting (what -check prints can be set again).
func FuzzHedgeAfter(f *testing.F) {
	for _, s := range []string{"0", "2s", "p95", "P50", "95p", "p100", "-1s", "1h2m3.5s", "p", "p9", "9223372036854775807ns", " p75 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var h HedgeAfter
		if err := h.UnmarshalText([]byte(s)); err != nil {
			if h != (HedgeAfter{}) {
				t.Fatalf("%q: an error and a setting %+v", s, h)
			}
			return
		}
		if h.Fixed < 0 || h.Percentile != 0 && (h.Percentile < 50 || h.Percentile > 99) || h.Fixed > 0 && h.Percentile > 0 {
			t.Fatalf("%q: %+v", s, h)
		}
		var again HedgeAfter
		if err := again.UnmarshalText([]byte(h.String())); err != nil || again != h {
			t.Fatalf("%q read as %+v, written %q, read back as %+v (%v)", s, h, h.String(), again, err)
		}
	})
}
