package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
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

// BenchmarkRequestRecord is the record of a request served by its first attempt, written as
// the sidecar writes it: the JSON handler into a LogWriter (README, The request record).
func BenchmarkRequestRecord(b *testing.B) {
	lw := NewLogWriter(io.Discard, time.Hour)
	defer lw.Close()
	ex := newExchange(&Server{log: slog.New(NewJSONHandler(lw, slog.LevelInfo))})
	ex.requestID = []byte("4bf92f3577b34da6a3ce929d0e0e4736")
	ex.path = []byte("/v1/chat/completions")
	ex.model = []byte("gpt-4o-mini")
	ex.start = time.Now()
	ex.outcome, ex.status, ex.duration = OutcomeOK, 200, 1234*time.Microsecond
	ex.servedBy = &Target{Name: "openai"}
	ex.ledger.add(attemptRecord{target: "openai", status: 200, duration: time.Millisecond})
	b.ReportAllocs()
	for b.Loop() {
		ex.logRequest()
	}
}

// The record's time is written as time.RFC3339Nano writes it, whatever the second, the
// fraction (trailing zeros dropped, none when zero) and the zone, and from a cache that one
// second's records share.
func TestStampMatchesRFC3339Nano(t *testing.T) {
	zones := []*time.Location{time.UTC, time.FixedZone("IST", 5*3600+1800), time.FixedZone("PST", -8*3600), time.FixedZone("odd", 3600+17*60+30), time.FixedZone("far", -10000*3600)}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		zones = append(zones, ny)
	}
	base := time.Date(2026, 3, 8, 6, 59, 58, 0, time.UTC) // two seconds before New York's clocks go forward
	var c stampCache
	for _, loc := range zones {
		for _, d := range []time.Duration{0, 1, 10, 100 * time.Millisecond, 120 * time.Millisecond, time.Second - 1, time.Second, 1500 * time.Millisecond,
			2 * time.Second, 2*time.Second + 7, 3 * time.Second, 24 * time.Hour, -time.Second} {
			for _, at := range []time.Time{base.Add(d).In(loc), time.Date(9999, 12, 31, 23, 59, 59, 999999999, loc), time.Date(10000, 1, 1, 0, 0, 0, 5, loc),
				time.Date(-1, 1, 1, 0, 0, 0, 0, loc), time.Unix(0, 0).In(loc)} {
				if got, want := c.appendTime(nil, at), at.AppendFormat(nil, time.RFC3339Nano); string(got) != string(want) {
					t.Errorf("%v: got %s, want %s", at, got, want)
				}
			}
		}
	}
}

// The request record written by the JSON handler's own way (logRequest) is the line slog's
// way through Handle writes: with attributes and groups from With and WithGroup too.
func TestRequestRecordEitherWay(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 456000000, time.UTC)
	for _, derive := range []func(*JSONHandler) slog.Handler{
		func(h *JSONHandler) slog.Handler { return h },
		func(h *JSONHandler) slog.Handler { return h.WithAttrs([]slog.Attr{slog.String("pod", "p-1")}) },
		func(h *JSONHandler) slog.Handler { return h.WithGroup("g").WithAttrs([]slog.Attr{slog.Int("n", 1)}) },
	} {
		var direct, viaRecord bytes.Buffer
		derive(NewJSONHandler(&direct, slog.LevelInfo)).(*JSONHandler).handleFields(at, slog.LevelWarn, "request", (*requestRecord)(testExchange()))
		r := slog.NewRecord(at, slog.LevelWarn, "request", 0)
		r.AddAttrs(slog.Any("", (*requestRecord)(testExchange())))
		if err := derive(NewJSONHandler(&viaRecord, slog.LevelInfo)).Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if direct.String() != viaRecord.String() || !json.Valid(direct.Bytes()) {
			t.Errorf("direct:     %s\nvia Handle: %s", direct.String(), viaRecord.String())
		}
	}
}
