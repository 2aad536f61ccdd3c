package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/proxy/internal/netio"
	"github.com/llm-failover/failover/proxy/internal/observe"
	"github.com/llm-failover/failover/stream"
	"github.com/llm-failover/failover/stream/jsonscan"
)

// reject answers with a sidecar error of its own: before any attempt, or after some when the
// shutdown timeout ends the sweep. X-Failover-Attempts says how many were made (0 before any).
func (ex *exchange) reject(status int, code, message string) {
	ex.Outcome, ex.Status = observe.OutcomeRejected, status
	writeError(ex.ctx, ex.Family, status, code, message)
	ex.setFailoverHeaders(nil)
}

// commit sends attempt a's answer to the client: the held response, or its headers and then a
// body piped from the upstream (an SSE stream, an image, a response past the buffer).
func (ex *exchange) commit(a *attempt, outcome observe.Outcome) {
	ctx := ex.ctx
	ex.Outcome, ex.Status = outcome, a.status
	ex.served(a.t)
	ex.copyResponseHeaders(a)
	ctx.SetStatusCode(a.status)
	ex.setFailoverHeaders(a.t)
	up := &a.up
	if a.sse && a.ended && up.gate.Finished() && !up.gate.Failed() {
		// The whole stream, terminal event included, arrived before commit: it goes out in one
		// write, like a held response, and the upstream connection goes back to the pool.
		ex.srv.metrics.StreamCommit(a.commitReason)
		// The held bytes become the answer's body, and another buffer the gate's next held
		// bytes: no copy, as for a held response (lendBody below). a.body, a view of them, is
		// the answer's now, and read no more.
		up.gate.ReplaceHeld(ex.lendBody(up.gate.Held()))
		up.reusable = up.answer.Reusable() && !up.resp.ConnectionClose()
		a.closeConn()
		return
	}
	if a.sse || a.pipeRest && up.answer.Has() {
		ex.startStream(a)
		return
	}
	up.held = ex.lendBody(a.body)[:0]
	a.closeConn()
}

// lendBody makes b, a buffer of the exchange's, the answer's body without a copy, and returns
// a buffer to take its place (netio.ClientConn.LendBody). Without a ClientConn (a handler
// called directly, as the in-process benchmarks do), fasthttp's SwapBody does it.
func (ex *exchange) lendBody(b []byte) []byte {
	if cc, ok := ex.ctx.Conn().(*netio.ClientConn); ok {
		return cc.LendBody(&ex.ctx.Response, b)
	}
	return ex.ctx.Response.SwapBody(b)
}

// answer sends the final answer after a stop, an exhausted sweep or a spent budget: the last
// attempt's upstream answer when there was one, else a family-shaped error of the sidecar's
// own (docs/decisions.md, The decision order, and Errors the sidecar makes).
func (ex *exchange) answer(a *attempt, v classify.Verdict, outcome observe.Outcome) {
	ctx := ex.ctx
	ex.Outcome, ex.Status = outcome, v.Status
	if outcome == observe.OutcomeCancelled || ex.gone {
		// Nobody is listening: close the connection instead of writing an answer.
		ex.Outcome, ex.Status = observe.OutcomeCancelled, 499
		ctx.SetConnectionClose()
		ctx.SetStatusCode(499)
		a.closeConn()
		return
	}
	switch a.kind {
	case classify.KindStreamCommit:
		// A success rule matched every candidate: the last stream is still the best answer,
		// and from here it is a committed stream like any other.
		if r := ex.Ledger.Last(); r != nil {
			r.Phase = observe.PhaseCommitted
		}
		ex.commit(a, outcome)
		return
	case classify.KindResponse:
		switch v.Class {
		case classify.ClassEmptyResponse:
			writeError(ctx, ex.Family, v.Status, codeEmptyResponse, "provider returned empty response")
		case classify.ClassNoChoices:
			writeError(ctx, ex.Family, v.Status, codeNoChoices, "provider returned no choices")
		case classify.ClassBadResponse:
			// An unasked-for 101 (or another final 1xx) is never the client's answer.
			writeError(ctx, ex.Family, v.Status, codeBadResponse, "provider answered with a status that is no final HTTP answer (1xx, or past 599)")
		default:
			status := a.status
			if v.Class == classify.ClassErrorBody {
				status = v.Status // a 200 that carried an error goes back with the error's status
			}
			a.status = status
			ex.commit(a, outcome)
			ex.Status = status
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
			if ex.Family == stream.Messages {
				ctx.Response.AppendBodyString(`{"type":"error","error":`)
			} else {
				ctx.Response.AppendBodyString(`{"error":`)
			}
			ctx.Response.AppendBody(bytes.TrimSpace(a.body))
			ctx.Response.AppendBodyString("}")
		default:
			writeError(ctx, ex.Family, v.Status, codeStreamError, "the provider's stream failed before any output")
		}
	case classify.KindStreamEmpty:
		ex.served(a.t)
		writeError(ctx, ex.Family, v.Status, codeEmptyResponse, "provider returned an empty stream")
	default: // no HTTP answer
		code, msg := codeUnreachable, "no target could be reached ("+v.Class.String()+")"
		switch {
		case ex.srv.abort.Load():
			code, msg = codeShuttingDown, "the sidecar is shutting down"
			v.Status = fasthttp.StatusServiceUnavailable
		case v.Status == fasthttp.StatusGatewayTimeout:
			code, msg = codeTimeout, "the upstream did not answer in time"
		}
		ex.Status = v.Status
		writeError(ctx, ex.Family, v.Status, code, msg)
	}
	ex.setFailoverHeaders(ex.servedBy)
	a.closeConn()
}

// served records that target t answered: its answer, or the sidecar's error about it, goes
// back. When t substituted the model, that is the model the answer was produced for
// (X-Failover-Model, served_model), whether the answer is a success or not.
func (ex *exchange) served(t *Target) {
	ex.servedBy, ex.Target = t, t.Name
	if t.model != nil && ex.fields.modelStart >= 0 {
		ex.ServedModel = t.model
	}
}

// scanErrorShape reports whether an in-stream error payload is already an error document an
// SDK understands: a top-level "error" (OpenAI) or "type":"error" (Anthropic, Responses); or,
// bare, a JSON object that is the error itself (a "message" string at its top level). The
// members are read up to the first that shows a shape; a payload that breaks JSON's rules
// before one does has none (a malformed document is not passed on as the provider's).
func scanErrorShape(b []byte) (shaped, bare bool) {
	message := false
	var c jsonscan.Cursor
	for ok := c.OpenObject(b, 0); ok && c.Next(); {
		key, val := c.Key(), c.Value()
		if val == nil {
			return false, false
		}
		if string(key) == "error" && string(val) != "null" || string(key) == "type" && string(val) == `"error"` {
			return true, false
		}
		message = message || string(key) == "message" && val[0] == '"'
	}
	return false, message && c.End() >= 0 && jsonscan.SkipSpace(b, c.End()) == len(b)
}
