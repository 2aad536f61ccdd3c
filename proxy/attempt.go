package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/stream"
)

// attempt is one try on one target.
type attempt struct {
	t     *Target
	n     int // 1-based attempt number
	start time.Time
	sent  time.Time
	ttfb  time.Duration // from sent to the response headers, once status is set

	phase         Phase
	kind          classify.Kind
	status        int
	transport     classify.Transport
	silence       time.Duration // the connection ended without a byte of answer this long after sent (classify.Outcome.Silence)
	body          []byte
	truncated     bool
	sse           bool // commit pipes an SSE stream through the gate's tail
	pipeRest      bool // commit pipes the rest of a body (image, oversize)
	ended         bool // an SSE stream's body ended before commit
	retryAfter    time.Duration
	hasRetryAfter bool
	commitReason  stream.CommitReason
	cut           bool // the shutdown timeout ended the attempt's wait: nothing is known of the target
}

// run is the attempt loop, the one place where a request's attempts are decided (README, How
// it decides): it lists the candidates, makes one attempt at a time, has classify judge each
// outcome and executes the verdict: commit, retry on the same target, transfer to the next
// candidate, or stop with the answer the client gets.
//
// A probe the sweep hands out (README, Health) is held in ex.lease and ends exactly once: the
// attempt's verdict ends it in applyHealth (a health report, or a release when the outcome
// says nothing of the target), and whatever is still held when run returns (the shutdown
// timeout cut the loop short, a budget refused the transfer a candidate was leased for) is
// released by the defer below, whatever path the loop took.
func (ex *exchange) run() {
	s := ex.srv
	defer ex.lease.release()
	now := ex.policyNow() // begin's reading
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
	for n := 1; ; n++ {
		if s.abort.Load() {
			ex.closeConn()
			ex.reject(fasthttp.StatusServiceUnavailable, codeShuttingDown, "the sidecar is shutting down")
			return
		}
		ex.budget.Begin(ex.policyNow(), t.Index)
		a := &ex.cur
		*a = attempt{t: t, n: n}
		ex.do(a)
		if a.cut {
			// The sidecar, not the target, ended this attempt: like a client leaving, it has no
			// health effect and is no failure to recover from; the loop's first check answers
			// (and the probe, if this was one, told nothing: the defer gives it back).
			ex.tick()
			ex.record(a, classify.Verdict{Class: classify.ClassCancelled, Action: classify.ActionStop, Reason: classify.ReasonCancelled})
			continue
		}
		o := classify.Outcome{
			Kind: a.kind, Status: a.status, Transport: a.transport, Silence: a.silence, Body: a.body, Truncated: a.truncated,
			Chat: ex.family == stream.Chat, Image: ex.family == stream.Image, OwnKey: t.ownKey,
			// A probe is not retried on the same target: one failed attempt tells enough, and the
			// request goes on to a target that works (README, Health).
			RetriesLeft: ex.budget.RetryAllowed(t.retries) && !ex.lease.held(), RetryAfter: a.retryAfter, HasRetryAfter: a.hasRetryAfter,
			ClientGone: ex.gone, NoBody: ex.head || a.status == fasthttp.StatusNoContent || a.status == fasthttp.StatusNotModified,
		}
		v := s.policy.Decide(&o)
		if (v.Action == classify.ActionRetry || v.Action == classify.ActionTransfer) && !o.ClientGone && ex.clientGone() {
			// Looked at again before anything new starts: the attempt may have ended on its own
			// deadline after the client left, and no attempt may start after that (README, The
			// decision order, rule 1). Only then: an answer that commits or stops needs no syscall for it.
			o.ClientGone = true
			v = s.policy.Decide(&o)
		}
		ex.tick()            // the attempt's end
		ex.applyHealth(a, v) // ends this attempt's probe lease, if it held one
		// A transfer's next candidate is looked up before the budgets are asked: with none
		// left the sweep ends here, exhausted whatever the budgets say, and no retry-budget
		// token goes to a transfer that cannot happen.
		var next *Target
		exhausted := false
		if v.Action == classify.ActionTransfer {
			next = ex.nextCandidate(t, v)
			exhausted = next == nil
		}
		if !exhausted && (v.Action == classify.ActionRetry || v.Action == classify.ActionTransfer) {
			v, next = ex.limit(a, v, next)
			ex.tick() // limit may have logged: the ledger's duration is read after it, as it always was
		}
		if exhausted {
			v = classify.NoCandidate(v, false)
			// A context-window error with no other model to go to stops: the client gets it
			// unchanged, as any error that nothing can recover (README, rule 5b).
			exhausted = v.Reason == classify.ReasonExhausted
		}
		ex.record(a, v)
		switch {
		case v.Action == classify.ActionCommit:
			ex.commit(a, ex.successOutcome())
			return
		case exhausted:
			ex.answer(a, v, OutcomeExhausted)
			return
		case v.Action == classify.ActionStop:
			ex.answer(a, v, ex.stopOutcome(v))
			return
		case v.Action == classify.ActionRetry:
			ex.closeConn()
			if !ex.sleep(v.Wait) && ex.gone {
				ex.answer(a, classify.Verdict{Class: classify.ClassCancelled, Status: 499}, OutcomeCancelled)
				return
			}
			// A wait the shutdown timeout cut short goes round once more: the loop's first
			// check answers 503, as for any request still waiting (the client is still there).
			continue
		}
		ex.closeConn()
		t = next // a transfer: limit let it happen, so its candidate was found
	}
}

