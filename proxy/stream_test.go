package proxy_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

const streamBody = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello"}]}`

func joined(chunks []pt.Chunk) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString(c.Data)
	}
	return b.String()
}

func TestStreamSuccessIsByteIdentical(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, body string
		chunks           []pt.Chunk
	}{
		{"chat", "/chat/completions", streamBody, pt.ChatStream(0, "Hel", "lo", " world")},
		{"messages", "/messages", `{"model":"claude","stream":true,"max_tokens":5,"messages":[]}`, pt.AnthropicStream(0, "Hel", "lo")},
		{"responses", "/responses", `{"model":"gpt-4o","stream":true,"input":"hi"}`, pt.ResponsesStream(0, "Hel", "lo")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := upstream(t, pt.SSE(tc.chunks...))
			s := start(t, targets(up.URL)...)
			r := s.Post(tc.path, tc.body)
			if r.Status != 200 || r.Err != nil || string(r.Body) != joined(tc.chunks) {
				t.Fatalf("got %d err=%v\n%q\nwant\n%q", r.Status, r.Err, r.Body, joined(tc.chunks))
			}
			if r.Header.Get("Content-Type") != "text/event-stream" || r.Header.Get("X-Failover-Target") != "t0" {
				t.Errorf("headers %v", r.Header)
			}
			rec := s.WaitLedger(1)[0]
			if rec["outcome"] != "ok" || rec["stream"] != true {
				t.Errorf("ledger %v", rec)
			}
		})
	}
}

func TestStreamBeforeCommit(t *testing.T) {
	t.Parallel()
	second := pt.ChatStream(0, "from ", "second")
	tests := []struct {
		name  string
		first pt.Step
		extra []string
		event string // the named log event expected
	}{
		{"error before content transfers", pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatError("The server had an error", "server_error", "server_error"))...), nil, "stream_candidate_retry_scheduled"},
		{"error split across reads transfers", pt.SSE(pt.Chunk{Data: pt.ChatRole + "data: {\"err"}, pt.Chunk{Data: "or\":{\"message\":\"overloaded\",\"code\":503}}\n\n", Delay: 20 * time.Millisecond}), nil, "stream_candidate_retry_scheduled"},
		{"empty stream transfers", pt.SSE(pt.Events(0, pt.ChatRole)...), nil, "stream_candidate_retry_scheduled"},
		{"[DONE]-only stream transfers", pt.SSE(pt.Events(0, pt.Done)...), nil, "stream_candidate_retry_scheduled"},
		{"empty stream transfers whatever the status list", pt.SSE(pt.Events(0, pt.ChatRole, pt.Done)...),
			[]string{"FAILOVER_RETRY_ON_STATUSES=429,503"}, "stream_candidate_retry_scheduled"},
		{"first-byte timeout transfers", pt.SSE(pt.Chunk{Data: pt.ChatRole}, pt.Chunk{Data: pt.ChatDelta("late"), Delay: 2 * time.Second}),
			[]string{"FAILOVER_FIRST_BYTE_TIMEOUT=1s"}, "stream_transport_retry_scheduled"},
		{"headers never coming transfers on first-byte timeout", pt.Step{Fault: pt.FaultStall}, []string{"FAILOVER_FIRST_BYTE_TIMEOUT=1s"}, "stream_transport_retry_scheduled"},
		{"reset before content transfers", func() pt.Step {
			s := pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatDelta("never sent"))...)
			s.Fault, s.FaultBytes = pt.FaultResetAfter, 150
			return s
		}(), nil, "stream_transport_retry_scheduled"},
		{"success rule on a held event transfers", pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatDelta("I cannot help with that [filtered]"), pt.Done)...),
			[]string{"FAILOVER_SUCCESS_RULE_0_PATTERN=\\[filtered\\]"}, "stream_candidate_retry_scheduled"},
		{"429 before headers transfers", pt.JSON(429, pt.OpenAIError("Rate limit", "requests", "rate_limit_exceeded")), nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, tc.first)
			b := upstream(t, pt.SSE(second...))
			s := start(t, env(targets(a.URL, b.URL), noRetries, tc.extra)...)
			r := s.Post("/chat/completions", streamBody)
			if r.Status != 200 || r.Err != nil || string(r.Body) != joined(second) {
				t.Fatalf("client got %d err=%v:\n%q\nwant only the second target's bytes:\n%q", r.Status, r.Err, r.Body, joined(second))
			}
			if a.Calls() != 1 || b.Calls() != 1 {
				t.Fatalf("calls a=%d b=%d", a.Calls(), b.Calls())
			}
			rec := s.WaitLedger(1)[0]
			ledger := rec["ledger"].([]any)
			if rec["outcome"] != "ok_after_failover" || len(ledger) != 2 {
				t.Fatalf("ledger %v", rec)
			}
			if first := ledger[0].(map[string]any); first["action"] != "transfer" || first["phase"] == "committed" {
				t.Fatalf("first attempt %v", first)
			}
			if tc.event != "" && len(s.Records(tc.event)) != 1 {
				t.Errorf("want one %s event, log:\n%s", tc.event, s.Log.String())
			}
		})
	}
}

