package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/llm-failover/failover/proxy/internal/config"
)

// TestNewRefusesUnknownStrategy: a configuration built in code (as the drill builds one) with a
// strategy no table row names is refused, not run in declared order behind the operator's back.
func TestNewRefusesUnknownStrategy(t *testing.T) {
	cfg, err := config.Load([]string{"FAILOVER_TARGET_0_URL=http://127.0.0.1:1/v1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.Strategy = "random"
	if _, err := New(cfg, Options{}); err == nil || !strings.Contains(err.Error(), "FAILOVER_STRATEGY") {
		t.Fatalf("New with an unknown strategy: err = %v, want one naming FAILOVER_STRATEGY", err)
	}
}

// TestEveryStrategyLoadsAndBuilds: each name Load accepts builds its own strategy, so the
// list that validates and the constructors that build cannot drift apart.
func TestEveryStrategyLoadsAndBuilds(t *testing.T) {
	if got, want := strings.Join(strategyNames(), ","), strings.Join(config.StrategyNames(), ","); got != want {
		t.Fatalf("New builds %s; Load accepts %s", got, want)
	}
	built := map[string]bool{}
	for _, name := range strategyNames() {
		cfg, err := config.Load([]string{"FAILOVER_TARGET_0_URL=http://127.0.0.1:1/v1", "FAILOVER_STRATEGY=" + name}, true)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s, err := New(cfg, Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		typ := strings.TrimPrefix(typeName(s.strategy), "*")
		if built[typ] {
			t.Errorf("%s builds %s, as another name does", name, typ)
		}
		built[typ] = true
	}
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
