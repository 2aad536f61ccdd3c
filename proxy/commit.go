package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/stream"
)

// errShutdown ends a wait when the shutdown timeout has passed.
var errShutdown = errors.New("the sidecar is shutting down")

// commit sends attempt a's answer to the client: the held response, or its headers and then a
// body piped from the upstream (an SSE stream, an image, a response past the buffer).
func (ex *exchange) commit(a *attempt, outcome Outcome) {
	ctx := ex.ctx
	ex.outcome, ex.status = outcome, a.status
	ex.served(a.t)
	ex.copyResponseHeaders()
	ctx.SetStatusCode(a.status)
	ex.setFailoverHeaders(a.t)
	if a.sse && a.ended && ex.gate.Finished() && !ex.gate.Failed() {
		// The whole stream, terminal event included, arrived before commit: it goes out in one
		// write, like a held response, and the upstream connection goes back to the pool.
		ex.srv.metrics.streamCommits[a.commitReason].Inc()
		ctx.Response.SetBody(ex.gate.Held())
		ex.reusable = ex.body.reusable() && !ex.upResp.ConnectionClose()
		ex.closeConn()
		return
	}
	if a.sse || a.pipeRest && ex.body.has() {
		ex.startStream(a)
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
		// A success rule matched every candidate: the last stream is still the best answer,
		// and from here it is a committed stream like any other.
		if r := ex.ledger.last(); r != nil {
			r.phase = PhaseCommitted
		}
		ex.commit(a, outcome)
		return
	case classify.KindResponse:
		switch v.Class {
		case classify.ClassEmptyResponse:
			writeError(ctx, ex.family, v.Status, codeEmptyResponse, "provider returned empty response")
		case classify.ClassNoChoices:
			writeError(ctx, ex.family, v.Status, codeNoChoices, "provider returned no choices")
		case classify.ClassBadResponse:
			// An unasked-for 101 (or another final 1xx) is never the client's answer.
			writeError(ctx, ex.family, v.Status, codeBadResponse, "provider returned an informational status as its answer")
		default:
			status := a.status
			if v.Class == classify.ClassErrorBody {
				status = v.Status // a 200 that carried an error goes back with the error's status
			}
			a.status = status
			ex.commit(a, outcome)
			ex.status = status
			return
		}
		ex.served(a.t)
	case classify.KindStreamError:
		ex.served(a.t)
		switch shaped, bare := scanErrorShape(a.body); {
		case shaped:
			ctx.SetStatusCode(v.Status)
			ctx.Response.Header.SetContentTypeBytes(contentTypeJSON)
			ctx.Response.SetBody(a.body)
		case bare:
			// An error object without its wrapper (llama.cpp's error: field carries
			// {"code":400,"message":...,"type":...}): wrapped in the family's shape, so the
			// client sees the provider's message, not only that the stream failed.
			ctx.SetStatusCode(v.Status)
			ctx.Response.Header.SetContentTypeBytes(contentTypeJSON)
			ctx.Response.ResetBody()
			if ex.family == stream.Messages {
				ctx.Response.AppendBodyString(`{"type":"error","error":`)
			} else {
				ctx.Response.AppendBodyString(`{"error":`)
			}
			ctx.Response.AppendBody(bytes.TrimSpace(a.body))
			ctx.Response.AppendBodyString("}")
		default:
			writeError(ctx, ex.family, v.Status, codeStreamError, "the provider's stream failed before any output")
		}
	case classify.KindStreamEmpty:
		ex.served(a.t)
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

// served records that target t answered: its answer, or the sidecar's error about it, goes
// back. When t substituted the model, that is the model the answer was produced for
// (X-Failover-Model, served_model), whether the answer is a success or not.
func (ex *exchange) served(t *Target) {
	ex.servedBy = t
	if t.model != nil && ex.fields.modelStart >= 0 {
		ex.servedModel = t.model
	}
}

// scanErrorShape reports whether an in-stream error payload is already an error document an
// SDK understands: a top-level "error" (OpenAI) or "type":"error" (Anthropic, Responses); or,
// bare, a JSON object that is the error itself (a "message" string at its top level).
func scanErrorShape(b []byte) (shaped, bare bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false, false
	}
	message := false
	i = skipWS(b, i+1)
	for i < len(b) && b[i] == '"' {
		keyEnd := skipString(b, i)
		if keyEnd < 0 {
			return false, false
		}
		key := b[i+1 : keyEnd-1]
		i = skipWS(b, keyEnd)
		if i >= len(b) || b[i] != ':' {
			return false, false
		}
		i = skipWS(b, i+1)
		valStart := i
		if i = skipValue(b, i); i < 0 {
			return false, false
		}
		val := b[valStart:i]
		if string(key) == "error" && string(val) != "null" || string(key) == "type" && string(val) == `"error"` {
			return true, false
		}
		message = message || string(key) == "message" && val[0] == '"'
		if i = skipWS(b, i); i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
		}
	}
	return false, message && scanRequest(b).json
}

