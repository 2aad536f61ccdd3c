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

func upstream(t testing.TB, script ...pt.Step) *pt.Upstream { return sidecar.Upstream(t, script...) }

const chatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
