package proxy_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"testing"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

func TestPassthroughIsByteIdentical(t *testing.T) {
	t.Parallel()
	body := pt.ChatCompletion("Hello there")
	up := upstream(t, pt.JSON(200, body, "X-Upstream-Trace: abc", "Openai-Processing-Ms: 12"))
	s := start(t, targets(up.URL)...)
	r := s.Post("/chat/completions", chatBody)
	if r.Status != 200 || string(r.Body) != body {
		t.Fatalf("got %d %q", r.Status, r.Body)
	}
	if r.Header.Get("X-Upstream-Trace") != "abc" || r.Header.Get("Openai-Processing-Ms") != "12" {
		t.Errorf("upstream headers not passed: %v", r.Header)
	}
	if r.Header.Get("X-Failover-Target") != "t0" || r.Header.Get("X-Failover-Attempts") != "1" || r.Header.Get("X-Request-Id") == "" {
		t.Errorf("failover headers: %v", r.Header)
	}
	if r.Header.Get("X-Failover-Model") != "" {
		t.Errorf("X-Failover-Model set without substitution")
	}
	got := up.Requests()[0]
	if string(got.Body) != chatBody || got.Method != "POST" || got.URI != "/v1/chat/completions" {
		t.Errorf("upstream got %s %s %q", got.Method, got.URI, got.Body)
	}
	if got.Header["Accept-Encoding"] != "identity" || got.Header["X-Failover-Attempt"] != "1" || got.Header["X-Request-Id"] != r.Header.Get("X-Request-Id") {
		t.Errorf("upstream headers: %v", got.Header)
	}
}

