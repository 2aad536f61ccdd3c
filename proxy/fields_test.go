package proxy

import (
	"strings"
	"testing"

	"github.com/llm-failover/failover/proxy/internal/config"
)

// TestTargetFieldsParsedOnce: Load parses a target's _HEADERS, _MODELS and _PATHS once, and New
// and -check use that parse: a text changed after Load is not read again.
func TestTargetFieldsParsedOnce(t *testing.T) {
	cfg, err := config.Load([]string{
		"FAILOVER_TARGET_0_URL=http://127.0.0.1:1/v1",
		"FAILOVER_TARGET_0_HEADERS=X-Team=a",
		"FAILOVER_TARGET_0_MODELS=gpt-4o*",
		"FAILOVER_TARGET_0_PATHS=/v1/chat",
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	tc := &cfg.Targets[0]
	tc.Headers, tc.Models, tc.Paths = "not a header list", "a*b", "no-slash"
	s, err := New(cfg, Options{})
	if err != nil {
		t.Fatalf("New parsed the target's fields again: %v", err)
	}
	tg := s.targets[0]
	if len(tg.headers) != 1 || string(tg.headers[0][0]) != "X-Team" || len(tg.models) != 1 || len(tg.paths) != 1 {
		t.Errorf("the target did not get Load's parse: %d headers, %d models, %d paths", len(tg.headers), len(tg.models), len(tg.paths))
	}
	if !strings.Contains(cfg.Describe(), "headers: X-Team (values hidden)") {
		t.Errorf("-check does not show Load's parse:\n%s", cfg.Describe())
	}
}
