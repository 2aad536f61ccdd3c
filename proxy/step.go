package proxy

import (
	"errors"
	"log/slog"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/config"
	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/proxy/internal/observe"
	"github.com/llm-failover/failover/stream"
)

// attempt is one try on one target: its I/O (up), and what that found, for the decision
// (result). The exchange keeps two (exchange.tries), whose buffers serve request after request:
// begin readies one for a new try. Owned by the exchange's owner, except while a hedge race
// runs its I/O on a goroutine of its own (hedge.go).
type attempt struct {
	t  *Target
	n  int      // 1-based attempt number
	up upstream // the upstream side: the request sent, the connection, the answer read
	result
	leg leg // what a hedge race needs to run the attempt's I/O beside the other (hedge.go)
}

// begin readies a for a try on t as the request's attempt n: its result is cleared, its
// buffers kept.
func (a *attempt) begin(t *Target, n int) {
	a.t, a.n, a.result = t, n, result{}
	a.up.reusable, a.up.waited = false, 0
	a.yieldAt, a.yielded = time.Time{}, false
	// A race that cut this attempt's leg before (the exchange is pooled) has ended: its legs
	// are done, and the new attempt runs uncut.
	a.leg.why.Store(legRuns)
	a.leg.conn.Store(nil)
}

// upstream is an attempt's side of the upstream exchange: the request's head and body as sent,
// the connection, the answer's head and its body read in place, the held body or the stream's
// gate. Buffers are kept from one attempt to the next (the exchange is pooled).
type upstream struct {
	head     []byte // the request's head, built by buildRequest
	body     []byte // its body: the client's (valid while the handler runs), or sub
	sub      []byte // the client's body with the target's model substituted
	resp     fasthttp.Response
	conn     *netio.Conn
	answer   netio.Body // the answer's body, read in place
	held     []byte     // a non-streaming answer's body, held for the decision
	gate     stream.Gate
	waited   time.Duration // how long the attempt waited on the target, for the overhead figure
	reusable bool          // the answer was read to its end and the connection may be pooled
	// What copyResponseHeaders needs of the answer's head, found by observeHead's walk over its
	// lines (views into resp's header): its Connection lines, the names of its hop-by-hop and
	// X-Failover-* lines, and its X-Request-Id; connection is dropHopByHop's scratch space.
	connLines, drop, connection [][]byte
	requestID                   []byte
}

// closeConn drops the attempt's upstream connection, or pools it when its answer was read to
// the end.
func (a *attempt) closeConn() {
	c := a.up.conn
	if c == nil {
		return
	}
	a.up.conn = nil
	if a.up.reusable {
		a.t.pool.Put(c)
		return
	}
	c.Close()
}

// result is what an attempt's I/O found, for the decision.
type result struct {
	start time.Time
	sent  time.Time
	ttfb  time.Duration // from sent to the response headers, once status is set

	phase         observe.Phase
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
	cut           bool      // the shutdown timeout ended the attempt, or came before it: nothing is known of the target
	exhausted     bool      // its transfer found no candidate left: the sweep ends with its answer (observe.OutcomeExhausted)
	gone          bool      // its wait ended because the client left (netio.ErrClientGone)
	lost          bool      // a hedge race cut it: the other attempt committed first (hedge.go)
	done          time.Time // when its I/O ended: for a commit, the commit (its time to commit runs from sent)
	// mark is its part in a hedge race, and offset, for a hedge, when it started after the
	// request's arrival (observe.Entry).
	mark   observe.HedgeMark
	offset time.Duration
	// yieldAt, for an attempt a hedge race may join (race), is when its I/O on the handler's
	// goroutine gives way (netio.ErrYield) if it has not ended by then, to go on on a leg
	// beside the hedge (zero: never); one that would begin with a dial gives way at once,
	// since a dial cannot. yielded tells it did, and where its I/O goes on (resumeIO): from
	// the start (ioStart), at the wait for the head (ioHead), or in the body's or the
	// stream's (ioBody, ioPeek), with the silence its last wait had waited (quiet).
	yieldAt time.Time
	yielded bool
	ioAt    ioPhase
	quiet   time.Duration
	refused int // 1 once a pooled connection refused its request: the one try more was taken
}

// ioPhase is where an attempt's I/O that yielded goes on.
type ioPhase uint8

