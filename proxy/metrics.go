package proxy

import (
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/stream"
)

// Outcome is how a request ended, for failover_requests_total and the ledger.
type Outcome uint8

const (
	OutcomeOK              Outcome = iota // answered by the first attempt
	OutcomeOKAfterFailover                // answered after a retry or a transfer
	OutcomeUpstreamError                  // an upstream error went back (a stop: 400, a stop rule, ...)
	OutcomeExhausted                      // every candidate failed; the last error went back
	OutcomeBudgetExhausted                // a budget stopped the sweep; the last error went back
	OutcomeCancelled                      // the client went away
	OutcomePartial                        // committed, then failed: the client saw an error after output
	OutcomeRejected                       // refused by the sidecar itself (load shedding, auth, size, no target)
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "ok_after_failover", "upstream_error", "exhausted", "budget_exhausted", "cancelled", "partial", "rejected"}

func (o Outcome) String() string { return outcomeNames[o] }

// Budgets that end a request, for failover_budget_exhausted_total (README, Metrics). A
// target's own retries running out is not one of them: the sweep moves on, and the transfer
// shows in failover_attempts_total (log target_transfer_limit_reached).
type budgetKind uint8

const (
	budgetTransfers   budgetKind = iota // FAILOVER_MAX_ATTEMPTS
	budgetElapsed                       // FAILOVER_MAX_ELAPSED
	budgetRetryBudget                   // FAILOVER_RETRY_BUDGET_*
	numBudgets
)

var budgetNames = [numBudgets]string{"max_attempts", "max_elapsed", "retry_budget"}

// latencyBuckets suit LLM calls: milliseconds for a cached or tiny answer, minutes for a long
// generation.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}

// overheadBuckets suit the sidecar's own time: microseconds to tens of milliseconds.
var overheadBuckets = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5}

// serverMetrics is the metric catalogue (README, Observability, Metrics), created when the server starts so
// that recording allocates nothing. Safe for concurrent use.
type serverMetrics struct {
	set             *metrics.Set
	requests        [stream.NumFamilies][numOutcomes]*metrics.Counter
	duration        [stream.NumFamilies]*metrics.PrometheusHistogram
	overhead        *metrics.PrometheusHistogram
	inflight        atomic.Int64
	procs           atomic.Int64 // GOMAXPROCS as Server.AdaptProcs set it; 0 when it does not run
	streamCommits   [stream.NumCommitReasons]*metrics.Counter
	budgetExhausted [numBudgets]*metrics.Counter
	// droppedUnderscore counts the client headers with '_' in their names left behind.
	droppedUnderscore *metrics.Counter
	rateLimits        []*rateLimitMetrics // per target, in declared order
}

// targetMetrics are one target's series. The attempts counters are created on first use of
// each class/action pair (then cached), so /metrics lists only pairs that happened.
type targetMetrics struct {
	set       *metrics.Set
	name      string
	mu        sync.Mutex
	attempts  [classify.NumClasses][classify.NumActions]atomic.Pointer[metrics.Counter]
	firstByte *metrics.PrometheusHistogram
	ejections *metrics.Counter
	empty     *metrics.Counter
	probes    [numProbeResults]*metrics.Counter
	resumes   [numResumeOutcomes]*metrics.Counter // resume.go
}

// Background probe results, for failover_background_probes_total (prober.go).
const (
	probeAnswered = iota // the target answered (any status)
	probeSilent          // no answer within FAILOVER_PROBE_INTERVAL, or no connection
	numProbeResults
)

var probeResultNames = [numProbeResults]string{"answered", "silent"}

