package observe

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmittmann/tint"

	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/stream"
)

func testRecord() *Record {
	r := &Record{
		RequestID: []byte("req-1"),
		Path:      []byte("/v1/chat/completions"),
		Model:     []byte("gpt-4o"),
		Outcome:   OutcomeOKAfterFailover, Status: 200, Duration: 1234 * time.Microsecond,
		Target: "second",
	}
	r.Ledger.Add(Entry{Target: "first", Status: 503, Duration: time.Millisecond})
	r.Ledger.Add(Entry{Target: "second", Status: 200, Duration: 2 * time.Millisecond})
	return r
}

func TestRequestRecordIsFlatJSON(t *testing.T) {
	var buf bytes.Buffer
	slog.New(NewJSONHandler(&buf, slog.LevelInfo)).LogAttrs(context.Background(), slog.LevelInfo, "request", slog.Any("", testRecord()))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if rec["msg"] != "request" || rec["request_id"] != "req-1" || rec["outcome"] != "ok_after_failover" || rec["target"] != "second" ||
		rec["duration_ms"].(float64) != 1.234 || len(rec["ledger"].([]any)) != 2 {
		t.Fatalf("record %v", rec)
	}
}

func TestRequestRecordInTextLog(t *testing.T) {
	var buf bytes.Buffer
	slog.New(tint.NewTextHandler(&buf, &tint.Options{NoColor: true})).LogAttrs(context.Background(), slog.LevelInfo, "request", slog.Any("", testRecord()))
	out := buf.String()
	for _, want := range []string{"request_id=req-1", "outcome=ok_after_failover", "target=second", "1:first 503", "2:second 200"} {
		if !strings.Contains(out, want) {
			t.Errorf("text record lacks %q: %s", want, out)
		}
	}
}

// The request record carries trace_id when the client sent a valid traceparent, in the JSON
// log and in the text log, and nothing when it did not.
func TestRequestRecordTraceID(t *testing.T) {
	const validTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, traceID := range []string{validTraceID, ""} {
		r := testRecord()
		r.TraceID = []byte(traceID)
		var js, text bytes.Buffer
		slog.New(NewJSONHandler(&js, slog.LevelInfo)).LogAttrs(context.Background(), slog.LevelInfo, "request", slog.Any("", r))
		slog.New(tint.NewTextHandler(&text, &tint.Options{NoColor: true})).LogAttrs(context.Background(), slog.LevelInfo, "request", slog.Any("", r))
		var rec map[string]any
		if err := json.Unmarshal(js.Bytes(), &rec); err != nil {
			t.Fatalf("%v: %s", err, js.String())
		}
		got, present := rec["trace_id"]
		switch {
		case traceID != "" && got != traceID:
			t.Errorf("JSON trace_id %v, want %s: %s", got, traceID, js.String())
		case traceID == "" && present:
			t.Errorf("JSON has a trace_id without a traceparent: %s", js.String())
		case traceID != "" && !strings.Contains(text.String(), " trace_id="+traceID+" "):
			t.Errorf("text record lacks the trace id: %s", text.String())
		case traceID == "" && strings.Contains(text.String(), "trace_id"):
			t.Errorf("text record has a trace_id without a traceparent: %s", text.String())
		}
	}
}

func TestLedgerListsAtMost32Attempts(t *testing.T) {
	var l Ledger
	for i := range 40 {
		l.Add(Entry{Target: "t" + strconv.Itoa(i), Status: 503})
	}
	var doc []map[string]any
	if err := json.Unmarshal(l.AppendJSON(nil), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc) != 33 || doc[31]["target"] != "t31" || doc[32]["more_attempts"].(float64) != 8 {
		t.Fatalf("%d entries: first %v, last %v", len(doc), doc[0], doc[len(doc)-1])
	}
	if text := string(l.AppendText(nil)); !strings.Contains(text, "32:t31 503") || !strings.HasSuffix(text, "+8 more") {
		t.Fatalf("text: %s", text)
	}
	l.Reset()
	l.Add(Entry{Target: "again"})
	if l.Len() != 1 || len(l.more) != 0 || l.Last().Target != "again" {
		t.Fatal("reset did not start over")
	}
}

