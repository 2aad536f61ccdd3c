package proxy

import (
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"

	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/config"
	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/proxy/internal/observe"
	"github.com/llm-failover/failover/stream"
	"github.com/llm-failover/failover/stream/jsonscan"
)

// Resume (docs/streams.md, Resume a cut stream): with FAILOVER_RESUME=on, a committed chat or messages
// stream that is cut while it has delivered nothing but text is continued on a target marked
// resumable. The continuation is asked for with the delivered text as a partial assistant
// turn (a prefill), or as an assistant turn followed by a user turn that asks to continue it
// (by instruction), goes through the gate like any attempt, and only once it carries text are
// its events spliced into the client's open stream (stream.Transcript). A resume that fails
// leaves the client with the original interruption's error event, as without resume.
//
// The cost is paid only by a stream that may be resumed: the client's body and headers are
// copied at commit (the request context is gone once the stream runs on its own goroutine),
// and its events are parsed as they go out. Every other stream only checks that p.res is nil.

// Why a stream that may be resumed stopped before its body ended (resumption.stopped).
var (
	errUpstreamEvent = errors.New("the upstream sent an error event")
	errUnspliceable  = errors.New("an event too large to read whole")
)

// resumption is what a committed stream keeps to be continued on another target when it is
// cut: the client's request, copied at commit, and the transcript of what the client got.
// Part of the exchange: allocated the first time one of its requests may be resumed, then
// kept with it; owned with the exchange by the stream goroutine. Not safe for concurrent use.
type resumption struct {
	tr     stream.Transcript
	parser fastjson.Parser
	header fasthttp.RequestHeader // the client's request header
	query  []byte                 // its query string
	body   []byte                 // its body
	msgEnd int                    // the index of the closing bracket of body's "messages"
	objEnd int                    // the index of body's closing brace
	cont   []byte                 // the body the continuation is asked with

	resumes int  // resumes made
	spliced bool // the stream goes on with a continuation

	// errEvent is the upstream's error event, held back until the resume says whether the
	// client gets it; broken, an event that could not be read or spliced whole.
	errEvent []byte
	broken   bool

	scratch []byte // whole events whose start was held
	out     []byte // a continuation's events as the client gets them
	comment []byte

	// What accept found of a continuation's held events: the whole ones (whole bytes of them),
	// how many of those it rewrote (rewrote), and an error event among them (errEvent, held
	// back as the stream's next interruption).
	whole, rewrote int
	contErr        []byte
}

// reading reports whether the stream's events must go through the transcript: while it may
// still be resumed, and always once it goes on with a continuation (whose events are rewritten).
// A stream that showed anything but text, or its end, goes on as any other.
func (r *resumption) reading() bool { return r.spliced || r.tr.Eligible() }

// stopped reports whether the stream stopped before its body ended: an error event held back,
// or an event it could not splice.
func (r *resumption) stopped() bool { return len(r.errEvent) > 0 || r.broken }

// stopErr is how the stream stopped, for pipe.interruption.
func (r *resumption) stopErr() error {
	if r.broken {
		return errUnspliceable
	}
	return errUpstreamEvent
}

// hold keeps a copy of the upstream's error event ev (nil: none).
func (r *resumption) hold(ev []byte) {
	if ev != nil {
		r.errEvent = append(r.errEvent[:0], ev...)
	}
}

// shed drops what a request left that it should not keep: buffers grown past shedAbove, and
// the client's header (its credentials, its cookies).
func (r *resumption) shed() {
	r.header.Reset()
	for _, b := range []*[]byte{&r.query, &r.body, &r.cont, &r.errEvent, &r.scratch, &r.out} {
		if cap(*b) > shedAbove {
			*b = nil
		}
	}
	r.tr.Shed(shedAbove)
}

