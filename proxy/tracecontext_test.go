package proxy

import (
	"regexp"
	"strings"
	"testing"
)

const (
	validTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	validTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
)

// The rules of W3C Trace Context's traceparent (section 3.2), each by example.
func TestTraceIDOf(t *testing.T) {
	tests := []struct {
		name, value, want string
	}{
		{"version 00", validTraceparent, validTraceID},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", validTraceID},
		{"absent", "", ""},
		{"version 00 with more fields", validTraceparent + "-what-the-future-will-be-like", ""},
		{"a later version with more fields", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future-will-be-like", validTraceID},
		{"a later version as long as 00", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", validTraceID},
		{"a later version going on without a dash", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09x", ""},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"all-zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"all-zero parent id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""},
		{"upper-case hex", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""},
		{"not hex", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", ""},
		{"short trace id", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", ""},
		{"short", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", ""},
		{"underscores for dashes", "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", ""},
		{"bad version", "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"bad flags", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0z", ""},
		{"a B3 header, not W3C", "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", ""},
	}
	for _, tt := range tests {
		if got := string(traceIDOf([]byte(tt.value))); got != tt.want {
			t.Errorf("%s: %q gives %q, want %q", tt.name, tt.value, got, tt.want)
		}
	}
}

// Reading the trace id allocates nothing, whether the header is there or not.
func TestTraceIDOfAllocs(t *testing.T) {
	v := []byte(validTraceparent)
	if n := testing.AllocsPerRun(200, func() { traceIDOf(v); traceIDOf(nil) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

func BenchmarkTraceIDOf(b *testing.B) {
	v := []byte(validTraceparent)
	b.ReportAllocs()
	for b.Loop() {
		traceIDOf(v)
	}
}

// traceparentRule is the specification's grammar, written as a regular expression: the
// reference traceIDOf is checked against.
var traceparentRule = regexp.MustCompile(`(?s)^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?$`)

func FuzzTraceIDOf(f *testing.F) {
	for _, s := range []string{validTraceparent, "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-x", "", "ff-" + strings.Repeat("1", 52)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := traceIDOf([]byte(s))
		want := ""
		if m := traceparentRule.FindStringSubmatch(s); m != nil && m[1] != "ff" && (m[1] != "00" || m[4] == "") &&
			strings.Trim(m[2], "0") != "" && strings.Trim(m[3], "0") != "" {
			want = m[2]
		}
		if string(got) != want {
			t.Errorf("%q gives %q, want %q", s, got, want)
		}
	})
}