func TestTransferAndStop(t *testing.T) {
	t.Parallel()
	modelNotFound := pt.OpenAIError("The model `gpt-9` does not exist or you do not have access to it.", "invalid_request_error", "model_not_found")
	badRequest := pt.OpenAIError("Invalid 'messages': empty array.", "invalid_request_error", "invalid_value")
	tests := []struct {
		name        string
		first       pt.Step
		firstURL    string // instead of the first upstream
		extra       []string
		wantStatus  int
		wantBody    string
		secondCalls int
	}{
		{name: "503 transfers", first: pt.JSON(503, pt.OpenAIError("overloaded", "server_error", "")), wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "429 transfers", first: pt.JSON(429, pt.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded")), wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "400 stops and is returned unchanged", first: pt.JSON(400, badRequest, "X-Upstream: first"), wantStatus: 400, wantBody: badRequest, secondCalls: 0},
		{name: "model not found 404 transfers", first: pt.JSON(404, modelNotFound), wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "plain 404 stops", first: pt.JSON(404, pt.OpenAIError("Unknown endpoint", "invalid_request_error", "")), wantStatus: 404, wantBody: pt.OpenAIError("Unknown endpoint", "invalid_request_error", ""), secondCalls: 0},
		{name: "refused port transfers", firstURL: pt.RefusedURL(), wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "reset transfers", first: pt.Step{Fault: pt.FaultReset}, wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "custom statuses replace the default",
			first: pt.JSON(500, pt.OpenAIError("boom", "server_error", "")), extra: []string{"FAILOVER_RETRY_ON_STATUSES=503"},
			wantStatus: 500, wantBody: pt.OpenAIError("boom", "server_error", ""), secondCalls: 0},
		{name: "custom status list keeps its own",
			first: pt.JSON(503, pt.OpenAIError("busy", "server_error", "")), extra: []string{"FAILOVER_RETRY_ON_STATUSES=503"},
			wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "custom phrase with a status word matches that status",
			first: pt.JSON(409, pt.OpenAIError("No capacity in region", "conflict", "")), extra: []string{"FAILOVER_RETRY_ON_ERRORS=409 capacity"},
			wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "custom phrase with a status word ignores other statuses",
			first: pt.JSON(400, pt.OpenAIError("No capacity in region", "conflict", "")), extra: []string{"FAILOVER_RETRY_ON_ERRORS=409 capacity"},
			wantStatus: 400, wantBody: pt.OpenAIError("No capacity in region", "conflict", ""), secondCalls: 0},
		{name: "stop rule stops a 503",
			first: pt.JSON(503, pt.OpenAIError("context_length_exceeded upstream", "server_error", "")), extra: []string{"FAILOVER_STOP_RULE_0_STATUSES=5xx", "FAILOVER_STOP_RULE_0_PATTERN=context_length"},
			wantStatus: 503, wantBody: pt.OpenAIError("context_length_exceeded upstream", "server_error", ""), secondCalls: 0},
		{name: "success rule transfers a 200",
			first: pt.JSON(200, `{"choices":[{"message":{"content":""},"finish_reason":"content_filter"}]}`), extra: []string{"FAILOVER_SUCCESS_RULE_0_PATTERN=content_filter"},
			wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "200 with an empty body transfers", first: pt.JSON(200, ""), wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "200 with an error object transfers", first: pt.JSON(200, `{"error":{"message":"upstream overloaded","code":503}}`), wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "200 with no choices transfers", first: pt.JSON(200, `{"id":"x","object":"chat.completion","choices":[]}`), wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "listed 307 transfers", first: pt.JSON(307, `{"moved":true}`), extra: []string{"FAILOVER_RETRY_ON_STATUSES=307,429,5xx"},
			wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "unlisted 307 is returned unchanged", first: pt.JSON(307, `{"moved":true}`), wantStatus: 307, wantBody: `{"moved":true}`, secondCalls: 0},
		{name: "200 with an empty body transfers whatever the status list", first: pt.JSON(200, ""), extra: []string{"FAILOVER_RETRY_ON_STATUSES=429,503"},
			wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "200 with no choices transfers whatever the status list", first: pt.JSON(200, `{"id":"x","object":"chat.completion","choices":[]}`), extra: []string{"FAILOVER_RETRY_ON_STATUSES=429,503"},
			wantStatus: 200, wantBody: pt.ChatCompletion("second"), secondCalls: 1},
		{name: "disabled failover returns the first answer", first: pt.JSON(503, pt.OpenAIError("busy", "server_error", "")), extra: []string{"FAILOVER_ENABLED=false"},
			wantStatus: 503, wantBody: pt.OpenAIError("busy", "server_error", ""), secondCalls: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			first := upstream(t, tc.first)
			second := upstream(t, pt.JSON(200, pt.ChatCompletion("second")))
			url := first.URL
			if tc.firstURL != "" {
				url = tc.firstURL
			}
			s := start(t, env(targets(url, second.URL), noRetries, tc.extra)...)
			r := s.Post("/chat/completions", chatBody)
			if r.Status != tc.wantStatus || string(r.Body) != tc.wantBody {
				t.Fatalf("got %d %s\nwant %d %s", r.Status, r.Body, tc.wantStatus, tc.wantBody)
			}
			if second.Calls() != tc.secondCalls {
				t.Fatalf("second target called %d times, want %d", second.Calls(), tc.secondCalls)
			}
			wantAttempts := "1"
			if tc.secondCalls == 1 {
				wantAttempts = "2"
			}
			if r.Header.Get("X-Failover-Attempts") != wantAttempts {
				t.Errorf("X-Failover-Attempts = %q, want %s", r.Header.Get("X-Failover-Attempts"), wantAttempts)
			}
			recs := s.Ledger()
			if len(recs) != 1 {
				t.Fatalf("%d ledger records, want 1", len(recs))
			}
		})
	}
}

func TestExhaustionReturnsTheLastError(t *testing.T) {
	t.Parallel()
	a := upstream(t, pt.JSON(503, pt.OpenAIError("first is down", "server_error", "")))
	b := upstream(t, pt.JSON(502, `<html>bad gateway from b</html>`, "X-From: b"))
	s := start(t, env(targets(a.URL, b.URL), noRetries)...)
	r := s.Post("/chat/completions", chatBody)
	if r.Status != 502 || string(r.Body) != `<html>bad gateway from b</html>` || r.Header.Get("X-From") != "b" {
		t.Fatalf("got %d %q %v", r.Status, r.Body, r.Header)
	}
	if r.Header.Get("X-Failover-Attempts") != "2" || r.Header.Get("X-Failover-Target") != "t1" {
		t.Errorf("headers %v", r.Header)
	}
	rec := s.Ledger()[0]
	if rec["outcome"] != "exhausted" || rec["status"].(float64) != 502 {
		t.Errorf("ledger %v", rec)
	}
	last := rec["ledger"].([]any)[1].(map[string]any)
	if last["action"] != "stop" || last["reason"] != "exhausted" {
		t.Errorf("the last attempt says %v/%v; nothing followed it", last["action"], last["reason"])
	}
}

// The last error, when it is larger than FAILOVER_MAX_RESPONSE_BYTES, goes back piped like a
// committed stream; broken on the way, it ends as partial, and its ledger entry says committed.
func TestExhaustionPastTheResponseBufferIsCommitted(t *testing.T) {
	t.Parallel()
	big := pt.JSON(503, pt.OpenAIError(strings.Repeat("the server is overloaded ", 200), "server_error", ""))
	big.Fault, big.FaultBytes = pt.FaultResetAfter, strings.Index(string(big.Raw()), "\r\n\r\n")+4+2048
	up := upstream(t, big)
	s := start(t, env(targets(up.URL), noRetries, []string{"FAILOVER_MAX_RESPONSE_BYTES=1KiB"})...)
	r := s.Post("/chat/completions", chatBody)
	if r.Status != 503 || r.Err == nil || !bytes.HasPrefix(big.BodyBytes(), r.Body) {
		t.Fatalf("got %d (%d bytes, err %v), want the first bytes of the 503 and a broken body", r.Status, len(r.Body), r.Err)
	}
	rec := s.WaitLedger(1)[0]
	last := rec["ledger"].([]any)[0].(map[string]any)
	if rec["outcome"] != "partial" || last["class"] != "interrupted" || last["phase"] != "committed" {
		t.Errorf("outcome %v, attempt %v: want partial, interrupted in phase committed", rec["outcome"], last)
	}
}

func TestExhaustionWithoutAnswerIsFamilyShaped(t *testing.T) {
	t.Parallel()
	s := start(t, targets(pt.RefusedURL(), pt.RefusedURL())...)
	r := s.Post("/chat/completions", chatBody)
	var doc struct {
		Error struct{ Type, Code, Message string }
	}
	if r.Status != 502 || json.Unmarshal(r.Body, &doc) != nil || doc.Error.Code != "upstream_unreachable" || doc.Error.Type != "failover_error" {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	r = s.Post("/messages", `{"model":"claude","max_tokens":5,"messages":[]}`)
	var anth struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if r.Status != 502 || json.Unmarshal(r.Body, &anth) != nil || anth.Type != "error" || anth.Error.Type != "api_error" {
		t.Fatalf("messages: got %d %s", r.Status, r.Body)
	}
}

func TestExhaustionByTimeoutIs504FamilyShaped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, body string
		code             func(body []byte) (string, bool) // the error code, and whether the shape is the family's
	}{
		{"chat", "/chat/completions", chatBody, func(b []byte) (string, bool) {
			var doc struct {
				Error struct{ Type, Code, Message string }
			}
			ok := json.Unmarshal(b, &doc) == nil && doc.Error.Type == "failover_error" && doc.Error.Message != ""
			return doc.Error.Code, ok
		}},
		{"messages", "/messages", `{"model":"claude","max_tokens":5,"messages":[]}`, func(b []byte) (string, bool) {
			var doc struct {
				Type  string
				Error struct{ Type, Code, Message string }
			}
			ok := json.Unmarshal(b, &doc) == nil && doc.Type == "error" && doc.Error.Type == "api_error" && doc.Error.Message != ""
			return doc.Error.Code, ok
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			first := upstream(t, pt.JSON(503, pt.OpenAIError("first is down", "server_error", "")))
			last := upstream(t, pt.Step{Fault: pt.FaultStall})
			s := start(t, env(targets(first.URL, last.URL), noRetries, []string{"FAILOVER_ATTEMPT_TIMEOUT=200ms"})...)
			r := s.Post(tc.path, tc.body)
			code, shaped := tc.code(r.Body)
			if r.Status != 504 || code != "upstream_timeout" || !shaped {
				t.Fatalf("got %d %s, want 504 upstream_timeout in the %s shape", r.Status, r.Body, tc.name)
			}
			if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Failover-Attempts") != "2" {
				t.Errorf("headers %v", r.Header)
			}
			rec := s.Ledger()[0]
			last0 := rec["ledger"].([]any)[1].(map[string]any)
			if rec["outcome"] != "exhausted" || last0["class"] != "timeout" || last0["target"] != "t1" {
				t.Errorf("ledger %v", rec)
			}
		})
	}
}

