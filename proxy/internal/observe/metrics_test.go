package observe

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/stream"
)

// The catalogue names its series as docs/operations.md lists them, each target's by the name
// it was given at its index, and each count lands in its own series.
func TestMetricsCountWhatTheyAreTold(t *testing.T) {
	cfg := &budget.Config{EjectAfter: 1, EjectBase: time.Second, EjectMax: time.Minute}
	m := NewMetrics([]Target{{Name: "a", Health: budget.NewHealth(cfg)}, {Name: "b", Health: budget.NewHealth(cfg)}},
		budget.SystemClock{}, Build{Version: "v1.2.3", Revision: "abc", GoVersion: "go1.26"})
	m.Request(stream.Messages, OutcomeOKAfterFailover, 2*time.Second, 40*time.Microsecond)
	m.StreamCommit(stream.ReasonHeaders)
	m.BudgetExhausted(BudgetElapsed)
	m.DroppedUnderscore(2)
	m.Inflight.Store(3)
	m.Procs.Store(5)
	b := m.Target(1)
	b.Attempt(classify.ClassServerError, classify.ActionTransfer)
	b.Attempt(classify.ClassServerError, classify.ActionTransfer)
	b.Ejection()
	b.EmptyResponse()
	b.Probe(ProbeSilent)
	b.Resume(ResumeFailed)
	b.FirstByte(30 * time.Millisecond)
	var page bytes.Buffer
	m.Write(&page)
	for _, line := range []string{
		`failover_requests_total{family="messages",outcome="ok_after_failover"} 1`,
		`failover_requests_total{family="chat",outcome="ok"} 0`,
		`failover_request_duration_seconds_bucket{family="messages",le="2.5"} 1`,
		`failover_overhead_seconds_bucket{le="5e-05"} 1`,
		`failover_build_info{version="v1.2.3",revision="abc",goversion="go1.26"} 1`,
		`failover_inflight_requests 3`,
		`failover_gomaxprocs 5`,
		`failover_stream_commits_total{reason="headers"} 1`,
		`failover_budget_exhausted_total{budget="max_elapsed"} 1`,
		`failover_dropped_headers_total{reason="underscore"} 2`,
		`failover_attempts_total{target="b",class="server_error",action="transfer"} 2`,
		`failover_attempts_total{target="a",class="server_error",action="transfer"} 0`,
		`failover_target_ejections_total{target="b"} 1`,
		`failover_empty_responses_total{target="b"} 1`,
		`failover_background_probes_total{target="b",result="silent"} 1`,
		`failover_resumes_total{target="b",outcome="failed"} 1`,
		`failover_upstream_first_byte_seconds_count{target="b"} 1`,
		`failover_target_up{target="a"} 1`,
		`failover_target_state{target="a",state="up"} 1`,
		`failover_ratelimit_avoided_total{target="a"} 0`,
		`# TYPE failover_requests_total counter`,
		`# TYPE failover_request_duration_seconds histogram`,
	} {
		if !strings.Contains(page.String(), "\n"+line+"\n") {
			t.Errorf("no %s", line)
		}
	}
	if strings.Contains(page.String(), "failover_ratelimit_remaining") {
		t.Error("failover_ratelimit_remaining before any answer reported a quota")
	}
}

// Counting on the request path allocates nothing once the catalogue is made.
func TestMetricsAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	cfg := &budget.Config{}
	m := NewMetrics([]Target{{Name: "a", Health: budget.NewHealth(cfg)}}, budget.SystemClock{}, Build{})
	tm := m.Target(0)
	n := testing.AllocsPerRun(1000, func() {
		m.Inflight.Add(1)
		m.Request(stream.Chat, OutcomeOK, time.Millisecond, time.Microsecond)
		m.StreamCommit(stream.ReasonContent)
		tm.Attempt(classify.ClassNone, classify.ActionCommit)
		tm.FirstByte(time.Millisecond)
		m.Inflight.Add(-1)
	})
	if n != 0 {
		t.Errorf("counting a request allocates %.1f times", n)
	}
}