func newServerMetrics(targets []*Target, clock budget.Clock, build Build) *serverMetrics {
	// # HELP and # TYPE lines: Prometheus keeps the types (its metadata API, Grafana's metric
	// browser), and a histogram is then one histogram rather than three untyped series.
	// A process-wide switch of the library; only the scrape writes more.
	metrics.ExposeMetadata(true)
	m := &serverMetrics{set: metrics.NewSet()}
	for f := range stream.NumFamilies {
		for o := range numOutcomes {
			m.requests[f][o] = m.set.NewCounter(fmt.Sprintf(`failover_requests_total{family=%q,outcome=%q}`, stream.Family(f).String(), outcomeNames[o]))
		}
		m.duration[f] = m.set.NewPrometheusHistogramExt(fmt.Sprintf(`failover_request_duration_seconds{family=%q}`, stream.Family(f).String()), latencyBuckets)
	}
	m.overhead = m.set.NewPrometheusHistogramExt(`failover_overhead_seconds`, overheadBuckets)
	// Which build runs, as Prometheus exporters say it: a gauge of 1 whose labels carry it.
	m.set.NewGauge(fmt.Sprintf(`failover_build_info{version=%q,revision=%q,goversion=%q}`, build.Version, build.Revision, build.GoVersion),
		func() float64 { return 1 })
	m.set.NewGauge(`failover_inflight_requests`, func() float64 { return float64(m.inflight.Load()) })
	m.set.NewGauge(`failover_gomaxprocs`, func() float64 {
		if n := m.procs.Load(); n > 0 {
			return float64(n)
		}
		return float64(runtime.GOMAXPROCS(0))
	})
	for r := range stream.NumCommitReasons {
		m.streamCommits[r] = m.set.NewCounter(fmt.Sprintf(`failover_stream_commits_total{reason=%q}`, stream.CommitReason(r).String()))
	}
	for b := range numBudgets {
		m.budgetExhausted[b] = m.set.NewCounter(fmt.Sprintf(`failover_budget_exhausted_total{budget=%q}`, budgetNames[b]))
	}
	m.droppedUnderscore = m.set.NewCounter(`failover_dropped_headers_total{reason="underscore"}`)
	for _, t := range targets {
		tm := &targetMetrics{set: m.set, name: t.Name}
		tm.firstByte = m.set.NewPrometheusHistogramExt(fmt.Sprintf(`failover_upstream_first_byte_seconds{target=%q}`, t.Name), latencyBuckets)
		tm.ejections = m.set.NewCounter(fmt.Sprintf(`failover_target_ejections_total{target=%q}`, t.Name))
		tm.empty = m.set.NewCounter(fmt.Sprintf(`failover_empty_responses_total{target=%q}`, t.Name))
		h, clock := t.health, clock
		// 1 only while requests use the target: an ejection that has run out is probing, not
		// up, until a request shows the target healthy (README, Health).
		m.set.NewGauge(fmt.Sprintf(`failover_target_up{target=%q}`, t.Name), func() float64 {
			if h.State(clock.Now()) == budget.StateUp {
				return 1
			}
			return 0
		})
		for st := range budget.NumStates {
			m.set.NewGauge(fmt.Sprintf(`failover_target_state{target=%q,state=%q}`, t.Name, st.String()), func() float64 {
				if h.State(clock.Now()) == st {
					return 1
				}
				return 0
			})
		}
		for r := range numProbeResults {
			tm.probes[r] = m.set.NewCounter(fmt.Sprintf(`failover_background_probes_total{target=%q,result=%q}`, t.Name, probeResultNames[r]))
		}
		for r := range numResumeOutcomes {
			tm.resumes[r] = m.set.NewCounter(fmt.Sprintf(`failover_resumes_total{target=%q,outcome=%q}`, t.Name, resumeOutcomeNames[r]))
		}
		for c := range classify.NumClasses {
			for a := range classify.NumActions {
				if attemptPairExists(c, a) {
					tm.attempt(c, a)
				}
			}
		}
		t.metrics = tm
		m.rateLimits = append(m.rateLimits, newRateLimitMetrics(m.set, t))
	}
	m.set.RegisterMetricsWriter(func(w io.Writer) { writeRateLimitRemaining(w, m.rateLimits) })
	return m
}

// attemptPairExists tells which class/action pairs an attempt can end with, so that exactly
// those series are created at start (a pair not listed is still created on first use).
func attemptPairExists(c classify.Class, a classify.Action) bool {
	switch c {
	case classify.ClassNone:
		return a == classify.ActionCommit
	case classify.ClassCancelled:
		return a == classify.ActionStop
	case classify.ClassInterrupted:
		return false // a committed attempt's end is in the ledger, not in attempts_total
	case classify.ClassSuccessRule, classify.ClassRedirect, classify.ClassSilentClose:
		return a == classify.ActionTransfer || a == classify.ActionStop
	}
	return a != classify.ActionCommit
}

// attempt returns the counter for one attempt class and action.
func (tm *targetMetrics) attempt(c classify.Class, a classify.Action) *metrics.Counter {
	if p := tm.attempts[c][a].Load(); p != nil {
		return p
	}
	tm.mu.Lock()
	defer tm.mu.Unlock()
	if p := tm.attempts[c][a].Load(); p != nil {
		return p
	}
	p := tm.set.NewCounter(fmt.Sprintf(`failover_attempts_total{target=%q,class=%q,action=%q}`, tm.name, c.String(), a.String()))
	tm.attempts[c][a].Store(p)
	return p
}

// write renders every series and the Go and process metrics in Prometheus text format.
func (m *serverMetrics) write(w io.Writer) {
	for _, rm := range m.rateLimits {
		rm.refresh()
	}
	m.set.WritePrometheus(w)
	metrics.WriteProcessMetrics(w)
}