const (
	ioStart ioPhase = iota // nothing done yet: a dial would come first (exchangeIO)
	ioHead                 // the wait for the answer's head
	ioBody                 // readBody's loop
	ioPeek                 // peek's loop
)

// cutVerdict records an attempt that the sidecar ended, not its target (the shutdown timeout, a
// client who left, a race that cut it): no health effect, nothing to recover from.
var cutVerdict = classify.Verdict{Class: classify.ClassCancelled, Action: classify.ActionStop, Reason: classify.ReasonCancelled}

// errLost is the netio.Stop of an attempt that a hedge race cut because the other attempt
// committed first (hedge.go): nothing of it reached the client, and it says nothing of its
// target.
var errLost = errors.New("the other attempt of the hedge race committed first")

// resumeTry is what a resume's attempt is asked with (resume.go): the form of the continuation
// it sends, and the resumption whose transcript takes its events. The zero value is the
// sweep's own attempt.
type resumeTry struct {
	r    *resumption
	form config.ResumeMode
}

// step makes attempt a on its target and settles it. It is the one attempt step: the sweep's
// first attempt, its retries and transfers (run), and a resume's attempts (tryResume) all go
// through it, in this order:
//
//  1. send: connect, write, wait, read the head, then hold the body or peek the stream (do);
//  2. decide: judge, the one place classify.Decide is asked, which also sees whether the
//     client left;
//  3. for a resume, whether the continuation can be spliced into the client's stream
//     (resumeTry.accept), or, for a refused prefill, whether auto may ask again by instruction;
//  4. settle: the health effect on the target (applyHealth); for the sweep, the budgets that
//     a retry or a transfer must fit (limit), with a transfer's candidate found; the ledger
//     and the metrics (record); and the probe lease (settleProbe, the one place a lease ends).
//
// It returns the verdict the caller executes and the target of the attempt that follows it,
// if any: a transfer's candidate, the same target for a retry. The caller acts on the verdict
// alone: commit, retry, transfer or stop. An attempt the shutdown timeout cut, or that it came
// before, has a.cut set and nothing else to act on.
//
// Nothing here assumes one attempt at a time for the request beyond what a is: a hedge race
// (race, hedge.go) runs its two attempts' I/O on legs instead of do, and settles each through
// settle, with the other beside it while that one still runs.
func (ex *exchange) step(a *attempt, rt resumeTry) (classify.Verdict, *Target) {
	s := ex.srv
	if s.abort.Load() {
		// The shutdown timeout passed: no attempt starts. Its target, if it was leased as a
		// probe, learnt nothing.
		a.cut = true
		ex.settleProbe(nil)
		return cutVerdict, nil
	}
	ex.budget.Begin(ex.policyNow(), a.t.Index)
	ex.do(a)
	ex.absorb(a)
	return ex.settle(a, rt, nil)
}

