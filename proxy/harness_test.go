package proxy_test

import (
	"testing"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// Short names for the shared harness.
var (
	start   = sidecar.Start
	targets = sidecar.Targets
	env     = sidecar.Env
)

// noRetries pins FAILOVER_SAME_TARGET_RETRIES to 0 for tests that count one attempt per
// target (written when that was the default; the default of 1 has tests of its own).
var noRetries = []string{"FAILOVER_SAME_TARGET_RETRIES=0"}

func upstream(t testing.TB, script ...pt.Step) *pt.Upstream { return sidecar.Upstream(t, script...) }

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