// probeLease is the probe of one target that the sweep handed this request: the target is
// ejected, its ejection has run out, and this request alone may try it (budget.Health.Available
// gave probe=true). The request must end the probe exactly once, or the target is skipped by
// every request for ever: a health report (Success, Failure, SilentFailure, Eject) ends it,
// and Release gives it back when the request learnt nothing. The zero lease holds nothing.
// Part of the exchange: not safe for concurrent use.
type probeLease struct {
	h *budget.Health // nil: no probe held
}

// take holds the probe of the target whose health is h. A lease still held is released
// first: a request holds at most one probe, and none is ever dropped unreleased.
func (l *probeLease) take(h *budget.Health) {
	l.release()
	l.h = h
}

// held reports whether the lease holds a probe.
func (l *probeLease) held() bool { return l.h != nil }

// reported records that a health report on the leased target ended the probe.
func (l *probeLease) reported() { l.h = nil }

// release gives the probe back without a health effect. Safe to call twice, and on a lease
// that holds nothing: only the first call after take releases.
func (l *probeLease) release() {
	if l.h != nil {
		l.h.Release()
		l.h = nil
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
// would send one of them is passed over, for the rest of the request (README, The decision
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
	return ex.model
}

// selectCandidates lists the targets that serve this request: the strategy's first pick, then
// the others in declared order.
func (ex *exchange) selectCandidates(now time.Time) {
	s := ex.srv
	ex.eligible, ex.usable, ex.cands = ex.eligible[:0], ex.usable[:0], ex.cands[:0]
	for _, t := range s.targets {
		if t.serves(ex.path, ex.model) {
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
// apply them. It logs the budget events (README, Named log events). next is a transfer's candidate,
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
		kind := budgetTransfers
		if reason == classify.ReasonElapsedLimit {
			kind = budgetElapsed
		}
		s.metrics.budgetExhausted[kind].Inc()
		ex.event(slog.LevelWarn, "routing_transfer_limit_reached", a, slog.String("budget", budgetNames[kind]),
			slog.Int("transfers", ex.budget.Transfers()), slog.Float64("elapsed_ms", float64(ex.budget.Elapsed(now).Microseconds())/1000))
	case classify.ReasonRetryBudget:
		s.metrics.budgetExhausted[budgetRetryBudget].Inc()
		ex.event(slog.LevelWarn, "retry_budget_exhausted", a)
	}
}

// applyHealth executes the verdict's health effect on the target, and so ends the probe lease
// the attempt held, if any.
func (ex *exchange) applyHealth(a *attempt, v classify.Verdict) {
	s, t := ex.srv, a.t
	now := ex.policyNow()
	switch v.Health {
	case classify.HealthSuccess:
		if t.health.Success(now) {
			s.log.Info("target_restored", slog.String("target", t.Name), slog.String("request_id", string(ex.requestID)))
		}
	case classify.HealthFailure:
		if ejected, d := t.health.Failure(now); ejected {
			ex.ejected(a, d, "consecutive_failures")
		}
	case classify.HealthSilent:
		// The background probe asks the request's own path (README, Health).
		rh, _ := ex.requestHead()
		t.noteSilent(rh.Method(), ex.path)
		if ejected, d := t.health.SilentFailure(now); ejected {
			ex.ejected(a, d, v.Class.String()) // timeout or silent_close
			s.wakeProber()
		}
	case classify.HealthEject:
		if d := t.health.Eject(now); d > 0 {
			ex.ejected(a, d, v.Reason.String())
		}
	}
	// Each report above ends a probe the attempt held (budget.Health); an outcome that says
	// nothing of the target gives it back.
	if v.Health == classify.HealthNone {
		ex.lease.release()
	} else {
		ex.lease.reported()
	}
	if a.status != 0 && a.kind != classify.KindTransport {
		// For least-latency an answer the sweep cannot use (it counts against the target, or
		// it is retried or transferred from) is a slow sample, as an attempt without an answer
		// is (fail): a 503, a 429 or a 404 for an unknown model comes back in a millisecond,
		// and as its own time it would make that target the favourite of every request.
		d := a.ttfb
		if v.Health == classify.HealthFailure || v.Health == classify.HealthEject ||
			v.Action == classify.ActionRetry || v.Action == classify.ActionTransfer {
			d = max(d, failedAttemptLatency(s.cfg.Server.ConnectTimeout))
		}
		t.observeLatency(d)
	}
	if v.Cooldown > 0 {
		t.health.Cooldown(now, v.Cooldown)
		s.log.Info("target_cooldown", slog.String("target", t.Name), slog.Float64("seconds", v.Cooldown.Seconds()),
			slog.String("request_id", string(ex.requestID)))
	}
}

func (ex *exchange) ejected(a *attempt, d time.Duration, why string) {
	a.t.metrics.ejections.Inc()
	ex.srv.log.Warn("target_ejected", slog.String("target", a.t.Name), slog.String("reason", why),
		slog.Float64("seconds", d.Seconds()), slog.String("request_id", string(ex.requestID)))
}

// record writes the attempt into the ledger and the metrics. The attempt ended at the last
// reading (ex.now), which its caller took.
func (ex *exchange) record(a *attempt, v classify.Verdict) {
	s, t := ex.srv, a.t
	d := ex.now.Sub(a.start)
	phase := a.phase
	if v.Action == classify.ActionCommit {
		phase = PhaseCommitted
	}
	ex.ledger.add(attemptRecord{target: t.Name, status: a.status, class: v.Class, reason: v.Reason, phase: phase,
		action: v.Action, duration: d, wait: v.Wait * time.Duration(b2i(v.Action == classify.ActionRetry))})
	t.metrics.attempt(v.Class, v.Action).Inc()
	if v.Class != classify.ClassNone && v.Class != classify.ClassCancelled {
		t.noteError(v.Class, ex.policyNow())
	}
	if v.Class == classify.ClassEmptyResponse {
		t.metrics.empty.Inc()
	}
	if v.Action == classify.ActionRetry || v.Action == classify.ActionTransfer {
		switch {
		case ex.streaming && a.kind == classify.KindTransport:
			ex.event(slog.LevelInfo, "stream_transport_retry_scheduled", a, slog.String("class", v.Class.String()), slog.String("action", v.Action.String()))
		case a.kind == classify.KindStreamError || a.kind == classify.KindStreamEmpty || a.kind == classify.KindStreamCommit:
			ex.event(slog.LevelInfo, "stream_candidate_retry_scheduled", a, slog.String("class", v.Class.String()), slog.String("action", v.Action.String()))
		}
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.LogAttrs(context.Background(), slog.LevelDebug, "attempt", slog.String("request_id", string(ex.requestID)),
			slog.Int("attempt", a.n), slog.String("target", t.Name), slog.Int("status", a.status),
			slog.String("class", v.Class.String()), slog.String("phase", phase.String()), slog.String("action", v.Action.String()),
			slog.String("reason", v.Reason.String()), slog.Float64("duration_ms", float64(d.Microseconds())/1000))
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// event logs a named event about the current attempt (rare: budget, stream and health
// decisions), so a small allocation here is fine.
func (ex *exchange) event(level slog.Level, msg string, a *attempt, extra ...slog.Attr) {
	attrs := make([]slog.Attr, 0, 4+len(extra))
	attrs = append(attrs, slog.String("request_id", string(ex.requestID)), slog.String("target", a.t.Name), slog.Int("attempt", a.n))
	attrs = append(attrs, extra...)
	ex.srv.log.LogAttrs(context.Background(), level, msg, attrs...)
}

func (ex *exchange) successOutcome() Outcome {
	if ex.ledger.n > 1 {
		return OutcomeOKAfterFailover
	}
	return OutcomeOK
}

func (ex *exchange) stopOutcome(v classify.Verdict) Outcome {
	switch v.Reason {
	case classify.ReasonCancelled:
		return OutcomeCancelled
	case classify.ReasonTransferLimit, classify.ReasonElapsedLimit, classify.ReasonRetryBudget:
		return OutcomeBudgetExhausted
	}
	return OutcomeUpstreamError
}

// sleep waits d before a retry on the wall clock, asking clientGone every netio.PollInterval; false
// when the client left (ex.gone) or the sidecar is ending what remains at shutdown. It reads
// the clock at its start and after each nap, and ends at the last reading.
func (ex *exchange) sleep(d time.Duration) bool {
	start := ex.tick()
	deadline := start.Add(d)
	for {
		if ex.clientGone() || ex.srv.abort.Load() {
			ex.waited += ex.now.Sub(start)
			return false
		}
		left := deadline.Sub(ex.now)
		if left <= 0 {
			ex.waited += ex.now.Sub(start)
			return true
		}
		time.Sleep(min(left, netio.PollInterval))
		ex.tick()
	}
}
