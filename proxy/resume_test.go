package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// docs/streams.md, Resume a cut stream: with FAILOVER_RESUME=on, a chat or messages stream cut after it
// delivered text is continued on a target marked resumable, spliced into the client's stream.

const messagesStreamBody = `{"model":"claude","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"Tell a story"}]}`

// resumeEnv turns resume on with t1 resumable by prefill (or the form given).
func resumeEnv(form string, extra ...string) []string {
	return append([]string{"FAILOVER_RESUME=on", "FAILOVER_TARGET_1_RESUME=" + form, "FAILOVER_SAME_TARGET_RETRIES=0"}, extra...)
}

// chatFrom is a chat stream of these events with the id chatcmpl-<who>.
func chatFrom(who string, events ...string) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = strings.ReplaceAll(e, "chatcmpl-test", "chatcmpl-"+who)
	}
	return out
}

// chatWords is a chat stream from who: the role, one delta per word, and end (its finish and
// [DONE] when end is set).
func chatWords(who string, end bool, words ...string) []string {
	events := []string{pt.ChatRole}
	for _, w := range words {
		events = append(events, pt.ChatDelta(w))
	}
	if end {
		events = append(events, pt.ChatFinish, pt.Done)
	}
	return chatFrom(who, events...)
}

// messagesWords is a Messages stream from who (the message id msg_<who>), the whole stream
// when end is set, else up to its last text delta.
func messagesWords(who string, end bool, words ...string) []string {
	var events []string
	for _, c := range pt.AnthropicStream(0, words...) {
		events = append(events, strings.ReplaceAll(c.Data, "msg_test", "msg_"+who))
	}
	if !end {
		events = events[:len(events)-3]
	}
	return events
}

// clientView is what an app's SDK makes of the stream it read.
type clientView struct {
	text     string
	ids      []string // chat: the chunk ids, a repeat of the previous one folded
	starts   int      // messages: message_start events
	terminal int      // [DONE] (chat) or message_stop (messages)
	last     string   // the last event's data
	errors   []string // error events
	problems []string // what an SDK's accumulator would refuse
}

