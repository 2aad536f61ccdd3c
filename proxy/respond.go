package proxy

import (
	"github.com/valyala/fasthttp"

	"github.com/llm-failover/failover/stream"
	"github.com/llm-failover/failover/stream/jsonscan"
)

// Errors the sidecar writes itself (docs/decisions.md, Errors the sidecar makes) are shaped like the
// family's own errors, so an SDK raises its usual exception with a useful message.
//
//	chat, responses, other: {"error":{"message":"...","type":"failover_error","code":"..."}}
//	messages (Anthropic):   {"type":"error","error":{"type":"api_error","message":"...","code":"..."}}

// Sidecar error codes.
const (
	codeNoTarget         = "no_target"
	codeUnreachable      = "upstream_unreachable"
	codeTimeout          = "upstream_timeout"
	codeTooLarge         = "request_too_large"
	codeUnauthorized     = "unauthorized"
	codeOverloaded       = "overloaded"
	codeEmptyResponse    = "empty_response"
	codeNoChoices        = "no_choices"
	codeBadResponse      = "bad_response"
	codeStreamError      = "upstream_stream_error"
	codeInterrupted      = "stream_interrupted"
	codeNotFound         = "not_found"
	codeHeadersTooLarge  = "headers_too_large"
	codeShuttingDown     = "shutting_down"
	codeBadRequest       = "bad_request"
	codeMethodNotAllowed = "method_not_allowed"
)

// appendErrorBody appends a family-shaped error document. The Anthropic shape carries the
// sidecar's code too, beside type and message, so that Messages clients can tell no_target
// from upstream_timeout; SDKs read type and message and ignore the rest.
func appendErrorBody(dst []byte, f stream.Family, code, message string) []byte {
	if f == stream.Messages {
		dst = append(dst, `{"type":"error","error":{"type":"api_error","message":`...)
		dst = jsonscan.AppendQuote(dst, message)
		dst = append(dst, `,"code":"`...)
		dst = append(dst, code...)
		return append(dst, `"}}`...)
	}
	dst = append(dst, `{"error":{"message":`...)
	dst = jsonscan.AppendQuote(dst, message)
	dst = append(dst, `,"type":"failover_error","code":"`...)
	dst = append(dst, code...)
	return append(dst, `"}}`...)
}

// appendInterruptedEvent appends the one final event a committed stream gets when it cannot
// end cleanly, in the family's shape. It follows whole events (the start of an event the
// upstream was cut inside is not sent), except after the start of an event too large to hold
// back (docs/streams.md, Streams): the blank line it opens with makes it a new event even then.
func appendInterruptedEvent(dst []byte, f stream.Family, message string) []byte {
	dst = append(dst, "\n\n"...)
	switch f {
	case stream.Responses:
		dst = append(dst, "event: error\ndata: "...)
		dst = append(dst, `{"type":"error","code":"`+codeInterrupted+`","message":`...)
		dst = jsonscan.AppendQuote(dst, message)
		dst = append(dst, `,"param":null}`...)
	case stream.Messages:
		dst = append(dst, "event: error\ndata: "...)
		dst = appendErrorBody(dst, f, codeInterrupted, message)
	default:
		dst = append(dst, "data: "...)
		dst = appendErrorBody(dst, f, codeInterrupted, message)
	}
	return append(dst, "\n\n"...)
}

var (
	contentTypeJSON = []byte("application/json")
)

// writeError answers the client with a sidecar error in the family's shape. Error paths are
// not hot: the body is built in a fresh buffer the response then owns.
func writeError(ctx *fasthttp.RequestCtx, f stream.Family, status int, code, message string) {
	ctx.SetStatusCode(status)
	ctx.Response.Header.SetContentTypeBytes(contentTypeJSON)
	ctx.Response.SetBodyRaw(appendErrorBody(make([]byte, 0, 128+len(message)), f, code, message))
}
