package proxytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Bodies and streams in the shapes providers document, for scripts. No real keys or data.

// ChatCompletion is a non-streaming OpenAI chat completion answering content.
func ChatCompletion(content string) string {
	return `{"id":"chatcmpl-test","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":` + strconv.Quote(content) + `},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}`
}

// OpenAIError is an OpenAI error document.
func OpenAIError(message, typ, code string) string {
	c := "null"
	if code != "" {
		c = strconv.Quote(code)
	}
	return `{"error":{"message":` + strconv.Quote(message) + `,"type":` + strconv.Quote(typ) + `,"param":null,"code":` + c + `}}`
}

// AnthropicError is an Anthropic error document.
func AnthropicError(typ, message string) string {
	return `{"type":"error","error":{"type":` + strconv.Quote(typ) + `,"message":` + strconv.Quote(message) + `}}`
}

// JSON answers status with a JSON body.
func JSON(status int, body string, header ...string) Step {
	return Step{Status: status, Header: append([]string{"Content-Type: application/json"}, header...), Body: body}
}

// SSE answers 200 with an event stream made of chunks.
func SSE(chunks ...Chunk) Step {
	return Step{Status: 200, Header: []string{"Content-Type: text/event-stream", "Cache-Control: no-cache"}, Chunks: chunks}
}

// Events turns event texts into chunks, one per event, gap apart.
func Events(gap time.Duration, events ...string) []Chunk {
	out := make([]Chunk, len(events))
	for i, e := range events {
		out[i] = Chunk{Data: e, Delay: gap}
	}
	if len(out) > 0 {
		out[0].Delay = 0
	}
	return out
}

// ChatRole is the opening chunk of a chat stream: the role and no content.
const ChatRole = `data: {"id":"chatcmpl-test","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"

// ChatDelta is a chat stream chunk carrying content.
func ChatDelta(content string) string {
	return `data: {"id":"chatcmpl-test","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":` + strconv.Quote(content) + `},"finish_reason":null}]}` + "\n\n"
}

// ChatFinish is the last chunk with a finish reason.
const ChatFinish = `data: {"id":"chatcmpl-test","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"

// Done ends an OpenAI stream.
const Done = "data: [DONE]\n\n"

// ChatError is an error chunk in a chat stream.
func ChatError(message, typ, code string) string {
	return "data: " + OpenAIError(message, typ, code) + "\n\n"
}

// ChatStream is a complete chat stream: role, one chunk per word, finish, [DONE].
func ChatStream(gap time.Duration, words ...string) []Chunk {
	events := []string{ChatRole}
	for _, w := range words {
		events = append(events, ChatDelta(w))
	}
	events = append(events, ChatFinish, Done)
	return Events(gap, events...)
}

// AnthropicStream is a complete Messages stream with one text block.
func AnthropicStream(gap time.Duration, words ...string) []Chunk {
	events := []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_test\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-test\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n",
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
		"event: ping\ndata: {\"type\":\"ping\"}\n\n",
	}
	for _, w := range words {
		events = append(events, fmt.Sprintf("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%s}}\n\n", strconv.Quote(w)))
	}
	events = append(events,
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":5}}\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	)
	return Events(gap, events...)
}

// AnthropicStreamError is an Anthropic error event.
func AnthropicStreamError(typ, message string) string {
	return "event: error\ndata: " + AnthropicError(typ, message) + "\n\n"
}

// ResponsesStream is a complete Responses stream with one output text.
func ResponsesStream(gap time.Duration, words ...string) []Chunk {
	events := []string{
		"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_test\",\"object\":\"response\",\"status\":\"in_progress\",\"error\":null,\"output\":[]}}\n\n",
		"event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{\"id\":\"resp_test\",\"object\":\"response\",\"status\":\"in_progress\",\"error\":null,\"output\":[]}}\n\n",
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_test\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}}\n\n",
		"event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"sequence_number\":3,\"item_id\":\"msg_test\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"annotations\":[],\"text\":\"\"}}\n\n",
	}
	for i, w := range words {
		events = append(events, fmt.Sprintf("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"item_id\":\"msg_test\",\"output_index\":0,\"content_index\":0,\"delta\":%s}\n\n", 4+i, strconv.Quote(w)))
	}
	events = append(events, fmt.Sprintf("event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":%d,\"response\":{\"id\":\"resp_test\",\"object\":\"response\",\"status\":\"completed\",\"error\":null,\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":%s}]}]}}\n\n",
		4+len(words), strconv.Quote(strings.Join(words, ""))))
	return Events(gap, events...)
}

// RateLimited answers 429 with an OpenAI rate-limit error (not a quota error) and the given
// extra header lines, typically one of RetryAfterSeconds, RetryAfterDate or RetryAfterMs.
func RateLimited(header ...string) Step {
	return JSON(429, OpenAIError("Rate limit reached for requests", "requests", "rate_limit_exceeded"), header...)
}

// RetryAfterSeconds is a Retry-After header line in the delay-seconds form.
func RetryAfterSeconds(s int) string { return "Retry-After: " + strconv.Itoa(s) }

// RetryAfterDate is a Retry-After header line in the HTTP-date form (IMF-fixdate), d from
// now. HTTP-dates have whole seconds, so the wait a reader computes is within a second of d.
func RetryAfterDate(d time.Duration) string {
	return "Retry-After: " + time.Now().Add(d).UTC().Format(http.TimeFormat)
}

// RetryAfterMs is a retry-after-ms header line (OpenAI, Azure).
func RetryAfterMs(ms int) string { return "retry-after-ms: " + strconv.Itoa(ms) }

// Overloaded answers 529 with Anthropic's overloaded_error.
func Overloaded() Step {
	return JSON(529, AnthropicError("overloaded_error", "Overloaded"))
}

// WrongContentType answers 200 with body but a Content-Type that does not match what the
// request asked for (a JSON document to a stream request, say).
func WrongContentType(contentType, body string) Step {
	return Step{Status: 200, Header: []string{"Content-Type: " + contentType}, Body: body}
}

// AnthropicPrefillRefusal is Anthropic's answer to a conversation that ends with an assistant
// message (a prefill) on Claude Opus 4.6, Sonnet 4.6 and later: a 400.
func AnthropicPrefillRefusal() Step {
	return JSON(400, `{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. `+
		`The conversation must end with a user message."},"request_id":"req_test"}`)
}

// RefusesPrefill is a responder (NewResponder, Upstream.Respond) for a model that refuses
// prefills: a request whose last message is the assistant's gets AnthropicPrefillRefusal, any
// other answer(request).
func RefusesPrefill(answer func(*Request) Step) func(*Request) Step {
	return func(r *Request) Step {
		if LastRole(r.Body) == "assistant" {
			return AnthropicPrefillRefusal()
		}
		return answer(r)
	}
}

// LastRole is the role of the last of a chat or messages request body's messages ("" for none).
func LastRole(body []byte) string {
	var req struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Messages) == 0 {
		return ""
	}
	return req.Messages[len(req.Messages)-1].Role
}