// readClient reads a body strictly (parseSSE) as openai-go's and anthropic-sdk-go's
// accumulators do: chat chunks must all carry one id; a Messages content block must start at
// the next index and its deltas address a started block.
func readClient(t *testing.T, messages bool, body []byte) clientView {
	t.Helper()
	var v clientView
	events := checkWholeEvents(t, body)
	blocks := 0
	for _, ev := range events {
		v.last = ev.data
		if ev.data == "[DONE]" {
			v.terminal++
			continue
		}
		var m struct {
			ID      string `json:"id"`
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Error   any    `json:"error"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Delta struct {
				Type, Text string
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
			t.Fatalf("event data is not JSON: %q", ev.data)
		}
		if m.Error != nil || m.Type == "error" || ev.name == "error" {
			v.errors = append(v.errors, ev.data)
			continue
		}
		if !messages {
			if len(v.ids) == 0 || v.ids[len(v.ids)-1] != m.ID {
				v.ids = append(v.ids, m.ID)
			}
			for _, c := range m.Choices {
				v.text += c.Delta.Content
			}
			continue
		}
		switch m.Type {
		case "message_start":
			v.starts++
		case "message_stop":
			v.terminal++
		case "content_block_start":
			if m.Index != blocks {
				v.problems = append(v.problems, fmt.Sprintf("content_block_start at index %d, expected %d", m.Index, blocks))
			}
			blocks++
		case "content_block_delta", "content_block_stop":
			if m.Index >= blocks {
				v.problems = append(v.problems, fmt.Sprintf("%s for block %d, %d started", m.Type, m.Index, blocks))
			}
			if m.Delta.Type == "text_delta" {
				v.text += m.Delta.Text
			}
		}
	}
	return v
}

// cutAt returns the stream of events cut with fault right after the first marker (plus extra
// bytes: negative lands inside it) in its raw response.
func cutAt(events []string, fault pt.Fault, marker string, extra int) pt.Step {
	s := pt.SSE(pt.Events(0, events...)...)
	s.Fault, s.FaultBytes = fault, pt.RawOffset(s, marker, extra)
	return s
}

// A stream cut after it delivered text is continued on the resumable target: the client reads
// one coherent stream (every chunk with the original id, one message_start, indexes in order),
// its text the delivered text followed by the continuation, with one terminal event and a
// clean end; the continuation was asked for with the delivered text as the final assistant
// message.
func TestResumeContinuesACutStream(t *testing.T) {
	t.Parallel()
	story := chatWords("a", true, "Once upon a ti", "me, ünïcode", " and more")
	msgStory := messagesWords("a", true, "Once upon a ti", "me, ünïcode", " and more")
	closedBlock := append(messagesWords("a", false, "Once upon a time."), msgStory[len(msgStory)-3]) // its content_block_stop
	for _, tc := range []struct {
		name      string
		messages  bool
		first     pt.Step
		extra     []string
		delivered string   // what the client had when the stream was cut
		cont      []string // the continuation's text, word by word
		want      string
	}{
		{"chat cut inside an event", false, cutAt(story, pt.FaultCloseAfter, `"content":"me`, 0), nil,
			"Once upon a ti", []string{"me, there", " was a fox."}, "Once upon a time, there was a fox."},
		{"chat cut inside a UTF-8 rune", false, cutAt(story, pt.FaultCloseAfter, "ü", -1), nil,
			"Once upon a ti", []string{"me, ü"}, "Once upon a time, ü"},
		{"chat reset inside an event", false, cutAt(story, pt.FaultResetAfter, `"content":" and`, 0), nil,
			"Once upon a time, ünïcode", []string{" and more."}, "Once upon a time, ünïcode and more."},
		{"chat cut after a space", false, cutAt(chatWords("a", true, "Hello ", "world"), pt.FaultCloseAfter, `"content":"world`, 0), nil,
			"Hello ", []string{" world", "!"}, "Hello world!"},
		{"chat error event after content", false, pt.SSE(pt.Events(0, append(chatWords("a", false, "Once upon a ti"),
			pt.ChatError("The server had an error", "server_error", "server_error"), pt.Done)...)...), nil,
			"Once upon a ti", []string{"me."}, "Once upon a time."},
		{"chat idle stall", false, cutAt(story, pt.FaultStallAfter, `"content":"me`, 0), []string{"FAILOVER_IDLE_TIMEOUT=300ms"},
			"Once upon a ti", []string{"me."}, "Once upon a time."},
		{"chat clean end without its final event", false, pt.SSE(pt.Events(0, chatWords("a", false, "Once upon a ti")...)...), nil,
			"Once upon a ti", []string{"me."}, "Once upon a time."},
		{"chat whole stream in one read, cut", false, func() pt.Step {
			s := pt.Step{Status: 200, Header: []string{"Content-Type: text/event-stream"}, Body: strings.Join(story, "")}
			s.Fault, s.FaultBytes = pt.FaultCloseAfter, pt.RawOffset(s, `"content":"me`, 0)
			return s
		}(), nil, "Once upon a ti", []string{"me."}, "Once upon a time."},

		{"messages cut inside an event", true, cutAt(msgStory, pt.FaultCloseAfter, `"text":"me`, 0), nil,
			"Once upon a ti", []string{"me, there", " was a fox."}, "Once upon a time, there was a fox."},
		{"messages cut inside a UTF-8 rune", true, cutAt(msgStory, pt.FaultCloseAfter, "ï", -1), nil,
			"Once upon a ti", []string{"me."}, "Once upon a time."},
		{"messages overloaded_error after content", true, pt.SSE(pt.Events(0, append(messagesWords("a", false, "Once upon a ti"),
			pt.AnthropicStreamError("overloaded_error", "Overloaded"))...)...), nil,
			"Once upon a ti", []string{"me."}, "Once upon a time."},
		{"messages idle stall", true, cutAt(msgStory, pt.FaultStallAfter, `"text":"me`, 0), []string{"FAILOVER_IDLE_TIMEOUT=300ms"},
			"Once upon a ti", []string{"me."}, "Once upon a time."},
		{"messages cut after the text block stopped", true, pt.SSE(pt.Events(0, closedBlock...)...), nil,
			"Once upon a time.", []string{" The end."}, "Once upon a time. The end."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, body := "/chat/completions", streamBody
			second := pt.SSE(pt.Events(0, chatWords("b", true, tc.cont...)...)...)
			if tc.messages {
				path, body = "/messages", messagesStreamBody
				second = pt.SSE(pt.Events(0, messagesWords("b", true, tc.cont...)...)...)
			}
			a, b := upstream(t, tc.first), upstream(t, second)
			s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill", tc.extra...))...)
			r := s.Post(path, body)
			if r.Status != 200 || r.Err != nil {
				t.Fatalf("got %d err=%v, want a 200 that ends cleanly:\n%s", r.Status, r.Err, r.Body)
			}
			v := readClient(t, tc.messages, r.Body)
			if v.text != tc.want || len(v.errors) > 0 || len(v.problems) > 0 {
				t.Fatalf("the client read %q (errors %q, problems %q), want %q:\n%s", v.text, v.errors, v.problems, tc.want, r.Body)
			}
			if v.terminal != 1 || (tc.messages && v.last != `{"type":"message_stop"}`) || (!tc.messages && v.last != "[DONE]") {
				t.Fatalf("%d terminal events, the last event %q:\n%s", v.terminal, v.last, r.Body)
			}
			if !tc.messages && strings.Join(v.ids, ",") != "chatcmpl-a" {
				t.Fatalf("chunk ids %q, want only the first stream's", v.ids)
			}
			if tc.messages && v.starts != 1 {
				t.Fatalf("%d message_start events", v.starts)
			}
			if !strings.Contains(string(r.Body), ": failover resumed on t1\n\n") {
				t.Errorf("no comment naming the resume target:\n%s", r.Body)
			}
			if got := r.Header.Get("X-Failover-Target"); got != "t0" {
				t.Errorf("X-Failover-Target %q: headers sent cannot change", got)
			}
			checkContinuationRequest(t, b, body, tc.delivered, "")
			rec := s.WaitLedger(1)[0]
			ledger := rec["ledger"].([]any)
			if rec["outcome"] != "ok_after_failover" || len(ledger) != 2 {
				t.Fatalf("record %v", rec)
			}
			first, cont := ledger[0].(map[string]any), ledger[1].(map[string]any)
			seam := "none" // a prefill's continuation: only the whitespace the delivered text ended with is taken off
			if strings.HasSuffix(tc.delivered, " ") && strings.HasPrefix(tc.cont[0], " ") {
				seam = "space:1"
			}
			if first["phase"] != "resumed" || first["class"] != "interrupted" || cont["phase"] != "resumed" || cont["target"] != "t1" ||
				cont["delivered_bytes"] != float64(len(tc.delivered)) || cont["seam"] != seam {
				t.Fatalf("ledger %v", ledger)
			}
			if ev := s.Records("stream_resumed"); len(ev) != 1 || ev[0]["target"] != "t1" || ev[0]["from"] != "t0" ||
				ev[0]["delivered_bytes"] != float64(len(tc.delivered)) || ev[0]["form"] != "prefill" {
				t.Errorf("want one stream_resumed event from t0 to t1: %v", ev)
			}
			if m := s.ScrapeMetrics(); metric(m, `failover_resumes_total{target="t1",outcome="ok"}`) != 1 {
				t.Errorf("failover_resumes_total:\n%s", metricLine(m, "failover_resumes_total"))
			}
		})
	}
}

