package observe

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/stream"
)

// Outcome is how a request ended, for failover_requests_total and the request record.
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

// BudgetKind is a budget that ends a request, for failover_budget_exhausted_total
// (docs/operations.md, Metrics). A target's own retries running out is not one of them: the
// sweep moves on, and the transfer shows in failover_attempts_total (log
// target_transfer_limit_reached).
type BudgetKind uint8

const (
	BudgetTransfers   BudgetKind = iota // FAILOVER_MAX_ATTEMPTS
	BudgetElapsed                       // FAILOVER_MAX_ELAPSED
	BudgetRetryBudget                   // FAILOVER_RETRY_BUDGET_*
	numBudgets
)

var budgetNames = [numBudgets]string{"max_attempts", "max_elapsed", "retry_budget"}

func (k BudgetKind) String() string { return budgetNames[k] }

// ProbeResult is how a background probe of a target went, for
// failover_background_probes_total.
type ProbeResult uint8

const (
	ProbeAnswered ProbeResult = iota // the target answered (any status)
	ProbeSilent                      // no answer within FAILOVER_PROBE_INTERVAL, or no connection
	numProbeResults
)

var probeResultNames = [numProbeResults]string{"answered", "silent"}

// HedgeOutcome is what became of a hedge (docs/streams.md, Hedging), for failover_hedges_total.
type HedgeOutcome uint8

const (
	HedgeWon        HedgeOutcome = iota // the hedge committed first: its answer went to the client
	HedgeLost                           // the attempt it raced committed first: the hedge was cut
	HedgeNotStarted                     // a budget refused it (the hedge budget or the retry budget)
	numHedgeOutcomes
)

var hedgeOutcomeNames = [numHedgeOutcomes]string{"won", "lost", "not_started"}

// ResumeOutcome is how a resume of a cut stream went, for failover_resumes_total.
type ResumeOutcome uint8

const (
	ResumeOK          ResumeOutcome = iota // the continuation reached the client and was not cut by its target
	ResumeFailed                           // the resume target gave no text: the client got the original error
	ResumeInterrupted                      // the continuation was cut too
	numResumeOutcomes
)

var resumeOutcomeNames = [numResumeOutcomes]string{"ok", "failed", "interrupted"}

// latencyBuckets suit LLM calls: milliseconds for a cached or tiny answer, minutes for a long
// generation.
var latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600}

// overheadBuckets suit the sidecar's own time: microseconds to tens of milliseconds.
var overheadBuckets = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5}

// Metrics is the metric catalogue (docs/operations.md, Metrics), created when the server
// starts so that counting allocates nothing. Safe for concurrent use.
type Metrics struct {
	// Inflight counts the requests being served (failover_inflight_requests): the proxy adds
	// one as a request begins and takes it off as the request ends.
	Inflight atomic.Int64
	// Procs is GOMAXPROCS as the processor control set it (failover_gomaxprocs); 0 when the
	// control does not run, and the gauge then shows the runtime's own.
	Procs atomic.Int64

	set             *metrics.Set
	requests        [stream.NumFamilies][numOutcomes]*metrics.Counter
	duration        [stream.NumFamilies]*metrics.PrometheusHistogram
	overhead        *metrics.PrometheusHistogram
	streamCommits   [stream.NumCommitReasons]*metrics.Counter
	budgetExhausted [numBudgets]*metrics.Counter
	// droppedUnderscore counts the client headers with '_' in their names left behind.
	droppedUnderscore *metrics.Counter
	targets           []*TargetMetrics   // in declared order
	rateLimits        []*rateLimitSeries // per target, in declared order
}

// TargetMetrics are one target's series. The attempts counters are created on first use of
// each class/action pair (then cached), so /metrics lists only pairs that happened. Safe for
// concurrent use.
type TargetMetrics struct {
	set       *metrics.Set
	name      string
	mu        sync.Mutex
	attempts  [classify.NumClasses][classify.NumActions]atomic.Pointer[metrics.Counter]
	firstByte *metrics.PrometheusHistogram
	ejections *metrics.Counter
	empty     *metrics.Counter
	probes    [numProbeResults]*metrics.Counter
	resumes   [numResumeOutcomes]*metrics.Counter
	hedges    [numHedgeOutcomes]*metrics.Counter
	commit    *metrics.PrometheusHistogram
}