// settle decides attempt a, whose I/O has ended, and executes the verdict's effects: steps 2 to
// 4 of step. A hedge race (hedge.go) settles each of its attempts here too, as it ends; beside
// is then the other attempt when it is still in flight (nil: none is). Beside one, an attempt
// that does not commit is settled as any (its health effect, its record) but starts nothing: it
// lost the race, its connection is closed, and its verdict is for the race to go on with the
// other, never for the sweep to execute. One that commits wins: the other is cut and recorded
// as lost (cutLost) before this one is settled as any commit. With the client gone, an attempt
// that ends beside another is cut as the other is.
func (ex *exchange) settle(a *attempt, rt resumeTry, beside *attempt) (classify.Verdict, *Target) {
	if a.cut {
		return ex.settleCut(a, rt, beside)
	}
	o := ex.outcomeOf(a, rt)
	v := ex.judge(&o)
	if beside != nil {
		switch {
		case ex.gone:
			a.cut = true
			return ex.settleCut(a, rt, beside)
		case v.Action != classify.ActionCommit:
			// An answer one target refuses (a 400, a 401 to its own key) may be one the other
			// accepts: a stop too lets the other finish, and a hedge never turns a slow
			// success into an error. Its record shows the race, not a retry or a transfer
			// that was never made.
			ex.applyHealth(a, v)
			ex.settleProbe(nil)
			a.mark = observe.HedgeMarkLost
			ex.record(a, v)
			a.closeConn()
			return v, nil
		}
		ex.cutLost(beside) // waits for its I/O to end: nothing of the race runs after this
	}
	if rt.r != nil {
		return ex.settleResume(a, rt, &o, v)
	}
	if v.Action == classify.ActionCommit {
		ex.observeCommit(a)
	}
	ex.applyHealth(a, v)
	ex.settleProbe(nil) // the attempt's own probe, before a transfer's candidate may take another
	var next *Target
	exhausted := false
	switch v.Action {
	case classify.ActionTransfer:
		// A transfer's next candidate is looked up before the budgets are asked: with none
		// left the sweep ends here, exhausted whatever the budgets say, and no retry-budget
		// token goes to a transfer that cannot happen.
		next = ex.nextCandidate(a.t, v)
		exhausted = next == nil
	case classify.ActionRetry:
		next = a.t
	}
	if !exhausted && next != nil {
		v, next = ex.limit(a, v, next)
		if v.Action != classify.ActionRetry && v.Action != classify.ActionTransfer {
			next = nil // a budget ended the sweep
		}
	}
	if exhausted {
		// A context-window error with no other model to go to stops: the client gets it
		// unchanged, as any error that nothing can recover (docs/decisions.md, rule 5b).
		v = classify.NoCandidate(v, false)
		a.exhausted = v.Reason == classify.ReasonExhausted
	}
	ex.record(a, v)
	ex.settleProbe(next)
	return v, next
}

// settleCut settles attempt a, which the sidecar ended, not its target (the shutdown timeout,
// a client who left, a race that cut it): like a client leaving, it has no health effect and is
// no failure to recover from. Beside another attempt still in flight, its connection is closed
// here: nothing executes its verdict.
func (ex *exchange) settleCut(a *attempt, rt resumeTry, beside *attempt) (classify.Verdict, *Target) {
	v := cutVerdict
	if rt.r != nil {
		v = classify.ResumeStopped(v)
	}
	ex.record(a, v)
	ex.settleProbe(nil)
	if beside != nil {
		a.closeConn()
	}
	return v, nil
}

// absorb takes into the exchange what attempt a's I/O found of the request as a whole: the
// time it waited on the target (the overhead figure leaves it out), and a client who left.
func (ex *exchange) absorb(a *attempt) {
	ex.waited += a.up.waited
	a.up.waited = 0
	ex.gone = ex.gone || a.gone
}

// outcomeOf describes attempt a for the decision function.
func (ex *exchange) outcomeOf(a *attempt, rt resumeTry) classify.Outcome {
	o := classify.Outcome{
		Kind: a.kind, Status: a.status, Transport: a.transport, Silence: a.silence, Body: a.body, Truncated: a.truncated,
		Chat: ex.Family == stream.Chat, OwnKey: a.t.ownKey, RetryAfter: a.retryAfter, HasRetryAfter: a.hasRetryAfter,
		ClientGone: ex.gone,
	}
	if rt.r != nil {
		o.Resume = true
		o.PrefillAsked = a.t.resume == config.ResumeAuto && rt.form == config.ResumePrefill
		return o
	}
	o.Image = ex.Family == stream.Image
	// A probe is not retried on the same target: one failed attempt tells enough, and the
	// request goes on to a target that works (docs/decisions.md, Health).
	o.RetriesLeft = ex.budget.RetryAllowed(a.t.retries) && !ex.lease.held()
	o.NoBody = ex.head || a.status == fasthttp.StatusNoContent || a.status == fasthttp.StatusNotModified
	return o
}

// judge decides an outcome: the one place classify.Decide is asked. A verdict that would start
// another attempt (a retry or a transfer, or anything but a commit for a resume's attempt) is
// asked again with the client gone when the client has left meanwhile: the attempt may have
// ended on its own deadline after the client left, no attempt may start after that, and its
// outcome then says nothing of the target (docs/decisions.md, The decision order, rule 1).
// Only then: an answer that commits or stops needs no system call for it.
func (ex *exchange) judge(o *classify.Outcome) classify.Verdict {
	for {
		v := ex.srv.policy.Decide(o)
		again := v.Action == classify.ActionRetry || v.Action == classify.ActionTransfer ||
			o.Resume && v.Action != classify.ActionCommit
		if !again || o.ClientGone || o.Committed || !ex.clientGone() {
			return v
		}
		o.ClientGone = true
	}
}