// checkContinuationRequest checks what the resume target was asked: the client's body with the
// delivered text, without its trailing whitespace, as the final assistant message (and the
// target's form: prefix, continue), and the model it sends.
func checkContinuationRequest(t *testing.T, up *pt.Upstream, clientBody, delivered, form string, model ...string) {
	t.Helper()
	reqs := up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("the resume target got %d requests, want 1", len(reqs))
	}
	var got, sent map[string]any
	if err := json.Unmarshal(reqs[0].Body, &got); err != nil {
		t.Fatalf("the continuation's body is not JSON: %v\n%s", err, reqs[0].Body)
	}
	json.Unmarshal([]byte(clientBody), &sent)
	msgs := got["messages"].([]any)
	sentMsgs := sent["messages"].([]any)
	want := map[string]any{"role": "assistant", "content": strings.TrimRight(delivered, " \n")}
	if form == "prefix" {
		want["prefix"] = true
	}
	last, _ := json.Marshal(msgs[len(msgs)-1])
	wantLast, _ := json.Marshal(want)
	if len(msgs) != len(sentMsgs)+1 || string(last) != string(wantLast) {
		t.Fatalf("the continuation's messages end with %s (%d messages), want %s after the client's %d", last, len(msgs), wantLast, len(sentMsgs))
	}
	if cont := form == "continue"; (got["continue_final_message"] == true) != cont || cont && got["add_generation_prompt"] != false {
		t.Fatalf("continue_final_message %v, add_generation_prompt %v, want them for the continue form only", got["continue_final_message"], got["add_generation_prompt"])
	}
	wantModel := sent["model"]
	if len(model) > 0 {
		wantModel = model[0]
	}
	if got["model"] != wantModel {
		t.Fatalf("the continuation asks for the model %v, want %v", got["model"], wantModel)
	}
	for k, v := range sent {
		if k != "messages" && k != "model" {
			if a, b := fmt.Sprint(got[k]), fmt.Sprint(v); a != b {
				t.Fatalf("the continuation changed %q: %s, the client sent %s", k, a, b)
			}
		}
	}
}

// Each chat form (_RESUME) asks for the continuation in its own way, and the target's _MODEL
// substitution applies to it as to any attempt.
func TestResumeChatForms(t *testing.T) {
	t.Parallel()
	for _, form := range []string{"prefill", "prefix", "continue"} {
		t.Run(form, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, cutAt(chatWords("a", true, "Hello wor", "ld"), pt.FaultCloseAfter, `"content":"ld`, 0))
			b := upstream(t, pt.SSE(pt.Events(0, chatWords("b", true, "ld")...)...))
			s := start(t, env(targets(a.URL, b.URL), resumeEnv(form, "FAILOVER_TARGET_1_MODEL=deepseek-chat"))...)
			r := s.Post("/chat/completions", streamBody)
			if v := readClient(t, false, r.Body); r.Err != nil || v.text != "Hello world" {
				t.Fatalf("err %v, text %q:\n%s", r.Err, v.text, r.Body)
			}
			checkContinuationRequest(t, b, streamBody, "Hello wor", form, "deepseek-chat")
		})
	}
}