func TestUpstreamSeesOneRequestIDAndNumberedAttempts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header []string
		wantID string // "" for a generated one
	}{
		{"the client's X-Request-Id", []string{"X-Request-Id: req-test-0042"}, "req-test-0042"},
		{"a generated X-Request-Id", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := upstream(t, pt.JSON(503, pt.OpenAIError("down", "server_error", "")))
			b := upstream(t)
			s := start(t, env(targets(a.URL, b.URL), noRetries)...)
			r := s.Post("/chat/completions", chatBody, tc.header...)
			if r.Status != 200 || a.Calls() != 1 || b.Calls() != 1 {
				t.Fatalf("status %d, calls a=%d b=%d", r.Status, a.Calls(), b.Calls())
			}
			id := r.Header.Get("X-Request-Id")
			if id == "" || tc.wantID != "" && id != tc.wantID {
				t.Fatalf("answer's X-Request-Id %q, want %q", id, tc.wantID)
			}
			for i, got := range []map[string]string{a.Requests()[0].Header, b.Requests()[0].Header} {
				if got["X-Request-Id"] != id || got["X-Failover-Attempt"] != strconv.Itoa(i+1) {
					t.Errorf("attempt %d reached the upstream with X-Request-Id %q and X-Failover-Attempt %q, want %q and %d",
						i+1, got["X-Request-Id"], got["X-Failover-Attempt"], id, i+1)
				}
			}
		})
	}
}