// settleResume settles a resume's attempt (step, for a resumeTry): a continuation that commits
// with text is accepted into the client's stream; a prefill that auto's target refused is asked
// again by instruction when instructAgain allows it (no health effect: the refusal says nothing
// of the target, and a probe it was handed out as stays leased for that attempt); anything else
// stops the resume (classify.ResumeStopped), and the client keeps the original interruption.
func (ex *exchange) settleResume(a *attempt, rt resumeTry, o *classify.Outcome, v classify.Verdict) (classify.Verdict, *Target) {
	if v.Reason == classify.ReasonPrefillRefused {
		ex.prefillRefused(a)
		why := ex.instructAgain()
		if why == classify.ResumeOK {
			ex.record(a, v)
			ex.settleProbe(a.t)
			return v, a.t
		}
		v = classify.PrefillRetryStopped(v, why)
		ex.notResumed(a, why)
	}
	ok := v.Action == classify.ActionCommit && a.sse && rt.r.accept(a, rt.form)
	if !ok && !o.ClientGone && v.Action == classify.ActionCommit && ex.clientGone() {
		// A continuation that committed but cannot be spliced is no answer either: as for any
		// attempt whose result is not used, the client may have left while it ran.
		o.ClientGone = true
		v = ex.judge(o)
	}
	ex.applyHealth(a, v)
	if !ok {
		v = classify.ResumeStopped(v)
	}
	ex.record(a, v)
	ex.settleProbe(nil)
	return v, nil
}

// settleProbe ends the probe lease (ex.lease): it is the one place a lease ends. A lease is
// held only while an attempt on its target is running or about to start: when next, the
// target of the attempt that follows, is the leased one, the lease stays for it; otherwise a
// health report on it (applyHealth) has ended the probe (reported), or the request learnt
// nothing of the target, and the probe is given back. A lease held when the exchange finishes
// is a bug: finish counts it (leakedLeases) and gives it back.
func (ex *exchange) settleProbe(next *Target) {
	l := &ex.lease
	switch {
	case l.h == nil:
	case l.reported:
		l.h, l.reported = nil, false
	case next != nil && next.health == l.h:
	default:
		l.h.Release()
		l.h = nil
	}
}

// probeLease is the probe of one target that this request was handed: the target is ejected,
// its ejection has run out, and this request alone may try it (budget.Health.Available gave
// probe=true). The request must end the probe exactly once, or the target is skipped by every
// request for ever: a health report (Success, Failure, SilentFailure, Eject) ends it, and
// Release gives it back when the request learnt nothing; settleProbe does either. The zero
// lease holds nothing. Part of the exchange: not safe for concurrent use.
type probeLease struct {
	h        *budget.Health // nil: no probe held
	reported bool           // a health report on h ended the probe: settleProbe only forgets it
}

// take holds the probe of the target whose health is h. A request holds one probe at most:
// the step settles the one before (settleProbe) before it looks up the next candidate.
func (l *probeLease) take(h *budget.Health) { l.h, l.reported = h, false }

// held reports whether the lease holds a probe that no report has ended.
func (l *probeLease) held() bool { return l.h != nil && !l.reported }

// targetName names the target whose health is h, for a log line.
func targetName(h *budget.Health, targets []*Target) string {
	for _, t := range targets {
		if t.health == h {
			return t.Name
		}
	}
	return ""
}

