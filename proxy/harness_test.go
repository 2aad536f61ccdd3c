package proxy_test

import (
	"flag"
	"os"
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

// TestMain lets the tests marked t.Parallel run 16 at once unless -parallel is given: they
// spend their time waiting on loopback sockets and timers, not on a processor, and the default
// (GOMAXPROCS) would run only two at once on a two-core machine.
func TestMain(m *testing.M) {
	flag.Parse()
	pt.RaiseParallel(16)
	os.Exit(m.Run())
}