// copyResponseHeaders copies the upstream's response headers to the client, minus hop-by-hop
// headers (and those its Connection lines name) and the upstream's X-Failover-*.
func (ex *exchange) copyResponseHeaders() {
	up := &ex.upResp.Header
	h := &ex.ctx.Response.Header
	up.CopyTo(h)
	// CopyTo also copies the upstream header's own "no default Content-Type" flag, which is
	// off: an answer without a Content-Type would reach the client as text/plain.
	h.SetNoDefaultContentType(true)
	dropHopByHop(h, up.PeekAll(stringConnection))
	h.ResetConnectionClose()
	// X-Request-Id becomes the sidecar's (setFailoverHeaders); the provider's own id (OpenAI's
	// req_..., the one its support asks for) goes back under a name of its own.
	if id := up.PeekBytes(headerRequestID); len(id) > 0 && !bytes.Equal(id, ex.requestID) {
		h.SetCanonical(headerUpstreamID, id)
	}
}

// setFailoverHeaders adds X-Failover-* and X-Request-Id to the answer.
func (ex *exchange) setFailoverHeaders(served *Target) {
	h := &ex.ctx.Response.Header
	// SetCanonical: the names are written in canonical form, so fasthttp need not normalise them.
	if served != nil {
		h.SetCanonical(headerTarget, served.name)
	}
	var num [20]byte
	h.SetCanonical(headerAttempts, strconv.AppendInt(num[:0], int64(ex.ledger.n), 10))
	if ex.servedModel != nil {
		h.SetCanonical(headerModel, ex.servedModel)
	}
	h.SetCanonical(headerRequestID, ex.requestID)
}

// pipe is a committed body that is still arriving: an SSE stream, an image, a response past
// FAILOVER_MAX_RESPONSE_BYTES. The held bytes go first, byte for byte, then the rest of the
// upstream body as it arrives, one chunk per read, and an interruption the client must see.
//
// It is written outside fasthttp's response writer: the handler hijacks the client connection
// (keeping it), and the stream runs in a goroutine of its own that writes the chunked body
// itself. While it waits for the upstream it holds no read or write buffer, no request context
// and only a small stack; with fasthttp's SetBodyStream an idle stream kept its worker
// goroutine's grown stack, a copy buffer, a write buffer and the request context for its whole
// life. A clean end hands the connection back to the server for the client's next request.
// Part of the exchange; owned by the stream goroutine once the handler returns.
type pipe struct {
	ex        *exchange
	a         *attempt
	held      []byte
	sse       bool
	chunked   bool // HTTP/1.1 client: chunked framing; else the body ends when the connection closes
	keepAlive bool // the connection serves the client's next request after a clean end
	head      []byte
	tail      []byte // the final error event, once the stream is interrupted

	// An SSE stream goes out in whole events (README, Streams): the start of an event whose
	// blank line has not arrived is held in a buffer lent from holdBuffers while it holds
	// bytes, and goes out with the event's end. An event that outgrows holdLimit goes out as
	// it comes (passing) until it ends.
	hold    *[]byte
	passing bool

	interrupted bool
	cut         bool // the sidecar interrupted it (the shutdown timeout): no failure of the target's
}

