package proxy

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/stream"
)

// exchange is one client request on its way through the attempt loop, with every buffer it
// needs. Exchanges are pooled: a request allocates nothing of its own in the steady state.
// It is owned by one handler call and, once a stream commits, by fasthttp's response writer
// until pipe.CloseWithError releases it. Not safe for concurrent use.
type exchange struct {
	srv *Server
	ctx *fasthttp.RequestCtx

	// The request, read once.
	path        []byte // normalised path (own copy: a stream outlives the handler)
	family      stream.Family
	fields      requestFields
	model       []byte // requested model (own copy, for the log)
	streaming   bool
	head        bool
	requestID   []byte
	tokenHeader []byte   // the header that carried FAILOVER_INBOUND_TOKEN: never forwarded
	connection  [][]byte // the options the client's Connection lines name (views into its header)
	reqBody     []byte   // the client's body: valid while the handler runs
	subBody     []byte   // the body with a substituted model
	uri         []byte

	// The sweep.
	eligible []int
	usable   []int // the eligible targets whose health lets them be used now, for the strategy
	cands    []int
	sweep    budget.Sweep
	budget   budget.Request
	ledger   Ledger
	cur      attempt
	probe    bool // the current target was handed out as its probe

	// The current attempt's upstream exchange.
	upHead   []byte // the upstream request's head, built by buildRequest
	upBody   []byte // its body: the client's (valid while the handler runs), or subBody
	upResp   fasthttp.Response
	conn     *upConn
	body     upBody // the upstream response's body, read in place
	respBody []byte
	gate     stream.Gate
	reusable bool // the upstream response was read to its end and the connection may be pooled

	// The answer.
	start           time.Time
	waited          time.Duration // time spent waiting on upstreams and backoffs, for the overhead figure
	outcome         Outcome
	status          int
	servedBy        *Target
	servedModel     []byte
	duration        time.Duration
	committedStream bool
	pipe            pipe

	clientFD int // the client's socket, -2 until looked up
	gone     bool
	goneFn   func() bool // ex.clientGone and srv.abort.Load, made once: upstream reads poll them
	stopFn   func() bool
	acceptFn func(pos int) bool // ex.sendsOtherModel, made once
	// modelFrom is the target a context-window error came from, for sendsOtherModel.
	modelFrom *Target
	hijackFn  fasthttp.HijackHandler // ex.hijacked, made once
}

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

var (
	headerAuthorization = []byte("Authorization")
	headerXAPIKey       = []byte("X-Api-Key")
	headerRequestID     = []byte("X-Request-Id")
	headerUpstreamID    = []byte("X-Upstream-Request-Id")
	headerAttempt       = []byte("X-Failover-Attempt")
	headerTarget        = []byte("X-Failover-Target")
	headerAttempts      = []byte("X-Failover-Attempts")
	headerModel         = []byte("X-Failover-Model")
	headerAcceptEnc     = []byte("Accept-Encoding")
	headerRetryAfter    = []byte("Retry-After")
	headerRetryAfterMs  = []byte("Retry-After-Ms")
	headerAccept        = []byte("Accept")
	valueIdentity       = []byte("identity")
	valueEventStream    = []byte("text/event-stream")
	valueChunked        = []byte("chunked")
	prefixFailover      = []byte("x-failover-")
)

// stringConnection names the Connection header for PeekAll, which takes a string.
const stringConnection = "Connection"

// hopByHop are the headers that describe one connection, not the message (RFC 9110 section
// 7.6.1): a proxy must not forward them. Tokens named in Connection are removed too.
var hopByHop = [][]byte{
	[]byte("Connection"), []byte("Proxy-Connection"), []byte("Keep-Alive"), []byte("Proxy-Authenticate"),
	[]byte("Proxy-Authorization"), []byte("Te"), []byte("Trailer"), []byte("Transfer-Encoding"), []byte("Upgrade"),
	[]byte("Expect"),
}

// dropHopByHop deletes from the response header h the hop-by-hop headers, the ones the
// upstream's Connection lines (connection) name, and the upstream's own X-Failover-* (the
// sidecar sets those it sends; an upstream that is itself a sidecar or a gateway must not
// speak for this one). Each pass finds one (usually there is one, or none) and deletes it,
// until a pass finds none: however many there are, without a buffer.
func dropHopByHop(h *fasthttp.ResponseHeader, connection [][]byte) {
	// At most one pass per header: a header fasthttp would keep yielding after the delete
	// (none does today) cannot make this loop for ever.
	for range h.Len() + 1 {
		var found []byte
		for k := range h.All() {
			if isHopByHop(k, connection) || hasFailoverPrefix(k) {
				found = k
				break
			}
		}
		if found == nil {
			return
		}
		h.DelBytes(found)
	}
}

