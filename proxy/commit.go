package proxy

import (
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/stream"
)

// errInterrupted ends a committed body that could not end cleanly: returning it from the
// body reader makes fasthttp abort the chunked response instead of writing its last chunk,
// so the client sees an error, never a clean end.
var errInterrupted = errors.New("stream interrupted after commit")

// errShutdown ends a wait when the shutdown timeout has passed.
var errShutdown = errors.New("the sidecar is shutting down")

// commit sends attempt a's answer to the client: the held response, or its headers and then a
// body piped from the upstream (an SSE stream, an image, a response past the buffer).
func (ex *exchange) commit(a *attempt, outcome Outcome) {
	ctx := ex.ctx
	ex.outcome, ex.status, ex.servedBy = outcome, a.status, a.t
	if a.t.model != nil && ex.fields.modelStart >= 0 {
		ex.servedModel = a.t.model
	}
	ex.copyResponseHeaders()
	ctx.SetStatusCode(a.status)
	ex.setFailoverHeaders(a.t)
	body := ex.upResp.BodyStream()
	if a.sse && a.bodyErr == io.EOF && ex.gate.Finished() && !ex.gate.Failed() {
		// The whole stream, terminal event included, arrived before commit: it goes out in one
		// write, like a held response, and the upstream connection goes back to the pool.
		ex.srv.metrics.streamCommits[a.commitReason].Inc()
		ctx.Response.SetBody(ex.gate.Held())
		ex.reusable = !ex.upResp.ConnectionClose() && ex.upResp.Header.ContentLength() != -2
		ex.closeConn()
		return
	}
	if (a.sse || a.pipeRest) && (body != nil || a.sse) {
		ex.startPipe(a, body)
		return
	}
	ex.respBody = ctx.Response.SwapBody(a.body)[:0]
	ex.closeConn()
}

// answer sends the final answer after a stop, an exhausted sweep or a spent budget: the last
// attempt's upstream answer when there was one, else a family-shaped error of the sidecar's
// own (SPEC sections 5 and 7).
func (ex *exchange) answer(a *attempt, v classify.Verdict, outcome Outcome) {
	ctx := ex.ctx
	ex.outcome, ex.status = outcome, v.Status
	if outcome == OutcomeCancelled || ex.gone {
		// Nobody is listening: close the connection instead of writing an answer.
		ex.outcome, ex.status = OutcomeCancelled, 499
		ctx.SetConnectionClose()
		ctx.SetStatusCode(499)
		ex.closeConn()
		return
	}
	switch a.kind {
	case classify.KindStreamCommit:
		// A success rule matched every candidate: the last stream is still the best answer.
		ex.commit(a, outcome)
		return
	case classify.KindResponse:
		switch v.Class {
		case classify.ClassEmptyResponse:
			writeError(ctx, ex.family, v.Status, codeEmptyResponse, "provider returned empty response")
		case classify.ClassNoChoices:
			writeError(ctx, ex.family, v.Status, codeNoChoices, "provider returned no choices")
		default:
			status := a.status
			if v.Class == classify.ClassErrorBody {
				status = v.Status // a 200 that carried an error goes back with the error's status
			}
			a.status = status
			ex.commit(a, outcome)
			ex.status = status
			ex.servedBy = a.t
			return
		}
		ex.servedBy = a.t
	case classify.KindStreamError:
		ex.servedBy = a.t
		if scanErrorShape(a.body) {
			ctx.SetStatusCode(v.Status)
			ctx.Response.Header.SetContentTypeBytes(contentTypeJSON)
			ctx.Response.SetBody(a.body)
		} else {
			writeError(ctx, ex.family, v.Status, codeStreamError, "the provider's stream failed before any output")
		}
	case classify.KindStreamEmpty:
		ex.servedBy = a.t
		writeError(ctx, ex.family, v.Status, codeEmptyResponse, "provider returned an empty stream")
	default: // no HTTP answer
		code, msg := codeUnreachable, "no target could be reached ("+v.Class.String()+")"
		switch {
		case ex.srv.abort.Load():
			code, msg = codeShuttingDown, "the sidecar is shutting down"
			v.Status = fasthttp.StatusServiceUnavailable
		case v.Status == fasthttp.StatusGatewayTimeout:
			code, msg = codeTimeout, "the upstream did not answer in time"
		}
		ex.status = v.Status
		writeError(ctx, ex.family, v.Status, code, msg)
	}
	ex.setFailoverHeaders(ex.servedBy)
	ex.closeConn()
}