// prepareResume readies the stream about to commit to be resumed, when the request may be: a
// chat or messages request whose body is a JSON object with a non-empty "messages" that does
// not end with an assistant message (a client's own prefill is not continued), with n absent or
// 1 and no logprobs (chat), and a candidate marked resumable. It copies what an attempt needs
// of the request, which the handler's context holds only until the stream starts. nil: the
// stream cannot be resumed.
func (ex *exchange) prepareResume() *resumption {
	if ex.Family != stream.Chat && ex.Family != stream.Messages || !ex.fields.json || !ex.anyResumable() {
		return nil
	}
	if ex.resume == nil {
		ex.resume = new(resumption)
	}
	r := ex.resume
	if !resumableRequest(&r.parser, ex.Family, ex.reqBody) {
		return nil
	}
	if r.msgEnd, r.objEnd = messagesEnd(ex.reqBody); r.msgEnd < 0 {
		return nil
	}
	ctx := ex.ctx
	r.body = append(r.body[:0], ex.reqBody...)
	r.query = append(r.query[:0], ctx.URI().QueryString()...)
	ctx.Request.Header.CopyTo(&r.header)
	ex.readConnectionOf(&r.header) // the request's header goes with its context
	r.tr.Reset(ex.Family)
	r.resumes, r.spliced, r.broken, r.errEvent = 0, false, false, r.errEvent[:0]
	return r
}

// anyResumable reports whether a candidate is marked resumable.
func (ex *exchange) anyResumable() bool {
	for _, i := range ex.cands {
		if ex.srv.targets[i].resume != config.ResumeNone {
			return true
		}
	}
	return false
}

// resumableRequest reads what a request asks that makes a continuation of its answer
// impossible or wrong (see prepareResume).
func resumableRequest(p *fastjson.Parser, f stream.Family, body []byte) bool {
	v, err := p.ParseBytes(body)
	if err != nil {
		return false
	}
	msgs := member(v, "messages").GetArray()
	if len(msgs) == 0 || string(member(msgs[len(msgs)-1], "role").GetStringBytes()) == "assistant" {
		return false
	}
	if f == stream.Chat {
		if n := member(v, "n"); n != nil && n.Type() != fastjson.TypeNull && n.GetFloat64() != 1 {
			return false
		}
		if member(v, "logprobs").GetBool() {
			return false
		}
		if tl := member(v, "top_logprobs"); tl != nil && tl.Type() != fastjson.TypeNull {
			return false
		}
	}
	return true
}

// member returns the value of object v's last member named key; nil when there is none, or v
// is no object. A key sent twice is read as the providers' JSON parsers (Python's, Go's,
// JavaScript's) read it, the later one winning, as scanRequest and messagesEnd read it too;
// fastjson's Get takes the first.
func member(v *fastjson.Value, key string) *fastjson.Value {
	var m *fastjson.Value
	v.GetObject().Visit(func(k []byte, kv *fastjson.Value) {
		if string(k) == key {
			m = kv
		}
	})
	return m
}

// messagesEnd finds, in a body that is a valid JSON object, the closing bracket of its
// top-level "messages" array (the last one, as parsers read a duplicate key) and the object's
// closing brace; -1 when there is no such array.
func messagesEnd(b []byte) (msgEnd, objEnd int) {
	msgEnd = -1
	var c jsonscan.Cursor
	for ok := c.OpenObject(b, 0); ok && c.Next(); {
		vs := c.Start()
		v := c.Value()
		if v == nil {
			return -1, -1
		}
		if b[vs] == '[' && jsonscan.StringIs(c.Key(), "messages") {
			msgEnd = vs + len(v) - 1
		}
	}
	if c.End() < 0 {
		return -1, -1
	}
	return msgEnd, c.End() - 1
}

// resumeForm is the form a continuation is asked in on t: its _RESUME, but a messages
// request always gets a plain prefill for prefix and continue (Anthropic's form), and auto is a
// prefill unless t refused one for the model it sends for this request (docs/streams.md, Resume a cut
// stream), then by instruction.
func (ex *exchange) resumeForm(t *Target) config.ResumeMode {
	switch m := t.resume; {
	case m == config.ResumeAuto && t.prefillRefused.has(ex.sentModel(t)):
		return config.ResumeInstruct
	case m == config.ResumeAuto, ex.Family == stream.Messages && (m == config.ResumePrefix || m == config.ResumeContinue):
		return config.ResumePrefill
	default:
		return m
	}
}

