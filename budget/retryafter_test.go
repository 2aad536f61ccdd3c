package budget

import (
	"math"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	const never = -1 // want ok=false
	tests := []struct {
		name       string
		retryAfter string
		ms         string
		want       time.Duration
	}{
		{"delay-seconds", "120", "", 120 * time.Second},
		{"zero seconds", "0", "", 0},
		{"leading zeros", "007", "", 7 * time.Second},
		{"whitespace around seconds", " \t5 ", "", 5 * time.Second},
		{"fractional seconds", "1.5", "", 1500 * time.Millisecond},
		{"IMF-fixdate in the future", "Sun, 01 Mar 2026 12:00:30 GMT", "", 30 * time.Second},
		{"RFC 850 date", "Sunday, 01-Mar-26 12:01:00 GMT", "", time.Minute},
		{"RFC 850 date with the longest day name", "Wednesday, 04-Mar-26 12:00:00 GMT", "", 72 * time.Hour},
		{"ANSI C date", "Sun Mar  1 12:00:05 2026", "", 5 * time.Second},
		{"date now is zero", "Sun, 01 Mar 2026 12:00:00 GMT", "", 0},
		{"past date is zero", "Sat, 28 Feb 2026 12:00:00 GMT", "", 0},
		{"far-future date saturates", "Fri, 31 Dec 9999 23:59:59 GMT", "", math.MaxInt64},
		{"retry-after-ms", "", "1500", 1500 * time.Millisecond},
		{"fractional retry-after-ms", "", "1500.5", 1500*time.Millisecond + 500*time.Microsecond},
		{"retry-after-ms below a nanosecond truncates", "", "0.0000019", 1},
		{"retry-after-ms wins over Retry-After", "30", "20", 20 * time.Millisecond},
		{"retry-after-ms wins over a date", "Sun, 01 Mar 2026 12:00:30 GMT", "250", 250 * time.Millisecond},
		{"invalid retry-after-ms falls back to Retry-After", "3", "soon", 3 * time.Second},
		{"negative retry-after-ms falls back to Retry-After", "3", "-5", 3 * time.Second},
		{"largest whole seconds that fit", "9223372036", "", 9223372036 * time.Second},
		{"huge seconds saturate", "99999999999999999999999999", "", math.MaxInt64},
		{"seconds just past the limit saturate", "9223372037", "", math.MaxInt64},
		{"huge ms saturate", "", "99999999999999999999999999.5", math.MaxInt64},
		{"garbage", "soon", "", never},
		{"negative seconds", "-1", "", never},
		{"negative ms and nothing else", "", "-5", never},
		{"plus sign", "+5", "", never},
		{"exponent", "1e3", "", never},
		{"unit suffix", "5s", "", never},
		{"hex", "0x10", "", never},
		{"dot without fraction", "5.", "", never},
		{"fraction without whole", ".5", "", never},
		{"two dots", "1.2.3", "", never},
		{"inner space", "1 2", "", never},
		{"empty", "", "", never},
		{"only whitespace", "  ", " ", never},
		{"ISO 8601 is not an HTTP-date", "2026-03-01T12:00:30Z", "", never},
		{"date with a bad month", "Sun, 01 Foo 2026 12:00:30 GMT", "", never},
		{"date-shaped garbage", "Sunday Sunday Sunday Sunday", "", never},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := ParseRetryAfter([]byte(tt.retryAfter), []byte(tt.ms), t0)
			if tt.want == never {
				if ok {
					t.Errorf("ParseRetryAfter(%q, %q) = %v, true; want ok=false", tt.retryAfter, tt.ms, d)
				}
				return
			}
			if !ok || d != tt.want {
				t.Errorf("ParseRetryAfter(%q, %q) = %v, %v; want %v, true", tt.retryAfter, tt.ms, d, ok, tt.want)
			}
		})
	}
}

// TestParseRetryAfterNil: a missing header arrives as nil, not as an empty slice.
func TestParseRetryAfterNil(t *testing.T) {
	if d, ok := ParseRetryAfter(nil, nil, t0); ok {
		t.Errorf("ParseRetryAfter(nil, nil) = %v, true; want ok=false", d)
	}
}

func TestParseRetryAfterAllocs(t *testing.T) {
	tests := []struct{ name, retryAfter, ms string }{
		{"seconds", "120", ""},
		{"fractional seconds", "1.5", ""},
		{"ms", "", "1500.5"},
		{"garbage", "soon", "never"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ra, ms := []byte(tt.retryAfter), []byte(tt.ms)
			if got := testing.AllocsPerRun(1000, func() { ParseRetryAfter(ra, ms, t0) }); got != 0 {
				t.Errorf("ParseRetryAfter(%q, %q) allocates %v times, want 0", tt.retryAfter, tt.ms, got)
			}
		})
	}
}

// FuzzParseRetryAfter: never panics, never negative, and a valid retry-after-ms decides alone.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range [][2]string{
		{"120", ""}, {"", "1500.5"}, {"Sun, 01 Mar 2026 12:00:30 GMT", ""}, {"Sunday, 01-Mar-26 12:01:00 GMT", ""},
		{"Sun Mar  1 12:00:05 2026", ""}, {"-1", "-1"}, {"99999999999999999999", ""},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, retryAfter, ms []byte) {
		d, ok := ParseRetryAfter(retryAfter, ms, t0)
		if !ok && d != 0 {
			t.Errorf("ok=false with d=%v", d)
		}
		if d < 0 {
			t.Errorf("negative wait %v", d)
		}
		if dm, okm := ParseRetryAfter(nil, ms, t0); okm && (dm != d || !ok) {
			t.Errorf("retry-after-ms alone gives %v, with Retry-After %q it gives %v, %v", dm, retryAfter, d, ok)
		}
	})
}

func BenchmarkParseRetryAfter(b *testing.B) {
	for _, bb := range []struct{ name, retryAfter, ms string }{
		{"seconds", "120", ""},
		{"ms", "", "1500.5"},
		{"http-date", "Sun, 01 Mar 2026 12:00:30 GMT", ""},
	} {
		b.Run(bb.name, func(b *testing.B) {
			ra, ms := []byte(bb.retryAfter), []byte(bb.ms)
			b.ReportAllocs()
			for b.Loop() {
				ParseRetryAfter(ra, ms, t0)
			}
		})
	}
}