// Target is what the metrics need of one target: the name its series are labelled with, and
// the health its gauges read at scrape time (its state, its rate limit).
type Target struct {
	Name   string
	Health *budget.Health
}

// Build is what failover_build_info says of the binary that runs.
type Build struct {
	Version, Revision, GoVersion string
}

// NewMetrics creates the catalogue: the server's series, and each target's in the order of
// targets (Metrics.Target(i) is targets[i]'s). The target gauges read health at clock's time.
func NewMetrics(targets []Target, clock budget.Clock, build Build) *Metrics {
	// # HELP and # TYPE lines: Prometheus keeps the types (its metadata API, Grafana's metric
	// browser), and a histogram is then one histogram rather than three untyped series.
	// A process-wide switch of the library; only the scrape writes more.
	metrics.ExposeMetadata(true)
	m := &Metrics{set: metrics.NewSet()}
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
	m.set.NewGauge(`failover_inflight_requests`, func() float64 { return float64(m.Inflight.Load()) })
	m.set.NewGauge(`failover_gomaxprocs`, func() float64 {
		if n := m.Procs.Load(); n > 0 {
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
		tm := &TargetMetrics{set: m.set, name: t.Name}
		tm.firstByte = m.set.NewPrometheusHistogramExt(fmt.Sprintf(`failover_upstream_first_byte_seconds{target=%q}`, t.Name), latencyBuckets)
		tm.ejections = m.set.NewCounter(fmt.Sprintf(`failover_target_ejections_total{target=%q}`, t.Name))
		tm.empty = m.set.NewCounter(fmt.Sprintf(`failover_empty_responses_total{target=%q}`, t.Name))
		h, clock := t.Health, clock
		// 1 only while requests use the target: an ejection that has run out is probing, not
		// up, until a request shows the target healthy (docs/decisions.md, Health).
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
		for h := range numHedgeOutcomes {
			tm.hedges[h] = m.set.NewCounter(fmt.Sprintf(`failover_hedges_total{target=%q,outcome=%q}`, t.Name, hedgeOutcomeNames[h]))
		}
		// Named after OpenTelemetry's GenAI gen_ai.client.operation.time_to_first_chunk: the
		// time from the request sent to its commit, what FAILOVER_HEDGE_AFTER=pNN reads.
		tm.commit = m.set.NewPrometheusHistogramExt(fmt.Sprintf(`failover_upstream_time_to_first_chunk_seconds{target=%q}`, t.Name), latencyBuckets)
		for c := range classify.NumClasses {
			for a := range classify.NumActions {
				if attemptPairExists(c, a) {
					tm.attempt(c, a)
				}
			}
		}
		m.targets = append(m.targets, tm)
		m.rateLimits = append(m.rateLimits, newRateLimitSeries(m.set, t))
	}
	m.set.RegisterMetricsWriter(func(w io.Writer) { writeRateLimitRemaining(w, m.rateLimits) })
	return m
}

// Target returns the series of the i-th target NewMetrics was given.
func (m *Metrics) Target(i int) *TargetMetrics { return m.targets[i] }

// Request counts a request that ended with outcome o in family f after d, of which overhead
// was the sidecar's own time (d less the waits for upstreams and backoffs).
func (m *Metrics) Request(f stream.Family, o Outcome, d, overhead time.Duration) {
	m.requests[f][o].Inc()
	m.duration[f].Update(d.Seconds())
	m.overhead.Update(overhead.Seconds())
}

// StreamCommit counts a stream committed for reason r.
func (m *Metrics) StreamCommit(r stream.CommitReason) { m.streamCommits[r].Inc() }

// BudgetExhausted counts a request that budget k stopped.
func (m *Metrics) BudgetExhausted(k BudgetKind) { m.budgetExhausted[k].Inc() }

// DroppedUnderscore counts n client headers with '_' in their names left behind.
func (m *Metrics) DroppedUnderscore(n int) { m.droppedUnderscore.Add(n) }

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

// Attempt counts an attempt on the target that ended with class c and action a.
func (tm *TargetMetrics) Attempt(c classify.Class, a classify.Action) { tm.attempt(c, a).Inc() }

// attempt returns the counter for one attempt class and action.
func (tm *TargetMetrics) attempt(c classify.Class, a classify.Action) *metrics.Counter {
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

// FirstByte records the time from a request written to the target to its response headers.
func (tm *TargetMetrics) FirstByte(d time.Duration) { tm.firstByte.Update(d.Seconds()) }

// Ejection counts an ejection of the target.
func (tm *TargetMetrics) Ejection() { tm.ejections.Inc() }

// EmptyResponse counts an answer of the target's without content.
func (tm *TargetMetrics) EmptyResponse() { tm.empty.Inc() }

// Probe counts a background probe of the target that ended with r.
func (tm *TargetMetrics) Probe(r ProbeResult) { tm.probes[r].Inc() }

// Hedge counts a hedge to the target (won, lost), or one a budget refused while an attempt on
// the target was slow (not_started).
func (tm *TargetMetrics) Hedge(o HedgeOutcome) { tm.hedges[o].Inc() }

// Commit records an attempt's time to commit on the target: from the request sent to its first
// business content (a stream) or its whole answer (docs/streams.md, Hedging).
func (tm *TargetMetrics) Commit(d time.Duration) { tm.commit.Update(d.Seconds()) }

// Resume counts a resume on the target that ended with o.
func (tm *TargetMetrics) Resume(o ResumeOutcome) { tm.resumes[o].Inc() }

// Write renders every series and the Go and process metrics in Prometheus text format.
func (m *Metrics) Write(w io.Writer) {
	for _, rs := range m.rateLimits {
		rs.refresh()
	}
	m.set.WritePrometheus(w)
	metrics.WriteProcessMetrics(w)
}

// rateLimitSeries writes a target's rate-limit series at scrape time (docs/operations.md,
// Metrics): the figures are read from the target's RateLimit then, so answers pay nothing
// for them.
type rateLimitSeries struct {
	rate    *budget.RateLimit
	avoided *metrics.Counter // failover_ratelimit_avoided_total, set from RateLimit.Avoided at scrape time
	// remaining are the failover_ratelimit_remaining names of each quota, made once.
	remaining [budget.NumQuotas]string
}

// newRateLimitSeries creates t's failover_ratelimit_avoided_total in set and names its
// remaining-quota series.
func newRateLimitSeries(set *metrics.Set, t Target) *rateLimitSeries {
	rs := &rateLimitSeries{rate: t.Health.RateLimit()}
	rs.avoided = set.NewCounter(fmt.Sprintf(`failover_ratelimit_avoided_total{target=%q}`, t.Name))
	for q := range budget.NumQuotas {
		rs.remaining[q] = fmt.Sprintf(`failover_ratelimit_remaining{target=%q,quota=%q}`, t.Name, q.String())
	}
	return rs
}

// refresh copies the avoided count into its counter, before the set is written.
func (rs *rateLimitSeries) refresh() { rs.avoided.Set(rs.rate.Avoided()) }

// writeRateLimitRemaining writes failover_ratelimit_remaining{target,quota} for each quota the
// last answer of each target reported, and nothing for the others: a gauge of 0 would read as
// a spent quota where the provider said nothing.
func writeRateLimitRemaining(w io.Writer, targets []*rateLimitSeries) {
	var b []byte
	for _, rs := range targets {
		f := rs.rate.Figures()
		for q := range f {
			if !f[q].HasRemaining {
				continue
			}
			b = append(b, rs.remaining[q]...)
			b = append(b, ' ')
			b = strconv.AppendInt(b, f[q].Remaining, 10)
			b = append(b, '\n')
		}
	}
	if len(b) == 0 {
		return
	}
	metrics.WriteMetadataIfNeeded(w, "failover_ratelimit_remaining", "gauge")
	w.Write(b)
}