// applyHealth executes the verdict's health effect on attempt a's target. A report on a leased
// target ends its probe (settleProbe then forgets the lease).
func (ex *exchange) applyHealth(a *attempt, v classify.Verdict) {
	s, t := ex.srv, a.t
	now := ex.policyNow()
	switch v.Health {
	case classify.HealthSuccess:
		if t.health.Success(now) {
			observe.TargetEvent(s.log, slog.LevelInfo, "target_restored", t.Name, ex.RequestID)
		}
	case classify.HealthFailure:
		why := "consecutive_failures"
		if v.Class == classify.ClassInterrupted {
			why = "stream_interrupted"
		}
		if ejected, d := t.health.Failure(now); ejected {
			ex.ejected(a, d, why)
		}
	case classify.HealthSilent:
		// The background probe asks the request's own path (docs/decisions.md, Health).
		rh, _ := ex.requestHead()
		t.noteSilent(rh.Method(), ex.Path)
		if ejected, d := t.health.SilentFailure(now); ejected {
			ex.ejected(a, d, v.Class.String()) // timeout or silent_close
			s.wakeProber()
		}
	case classify.HealthEject:
		if d := t.health.Eject(now); d > 0 {
			ex.ejected(a, d, v.Reason.String())
		}
	}
	if v.Health != classify.HealthNone && ex.lease.h == t.health {
		ex.lease.reported = true
	}
	if a.status != 0 && a.kind != classify.KindTransport && v.Reason != classify.ReasonCommitted {
		// For least-latency an answer the sweep cannot use (it counts against the target, or
		// it is retried or transferred from) is a slow sample, as an attempt without an answer
		// is (fail): a 503, a 429 or a 404 for an unknown model comes back in a millisecond,
		// and as its own time it would make that target the favourite of every request. A
		// committed stream's end says nothing of its time to first byte.
		d := a.ttfb
		if v.Health == classify.HealthFailure || v.Health == classify.HealthEject ||
			v.Action == classify.ActionRetry || v.Action == classify.ActionTransfer {
			d = max(d, failedAttemptLatency(s.cfg.Server.ConnectTimeout))
		}
		t.observeLatency(d)
	}
	if v.Cooldown > 0 {
		t.health.Cooldown(now, v.Cooldown)
		observe.TargetEvent(s.log, slog.LevelInfo, "target_cooldown", t.Name, ex.RequestID, slog.Float64("seconds", v.Cooldown.Seconds()))
	}
}

func (ex *exchange) ejected(a *attempt, d time.Duration, why string) {
	a.t.metrics.Ejection()
	observe.TargetEvent(ex.srv.log, slog.LevelWarn, "target_ejected", a.t.Name, ex.RequestID, slog.String("reason", why),
		slog.Float64("seconds", d.Seconds()))
}

// record writes the attempt into the ledger and the metrics: the attempt ends now.
func (ex *exchange) record(a *attempt, v classify.Verdict) {
	s, t := ex.srv, a.t
	d := time.Since(a.start)
	phase := a.phase
	if v.Action == classify.ActionCommit {
		phase = observe.PhaseCommitted
	}
	mark := a.mark
	if mark == observe.HedgeMarkEnded { // the attempt that ended a race won it by committing
		mark = observe.HedgeNone
		if v.Action == classify.ActionCommit {
			mark = observe.HedgeMarkWon
		}
	}
	action := v.Action
	if mark == observe.HedgeMarkLost {
		action = classify.ActionStop // the request went on with the other attempt: nothing followed this one
	}
	e := observe.Entry{Target: t.Name, Status: a.status, Class: v.Class, Reason: v.Reason, Phase: phase,
		Action: action, Duration: d, Wait: v.Wait * time.Duration(b2i(action == classify.ActionRetry)),
		Hedge: mark, Offset: a.offset}
	ex.Ledger.Add(e)
	t.metrics.Attempt(v.Class, action)
	if v.Class != classify.ClassNone && v.Class != classify.ClassCancelled {
		t.noteError(v.Class, ex.policyNow())
	}
	if v.Class == classify.ClassEmptyResponse {
		t.metrics.EmptyResponse()
	}
	if action == classify.ActionRetry || action == classify.ActionTransfer {
		switch {
		case ex.Stream && a.kind == classify.KindTransport:
			ex.event(slog.LevelInfo, "stream_transport_retry_scheduled", a, slog.String("class", v.Class.String()), slog.String("action", v.Action.String()))
		case a.kind == classify.KindStreamError || a.kind == classify.KindStreamEmpty || a.kind == classify.KindStreamCommit:
			ex.event(slog.LevelInfo, "stream_candidate_retry_scheduled", a, slog.String("class", v.Class.String()), slog.String("action", v.Action.String()))
		}
	}
	observe.LogAttempt(s.log, ex.RequestID, a.n, &e)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// event logs a named event about attempt a (observe.Event): rare, so it may allocate.
func (ex *exchange) event(level slog.Level, msg string, a *attempt, extra ...slog.Attr) {
	observe.Event(ex.srv.log, level, msg, ex.RequestID, a.t.Name, a.n, extra...)
}