// isHopByHop reports whether header k describes one connection: a hop-by-hop header, or one
// a Connection line of the message (connection, every line) names (compared with sameName).
func isHopByHop(k []byte, connection [][]byte) bool {
	for _, h := range hopByHop {
		if sameName(k, h) {
			return true
		}
	}
	for _, line := range connection {
		for len(line) > 0 {
			var tok []byte
			tok, line = cutList(line, ',')
			if sameName(k, bytes.TrimSpace(tok)) {
				return true
			}
		}
	}
	return false
}

// hasFailoverPrefix reports whether header k is an X-Failover-* header (X_Failover_* too:
// sameName).
func hasFailoverPrefix(k []byte) bool {
	return len(k) >= len(prefixFailover) && sameName(k[:len(prefixFailover)], prefixFailover)
}

// cutList splits the first item off a sep-separated list.
func cutList(list []byte, sep byte) (item, rest []byte) {
	if i := bytes.IndexByte(list, sep); i >= 0 {
		return list[:i], list[i+1:]
	}
	return list, nil
}

// clientCredentials are removed when the target sends its own key, so the provider never sees
// the caller's: the keys, and OpenAI's organisation and project headers, which scope a key
// (the caller's organisation with the target's key is answered 401, and a 401 to a target's
// own key ejects the target for every client).
var clientCredentials = [][]byte{[]byte("Authorization"), []byte("X-Api-Key"), []byte("Api-Key"), []byte("X-Goog-Api-Key"),
	[]byte("OpenAI-Organization"), []byte("OpenAI-Project")}

func newExchange(s *Server) *exchange {
	ex := &exchange{srv: s, clientFD: -2}
	ex.goneFn, ex.stopFn, ex.hijackFn, ex.acceptFn = ex.clientGone, s.abort.Load, ex.hijacked, ex.sendsOtherModel
	return ex
}

