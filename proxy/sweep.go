package proxy

import (
	"bytes"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/proxy/internal/observe"
)

// run is the sweep: it lists the request's candidates and makes one attempt at a time through
// the attempt step (step), executing each verdict: commit, retry on the same target, transfer
// to the next candidate, or stop with the answer the client gets (docs/decisions.md, How it
// decides). Whether another attempt is made, and where, is decided in step, never here.
func (ex *exchange) run() {
	s := ex.srv
	now := ex.policyNow()
	ex.selectCandidates(now)
	if len(ex.cands) == 0 {
		ex.reject(fasthttp.StatusNotFound, codeNoTarget, "no target serves this model and path")
		return
	}
	s.retries.Request(now)
	ex.budget.Reset(&s.cfg.Budget)
	ex.sweep.Reset(len(ex.cands))
	ex.tooSmall = ex.tooSmall[:0]
	t := ex.nextCandidate(nil, classify.Verdict{})
	if t == nil {
		ex.reject(fasthttp.StatusNotFound, codeNoTarget, "no target serves this model and path")
		return
	}
	if s.cfg.Hedge.After.On() {
		s.hedges.Request(now)
	}
	for {
		a := &ex.tries[0]
		a.begin(t, ex.Ledger.Len()+1)
		var v classify.Verdict
		var next *Target
		if delay, ok := ex.raceable(a); ok {
			v, next, a = ex.race(a, delay)
		} else {
			v, next = ex.step(a, resumeTry{})
		}
		switch {
		case a.cut:
			a.closeConn()
			ex.reject(fasthttp.StatusServiceUnavailable, codeShuttingDown, "the sidecar is shutting down")
			return
		case v.Action == classify.ActionCommit:
			ex.commit(a, ex.successOutcome())
			return
		case a.exhausted:
			ex.answer(a, v, observe.OutcomeExhausted)
			return
		case v.Action == classify.ActionStop:
			ex.answer(a, v, ex.stopOutcome(v))
			return
		case v.Action == classify.ActionRetry:
			a.closeConn()
			if !ex.sleep(v.Wait) {
				if ex.gone {
					ex.answer(a, classify.Verdict{Class: classify.ClassCancelled, Status: 499}, observe.OutcomeCancelled)
					return
				}
				// The shutdown timeout cut the wait short: as for any request still waiting.
				ex.reject(fasthttp.StatusServiceUnavailable, codeShuttingDown, "the sidecar is shutting down")
				return
			}
		default: // a transfer, to the candidate step found for it
			a.closeConn()
		}
		t = next
	}
}

// healthAt gives the sweep the health of the candidate at pos.
func (ex *exchange) healthAt(pos int) *budget.Health { return ex.srv.targets[ex.cands[pos]].health }

// usableLeft reports whether a candidate the sweep has not tried yet is usable now, so that a
// retry on a target its outcome took out can go there instead. With none, the retry stays:
// it is the request's only chance.
func (ex *exchange) usableLeft(now time.Time) bool {
	from, to := ex.sweep.Untried()
	for pos := from; pos < to; pos++ {
		if ex.mayFit(pos) && ex.healthAt(pos).Usable(now) {
			return true
		}
	}
	return false
}

// nextCandidate finds the candidate the first attempt (from nil) or a transfer from target
// from goes to, or nil when none is left; a candidate handed out as its target's probe is
// leased (ex.lease). A verdict that wants another model (a context-window error) adds the
// model from sent to those too small for the prompt, and from then on every candidate that
// would send one of them is passed over, for the rest of the request (docs/decisions.md, The decision
// order, rule 5b): a later transfer, from a bigger model that failed in another way, must not
// go back to a model that cannot take the prompt.
func (ex *exchange) nextCandidate(from *Target, v classify.Verdict) *Target {
	if v.NewModel {
		if m := ex.sentModel(from); !ex.isTooSmall(m) {
			ex.tooSmall = append(ex.tooSmall, m)
		}
	}
	var accept func(pos int) bool
	if len(ex.tooSmall) > 0 {
		accept = ex.acceptFn
	}
	pos, probe, ok := ex.sweep.NextWhere(ex.policyNow(), ex.healthAt, accept)
	if !ok {
		return nil
	}
	t := ex.srv.targets[ex.cands[pos]]
	if probe {
		ex.lease.take(t.health)
	}
	return t
}

// mayFit reports whether the candidate at pos would send a model that no context-window error
// of this request showed too small.
func (ex *exchange) mayFit(pos int) bool {
	return !ex.isTooSmall(ex.sentModel(ex.srv.targets[ex.cands[pos]]))
}

// isTooSmall reports whether model m is one of ex.tooSmall.
func (ex *exchange) isTooSmall(m []byte) bool {
	for _, small := range ex.tooSmall {
		if bytes.Equal(m, small) {
			return true
		}
	}
	return false
}

// sentModel is the model t sends for this request: its substitute when it has one and the
// request names a model, else the requested model.
func (ex *exchange) sentModel(t *Target) []byte {
	if t.model != nil && ex.fields.modelStart >= 0 {
		return t.model
	}
	return ex.Model
}

