package classify

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"
)

func FuzzExtractError(f *testing.F) {
	for _, s := range []string{openAI404Model, openAIQuota, anthropicOver, `[{"error":{"code":429}}]`, `{"error":"x"}`,
		`{"type":"response.failed","response":{"error":{"code":"server_error"}}}`, "<html>", ""} {
		f.Add([]byte(s))
	}
	var p fastjson.Parser
	f.Fuzz(func(t *testing.T, body []byte) {
		info := ExtractError(&p, body)
		if info.Status != 0 && (info.Status < 400 || info.Status > 599) {
			t.Fatalf("status %d outside 400-599", info.Status)
		}
		if !info.JSON && len(info.Message) > maxTextBytes {
			t.Fatalf("text message of %d bytes", len(info.Message))
		}
	})
}

func FuzzParseStatusSet(f *testing.F) {
	for _, s := range []string{"429,5xx", "4XX", "none", "", ",", "600", "1xx,2xx,3xx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		s, err := ParseStatusSet(list)
		if err != nil {
			return
		}
		// Every accepted token is in the set, and the set holds nothing outside 100-599.
		for _, tok := range strings.Split(list, ",") {
			tok = strings.ToLower(strings.TrimSpace(tok))
			if tok == "" || tok == "none" {
				continue
			}
			lo, _, _ := parseStatusToken(tok)
			if !s.Has(lo) {
				t.Fatalf("%q parsed but %d is not in the set", list, lo)
			}
		}
		if s.Has(99) || s.Has(600) {
			t.Fatal("status outside 100-599 in the set")
		}
	})
}

func FuzzParsePhrases(f *testing.F) {
	f.Add(DefaultPhrases, 404, "model_not_found", "The model does not exist")
	f.Add("404", 404, "", "")
	f.Add("a,,b", 500, "", "")
	f.Fuzz(func(t *testing.T, list string, status int, code, message string) {
		p, err := ParsePhrases(list)
		if err != nil {
			return
		}
		got := p.Match(status, []byte(code), nil, []byte(message))
		// The reference: a phrase matches when its status words allow the status and every other
		// word is a substring of the lower-cased "code type message".
		text := strings.ToLower(code + " " + " " + message)
		want := false
		for _, ph := range p.list {
			if !ph.statuses.Empty() && !ph.statuses.Has(status) {
				continue
			}
			all := true
			for _, w := range ph.words {
				if !strings.Contains(text, string(w)) {
					all = false
				}
			}
			if all {
				want = true
			}
		}
		if got != want && isASCII(code+message) {
			t.Fatalf("Match = %v, reference %v", got, want)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func FuzzDecide(f *testing.F) {
	f.Add(503, []byte(openAI503), uint8(0), false)
	f.Add(200, []byte(okChat), uint8(0), true)
	f.Add(0, []byte(anthropicOver), uint8(2), false)
	p := defaultPolicy()
	f.Fuzz(func(t *testing.T, status int, body []byte, kind uint8, chat bool) {
		o := Outcome{Kind: Kind(kind % 7), Status: status, Body: body, Chat: chat, RetriesLeft: status%2 == 0,
			HasRetryAfter: status%3 == 0, RetryAfter: time.Duration(status) * time.Millisecond}
		v := p.Decide(&o)
		if v.Action >= NumActions || v.Class >= NumClasses {
			t.Fatalf("bad verdict %+v", v)
		}
		if v.Action == ActionRetry && !o.RetriesLeft {
			t.Fatalf("retry without retries left: %+v", v)
		}
		if v.Health == HealthEject && v.Action != ActionTransfer && v.Reason != ReasonStopRule {
			t.Fatalf("eject without transfer: %+v", v)
		}
	})
}