// continuationBody makes the body the continuation is asked with in form: the client's, with
// the delivered text (Prefill) as a final assistant message in that form, or, by instruction,
// as an assistant message followed by a user message with FAILOVER_RESUME_INSTRUCTION; and points
// the exchange's body and fields at it (a _MODEL substitution then applies as usual).
func (ex *exchange) continuationBody(form config.ResumeMode) {
	r := ex.resume
	b := append(r.cont[:0], r.body[:r.msgEnd]...)
	b = append(b, `,{"role":"assistant","content":`...)
	b = jsonscan.AppendQuote(b, b2s(r.tr.Prefill()))
	if form == config.ResumePrefix {
		b = append(b, `,"prefix":true`...)
	}
	b = append(b, '}')
	if form == config.ResumeInstruct {
		b = append(b, `,{"role":"user","content":`...)
		b = append(b, ex.srv.instruction...)
		b = append(b, '}')
	}
	if form == config.ResumeContinue {
		b = append(b, r.body[r.msgEnd:r.objEnd]...)
		b = append(b, `,"continue_final_message":true,"add_generation_prompt":false`...)
		b = append(b, r.body[r.objEnd:]...)
	} else {
		b = append(b, r.body[r.msgEnd:]...)
	}
	r.cont = b
	ex.reqBody, ex.fields = b, scanRequest(b)
}

// resumeCandidate returns the candidate a stream cut on target from is resumed on: the first
// one marked resumable and usable now, in the request's sweep order after from, going round
// to those before it and from itself last; nil when there is none. It is asked twice: with
// take false it takes nothing (budget.Health.Usable), to tell whether a resume could go
// anywhere before the budgets are asked; with take true it takes the target (Available), and
// a target whose ejection has run out is handed out as its probe, as to any request
// (docs/decisions.md, Health): the probe is held in ex.lease, which the resume attempt settles.
func (ex *exchange) resumeCandidate(from *Target, now time.Time, take bool) *Target {
	n, pos := len(ex.cands), 0
	for i, c := range ex.cands {
		if c == from.Index {
			pos = i
		}
	}
	for k := 1; k <= n; k++ {
		t := ex.srv.targets[ex.cands[(pos+k)%n]]
		if t.resume == config.ResumeNone {
			continue
		}
		if !take {
			if t.health.Usable(now) {
				return t
			}
			continue
		}
		if ok, probe := t.health.Available(now); ok {
			if probe {
				ex.lease.take(t.health)
			}
			return t
		}
	}
	return nil
}

// prefillRefused remembers that attempt a's target refused a prefill for the model it sends,
// and says so the first time (resume_prefill_refused).
func (ex *exchange) prefillRefused(a *attempt) {
	m := ex.sentModel(a.t)
	if a.t.prefillRefused.add(m) {
		ex.event(slog.LevelInfo, "resume_prefill_refused", a, slog.String("model", observe.LogText(observe.ModelText(m))))
	}
}

// instructAgain says whether a resume whose prefill was refused may ask the same target again
// by instruction at once, as classify.Resume says for any resume: that retry is part of the
// same resume (FAILOVER_RESUME_MAX counts it there), but it is one more attempt, within
// FAILOVER_MAX_ELAPSED and the retry budget, and never after the client left or while the
// sidecar shuts down.
func (ex *exchange) instructAgain() classify.ResumeReason {
	s := ex.srv
	now := ex.policyNow()
	in := classify.Interruption{Enabled: s.cfg.Budget.Enabled, Resumable: true, ClientGone: ex.gone || ex.clientGone(), Cut: s.closing.Load(),
		ResumesLeft: true, Candidate: true, ElapsedOK: ex.budget.ElapsedAllows(now, 0), RetryBudgetOK: true}
	why := classify.Resume(in)
	if why == classify.ResumeOK && !s.retries.Withdraw(now) {
		in.RetryBudgetOK = false
		why = classify.Resume(in)
	}
	return why
}