func TestMaxAttemptsCountsTransfers(t *testing.T) {
	t.Parallel()
	var ups []string
	var all []*pt.Upstream
	for range 3 {
		u := upstream(t, pt.JSON(503, pt.OpenAIError("down", "server_error", "")))
		all = append(all, u)
		ups = append(ups, u.URL)
	}
	s := start(t, env(targets(ups...), noRetries, []string{"FAILOVER_MAX_ATTEMPTS=1"})...)
	r := s.Post("/chat/completions", chatBody)
	calls := all[0].Calls() + all[1].Calls() + all[2].Calls()
	if calls != 2 || all[2].Calls() != 0 {
		t.Fatalf("%d upstream calls (%d,%d,%d), want 2", calls, all[0].Calls(), all[1].Calls(), all[2].Calls())
	}
	if r.Status != 503 {
		t.Fatalf("status %d", r.Status)
	}
	if rec := s.Ledger()[0]; rec["outcome"] != "budget_exhausted" {
		t.Errorf("outcome %v", rec["outcome"])
	}
	if len(s.Records("routing_transfer_limit_reached")) != 1 {
		t.Errorf("no routing_transfer_limit_reached event")
	}
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	t.Run("the upstream receives the target's key and never the client's", func(t *testing.T) {
		t.Parallel()
		up := upstream(t)
		anth := upstream(t)
		s := start(t, env(targets(up.URL), []string{"FAILOVER_TARGET_0_API_KEY=sk-target-secret",
			"FAILOVER_TARGET_1_URL=" + anth.URL, "FAILOVER_TARGET_1_AUTH=x-api-key", "FAILOVER_TARGET_1_API_KEY=anthropic-secret",
			"FAILOVER_TARGET_1_HEADERS=anthropic-version=2023-06-01", "FAILOVER_TARGET_1_PATHS=/v1/messages",
			"FAILOVER_TARGET_0_PATHS=/v1/chat"})...)
		s.Post("/chat/completions", chatBody, "Authorization: Bearer client-key", "X-Api-Key: client-key-2",
			"OpenAI-Organization: org-client", "OpenAI-Project: proj-client")
		got := up.Requests()[0].Header
		if got["Authorization"] != "Bearer sk-target-secret" || got["X-Api-Key"] != "" {
			t.Fatalf("upstream headers %v", got)
		}
		// The organisation and project scope the client's key: with the target's key they would
		// be answered 401, and a 401 to a target's own key ejects the target.
		if got["Openai-Organization"] != "" || got["Openai-Project"] != "" {
			t.Fatalf("the client's organisation or project went with the target's key: %v", got)
		}
		s.Post("/messages", `{"model":"claude","messages":[]}`, "X-Api-Key: client-key")
		got = anth.Requests()[0].Header
		if got["X-Api-Key"] != "anthropic-secret" || got["Authorization"] != "" || got["Anthropic-Version"] != "2023-06-01" {
			t.Fatalf("anthropic headers %v", got)
		}
		if strings.Contains(s.Log.String(), "secret") || strings.Contains(s.Log.String(), "client-key") {
			t.Fatalf("a key reached the log:\n%s", s.Log.String())
		}
	})
	t.Run("without a key the client's credentials are forwarded", func(t *testing.T) {
		t.Parallel()
		up := upstream(t)
		s := start(t, targets(up.URL)...)
		s.Post("/chat/completions", chatBody, "Authorization: Bearer client-own-key", "OpenAI-Organization: org-client")
		if h := up.Requests()[0].Header; h["Authorization"] != "Bearer client-own-key" || h["Openai-Organization"] != "org-client" {
			t.Fatalf("headers %v", h)
		}
	})
	t.Run("the inbound token is checked and never forwarded", func(t *testing.T) {
		t.Parallel()
		up := upstream(t)
		s := start(t, env(targets(up.URL), []string{"FAILOVER_INBOUND_TOKEN=local-token"})...)
		if r := s.Post("/chat/completions", chatBody); r.Status != 401 {
			t.Fatalf("no token: %d", r.Status)
		}
		if r := s.Post("/chat/completions", chatBody, "Authorization: Bearer wrong"); r.Status != 401 {
			t.Fatalf("wrong token: %d", r.Status)
		}
		r := s.Post("/chat/completions", chatBody, "X-Api-Key: local-token", "Authorization: Bearer provider-key")
		if r.Status != 200 || up.Calls() != 1 {
			t.Fatalf("with token: %d", r.Status)
		}
		h := up.Requests()[0].Header
		if h["X-Api-Key"] != "" || h["Authorization"] != "Bearer provider-key" {
			t.Fatalf("upstream headers %v", h)
		}
	})
	t.Run("401 with the target's own key ejects and transfers", func(t *testing.T) {
		t.Parallel()
		bad := upstream(t, pt.JSON(401, pt.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key")))
		good := upstream(t)
		s := start(t, env(targets(bad.URL, good.URL), []string{"FAILOVER_TARGET_0_API_KEY=sk-revoked", "FAILOVER_TARGET_1_API_KEY=sk-good"})...)
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 {
			t.Fatalf("status %d", r.Status)
		}
		s.Post("/chat/completions", chatBody)
		if bad.Calls() != 1 || good.Calls() != 2 {
			t.Fatalf("calls bad=%d good=%d: an ejected target must be skipped", bad.Calls(), good.Calls())
		}
		if len(s.Records("target_ejected")) != 1 {
			t.Errorf("target_ejected events: %d", len(s.Records("target_ejected")))
		}
	})
	t.Run("401 with the client's credentials is the caller's", func(t *testing.T) {
		t.Parallel()
		bad := upstream(t, pt.JSON(401, pt.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key")))
		good := upstream(t)
		s := start(t, targets(bad.URL, good.URL)...)
		if r := s.Post("/chat/completions", chatBody); r.Status != 401 || good.Calls() != 0 {
			t.Fatalf("status %d, second called %d", r.Status, good.Calls())
		}
	})
}

func TestModelSubstitutionChangesOnlyTheModel(t *testing.T) {
	t.Parallel()
	a := upstream(t, pt.JSON(503, pt.OpenAIError("down", "server_error", "")))
	b := upstream(t)
	s := start(t, env(targets(a.URL, b.URL), []string{"FAILOVER_TARGET_1_MODEL=claude-sonnet-4"})...)
	body := "{ \"messages\" : [{\"role\":\"user\",\"content\":\"model \\\"x\\\"\"}],\n  \"model\":  \"gpt-4o\" , \"temperature\":0.20, \"extra\":{\"model\":\"nested\"}}"
	r := s.Post("/chat/completions", body)
	if r.Status != 200 || r.Header.Get("X-Failover-Model") != "claude-sonnet-4" {
		t.Fatalf("status %d, X-Failover-Model %q", r.Status, r.Header.Get("X-Failover-Model"))
	}
	want := strings.Replace(body, `"gpt-4o"`, `"claude-sonnet-4"`, 1)
	if got := string(b.Requests()[0].Body); got != want {
		t.Fatalf("substituted body:\n%s\nwant\n%s", got, want)
	}
	if got := string(a.Requests()[0].Body); got != body {
		t.Fatalf("first target got a changed body: %s", got)
	}
	rec := s.Ledger()[0]
	if rec["model"] != "gpt-4o" || rec["served_model"] != "claude-sonnet-4" {
		t.Errorf("ledger %v", rec)
	}
	// Without substitution the served model is the requested one, and no header says so.
	plain := start(t, targets(b.URL)...)
	if r := plain.Post("/chat/completions", chatBody); r.Header.Get("X-Failover-Model") != "" {
		t.Errorf("X-Failover-Model %q without a substitution", r.Header.Get("X-Failover-Model"))
	}
	if rec := plain.Ledger()[0]; rec["model"] == nil || rec["served_model"] != rec["model"] {
		t.Errorf("model %v, served_model %v: want the requested model served", rec["model"], rec["served_model"])
	}
}

// Whatever the answer of a target that substitutes the model (its success, its error passed
// through, or the sidecar's error about its empty or failed answer), the client's
// X-Failover-Model and the record's served_model name the model it was asked for.
func TestSubstitutedModelIsReportedOnEveryAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		step       pt.Step
		body       string
		wantStatus int
	}{
		{"an error passed through", pt.JSON(400, pt.OpenAIError("bad", "invalid_request_error", "")), chatBody, 400},
		{"a 200 with an empty body", pt.JSON(200, ""), chatBody, 502},
		{"an in-stream error before content", pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatError("The server had an error", "server_error", "server_error"))...), streamBody, 500},
		{"an empty stream", pt.SSE(pt.Events(0, pt.ChatRole, pt.Done)...), streamBody, 502},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := upstream(t, tc.step)
			s := start(t, env(targets(up.URL), []string{"FAILOVER_TARGET_0_MODEL=claude-sonnet-4"})...)
			r := s.Post("/chat/completions", tc.body)
			if r.Status != tc.wantStatus || r.Header.Get("X-Failover-Target") != "t0" {
				t.Fatalf("got %d from %q, want %d from t0", r.Status, r.Header.Get("X-Failover-Target"), tc.wantStatus)
			}
			if got := r.Header.Get("X-Failover-Model"); got != "claude-sonnet-4" {
				t.Errorf("X-Failover-Model %q, want the substituted model", got)
			}
			if rec := s.WaitLedger(1)[0]; rec["served_model"] != "claude-sonnet-4" || rec["model"] != "gpt-4o-mini" {
				t.Errorf("model %v, served_model %v: want gpt-4o-mini served as claude-sonnet-4", rec["model"], rec["served_model"])
			}
		})
	}
}

