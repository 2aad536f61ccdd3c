package config

import (
	"strings"
	"testing"
)

// A setting the rest of the configuration leaves without effect gets a warning naming it and
// the setting that turns it off; a setting that has its effect gets none.
func TestLoadWarnsAboutSettingsWithoutEffect(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want map[string]string // variable → a part of its warning; empty = no warning at all
	}{
		{"a target's resume with resume off", []string{"FAILOVER_TARGET_0_RESUME=prefill"},
			map[string]string{"FAILOVER_TARGET_0_RESUME": `FAILOVER_TARGET_0_RESUME="prefill": has no effect while FAILOVER_RESUME=off: set FAILOVER_RESUME=on`}},
		{"resume max with resume off", []string{"FAILOVER_RESUME_MAX=2"},
			map[string]string{"FAILOVER_RESUME_MAX": "has no effect while FAILOVER_RESUME=off"}},
		{"resume on with resume max 0", []string{"FAILOVER_RESUME=on", "FAILOVER_RESUME_MAX=0", "FAILOVER_TARGET_0_RESUME=prefix"},
			map[string]string{"FAILOVER_RESUME": "has no effect with FAILOVER_RESUME_MAX=0", "FAILOVER_TARGET_0_RESUME": "has no effect with FAILOVER_RESUME_MAX=0"}},
		{"resume on without a resumable target", []string{"FAILOVER_RESUME=on"},
			map[string]string{"FAILOVER_RESUME": "no target is marked resumable"}},
		{"resume on with a resumable target", []string{"FAILOVER_RESUME=ON", "FAILOVER_TARGET_0_RESUME=prefill", "FAILOVER_RESUME_MAX=2"}, nil},
		{"a sticky header without sticky", []string{"FAILOVER_STICKY_HEADER=X-User"},
			map[string]string{"FAILOVER_STICKY_HEADER": `FAILOVER_STICKY_HEADER="X-User": has no effect with FAILOVER_STRATEGY=failover: only sticky hashes it`}},
		{"a sticky header with sticky", []string{"FAILOVER_STRATEGY=sticky", "FAILOVER_STICKY_HEADER=X-User", "FAILOVER_TARGET_0_WEIGHT=2"}, nil},
		{"a weight without round-robin", []string{"FAILOVER_STRATEGY=least-latency", "FAILOVER_TARGET_0_WEIGHT=3"},
			map[string]string{"FAILOVER_TARGET_0_WEIGHT": "has no effect with FAILOVER_STRATEGY=least-latency: only round-robin and sticky weigh targets"}},
		{"a weight with round-robin", []string{"FAILOVER_STRATEGY=round-robin", "FAILOVER_TARGET_0_WEIGHT=3"}, nil},
		{"a retry budget floor with ratio 0", []string{"FAILOVER_RETRY_BUDGET_RATIO=0", "FAILOVER_RETRY_BUDGET_MIN=5"},
			map[string]string{"FAILOVER_RETRY_BUDGET_MIN": "has no effect with FAILOVER_RETRY_BUDGET_RATIO=0"}},
		{"a retry budget floor with a ratio", []string{"FAILOVER_RETRY_BUDGET_RATIO=0.1", "FAILOVER_RETRY_BUDGET_MIN=5"}, nil},
		{"a rate-limit floor without awareness", []string{"FAILOVER_RATELIMIT_AWARE=false", "FAILOVER_RATELIMIT_FLOOR=0.1"},
			map[string]string{"FAILOVER_RATELIMIT_FLOOR": "has no effect with FAILOVER_RATELIMIT_AWARE=false"}},
		{"a rate-limit floor with awareness", []string{"FAILOVER_RATELIMIT_FLOOR=0.1"}, nil},
		{"failover disabled leaves retries, transfers and resume without effect", []string{"FAILOVER_ENABLED=false", "FAILOVER_SAME_TARGET_RETRIES=2",
			"FAILOVER_MAX_ATTEMPTS=1", "FAILOVER_MAX_ELAPSED=30s", "FAILOVER_BACKOFF_BASE=100ms", "FAILOVER_BACKOFF_MAX=1s", "FAILOVER_RETRY_BUDGET_RATIO=0.5",
			"FAILOVER_RETRY_BUDGET_MIN=3", "FAILOVER_RESUME=on", "FAILOVER_RESUME_MAX=2", "FAILOVER_TARGET_0_RETRIES=3", "FAILOVER_TARGET_0_RESUME=prefill"},
			map[string]string{"FAILOVER_SAME_TARGET_RETRIES": "", "FAILOVER_MAX_ATTEMPTS": "", "FAILOVER_MAX_ELAPSED": "", "FAILOVER_BACKOFF_BASE": "",
				"FAILOVER_BACKOFF_MAX": "", "FAILOVER_RETRY_BUDGET_RATIO": "", "FAILOVER_RETRY_BUDGET_MIN": "", "FAILOVER_RESUME": "", "FAILOVER_RESUME_MAX": "",
				"FAILOVER_TARGET_0_RETRIES": "has no effect with FAILOVER_ENABLED=false, which allows one attempt: no retry, transfer or resume",
				"FAILOVER_TARGET_0_RESUME":  "has no effect with FAILOVER_ENABLED=false"}},
		{"failover disabled alone", []string{"FAILOVER_ENABLED=false"}, nil},
		{"a backoff without retries", []string{"FAILOVER_SAME_TARGET_RETRIES=0", "FAILOVER_BACKOFF_BASE=1s"},
			map[string]string{"FAILOVER_BACKOFF_BASE": "has no effect: no target retries"}},
		{"a backoff with one target retrying", []string{"FAILOVER_SAME_TARGET_RETRIES=0", "FAILOVER_TARGET_1_RETRIES=1", "FAILOVER_BACKOFF_MAX=1s"}, nil},
		{"a default retry count every target overrides", []string{"FAILOVER_SAME_TARGET_RETRIES=2", "FAILOVER_TARGET_0_RETRIES=1", "FAILOVER_TARGET_1_RETRIES=0"},
			map[string]string{"FAILOVER_SAME_TARGET_RETRIES": "has no effect: every target sets its own FAILOVER_TARGET_<i>_RETRIES"}},
		{"a default retry count one target uses", []string{"FAILOVER_SAME_TARGET_RETRIES=2", "FAILOVER_TARGET_0_RETRIES=1"}, nil},
		{"auth without a key", []string{"FAILOVER_TARGET_0_AUTH=none"},
			map[string]string{"FAILOVER_TARGET_0_AUTH": `FAILOVER_TARGET_0_AUTH="none": has no effect without a key: the client's own credentials are forwarded as they came`}},
		{"auth with a key", []string{"FAILOVER_TARGET_0_AUTH=x-api-key", "FAILOVER_TARGET_0_API_KEY=sk-test-not-shown"}, nil},
		{"a hedge minimum and budget with hedging off", []string{"FAILOVER_HEDGE_AFTER=0", "FAILOVER_HEDGE_AFTER_MIN=1s", "FAILOVER_HEDGE_BUDGET_RATIO=0.1"},
			map[string]string{"FAILOVER_HEDGE_AFTER_MIN": `FAILOVER_HEDGE_AFTER_MIN="1s": has no effect while FAILOVER_HEDGE_AFTER=0, which turns hedging off`,
				"FAILOVER_HEDGE_BUDGET_RATIO": "has no effect while FAILOVER_HEDGE_AFTER=0"}},
		{"a hedge minimum with a fixed delay", []string{"FAILOVER_HEDGE_AFTER=1s", "FAILOVER_HEDGE_AFTER_MIN=1s", "FAILOVER_HEDGE_BUDGET_RATIO=0.1"},
			map[string]string{"FAILOVER_HEDGE_AFTER_MIN": "has no effect with FAILOVER_HEDGE_AFTER=1s: the minimum bounds only a percentile (p50 to p99)"}},
		{"a hedge minimum with a percentile", []string{"FAILOVER_HEDGE_AFTER=p95", "FAILOVER_HEDGE_AFTER_MIN=1s", "FAILOVER_HEDGE_BUDGET_RATIO=0.1"}, nil},
		{"hedging with failover disabled", []string{"FAILOVER_ENABLED=false", "FAILOVER_HEDGE_AFTER=p95", "FAILOVER_HEDGE_BUDGET_RATIO=0.1"},
			map[string]string{"FAILOVER_HEDGE_AFTER": `FAILOVER_HEDGE_AFTER="p95": has no effect with FAILOVER_ENABLED=false, which allows one attempt: no hedge`,
				"FAILOVER_HEDGE_BUDGET_RATIO": "has no effect with FAILOVER_ENABLED=false"}},
		{"hedging with no hedge budget", []string{"FAILOVER_HEDGE_AFTER=2s", "FAILOVER_HEDGE_BUDGET_RATIO=0"},
			map[string]string{"FAILOVER_HEDGE_AFTER": "has no effect with FAILOVER_HEDGE_BUDGET_RATIO=0, which allows no hedge"}},
		{"nothing set", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"FAILOVER_TARGET_0_URL=http://127.0.0.1:1/v1", "FAILOVER_TARGET_1_URL=http://127.0.0.1:2/v1"}, tc.env...)
			c, err := Load(env, true)
			if err != nil {
				t.Fatalf("a warning is not an error: %v", err)
			}
			got := map[string]string{}
			for _, w := range c.Warnings {
				if _, dup := got[w.Variable]; dup {
					t.Errorf("%s is warned about twice", w.Variable)
				}
				got[w.Variable] = w.Message
				if !strings.HasPrefix(w.Message, w.Variable) || strings.Contains(w.Message, "sk-test") {
					t.Errorf("warning %q does not start with its variable, or shows a key", w.Message)
				}
			}
			for v, part := range tc.want {
				if msg, ok := got[v]; !ok || !strings.Contains(msg, part) {
					t.Errorf("%s: want a warning with %q, got %q", v, part, msg)
				}
			}
			for v, msg := range got {
				if _, ok := tc.want[v]; !ok {
					t.Errorf("unexpected warning %q", msg)
				}
			}
		})
	}
}
