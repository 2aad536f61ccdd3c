package proxy

// What the target table shows of each target is kept on the target as the request path goes
// (its last error, its answers' latency), and gathered into the table when it is asked for.

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/observe"
)

// noteError records the class of a failed attempt on t, at now (policy time), for the table.
// Two atomic stores: the table may pair a class with the time of the failure just before it.
func (t *Target) noteError(c classify.Class, now time.Time) {
	t.lastErrorAt.Store(now.UnixNano())
	t.lastError.Store(uint32(c) + 1)
}

// observeAnswer folds an answer's time to response headers into answerNS, for the table.
func (t *Target) observeAnswer(d time.Duration) { foldLatency(&t.answerNS, d) }

// targetTable returns the target table now, built from each target's state (docs/operations.md,
// The target table); package observe renders it.
func (s *Server) targetTable() observe.TargetTable {
	now := s.clock.Now()
	table := observe.TargetTable{Time: now.UTC(), Targets: make([]observe.TargetState, 0, len(s.targets))}
	for _, t := range s.targets {
		h := t.health.Snapshot(now)
		ts := observe.TargetState{Name: t.Name, URL: t.shownURL, State: h.State.String(), Until: utc(h.Until),
			ConsecutiveFailures: h.Failures, Ejections: h.Ejections}
		if c := t.lastError.Load(); c > 0 {
			ts.LastError = classify.Class(c - 1).String()
			ts.LastErrorAt = time.Unix(0, t.lastErrorAt.Load()).UTC()
		}
		ts.AnswerLatencyMS = milliseconds(t.answerNS.Load())
		ts.LatencyMS = milliseconds(t.latencyNS.Load())
		for q := range budget.NumQuotas {
			f := h.Figures[q]
			if !f.HasRemaining {
				continue
			}
			if ts.RateLimit == nil {
				ts.RateLimit = make(map[string]observe.QuotaState)
			}
			qs := observe.QuotaState{Remaining: f.Remaining, Reset: utc(f.Reset)}
			if f.HasLimit {
				qs.Limit = f.Limit
			}
			ts.RateLimit[q.String()] = qs
		}
		ts.PrefillRefused = t.prefillRefused.list()
		if s.cfg.Hedge.After.On() {
			ts.HedgeDelayMS = float64(s.hedgeDelay(t).Microseconds()) / 1000
		}
		table.Targets = append(table.Targets, ts)
	}
	return table
}

// milliseconds renders a moving average in nanoseconds as milliseconds to the microsecond.
func milliseconds(ns int64) float64 { return float64(time.Duration(ns).Microseconds()) / 1000 }

// utc returns t in UTC without its monotonic reading, the zero time as it is.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

// serveTargets answers GET /targets on the metrics listener with the table as JSON.
func (s *Server) serveTargets(ctx *fasthttp.RequestCtx) {
	table := s.targetTable()
	b, err := table.JSON()
	if err != nil { // the table holds only strings, numbers and times
		ctx.Error("cannot render the target table", fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