func TestLargeBodyIsReplayedIdentical(t *testing.T) {
	t.Parallel()
	a := upstream(t, pt.JSON(503, "busy"))
	b := upstream(t)
	s := start(t, targets(a.URL, b.URL)...)
	filler := make([]byte, 1<<20)
	rand.Read(filler)
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("x", 16) + `"}],"blob":"` +
		string(bytes.Map(func(r rune) rune { return 'a' + r%26 }, filler)) + `"}`
	r := s.Post("/chat/completions", body)
	if r.Status != 200 {
		t.Fatalf("status %d", r.Status)
	}
	if !bytes.Equal(a.Requests()[0].Body, []byte(body)) || !bytes.Equal(b.Requests()[0].Body, []byte(body)) {
		t.Fatal("a 1 MiB body was not replayed byte for byte")
	}
}

func TestMultipartPassesUntouched(t *testing.T) {
	t.Parallel()
	a := upstream(t, pt.JSON(503, "busy"))
	b := upstream(t, pt.JSON(200, `{"text":"hello"}`))
	s := start(t, targets(a.URL, b.URL)...)
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	w.WriteField("model", "whisper-1")
	fw, _ := w.CreateFormFile("file", "audio.wav")
	audio := make([]byte, 64<<10)
	rand.Read(audio)
	fw.Write(audio)
	w.Close()
	req, _ := http.NewRequest("POST", s.URL+"/audio/transcriptions", bytes.NewReader(buf.Bytes()))
	req.Header.Set("Content-Type", w.FormDataContentType())
	r := s.Do(req)
	if r.Status != 200 || string(r.Body) != `{"text":"hello"}` {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
	got := b.Requests()[0]
	if !bytes.Equal(got.Body, buf.Bytes()) || got.Header["Content-Type"] != w.FormDataContentType() {
		t.Fatal("multipart body or content type changed")
	}
}

// A multipart upload reaches the target byte for byte whatever its layout: the file part
// before the fields (as openai-node writes an object whose first key is file), part headers
// of its own (audio/mpeg), and a file past 16 MiB, which must not need a writable temporary
// directory (a read-only root filesystem is the usual pod security context).
func TestMultipartIsForwardedByteForByte(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()+"/missing") // no temporary file can be created
	tests := []struct {
		name  string
		audio int
	}{
		{"file first with its own content type", 1 << 10},
		{"file past 16 MiB", 17 << 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := upstream(t, pt.JSON(200, `{"text":"hello"}`))
			s := start(t, targets(up.URL)...)
			var buf bytes.Buffer
			w := multipart.NewWriter(&buf)
			fw, _ := w.CreatePart(textproto.MIMEHeader{
				"Content-Disposition": {`form-data; name="file"; filename="speech.mp3"`},
				"Content-Type":        {"audio/mpeg"},
			})
			audio := make([]byte, tc.audio)
			rand.Read(audio)
			fw.Write(audio)
			for _, kv := range [][2]string{{"model", "whisper-1"}, {"language", "en"}, {"response_format", "verbose_json"}, {"timestamp_granularities[]", "word"}} {
				w.WriteField(kv[0], kv[1])
			}
			w.Close()
			req, _ := http.NewRequest("POST", s.URL+"/audio/transcriptions", bytes.NewReader(buf.Bytes()))
			req.Header.Set("Content-Type", w.FormDataContentType())
			if r := s.Do(req); r.Status != 200 || up.Calls() != 1 {
				t.Fatalf("got %d %s, %d upstream calls", r.Status, r.Body, up.Calls())
			}
			if got := up.Requests()[0].Body; !bytes.Equal(got, buf.Bytes()) {
				t.Fatalf("the upstream got a different body (%d bytes, sent %d): %.120q", len(got), buf.Len(), got)
			}
		})
	}
}

