package proxy_test

import (
	"fmt"
	"testing"
)

// A session keeps its target across a restart of the sidecar (a rollout, a crash): two
// sidecars with the same targets send every session to the same target, so the prompt cache
// the session built stays where it is (docs/configuration.md, Configuration reference, Policy: FAILOVER_STRATEGY).
func TestStickySurvivesARestart(t *testing.T) {
	t.Parallel()
	a, b, c := upstream(t), upstream(t), upstream(t)
	cfg := env(targets(a.URL, b.URL, c.URL), []string{"FAILOVER_STRATEGY=sticky"})
	first, second := start(t, cfg...), start(t, cfg...)
	used := map[string]bool{}
	for i := range 20 {
		session := fmt.Sprintf("X-Session-Id: session-%d", i)
		one := first.Post("/chat/completions", chatBody, session).Header.Get("X-Failover-Target")
		two := second.Post("/chat/completions", chatBody, session).Header.Get("X-Failover-Target")
		if one != two {
			t.Fatalf("session-%d went to %s, then to %s after the restart", i, one, two)
		}
		used[one] = true
	}
	if len(used) != 3 {
		t.Fatalf("20 sessions used only %v", used)
	}
}