// startStream sends attempt a's answer as a stream: headers now, the body from the stream
// goroutine once the handler returns.
func (ex *exchange) startStream(a *attempt) {
	ctx := ex.ctx
	p := &ex.pipe
	*p = pipe{ex: ex, a: a, sse: a.sse, head: p.head[:0], tail: p.tail[:0]}
	if a.sse {
		p.held = ex.gate.Held()
		ex.srv.metrics.streamCommits[a.commitReason].Inc()
	} else {
		p.held = a.body
		if a.commitReason == stream.ReasonHeaders { // an image, a compressed stream
			ex.srv.metrics.streamCommits[stream.ReasonHeaders].Inc()
		}
	}
	// Chunked even when the upstream sent a Content-Length: a failure after commit must reach
	// the client as a broken body, not as a complete one that happens to be short.
	h := &ctx.Response.Header
	p.chunked = ctx.Request.Header.IsHTTP11()
	p.keepAlive = p.chunked && !ctx.Request.Header.ConnectionClose()
	if p.chunked {
		h.SetContentLength(-1)
	} else {
		h.SetContentLength(-2)
	}
	if !p.keepAlive {
		h.SetConnectionClose()
	}
	p.head = h.AppendBytes(p.head[:0])
	if ex.clientFD == -2 {
		ex.clientFD = socketOf(ctx.Conn())
	}
	ex.reqBody, ex.upBody = nil, nil // released with the request context; no attempt follows a commit
	ex.committedStream = true
	// Whatever verdict let it out (a commit, or a stop or an exhausted sweep whose answer is
	// larger than the response buffer), a piped answer is committed: its bytes reach the client
	// before the upstream is done, and a failure from here on ends it as interrupted.
	if r := ex.ledger.last(); r != nil {
		r.phase = PhaseCommitted
	}
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(ex.hijackFn)
}

// hijacked runs in the goroutine fasthttp starts for a hijacked connection: it hands the
// stream to a goroutine of its own and returns, so fasthttp releases the request context (and
// the client's request body) now rather than when the stream ends.
func (ex *exchange) hijacked(c net.Conn) {
	ex.ctx = nil
	go ex.serveStream(c)
}

// serveStream writes the committed stream to the client connection c, ends the request, and
// then serves the connection's next requests (or closes it).
func (ex *exchange) serveStream(c net.Conn) {
	s, p := ex.srv, &ex.pipe
	w := c
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		w = u.UnsafeConn() // fasthttp's wrapper reads through its buffer; writes go to the socket
	}
	clean, clientLeft := p.run(w)
	keepAlive := clean && !clientLeft && p.keepAlive
	p.end(clientLeft) // the exchange goes back to the pool here
	if keepAlive && !s.closing.Load() {
		w.SetWriteDeadline(time.Time{}) //nolint:errcheck // fasthttp sets none of its own: the stream's must not stay
		serve := c
		if cc, ok := w.(*clientConn); ok {
			// The client connection itself is served, not fasthttp's wrapper of it: the next
			// stream's hijack would wrap that wrapper, one level deeper per stream for as long
			// as the client keeps the connection, and the handler's ctx.Conn() would hide the
			// socket that tells when the client leaves (socketOf).
			if !cc.reclaim(c) {
				c.Close()
				return
			}
			serve = cc
			// Listed before closing is looked at again: a shutdown that began meanwhile either
			// is seen here or finds the connection in the list (Server.closeIdleHandedBack).
			s.handedBack.Store(cc, nil)
			defer s.handedBack.Delete(cc)
		}
		if !s.closing.Load() {
			s.proxy.ServeConn(serve) //nolint:errcheck // the connection's own end: nothing to report
			return
		}
	}
	c.Close()
}

