package faults_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// verdict is what a matrix row expects the sidecar to do with the first target's fault.
type verdict int

const (
	// transfer: the client gets the second target's answer, byte-identical, and none of the
	// first target's bytes; the ledger shows the transfer.
	transfer verdict = iota
	// served: the first target's answer, byte-identical (the "fault" is slow or odd but a
	// real answer); the second target is never called.
	served
	// retry: the same target again after the wait the upstream asked for, then its answer.
	retry
	// partial: output already reached the client; no replay, no second target, and the client
	// sees the output then an error: the family's final error event (SSE) and an aborted body.
	partial
	// partialUpstreamError: output reached the client, then the upstream's own error event,
	// which the client sees as sent and as the one final event (no second one of the
	// sidecar's, however the upstream then ended), and the body is aborted (even after a
	// proper final event); no replay, no second target, and the outcome is partial.
	partialUpstreamError
	// stop: the first target's error goes back unchanged; the second target is never called.
	stop
	// hedged: the first target is slow to commit; a hedge on the second wins its race, the
	// client gets its answer, byte-identical, and none of the first's bytes; the ledger shows
	// the first as lost (action hedge) and the second as won (docs/streams.md, Hedging).
	hedged
)

func (v verdict) String() string {
	return [...]string{"transfer", "served", "retry", "partial", "partial (upstream error event)", "stop", "hedged"}[v]
}

// family describes what a row's client sends and what each target answers when healthy.
type family struct {
	name   string
	path   string
	body   string
	stream bool
	// answer is a healthy answer from the named target.
	answer func(who string) pt.Step
}

var (
	chatJSON = family{"chat", "/chat/completions", chatBody, false,
		func(who string) pt.Step { return pt.JSON(200, pt.ChatCompletion("Hello from "+who)) }}
	chatSSE = family{"chat", "/chat/completions", chatStreamBody, true,
		func(who string) pt.Step { return pt.SSE(pt.ChatStream(0, "Hello", " from", " "+who)...) }}
	messagesSSE = family{"messages", "/messages", messagesStreamBody, true,
		func(who string) pt.Step { return pt.SSE(pt.AnthropicStream(0, "Hello", " from", " "+who)...) }}
	responsesSSE = family{"responses", "/responses", responsesStreamBody, true,
		func(who string) pt.Step { return pt.SSE(pt.ResponsesStream(0, "Hello", " from", " "+who)...) }}
	imageJSON = family{"image", "/images/generations", imageBody, false,
		func(who string) pt.Step {
			return pt.JSON(200, `{"created":1700000000,"data":[{"b64_json":"`+strings.Repeat("QUJD", 2048)+`","revised_prompt":"`+who+`"}]}`)
		}}
)

// row is one cell of the matrix: a fault on the first of two targets, at one phase, for one
// kind of request.
type row struct {
	name  string
	fam   family
	steps []pt.Step                 // the first target's script
	late  func() []pt.Step          // instead of steps: a script built when the row runs (HTTP-dates)
	dial  func(t *testing.T) string // instead of steps: a first target with no server (refused, connect stall)
	extra []string                  // FAILOVER_* on top of the short timeouts
	want  verdict
	// phase is the ledger phase of the first attempt; class, when set, its error class.
	phase, class string
	// shown, for partial rows, is what the client must have received before the error: the
	// bytes up to and including the event that committed the stream.
	shown string
	// waitAtLeast, for retry rows, is the least wait the ledger must show before the retry.
	waitAtLeast time.Duration
	// cooled: the first target asked for a wait beyond FAILOVER_RETRY_AFTER_MAX, so a second
	// request must skip it.
	cooled bool
	// peerClosed: the sidecar must close the first target's connection (a stall it gave up on).
	peerClosed bool
}

// refused is a first target on a port nothing listens on.
func refused(t *testing.T) string { return pt.RefusedURL() }

// connectStall is a first target whose connect never completes.
func connectStall(t *testing.T) string {
	l, err := pt.NewStalledListener()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l.URL
}

// fault returns step with a fault after n raw bytes.
func fault(s pt.Step, f pt.Fault, n int) pt.Step {
	s.Fault, s.FaultBytes = f, n
	return s
}