// A resume that fails leaves the client exactly where the stream was cut: the whole events it
// had, then the original interruption's error event (the upstream's own, or the sidecar's
// stream_interrupted), and an aborted body. Nothing of the resume attempt reaches it: not a
// 400 for the prefill, not an error event, not opening events. The ledger lists the attempt.
func TestResumeThatFailsShowsTheOriginalInterruption(t *testing.T) {
	t.Parallel()
	delivered := chatWords("a", false, "Once upon a ti")
	cut := pt.SSE(pt.Events(0, delivered...)...)
	cut.Fault = pt.FaultTruncate
	overloaded := pt.ChatError("The server had an error", "server_error", "server_error")
	upstreamError := pt.SSE(pt.Events(0, append(delivered, overloaded)...)...)
	msgDelivered := messagesWords("a", false, "Once upon a ti")
	msgCut := pt.SSE(pt.Events(0, msgDelivered...)...)
	msgCut.Fault = pt.FaultTruncate
	for _, tc := range []struct {
		name     string
		messages bool
		first    pt.Step
		resume   pt.Step
		extra    []string
		ending   string // what the client gets after the delivered events
		class    string // the resume attempt's class in the ledger
		reason   string // and its reason
	}{
		{"the target refuses the prefill (400)", false, cut,
			pt.JSON(400, pt.OpenAIError("assistant prefill is not supported", "invalid_request_error", "invalid_value")), nil, "stream_interrupted", "client_error", "not_retryable"},
		{"the target refuses the prefill in an error event", true, msgCut,
			pt.SSE(pt.Events(0, pt.AnthropicStreamError("invalid_request_error", "final assistant content cannot end with trailing whitespace"))...), nil, "stream_interrupted", "client_error", "not_retryable"},
		{"the target answers 503", false, cut, pt.JSON(503, pt.OpenAIError("overloaded", "server_error", "")), nil, "stream_interrupted", "server_error", "retryable_status"},
		{"an error event before content", false, cut,
			pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatError("capacity", "server_error", "server_error"))...), nil, "stream_interrupted", "server_error", "retryable_status"},
		{"an empty stream", true, msgCut, pt.SSE(pt.Events(0, messagesWords("b", true)...)...), nil, "stream_interrupted", "ok", "not_resumable"},
		{"a reset before content", false, cut, func() pt.Step {
			s := pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatDelta("never sent"))...)
			s.Fault, s.FaultBytes = pt.FaultResetAfter, pt.RawOffset(s, pt.ChatRole, 0)
			return s
		}(), nil, "stream_interrupted", "reset", "no_response"},
		{"no content before the first-byte timeout", false, cut, pt.SSE(pt.Chunk{Data: pt.ChatRole}, pt.Chunk{Data: pt.ChatDelta("late"), Delay: 2 * time.Second}),
			[]string{"FAILOVER_FIRST_BYTE_TIMEOUT=1s"}, "stream_interrupted", "timeout", "no_response"},
		{"a tool call first", false, cut, pt.SSE(pt.Events(0, pt.ChatRole,
			`data: {"id":"chatcmpl-b","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]}`+"\n\n", pt.Done)...), nil, "stream_interrupted", "ok", "not_resumable"},
		{"the upstream's own error event is the original", false, upstreamError,
			pt.JSON(400, pt.OpenAIError("assistant prefill is not supported", "invalid_request_error", "invalid_value")), nil, "The server had an error", "client_error", "not_retryable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, body, sent := "/chat/completions", streamBody, strings.Join(delivered, "")
			if tc.messages {
				path, body, sent = "/messages", messagesStreamBody, strings.Join(msgDelivered, "")
			}
			a, b := upstream(t, tc.first), upstream(t, tc.resume)
			s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill", tc.extra...))...)
			r := s.Post(path, body)
			if r.Status != 200 || r.Err == nil {
				t.Fatalf("got %d err=%v, want the committed 200 and an aborted body:\n%s", r.Status, r.Err, r.Body)
			}
			if !strings.HasPrefix(string(r.Body), sent) {
				t.Fatalf("the client did not get the delivered events first:\n%s", r.Body)
			}
			after, _ := parseSSE(r.Body[len(sent):])
			if len(after) != 1 || !strings.Contains(after[0].data, tc.ending) {
				t.Fatalf("after the delivered events, want one error event with %q, got %q", tc.ending, after)
			}
			for _, leak := range []string{"prefill", "capacity", "chatcmpl-b", "msg_b", "resumed on", "never sent", "call_1"} {
				if strings.Contains(string(r.Body), leak) {
					t.Fatalf("the failed resume attempt reached the client (%q):\n%s", leak, r.Body)
				}
			}
			if b.Calls() != 1 {
				t.Fatalf("the resume target was called %d times, want once", b.Calls())
			}
			rec := s.WaitLedger(1)[0]
			ledger := rec["ledger"].([]any)
			if rec["outcome"] != "partial" || len(ledger) != 2 {
				t.Fatalf("record %v", rec)
			}
			first, resume := ledger[0].(map[string]any), ledger[1].(map[string]any)
			if first["phase"] != "resumed" || first["class"] != "interrupted" || resume["target"] != "t1" || resume["phase"] == "resumed" ||
				resume["phase"] == "committed" || resume["action"] != "stop" || resume["class"] != tc.class || resume["reason"] != tc.reason {
				t.Fatalf("ledger %v", ledger)
			}
			if m := s.ScrapeMetrics(); metric(m, `failover_resumes_total{target="t1",outcome="failed"}`) != 1 {
				t.Errorf("failover_resumes_total:\n%s", metricLine(m, "failover_resumes_total"))
			}
		})
	}
}

// A target that refuses the prefill is not taken out: the 400 that says so has no health
// effect, even from a target that has failed before (docs/streams.md, Resume a cut stream). A 503 from
// the same target would count: one more failure ejects it.
func TestResumeRefusedPrefillHasNoHealthEffect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		resume  pt.Step
		ejected bool
	}{
		{"400", pt.JSON(400, pt.OpenAIError("assistant prefill is not supported", "invalid_request_error", "invalid_value")), false},
		{"429", pt.RateLimited(), false},
		{"503", pt.JSON(503, pt.OpenAIError("overloaded", "server_error", "")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cut := pt.SSE(pt.Events(0, chatWords("a", false, "Once upon a ti")...)...)
			cut.Fault = pt.FaultTruncate
			a, b := upstream(t, cut), upstream(t, tc.resume)
			s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill", "FAILOVER_EJECT_AFTER=1"))...)
			s.Post("/chat/completions", streamBody)
			s.WaitLedger(1)
			if b.Calls() != 1 {
				t.Fatalf("the resume target was called %d times, want once", b.Calls())
			}
			if got := len(s.Records("target_ejected")) > 1; got != tc.ejected { // t0 is ejected by its own interruption
				t.Fatalf("t1 ejected: %v, want %v:\n%s", got, tc.ejected, s.Log.String())
			}
		})
	}
}

