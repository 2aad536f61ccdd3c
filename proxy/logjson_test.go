package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmittmann/tint"

	"github.com/llm-failover/failover/proxy/proxytest"
)

// TestJSONHandlerMatchesSlog: every line is valid JSON with the same content slog's own
// JSON handler produces, for each kind of value and for hostile strings.
func TestJSONHandlerMatchesSlog(t *testing.T) {
	when := time.Date(2026, 11, 29, 15, 4, 5, 123456789, time.UTC)
	attrs := []slog.Attr{
		slog.String("s", "plain"),
		slog.String("esc", "quote\" backslash\\ nl\n tab\t ctl\x01 del\x7f <&> \u2028 é 日本"),
		slog.String("bad utf8", "a\xffb\xc3"),
		slog.Int("i", -42), slog.Uint64("u", 1<<63), slog.Float64("f", 1.25), slog.Bool("b", true),
		slog.Duration("d", 1500*time.Millisecond), slog.Time("t", when),
		slog.Any("err", errors.New("boom")), slog.Any("m", map[string]int{"x": 1}),
		slog.Group("g", slog.Int("a", 1), slog.String("b", "two")),
		slog.Group("", slog.Int("inlined", 3)),
		slog.Group("empty"),
	}
	var ours, theirs bytes.Buffer
	for _, l := range []*slog.Logger{
		slog.New(NewJSONHandler(&ours, slog.LevelDebug)).With("pre", "x").WithGroup("grp"),
		slog.New(slog.NewJSONHandler(&theirs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("pre", "x").WithGroup("grp"),
	} {
		r := slog.NewRecord(when, slog.LevelWarn, "hello \"world\"", 0)
		r.AddAttrs(attrs...)
		if err := l.Handler().Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	var a, b map[string]any
	if err := json.Unmarshal(ours.Bytes(), &a); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, ours.String())
	}
	if err := json.Unmarshal(theirs.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("ours:   %s\nslog's: %s", ours.String(), theirs.String())
	}
	if strings.Count(ours.String(), "\n") != 1 {
		t.Fatalf("not one line: %q", ours.String())
	}
}

func testExchange() *exchange {
	s := &Server{}
	ex := newExchange(s)
	ex.requestID = []byte("req-1")
	ex.path = []byte("/v1/chat/completions")
	ex.model = []byte("gpt-4o")
	ex.outcome, ex.status, ex.duration = OutcomeOKAfterFailover, 200, 1234*time.Microsecond
	ex.servedBy = &Target{Name: "second"}
	ex.ledger.add(attemptRecord{target: "first", status: 503, duration: time.Millisecond})
	ex.ledger.add(attemptRecord{target: "second", status: 200, duration: 2 * time.Millisecond})
	return ex
}

func TestRequestRecordIsFlatJSON(t *testing.T) {
	var buf bytes.Buffer
	slog.New(NewJSONHandler(&buf, slog.LevelInfo)).LogAttrs(context.Background(), slog.LevelInfo, "request", slog.Any("", (*requestRecord)(testExchange())))
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
	slog.New(tint.NewTextHandler(&buf, &tint.Options{NoColor: true})).LogAttrs(context.Background(), slog.LevelInfo, "request", slog.Any("", (*requestRecord)(testExchange())))
	out := buf.String()
	for _, want := range []string{"request_id=req-1", "outcome=ok_after_failover", "target=second", "1:first 503", "2:second 200"} {
		if !strings.Contains(out, want) {
			t.Errorf("text record lacks %q: %s", want, out)
		}
	}
}

func TestLedgerListsAtMost32Attempts(t *testing.T) {
	var l Ledger
	for i := range 40 {
		l.add(attemptRecord{target: "t" + strconv.Itoa(i), status: 503})
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
	l.reset()
	l.add(attemptRecord{target: "again"})
	if l.n != 1 || len(l.more) != 0 || l.last().target != "again" {
		t.Fatal("reset did not start over")
	}
}

func TestLogWriterBatchesAndLosesNothing(t *testing.T) {
	var out proxytest.SyncBuffer
	w := NewLogWriter(&out, 20*time.Millisecond)
	log := slog.New(NewJSONHandler(w, slog.LevelInfo))
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 2000 {
				log.Info("line", slog.Int("g", g), slog.Int("i", i), slog.String("pad", strings.Repeat("x", 50)))
			}
		}()
	}
	for range 8 {
		<-done
	}
	time.Sleep(60 * time.Millisecond) // the interval flush, without Close
	if n := strings.Count(out.String(), "\n"); n < 15000 {
		t.Fatalf("only %d of 16000 lines after the flush interval", n)
	}
	w.Close()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 16000 {
		t.Fatalf("%d lines, want 16000", len(lines))
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("a line was torn: %q", l)
		}
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