// shed lets go of the exchange's buffers that a past request grew beyond shedAbove and that
// a committed stream, its held bytes sent, no longer needs: the stream keeps its exchange for
// its whole life, and an idle stream should hold what it uses, not the largest response or
// prompt its exchange once carried.
func (ex *exchange) shed() {
	if cap(ex.respBody) > shedAbove {
		ex.respBody = nil
	}
	if cap(ex.subBody) > shedAbove {
		ex.subBody = nil
	}
	if cap(ex.upHead) > shedAbove {
		ex.upHead = nil
	}
	ex.gate.Shed(shedAbove)
}

// shedAbove is the capacity past which shed drops a buffer.
const shedAbove = 4 << 10

// streamWriteSize bounds one write of a committed stream (the held bytes can be larger).
const streamWriteSize = 16 << 10

// streamBuffers lend the buffer a stream's writes are framed in, for one write at a time.
var streamBuffers = sync.Pool{New: func() any { b := make([]byte, 0, streamWriteSize+256); return &b }}

// holdLimit bounds the start of an event a committed SSE stream holds back until the event's
// end arrives (README, Streams). The largest events providers send are the Responses API's
// last ones (response.output_text.done, response.completed), which repeat the whole answer
// and echo the request's instructions: 64 KiB covers answers of several thousand tokens,
// and is half of what the default peek holds per stream before commit. A larger event goes
// out as it comes, as every event did before.
const holdLimit = 64 << 10

// holdBuffers lend the buffer that holds the start of an event, only while it holds one: a
// stream waiting between events holds none.
var holdBuffers = sync.Pool{New: func() any { b := make([]byte, 0, upstreamBufferSize); return &b }}

// run writes the stream and reports how it ended: clean (the upstream body ended properly,
// the stream complete: README, Streams), or the client left (a write failed, or the client's
// connection closed while the upstream was silent). Anything else was an interruption, which
// the client has been shown.
func (p *pipe) run(w net.Conn) (clean, clientLeft bool) {
	ex := p.ex
	c, body := ex.conn, &ex.body
	defer p.release()
	whole := len(p.held)
	if p.sse {
		whole = ex.gate.HeldWhole()
	}
	if err := p.forward(w, p.head, p.held, whole); err != nil {
		return false, true
	}
	p.held, p.a.body = nil, nil
	ex.shed()
	if c == nil {
		return p.finishBody(w, io.EOF)
	}
	idle := ex.srv.cfg.Server.IdleTimeout
	// A non-streaming request's answer (past the response buffer, or an image) is still one
	// attempt, which FAILOVER_ATTEMPT_TIMEOUT bounds whole, whatever the idle timeout says.
	var end time.Time
	if !ex.streaming {
		end = deadlineAfter(p.a.start, ex.srv.cfg.Server.AttemptTimeout)
	}
	for {
		if ex.srv.abort.Load() {
			p.cut = true
			return p.interrupt(w, "the sidecar is shutting down")
		}
		if !body.done && body.err == nil {
			deadline := deadlineAfter(time.Now(), idle)
			if !end.IsZero() && (deadline.IsZero() || end.Before(deadline)) {
				deadline = end
			}
			if err := ex.waitIdle(c, deadline); err != nil {
				return p.finishBody(w, err)
			}
		}
		data, err := body.next()
		if len(data) == 0 {
			return p.finishBody(w, c.cause(err))
		}
		whole := len(data)
		if p.sse {
			whole = ex.gate.Observe(data)
		}
		err = p.forward(w, nil, data, whole)
		body.consume(len(data))
		if err != nil {
			return false, true
		}
	}
}

