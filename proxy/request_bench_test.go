package proxy

import (
	"strings"
	"testing"
)

// BenchmarkScanRequest reads the model and stream fields of request bodies, as every request
// does before its first attempt: an SDK's short chat request, and a long conversation (64 KiB
// of messages with escapes, the model and stream after them) that the scan crosses whole.
func BenchmarkScanRequest(b *testing.B) {
	long := `{"messages":[` + strings.Repeat(`{"role":"user","content":"Summarise this paragraph, \"quoted\" and\nwrapped: `+
		strings.Repeat("lorem ipsum dolor sit amet ", 8)+`"},`, 280) +
		`{"role":"user","content":"done"}],"temperature":0.2,"model":"gpt-4o-mini","stream":true}`
	for _, bc := range []struct{ name, body string }{
		{"chat", `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in one word."}]}`},
		{"long", long},
	} {
		body := []byte(bc.body)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if f := scanRequest(body); !f.json || f.modelStart < 0 || !f.stream {
					b.Fatalf("scanRequest: %+v", f)
				}
			}
		})
	}
}