// Accept: text/event-stream makes a request streaming whatever its body says, in any case (media
// types are case-insensitive).
func TestStreamingByAcceptHeader(t *testing.T) {
	t.Parallel()
	up := upstream(t, pt.SSE(pt.ChatStream(0, "hi")...), pt.SSE(pt.ChatStream(0, "hi")...), pt.JSON(200, pt.ChatCompletion("hi")))
	s := start(t, targets(up.URL)...)
	for i, accept := range []string{"text/event-stream", "Text/Event-Stream", "application/json"} {
		s.Post("/chat/completions", chatBody, "Accept: "+accept)
		rec := s.WaitLedger(i + 1)[i]
		if want := i < 2; rec["stream"] != want {
			t.Errorf("Accept: %s: stream %v, want %v", accept, rec["stream"], want)
		}
	}
}

// An upstream's Content-Type: Text/Event-Stream is a stream too (media types are
// case-insensitive): it is gated, and commits on its content, rather than held whole.
func TestStreamContentTypeInAnyCase(t *testing.T) {
	t.Parallel()
	step := pt.SSE(pt.ChatStream(0, "hi")...)
	step.Header = []string{"Content-Type: Text/Event-Stream"}
	up := upstream(t, step)
	s := start(t, targets(up.URL)...)
	if r := s.Post("/chat/completions", streamBody); r.Status != 200 || !strings.HasSuffix(string(r.Body), pt.Done) {
		t.Fatalf("%d %q", r.Status, r.Body)
	}
	if m := s.ScrapeMetrics(); !strings.Contains(m, `failover_stream_commits_total{reason="content"} 1`) {
		t.Errorf("the stream was not gated:\n%s", m)
	}
}

// When a success rule matches the stream of every candidate, the last one is still the answer:
// it is committed and piped like any stream, and the ledger says so.
func TestStreamSuccessRuleOnEveryCandidate(t *testing.T) {
	t.Parallel()
	filtered := pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatDelta("I cannot help with that [filtered]"), pt.Done)...)
	a, b := upstream(t, filtered), upstream(t, filtered)
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_SUCCESS_RULE_0_PATTERN=\\[filtered\\]"})...)
	r := s.Post("/chat/completions", streamBody)
	if r.Status != 200 || !strings.HasSuffix(string(r.Body), pt.Done) {
		t.Fatalf("client got %d %q, want the last stream", r.Status, r.Body)
	}
	rec := s.WaitLedger(1)[0]
	ledger := rec["ledger"].([]any)
	if rec["outcome"] != "exhausted" || len(ledger) != 2 {
		t.Fatalf("record %v", rec)
	}
	if first := ledger[0].(map[string]any); first["phase"] != "before_content" {
		t.Errorf("first attempt %v, want before_content", first)
	}
	if last := ledger[1].(map[string]any); last["phase"] != "committed" {
		t.Errorf("last attempt %v, want phase committed: its stream reached the client", last)
	}
}

func TestStreamStopRuleOnAnInStreamError(t *testing.T) {
	t.Parallel()
	over := pt.AnthropicStreamError("overloaded_error", "Overloaded")
	a := upstream(t, pt.SSE(pt.Events(0, pt.AnthropicStream(0)[0].Data, over)...))
	b := upstream(t, pt.SSE(pt.AnthropicStream(0, "hi")...))
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_STOP_RULE_0_STATUSES=529"})...)
	r := s.Post("/messages", `{"model":"claude","stream":true,"max_tokens":5,"messages":[]}`)
	if r.Status != 529 || string(r.Body) != pt.AnthropicError("overloaded_error", "Overloaded") || b.Calls() != 0 {
		t.Fatalf("got %d %s, second called %d times", r.Status, r.Body, b.Calls())
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
}

func TestStreamPeekLimitCommits(t *testing.T) {
	t.Parallel()
	// Opening events only, more than the peek limit: the stream commits (no unbounded
	// buffering), so the error that follows is after commit and reaches the client: the
	// upstream's own error event, no second one, and an aborted body. The same whether the
	// events arrive one per read or all in one read (the limit holds within a read).
	var events []string
	for range 40 {
		events = append(events, ": keep-alive padding padding padding padding padding\n\n")
	}
	events = append(events, pt.ChatError("late failure", "server_error", "server_error"))
	all := strings.Join(events, "")
	for name, step := range map[string]pt.Step{
		"one event per read": pt.SSE(pt.Events(0, events...)...),
		"all in one read":    pt.SSE(pt.Chunk{Data: all}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, step)
			b := upstream(t, pt.SSE(pt.ChatStream(0, "second")...))
			s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_PEEK_BYTES=1KiB"})...)
			r := s.Post("/chat/completions", streamBody)
			if r.Status != 200 || b.Calls() != 0 {
				t.Fatalf("status %d, second called %d times, body %q", r.Status, b.Calls(), r.Body)
			}
			if !strings.HasPrefix(string(r.Body), all) {
				t.Fatalf("the client did not get the upstream's bytes: body %q", r.Body)
			}
			if r.Err == nil || strings.Contains(string(r.Body), `"code":"stream_interrupted"`) {
				t.Errorf("want the upstream's error alone and an aborted body: err %v, body %q", r.Err, r.Body)
			}
			if m := s.ScrapeMetrics(); !strings.Contains(m, `failover_stream_commits_total{reason="peek_limit"} 1`) {
				t.Errorf("peek_limit commit not counted:\n%s", m)
			}
		})
	}
}