// Streams that are never resumed end as without resume (the whole events, the error event, an
// aborted body); the resume target is never asked, and the sidecar says why.
func TestResumeNever(t *testing.T) {
	t.Parallel()
	toolCall := `data: {"id":"chatcmpl-a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"ci"}}]},"finish_reason":null}]}` + "\n\n"
	n2 := strings.Replace(pt.ChatDelta("second choice"), `"index":0`, `"index":1`, 1)
	truncated := func(events ...string) pt.Step {
		s := pt.SSE(pt.Events(0, events...)...)
		s.Fault = pt.FaultTruncate
		return s
	}
	text := chatWords("a", false, "Once upon a ti")
	for _, tc := range []struct {
		name   string
		first  pt.Step
		body   string
		extra  []string
		reason string // stream_not_resumed's reason
	}{
		{"after a tool call", truncated(append(chatWords("a", false, "Let me check."), toolCall)...), streamBody, nil, "not_resumable"},
		{"with n=2 asked", truncated(append(text, n2)...), `{"model":"gpt-4o-mini","stream":true,"n":2,"messages":[{"role":"user","content":"Say hello"}]}`, nil, ""},
		{"with logprobs asked", truncated(text...), `{"model":"gpt-4o-mini","stream":true,"logprobs":true,"messages":[{"role":"user","content":"Say hello"}]}`, nil, ""},
		{"a client's own prefill", truncated(text...), `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello"},{"role":"assistant","content":"Once"}]}`, nil, ""},
		// A key sent twice is read as the providers' parsers read it: the last one.
		{"a client's own prefill in the last of two messages", truncated(text...),
			`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello"}],"messages":[{"role":"user","content":"Say hello"},{"role":"assistant","content":"Once"}]}`, nil, ""},
		{"a client's own prefill in the last of two roles", truncated(text...),
			`{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello"},{"role":"user","content":"Once","role":"assistant"}]}`, nil, ""},
		{"n=2 in the last of two", truncated(append(text, n2)...), `{"model":"gpt-4o-mini","stream":true,"n":1,"messages":[{"role":"user","content":"Say hello"}],"n":2}`, nil, ""},
		{"a finished stream cut before [DONE]", func() pt.Step {
			return cutAt(chatWords("a", true, "Once upon a time."), pt.FaultResetAfter, `"finish_reason":"stop"}]}`+"\n\n", 0)
		}(), streamBody, nil, "not_resumable"},
		// No stream can be resumed: as with FAILOVER_RESUME=off, nothing is prepared or logged.
		{"FAILOVER_RESUME_MAX=0", truncated(text...), streamBody, []string{"FAILOVER_RESUME_MAX=0"}, ""},
		{"FAILOVER_ENABLED=false", truncated(text...), streamBody, []string{"FAILOVER_ENABLED=false"}, "disabled"},
		{"the retry budget spent", truncated(text...), streamBody, []string{"FAILOVER_RETRY_BUDGET_MIN=0"}, "retry_budget"},
		{"FAILOVER_MAX_ELAPSED spent", pt.SSE(append(pt.Events(0, text...), pt.Chunk{Data: ": late\n\n", Delay: 400 * time.Millisecond})...),
			streamBody, []string{"FAILOVER_MAX_ELAPSED=200ms"}, "elapsed_limit"},
		{"no usable resumable target", truncated(text...), streamBody, []string{"FAILOVER_TARGET_1_RESUME="}, ""},
		// An event larger than 64 KiB goes out as it comes, before it could be read whole.
		{"after an event larger than 64 KiB", truncated(append(text, chatFrom("a", pt.ChatDelta(strings.Repeat("x", 70<<10)))...)...), streamBody, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b := upstream(t, tc.first), upstream(t, pt.SSE(pt.Events(0, chatWords("b", true, "me.")...)...))
			s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill", tc.extra...))...)
			r := s.Post("/chat/completions", tc.body)
			if r.Status != 200 || r.Err == nil || !strings.Contains(string(r.Body), `"code":"stream_interrupted"`) {
				t.Fatalf("got %d err=%v, want the stream interrupted:\n%s", r.Status, r.Err, r.Body)
			}
			time.Sleep(50 * time.Millisecond)
			if b.Calls() != 0 || strings.Contains(string(r.Body), "resumed on") {
				t.Fatalf("resumed (the resume target was called %d times):\n%s", b.Calls(), r.Body)
			}
			rec := s.WaitLedger(1)[0]
			if rec["outcome"] != "partial" || len(rec["ledger"].([]any)) != 1 {
				t.Fatalf("record %v", rec)
			}
			events := s.Records("stream_not_resumed")
			if tc.reason == "" {
				if len(events) != 0 {
					t.Fatalf("a request that may not be resumed logged %v", events)
				}
				return
			}
			if len(events) != 1 || events[0]["reason"] != tc.reason {
				t.Fatalf("stream_not_resumed events %v, want one with reason %s", events, tc.reason)
			}
		})
	}
}