// scanErrorShape reports whether an in-stream error payload is already an error document an
// SDK understands: a top-level "error" (OpenAI) or "type":"error" (Anthropic, Responses).
func scanErrorShape(b []byte) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipWS(b, i+1)
	for i < len(b) && b[i] == '"' {
		keyEnd := skipString(b, i)
		if keyEnd < 0 {
			return false
		}
		key := b[i+1 : keyEnd-1]
		i = skipWS(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipWS(b, i+1)
		valStart := i
		if i = skipValue(b, i); i < 0 {
			return false
		}
		val := b[valStart:i]
		if string(key) == "error" && string(val) != "null" || string(key) == "type" && string(val) == `"error"` {
			return true
		}
		if i = skipWS(b, i); i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	return false
}

// copyResponseHeaders copies the upstream's response headers to the client, minus hop-by-hop
// headers (and those its Connection header names).
func (ex *exchange) copyResponseHeaders() {
	up := &ex.upResp.Header
	h := &ex.ctx.Response.Header
	up.CopyTo(h)
	dropHopByHop(h, up.PeekBytes(headerConnection))
	h.ResetConnectionClose()
}

// setFailoverHeaders adds X-Failover-* and X-Request-Id to the answer.
func (ex *exchange) setFailoverHeaders(served *Target) {
	h := &ex.ctx.Response.Header
	if served != nil {
		h.SetBytesKV(headerTarget, []byte(served.Name))
	}
	var num [20]byte
	h.SetBytesKV(headerAttempts, strconv.AppendInt(num[:0], int64(ex.ledger.n), 10))
	if ex.servedModel != nil {
		h.SetBytesKV(headerModel, ex.servedModel)
	}
	h.SetBytesKV(headerRequestID, ex.requestID)
}

// pipe is a committed body: the held bytes first, byte for byte, then the rest of the
// upstream body, flushed per read. fasthttp reads it after the handler returns and reports
// how writing ended through CloseWithError (a client that left shows up there as a write
// error). It is part of the exchange and ends it.
type pipe struct {
	ex   *exchange
	a    *attempt
	held []byte
	off  int
	body io.Reader
	sse  bool

	tail    []byte // the final error event, once the stream is interrupted
	tailOff int
	pending error // a read error that came with data, reported by the next Read

	interrupted bool
	clean       bool // the upstream body ended properly
	closed      bool
}

func (ex *exchange) startPipe(a *attempt, body io.Reader) {
	ctx := ex.ctx
	p := &ex.pipe
	*p = pipe{ex: ex, a: a, body: body, sse: a.sse, pending: a.bodyErr, tail: p.tail[:0]}
	size := -1
	if a.sse {
		p.held = ex.gate.Held()
		// The held bytes are written at once with the headers in one flush; only a stream
		// committed with nothing held (at headers) flushes its headers on their own, so the
		// client is not kept waiting for them.
		ctx.Response.ImmediateHeaderFlush = len(p.held) == 0
		ex.srv.metrics.streamCommits[a.commitReason].Inc()
	} else {
		// Chunked too (size stays -1), even when the upstream sent a Content-Length: fasthttp
		// flushes a chunked body per read but buffers a fixed-size one, so a failure would close
		// the connection before the status and the bytes already read went out, and the client
		// would see a bare EOF instead of a committed answer that broke off.
		p.held = a.body
		ctx.Response.ImmediateHeaderFlush = len(p.held) == 0
		if ex.family == stream.Image {
			ex.srv.metrics.streamCommits[stream.ReasonHeaders].Inc()
		}
	}
	// A stream has no write deadline: the idle timeout between upstream reads bounds it.
	ctx.SetWriteDeadline(time.Time{})
	ex.committedStream = true
	ctx.SetBodyStream(p, size)
}

// Read hands fasthttp the next piece of the committed body.
func (p *pipe) Read(b []byte) (int, error) {
	if p.off < len(p.held) {
		n := copy(b, p.held[p.off:])
		p.off += n
		return n, nil
	}
	if len(p.tail) > 0 {
		n := copy(b, p.tail[p.tailOff:])
		p.tailOff += n
		if p.tailOff == len(p.tail) {
			p.tail = p.tail[:0]
		}
		return n, nil
	}
	if p.interrupted {
		return 0, errInterrupted
	}
	if p.clean {
		return 0, io.EOF
	}
	ex := p.ex
	if ex.srv.abort.Load() {
		return p.interrupt("the sidecar is shutting down")
	}
	if err := p.pending; err != nil {
		p.pending = nil
		return p.end(err)
	}
	if p.body == nil {
		return p.end(io.EOF)
	}
	switch err := ex.waitData(ex.conn, deadlineAfter(time.Now(), ex.srv.cfg.Server.IdleTimeout)); err {
	case nil:
	case errClientGone:
		return 0, errClientGone
	case errDeadline:
		return p.interrupt("the upstream stalled longer than FAILOVER_IDLE_TIMEOUT")
	default:
		return p.interrupt("the sidecar is shutting down")
	}
	n, err := p.body.Read(b)
	err = ex.conn.cause(err)
	if n > 0 {
		if p.sse {
			ex.gate.Observe(b[:n])
		}
		p.pending = err
		return n, nil
	}
	return p.end(err)
}

// end handles the upstream body's end: a clean end with the family's terminal event ends the
// client's body; anything else is an interruption the client must see.
func (p *pipe) end(err error) (int, error) {
	switch {
	case err == nil:
		return 0, nil
	case err == errClientGone:
		return 0, errClientGone
	case err == errDeadline:
		return p.interrupt("the upstream stalled longer than FAILOVER_IDLE_TIMEOUT")
	case err == errShutdown:
		return p.interrupt("the sidecar is shutting down")
	case err != io.EOF:
		return p.interrupt("the upstream connection failed after output began")
	case p.sse && !p.ex.gate.Finished():
		return p.interrupt("the upstream ended the stream without its final event")
	}
	p.clean = true
	return 0, io.EOF
}

// interrupt queues the family's final error event (SSE) and then ends the body with an error.
func (p *pipe) interrupt(msg string) (int, error) {
	p.interrupted = true
	if !p.sse {
		return 0, errInterrupted
	}
	p.tail = appendInterruptedEvent(p.tail[:0], p.ex.family, msg)
	p.tailOff = 0
	return 0, nil // fasthttp reads again at once and gets the tail
}

// CloseWithError is called by fasthttp once writing the body ended: err is nil after a clean
// end, errInterrupted after an interruption, or the write error when the client left. The
// final outcome goes through the decision function like every other.
func (p *pipe) CloseWithError(err error) error {
	if p.closed {
		return nil
	}
	p.closed = true
	ex := p.ex
	s := ex.srv
	clientLeft := ex.gone || (err != nil && !errors.Is(err, errInterrupted) && !p.interrupted)
	o := classify.Outcome{Kind: classify.KindFinished, Status: ex.status, Committed: true, ClientGone: clientLeft}
	if p.sse && ex.gate.Failed() {
		// The upstream's own error event reached the client, which needs no second one: the
		// stream still failed after output began.
		p.interrupted = true
	}
	if p.interrupted {
		o.Kind = classify.KindInterrupted
	}
	v := s.policy.Decide(&o)
	switch {
	case clientLeft:
		ex.outcome, ex.status = OutcomeCancelled, v.Status
	case p.interrupted:
		ex.outcome = OutcomePartial
	}
	if v.Health == classify.HealthFailure {
		if ejected, d := p.a.t.health.Failure(s.clock.Now()); ejected {
			ex.ejected(p.a, d, "stream_interrupted")
		}
	}
	if r := ex.ledger.last(); r != nil {
		r.duration = time.Since(p.a.start)
		if v.Class != classify.ClassNone {
			r.class, r.reason = v.Class, v.Reason
		}
	}
	ex.reusable = p.clean && !clientLeft && !ex.upResp.ConnectionClose() && ex.upResp.Header.ContentLength() != -2
	ex.closeConn()
	ex.finish()
	return nil
}

// finish ends the request: metrics, the ledger record, and the exchange goes back to the pool.
func (ex *exchange) finish() {
	s := ex.srv
	ex.closeConn()
	ex.duration = time.Since(ex.start)
	m := s.metrics
	m.requests[ex.family][ex.outcome].Inc()
	m.duration[ex.family].Update(ex.duration.Seconds())
	m.overhead.Update(max(ex.duration-ex.waited, 0).Seconds())
	ex.logRequest()
	ex.ctx, ex.body = nil, nil
	ex.pipe = pipe{tail: ex.pipe.tail[:0]}
	if cap(ex.respBody) > 1<<20 {
		ex.respBody = nil
	}
	if cap(ex.subBody) > 1<<20 {
		ex.subBody = nil
	}
	m.inflight.Add(-1)
	s.active.Done()
	s.pool.Put(ex)
}
