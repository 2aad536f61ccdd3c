package classify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/streams.md, Resume a cut stream: the phrases by which providers refuse a prefill, held against
// the error bodies they really send (testdata/prefill/SOURCES.md), and against bodies of
// neighbouring errors they must not be mistaken for. Every phrase is found in some body.
func TestPrefillRefusalFixtures(t *testing.T) {
	used := make([]bool, len(PrefillRefusals))
	for dir, want := range map[string]bool{"refuses": true, "other": false} {
		files, err := filepath.Glob(filepath.Join("testdata", "prefill", dir, "*.json"))
		if err != nil || len(files) < 5 {
			t.Fatalf("%s: %d fixtures (%v)", dir, len(files), err)
		}
		for _, f := range files {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if got := PrefillRefused(400, body); got != want {
				t.Errorf("%s: PrefillRefused = %v, want %v", f, got, want)
			}
			for i, p := range PrefillRefusals {
				if strings.Contains(strings.ToLower(string(body)), p) {
					used[i] = true
				}
			}
		}
	}
	for i, ok := range used {
		if !ok {
			t.Errorf("no fixture holds the phrase %q", PrefillRefusals[i])
		}
	}
}

// A refusal is a 400, read in any case, anywhere in the body: the wording vLLM's
// mistral-common gives, a gateway that nests the provider's error, a plain-text body.
func TestPrefillRefused(t *testing.T) {
	anthropic := `{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."}}`
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		{"Anthropic", 400, anthropic, true},
		{"not a 400", 422, anthropic, false},
		{"a 500 that says so", 500, anthropic, false},
		{"vLLM with mistral-common", 400, `{"object":"error","message":"Expected last role User or Tool (or Assistant with prefix or continue_final_message set to True) for serving but got assistant","type":"BadRequestError","param":null,"code":400}`, true},
		{"nested by a gateway", 400, `{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":"{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"This model does not support assistant message prefill. The conversation must end with a user message.\"}}"}}}`, true},
		{"plain text", 400, "THIS MODEL DOES NOT SUPPORT ASSISTANT MESSAGE PREFILL.\n", true},
		{"another 400", 400, openAI400, false},
		{"empty", 400, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PrefillRefused(tc.status, []byte(tc.body)); got != tc.want {
				t.Fatalf("PrefillRefused = %v, want %v", got, tc.want)
			}
		})
	}
}

// A resume attempt asked as a prefill in the auto form whose prefill is refused is asked again
// by instruction: a retry, with no health effect. Asked in any other form, or refused for
// another reason, it stays the failed resume attempt it was.
func TestDecidePrefillRefused(t *testing.T) {
	p := defaultPolicy()
	refusal := []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."}}`)
	for _, tc := range []struct {
		name   string
		out    Outcome
		action Action
		reason Reason
	}{
		{"auto's prefill refused", Outcome{Kind: KindResponse, Status: 400, Body: refusal, Resume: true, PrefillAsked: true}, ActionRetry, ReasonPrefillRefused},
		{"refused in an error event", Outcome{Kind: KindStreamError, Body: refusal, Resume: true, PrefillAsked: true}, ActionRetry, ReasonPrefillRefused},
		{"the prefill form refused", Outcome{Kind: KindResponse, Status: 400, Body: refusal, Resume: true}, ActionStop, ReasonNotRetryable},
		{"another 400", Outcome{Kind: KindResponse, Status: 400, Body: []byte(openAI400), Resume: true, PrefillAsked: true}, ActionStop, ReasonNotRetryable},
		{"the client left", Outcome{Kind: KindResponse, Status: 400, Body: refusal, Resume: true, PrefillAsked: true, ClientGone: true}, ActionStop, ReasonCancelled},
		{"not a resume", Outcome{Kind: KindResponse, Status: 400, Body: refusal, PrefillAsked: true}, ActionStop, ReasonNotRetryable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.out
			v := p.Decide(&o)
			if v.Action != tc.action || v.Reason != tc.reason {
				t.Fatalf("verdict %+v, want %v (%v)", v, tc.action, tc.reason)
			}
			if v.Action == ActionRetry && (v.Health != HealthNone || v.Wait != 0 || v.Class != ClassClientError) {
				t.Fatalf("a refused prefill: %+v, want a client_error at once with no health effect", v)
			}
		})
	}
}

// The retry by instruction that a bound does not allow ends the resume with the bound's reason.
func TestPrefillRetryStopped(t *testing.T) {
	v := prefillRetry(Verdict{Class: ClassClientError, Status: 400})
	for why, want := range map[ResumeReason]Reason{ResumeElapsedLimit: ReasonElapsedLimit, ResumeRetryBudget: ReasonRetryBudget, ResumeCancelled: ReasonCancelled} {
		got := PrefillRetryStopped(v, why)
		if got.Action != ActionStop || got.Reason != want || got.Health != HealthNone {
			t.Errorf("%v: %+v, want a stop with %v", why, got, want)
		}
	}
}

func BenchmarkPrefillRefused(b *testing.B) {
	body := []byte(openAI400)
	b.ReportAllocs()
	for b.Loop() {
		PrefillRefused(400, body)
	}
}