// A body that sends "messages" twice is resumed as the providers read it, from the last one:
// that is the one the continuation's assistant message is appended to, and the one whose last
// message says whether the client asked for a prefill of its own.
func TestResumeReadsTheLastOfDuplicateMessages(t *testing.T) {
	t.Parallel()
	body := `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Once"}],` +
		`"messages":[{"role":"user","content":"Say hello"}]}`
	a := upstream(t, cutAt(chatWords("a", true, "Hello wor", "ld"), pt.FaultCloseAfter, `"content":"ld`, 0))
	b := upstream(t, pt.SSE(pt.Events(0, chatWords("b", true, "ld")...)...))
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill"))...)
	r := s.Post("/chat/completions", body)
	if v := readClient(t, false, r.Body); r.Err != nil || v.text != "Hello world" {
		t.Fatalf("err %v, text %q:\n%s", r.Err, v.text, r.Body)
	}
	checkContinuationRequest(t, b, body, "Hello wor", "")
}

// A stream cut while the sidecar drains for its shutdown is not resumed: a new generation
// would be cut by the shutdown timeout in turn (docs/streams.md, Resume a cut stream).
func TestResumeNeverWhileShuttingDown(t *testing.T) {
	t.Parallel()
	first := pt.SSE(append(pt.Events(0, chatWords("a", false, "Once upon a ti")...), pt.Chunk{Data: ": late\n\n", Delay: 400 * time.Millisecond})...)
	first.Fault = pt.FaultTruncate
	a, b := upstream(t, first), upstream(t, pt.SSE(pt.Events(0, chatWords("b", true, "me.")...)...))
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill"))...)
	go func() {
		// The shutdown begins while the stream runs: once the first target has the request
		// and has sent its first events, well before the cut 400 ms later.
		for deadline := time.Now().Add(10 * time.Second); a.Calls() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Srv.Shutdown(ctx)
	}()
	r := s.Post("/chat/completions", streamBody)
	if r.Err == nil || !strings.Contains(string(r.Body), `"code":"stream_interrupted"`) || b.Calls() != 0 {
		t.Fatalf("got err=%v, resume target called %d times:\n%s", r.Err, b.Calls(), r.Body)
	}
	if rec := s.WaitLedger(1)[0]; rec["outcome"] != "partial" || len(rec["ledger"].([]any)) != 1 {
		t.Fatalf("record %v, want one attempt, partial", rec)
	}
}

// FAILOVER_RESUME_MAX bounds the resumes of one request: a continuation cut in turn is resumed
// again while resumes are left, and once they are spent it ends as any cut stream does, after
// the text both delivered.
func TestResumeMax(t *testing.T) {
	t.Parallel()
	cut := func(who string, words ...string) pt.Step {
		s := pt.SSE(pt.Events(0, chatWords(who, false, words...)...)...)
		s.Fault = pt.FaultTruncate
		return s
	}
	for _, tc := range []struct {
		max   string
		want  string
		clean bool
	}{
		{"1", "One two ", false},
		{"2", "One two three.", true},
	} {
		t.Run("FAILOVER_RESUME_MAX="+tc.max, func(t *testing.T) {
			t.Parallel()
			a, b, c := upstream(t, cut("a", "One ")), upstream(t, cut("b", "two ")), upstream(t, pt.SSE(pt.Events(0, chatWords("c", true, "three.")...)...))
			s := start(t, env(targets(a.URL, b.URL, c.URL), resumeEnv("prefill", "FAILOVER_TARGET_2_RESUME=prefill", "FAILOVER_RESUME_MAX="+tc.max))...)
			r := s.Post("/chat/completions", streamBody)
			v := readClient(t, false, r.Body)
			if v.text != tc.want || (r.Err == nil) != tc.clean || strings.Join(v.ids, ",") != "chatcmpl-a" {
				t.Fatalf("text %q, err %v, ids %v:\n%s", v.text, r.Err, v.ids, r.Body)
			}
			if !tc.clean {
				if c.Calls() != 0 || len(v.errors) != 1 {
					t.Fatalf("the third target was called %d times; errors %q", c.Calls(), v.errors)
				}
				s.WaitLedger(1)
				if ev := s.Records("stream_not_resumed"); len(ev) != 1 || ev[0]["reason"] != "resume_limit" || ev[0]["target"] != "t1" {
					t.Errorf("stream_not_resumed events %v, want one with reason resume_limit", ev)
				}
				if m := s.ScrapeMetrics(); metric(m, `failover_resumes_total{target="t1",outcome="interrupted"}`) != 1 {
					t.Errorf("failover_resumes_total:\n%s", metricLine(m, "failover_resumes_total"))
				}
				return
			}
			checkContinuationRequest(t, c, streamBody, "One two ", "")
			rec := s.WaitLedger(1)[0]
			if ledger := rec["ledger"].([]any); rec["outcome"] != "ok_after_failover" || len(ledger) != 3 {
				t.Fatalf("record %v", rec)
			}
		})
	}
}