// trickle returns step sent one byte at a time, gap apart.
func trickle(s pt.Step, gap time.Duration) pt.Step {
	s.Fault, s.ChunkDelay = pt.FaultTrickle, gap
	return s
}

func script(steps ...pt.Step) []pt.Step { return steps }

// matrixRows is the fault matrix: each fault, at each phase it can happen in, streaming and not.
func matrixRows() []row {
	var rows []row
	add := func(r ...row) { rows = append(rows, r...) }
	headLen := func(s pt.Step) int { return pt.RawOffset(s, "\r\n\r\n", 0) }
	retries := []string{"FAILOVER_SAME_TARGET_RETRIES=1"}
	patient := []string{"FAILOVER_FIRST_BYTE_TIMEOUT=5s", "FAILOVER_ATTEMPT_TIMEOUT=5s"} // a silence that ends before the timeouts

	// Before headers: nothing came back, so any fault transfers, streaming or not.
	for _, fam := range []family{chatJSON, chatSSE} {
		ok := fam.answer("t0")
		add(
			row{name: "refused", fam: fam, dial: refused, want: transfer, phase: "before_headers", class: "refused"},
			row{name: "connect stall", fam: fam, dial: connectStall, want: transfer, phase: "before_headers", class: "timeout"},
			row{name: "reset before any byte", fam: fam, steps: script(pt.Step{Fault: pt.FaultReset}), want: transfer, phase: "before_headers", class: "reset"},
			row{name: "close before any byte", fam: fam, steps: script(pt.Step{Fault: pt.FaultClose}), want: transfer, phase: "before_headers", class: "reset"},
			row{name: "reset mid status line", fam: fam, steps: script(fault(ok, pt.FaultResetAfter, 9)), want: transfer, phase: "before_headers", class: "reset"},
			row{name: "reset mid headers", fam: fam, steps: script(fault(ok, pt.FaultResetAfter, headLen(ok)-10)), want: transfer, phase: "before_headers", class: "reset"},
			row{name: "stall with no bytes", fam: fam, steps: script(pt.Step{Fault: pt.FaultStall}), want: transfer, phase: "before_headers", class: "timeout", peerClosed: true},
			row{name: "stall mid headers", fam: fam, steps: script(fault(ok, pt.FaultStallAfter, headLen(ok)-10)), want: transfer, phase: "before_headers", class: "timeout", peerClosed: true},
			row{name: "garbage instead of HTTP", fam: fam, steps: script(pt.Step{Fault: pt.FaultGarbage}), want: transfer, phase: "before_headers"},
			row{name: "garbage after half the headers", fam: fam, steps: script(fault(ok, pt.FaultGarbageAfter, headLen(ok)/2)), want: transfer, phase: "before_headers"},
			row{name: "trickle slower than the timeout", fam: fam, steps: script(trickle(ok, 20*time.Millisecond)), want: transfer, phase: "before_headers", class: "timeout", peerClosed: true},
			// Silent past FAILOVER_CONNECT_TIMEOUT (the threshold, being under 1 s), then closed
			// or reset: a silent failure, not a reset (docs/decisions.md, The decision order, rule 5).
			row{name: "silence then close", fam: fam, steps: script(pt.Step{Delay: 500 * time.Millisecond, Fault: pt.FaultClose}), extra: patient,
				want: transfer, phase: "before_headers", class: "silent_close"},
			row{name: "silence then reset", fam: fam, steps: script(pt.Step{Delay: 500 * time.Millisecond, Fault: pt.FaultReset}), extra: patient,
				want: transfer, phase: "before_headers", class: "silent_close"},
		)
	}

	// Error statuses and slow answers: headers came back, nothing reached the client.
	for _, fam := range []family{chatJSON, chatSSE} {
		ok := fam.answer("t0")
		add(
			row{name: "503", fam: fam, steps: script(pt.JSON(503, pt.OpenAIError("The server is overloaded", "server_error", ""))), want: transfer, phase: "before_content", class: "server_error"},
			row{name: "529 overloaded", fam: fam, steps: script(pt.Overloaded()), want: transfer, phase: "before_content", class: "server_error"},
			row{name: "529 with a stop rule stops", fam: fam, steps: script(pt.Overloaded()), extra: []string{"FAILOVER_STOP_RULE_0_STATUSES=529"}, want: stop, phase: "before_content"},
			row{name: "429 without Retry-After transfers", fam: fam, steps: script(pt.RateLimited()), want: transfer, phase: "before_content", class: "rate_limited"},
			row{name: "429 Retry-After seconds within the max retries after it", fam: fam, steps: script(pt.RateLimited(pt.RetryAfterSeconds(1)), ok),
				extra: retries, want: retry, phase: "before_content", class: "rate_limited", waitAtLeast: time.Second},
			row{name: "429 Retry-After seconds beyond the max transfers and cools down", fam: fam, steps: script(pt.RateLimited(pt.RetryAfterSeconds(30)), ok),
				extra: retries, want: transfer, phase: "before_content", class: "rate_limited", cooled: true},
			row{name: "429 Retry-After HTTP-date within the max retries after it", fam: fam, late: func() []pt.Step { return script(pt.RateLimited(pt.RetryAfterDate(3*time.Second)), ok) },
				extra: retries, want: retry, phase: "before_content", class: "rate_limited", waitAtLeast: time.Second},
			row{name: "429 Retry-After HTTP-date beyond the max transfers and cools down", fam: fam, late: func() []pt.Step { return script(pt.RateLimited(pt.RetryAfterDate(time.Minute)), ok) },
				extra: retries, want: transfer, phase: "before_content", class: "rate_limited", cooled: true},
			row{name: "429 Retry-After HTTP-date in the past retries at once", fam: fam, late: func() []pt.Step { return script(pt.RateLimited(pt.RetryAfterDate(-time.Minute)), ok) },
				extra: retries, want: retry, phase: "before_content", class: "rate_limited"},
			row{name: "429 retry-after-ms within the max retries after it", fam: fam, steps: script(pt.RateLimited(pt.RetryAfterMs(400)), ok),
				extra: retries, want: retry, phase: "before_content", class: "rate_limited", waitAtLeast: 400 * time.Millisecond},
			row{name: "429 retry-after-ms beyond the max transfers and cools down", fam: fam, steps: script(pt.RateLimited(pt.RetryAfterMs(60000)), ok),
				extra: retries, want: transfer, phase: "before_content", class: "rate_limited", cooled: true},
			row{name: "200 with an error body", fam: fam, steps: script(pt.JSON(200, `{"error":{"message":"upstream overloaded","type":"server_error","code":503}}`)), want: transfer, phase: "before_content"},
			row{name: "trickle within the timeouts", fam: fam, steps: script(trickle(ok, time.Millisecond)),
				extra: []string{"FAILOVER_FIRST_BYTE_TIMEOUT=30s", "FAILOVER_ATTEMPT_TIMEOUT=30s", "FAILOVER_IDLE_TIMEOUT=10s"}, want: served},
		)
		// Headers, then a silence past the threshold, then the connection ends: a silent close
		// as before any byte (docs/decisions.md, The decision order, rule 5). 800 ms leaves the
		// sidecar 400 ms to take the headers before its silence begins.
		for _, f := range []struct {
			name  string
			fault pt.Fault
		}{{"close", pt.FaultTruncate}, {"reset", pt.FaultTruncateReset}} {
			silent := pt.Step{Status: 200, Header: ok.Header, Chunks: []pt.Chunk{{Raw: true, Delay: 800 * time.Millisecond}}, Fault: f.fault}
			add(row{name: "headers, silence, then " + f.name, fam: fam, steps: script(silent), extra: patient,
				want: transfer, phase: "before_content", class: "silent_close"})
		}
	}

	// A slow first content with hedging on: the hedge wins, the slow attempt is cut, before a
	// byte of it reached the client.
	hedging := []string{"FAILOVER_HEDGE_AFTER=100ms", "FAILOVER_FIRST_BYTE_TIMEOUT=5s", "FAILOVER_ATTEMPT_TIMEOUT=5s"}
	for _, fam := range []family{chatJSON, chatSSE, messagesSSE} {
		slow := fam.answer("t0")
		if fam.stream {
			slow.Chunks[1].Delay = 3 * time.Second // the opening goes out at once, the content late
		} else {
			slow.Delay = 3 * time.Second
		}
		add(row{name: "slow first content, hedged", fam: fam, steps: script(slow), extra: hedging, want: hedged, peerClosed: true})
	}

	// Before content, non-streaming: a body cut short is a transport failure before commit.
	{
		ok := chatJSON.answer("t0")
		mid := headLen(ok) + len(ok.Body)/2
		chunked := pt.Step{Status: 200, Header: ok.Header, Chunks: []pt.Chunk{{Data: ok.Body[:40]}, {Data: ok.Body[40:]}}}
		add(
			row{name: "reset mid body (Content-Length not reached)", fam: chatJSON, steps: script(fault(ok, pt.FaultResetAfter, mid)), want: transfer, phase: "before_content", class: "reset"},
			row{name: "close mid body (Content-Length not reached)", fam: chatJSON, steps: script(fault(ok, pt.FaultCloseAfter, mid)), want: transfer, phase: "before_content", class: "reset"},
			row{name: "stall mid body", fam: chatJSON, steps: script(fault(ok, pt.FaultStallAfter, mid)), want: transfer, phase: "before_content", class: "timeout", peerClosed: true},
			row{name: "truncated chunked body", fam: chatJSON, steps: script(fault(chunked, pt.FaultTruncate, 0)), want: transfer, phase: "before_content", class: "reset"},
			row{name: "garbage chunk framing", fam: chatJSON, steps: script(fault(chunked, pt.FaultGarbageAfter, pt.RawOffset(chunked, ok.Body[:40]+"\r\n", 0))), want: transfer, phase: "before_content"},
			row{name: "200 with an empty body", fam: chatJSON, steps: script(pt.JSON(200, "")), want: transfer, phase: "before_content", class: "empty_response"},
			row{name: "200 with no choices", fam: chatJSON, steps: script(pt.JSON(200, `{"id":"x","object":"chat.completion","choices":[]}`)), want: transfer, phase: "before_content", class: "no_choices"},
		)
	}

	// Before content, streaming: opening events held back, then the fault; the client sees
	// none of them.
	{
		ok := chatSSE.answer("t0")
		afterRole := pt.RawOffset(ok, pt.ChatRole, 0)
		opening := pt.SSE(pt.Events(0, pt.ChatRole, ": keep-alive\n\n")...)
		add(
			row{name: "reset after the opening event", fam: chatSSE, steps: script(fault(ok, pt.FaultResetAfter, afterRole)), want: transfer, phase: "before_content", class: "reset"},
			row{name: "reset mid opening event", fam: chatSSE, steps: script(fault(ok, pt.FaultResetAfter, afterRole-40)), want: transfer, phase: "before_content", class: "reset"},
			row{name: "close after the opening event", fam: chatSSE, steps: script(fault(ok, pt.FaultCloseAfter, afterRole)), want: transfer, phase: "before_content"},
			row{name: "truncated chunked body after the opening event", fam: chatSSE, steps: script(fault(opening, pt.FaultTruncate, 0)), want: transfer, phase: "before_content"},
			row{name: "garbage chunk framing after the opening event", fam: chatSSE, steps: script(fault(ok, pt.FaultGarbageAfter, afterRole+2)), want: transfer, phase: "before_content"},
			row{name: "stall after the opening event", fam: chatSSE, steps: script(fault(ok, pt.FaultStallAfter, afterRole)), want: transfer, phase: "before_content", class: "timeout", peerClosed: true},
			row{name: "in-stream error before content", fam: chatSSE, steps: script(pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatError("The server had an error", "server_error", "server_error"))...)),
				want: transfer, phase: "before_content", class: "server_error"},
			row{name: "in-stream rate limit before content", fam: chatSSE, steps: script(pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatError("Rate limit reached", "requests", "rate_limit_exceeded"))...)),
				want: transfer, phase: "before_content", class: "rate_limited"},
			row{name: "empty stream", fam: chatSSE, steps: script(pt.SSE(pt.Events(0, pt.ChatRole, pt.Done)...)), want: transfer, phase: "before_content", class: "empty_response"},
			row{name: "200 JSON instead of a stream is read as a body", fam: chatSSE, steps: script(pt.WrongContentType("application/json", pt.ChatCompletion("Hello from t0"))), want: served},
			row{name: "200 JSON error instead of a stream transfers", fam: chatSSE, steps: script(pt.WrongContentType("application/json", pt.OpenAIError("upstream overloaded", "server_error", "server_error"))),
				want: transfer, phase: "before_content"},
		)
		msg := messagesSSE.answer("t0")
		add(
			row{name: "in-stream overloaded error before content", fam: messagesSSE, steps: script(pt.SSE(pt.Events(0, pt.AnthropicStream(0)[0].Data, pt.AnthropicStreamError("overloaded_error", "Overloaded"))...)),
				want: transfer, phase: "before_content", class: "server_error"},
			row{name: "reset after the opening events", fam: messagesSSE, steps: script(fault(msg, pt.FaultResetAfter, pt.RawOffset(msg, "event: ping", 0))), want: transfer, phase: "before_content", class: "reset"},
		)
		resp := responsesSSE.answer("t0")
		add(row{name: "reset after the opening events", fam: responsesSSE, steps: script(fault(resp, pt.FaultResetAfter, pt.RawOffset(resp, "response.content_part.added", 0))),
			want: transfer, phase: "before_content", class: "reset"})
	}

	// After commit, streaming: content reached the client; never replayed, always an error.
	{
		ok := chatSSE.answer("t0")
		shown := pt.ChatRole + pt.ChatDelta("Hello")
		afterContent := pt.RawOffset(ok, pt.ChatDelta("Hello"), 0)
		midEvent := pt.RawOffset(ok, pt.ChatDelta(" from"), -30)
		content := pt.Events(0, pt.ChatRole, pt.ChatDelta("Hello"), pt.ChatDelta(" from"))
		chatErr := pt.Chunk{Data: pt.ChatError("The server had an error", "server_error", "server_error")}
		// vLLM's stream generators end a failure with {"error": {...}} and then [DONE]
		// (vllm/entrypoints/openai/serving_chat.py, create_streaming_error_response), the
		// message being the exception's text: longer than the tail keeps of an event.
		longErr := pt.Chunk{Data: `data: {"error": {"message": "` + strings.Repeat("The engine failed while generating. ", 20) + `", "type": "InternalServerError", "param": null, "code": 500}}` + "\n\n"}
		add(
			row{name: "reset after content", fam: chatSSE, steps: script(fault(ok, pt.FaultResetAfter, afterContent)), want: partial, shown: shown},
			row{name: "reset mid event after content", fam: chatSSE, steps: script(fault(ok, pt.FaultResetAfter, midEvent)), want: partial, shown: shown},
			row{name: "close after content", fam: chatSSE, steps: script(fault(ok, pt.FaultCloseAfter, afterContent)), want: partial, shown: shown},
			row{name: "truncated chunked body after content", fam: chatSSE, steps: script(fault(pt.SSE(content...), pt.FaultTruncate, 0)), want: partial, shown: shown},
			row{name: "clean end without finish_reason or [DONE]", fam: chatSSE, steps: script(pt.SSE(content...)), want: partial, shown: shown},
			row{name: "clean end after finish_reason without [DONE]", fam: chatSSE, steps: script(pt.SSE(append(content, pt.Chunk{Data: pt.ChatFinish})...)), want: served},
			row{name: "stall after content", fam: chatSSE, steps: script(fault(ok, pt.FaultStallAfter, afterContent)), want: partial, shown: shown, peerClosed: true},
			row{name: "garbage chunk framing after content", fam: chatSSE, steps: script(fault(ok, pt.FaultGarbageAfter, afterContent+2)), want: partial, shown: shown},
			row{name: "in-stream error after content", fam: chatSSE, steps: script(fault(pt.SSE(append(content, chatErr)...), pt.FaultTruncate, 0)), want: partialUpstreamError, shown: shown},
			row{name: "in-stream error after content, then [DONE]", fam: chatSSE, steps: script(pt.SSE(append(content, chatErr, pt.Chunk{Data: pt.Done})...)), want: partialUpstreamError, shown: shown},
			row{name: "long in-stream error after content, then [DONE]", fam: chatSSE, steps: script(pt.SSE(append(content, longErr, pt.Chunk{Data: pt.Done})...)), want: partialUpstreamError, shown: shown},
			row{name: "in-stream error after content, then a reset", fam: chatSSE, steps: func() []pt.Step {
				s := pt.SSE(append(content, chatErr, pt.Chunk{Data: pt.ChatDelta("never")})...)
				return script(fault(s, pt.FaultResetAfter, pt.RawOffset(s, chatErr.Data, 2)))
			}(), want: partialUpstreamError, shown: shown},
			row{name: "in-stream error after content, then a stall", fam: chatSSE, steps: func() []pt.Step {
				s := pt.SSE(append(content, chatErr, pt.Chunk{Data: pt.Done})...)
				return script(fault(s, pt.FaultStallAfter, pt.RawOffset(s, chatErr.Data, 2)))
			}(), want: partialUpstreamError, shown: shown, peerClosed: true},
		)
		msg := messagesSSE.answer("t0")
		msgShown := joinChunks(pt.AnthropicStream(0, "Hello")[:4])
		afterText := pt.RawOffset(msg, `"text":"Hello"}}`+"\n\n", 0)
		msgContent := pt.AnthropicStream(0, "Hello", " from")[:5]
		add(
			row{name: "reset after content", fam: messagesSSE, steps: script(fault(msg, pt.FaultResetAfter, afterText)), want: partial, shown: msgShown},
			row{name: "stall after content", fam: messagesSSE, steps: script(fault(msg, pt.FaultStallAfter, afterText)), want: partial, shown: msgShown, peerClosed: true},
			row{name: "in-stream overloaded error after content", fam: messagesSSE,
				steps: script(pt.SSE(append(msgContent, pt.Chunk{Data: pt.AnthropicStreamError("overloaded_error", "Overloaded")})...)), want: partialUpstreamError, shown: msgShown},
			row{name: "in-stream overloaded error after content, then a truncated body", fam: messagesSSE,
				steps: script(fault(pt.SSE(append(msgContent, pt.Chunk{Data: pt.AnthropicStreamError("overloaded_error", "Overloaded")})...), pt.FaultTruncate, 0)), want: partialUpstreamError, shown: msgShown},
		)
		resp := responsesSSE.answer("t0")
		respShown := joinChunks(pt.ResponsesStream(0, "Hello")[:5])
		add(row{name: "reset after content", fam: responsesSSE, steps: script(fault(resp, pt.FaultResetAfter, pt.RawOffset(resp, `"delta":"Hello"}`+"\n\n", 0))), want: partial, shown: respShown})
	}

	// After commit, not streaming: a body past FAILOVER_MAX_RESPONSE_BYTES, and an image
	// (committed at headers), cut mid-body.
	{
		big := pt.JSON(200, pt.ChatCompletion(strings.Repeat("long answer ", 700)))
		add(row{name: "reset mid body past the response buffer", fam: chatJSON, steps: script(fault(big, pt.FaultResetAfter, headLen(big)+4096)),
			extra: []string{"FAILOVER_MAX_RESPONSE_BYTES=1KiB"}, want: partial, shown: big.Body[:1024]})
		img := imageJSON.answer("t0")
		add(
			row{name: "reset mid body", fam: imageJSON, steps: script(fault(img, pt.FaultResetAfter, headLen(img)+2048)), want: partial, shown: img.Body[:1024]},
			row{name: "stall mid body", fam: imageJSON, steps: script(fault(img, pt.FaultStallAfter, headLen(img)+2048)), want: partial, shown: img.Body[:1024], peerClosed: true},
		)
	}
	return rows
}