func TestStreamAfterCommit(t *testing.T) {
	t.Parallel()
	content := []string{pt.ChatRole, pt.ChatDelta("Hello"), pt.ChatDelta(" world")}
	tests := []struct {
		name  string
		step  pt.Step
		extra []string
	}{
		{"content then a dropped connection", func() pt.Step {
			s := pt.SSE(pt.Events(10*time.Millisecond, content...)...)
			s.Fault = pt.FaultTruncate
			return s
		}(), nil},
		{"content then a reset", func() pt.Step {
			s := pt.SSE(pt.Events(0, append(content, pt.ChatDelta("never"))...)...)
			s.Fault, s.FaultBytes = pt.FaultResetAfter, 120+len(joined(pt.Events(0, content...)))+30
			return s
		}(), nil},
		{"content then silence past the idle timeout", pt.SSE(append(pt.Events(0, content...), pt.Chunk{Data: pt.Done, Delay: 3 * time.Second})...),
			[]string{"FAILOVER_IDLE_TIMEOUT=300ms"}},
		{"content then a clean end without [DONE]", pt.SSE(pt.Events(0, content...)...), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, tc.step)
			b := upstream(t, pt.SSE(pt.ChatStream(0, "second")...))
			s := start(t, env(targets(a.URL, b.URL), tc.extra)...)
			r := s.Post("/chat/completions", streamBody)
			if r.Status != 200 || !strings.Contains(string(r.Body), `"content":"Hello"`) {
				t.Fatalf("got %d %q", r.Status, r.Body)
			}
			if r.Err == nil {
				t.Fatalf("the stream ended cleanly; the client must see an error:\n%s", r.Body)
			}
			if !strings.Contains(string(r.Body), `"code":"stream_interrupted"`) {
				t.Fatalf("no final error event in %q", r.Body)
			}
			if strings.Count(string(r.Body), `"role":"assistant"`) != 1 || strings.Contains(string(r.Body), "second") {
				t.Fatalf("replayed after commit: %q", r.Body)
			}
			time.Sleep(100 * time.Millisecond)
			if b.Calls() != 0 {
				t.Fatalf("second target called %d times after commit", b.Calls())
			}
			rec := s.WaitLedger(1)[0]
			if rec["outcome"] != "partial" {
				t.Errorf("outcome %v", rec["outcome"])
			}
		})
	}
}

func TestStreamInterruptedEventShapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, path, body string
		chunks           []pt.Chunk
		want             string
	}{
		{"messages", "/messages", `{"model":"claude","stream":true,"max_tokens":5,"messages":[]}`, pt.AnthropicStream(0, "Hel")[:4],
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":"},
		{"responses", "/responses", `{"model":"gpt-4o","stream":true,"input":"hi"}`, pt.ResponsesStream(0, "Hel")[:5],
			"event: error\ndata: {\"type\":\"error\",\"code\":\"stream_interrupted\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			step := pt.SSE(tc.chunks...)
			step.Fault = pt.FaultTruncate
			up := upstream(t, step)
			s := start(t, targets(up.URL)...)
			r := s.Post(tc.path, tc.body)
			if r.Err == nil || !strings.HasPrefix(string(r.Body), joined(tc.chunks)) || !strings.Contains(string(r.Body), tc.want) {
				t.Fatalf("err=%v body:\n%s", r.Err, r.Body)
			}
		})
	}
}