// The continuation's events go through the same whole-event forwarding as any stream: an
// event split across reads reaches the client rewritten and whole.
func TestResumeContinuationInPieces(t *testing.T) {
	t.Parallel()
	a := upstream(t, cutAt(chatWords("a", true, "Hello wor", "ld"), pt.FaultCloseAfter, `"content":"ld`, 0))
	cont := strings.Join(chatWords("b", true, "ld", " and", " more"), "")
	var chunks []pt.Chunk
	for i := 0; i < len(cont); i += 37 {
		chunks = append(chunks, pt.Chunk{Data: cont[i:min(i+37, len(cont))], Delay: 2 * time.Millisecond})
	}
	b := upstream(t, pt.SSE(chunks...))
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill"))...)
	r := s.Post("/chat/completions", streamBody)
	v := readClient(t, false, r.Body)
	if r.Err != nil || v.text != "Hello world and more" || strings.Join(v.ids, ",") != "chatcmpl-a" || v.terminal != 1 {
		t.Fatalf("err %v text %q ids %v:\n%s", r.Err, v.text, v.ids, r.Body)
	}
}

// Without FAILOVER_RESUME=on nothing is resumed, whatever the targets say.
func TestResumeOffByDefault(t *testing.T) {
	t.Parallel()
	cut := pt.SSE(pt.Events(0, chatWords("a", false, "Once upon a ti")...)...)
	cut.Fault = pt.FaultTruncate
	a, b := upstream(t, cut), upstream(t)
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_TARGET_1_RESUME=prefill"})...)
	r := s.Post("/chat/completions", streamBody)
	if r.Err == nil || b.Calls() != 0 {
		t.Fatalf("err %v, second target called %d times", r.Err, b.Calls())
	}
	if m := s.ScrapeMetrics(); metric(m, `failover_resumes_total{target="t1",outcome="ok"}`) != 0 {
		t.Errorf("the resume series is not pre-created at zero:\n%s", metricLine(m, "failover_resumes_total"))
	}
}

var _ = sidecar.Env

// A continuation's event larger than 64 KiB cannot be read whole before it would go out, so it
// cannot be rewritten into the client's stream: the stream ends there as interrupted, after the
// continuation's text so far, and nothing of that event reaches the client.
func TestResumeContinuationEventTooLargeToSplice(t *testing.T) {
	t.Parallel()
	cut := pt.SSE(pt.Events(0, chatWords("a", false, "One ")...)...)
	cut.Fault = pt.FaultTruncate
	big := strings.Repeat("x", 70<<10)
	a := upstream(t, cut)
	b := upstream(t, pt.SSE(pt.Events(0, append(chatWords("b", false, "two "), chatFrom("b", pt.ChatDelta(big), pt.ChatFinish, pt.Done)...)...)...))
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill"))...)
	r := s.Post("/chat/completions", streamBody)
	v := readClient(t, false, r.Body)
	if r.Err == nil || v.text != "One two " || len(v.errors) != 1 || !strings.Contains(v.errors[0], "too large to splice") || strings.Contains(string(r.Body), big[:100]) {
		t.Fatalf("err %v, text %.200q (%d bytes), errors %q", r.Err, v.text, len(v.text), v.errors)
	}
	if rec := s.WaitLedger(1)[0]; rec["outcome"] != "partial" {
		t.Fatalf("record %v", rec)
	}
}

// A resume target whose ejection has run out is tried as its probe (docs/decisions.md, Health): the resume
// takes the probe as any request would, so that a failure re-ejects the target at once, and no
// other request probes it meanwhile. Tried without taking the probe, its failure would change
// nothing, and the target would stay open to the next request.
func TestResumeOnAnExpiredEjectionTakesTheProbe(t *testing.T) {
	t.Parallel()
	overloaded := pt.JSON(503, pt.OpenAIError("overloaded", "server_error", ""))
	cut := pt.SSE(pt.Events(0, chatWords("a", false, "Once upon a ti")...)...)
	cut.Fault = pt.FaultTruncate
	a, b := upstream(t, overloaded, cut), upstream(t, overloaded, overloaded)
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill", "FAILOVER_EJECT_AFTER=1",
		"FAILOVER_EJECT_BASE=300ms", "FAILOVER_EJECT_MAX=300ms"))...)
	if r := s.Post("/chat/completions", chatBody); r.Status != 503 {
		t.Fatalf("got %d, want both targets to fail and be ejected", r.Status)
	}
	time.Sleep(500 * time.Millisecond) // both ejections run out
	if r := s.Post("/chat/completions", streamBody); r.Err == nil {
		t.Fatalf("want the stream cut:\n%s", r.Body)
	}
	s.WaitLedger(2)
	if b.Calls() != 2 {
		t.Fatalf("the resume target was called %d times, want twice", b.Calls())
	}
	var t1 int
	for _, ev := range s.Records("target_ejected") {
		if ev["target"] == "t1" {
			t1++
		}
	}
	if t1 != 2 {
		t.Fatalf("t1 ejected %d times, want twice: the failed resume was its probe:\n%s", t1, s.Log.String())
	}
}

