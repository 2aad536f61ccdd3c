package classify

import (
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestParseStatusSet(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		has     []int
		hasNot  []int
		wantErr string
	}{
		{"exact and class", "429,5xx", []int{429, 500, 503, 599}, []int{428, 430, 499, 400, 200}, ""},
		{"case-insensitive with spaces", " 4XX , 503 ", []int{400, 404, 499, 503}, []int{500, 399}, ""},
		{"1xx class", "1xx", []int{100, 199}, []int{200}, ""},
		{"empty token", "429,,503", nil, nil, "empty status token"},
		{"trailing comma", "429,", nil, nil, "empty status token"},
		{"too long", "4290", nil, nil, "not a status"},
		{"out of range", "600", nil, nil, "not a status"},
		{"6xx class", "6xx", nil, nil, "not a status"},
		{"word", "abc", nil, nil, "not a status"},
		{"two digits", "42", nil, nil, "not a status"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseStatusSet(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range tc.has {
				if !s.Has(st) {
					t.Errorf("%d should be in %q", st, tc.in)
				}
			}
			for _, st := range tc.hasNot {
				if s.Has(st) {
					t.Errorf("%d should not be in %q", st, tc.in)
				}
			}
		})
	}
	t.Run("every bad token is reported", func(t *testing.T) {
		_, err := ParseStatusSet("abc,700,429")
		if err == nil || !strings.Contains(err.Error(), `"abc"`) || !strings.Contains(err.Error(), `"700"`) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("none is configured and empty", func(t *testing.T) {
		s, err := ParseStatusSet("none")
		if err != nil || !s.set || !s.Empty() {
			t.Fatalf("got %+v, %v", s, err)
		}
	})
}

func TestRuleStatusesMustBeErrors(t *testing.T) {
	if _, err := ParseRuleStatuses("4xx,529"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"200", "3xx", "399"} {
		if _, err := ParseRuleStatuses(bad); err == nil {
			t.Errorf("%q accepted as stop rule statuses", bad)
		}
	}
}

func TestCompilePattern(t *testing.T) {
	if _, err := CompilePattern(`(?i)context_length`); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{
		"empty":          "",
		"blank":          "  ",
		"does not build": "(unclosed",
		"too long":       strings.Repeat("a", MaxPatternBytes+1),
	} {
		if _, err := CompilePattern(bad); err == nil {
			t.Errorf("%s pattern accepted", name)
		}
	}
}

func TestParsePhrases(t *testing.T) {
	p, err := ParsePhrases(DefaultPhrases)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != 19 {
		t.Fatalf("default has %d phrases, want 19", p.Len())
	}
	for _, bad := range []string{"404", "404, 5xx", "model,,gone", "model,"} {
		if _, err := ParsePhrases(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestPhraseMatch(t *testing.T) {
	p := mustPhrases(t, DefaultPhrases)
	tests := []struct {
		name               string
		status             int
		code, typ, message string
		want               bool
	}{
		{"words in message, any order", 400, "", "", "The Model you asked for was NOT FOUND", true},
		{"words across code and message", 404, "model_not_found", "invalid_request_error", "The model does not exist", true},
		{"one word missing", 400, "", "", "model is fine", false},
		{"status word constrains", 400, "", "", "endpoint unsupported", false},
		{"status word satisfied", 404, "", "", "endpoint unsupported", true},
		{"upstream timed out in type", 504, "", "upstream timed out", "", true},
		{"empty error", 500, "", "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Match(tc.status, []byte(tc.code), []byte(tc.typ), []byte(tc.message)); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestContainsFold(t *testing.T) {
	tests := []struct {
		s, sub string
		want   bool
	}{
		{"Model Not Found", "not", true},
		{"MODEL", "model", true},
		{"mode", "model", false},
		{"", "a", false},
		{"abc", "", true},
		{"xxMoDeLxx", "model", true},
		{"modeL", "model", true},
		{"ümodel", "model", true},
	}
	for _, tc := range tests {
		if got := containsFold([]byte(tc.s), []byte(tc.sub)); got != tc.want {
			t.Errorf("containsFold(%q, %q) = %v", tc.s, tc.sub, got)
		}
	}
}

func TestExtractError(t *testing.T) {
	tests := []struct {
		name               string
		body               string
		status             int
		code, typ, message string
	}{
		{"openai type maps like anthropic", openAI404Model, 400, "model_not_found", "invalid_request_error", "The model 'gpt-9' does not exist or you do not have access to it."},
		{"openai quota maps to 429", openAIQuota, 429, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details."},
		{"anthropic overloaded", anthropicOver, 529, "", "overloaded_error", "Overloaded"},
		{"anthropic rate limit", `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, 429, "", "rate_limit_error", "slow down"},
		{"anthropic api_error", `{"type":"error","error":{"type":"api_error","message":"Internal"}}`, 500, "", "api_error", "Internal"},
		{"anthropic too large", `{"type":"error","error":{"type":"request_too_large","message":"big"}}`, 413, "", "request_too_large", "big"},
		{"anthropic invalid_request_error", `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`, 400, "", "invalid_request_error", "max_tokens: Field required"},
		{"anthropic authentication_error", `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, 401, "", "authentication_error", "invalid x-api-key"},
		{"anthropic permission_error", `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}`, 403, "", "permission_error", "Your API key does not have permission to use the specified resource."},
		{"anthropic not_found_error", `{"type":"error","error":{"type":"not_found_error","message":"model: claude-9"}}`, 404, "", "not_found_error", "model: claude-9"},
		{"anthropic type in a stream error event with a request id", `{"type":"error","error":{"details":null,"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_test_01"}`, 401, "", "authentication_error", "invalid x-api-key"},
		{"numeric code wins over type", `{"error":{"code":503,"type":"rate_limit_error","message":"x"}}`, 503, "", "rate_limit_error", "x"},
		{"numeric code out of range is ignored", `{"error":{"code":200,"type":"api_error"}}`, 500, "", "api_error", ""},
		{"numeric status field", `{"error":{"status":502,"message":"bad gateway"}}`, 502, "", "", "bad gateway"},
		{"string code digits", `{"error":{"code":"429","message":"x"}}`, 429, "429", "", "x"},
		{"server_error code", `{"error":{"code":"server_error","message":"oops"}}`, 500, "server_error", "", "oops"},
		{"responses error event", `{"type":"error","code":"rate_limit_exceeded","message":"slow","param":null,"sequence_number":2}`, 429, "rate_limit_exceeded", "error", "slow"},
		{"responses failed", `{"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"server_error","message":"The model failed"}}}`, 500, "server_error", "", "The model failed"},
		{"google array", `[{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}]`, 429, "", "RESOURCE_EXHAUSTED", "Resource has been exhausted"},
		{"google status name only", `{"error":{"message":"try later","status":"UNAVAILABLE"}}`, 503, "", "UNAVAILABLE", "try later"},
		{"error string", `{"error":"upstream failed"}`, 0, "", "", "upstream failed"},
		{"top-level message", `{"message":"model not available","code":"unavailable"}`, 0, "unavailable", "", "model not available"},
		{"detail", `{"detail":"Not Found"}`, 0, "", "", "Not Found"},
		{"escaped message", `{"error":{"message":"model \"x\" not found"}}`, 0, "", "", `model "x" not found`},
		{"not json", `upstream connect error or disconnect/reset before headers`, 0, "", "", "upstream connect error or disconnect/reset before headers"},
		{"empty", ``, 0, "", "", ""},
		{"json scalar", `42`, 0, "", "", ""},
		{"empty array", `[]`, 0, "", "", ""},
	}
	var p fastjson.Parser
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info := ExtractError(&p, []byte(tc.body))
			if info.Status != tc.status || string(info.Code) != tc.code || string(info.Type) != tc.typ || string(info.Message) != tc.message {
				t.Fatalf("got status=%d code=%q type=%q message=%q", info.Status, info.Code, info.Type, info.Message)
			}
		})
	}
	t.Run("huge text body is cut for matching", func(t *testing.T) {
		body := strings.Repeat("x", maxJSONBytes+10)
		info := ExtractError(&p, []byte(body))
		if len(info.Message) != maxTextBytes || info.JSON {
			t.Fatalf("message length %d, json %v", len(info.Message), info.JSON)
		}
	})
}

func TestMatchingAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are asserted without -race")
	}
	p := mustPhrases(t, DefaultPhrases)
	s := mustStatuses(t, "429,5xx")
	code, typ, msg := []byte("model_not_found"), []byte("invalid_request_error"), []byte("The model `gpt-9` does not exist")
	if n := testing.AllocsPerRun(500, func() { p.Match(404, code, typ, msg) }); n != 0 {
		t.Errorf("phrase matching: %v allocations", n)
	}
	if n := testing.AllocsPerRun(500, func() { s.Has(503) }); n != 0 {
		t.Errorf("status matching: %v allocations", n)
	}
}