// forwardResumable is forward for a stream that may be resumed (resumption.reading): the whole events go through
// the transcript before they go out (Feed), or, once the stream goes on with a continuation,
// are rewritten into the client's stream (Rewrite). An error event is held back, and the pipe
// stops there (resumption.stopped). An event too large to hold back cannot be read whole: the
// stream then goes on as any other, without resume, or, spliced, stops.
func (p *pipe) forwardResumable(w net.Conn, pre, data []byte, whole int) error {
	r := p.res
	var held []byte
	if p.hold != nil {
		held = *p.hold
	}
	rest := data[whole:]
	if len(rest) > holdLimit || whole == 0 && len(held)+len(data) > holdLimit {
		if !r.spliced {
			p.res = nil
			return p.forward(w, pre, data, whole)
		}
		r.broken = true
		p.release()
		return nil
	}
	events := data[:whole]
	if len(held) > 0 && whole > 0 {
		r.scratch = append(append(r.scratch[:0], held...), events...)
		events, held = r.scratch, held[:0]
	}
	var err error
	switch {
	case whole == 0:
		if pre != nil {
			err = p.send(w, pre, false)
		}
	case !r.spliced:
		n, errEvent := r.tr.Feed(events)
		err = p.send(w, pre, false, events[:n])
		r.hold(errEvent)
	default:
		var n int
		var errEvent []byte
		r.out, n, errEvent = r.tr.Rewrite(r.out[:0], events)
		err = p.send(w, pre, false, r.out)
		r.hold(errEvent)
		r.broken = r.broken || errEvent == nil && n < len(events)
	}
	if r.stopped() {
		p.release()
		return err
	}
	p.keep(held, rest)
	return err
}

// resumeStep is what tryResume did.
type resumeStep uint8

const (
	resumeSkipped   resumeStep = iota // nothing: the stream ends as it would without resume
	resumeContinues                   // the continuation committed: the pipe goes on with it
	resumeEnded                       // the resume failed: the client got the original error, the stream is over
)