// A client that leaves while a resume attempt runs takes the attempt's health effect with it, as
// for any attempt (docs/decisions.md, The decision order, rule 1): the resume target's 503, which arrives
// after the client left and before the sidecar looked, neither counts against the target nor
// is a failed resume.
func TestResumeAttemptWhoseClientLeftHasNoHealthEffect(t *testing.T) {
	t.Parallel()
	cut := pt.SSE(pt.Events(0, chatWords("a", false, "Once upon a ti")...)...)
	cut.Fault = pt.FaultTruncate
	asked, left := make(chan struct{}, 1), make(chan struct{})
	a, b := upstream(t, cut), upstream(t)
	b.Respond(func(*pt.Request) pt.Step {
		asked <- struct{}{}
		<-left // the client is gone before the answer is sent
		return pt.JSON(503, pt.OpenAIError("overloaded", "server_error", ""))
	})
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill", "FAILOVER_EJECT_AFTER=1"))...)
	c := dial(t, s.Addr)
	rawPost(t, c, "HTTP/1.1", streamBody)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for buf := make([]byte, 4096); !strings.Contains(string(got), "Once upon a ti"); {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("%v before the delivered text: %q", err, got)
		}
	}
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the resume target was never asked")
	}
	c.Close()
	close(left)
	checkResumeCancelled(t, s, "cancelled")
	if m := s.ScrapeMetrics(); metric(m, `failover_resumes_total{target="t1",outcome="failed"}`) != 0 {
		t.Errorf("failover_resumes_total:\n%s", metricLine(m, "failover_resumes_total"))
	}
}

// checkResumeCancelled checks the request's record: the cut attempt, then the resume attempt on
// t1 as cancelled, and the outcome given; and that the resume attempt, which t1 did not end,
// did not count against t1 (with FAILOVER_EJECT_AFTER=1 one failure ejects it).
func checkResumeCancelled(t *testing.T, s *sidecar.Sidecar, outcome string) {
	t.Helper()
	rec := s.WaitLedger(1)[0]
	ledger := rec["ledger"].([]any)
	if rec["outcome"] != outcome || len(ledger) != 2 || ledger[1].(map[string]any)["class"] != "cancelled" {
		t.Fatalf("record %v, want the resume attempt cancelled and the outcome %s", rec, outcome)
	}
	for _, ev := range s.Records("target_ejected") {
		if ev["target"] == "t1" {
			t.Fatalf("the resume target was ejected for an attempt it did not end: %v", ev)
		}
	}
}

// The shutdown timeout that cuts a resume attempt in progress is what the client is told, as
// for any stream the shutdown cuts (docs/streams.md, Resume a cut stream): the sidecar's
// stream_interrupted event saying it is shutting down, not the original interruption's
// (neither the sidecar's message nor the upstream's own error event); the attempt is
// cancelled and says nothing of the resume target.
func TestResumeAttemptCutByTheShutdown(t *testing.T) {
	t.Parallel()
	delivered := chatWords("a", false, "Once upon a ti")
	cut := pt.SSE(pt.Events(0, delivered...)...)
	cut.Fault = pt.FaultTruncate
	upstreamError := pt.SSE(pt.Events(0, append(delivered, pt.ChatError("The server had an error", "server_error", "server_error"))...)...)
	for _, tc := range []struct {
		name     string
		first    pt.Step
		original string // what the original interruption's error event says
	}{
		{"after a cut connection", cut, "the upstream"},
		{"after the upstream's error event", upstreamError, "The server had an error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			asked := make(chan struct{}, 1)
			a, b := upstream(t, tc.first), upstream(t)
			b.Respond(func(*pt.Request) pt.Step {
				asked <- struct{}{}
				return pt.Step{Fault: pt.FaultStall}
			})
			s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill", "FAILOVER_EJECT_AFTER=1"))...)
			go func() {
				select {
				case <-asked:
				case <-time.After(10 * time.Second):
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				s.Srv.Shutdown(ctx)
			}()
			r := s.Post("/chat/completions", streamBody)
			sent := strings.Join(delivered, "")
			if r.Err == nil || !strings.HasPrefix(string(r.Body), sent) {
				t.Fatalf("err %v, want the delivered events and an aborted body:\n%s", r.Err, r.Body)
			}
			after, _ := parseSSE(r.Body[len(sent):])
			if len(after) != 1 || !strings.Contains(after[0].data, `"code":"stream_interrupted"`) ||
				!strings.Contains(after[0].data, "the sidecar is shutting down") || strings.Contains(after[0].data, tc.original) {
				t.Fatalf("after the delivered events, want the shutdown's stream_interrupted, got %q", after)
			}
			checkResumeCancelled(t, s, "partial")
		})
	}
}

// With resume on, a stream whose [DONE] lacks its blank line ends cleanly (docs/streams.md, Streams), its
// last event read through the transcript like any other: nothing is resumed.
func TestResumeNotForAStreamEndingWithoutItsBlankLine(t *testing.T) {
	t.Parallel()
	events := chatWords("a", false, "Once upon a time.")
	events = append(events, pt.ChatFinish)
	chunks := append(pt.Events(0, events...), pt.Chunk{Data: "data: [DONE]\n", Delay: 50 * time.Millisecond})
	a, b := upstream(t, pt.SSE(chunks...)), upstream(t)
	s := start(t, env(targets(a.URL, b.URL), resumeEnv("prefill"))...)
	r := s.Post("/chat/completions", streamBody)
	want := strings.Join(events, "") + "data: [DONE]\n\n"
	if r.Status != 200 || r.Err != nil || string(r.Body) != want || b.Calls() != 0 {
		t.Fatalf("got %d err=%v, second target called %d times, body %q\nwant a clean end with %q", r.Status, r.Err, b.Calls(), r.Body, want)
	}
	if rec := s.WaitLedger(1)[0]; rec["outcome"] != "ok" {
		t.Errorf("record %v, want outcome ok", rec)
	}
}