func TestStreamClientDisconnectClosesUpstream(t *testing.T) {
	t.Parallel()
	var chunks []pt.Chunk
	chunks = append(chunks, pt.Chunk{Data: pt.ChatRole}, pt.Chunk{Data: pt.ChatDelta("first")})
	for range 50 {
		chunks = append(chunks, pt.Chunk{Data: pt.ChatDelta("tick"), Delay: 2 * time.Second})
	}
	up := upstream(t, pt.SSE(chunks...))
	s := start(t, targets(up.URL)...)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/chat/completions", strings.NewReader(streamBody))
	resp, err := sidecar.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "assistant") {
		t.Fatalf("first line %q %v", line, err)
	}
	left := time.Now()
	cancel()
	resp.Body.Close()
	select {
	case at := <-up.PeerClosed():
		if d := at.Sub(left); d > time.Second {
			t.Fatalf("the upstream connection was closed %v after the client left", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the upstream connection stayed open after the client left")
	}
	rec := s.WaitLedger(1)[0]
	if rec["outcome"] != "cancelled" || rec["status"].(float64) != 499 {
		t.Errorf("ledger %v", rec)
	}
}

func TestStreamEventsArriveAsProduced(t *testing.T) {
	t.Parallel()
	const gap = 300 * time.Millisecond
	up := upstream(t, pt.SSE(pt.ChatStream(gap, "one", "two", "three")...))
	s := start(t, targets(up.URL)...)
	req, _ := http.NewRequest("POST", s.URL+"/chat/completions", strings.NewReader(streamBody))
	resp, err := sidecar.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var arrivals []time.Time
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data: ") {
			arrivals = append(arrivals, time.Now())
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// role, one, two, three, finish, [DONE]: the content events must come spread out, the way
	// the upstream produced them, not all at the end.
	if len(arrivals) != 6 {
		t.Fatalf("%d events", len(arrivals))
	}
	if spread := arrivals[3].Sub(arrivals[1]); spread < gap {
		t.Fatalf("events were batched: content events arrived within %v", spread)
	}
}

func TestStreamThatArrivesWholeIsSentInOneBody(t *testing.T) {
	t.Parallel()
	body := joined(pt.ChatStream(0, "all", " at", " once"))
	up := upstream(t, pt.Step{Status: 200, Header: []string{"Content-Type: text/event-stream"}, Body: body})
	s := start(t, targets(up.URL)...)
	r := s.Post("/chat/completions", streamBody)
	if r.Status != 200 || r.Err != nil || string(r.Body) != body {
		t.Fatalf("got %d %v %q", r.Status, r.Err, r.Body)
	}
	if r.Header.Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Errorf("a stream that arrived whole should go out as one body: headers %v", r.Header)
	}
	if rec := s.WaitLedger(1)[0]; rec["outcome"] != "ok" {
		t.Errorf("ledger %v", rec)
	}
	// Without [DONE], it ends with its finish_reason chunk: complete, and one body as well.
	noDone := strings.TrimSuffix(body, pt.Done)
	up.Script(pt.Step{Status: 200, Header: []string{"Content-Type: text/event-stream"}, Body: noDone})
	if r := s.Post("/chat/completions", streamBody); r.Err != nil || string(r.Body) != noDone || r.Header.Get("Content-Length") != strconv.Itoa(len(noDone)) {
		t.Fatalf("a whole stream ending with its finish_reason: %v %q, headers %v", r.Err, r.Body, r.Header)
	}
	// Cut before its finish_reason chunk, the same stream is piped and ends with an error.
	up.Script(pt.Step{Status: 200, Header: []string{"Content-Type: text/event-stream"}, Body: strings.TrimSuffix(noDone, pt.ChatFinish)})
	if r := s.Post("/chat/completions", streamBody); r.Err == nil || !strings.Contains(string(r.Body), "stream_interrupted") {
		t.Fatalf("a whole stream without finish_reason or [DONE] ended cleanly: %v %q", r.Err, r.Body)
	}
	if recs := s.WaitLedger(3); len(recs) != 3 || recs[1]["outcome"] != "ok" || recs[2]["outcome"] != "partial" {
		t.Errorf("ledger %v", recs)
	}
}