// selectCandidates lists the targets that serve this request: the strategy's first pick, then
// the others in declared order.
func (ex *exchange) selectCandidates(now time.Time) {
	s := ex.srv
	ex.eligible, ex.usable, ex.cands = ex.eligible[:0], ex.usable[:0], ex.cands[:0]
	for _, t := range s.targets {
		if t.serves(ex.Path, ex.Model) {
			ex.eligible = append(ex.eligible, t.Index)
			if t.health.Usable(now) {
				ex.usable = append(ex.usable, t.Index)
			}
		}
	}
	if len(ex.eligible) == 0 {
		return
	}
	usable := ex.usable
	if len(usable) == 0 {
		usable = ex.eligible // every one is skipped: the sweep will try them all anyway
	}
	first := s.strategy.first(ex.eligible, usable, ex)
	ex.cands = append(ex.cands, first)
	for _, i := range ex.eligible {
		if i != first {
			ex.cands = append(ex.cands, i)
		}
	}
}

// limit measures the budgets for a verdict that wants a retry or a transfer and lets classify
// apply them. It logs the budget events (docs/operations.md, Named log events). next is a transfer's candidate,
// which run looked up; when the budgets turn a retry into a transfer, limit looks up its
// candidate, and with none left the sweep ends there, before the retry budget is asked, so
// that no token goes to a transfer that cannot happen. It returns the limited verdict and,
// for a transfer, its candidate.
func (ex *exchange) limit(a *attempt, v classify.Verdict, next *Target) (classify.Verdict, *Target) {
	s := ex.srv
	b := &s.cfg.Budget
	now := ex.policyNow()
	if v.Action == classify.ActionRetry && v.Wait == 0 {
		v.Wait = budget.Backoff(b.BackoffBase, b.BackoffMax, ex.budget.RetriesOnTarget(), nil)
	}
	al := classify.Allowance{
		Enabled:       b.Enabled,
		RetryFits:     ex.budget.ElapsedAllows(now, v.Wait),
		TransferFits:  ex.budget.TransferAllowed(),
		ElapsedOK:     ex.budget.ElapsedAllows(now, 0),
		RetryBudgetOK: true,
		TargetOut:     v.Action == classify.ActionRetry && !a.t.health.Usable(now) && ex.usableLeft(now),
	}
	limited := classify.Limit(v, al)
	if v.Action == classify.ActionRetry && limited.Action == classify.ActionTransfer {
		// A retry whose backoff no longer fits became a transfer: its candidate too is looked
		// up before the retry budget is asked.
		if next = ex.nextCandidate(a.t, v); next == nil {
			// Ended by FAILOVER_MAX_ELAPSED when that budget refused the retry; a retry refused
			// because the target was taken out has simply run out of candidates.
			limited = classify.NoCandidate(limited, !al.RetryFits)
			ex.reportLimit(a, limited.Reason, now)
			return limited, nil
		}
	}
	if limited.Action == classify.ActionRetry || limited.Action == classify.ActionTransfer {
		if !s.retries.Withdraw(now) {
			al.RetryBudgetOK = false
			limited = classify.Limit(v, al)
		}
	}
	ex.reportLimit(a, limited.Reason, now)
	if limited.Action == classify.ActionTransfer && v.Transient && a.t.retries > 0 && !ex.budget.RetryAllowed(a.t.retries) {
		// The sweep moves on: an ordinary transfer, not a budget that ends the request.
		ex.event(slog.LevelInfo, "target_transfer_limit_reached", a, slog.Int("retries", ex.budget.RetriesOnTarget()))
	}
	return limited, next
}

// reportLimit counts and logs a budget that stopped the sweep (reason is the verdict's; any
// other reason reports nothing).
func (ex *exchange) reportLimit(a *attempt, reason classify.Reason, now time.Time) {
	s := ex.srv
	switch reason {
	case classify.ReasonTransferLimit, classify.ReasonElapsedLimit:
		kind := observe.BudgetTransfers
		if reason == classify.ReasonElapsedLimit {
			kind = observe.BudgetElapsed
		}
		s.metrics.BudgetExhausted(kind)
		ex.event(slog.LevelWarn, "routing_transfer_limit_reached", a, slog.String("budget", kind.String()),
			slog.Int("transfers", ex.budget.Transfers()), slog.Float64("elapsed_ms", float64(ex.budget.Elapsed(now).Microseconds())/1000))
	case classify.ReasonRetryBudget:
		s.metrics.BudgetExhausted(observe.BudgetRetryBudget)
		ex.event(slog.LevelWarn, "retry_budget_exhausted", a)
	}
}

func (ex *exchange) successOutcome() observe.Outcome {
	if ex.Ledger.Len() > 1 {
		return observe.OutcomeOKAfterFailover
	}
	return observe.OutcomeOK
}

func (ex *exchange) stopOutcome(v classify.Verdict) observe.Outcome {
	switch v.Reason {
	case classify.ReasonCancelled:
		return observe.OutcomeCancelled
	case classify.ReasonTransferLimit, classify.ReasonElapsedLimit, classify.ReasonRetryBudget:
		return observe.OutcomeBudgetExhausted
	}
	return observe.OutcomeUpstreamError
}

// sleep waits d before a retry on the wall clock, asking clientGone every netio.PollInterval; false
// when the client left (ex.gone) or the sidecar is ending what remains at shutdown.
func (ex *exchange) sleep(d time.Duration) bool {
	start := time.Now()
	deadline := start.Add(d)
	for now := start; ; now = time.Now() {
		if ex.clientGone() || ex.srv.abort.Load() {
			ex.waited += now.Sub(start)
			return false
		}
		left := deadline.Sub(now)
		if left <= 0 {
			ex.waited += now.Sub(start)
			return true
		}
		time.Sleep(min(left, netio.PollInterval))
	}
}