// TestFaultMatrix plays every row against a fresh sidecar with two targets: the first faulty,
// the second healthy. It checks the client's view, the ledger, and which targets were called.
// Invariants in every row: no clean-looking success that is not one, no replay after
// commit, exactly one ledger record.
//
// Rows mostly wait on short timeouts, so they run concurrently, a few at a time, whatever
// -parallel says (subtests run from several goroutines, as testing.T.Run allows).
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	runConcurrently(t, matrixRows(), func(r row) string { return rowName(r.fam, r.name) }, playRow)
}

func playRow(t *testing.T, r row) {
	var first *pt.Upstream
	var firstURL string
	if r.late != nil {
		r.steps = r.late()
	}
	if r.dial != nil {
		firstURL = r.dial(t)
	} else {
		first = upstream(t, r.steps...)
		firstURL = first.URL
	}
	firstCalls := func() int {
		if first == nil {
			return 0
		}
		return first.Calls()
	}
	secondAnswer := r.fam.answer("t1")
	second := upstream(t, secondAnswer)
	// One attempt per target (the rows count calls so): the same-target retry that is on by
	// default has its own tests (proxy/failover_test.go).
	s := start(t, env(targets(firstURL, second.URL), timeouts, []string{"FAILOVER_SAME_TARGET_RETRIES=0"}, r.extra)...)

	resp, err := post(s, r.fam.path, r.fam.body)
	if err != nil {
		t.Errorf("the client got no response at all: %v", err)
	}
	rec := onlyRecord(t, s)
	atts := attemptsOf(t, rec)
	where := func() string {
		return fmt.Sprintf("\nclient: %d err=%v body=%q\n%s", resp.Status, resp.Err, resp.Body, ledgerLine(rec))
	}

	switch r.want {
	case transfer:
		if resp.Status != 200 || resp.Err != nil || !bytes.Equal(resp.Body, secondAnswer.BodyBytes()) {
			t.Fatalf("want the second target's answer, byte-identical%s", where())
		}
		if got := resp.Header.Get("X-Failover-Target"); got != "t1" {
			t.Errorf("X-Failover-Target = %q, want t1", got)
		}
		if second.Calls() != 1 {
			t.Errorf("second target called %d times, want 1", second.Calls())
		}
		if rec["outcome"] != "ok_after_failover" || len(atts) < 2 {
			t.Fatalf("want outcome ok_after_failover after a transfer%s", where())
		}
		a0, last := atts[0], atts[len(atts)-1]
		if a0["target"] != "t0" || a0["action"] != "transfer" || a0["phase"] != r.phase {
			t.Errorf("first attempt: want t0 transfer in phase %s%s", r.phase, where())
		}
		if last["target"] != "t1" || last["action"] != "commit" || last["phase"] != "committed" {
			t.Errorf("last attempt: want t1 commit%s", where())
		}
		if r.class != "" && a0["class"] != r.class {
			t.Errorf("first attempt class %v, want %s%s", a0["class"], r.class, where())
		}
		if r.cooled {
			// The first target asked for more than FAILOVER_RETRY_AFTER_MAX: the next request
			// must skip it while it cools down.
			before := firstCalls()
			again := s.Post(r.fam.path, r.fam.body)
			if again.Status != 200 || firstCalls() != before || second.Calls() != 2 {
				t.Errorf("a cooling target was called again: first %d→%d calls, second %d, status %d", before, firstCalls(), second.Calls(), again.Status)
			}
		}

	case hedged:
		if resp.Status != 200 || resp.Err != nil || !bytes.Equal(resp.Body, secondAnswer.BodyBytes()) {
			t.Fatalf("want the hedge's answer, byte-identical%s", where())
		}
		if second.Calls() != 1 || firstCalls() != 1 {
			t.Errorf("calls t0=%d t1=%d, want one each", firstCalls(), second.Calls())
		}
		if len(atts) != 2 || atts[0]["target"] != "t0" || atts[0]["action"] != "hedge" || atts[0]["hedge"] != "lost" ||
			atts[1]["target"] != "t1" || atts[1]["action"] != "commit" || atts[1]["hedge"] != "won" {
			t.Errorf("want t0 lost (hedge), t1 won (commit)%s", where())
		}

	case served, retry:
		answer := r.steps[0]
		if r.want == retry {
			answer = r.steps[1]
		}
		if resp.Status != 200 || resp.Err != nil || !bytes.Equal(resp.Body, answer.BodyBytes()) {
			t.Fatalf("want the first target's answer, byte-identical%s", where())
		}
		if second.Calls() != 0 {
			t.Errorf("second target called %d times, want 0", second.Calls())
		}
		if got := resp.Header.Get("X-Failover-Target"); got != "t0" {
			t.Errorf("X-Failover-Target = %q, want t0", got)
		}
		if r.want == served {
			if firstCalls() != 1 || rec["outcome"] != "ok" || len(atts) != 1 || atts[0]["action"] != "commit" {
				t.Errorf("want one committed attempt, outcome ok (%d calls)%s", firstCalls(), where())
			}
			break
		}
		if firstCalls() != 2 || len(atts) != 2 || atts[0]["action"] != "retry" || atts[0]["phase"] != r.phase ||
			atts[1]["action"] != "commit" || atts[1]["target"] != "t0" {
			t.Fatalf("want a retry on t0 then its answer (%d calls)%s", firstCalls(), where())
		}
		if r.class != "" && atts[0]["class"] != r.class {
			t.Errorf("first attempt class %v, want %s", atts[0]["class"], r.class)
		}
		wait, _ := atts[0]["wait_ms"].(float64)
		if time.Duration(wait*float64(time.Millisecond)) < r.waitAtLeast {
			t.Errorf("waited %vms before the retry, want at least %v%s", wait, r.waitAtLeast, where())
		}
		if gap := first.Requests()[1].Received.Sub(first.Requests()[0].Received); gap < r.waitAtLeast {
			t.Errorf("the retry came %v after the 429, want at least %v", gap, r.waitAtLeast)
		}
		if rec["outcome"] != "ok" && rec["outcome"] != "ok_after_failover" {
			t.Errorf("outcome %v", rec["outcome"])
		}

	case stop:
		if resp.Status != r.steps[0].Status || resp.Err != nil || !bytes.Equal(resp.Body, r.steps[0].BodyBytes()) {
			t.Fatalf("want the first target's error unchanged%s", where())
		}
		if firstCalls() != 1 || second.Calls() != 0 || len(atts) != 1 || atts[0]["action"] != "stop" || rec["outcome"] != "upstream_error" {
			t.Fatalf("want a stop on the first target (calls %d, %d)%s", firstCalls(), second.Calls(), where())
		}

	case partial, partialUpstreamError:
		if resp.Status != 200 {
			t.Fatalf("want the committed status 200%s", where())
		}
		sent := resp.Body
		if i := interruptedTail(resp.Body, r.fam.name); r.fam.stream && (r.want == partial || i >= 0) {
			if r.want == partialUpstreamError {
				t.Fatalf("a second error event after the upstream's own%s", where())
			}
			if i < 0 {
				t.Fatalf("no final interrupted-stream event in the family's shape%s", where())
			}
			tail := resp.Body[i+2:]
			if !bytes.HasSuffix(tail, []byte("\n\n")) || bytes.Count(tail, []byte("\n\n")) != 1 {
				t.Errorf("the interrupted event is not the one last event: %q", tail)
			}
			sent = resp.Body[:i]
		}
		if resp.Err == nil {
			t.Errorf("the body ended cleanly: an interrupted answer must end with an error (aborted chunked body)%s", where())
		}
		if !bytes.HasPrefix(sent, []byte(r.shown)) {
			t.Errorf("the client did not get the committed output first: want prefix %q%s", r.shown, where())
		}
		if full := r.steps[0].BodyBytes(); !bytes.HasPrefix(full, sent) {
			t.Errorf("what the client got before the error is not the first target's output (a replay or foreign bytes)%s", where())
		}
		if r.want == partialUpstreamError && !bytes.Contains(sent[len(r.shown):], []byte("rror")) {
			t.Errorf("the upstream's error event did not reach the client%s", where())
		}
		if firstCalls() != 1 || second.Calls() != 0 {
			t.Errorf("after commit: first called %d times, second %d; want 1 and 0 (no replay)", firstCalls(), second.Calls())
		}
		if rec["outcome"] != "partial" || len(atts) != 1 || atts[0]["phase"] != "committed" {
			t.Errorf("want outcome partial with one committed attempt%s", where())
		}
	}

	if r.peerClosed {
		select {
		case <-first.PeerClosed():
		case <-time.After(5 * time.Second):
			t.Errorf("the sidecar never closed the stalled connection to the first target")
		}
	}
}