func TestStreamLastAttemptFailingBeforeContentAnswersAnError(t *testing.T) {
	t.Parallel()
	const messagesBody = `{"model":"claude","stream":true,"max_tokens":5,"messages":[]}`
	messagesOpening := pt.AnthropicStream(0)[:3] // message_start, content_block_start, ping: no content
	tests := []struct {
		name, path, body string
		step             pt.Step
		wantStatus       int
		wantBody         string // the upstream's own error document, or "" for the sidecar's
		wantCode         string // the sidecar's error code when wantBody is ""
	}{
		{name: "chat error before content gives the upstream's error", path: "/chat/completions", body: streamBody,
			step:       pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatError("The server had an error", "server_error", "server_error"))...),
			wantStatus: 500, wantBody: pt.OpenAIError("The server had an error", "server_error", "server_error")},
		{name: "chat role then EOF is an empty stream", path: "/chat/completions", body: streamBody,
			step: pt.SSE(pt.Events(0, pt.ChatRole)...), wantStatus: 502, wantCode: "empty_response"},
		{name: "chat [DONE]-only is an empty stream", path: "/chat/completions", body: streamBody,
			step: pt.SSE(pt.Events(0, pt.Done)...), wantStatus: 502, wantCode: "empty_response"},
		{name: "messages overloaded before content gives the upstream's error", path: "/messages", body: messagesBody,
			step:       pt.SSE(pt.Events(0, messagesOpening[0].Data, pt.AnthropicStreamError("overloaded_error", "Overloaded"))...),
			wantStatus: 529, wantBody: pt.AnthropicError("overloaded_error", "Overloaded")},
		{name: "messages opening then EOF is an empty stream", path: "/messages", body: messagesBody,
			step: pt.SSE(messagesOpening...), wantStatus: 502, wantCode: "empty_response"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := upstream(t, tc.step)
			s := start(t, env(targets(up.URL), noRetries)...)
			r := s.Post(tc.path, tc.body)
			if r.Status != tc.wantStatus || r.Err != nil {
				t.Fatalf("got %d err=%v %q, want %d and a JSON error", r.Status, r.Err, r.Body, tc.wantStatus)
			}
			if ct := r.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q: the client got a stream instead of an error document: %q", ct, r.Body)
			}
			if tc.wantBody != "" && string(r.Body) != tc.wantBody {
				t.Fatalf("body %s, want the upstream's error %s", r.Body, tc.wantBody)
			}
			if tc.wantBody == "" {
				var chat struct{ Error struct{ Type, Code string } }
				var anth struct {
					Type  string
					Error struct{ Type, Code string }
				}
				if tc.path == "/messages" {
					if json.Unmarshal(r.Body, &anth) != nil || anth.Type != "error" || anth.Error.Type != "api_error" || anth.Error.Code != tc.wantCode {
						t.Fatalf("not a Messages error with code %s: %s", tc.wantCode, r.Body)
					}
				} else if json.Unmarshal(r.Body, &chat) != nil || chat.Error.Type != "failover_error" || chat.Error.Code != tc.wantCode {
					t.Fatalf("not a chat error with code %s: %s", tc.wantCode, r.Body)
				}
			}
			if r.Header.Get("X-Failover-Target") != "t0" || r.Header.Get("X-Failover-Attempts") != "1" {
				t.Errorf("headers %v", r.Header)
			}
			if rec := s.WaitLedger(1)[0]; rec["outcome"] != "exhausted" || rec["status"].(float64) != float64(tc.wantStatus) {
				t.Errorf("ledger %v", rec)
			}
		})
	}
}

func TestMaxElapsedNeverCutsACommittedStream(t *testing.T) {
	t.Parallel()
	// About 1 s of content against a 300 ms budget: the budget is only checked before an
	// attempt starts, so the committed stream runs to its terminal event.
	words := make([]string, 8)
	for i := range words {
		words[i] = fmt.Sprintf("w%d ", i)
	}
	chunks := pt.ChatStream(100*time.Millisecond, words...)
	a := upstream(t, pt.SSE(chunks...))
	b := upstream(t, pt.SSE(pt.ChatStream(0, "second")...))
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_MAX_ELAPSED=300ms", "FAILOVER_IDLE_TIMEOUT=5s"})...)
	begin := time.Now()
	r := s.Post("/chat/completions", streamBody)
	took := time.Since(begin)
	if r.Status != 200 || r.Err != nil || string(r.Body) != joined(chunks) {
		t.Fatalf("got %d err=%v after %v:\n%q\nwant the whole stream:\n%q", r.Status, r.Err, took, r.Body, joined(chunks))
	}
	if took < 300*time.Millisecond {
		t.Fatalf("the stream took %v: it did not outlast the budget, so the test proves nothing", took)
	}
	if b.Calls() != 0 {
		t.Fatalf("second target called %d times", b.Calls())
	}
	if rec := s.WaitLedger(1)[0]; rec["outcome"] != "ok" {
		t.Errorf("ledger %v", rec)
	}
	if len(s.Records("routing_transfer_limit_reached")) != 0 {
		t.Error("the elapsed budget fired on a committed stream")
	}
}