// tryResume continues the stream on another target when the upstream body's end with err is
// an interruption, and classify.Resume allows it. The interrupted attempt ends here, and one
// attempt is made on the candidate (resumeCandidate) with the continuation body in the form it
// takes (resumeForm), through the gate like any attempt; in the auto form, a prefill the
// target refuses is asked again at once by instruction, when instructAgain allows it. When
// the attempt commits with text, its events are spliced into the client's stream after an SSE
// comment naming it. When it does not, nothing of it reaches the client, which gets the
// original interruption's error event (the shutdown's, when the shutdown timeout cut the
// attempt); clientLeft reports a failed write then.
func (p *pipe) tryResume(w net.Conn, err error) (step resumeStep, clientLeft bool) {
	r, ex := p.res, p.ex
	s := ex.srv
	msg := p.interruption(err)
	if msg == "" {
		return resumeSkipped, false
	}
	p.interrupted = true
	p.endAttempt(false)
	now := ex.policyNow()
	in := classify.Interruption{Enabled: s.cfg.Budget.Enabled, Resumable: !r.broken && r.tr.Resumable(), ClientGone: ex.clientGone(), Cut: s.closing.Load(),
		ResumesLeft: r.resumes < s.cfg.Resume.Max, ElapsedOK: ex.budget.ElapsedAllows(now, 0), RetryBudgetOK: true}
	if in.Enabled && in.Resumable && in.ResumesLeft && !in.ClientGone && !in.Cut {
		in.Candidate = ex.resumeCandidate(p.a.t, now, false) != nil
	}
	why := classify.Resume(in)
	if why == classify.ResumeOK && !s.retries.Withdraw(now) {
		in.RetryBudgetOK = false
		why = classify.Resume(in)
	}
	var next *Target
	if why == classify.ResumeOK {
		// Taken only now that the budgets let the resume happen: a probe handed out is
		// always attempted. Another request may have taken the last usable one meanwhile.
		if next = ex.resumeCandidate(p.a.t, now, true); next == nil {
			why = classify.ResumeNoCandidate
			s.retries.Refund(now) // no resume: the retry budget keeps its token
		}
	}
	if why != classify.ResumeOK {
		ex.notResumed(p.a, why)
		return resumeSkipped, false
	}

	from := p.a.t // p.a is ex.cur, which the resume attempt reuses
	if rec := ex.Ledger.Last(); rec != nil {
		rec.Phase = observe.PhaseResumed
	}
	delivered := len(r.tr.Text())
	r.resumes++
	p.release() // the start of an event the upstream was cut inside never goes out
	a := p.a    // the cut attempt: its slot takes the resume's
	a.up.reusable = false
	a.closeConn()
	rt := resumeTry{r: r, form: ex.resumeForm(next)}
	var v classify.Verdict
	for {
		ex.continuationBody(rt.form)
		a.begin(next, ex.Ledger.Len()+1)
		v, _ = ex.step(a, rt)
		if v.Reason != classify.ReasonPrefillRefused || v.Action != classify.ActionRetry {
			break
		}
		// The target refused the prefill: it is asked again by instruction, as part of the
		// same resume (step allowed it).
		a.closeConn()
		rt.form = config.ResumeInstruct
	}
	if v.Action != classify.ActionCommit {
		// Nothing of the resume attempt reaches the client: it ends as the interruption did.
		if a.cut {
			p.cut = true
			// The shutdown, not the interruption the resume was to mend, ends the stream: the
			// client is told so, as of any stream the shutdown cuts (finishBody).
			msg, r.errEvent = netio.ErrShutdown.Error(), r.errEvent[:0]
		} else if !ex.gone {
			next.metrics.Resume(observe.ResumeFailed)
		}
		a.closeConn()
		if ex.gone {
			return resumeEnded, true
		}
		_, clientLeft = p.sendInterruption(w, msg)
		return resumeEnded, clientLeft
	}

	if rec := ex.Ledger.Last(); rec != nil {
		rec.Phase, rec.Continued, rec.Delivered = observe.PhaseResumed, true, delivered
	}
	// The original interruption is over; the continuation's own, if it came with its first
	// events, is the next one.
	r.errEvent = r.errEvent[:0]
	r.hold(r.contErr)
	r.broken = r.contErr == nil && r.rewrote < r.whole
	r.spliced = true
	p.a, p.cont, p.attemptEnded, p.interrupted = a, true, false, false
	ex.Outcome = observe.OutcomeOKAfterFailover
	ex.event(slog.LevelInfo, "stream_resumed", a, slog.String("from", from.Name),
		slog.Int("delivered_bytes", delivered), slog.String("form", rt.form.String()))
	r.comment = append(append(append(r.comment[:0], ": failover resumed on "...), next.Name...), "\n\n"...)
	if err := p.send(w, nil, false, r.comment, r.out); err != nil {
		return resumeEnded, true
	}
	if !r.stopped() {
		p.keep(nil, a.up.gate.Held()[r.whole:])
	}
	a.body = nil
	a.shed()
	return resumeContinues, false
}

// accept splices a committed continuation's held events into the client's stream when they
// start with text (stream.Transcript: Splice, Rewrite, Continues), in form; the events it
// rewrote wait in r.out. It reports false when the continuation cannot go on the client's
// stream (a tool call or reasoning first): the resume then stops.
func (r *resumption) accept(a *attempt, form config.ResumeMode) bool {
	held := a.up.gate.Held()
	r.whole = a.up.gate.HeldWhole()
	r.tr.Splice(form == config.ResumeInstruct)
	r.out, r.rewrote, r.contErr = r.tr.Rewrite(r.out[:0], held[:r.whole])
	return r.tr.Continues()
}

// notResumed reports an interruption that was not resumed: the budgets' refusals as for a
// transfer (docs/operations.md, Named log events), and every refusal but a cancellation as
// stream_not_resumed.
func (ex *exchange) notResumed(a *attempt, why classify.ResumeReason) {
	now := ex.policyNow()
	switch why {
	case classify.ResumeCancelled:
		return
	case classify.ResumeElapsedLimit:
		ex.reportLimit(a, classify.ReasonElapsedLimit, now)
	case classify.ResumeRetryBudget:
		ex.reportLimit(a, classify.ReasonRetryBudget, now)
	}
	ex.event(slog.LevelInfo, "stream_not_resumed", a, slog.String("reason", why.String()))
}
