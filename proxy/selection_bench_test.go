package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/proxy/internal/config"
)

// selectionExchange builds a server with n targets under strategy and an exchange holding a
// chat request with a session header, ready for selectCandidates. Targets are never dialled.
func selectionExchange(tb testing.TB, strategy string, n int) *exchange {
	tb.Helper()
	environ := []string{"FAILOVER_STRATEGY=" + strategy}
	for i := range n {
		environ = append(environ, fmt.Sprintf("FAILOVER_TARGET_%d_URL=http://127.0.0.1:%d/v1", i, 20000+i),
			fmt.Sprintf("FAILOVER_TARGET_%d_NAME=t%d", i, i), fmt.Sprintf("FAILOVER_TARGET_%d_WEIGHT=%d", i, 1+i%3))
	}
	cfg, err := config.Load(environ, true)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(cfg, Options{})
	if err != nil {
		tb.Fatal(err)
	}
	for i, t := range s.targets { // every target measured, so least-latency compares them all
		t.observeLatency(time.Duration(50+(i*7919)%200) * time.Millisecond)
	}
	ex := newExchange(s)
	ctx := &fasthttp.RequestCtx{}
	ctx.Request.Header.Set("X-Session-Id", "sess_2f9c1a7e4b")
	ex.ctx = ctx
	ex.Path = []byte("/v1/chat/completions")
	ex.fields = scanRequest([]byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	ex.selectCandidates(time.Now()) // size the candidate lists
	if len(ex.cands) != n {
		tb.Fatalf("%d candidates, want %d", len(ex.cands), n)
	}
	return ex
}

var selectionStrategies = []string{"failover", "round-robin", "sticky", "least-latency"}

// BenchmarkSelection is candidate selection per request: filtering the targets that serve the
// path and model, the strategy's first pick, the rest in declared order.
func BenchmarkSelection(b *testing.B) {
	for _, strategy := range selectionStrategies {
		for _, n := range []int{3, 128} {
			b.Run(fmt.Sprintf("%s/%d-targets", strategy, n), func(b *testing.B) {
				ex := selectionExchange(b, strategy, n)
				now := time.Now() // read once per request by run(), not part of the selection
				b.ReportAllocs()
				for b.Loop() {
					ex.selectCandidates(now)
				}
			})
		}
	}
}

// TestSelectionAllocs: choosing candidates allocates nothing once an exchange's lists are sized.
func TestSelectionAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	for _, strategy := range selectionStrategies {
		for _, n := range []int{3, 128} {
			ex := selectionExchange(t, strategy, n)
			if allocs := testing.AllocsPerRun(100, func() { ex.selectCandidates(time.Now()) }); allocs != 0 {
				t.Errorf("%s with %d targets: %.1f allocations per selection, want 0", strategy, n, allocs)
			}
		}
	}
}