// finishBody ends the stream after the upstream body ended with err: io.EOF once the stream is
// complete (Gate.Finished: its terminal event or, for chat and other, the finish_reason or
// ".done" event before the end) ends it cleanly; anything else is an interruption the client
// must see. A body that ended inside an event did not complete the stream: the event's start,
// held back, never goes out (while an event's start is held the gate is inside a record, and
// a gate inside a record is not Finished for any family the sidecar reads as SSE).
func (p *pipe) finishBody(w net.Conn, err error) (clean, clientLeft bool) {
	switch {
	case err == errClientGone:
		return false, true
	case err == errDeadline:
		return p.interrupt(w, "the upstream stalled longer than FAILOVER_IDLE_TIMEOUT")
	case err == errShutdown:
		p.cut = true
		return p.interrupt(w, "the sidecar is shutting down")
	case err != io.EOF:
		return p.interrupt(w, "the upstream connection failed after output began")
	case p.sse && p.ex.gate.Failed():
		// The upstream's own error event reached the client, which needs no second one; the
		// body is still left unterminated, even after a proper final event, so that a client
		// reading only the transport sees the failure too.
		p.interrupted = true
		return false, false
	case p.sse && !p.ex.gate.Finished():
		return p.interrupt(w, "the upstream ended the stream without its final event")
	}
	if err := p.send(w, nil, true); err != nil {
		return false, true
	}
	return true, false
}

// interrupt writes the family's final error event (SSE) and leaves the body unterminated: the
// connection is closed without the last chunk, so the client sees an error, never a clean end.
// The start of an event held back is dropped: the error event follows whole events (unless
// an event too large to hold was going out). When the upstream's own error event already
// reached the client, that one is the final event, however the upstream then failed (a
// reset, a stall): no second one is added.
func (p *pipe) interrupt(w net.Conn, msg string) (clean, clientLeft bool) {
	p.interrupted = true
	if p.sse && !p.ex.gate.Failed() {
		p.tail = appendInterruptedEvent(p.tail[:0], p.ex.family, msg)
		if err := p.send(w, nil, false, p.tail); err != nil {
			return false, true
		}
	}
	return false, false
}

// forward sends a read's bytes data, of which the first whole end between events (all of
// them unless the read ended inside an SSE event: Gate.Observe), after pre. Whole events go
// out now, after the held start of the event they complete; the start of an event whose end
// has not arrived is held until it does, unless the event outgrows holdLimit. A read of whole
// events with nothing held, the common case (providers write whole events), is sent from
// where it was read.
func (p *pipe) forward(w net.Conn, pre, data []byte, whole int) error {
	if p.passing {
		if whole == 0 {
			return p.send(w, pre, false, data) // more of an event too large to hold
		}
		p.passing = false // it ended in data[:whole]
	}
	var held []byte
	if p.hold != nil {
		held = *p.hold
	}
	if whole == len(data) && held == nil {
		return p.send(w, pre, false, data)
	}
	rest := data[whole:]
	if len(rest) > holdLimit || whole == 0 && len(held)+len(data) > holdLimit {
		// The event data ends inside is too large to hold: it goes out as it comes.
		p.passing = true
		err := p.send(w, pre, false, held, data)
		p.release()
		return err
	}
	var err error
	if whole > 0 {
		err = p.send(w, pre, false, held, data[:whole])
		held = held[:0]
	} else if pre != nil {
		err = p.send(w, pre, false) // the headers: the replayed bytes are all an event's start
	}
	if len(held)+len(rest) == 0 {
		p.release()
		return err
	}
	if p.hold == nil {
		p.hold = holdBuffers.Get().(*[]byte)
		held = (*p.hold)[:0]
	}
	*p.hold = append(held, rest...)
	return err
}