// The rules for provider answers (docs/configuration.md, Rules) that the defaults do not read as intended: credits
// run out as a 402 (OpenRouter, DeepSeek), and a 403 that blocks one user's flagged input
// (OpenRouter's moderation) while the target's own key is fine.
func TestReadmeProviderRules(t *testing.T) {
	t.Parallel()
	rules := []string{"FAILOVER_RETRY_ON_STATUSES=402,429,5xx",
		"FAILOVER_STOP_RULE_0_STATUSES=403", "FAILOVER_STOP_RULE_0_PATTERN=(?i)flagged|moderation",
		"FAILOVER_TARGET_0_API_KEY=sk-a", "FAILOVER_TARGET_1_API_KEY=sk-b"}
	t.Run("402: out of credits transfers", func(t *testing.T) {
		t.Parallel()
		broke := upstream(t, pt.JSON(402, `{"error":{"code":402,"message":"Insufficient credits"}}`))
		good := upstream(t)
		s := start(t, env(targets(broke.URL, good.URL), rules)...)
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 || good.Calls() != 1 {
			t.Fatalf("status %d, second target called %d times", r.Status, good.Calls())
		}
	})
	t.Run("403 for flagged input stops, and ejects nothing", func(t *testing.T) {
		t.Parallel()
		mod := upstream(t, pt.JSON(403, `{"error":{"code":403,"message":"Input was flagged by moderation","metadata":{"reasons":["violence"]}}}`), pt.JSON(200, pt.ChatCompletion("fine")))
		good := upstream(t)
		s := start(t, env(targets(mod.URL, good.URL), rules)...)
		if r := s.Post("/chat/completions", chatBody); r.Status != 403 || good.Calls() != 0 {
			t.Fatalf("status %d, second target called %d times", r.Status, good.Calls())
		}
		if r := s.Post("/chat/completions", chatBody); r.Status != 200 || mod.Calls() != 2 || len(s.Records("target_ejected")) != 0 {
			t.Fatalf("next request: %d, first target called %d times, ejections %v", r.Status, mod.Calls(), s.Records("target_ejected"))
		}
	})
}