// A stream whose last chunk arrives split ("0;ext=1", a chunk extension, then its line end a
// moment later) right behind the events that finish it: what was read goes to the client at
// once. Looking for the body's end in what is buffered must never wait for the upstream.
func TestStreamEndingWithAnIncompleteLastChunk(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	delivered := make(chan struct{})
	release := sync.OnceFunc(func() { close(delivered) })
	t.Cleanup(release)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		ev := pt.ChatRole + pt.ChatDelta("Hello") + pt.Done
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0;ext=1", len(ev), ev)
		select {
		case <-delivered: // the rest only once the client has the events
		case <-time.After(5 * time.Second):
		}
		c.Write([]byte("\r\n\r\n"))
	}()
	s := start(t, "FAILOVER_TARGET_0_URL=http://"+ln.Addr().String()+"/v1")
	req, _ := http.NewRequest("POST", s.URL+"/chat/completions", strings.NewReader(streamBody))
	got, tail := make(chan string, 1), make(chan error, 1)
	go func() {
		var seen strings.Builder
		resp, err := sidecar.Client.Do(req)
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for !strings.Contains(seen.String(), pt.Done) {
			line, err := br.ReadString('\n')
			seen.WriteString(line)
			if err != nil {
				break
			}
		}
		got <- seen.String()
		<-delivered
		rest, err := io.ReadAll(br)
		if err == nil && len(rest) != 0 {
			err = fmt.Errorf("%q after [DONE]", rest)
		}
		tail <- err
	}()
	select {
	case events := <-got:
		if !strings.Contains(events, "Hello") || !strings.HasSuffix(events, pt.Done) {
			t.Fatalf("the stream ended early: %q", events)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the events read waited for the rest of the upstream's last chunk")
	}
	release()
	if err := <-tail; err != nil {
		t.Fatalf("want a clean end: %v", err)
	}
}

// A stream compressed although the sidecar asked for identity cannot be read before commit:
// it goes through at headers, bytes and Content-Encoding as sent, instead of being taken for
// a stream without events (an "empty" one, a transfer, and in the end a 502 for a target
// that answered).
func TestCompressedStreamGoesThroughAtHeaders(t *testing.T) {
	t.Parallel()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(joined(pt.ChatStream(0, "Hello"))))
	zw.Close()
	step := pt.SSE(pt.Chunk{Data: z.String()})
	step.Header = append(step.Header, "Content-Encoding: gzip")
	a, b := upstream(t, step), upstream(t)
	s := start(t, targets(a.URL, b.URL)...)
	req, _ := http.NewRequest("POST", s.URL+"/chat/completions", strings.NewReader(streamBody))
	req.Header.Set("Accept-Encoding", "gzip") // as sent, not decoded by the client library
	resp, err := sidecar.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" || string(body) != z.String() {
		t.Fatalf("%d, Content-Encoding %q, %d bytes (%v): want the target's compressed stream as sent",
			resp.StatusCode, resp.Header.Get("Content-Encoding"), len(body), err)
	}
	if b.Calls() != 0 {
		t.Errorf("a compressed stream was transferred")
	}
	if rec := s.WaitLedger(1)[0]; rec["outcome"] != "ok" {
		t.Errorf("record %v", rec)
	}
	if got := metric(s.ScrapeMetrics(), `failover_stream_commits_total{reason="headers"}`); got != 1 {
		t.Errorf("stream commits at headers: %v, want 1", got)
	}
}

// llama.cpp's server sent a streamed failure as a non-standard `error:` field, then
// `data: [DONE]`, until ggml-org/llama.cpp#16109 (recorded in
// testdata/sse/chat/llamacpp_error_field.sse; the bytes coddy-project/coddy-agent#106 quotes).
// The failure is judged with the status it carries, like any in-stream error: it is no empty
// stream that every target is tried on. It says the prompt exceeds the context size, so it
// goes only to a target that sends another model (docs/decisions.md, The decision order, rule 5b), and
// with none it stops with its 400, the caller's to fix.
func TestStreamLlamaCppErrorField(t *testing.T) {
	t.Parallel()
	recorded, err := os.ReadFile("../testdata/sse/chat/llamacpp_error_field.sse")
	if err != nil {
		t.Fatal(err)
	}
	second := pt.ChatStream(0, "from ", "second")
	t.Run("without a bigger model the 400 stops with its status", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, pt.SSE(pt.Chunk{Data: string(recorded)}))
		b := upstream(t, pt.SSE(second...))
		s := start(t, targets(a.URL, b.URL)...)
		r := s.Post("/chat/completions", streamBody)
		if r.Status != 400 || b.Calls() != 0 {
			t.Fatalf("client got %d %s; second target called %d times", r.Status, r.Body, b.Calls())
		}
		// The bare error object goes back in the family's shape, its message with it.
		var doc struct {
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(r.Body, &doc); err != nil || doc.Error.Code != 400 || !strings.Contains(doc.Error.Message, "exceeds the available context size") {
			t.Errorf("body %s (%v): want the provider's error wrapped as {\"error\": ...}", r.Body, err)
		}
	})
	t.Run("a target with a bigger model takes it", func(t *testing.T) {
		t.Parallel()
		a := upstream(t, pt.SSE(pt.Chunk{Data: string(recorded)}))
		b := upstream(t, pt.SSE(second...))
		s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_TARGET_1_MODEL=qwen-long-context"})...)
		r := s.Post("/chat/completions", streamBody)
		if r.Status != 200 || string(r.Body) != joined(second) || a.Calls() != 1 || b.Calls() != 1 {
			t.Fatalf("client got %d %q; calls a=%d b=%d", r.Status, r.Body, a.Calls(), b.Calls())
		}
		if ledger := s.WaitLedger(1)[0]["ledger"].([]any); ledger[0].(map[string]any)["action"] != "transfer" {
			t.Fatalf("ledger %v", ledger)
		}
	})
}

