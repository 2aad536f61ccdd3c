package observe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

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

// The request record written by the JSON handler's own way (Record.Log) is the line slog's
// way through Handle writes: with attributes and groups from With and WithGroup too.
func TestRequestRecordEitherWay(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 456000000, time.UTC)
	for _, derive := range []func(*JSONHandler) slog.Handler{
		func(h *JSONHandler) slog.Handler { return h },
		func(h *JSONHandler) slog.Handler { return h.WithAttrs([]slog.Attr{slog.String("pod", "p-1")}) },
		func(h *JSONHandler) slog.Handler { return h.WithGroup("g").WithAttrs([]slog.Attr{slog.Int("n", 1)}) },
	} {
		var direct, viaRecord bytes.Buffer
		derive(NewJSONHandler(&direct, slog.LevelInfo)).(*JSONHandler).handleFields(at, slog.LevelWarn, "request", testRecord())
		r := slog.NewRecord(at, slog.LevelWarn, "request", 0)
		r.AddAttrs(slog.Any("", testRecord()))
		if err := derive(NewJSONHandler(&viaRecord, slog.LevelInfo)).Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if direct.String() != viaRecord.String() || !json.Valid(direct.Bytes()) {
			t.Errorf("direct:     %s\nvia Handle: %s", direct.String(), viaRecord.String())
		}
	}
}
