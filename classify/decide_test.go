package classify

import (
	"regexp"
	"testing"
	"time"
)

func mustStatuses(t testing.TB, s string) StatusSet {
	t.Helper()
	set, err := ParseStatusSet(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func mustPhrases(t testing.TB, s string) Phrases {
	t.Helper()
	p, err := ParsePhrases(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func defaultPolicy() *Policy { return NewPolicy(Config{}, nil, nil, 10*time.Second) }

const (
	openAI503        = `{"error":{"message":"The server is overloaded","type":"server_error","code":null}}`
	openAI400        = `{"error":{"message":"Invalid 'messages': empty array","type":"invalid_request_error","param":"messages","code":"invalid_value"}}`
	openAI404Model   = `{"error":{"message":"The model 'gpt-9' does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`
	openAIQuota      = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	openAIRate       = `{"error":{"message":"Rate limit reached for gpt-4o","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	anthropicOver    = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
	anthropicAuth    = `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`
	openAIContext    = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`
	anthropicContext = `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}`
	okChat           = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
)

func TestDecide(t *testing.T) {
	stop := []Rule{
		{Statuses: mustStatuses(t, "400"), Pattern: regexp.MustCompile(`context_length_exceeded`)},
		{Statuses: mustStatuses(t, "529")},
	}
	success := []Rule{{Pattern: regexp.MustCompile(`(?i)content_filter`)}}
	withRules := NewPolicy(Config{}, stop, success, 10*time.Second)
	patternOnly := NewPolicy(Config{}, []Rule{{Pattern: regexp.MustCompile(`do-not-retry`)}}, nil, 10*time.Second)
	custom := NewPolicy(Config{RetryOnStatuses: mustStatuses(t, "503"), RetryOnErrors: mustPhrases(t, "none")}, nil, nil, 10*time.Second)
	phrase404 := NewPolicy(Config{RetryOnErrors: mustPhrases(t, "404 capacity")}, nil, nil, 10*time.Second)
	redirects := NewPolicy(Config{RetryOnStatuses: mustStatuses(t, "307,429,5xx")}, []Rule{{Pattern: regexp.MustCompile(`moved`)}}, nil, 10*time.Second)
	stop5xx := NewPolicy(Config{}, []Rule{{Statuses: mustStatuses(t, "5xx")}}, nil, 10*time.Second)

	tests := []struct {
		name   string
		policy *Policy
		out    Outcome
		class  Class
		action Action
		health Health
		reason Reason
		status int
	}{
		{"200 commits", nil, Outcome{Status: 200, Body: []byte(okChat), Chat: true}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"client gone stops as 499", nil, Outcome{Status: 503, ClientGone: true}, ClassCancelled, ActionStop, HealthNone, ReasonCancelled, 499},
		{"committed never transfers", nil, Outcome{Kind: KindInterrupted, Status: 200, Committed: true}, ClassInterrupted, ActionStop, HealthFailure, ReasonCommitted, 200},
		{"committed finish is a success", nil, Outcome{Kind: KindFinished, Status: 200, Committed: true}, ClassNone, ActionStop, HealthSuccess, ReasonCommitted, 200},
		{"503 transfers", nil, Outcome{Status: 503, Body: []byte(openAI503)}, ClassServerError, ActionTransfer, HealthFailure, ReasonRetryableStatus, 503},
		{"503 retries while retries are left", nil, Outcome{Status: 503, Body: []byte(openAI503), RetriesLeft: true}, ClassServerError, ActionRetry, HealthFailure, ReasonRetryableStatus, 503},
		{"429 rate limit transfers and counts", nil, Outcome{Status: 429, Body: []byte(openAIRate)}, ClassRateLimited, ActionTransfer, HealthFailure, ReasonRetryableStatus, 429},
		{"400 stops", nil, Outcome{Status: 400, Body: []byte(openAI400)}, ClassClientError, ActionStop, HealthNone, ReasonNotRetryable, 400},
		{"422 stops without health effect", nil, Outcome{Status: 422, Body: []byte(`{"error":{"message":"bad"}}`)}, ClassClientError, ActionStop, HealthNone, ReasonNotRetryable, 422},
		{"model not found 404 transfers by phrase", nil, Outcome{Status: 404, Body: []byte(openAI404Model)}, ClassClientError, ActionTransfer, HealthNone, ReasonPhrase, 404},
		{"model not found never retries the same target", nil, Outcome{Status: 404, Body: []byte(openAI404Model), RetriesLeft: true}, ClassClientError, ActionTransfer, HealthNone, ReasonPhrase, 404},
		{"plain 404 stops", nil, Outcome{Status: 404, Body: []byte(`{"error":{"message":"Not found"}}`)}, ClassClientError, ActionStop, HealthNone, ReasonNotRetryable, 404},
		{"404 unsupported phrase needs status 404", nil, Outcome{Status: 400, Body: []byte(`{"error":{"message":"feature unsupported"}}`)}, ClassClientError, ActionStop, HealthNone, ReasonNotRetryable, 400},
		{"404 unsupported phrase matches 404", nil, Outcome{Status: 404, Body: []byte(`{"error":{"message":"feature unsupported"}}`)}, ClassClientError, ActionTransfer, HealthNone, ReasonPhrase, 404},
		{"upstream error phrase in text body", nil, Outcome{Status: 400, Body: []byte(`<html>Upstream Error from gateway</html>`)}, ClassClientError, ActionTransfer, HealthNone, ReasonPhrase, 400},
		{"refused transfers", nil, Outcome{Kind: KindTransport, Transport: TransportRefused}, ClassRefused, ActionTransfer, HealthFailure, ReasonNoResponse, 502},
		{"reset retries when retries left", nil, Outcome{Kind: KindTransport, Transport: TransportReset, RetriesLeft: true}, ClassReset, ActionRetry, HealthFailure, ReasonNoResponse, 502},
		{"timeout gives 504", nil, Outcome{Kind: KindTransport, Transport: TransportTimeout}, ClassTimeout, ActionTransfer, HealthSilent, ReasonNoResponse, 504},
		{"timeout never retries the same target", nil, Outcome{Kind: KindTransport, Transport: TransportTimeout, RetriesLeft: true}, ClassTimeout, ActionTransfer, HealthSilent, ReasonNoResponse, 504},
		{"refused retries when retries left", nil, Outcome{Kind: KindTransport, Transport: TransportRefused, RetriesLeft: true}, ClassRefused, ActionRetry, HealthFailure, ReasonNoResponse, 502},
		{"dns never retries the same target", nil, Outcome{Kind: KindTransport, Transport: TransportDNS, RetriesLeft: true}, ClassDNS, ActionTransfer, HealthFailure, ReasonNoResponse, 502},
		{"garbage never retries the same target", nil, Outcome{Kind: KindTransport, Transport: TransportOther, RetriesLeft: true}, ClassNetwork, ActionTransfer, HealthFailure, ReasonNoResponse, 502},
		{"408 retries when retries left", nil, Outcome{Status: 408, RetriesLeft: true}, ClassTimeout, ActionRetry, HealthFailure, ReasonRetryableStatus, 408},
		{"unasked-for 101 is a bad response", nil, Outcome{Status: 101}, ClassBadResponse, ActionTransfer, HealthFailure, ReasonNoResponse, 502},
		{"unasked-for 101 retries when retries left", nil, Outcome{Status: 101, RetriesLeft: true}, ClassBadResponse, ActionRetry, HealthFailure, ReasonNoResponse, 502},
		{"a status HTTP does not have is a bad response", nil, Outcome{Status: 999, Body: []byte(`{"error":{"message":"x"}}`)}, ClassBadResponse, ActionTransfer, HealthFailure, ReasonNoResponse, 502},
		{"context window transfers without health effect", nil, Outcome{Status: 400, Body: []byte(openAIContext), RetriesLeft: true}, ClassContextWindow, ActionTransfer, HealthNone, ReasonContextWindow, 400},
		{"anthropic prompt is too long is a context window error", nil, Outcome{Status: 400, Body: []byte(anthropicContext)}, ClassContextWindow, ActionTransfer, HealthNone, ReasonContextWindow, 400},
		{"context window error in a stream event", nil, Outcome{Kind: KindStreamError, Body: []byte(`{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}`)}, ClassContextWindow, ActionTransfer, HealthNone, ReasonContextWindow, 400},
		{"context window wording on a 429 is a rate limit", nil, Outcome{Status: 429, Body: []byte(`{"error":{"message":"Request too large: reduce the length of the messages","code":"rate_limit_exceeded"}}`)}, ClassRateLimited, ActionTransfer, HealthFailure, ReasonRetryableStatus, 429},
		{"a stop rule wins over the context window", withRules, Outcome{Status: 400, Body: []byte(openAIContext)}, ClassClientError, ActionStop, HealthNone, ReasonStopRule, 400},
		{"dns transfers", nil, Outcome{Kind: KindTransport, Transport: TransportDNS}, ClassDNS, ActionTransfer, HealthFailure, ReasonNoResponse, 502},
		{"tls never retries the same target", nil, Outcome{Kind: KindTransport, Transport: TransportTLS, RetriesLeft: true}, ClassTLS, ActionTransfer, HealthFailure, ReasonNoResponse, 502},
		{"401 with own key ejects and transfers", nil, Outcome{Status: 401, Body: []byte(anthropicAuth), OwnKey: true, RetriesLeft: true}, ClassAuth, ActionTransfer, HealthEject, ReasonCredential, 401},
		{"403 with own key ejects and transfers", nil, Outcome{Status: 403, OwnKey: true}, ClassAuth, ActionTransfer, HealthEject, ReasonCredential, 403},
		{"401 with the caller's credentials stops", nil, Outcome{Status: 401, Body: []byte(anthropicAuth)}, ClassAuth, ActionStop, HealthNone, ReasonCallerCredentials, 401},
		{"insufficient_quota transfers, ejects, never retries", nil, Outcome{Status: 429, Body: []byte(openAIQuota), RetriesLeft: true}, ClassQuota, ActionTransfer, HealthEject, ReasonQuota, 429},
		{"empty 200 is a 502", nil, Outcome{Status: 200, Body: []byte("  \n")}, ClassEmptyResponse, ActionTransfer, HealthFailure, ReasonEmpty, 502},
		{"200 with error object carries its status", nil, Outcome{Status: 200, Body: []byte(`{"error":{"message":"overloaded","code":529}}`)}, ClassErrorBody, ActionTransfer, HealthFailure, ReasonEmpty, 529},
		{"200 with error object without status is 502", nil, Outcome{Status: 200, Body: []byte(`{"error":{"message":"something broke"}}`)}, ClassErrorBody, ActionTransfer, HealthFailure, ReasonEmpty, 502},
		{"200 with error null is fine", nil, Outcome{Status: 200, Body: []byte(`{"id":"r1","status":"completed","error":null,"output":[]}`)}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"200 with empty choices is 502", nil, Outcome{Status: 200, Body: []byte(`{"id":"c","object":"chat.completion","choices": [ ],"usage":{}}`), Chat: true}, ClassNoChoices, ActionTransfer, HealthFailure, ReasonEmpty, 502},
		{"empty choices outside chat commits", nil, Outcome{Status: 200, Body: []byte(`{"choices":[]}`)}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"nested empty choices commits", nil, Outcome{Status: 200, Body: []byte(`{"choices":[{"message":{"content":"x","meta":{"choices":[]}}}]}`), Chat: true}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"error word inside content commits", nil, Outcome{Status: 200, Body: []byte(`{"choices":[{"message":{"content":"the \"error\": was fixed"}}]}`), Chat: true}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"stream error event maps anthropic overloaded to 529", nil, Outcome{Kind: KindStreamError, Body: []byte(anthropicOver)}, ClassServerError, ActionTransfer, HealthFailure, ReasonRetryableStatus, 529},
		{"stream error event without status is 502", nil, Outcome{Kind: KindStreamError, Body: []byte(`{"error":{"message":"boom"}}`)}, ClassServerError, ActionTransfer, HealthFailure, ReasonRetryableStatus, 502},
		{"stream error event invalid_request stops", nil, Outcome{Kind: KindStreamError, Body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`)}, ClassClientError, ActionStop, HealthNone, ReasonNotRetryable, 400},
		{"empty stream transfers", nil, Outcome{Kind: KindStreamEmpty}, ClassEmptyResponse, ActionTransfer, HealthFailure, ReasonEmpty, 502},
		{"stream commit with content commits", nil, Outcome{Kind: KindStreamCommit, Status: 200, Body: []byte("data: {}\n\n")}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"stop rule with status and pattern stops", withRules, Outcome{Status: 400, Body: []byte(`{"error":{"code":"context_length_exceeded","message":"upstream error"}}`)}, ClassClientError, ActionStop, HealthNone, ReasonStopRule, 400},
		{"stop rule pattern needs its status", withRules, Outcome{Status: 503, Body: []byte(`context_length_exceeded`)}, ClassServerError, ActionTransfer, HealthFailure, ReasonRetryableStatus, 503},
		{"stop rule on 529 stops an overloaded event", withRules, Outcome{Kind: KindStreamError, Body: []byte(anthropicOver)}, ClassServerError, ActionStop, HealthFailure, ReasonStopRule, 529},
		{"pattern-only stop rule applies to any error status", patternOnly, Outcome{Status: 503, Body: []byte(`{"error":{"message":"do-not-retry"}}`)}, ClassServerError, ActionStop, HealthFailure, ReasonStopRule, 503},
		{"success rule transfers a 200", withRules, Outcome{Status: 200, Body: []byte(`{"choices":[{"finish_reason":"content_filter"}]}`), Chat: true}, ClassSuccessRule, ActionTransfer, HealthNone, ReasonSuccessRule, 200},
		{"success rule matches held stream events", withRules, Outcome{Kind: KindStreamCommit, Status: 200, Body: []byte(`data: {"finish_reason":"content_filter"}` + "\n\n")}, ClassSuccessRule, ActionTransfer, HealthNone, ReasonSuccessRule, 200},
		{"success rule never applies to image", withRules, Outcome{Status: 200, Body: []byte(`content_filter`), Image: true}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"custom statuses replace the default", custom, Outcome{Status: 500}, ClassServerError, ActionStop, HealthFailure, ReasonNotRetryable, 500},
		{"custom statuses keep their own", custom, Outcome{Status: 503}, ClassServerError, ActionTransfer, HealthFailure, ReasonRetryableStatus, 503},
		{"no phrases configured stops model not found", custom, Outcome{Status: 404, Body: []byte(openAI404Model)}, ClassClientError, ActionStop, HealthNone, ReasonNotRetryable, 404},
		{"custom phrase with status word matches that status", phrase404, Outcome{Status: 404, Body: []byte(`{"error":{"message":"No capacity left"}}`)}, ClassClientError, ActionTransfer, HealthNone, ReasonPhrase, 404},
		{"custom phrase with status word ignores other statuses", phrase404, Outcome{Status: 400, Body: []byte(`{"error":{"message":"No capacity left"}}`)}, ClassClientError, ActionStop, HealthNone, ReasonNotRetryable, 400},
		{"oversize 200 commits without body checks", nil, Outcome{Status: 200, Body: []byte(`{"error":`), Truncated: true}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"oversize 503 is still an error", nil, Outcome{Status: 503, Body: []byte(`<html>`), Truncated: true}, ClassServerError, ActionTransfer, HealthFailure, ReasonRetryableStatus, 503},
		{"image commits at headers", withRules, Outcome{Status: 200, Image: true, Truncated: true}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"302 commits unchanged", nil, Outcome{Status: 302}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 302},
		{"listed 307 transfers", redirects, Outcome{Status: 307, Body: []byte(`{"moved":true}`)}, ClassRedirect, ActionTransfer, HealthNone, ReasonRetryableStatus, 307},
		{"listed 307 never retries the same target", redirects, Outcome{Status: 307, RetriesLeft: true}, ClassRedirect, ActionTransfer, HealthNone, ReasonRetryableStatus, 307},
		{"listed 3xx class transfers", NewPolicy(Config{RetryOnStatuses: mustStatuses(t, "3xx")}, nil, nil, 10*time.Second), Outcome{Status: 302}, ClassRedirect, ActionTransfer, HealthNone, ReasonRetryableStatus, 302},
		{"unlisted 302 commits beside a listed 307", redirects, Outcome{Status: 302, Body: []byte(`moved`)}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 302},
		{"200 to HEAD without body commits", nil, Outcome{Status: 200, NoBody: true, Chat: true}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"200 to HEAD skips success rules", NewPolicy(Config{}, nil, []Rule{{Pattern: regexp.MustCompile(`^$`)}}, 10*time.Second), Outcome{Status: 200, NoBody: true}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 200},
		{"204 commits", nil, Outcome{Status: 204, NoBody: true}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 204},
		{"304 commits", nil, Outcome{Status: 304, NoBody: true}, ClassNone, ActionCommit, HealthSuccess, ReasonOK, 304},
		{"503 to HEAD still transfers", nil, Outcome{Status: 503, NoBody: true}, ClassServerError, ActionTransfer, HealthFailure, ReasonRetryableStatus, 503},
		{"empty stream transfers whatever the status list", custom, Outcome{Kind: KindStreamEmpty}, ClassEmptyResponse, ActionTransfer, HealthFailure, ReasonEmpty, 502},
		{"empty stream retries whatever the status list", custom, Outcome{Kind: KindStreamEmpty, RetriesLeft: true}, ClassEmptyResponse, ActionRetry, HealthFailure, ReasonEmpty, 502},
		{"empty 200 transfers whatever the status list", custom, Outcome{Status: 200, Body: nil, Chat: true}, ClassEmptyResponse, ActionTransfer, HealthFailure, ReasonEmpty, 502},
		{"empty choices transfer whatever the status list", custom, Outcome{Status: 200, Body: []byte(`{"choices":[]}`), Chat: true}, ClassNoChoices, ActionTransfer, HealthFailure, ReasonEmpty, 502},
		{"empty stream is recoverable with no status listed", NewPolicy(Config{RetryOnStatuses: mustStatuses(t, "none")}, nil, nil, 10*time.Second), Outcome{Kind: KindStreamEmpty}, ClassEmptyResponse, ActionTransfer, HealthFailure, ReasonEmpty, 502},
		{"stop rule on 5xx stops an empty stream", stop5xx, Outcome{Kind: KindStreamEmpty}, ClassEmptyResponse, ActionStop, HealthFailure, ReasonStopRule, 502},
		{"stop rule on 5xx stops an empty 200", stop5xx, Outcome{Status: 200, Body: []byte(" ")}, ClassEmptyResponse, ActionStop, HealthFailure, ReasonStopRule, 502},
		{"200 with error object follows the status list", custom, Outcome{Status: 200, Body: []byte(`{"error":{"message":"boom","code":500}}`)}, ClassErrorBody, ActionStop, HealthFailure, ReasonNotRetryable, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.policy
			if p == nil {
				p = defaultPolicy()
			}
			v := p.Decide(&tc.out)
			if v.NewModel != (tc.class == ClassContextWindow) {
				t.Errorf("NewModel=%v: a transfer must look for another model exactly on a context-window error", v.NewModel)
			}
			if v.Class != tc.class || v.Action != tc.action || v.Health != tc.health || v.Reason != tc.reason || v.Status != tc.status {
				t.Fatalf("got class=%s action=%s health=%d reason=%s status=%d; want class=%s action=%s health=%d reason=%s status=%d",
					v.Class, v.Action, v.Health, v.Reason, v.Status, tc.class, tc.action, tc.health, tc.reason, tc.status)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	p := defaultPolicy()
	t.Run("within the maximum it is the wait before a retry", func(t *testing.T) {
		v := p.Decide(&Outcome{Status: 429, RetriesLeft: true, HasRetryAfter: true, RetryAfter: time.Second})
		if v.Action != ActionRetry || v.Wait != time.Second || v.Cooldown != 0 {
			t.Fatalf("got %+v", v)
		}
	})
	t.Run("beyond the maximum it transfers now and cools the target down", func(t *testing.T) {
		v := p.Decide(&Outcome{Status: 429, RetriesLeft: true, HasRetryAfter: true, RetryAfter: time.Minute})
		if v.Action != ActionTransfer || v.Reason != ReasonRetryAfter || v.Cooldown != time.Minute {
			t.Fatalf("got %+v", v)
		}
	})
	t.Run("without retries left it transfers without waiting", func(t *testing.T) {
		v := p.Decide(&Outcome{Status: 503, HasRetryAfter: true, RetryAfter: time.Second})
		if v.Action != ActionTransfer || v.Cooldown != 0 {
			t.Fatalf("got %+v", v)
		}
	})
}

// docs/decisions.md, The decision order, rule 5: a close or reset without a byte of answer that ends a
// silence of at least 1 s after the request was sent (or FAILOVER_CONNECT_TIMEOUT, when that is
// shorter) is a silent failure: it transfers at once, never retried on the same target, and
// counts as a timeout. A quicker one is a plain reset, retried while retries are left.
func TestSilentClose(t *testing.T) {
	reset := func(silence time.Duration) Outcome {
		return Outcome{Kind: KindTransport, Transport: TransportReset, Silence: silence, RetriesLeft: true}
	}
	defaults := defaultPolicy()
	tests := []struct {
		name   string
		policy *Policy
		out    Outcome
		class  Class
		action Action
		health Health
	}{
		{"a reset with no silence measured is retried", defaults, reset(0), ClassReset, ActionRetry, HealthFailure},
		{"a reset after a short silence is retried", defaults, reset(999 * time.Millisecond), ClassReset, ActionRetry, HealthFailure},
		{"a reset after 1 s of silence transfers", defaults, reset(time.Second), ClassSilentClose, ActionTransfer, HealthSilent},
		{"a reset after 3 s of silence transfers", defaults, reset(3 * time.Second), ClassSilentClose, ActionTransfer, HealthSilent},
		{"a connect timeout of 5 s keeps 1 s", defaults.WithConnectTimeout(5 * time.Second), reset(999 * time.Millisecond), ClassReset, ActionRetry, HealthFailure},
		{"no connect timeout keeps 1 s", defaults.WithConnectTimeout(0), reset(time.Second), ClassSilentClose, ActionTransfer, HealthSilent},
		{"a shorter connect timeout is the threshold", defaults.WithConnectTimeout(200 * time.Millisecond), reset(200 * time.Millisecond), ClassSilentClose, ActionTransfer, HealthSilent},
		{"below a shorter connect timeout is a reset", defaults.WithConnectTimeout(200 * time.Millisecond), reset(199 * time.Millisecond), ClassReset, ActionRetry, HealthFailure},
		{"a refused connection has no silence", defaults, Outcome{Kind: KindTransport, Transport: TransportRefused, Silence: 3 * time.Second, RetriesLeft: true}, ClassRefused, ActionRetry, HealthFailure},
		{"garbage after a silence stays a network failure", defaults, Outcome{Kind: KindTransport, Transport: TransportOther, Silence: 3 * time.Second, RetriesLeft: true}, ClassNetwork, ActionTransfer, HealthFailure},
		{"a timeout stays a timeout", defaults, Outcome{Kind: KindTransport, Transport: TransportTimeout, Silence: 3 * time.Second, RetriesLeft: true}, ClassTimeout, ActionTransfer, HealthSilent},
		{"the client gone wins", defaults, Outcome{Kind: KindTransport, Transport: TransportReset, Silence: 3 * time.Second, ClientGone: true}, ClassCancelled, ActionStop, HealthNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.policy.Decide(&tc.out)
			if v.Class != tc.class || v.Action != tc.action || v.Health != tc.health {
				t.Fatalf("got class=%s action=%s health=%d; want class=%s action=%s health=%d", v.Class, v.Action, v.Health, tc.class, tc.action, tc.health)
			}
			if v.Class == ClassSilentClose && (v.Transient || v.Status != 502 || v.Reason != ReasonNoResponse) {
				t.Fatalf("a silent close: transient=%v status=%d reason=%s; want not transient, 502, no_response", v.Transient, v.Status, v.Reason)
			}
		})
	}
	if got := defaults.WithConnectTimeout(time.Millisecond); defaults.silentClose != SilentCloseAfter || got.silentClose != time.Millisecond {
		t.Errorf("WithConnectTimeout changed the policy it was called on, or gave %v", got.silentClose)
	}
}

func TestLimit(t *testing.T) {
	all := Allowance{Enabled: true, RetryFits: true, TransferFits: true, ElapsedOK: true, RetryBudgetOK: true}
	retry := Verdict{Action: ActionRetry, Wait: time.Second, Transient: true}
	transfer := Verdict{Action: ActionTransfer}
	tests := []struct {
		name   string
		v      Verdict
		mod    func(a *Allowance)
		action Action
		reason Reason
	}{
		{"retry within budgets retries", retry, func(*Allowance) {}, ActionRetry, 0},
		{"disabled stops", transfer, func(a *Allowance) { a.Enabled = false }, ActionStop, ReasonDisabled},
		{"retry that does not fit becomes a transfer", retry, func(a *Allowance) { a.RetryFits = false }, ActionTransfer, 0},
		{"retry that does not fit and no transfer left stops", retry, func(a *Allowance) { a.RetryFits = false; a.TransferFits = false }, ActionStop, ReasonTransferLimit},
		{"retry ignores the transfer limit", retry, func(a *Allowance) { a.TransferFits = false }, ActionRetry, 0},
		{"retry on a target this outcome took out becomes a transfer", retry, func(a *Allowance) { a.TargetOut = true }, ActionTransfer, 0},
		{"transfer ignores whether the target was taken out", transfer, func(a *Allowance) { a.TargetOut = true }, ActionTransfer, 0},
		{"transfer beyond MAX_ATTEMPTS stops", transfer, func(a *Allowance) { a.TransferFits = false }, ActionStop, ReasonTransferLimit},
		{"transfer beyond MAX_ELAPSED stops", transfer, func(a *Allowance) { a.ElapsedOK = false }, ActionStop, ReasonElapsedLimit},
		{"transfer beyond the retry budget stops", transfer, func(a *Allowance) { a.RetryBudgetOK = false }, ActionStop, ReasonRetryBudget},
		{"retry beyond the retry budget stops", retry, func(a *Allowance) { a.RetryBudgetOK = false }, ActionStop, ReasonRetryBudget},
		{"commit passes", Verdict{Action: ActionCommit}, func(a *Allowance) { *a = Allowance{} }, ActionCommit, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := all
			tc.mod(&a)
			got := Limit(tc.v, a)
			if got.Action != tc.action || got.Reason != tc.reason {
				t.Fatalf("got %s/%s, want %s/%s", got.Action, got.Reason, tc.action, tc.reason)
			}
			if got.Action == ActionTransfer && got.Wait != 0 {
				t.Fatalf("a transfer must not wait, got %v", got.Wait)
			}
		})
	}
}

// A transfer with no candidate left ends the request: exhausted when the policy chose the
// transfer, stopped by FAILOVER_MAX_ELAPSED when that budget made it of a retry.
func TestNoCandidate(t *testing.T) {
	v := Verdict{Class: ClassServerError, Action: ActionTransfer, Reason: ReasonRetryableStatus, Status: 503, Wait: time.Second}
	if got := NoCandidate(v, false); got.Action != ActionStop || got.Reason != ReasonExhausted || got.Wait != 0 || got.Class != ClassServerError || got.Status != 503 {
		t.Errorf("policy transfer: %+v", got)
	}
	if got := NoCandidate(v, true); got.Action != ActionStop || got.Reason != ReasonElapsedLimit || got.Wait != 0 {
		t.Errorf("retry refused by the elapsed budget: %+v", got)
	}
	cw := Verdict{Class: ClassContextWindow, Action: ActionTransfer, Reason: ReasonContextWindow, Status: 400, NewModel: true}
	if got := NoCandidate(cw, false); got.Action != ActionStop || got.Reason != ReasonContextWindow || got.Status != 400 {
		t.Errorf("context window without a bigger model stops as it is: %+v", got)
	}
}

func TestDecideAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are asserted without -race (sync.Pool drops items under the race detector)")
	}
	stop := make([]Rule, 0, 64)
	for i := 0; i < 64; i++ {
		stop = append(stop, Rule{Statuses: mustStatuses(t, "400"), Pattern: regexp.MustCompile(`(?i)rule-\d+-never`)})
	}
	p := NewPolicy(Config{}, stop, []Rule{{Pattern: regexp.MustCompile(`content_filter`)}}, 10*time.Second)
	cases := map[string]Outcome{
		"ok":           {Status: 200, Body: []byte(okChat), Chat: true},
		"503":          {Status: 503, Body: []byte(openAI503)},
		"404 phrase":   {Status: 404, Body: []byte(openAI404Model)},
		"400 stop":     {Status: 400, Body: []byte(openAI400)},
		"stream error": {Kind: KindStreamError, Body: []byte(anthropicOver)},
		"fake 200":     {Status: 200, Body: []byte(`{"error":{"message":"x","code":500}}`)},
		"transport":    {Kind: KindTransport, Transport: TransportReset},
		"silent close": {Kind: KindTransport, Transport: TransportReset, Silence: 3 * time.Second},
		"empty stream": {Kind: KindStreamEmpty},
		"head":         {Status: 200, NoBody: true},
		"context":      {Status: 400, Body: []byte(openAIContext)},
		"anthropic400": {Status: 400, Body: []byte(anthropicContext)},
	}
	for name, o := range cases {
		p.Decide(&o) // warm the parser pool and the regexp machines
		if n := testing.AllocsPerRun(200, func() { p.Decide(&o) }); n != 0 {
			t.Errorf("%s: %v allocations per decision, want 0", name, n)
		}
	}
}