// release gives the buffer that held the start of an event back: what it held is dropped.
func (p *pipe) release() {
	if p.hold == nil {
		return
	}
	if cap(*p.hold) <= 2*holdLimit {
		*p.hold = (*p.hold)[:0]
		holdBuffers.Put(p.hold)
	}
	p.hold = nil
}

// send writes pre as it is, then each of data framed as chunks (as it is without chunking),
// then the last chunk when last is set, in one write unless data holds more than
// streamWriteSize bytes.
func (p *pipe) send(w net.Conn, pre []byte, last bool, data ...[]byte) error {
	p.armWrite(w)
	bp := streamBuffers.Get().(*[]byte)
	b := append((*bp)[:0], pre...)
	var err error
	room := streamWriteSize // data bytes the buffer takes before it is written
write:
	for _, d := range data {
		for len(d) > 0 {
			if room == 0 {
				if _, err = w.Write(b); err != nil {
					break write
				}
				b, room = b[:0], streamWriteSize
			}
			n := min(len(d), room)
			if p.chunked {
				b = strconv.AppendInt(b, int64(n), 16)
				b = append(b, "\r\n"...)
			}
			b = append(b, d[:n]...)
			if p.chunked {
				b = append(b, "\r\n"...)
			}
			d, room = d[n:], room-n
		}
	}
	if last && p.chunked {
		b = append(b, "0\r\n\r\n"...)
	}
	if err == nil && len(b) > 0 {
		_, err = w.Write(b)
	}
	if cap(b) <= 4*streamWriteSize {
		*bp = b[:0]
		streamBuffers.Put(bp)
	}
	return err
}

// armWrite gives the client FAILOVER_IDLE_TIMEOUT to take the write that follows. A client
// that stops reading is taken as gone, and its upstream closed, rather than holding the
// stream, the upstream connection and the provider's generation for ever.
func (p *pipe) armWrite(w net.Conn) {
	if idle := p.ex.srv.cfg.Server.IdleTimeout; idle > 0 {
		w.SetWriteDeadline(time.Now().Add(idle)) //nolint:errcheck // a closed connection fails the write that follows
	}
}

// end records how the stream ended: the final outcome goes through the decision function like
// every other, then the request is finished.
func (p *pipe) end(clientLeft bool) {
	ex := p.ex
	s := ex.srv
	clientLeft = clientLeft || ex.gone
	o := classify.Outcome{Kind: classify.KindFinished, Status: ex.status, Committed: true, ClientGone: clientLeft}
	if p.sse && ex.gate.Failed() {
		// The upstream's own error event reached the client: the stream failed after output
		// began, however it ended (finishBody does not terminate such a body).
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
	if v.Health == classify.HealthFailure && !p.cut {
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
	ex.reusable = !clientLeft && ex.body.reusable() && !ex.upResp.ConnectionClose()
	ex.closeConn()
	ex.finish()
}

// waitIdle arms c's reads with deadline and the client and shutdown watchers, and waits for
// the upstream's next bytes unless some are buffered. On a plain TCP connection it holds no
// read buffer while it waits. The reads that follow (a chunk's framing split across packets)
// stay armed.
func (ex *exchange) waitIdle(c *upConn, deadline time.Time) error {
	if c.raw == nil || c.buffered() > 0 {
		return ex.waitData(c, deadline)
	}
	c.rd.arm(deadline, ex.goneFn, ex.stopFn)
	c.releaseReader()
	start := time.Now()
	err := c.rd.waitReadable(c.raw)
	ex.waited += time.Since(start)
	return err
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
	ex.ctx, ex.reqBody, ex.upBody = nil, nil, nil
	ex.pipe = pipe{head: ex.pipe.head[:0], tail: ex.pipe.tail[:0]}
	if cap(ex.respBody) > 1<<20 {
		ex.respBody = nil
	}
	if cap(ex.subBody) > 1<<20 {
		ex.subBody = nil
	}
	m.inflight.Add(-1)
	s.active.Add(-1)
	s.pool.Put(ex)
}
