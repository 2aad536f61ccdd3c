package classify

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// realisticRules builds n rules of about size bytes each: alternations of error codes and
// phrases, the way operators write them, none of which match the benchmark bodies.
func realisticRules(b *testing.B, n, size int, withStatuses bool) []Rule {
	rules := make([]Rule, 0, n)
	for i := 0; i < n; i++ {
		var sb strings.Builder
		sb.WriteString(`(?i)(`)
		for j := 0; sb.Len() < size-48; j++ {
			if j > 0 {
				sb.WriteByte('|')
			}
			fmt.Fprintf(&sb, `rule%d_code_%d|never seen phrase %d`, i, j, j)
		}
		sb.WriteString(`)`)
		re, err := CompilePattern(sb.String())
		if err != nil {
			b.Fatal(err)
		}
		r := Rule{Pattern: re}
		if withStatuses {
			r.Statuses = mustStatuses(b, "4xx,5xx")
		}
		rules = append(rules, r)
	}
	return rules
}

func BenchmarkDecide(b *testing.B) {
	def := defaultPolicy()
	heavy := NewPolicy(Config{}, realisticRules(b, 64, 256, true), realisticRules(b, 64, 256, false), 10*time.Second)
	worst := NewPolicy(Config{}, realisticRules(b, 64, MaxPatternBytes, true), realisticRules(b, 64, MaxPatternBytes, false), 10*time.Second)
	// okChat with its content padded to the 641 bytes of testdata/bench/run.sh's completion.
	empty := strings.Replace(okChat, `"content":"Hello"`, `"content":""`, 1)
	chat641 := strings.Replace(empty, `"content":""`, `"content":"`+strings.Repeat("Hello! I am a benchmark answer of a realistic size, neither empty nor long. ", 8)[:641-len(empty)]+`"`, 1)
	peek := []byte(strings.Repeat(`data: {"choices":[{"delta":{"content":"token "}}]}`+"\n\n", 128<<10/52))
	cases := []struct {
		name   string
		policy *Policy
		out    Outcome
	}{
		{"defaults/200", def, Outcome{Status: 200, Body: []byte(okChat), Chat: true}},
		{"defaults/200-641B", def, Outcome{Status: 200, Body: []byte(chat641), Chat: true}},
		{"defaults/503", def, Outcome{Status: 503, Body: []byte(openAI503)}},
		{"defaults/404-phrase", def, Outcome{Status: 404, Body: []byte(openAI404Model)}},
		{"defaults/400-stop", def, Outcome{Status: 400, Body: []byte(openAI400)}},
		{"defaults/stream-error", def, Outcome{Kind: KindStreamError, Body: []byte(anthropicOver)}},
		{"defaults/transport", def, Outcome{Kind: KindTransport, Transport: TransportReset}},
		{"64x256B-rules/200", heavy, Outcome{Status: 200, Body: []byte(okChat), Chat: true}},
		{"64x256B-rules/503", heavy, Outcome{Status: 503, Body: []byte(openAI503)}},
		{"64x4KiB-rules/128KiB-peek", worst, Outcome{Kind: KindStreamCommit, Status: 200, Body: peek}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.out.Body)))
			for i := 0; i < b.N; i++ {
				c.policy.Decide(&c.out)
			}
		})
	}
}

func BenchmarkPhraseMatch(b *testing.B) {
	p := mustPhrases(b, DefaultPhrases)
	msg := []byte("The model `gpt-9` does not exist or you do not have access to it.")
	miss := []byte("Invalid 'messages': empty array. Expected an array with minimum length 1.")
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			p.Match(404, []byte("model_not_found"), []byte("invalid_request_error"), msg)
		}
	})
	b.Run("miss", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			p.Match(400, []byte("invalid_value"), []byte("invalid_request_error"), miss)
		}
	})
}

func BenchmarkStatusHas(b *testing.B) {
	s := mustStatuses(b, "429,5xx")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.Has(400 + i%200)
	}
}