// records returns the records of the SSE fixture testdata/sse/<family>/<name>, each with its
// blank line.
func records(t *testing.T, family, name string) []string {
	t.Helper()
	b, err := os.ReadFile("../testdata/sse/" + family + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	recs := strings.SplitAfter(string(b), "\n\n")
	if recs[len(recs)-1] == "" {
		recs = recs[:len(recs)-1]
	}
	return recs
}

// A chat or legacy completions stream whose upstream ends cleanly after a chunk with a
// non-null finish_reason (usage-only chunks may follow) is complete without [DONE]: no error
// event, a terminated chunked body, outcome ok. An other stream is also complete after an event
// whose type ends in ".done" (OpenAI's audio streams). Without them a clean end is still an
// interruption. The finish chunk counts wherever it arrives: held before commit, after it, or
// with the whole stream before commit (docs/streams.md, Streams).
func TestStreamCleanEndAfterFinish(t *testing.T) {
	t.Parallel()
	const (
		completionsBody = `{"model":"Qwen/Qwen2.5-7B-Instruct","prompt":"Say this is a test","max_tokens":7,"stream":true}`
		speechBody      = `{"model":"gpt-4o-mini-tts","input":"Hello","voice":"alloy","stream_format":"sse"}`
		ok, interrupted = "ok", "interrupted"
		upstreamError   = "upstream error" // the upstream's own error event, then an aborted body
	)
	chat := records(t, "chat", "finish_no_done.sse") // role, two deltas, finish, usage
	n2 := records(t, "chat", "n2_no_done.sse")       // two choices; choice 1 finishes in record 7
	completions := records(t, "other", "completions_no_done.sse")
	speech := records(t, "other", "speech.sse")
	// paced sends each record on its own, the last one well after the others: the stream has
	// committed (and gone out as a chunked body) before its end arrives.
	paced := func(recs ...string) []pt.Chunk {
		chunks := pt.Events(20*time.Millisecond, recs...)
		chunks[len(chunks)-1].Delay = 150 * time.Millisecond
		return chunks
	}
	whole := func(recs ...string) pt.Step {
		return pt.Step{Status: 200, Header: []string{"Content-Type: text/event-stream"}, Body: strings.Join(recs, "")}
	}
	tests := []struct {
		name, path, body, family string
		step                     pt.Step
		extra                    []string
		shown                    []string // what reaches the client before the end, when not the whole step
		want                     string
		oneBody                  bool // the whole stream arrived before commit and goes out with a Content-Length
	}{
		{name: "chat: finish_reason after commit, then a usage chunk", path: "/chat/completions", body: streamBody, family: "chat",
			step: pt.SSE(paced(chat...)...), want: ok},
		{name: "chat: finish_reason last, after commit", path: "/chat/completions", body: streamBody, family: "chat",
			step: pt.SSE(paced(chat[:4]...)...), want: ok},
		{name: "chat: finish_reason held before commit, the usage chunk after", path: "/chat/completions", body: streamBody, family: "chat",
			step: pt.SSE(pt.Chunk{Data: strings.Join(chat[:4], "")}, pt.Chunk{Data: chat[4], Delay: 150 * time.Millisecond}), want: ok},
		{name: "chat: the finish chunk is the one that commits", path: "/chat/completions", body: streamBody, family: "chat",
			step: pt.SSE(paced(chat[0], chat[3], chat[4])...), want: ok},
		{name: "chat: finish_reason, then half a usage chunk", path: "/chat/completions", body: streamBody, family: "chat",
			step: pt.SSE(paced(append(chat[:4:4], chat[4][:60])...)...), shown: chat[:4], want: interrupted}, // the half chunk is held back
		{name: "chat: finish_reason, then a stall the sidecar ends", path: "/chat/completions", body: streamBody, family: "chat",
			step:  pt.SSE(append(pt.Events(20*time.Millisecond, chat[:4]...), pt.Chunk{Data: chat[4], Delay: 3 * time.Second})...),
			extra: []string{"FAILOVER_IDLE_TIMEOUT=300ms"}, shown: chat[:4], want: interrupted},
		{name: "chat: finish_reason in a whole stream before commit", path: "/chat/completions", body: streamBody, family: "chat",
			step: whole(chat...), want: ok, oneBody: true},
		{name: "chat: n=2, both choices finished", path: "/chat/completions", body: streamBody, family: "chat",
			step: pt.SSE(paced(n2...)...), want: ok},
		{name: "chat: n=2, one choice finished, the other still going", path: "/chat/completions", body: streamBody, family: "chat",
			step: pt.SSE(paced(n2[:6]...)...), want: interrupted},
		{name: "chat: no finish_reason", path: "/chat/completions", body: streamBody, family: "chat",
			step: pt.SSE(paced(chat[:3]...)...), want: interrupted},
		{name: "chat: no finish_reason in a whole stream before commit", path: "/chat/completions", body: streamBody, family: "chat",
			step: whole(chat[:3]...), want: interrupted},
		{name: "chat: an error event after the finish chunk", path: "/chat/completions", body: streamBody, family: "chat",
			step: pt.SSE(paced(append(chat[:4:4], pt.ChatError("The server had an error", "server_error", "server_error"))...)...), want: upstreamError},
		{name: "completions: finish_reason, then a usage chunk", path: "/completions", body: completionsBody, family: "other",
			step: pt.SSE(paced(completions...)...), want: ok},
		{name: "completions: finish_reason in a whole stream before commit", path: "/completions", body: completionsBody, family: "other",
			step: whole(completions...), want: ok, oneBody: true},
		{name: "completions: no finish_reason", path: "/completions", body: completionsBody, family: "other",
			step: pt.SSE(paced(completions[:1]...)...), want: interrupted},
		{name: "completions: no finish_reason in a whole stream before commit", path: "/completions", body: completionsBody, family: "other",
			step: whole(completions[:1]...), want: interrupted},
		{name: "speech: speech.audio.done last", path: "/audio/speech", body: speechBody, family: "other",
			step: pt.SSE(paced(speech...)...), want: ok},
		{name: "speech: audio deltas only", path: "/audio/speech", body: speechBody, family: "other",
			step: pt.SSE(paced(speech[0], speech[0])...), want: interrupted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := upstream(t, tc.step)
			s := start(t, env(targets(up.URL), tc.extra)...)
			// Speech asks for SSE with stream_format, not "stream": the Accept header makes it a stream.
			r := s.Post(tc.path, tc.body, "Accept: text/event-stream")
			sent := string(tc.step.BodyBytes())
			if tc.shown != nil {
				sent = strings.Join(tc.shown, "")
			}
			if r.Status != 200 || !strings.HasPrefix(string(r.Body), sent) {
				t.Fatalf("got %d %q, want the upstream's stream first:\n%q", r.Status, r.Body, sent)
			}
			rec := s.WaitLedger(1)[0]
			switch tc.want {
			case ok:
				if r.Err != nil || string(r.Body) != sent {
					t.Fatalf("want a clean end and the stream as sent: err %v, body %q", r.Err, r.Body)
				}
				if got, want := r.Header.Get("Content-Length"), map[bool]string{true: strconv.Itoa(len(sent))}[tc.oneBody]; got != want {
					t.Errorf("Content-Length %q, want %q (a chunked body unless the whole stream came before commit)", got, want)
				}
			case interrupted:
				if r.Err == nil || !strings.Contains(string(r.Body[len(sent):]), `"code":"stream_interrupted"`) {
					t.Fatalf("want the final error event and an aborted body: err %v, body %q", r.Err, r.Body)
				}
			case upstreamError:
				if r.Err == nil || string(r.Body) != sent {
					t.Fatalf("want the upstream's error event alone and an aborted body: err %v, body %q", r.Err, r.Body)
				}
			}
			outcome := "partial"
			if tc.want == ok {
				outcome = "ok"
			}
			if rec["outcome"] != outcome || rec["family"] != tc.family {
				t.Errorf("record %v, want outcome %s for family %s", rec, outcome, tc.family)
			}
			series := fmt.Sprintf(`failover_requests_total{family=%q,outcome=%q}`, tc.family, outcome)
			if got := metric(s.ScrapeMetrics(), series); got != 1 {
				t.Errorf("%s = %v, want 1", series, got)
			}
		})
	}
}
