package observe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The table for a person: one line per target, times left from the table's time, rounded to
// what matters at their size; the JSON for /targets leaves out what a target has not shown.
func TestTargetTableRenderings(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	table := TargetTable{Time: now, Targets: []TargetState{
		{Name: "openai", URL: "https://api.openai.com/v1", State: "up", AnswerLatencyMS: 412.4},
		{Name: "azure", URL: "https://x.openai.azure.com/openai?api-version=2024-10-21", State: "ejected", Until: now.Add(9500 * time.Millisecond),
			ConsecutiveFailures: 5, Ejections: 1, LastError: "server_error", LastErrorAt: now.Add(-1500 * time.Millisecond), AnswerLatencyMS: 0.25},
		{Name: "local", URL: "http://127.0.0.1:8080/v1", State: "ratelimited", Until: now.Add(3 * time.Minute),
			RateLimit: map[string]QuotaState{"tokens": {Remaining: 29950, Limit: 30000}, "requests": {Remaining: 0, Limit: 500, Reset: now.Add(179 * time.Second)}}},
	}}
	var text bytes.Buffer
	if err := WriteTargetTable(&text, &table); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"TARGET  STATE        FOR   FAILURES  EJECTIONS  LAST ERROR             LATENCY  QUOTA LEFT",
		"openai  up           -     0         0          -                      412ms    -",
		"azure   ejected      9.5s  5         1          server_error 1.5s ago  250µs    -",
		"local   ratelimited  3m0s  0         0          -                      -        requests 0/500 full in 2m59s, tokens 29950/30000",
	}
	if got := strings.TrimSuffix(text.String(), "\n"); got != strings.Join(want, "\n") {
		t.Errorf("text table:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	b, err := table.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back TargetTable
	if err := json.Unmarshal(b, &back); err != nil || !bytes.HasSuffix(b, []byte("}\n")) {
		t.Fatalf("%v:\n%s", err, b)
	}
	for _, absent := range []string{`"until": "0001`, `"last_error_at": "0001`, `"latency_ms"`, `"prefill_refused"`} {
		if bytes.Contains(b, []byte(absent)) {
			t.Errorf("the JSON has %s:\n%s", absent, b)
		}
	}
	if back.Targets[2].RateLimit["requests"].Reset != now.Add(179*time.Second) || back.Targets[1].LastError != "server_error" {
		t.Errorf("the JSON does not read back: %+v", back)
	}
}