// begin reads what the sidecar needs from the request.
func (ex *exchange) begin(ctx *fasthttp.RequestCtx) {
	ex.ctx = ctx
	ex.start = time.Now()
	ex.path = append(ex.path[:0], ctx.Path()...)
	ex.family = familyOf(ex.path)
	ex.head = ctx.IsHead()
	ex.reqBody = ctx.PostBody()
	ex.fields = scanRequest(ex.reqBody)
	ex.model = appendJSONString(ex.model[:0], ex.fields.model)
	ex.streaming = ex.fields.stream || containsFold(ctx.Request.Header.PeekBytes(headerAccept), valueEventStream)
	if id := ctx.Request.Header.PeekBytes(headerRequestID); validRequestID(id) {
		ex.requestID = append(ex.requestID[:0], id...)
	} else {
		var b [16]byte
		putUint64(b[:8], rand.Uint64())
		putUint64(b[8:], rand.Uint64())
		ex.requestID = hex.AppendEncode(ex.requestID[:0], b[:])
	}
	ex.ledger.reset()
	ex.outcome, ex.status, ex.servedBy, ex.servedModel = OutcomeRejected, 0, nil, nil
	ex.waited, ex.committedStream, ex.gone, ex.clientFD, ex.tokenHeader = 0, false, false, -2, nil
	ex.conn = nil
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

// validRequestID accepts a client's X-Request-Id when it is short and printable.
func validRequestID(id []byte) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// reject answers with a sidecar error of its own: before any attempt, or after some when the
// shutdown timeout ends the sweep. X-Failover-Attempts says how many were made (0 before any).
func (ex *exchange) reject(status int, code, message string) {
	ex.outcome, ex.status = OutcomeRejected, status
	writeError(ex.ctx, ex.family, status, code, message)
	ex.setFailoverHeaders(nil)
}

// run is the attempt loop: candidates, attempts, verdicts (SPEC sections 4 and 5).
func (ex *exchange) run() {
	s := ex.srv
	now := s.clock.Now()
	ex.selectCandidates(now)
	if len(ex.cands) == 0 {
		ex.reject(fasthttp.StatusNotFound, codeNoTarget, "no target serves this model and path")
		return
	}
	s.retries.Request(now)
	ex.budget.Reset(&s.cfg.Budget)
	ex.sweep.Reset(len(ex.cands))
	pos, probe, ok := ex.sweep.Next(now, ex.healthAt)
	if !ok {
		ex.reject(fasthttp.StatusNotFound, codeNoTarget, "no target serves this model and path")
		return
	}
	t := s.targets[ex.cands[pos]]
	ex.probe = probe
	for n := 1; ; n++ {
		if s.abort.Load() {
			if ex.probe {
				t.health.Release() // the probe this request held told nothing
			}
			ex.closeConn()
			ex.reject(fasthttp.StatusServiceUnavailable, codeShuttingDown, "the sidecar is shutting down")
			return
		}
		ex.budget.Begin(s.clock.Now(), t.Index)
		a := &ex.cur
		*a = attempt{t: t, n: n}
		ex.do(a)
		if a.cut {
			// The sidecar, not the target, ended this attempt: like a client leaving, it has no
			// health effect and is no failure to recover from; the loop's first check answers.
			if ex.probe {
				t.health.Release()
				ex.probe = false // released once: the loop's first check must not release it again
			}
			ex.record(a, classify.Verdict{Class: classify.ClassCancelled, Action: classify.ActionStop, Reason: classify.ReasonCancelled})
			continue
		}
		o := classify.Outcome{
			Kind: a.kind, Status: a.status, Transport: a.transport, Body: a.body, Truncated: a.truncated,
			Chat: ex.family == stream.Chat, Image: ex.family == stream.Image, OwnKey: t.ownKey,
			// A probe is not retried on the same target: one failed attempt tells enough, and the
			// request goes on to a target that works (README, Health).
			RetriesLeft: ex.budget.RetryAllowed(t.retries) && !ex.probe, RetryAfter: a.retryAfter, HasRetryAfter: a.hasRetryAfter,
			ClientGone: ex.gone, NoBody: ex.head || a.status == fasthttp.StatusNoContent || a.status == fasthttp.StatusNotModified,
		}
		v := s.policy.Decide(&o)
		if (v.Action == classify.ActionRetry || v.Action == classify.ActionTransfer) && !o.ClientGone && ex.clientGone() {
			// Looked at again before anything new starts: the attempt may have ended on its own
			// deadline after the client left, and no attempt may start after that (SPEC section
			// 4, rule 1). Only then: an answer that commits or stops needs no syscall for it.
			o.ClientGone = true
			v = s.policy.Decide(&o)
		}
		ex.applyHealth(a, v)
		// A transfer's next candidate is looked up before the budgets are asked: with none
		// left the sweep ends here, exhausted whatever the budgets say, and no retry-budget
		// token goes to a transfer that cannot happen.
		exhausted, looked := false, false
		if v.Action == classify.ActionTransfer {
			pos, probe, ok = ex.nextCandidate(t, v)
			exhausted, looked = !ok, true
		}
		if !exhausted && (v.Action == classify.ActionRetry || v.Action == classify.ActionTransfer) {
			v = ex.limit(a, v, func() bool {
				// A retry whose backoff no longer fits became a transfer: its candidate too is
				// looked up before the retry budget is asked.
				pos, probe, ok = ex.nextCandidate(t, v)
				looked = true
				return ok
			})
			if v.Action != classify.ActionTransfer && looked && ok && probe {
				s.targets[ex.cands[pos]].health.Release() // a budget stopped the sweep: the probe goes unused
			}
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
			ex.probe = false
			continue
		}
		ex.closeConn()
		t, ex.probe = s.targets[ex.cands[pos]], probe
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
		if ex.healthAt(pos).Usable(now) {
			return true
		}
	}
	return false
}

// nextCandidate finds the candidate a transfer from target from goes to. A verdict that wants
// another model (a context-window error) passes over the candidates that would send the
// model from sent (README, The decision order, rule 5b).
func (ex *exchange) nextCandidate(from *Target, v classify.Verdict) (pos int, probe, ok bool) {
	if !v.NewModel {
		return ex.sweep.Next(ex.srv.clock.Now(), ex.healthAt)
	}
	ex.modelFrom = from
	return ex.sweep.NextWhere(ex.srv.clock.Now(), ex.healthAt, ex.acceptFn)
}

// sendsOtherModel reports whether the candidate at pos would send a different model than
// ex.modelFrom did.
func (ex *exchange) sendsOtherModel(pos int) bool {
	return !bytes.Equal(ex.sentModel(ex.srv.targets[ex.cands[pos]]), ex.sentModel(ex.modelFrom))
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
// apply them. It logs the budget events of SPEC section 8. When the budgets turn a retry into
// a transfer, next looks up its candidate; with none left the sweep ends there, before the
// retry budget is asked, so that no token goes to a transfer that cannot happen.
func (ex *exchange) limit(a *attempt, v classify.Verdict, next func() bool) classify.Verdict {
	s := ex.srv
	b := &s.cfg.Budget
	now := s.clock.Now()
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
	if v.Action == classify.ActionRetry && limited.Action == classify.ActionTransfer && !next() {
		// Ended by FAILOVER_MAX_ELAPSED when that budget refused the retry; a retry refused
		// because the target was taken out has simply run out of candidates.
		limited = classify.NoCandidate(limited, !al.RetryFits)
		ex.reportLimit(a, limited.Reason, now)
		return limited
	}
	if limited.Action == classify.ActionRetry || limited.Action == classify.ActionTransfer {
		if !s.retries.Withdraw(now) {
			al.RetryBudgetOK = false
			limited = classify.Limit(v, al)
		}
	}
	ex.reportLimit(a, limited.Reason, now)
	if limited.Action == classify.ActionTransfer && v.Transient && a.t.retries > 0 && !ex.budget.RetryAllowed(a.t.retries) {
		s.metrics.budgetExhausted[budgetTargetRetry].Inc()
		ex.event(slog.LevelInfo, "target_transfer_limit_reached", a, slog.Int("retries", ex.budget.RetriesOnTarget()))
	}
	return limited
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

// applyHealth executes the verdict's health effect on the target.
func (ex *exchange) applyHealth(a *attempt, v classify.Verdict) {
	s, t := ex.srv, a.t
	now := s.clock.Now()
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
		t.noteSilent(ex.ctx.Request.Header.Method(), ex.path)
		if ejected, d := t.health.SilentFailure(now); ejected {
			ex.ejected(a, d, "timeout")
			s.wakeProber()
		}
	case classify.HealthEject:
		if d := t.health.Eject(now); d > 0 {
			ex.ejected(a, d, v.Reason.String())
		}
	default:
		if ex.probe {
			t.health.Release()
		}
	}
	ex.probe = false
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

// record writes the attempt into the ledger and the metrics.
func (ex *exchange) record(a *attempt, v classify.Verdict) {
	s, t := ex.srv, a.t
	d := time.Since(a.start)
	phase := a.phase
	if v.Action == classify.ActionCommit {
		phase = PhaseCommitted
	}
	ex.ledger.add(attemptRecord{target: t.Name, status: a.status, class: v.Class, reason: v.Reason, phase: phase,
		action: v.Action, duration: d, wait: v.Wait * time.Duration(b2i(v.Action == classify.ActionRetry))})
	t.metrics.attempt(v.Class, v.Action).Inc()
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

// sleep waits d before a retry, watching the client; false when the client left (ex.gone) or
// the sidecar is ending what remains at shutdown.
func (ex *exchange) sleep(d time.Duration) bool {
	start := time.Now()
	defer func() { ex.waited += time.Since(start) }()
	deadline := start.Add(d)
	for {
		if ex.clientGone() || ex.srv.abort.Load() {
			return false
		}
		left := time.Until(deadline)
		if left <= 0 {
			return true
		}
		time.Sleep(min(left, pollInterval))
	}
}

// clientGone reports whether the client closed its connection (checked on slow paths only:
// while waiting on an upstream or a backoff).
func (ex *exchange) clientGone() bool {
	if ex.gone {
		return true
	}
	if ex.clientFD == -2 {
		ex.clientFD = socketOf(ex.ctx.Conn())
	}
	ex.gone = peerClosed(ex.clientFD)
	return ex.gone
}

// waitData arms c's reads with deadline and the client and shutdown watchers, then blocks
// until the connection has an unread byte, the deadline passes (errDeadline), the client
// leaves (errClientGone) or the shutdown timeout passes (errShutdown); a zero deadline waits
// without limit. Other read errors are left for the following read to report. The reads that
// follow (headers, body, chunk framing) stay armed, so none of them can outlive the deadline
// or the client.
func (ex *exchange) waitData(c *upConn, deadline time.Time) error {
	c.rd.arm(deadline, ex.goneFn, ex.stopFn)
	br := c.reader()
	if br.Buffered() > 0 {
		return nil
	}
	start := time.Now()
	_, err := br.Peek(1)
	ex.waited += time.Since(start)
	if err != nil && c.rd.why != nil {
		return c.rd.why
	}
	return nil
}

// deadline returns now+d, or the zero time (no deadline) when d is 0.
func deadlineAfter(t time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return t.Add(d)
}

// closeConn drops the current upstream connection, or pools it when its response was read
// to the end.
func (ex *exchange) closeConn() {
	c := ex.conn
	if c == nil {
		return
	}
	ex.conn = nil
	if ex.reusable {
		ex.cur.t.pool.put(c, time.Now())
		return
	}
	c.close()
}

// do performs one attempt up to its verdict: connect, send, read the headers, then hold the
// body (non-streaming) or peek the stream until the gate decides.
func (ex *exchange) do(a *attempt) {
	s, t := ex.srv, a.t
	cfg := &s.cfg.Server
	a.start = time.Now()
	ex.reusable = false
	ex.buildRequest(a)
	writeDeadline := deadlineAfter(a.start, cfg.AttemptTimeout)

	var c *upConn
	for tries := 0; ; tries++ {
		var err error
		var dialed time.Duration
		c, dialed, err = t.pool.get(a.start, ex.goneFn, ex.stopFn)
		ex.waited += dialed // connecting (TCP and TLS) is the target's time, not the sidecar's
		if err != nil {
			ex.fail(a, err)
			return
		}
		c.rd.watchFrom(a.start)
		var wrote time.Duration
		wrote, err = writeRequest(c, ex.upHead, ex.upBody, writeDeadline, ex.goneFn, ex.stopFn)
		ex.waited += wrote // a write that had to wait waited for the target to read
		if err != nil {
			c.close()
			if c.reused && tries == 0 && err != errClientGone && err != errShutdown {
				// A pooled connection the far side had closed refused the request, so no
				// server read it whole: once more, on a fresh connection. Once a request is
				// written, a failure is the attempt's (the server may be generating).
				continue
			}
			ex.fail(a, err)
			return
		}
		a.sent = time.Now()
		headerDeadline := deadlineAfter(a.start, cfg.AttemptTimeout)
		if ex.streaming {
			headerDeadline = deadlineAfter(a.sent, cfg.FirstByteTimeout)
		}
		if err = ex.waitData(c, headerDeadline); err != nil {
			c.close()
			ex.fail(a, err)
			return
		}
		break
	}
	ex.conn = c
	resp := &ex.upResp
	resp.Reset()
	resp.SkipBody = true // the body is read in place (body.go)
	err := resp.Read(c.reader())
	if err != nil && isSmallBuffer(err) && c.growReader() {
		// A header block larger than the pooled reader (many or long headers: cookies, policy
		// headers from a gateway): read it again with room for maxResponseHeaderBytes.
		resp.Reset()
		resp.SkipBody = true
		err = resp.Read(c.reader())
	}
	if err != nil {
		ex.fail(a, c.cause(err))
		return
	}
	ex.body.reset(c, resp, ex.head)
	a.phase = PhaseBeforeContent
	a.status = resp.StatusCode()
	a.ttfb = time.Since(a.sent)
	t.metrics.firstByte.Update(a.ttfb.Seconds())
	a.retryAfter, a.hasRetryAfter = 0, false
	if ra, ms := resp.Header.PeekBytes(headerRetryAfter), resp.Header.PeekBytes(headerRetryAfterMs); len(ra) > 0 || len(ms) > 0 {
		a.retryAfter, a.hasRetryAfter = budget.ParseRetryAfter(ra, ms, time.Now())
	}

	success := a.status >= 200 && a.status < 300
	switch {
	case a.status < 200:
		// A final informational answer (an unasked-for 101: fasthttp reads past 100 and 103).
		// What follows on the connection is no HTTP the sidecar can read: it is never pooled,
		// and classify judges the answer a bad one.
		a.kind = classify.KindResponse
	case ex.family == stream.Image && success:
		// A generated image is never paid for twice: commit at headers.
		a.kind, a.truncated, a.pipeRest, a.commitReason = classify.KindResponse, true, true, stream.ReasonHeaders
	case ex.streaming && success && ex.body.has() && hasPrefixFold(resp.Header.ContentType(), valueEventStream):
		// (A HEAD's or a 204's answer has no stream to peek: it is read as a response, and
		// classify sees it as one without a body, not as an empty stream.)
		if enc := resp.Header.ContentEncoding(); len(enc) > 0 && !hasPrefixFold(enc, valueIdentity) {
			// Compressed although the request asked for identity: its events cannot be read,
			// so it cannot be judged before commit. It goes through at headers, as an image
			// does, rather than read as a stream that never shows an event (an "empty" one).
			a.kind, a.truncated, a.pipeRest, a.commitReason = classify.KindResponse, true, true, stream.ReasonHeaders
			return
		}
		ex.peek(a, deadlineAfter(a.sent, cfg.FirstByteTimeout))
	default:
		ex.readBody(a, deadlineAfter(a.start, cfg.AttemptTimeout))
	}
}

// isSmallBuffer reports whether err is fasthttp's "header block larger than the buffer". A
// function of its own: the target errors.As needs escapes, and would be allocated on every
// request if it were declared where the response is read.
func isSmallBuffer(err error) bool {
	var small *fasthttp.ErrSmallBuffer
	return errors.As(err, &small)
}

// fail records an attempt that lost its connection or waited too long.
func (ex *exchange) fail(a *attempt, err error) {
	if ex.conn != nil {
		ex.conn.close()
		ex.conn = nil
	}
	a.kind = classify.KindTransport
	switch err {
	case errClientGone:
		ex.gone = true
		a.transport = classify.TransportOther
	case errShutdown:
		a.transport, a.cut = classify.TransportOther, true
	default:
		a.transport = transportOf(err)
		// For least-latency a failure is a slow sample, never a fast one: a refused or reset
		// connection fails in microseconds, and as its own time it would make a dead target
		// the favourite. The client leaving or the shutdown say nothing about the target.
		a.t.observeLatency(max(time.Since(a.start), failedAttemptLatency(ex.srv.cfg.Server.ConnectTimeout)))
	}
}

// failedAttemptLatency is the least-latency sample for an attempt that got no answer, or an
// answer the sweep cannot use (applyHealth): at least FAILOVER_CONNECT_TIMEOUT (10 s when that
// is disabled), slower than any target that answers well in time.
func failedAttemptLatency(connectTimeout time.Duration) time.Duration {
	if connectTimeout <= 0 {
		return 10 * time.Second
	}
	return connectTimeout
}

// readBody holds a non-streaming response up to FAILOVER_MAX_RESPONSE_BYTES for the decision.
// Past it, the response will commit and the rest is streamed through.
func (ex *exchange) readBody(a *attempt, deadline time.Time) {
	resp, c, body := &ex.upResp, ex.conn, &ex.body
	a.kind = classify.KindResponse
	b := ex.respBody[:0]
	limit := ex.srv.maxResponse
	cl := resp.Header.ContentLength()
	if body.has() && cl > 0 && cap(b) < cl && (limit <= 0 || cl <= limit) {
		b = make([]byte, 0, cl)
	}
	for {
		if limit > 0 && len(b) > limit {
			a.truncated, a.pipeRest = true, true
			break
		}
		if !body.done {
			if err := ex.waitData(c, deadline); err != nil {
				ex.respBody = b
				ex.fail(a, err)
				return
			}
		}
		p, err := body.next()
		if len(p) > 0 {
			if limit > 0 {
				p = p[:min(len(p), limit+1-len(b))] // one byte past the limit tells that the body is larger
			}
			b = append(b, p...)
			body.consume(len(p))
			continue
		}
		if err == io.EOF {
			ex.reusable = body.reusable() && !resp.ConnectionClose()
			break
		}
		ex.respBody = b
		ex.fail(a, c.cause(err))
		return
	}
	ex.respBody = b
	a.body = b
}

// peek holds an SSE stream until the gate decides: commit, error, or empty (SPEC section 6).
func (ex *exchange) peek(a *attempt, deadline time.Time) {
	g, c, body := &ex.gate, ex.conn, &ex.body
	g.Reset(ex.family, ex.srv.peek)
	a.sse = true
	if ex.srv.peek <= 0 {
		g.Feed(nil)
		a.kind, a.commitReason = classify.KindStreamCommit, stream.ReasonHeaders
		return
	}
	for {
		if !body.done {
			if err := ex.waitData(c, deadline); err != nil {
				ex.fail(a, err)
				return
			}
		}
		p, err := body.next()
		if len(p) > 0 {
			verdict := g.Feed(p)
			body.consume(len(p))
			switch verdict {
			case stream.Commit:
				a.kind, a.body, a.commitReason = classify.KindStreamCommit, g.Events(), g.Reason()
				a.ended = g.Finished() && ex.bodyEnds()
				return
			case stream.Error:
				a.kind, a.body = classify.KindStreamError, g.ErrorData()
				return
			case stream.Empty:
				a.kind = classify.KindStreamEmpty
				return
			}
			continue
		}
		if err == io.EOF {
			if g.End() == stream.Error {
				a.kind, a.body = classify.KindStreamError, g.ErrorData()
			} else {
				a.kind = classify.KindStreamEmpty
			}
			ex.reusable = body.reusable() && !ex.upResp.ConnectionClose()
			return
		}
		ex.fail(a, c.cause(err))
		return
	}
}

// bodyEnds reports whether the stream's body ends with what the connection's buffer already
// holds: its last event arrived with the end of the body (the common case for a short answer),
// so the stream can go out as one write. It reads only what is buffered, never waits.
func (ex *exchange) bodyEnds() bool {
	body := &ex.body
	switch body.mode {
	case bodyLength:
		return body.done
	case bodyChunked:
		if body.done {
			return true
		}
		// The end of a chunked body is the last chunk's CRLF, "0", CRLF and the empty line:
		// only worth parsing when all of it is there. Parsing reads whole lines, so what is
		// buffered must end with the empty line: a line cut short ("0;ext=1" whose CRLF is
		// still on its way) would make the parse wait for the upstream.
		n := ex.conn.buffered()
		if body.left != 0 || n < len("0\r\n\r\n") {
			return false
		}
		if b, _ := ex.conn.reader().Peek(n); !bytes.HasSuffix(b, []byte("\n\r\n")) && !bytes.HasSuffix(b, []byte("\n\n")) {
			return false
		}
		_, err := body.next()
		return err == io.EOF
	}
	return false
}

// buildRequest writes the upstream request's head for attempt a into ex.upHead, and points
// ex.upBody at its body (SPEC section 7). The head is built by hand rather than through a
// fasthttp.RequestHeader: the client's headers are copied once, skipping the ones the sidecar
// drops or sets itself, instead of copied whole and then deleted and set one by one.
func (ex *exchange) buildRequest(a *attempt) {
	t, ctx := a.t, ex.ctx
	rh := &ctx.Request.Header
	ex.uri = appendUpstreamURI(ex.uri[:0], t, ex.path, ctx.URI().QueryString())
	b := append(ex.upHead[:0], rh.Method()...)
	b = append(b, ' ')
	b = append(b, ex.uri...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, t.host...)
	b = append(b, '\r', '\n')

	underscores := 0
	for k, v := range rh.All() {
		if hasUnderscore(k) && !ex.srv.cfg.Server.AllowUnderscoreHeaders {
			underscores++
			continue
		}
		if ex.dropped(t, k, v, ex.connection) {
			continue
		}
		b = appendHeaderLine(b, k, v)
	}
	if underscores > 0 && a.n == 1 { // counted once per request, not per attempt
		ex.srv.metrics.droppedUnderscore.Add(underscores)
	}
	if t.ownKey {
		b = appendHeaderLine(b, t.authName, t.authValue)
	}
	for _, kv := range t.headers {
		b = appendHeaderLine(b, kv[0], kv[1])
	}
	b = appendHeaderLine(b, headerAcceptEnc, valueIdentity)
	b = appendHeaderLine(b, headerRequestID, ex.requestID)
	b = append(b, headerAttempt...)
	b = append(b, ':', ' ')
	b = strconv.AppendInt(b, int64(a.n), 10)
	b = append(b, '\r', '\n')

	body := ex.reqBody
	if t.model != nil && ex.fields.modelStart >= 0 {
		ex.subBody = appendSubstitutedBody(ex.subBody[:0], ex.reqBody, &ex.fields, t.model)
		body = ex.subBody
	}
	// As fasthttp writes a request: a length for any body, and for every method but GET and
	// HEAD even when empty.
	if len(body) > 0 || !rh.IsGet() && !rh.IsHead() {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, '\r', '\n')
	}
	ex.upHead = append(b, '\r', '\n')
	ex.upBody = body
}

// maxConnectionOptions bounds the options a request's Connection lines may name. Each one is
// compared with every header the client sent, on every attempt: a 16 KiB header block of a few
// thousand options and a few thousand empty headers would cost some 60 ms of CPU per attempt
// (a hundred times a plain request). Clients name one or two (keep-alive, Upgrade).
const maxConnectionOptions = 32

// readConnection collects the options the client's Connection lines name into ex.connection,
// one per entry (isHopByHop reads each as a one-item line); false when there are more than
// maxConnectionOptions.
func (ex *exchange) readConnection() bool {
	ex.connection = ex.connection[:0]
	for _, line := range ex.ctx.Request.Header.PeekAll(stringConnection) { // fasthttp keeps each line
		for len(line) > 0 {
			var tok []byte
			tok, line = cutList(line, ',')
			if tok = bytes.TrimSpace(tok); len(tok) == 0 {
				continue
			}
			if len(ex.connection) == maxConnectionOptions {
				return false
			}
			ex.connection = append(ex.connection, tok)
		}
	}
	return true
}

// appendHeaderLine appends "k: v" and CRLF.
func appendHeaderLine(b, k, v []byte) []byte {
	b = append(b, k...)
	b = append(b, ':', ' ')
	b = append(b, v...)
	return append(b, '\r', '\n')
}

// hasUnderscore reports whether header name k has a '_'. Such a client header is dropped
// unless FAILOVER_ALLOW_UNDERSCORE_HEADERS=true (README, Headers), as nginx does by default: a
// server that reads headers CGI-style (HTTP_X_API_KEY), behind a target or a proxy in front of
// it, takes X_Api_Key for X-Api-Key, a header the sidecar removed or set itself.
func hasUnderscore(k []byte) bool { return bytes.IndexByte(k, '_') >= 0 }

// dropped reports whether the client's header k (value v) stays behind: hop-by-hop headers
// and the ones the client's Connection lines name, X-Failover-* (the sidecar's own), any
// header that carries FAILOVER_INBOUND_TOKEN (not only the one it was accepted from: a client
// may send it twice, as Authorization and x-api-key), the client's credentials when the
// target sends its own key, and every header the sidecar sets itself (Host, Content-Length,
// Accept-Encoding, X-Request-Id, the target's configured headers). Names are compared with
// sameName: where underscore headers are forwarded, X_Api_Key stays behind as X-Api-Key does.
func (ex *exchange) dropped(t *Target, k, v []byte, connection [][]byte) bool {
	if hasFailoverPrefix(k) || isHopByHop(k, connection) {
		return true
	}
	for _, h := range setUpstream {
		if sameName(k, h) {
			return true
		}
	}
	if ex.tokenHeader != nil && (sameName(k, ex.tokenHeader) || carriesToken(v, ex.srv.inboundToken)) {
		return true
	}
	if t.ownKey {
		if sameName(k, t.authName) {
			return true
		}
		for _, h := range clientCredentials {
			if sameName(k, h) {
				return true
			}
		}
	}
	for _, kv := range t.headers {
		if sameName(k, kv[0]) {
			return true
		}
	}
	return false
}

// carriesToken reports whether header value v is the inbound token, bare or after "Bearer ",
// compared in constant time.
func carriesToken(v, tok []byte) bool {
	v = bytes.TrimSpace(v)
	if len(v) > 7 && bytes.EqualFold(v[:7], []byte("bearer ")) {
		v = bytes.TrimSpace(v[7:])
	}
	return subtle.ConstantTimeCompare(v, tok) == 1
}

// setUpstream are the headers the sidecar writes itself on every upstream request.
var setUpstream = [][]byte{[]byte("Host"), []byte("Content-Length"), headerAcceptEnc, headerRequestID}

// sameName reports whether two header names are one header: compared in any ASCII case, and
// with '_' read as '-', as a server that reads headers CGI-style does (hasUnderscore).
func sameName(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if nameFold[a[i]] != nameFold[b[i]] {
			return false
		}
	}
	return true
}

// nameFold maps a header name's byte to the one sameName compares: upper-case letters to
// lower case, '_' to '-', every other byte to itself.
var nameFold = func() (t [256]byte) {
	for i := range t {
		t[i] = byte(i)
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = byte(c) + 'a' - 'A'
	}
	t['_'] = '-'
	return t
}()

// hasPrefixFold reports whether s starts with the ASCII word prefix in any case.
func hasPrefixFold(s, prefix []byte) bool {
	return len(s) >= len(prefix) && bytes.EqualFold(s[:len(prefix)], prefix)
}

// containsFold reports whether s contains the lower-case ASCII word sub in any case (media
// types are case-insensitive: Accept: Text/Event-Stream asks for a stream too).
func containsFold(s, sub []byte) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if bytes.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}