// A continuation's ledger entry carries delivered_bytes and seam (what the seam took off, in
// bytes: never text), in both renderings; no other entry does.
func TestLedgerRendersAContinuation(t *testing.T) {
	var l Ledger
	l.Add(Entry{Target: "a", Status: 200, Phase: PhaseResumed, Class: classify.ClassInterrupted, Duration: time.Millisecond})
	l.Add(Entry{Target: "b", Status: 200, Phase: PhaseResumed, Duration: 2 * time.Millisecond, Continued: true, Delivered: 14, Seam: stream.Seam{Kind: stream.SeamOverlap, Bytes: 9}})
	j := string(l.AppendJSON(nil))
	if strings.Count(j, "delivered_bytes") != 1 || !strings.Contains(j, `"phase":"resumed","action":"commit","reason":"ok","duration_ms":2,"delivered_bytes":14,"seam":"overlap:9"}`) {
		t.Fatalf("JSON: %s", j)
	}
	if txt := string(l.AppendText(nil)); txt != "1:a 200 interrupted resumed commit 1ms | 2:b 200 ok resumed commit 2ms delivered=14 seam=overlap:9" {
		t.Fatalf("text: %s", txt)
	}
}

// appendMillis must write what strconv.AppendFloat wrote before it (the log's duration_ms
// format): milliseconds, up to three decimals, no trailing zeros.
func TestAppendMillis(t *testing.T) {
	for _, us := range []int64{0, 1, 9, 10, 100, 999, 1000, 1001, 1010, 1100, 12345, 12300, 12000, 999999, 86400000000, -1, -1500, -12345} {
		d := time.Duration(us) * time.Microsecond
		want := strconv.AppendFloat(nil, float64(us)/1000, 'f', -1, 64)
		if got := appendMillis(nil, d); string(got) != string(want) {
			t.Errorf("%v: %s, want %s", d, got, want)
		}
	}
	for us := int64(0); us < 200000; us += 7 {
		d := time.Duration(us) * time.Microsecond
		if got, want := appendMillis(nil, d), strconv.AppendFloat(nil, float64(us)/1000, 'f', -1, 64); string(got) != string(want) {
			t.Fatalf("%v: %s, want %s", d, got, want)
		}
	}
}

// The record of a request served by its first attempt, written as the sidecar writes it (the
// JSON handler into a LogWriter), allocates nothing.
func TestRequestRecordAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	log, r, at := benchRecord(t)
	if n := testing.AllocsPerRun(1000, func() { r.Log(log, at) }); n != 0 {
		t.Errorf("the request record allocates %.1f times", n)
	}
}

// BenchmarkRequestRecord is the record of a request served by its first attempt, written as
// the sidecar writes it: the JSON handler into a LogWriter (docs/operations.md, The request
// record).
func BenchmarkRequestRecord(b *testing.B) {
	log, r, at := benchRecord(b)
	b.ReportAllocs()
	for b.Loop() {
		r.Log(log, at)
	}
}

// benchRecord is a request served by its first attempt, and the logger the sidecar writes its
// record with: the JSON handler into a LogWriter, closed when the test ends.
func benchRecord(tb testing.TB) (*slog.Logger, *Record, time.Time) {
	lw := NewLogWriter(io.Discard, time.Hour)
	tb.Cleanup(func() { lw.Close() })
	r := &Record{
		RequestID: []byte("4bf92f3577b34da6a3ce929d0e0e4736"),
		Path:      []byte("/v1/chat/completions"),
		Model:     []byte("gpt-4o-mini"),
		Outcome:   OutcomeOK, Status: 200, Duration: 1234 * time.Microsecond,
		Target: "openai",
	}
	r.Ledger.Add(Entry{Target: "openai", Status: 200, Duration: time.Millisecond})
	return slog.New(NewJSONHandler(lw, slog.LevelInfo)), r, time.Now().Add(r.Duration)
}
