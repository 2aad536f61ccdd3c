package budget

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// readRateLimit reads h's figures as the proxy does (observeHead): one walk of its header lines.
func readRateLimit(h *fasthttp.ResponseHeader, now time.Time) RateFigures {
	var s RateLimitScan
	for k, v := range h.All() {
		s.Header(k, v)
	}
	return s.Figures(now)
}

// responseHeader reads a raw response head (LF or CRLF line ends) the way the proxy does.
func responseHeader(tb testing.TB, raw string) *fasthttp.ResponseHeader {
	tb.Helper()
	raw = strings.ReplaceAll(strings.ReplaceAll(raw, "\r\n", "\n"), "\n", "\r\n")
	if !strings.HasSuffix(raw, "\r\n\r\n") {
		raw += "\r\n"
	}
	var h fasthttp.ResponseHeader
	if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		tb.Fatalf("reading %q: %v", raw, err)
	}
	return &h
}

// headerFixture reads testdata/ratelimit/<name>.http.
func headerFixture(tb testing.TB, name string) *fasthttp.ResponseHeader {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "ratelimit", name+".http"))
	if err != nil {
		tb.Fatal(err)
	}
	return responseHeader(tb, string(b))
}

// describe writes f compactly, resets relative to now: "requests 3/10 +1s; tokens 0 none" (remaining/limit,
// then the reset: +wait, or "none").
func describe(f RateFigures, now time.Time) string {
	var parts []string
	for q := range NumQuotas {
		fig := f[q]
		if !fig.HasRemaining && !fig.HasLimit && fig.Reset.IsZero() {
			continue
		}
		s := q.String() + " "
		if fig.HasRemaining {
			s += strconv.FormatInt(fig.Remaining, 10)
		} else {
			s += "?"
		}
		if fig.HasLimit {
			s += "/" + strconv.FormatInt(fig.Limit, 10)
		}
		if fig.Reset.IsZero() {
			s += " none"
		} else {
			s += " +" + fig.Reset.Sub(now).String()
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// TestReadRateLimitProviders reads answers shaped like each provider's (testdata/ratelimit).
func TestReadRateLimitProviders(t *testing.T) {
	tests := []struct{ fixture, want string }{
		{"openai-chat", "requests 4999/5000 +12ms; tokens 799975/800000 +1ms"},
		{"openai-requests-spent", "requests 0/200 +2m59.56s; tokens 39812/40000 +282ms"},
		{"openai-daily-spent", "requests 9981/10000 +1m48s; tokens 0/2000000 +20h33m14.4s"},
		// Azure often sends only the remaining figures.
		{"azure-chat", "requests 19 none; tokens 19913 none"},
		// Azure writes resets as whole seconds (openai/openai-dotnet#838).
		{"azure-tokens-spent", "requests 87/120 +1s; tokens 0/20000 +8s"},
		// Azure's Responses API has sent -1 for what it does not know (openai/openai-dotnet#838).
		{"azure-responses-unknown", ""},
		{"anthropic-messages", "requests 3999/4000 +0s; tokens 2397000/2400000 +1s; input_tokens 1998000/2000000 +1s; output_tokens 399000/400000 +9s"},
		{"anthropic-output-spent", "requests 41/50 +7s; tokens 0/38000 +45s; input_tokens 22000/30000 +16s; output_tokens 0/8000 +45s"},
		{"none", ""},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			f := readRateLimit(headerFixture(t, tt.fixture), t0)
			if got := describe(f, t0); got != tt.want {
				t.Errorf("ReadRateLimit = %q\nwant           %q", got, tt.want)
			}
			if f.Reported() != (tt.want != "") {
				t.Errorf("Reported() = %v for %q", f.Reported(), tt.want)
			}
		})
	}
}

// TestReadRateLimitHeaders: each value is read on its own; a bad one is absent and leaves the others alone.
func TestReadRateLimitHeaders(t *testing.T) {
	tests := []struct {
		name    string
		headers string
		want    string
	}{
		{"names in any case", "X-RATELIMIT-REMAINING-REQUESTS: 7\nx-RateLimit-Limit-Requests: 9\nX-Ratelimit-Reset-Requests: 1s",
			"requests 7/9 +1s"},
		{"whitespace around values", "x-ratelimit-remaining-tokens:   12  \nx-ratelimit-reset-tokens: \t6m0s",
			"tokens 12 +6m0s"},
		{"limit and reset without remaining are not read", "x-ratelimit-limit-requests: 9\nx-ratelimit-reset-requests: 1s", ""},
		{"malformed remaining: its limit and reset are not read either",
			"x-ratelimit-remaining-requests: lots\nx-ratelimit-limit-requests: 9\nx-ratelimit-reset-requests: 1s\nx-ratelimit-remaining-tokens: 5",
			"tokens 5 none"},
		{"malformed limit is absent", "x-ratelimit-remaining-requests: 3\nx-ratelimit-limit-requests: 1e4", "requests 3 none"},
		{"malformed reset is absent", "x-ratelimit-remaining-requests: 0\nx-ratelimit-reset-requests: soon", "requests 0 none"},
		{"an RFC 3339 reset on an OpenAI header is absent", "x-ratelimit-remaining-requests: 0\nx-ratelimit-reset-requests: 2026-03-01T12:00:30Z",
			"requests 0 none"},
		{"a duration on an Anthropic header is absent", "anthropic-ratelimit-requests-remaining: 0\nanthropic-ratelimit-requests-reset: 30s",
			"requests 0 none"},
		{"a past Anthropic reset reads as now", "anthropic-ratelimit-tokens-remaining: 0\nanthropic-ratelimit-tokens-reset: 2026-03-01T11:59:00Z",
			"tokens 0 +0s"},
		{"an Anthropic reset with an offset", "anthropic-ratelimit-tokens-remaining: 0\nanthropic-ratelimit-tokens-reset: 2026-03-01T13:00:30+01:00",
			"tokens 0 +30s"},
		{"negative remaining is absent", "x-ratelimit-remaining-requests: -1\nx-ratelimit-reset-requests: 1s", ""},
		{"empty remaining is absent", "x-ratelimit-remaining-requests:\nx-ratelimit-remaining-tokens: 1", "tokens 1 none"},
		{"overflowing remaining is absent", "x-ratelimit-remaining-requests: 9223372036854775808", ""},
		{"the largest remaining", "x-ratelimit-remaining-requests: 9223372036854775807", "requests 9223372036854775807 none"},
		{"both families: the OpenAI one is read",
			"anthropic-ratelimit-requests-remaining: 0\nanthropic-ratelimit-requests-reset: 2026-03-01T12:01:00Z\nx-ratelimit-remaining-requests: 5",
			"requests 5 none"},
		{"both families, the OpenAI one malformed: the Anthropic one is read",
			"x-ratelimit-remaining-requests: x\nanthropic-ratelimit-requests-remaining: 0\nanthropic-ratelimit-requests-reset: 2026-03-01T12:01:00Z",
			"requests 0 +1m0s"},
		{"a repeated header: the first is read", "x-ratelimit-remaining-requests: 4\nx-ratelimit-remaining-requests: 0", "requests 4 none"},
		{"near names are not read", "x-ratelimit-remaining: 0\nx-ratelimit-remaining-tokens_usage_based: 0\nx-rate-limit-remaining-tokens: 0\nratelimit-remaining: 0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := responseHeader(t, "HTTP/1.1 200 OK\nContent-Length: 0\n"+tt.headers+"\n")
			if got := describe(readRateLimit(h, t0), t0); got != tt.want {
				t.Errorf("ReadRateLimit = %q\nwant           %q", got, tt.want)
			}
		})
	}
}

func TestParseCount(t *testing.T) {
	tests := []struct {
		in   string
		want int64 // -1: absent
	}{
		{"0", 0}, {"42", 42}, {"007", 7}, {" 5\t", 5},
		{"9223372036854775807", math.MaxInt64},
		{"9223372036854775808", -1}, {"99999999999999999999999", -1},
		{"", -1}, {"  ", -1}, {"-1", -1}, {"+1", -1}, {"1.0", -1}, {"1e3", -1}, {"0x10", -1},
		{"1 000", -1}, {"1,000", -1}, {"١٢", -1}, {"12abc", -1},
	}
	for _, tt := range tests {
		n, ok := parseCount([]byte(tt.in))
		if tt.want < 0 {
			if ok {
				t.Errorf("parseCount(%q) = %d, true; want absent", tt.in, n)
			}
			continue
		}
		if !ok || n != tt.want {
			t.Errorf("parseCount(%q) = %d, %v; want %d", tt.in, n, ok, tt.want)
		}
	}
}

func TestParseResetDuration(t *testing.T) {
	const absent = -1
	tests := []struct {
		in   string
		want time.Duration
	}{
		// As OpenAI writes them.
		{"6m0s", 6 * time.Minute},
		{"1s", time.Second},
		{"20ms", 20 * time.Millisecond},
		{"2m59.56s", 2*time.Minute + 59560*time.Millisecond},
		{"1h2m3s", time.Hour + 2*time.Minute + 3*time.Second},
		{"0s", 0},
		{"7.66s", 7660 * time.Millisecond},
		{"20h33m14.4s", 20*time.Hour + 33*time.Minute + 14400*time.Millisecond},
		// Other shapes Go's Duration.String writes.
		{"1.5µs", 1500 * time.Nanosecond},
		{"1.5\u03bcs", 1500 * time.Nanosecond},
		{"3us", 3 * time.Microsecond},
		{"800ns", 800},
		{"1m5ms", time.Minute + 5*time.Millisecond},
		{"90s", 90 * time.Second},
		{"1h", time.Hour},
		{"0.0000000019s", 1},
		{" 1s ", time.Second},
		// As Azure writes them: whole seconds.
		{"55", 55 * time.Second},
		{"0", 0},
		{"9223372036", 9223372036 * time.Second},
		// Absent.
		{"", absent}, {" ", absent}, {"s", absent}, {"ms", absent}, {".5s", absent}, {"5.s", absent},
		{"1.5", absent}, {"-1s", absent}, {"-1", absent}, {"+1s", absent}, {"1 s", absent}, {"1s 2ms", absent},
		{"1s1m", absent}, {"1s1s", absent}, {"1ms1s", absent}, {"1m1m", absent}, {"1us1µs", absent},
		{"1d", absent}, {"1S", absent}, {"1sec", absent}, {"1e3s", absent}, {"1h2", absent},
		{"9223372037", absent}, {"2562048h", absent}, {"2562047h47m16.854775808s", absent},
		{"99999999999999999999ns", absent}, {"1.5.5s", absent}, {"2026-03-01T12:00:30Z", absent},
		{"Sun, 01 Mar 2026 12:00:30 GMT", absent}, {"µs", absent}, {"1\xb5s", absent},
	}
	for _, tt := range tests {
		d, ok := parseResetDuration([]byte(tt.in))
		if tt.want == absent {
			if ok {
				t.Errorf("parseResetDuration(%q) = %v, true; want absent", tt.in, d)
			}
			continue
		}
		if !ok || d != tt.want {
			t.Errorf("parseResetDuration(%q) = %v, %v; want %v", tt.in, d, ok, tt.want)
		}
	}
	// The largest a Duration holds, written as Go writes it.
	if d, ok := parseResetDuration([]byte(time.Duration(math.MaxInt64).String())); !ok || d != math.MaxInt64 {
		t.Errorf("parseResetDuration(%q) = %v, %v; want the largest Duration", time.Duration(math.MaxInt64), d, ok)
	}
}

func TestParseRFC3339(t *testing.T) {
	tests := []struct {
		in   string
		want string // time.RFC3339Nano in UTC; "" = absent
	}{
		{"2026-12-01T14:05:00Z", "2026-12-01T14:05:00Z"},
		{"2026-03-01T12:00:30.25Z", "2026-03-01T12:00:30.25Z"},
		{"2026-03-01T12:00:30.1234567891Z", "2026-03-01T12:00:30.123456789Z"},
		{"2026-03-01T13:00:30+01:00", "2026-03-01T12:00:30Z"},
		{"2026-03-01T06:30:00-05:30", "2026-03-01T12:00:00Z"},
		{"2026-03-01t12:00:30z", "2026-03-01T12:00:30Z"},
		{" 2026-03-01T12:00:30Z ", "2026-03-01T12:00:30Z"},
		{"2024-02-29T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"2000-02-29T00:00:00Z", "2000-02-29T00:00:00Z"},
		{"2016-12-31T23:59:60Z", "2017-01-01T00:00:00Z"},
		{"0000-01-01T00:00:00Z", "0000-01-01T00:00:00Z"},
		{"9999-12-31T23:59:59Z", "9999-12-31T23:59:59Z"},
		{"", ""}, {"soon", ""}, {"2026-03-01", ""}, {"2026-03-01T12:00:30", ""}, {"2026-03-01 12:00:30Z", ""},
		{"2026-03-01T12:00Z", ""}, {"2026-3-01T12:00:30Z", ""}, {"2026-13-01T12:00:30Z", ""}, {"2026-00-01T12:00:30Z", ""},
		{"2026-04-31T12:00:30Z", ""}, {"2026-02-29T12:00:30Z", ""}, {"1900-02-29T12:00:30Z", ""}, {"2026-03-00T12:00:30Z", ""},
		{"2026-03-01T24:00:00Z", ""}, {"2026-03-01T12:60:00Z", ""}, {"2026-03-01T12:00:61Z", ""},
		{"2026-03-01T12:00:30.Z", ""}, {"2026-03-01T12:00:30+01", ""}, {"2026-03-01T12:00:30+0100", ""},
		{"2026-03-01T12:00:30+24:00", ""}, {"2026-03-01T12:00:30+01:60", ""}, {"2026-03-01T12:00:30ZZ", ""},
		{"2026-03-01T12:00:30 Z", ""}, {"+2026-03-01T12:00:30Z", ""}, {"2026-03-01T12:00:30GMT", ""},
		{"20260301T120030Z", ""}, {"2026-03-01T12:00:30.5", ""}, {"2026-03-01T1a:00:30Z", ""},
		{"Sun, 01 Mar 2026 12:00:30 GMT", ""}, {"1772366430", ""},
	}
	for _, tt := range tests {
		got, ok := parseRFC3339([]byte(tt.in))
		if tt.want == "" {
			if ok {
				t.Errorf("parseRFC3339(%q) = %v, true; want absent", tt.in, got)
			}
			continue
		}
		if s := got.UTC().Format(time.RFC3339Nano); !ok || s != tt.want {
			t.Errorf("parseRFC3339(%q) = %s, %v; want %s", tt.in, s, ok, tt.want)
		}
	}
}

// TestRateLimitHeaderTable: the names are data in one place; they must stay lower case, distinct, and each quota
// read from both families, so that the README table can list them.
func TestRateLimitHeaderTable(t *testing.T) {
	seen := map[string]bool{}
	quotas := map[string]map[Quota]bool{}
	for _, row := range rateLimitHeaders {
		for _, name := range []string{row.remaining, row.limit, row.reset} {
			if name != strings.ToLower(name) || seen[name] {
				t.Errorf("header %q: not lower case, or listed twice", name)
			}
			seen[name] = true
		}
		if quotas[row.provider] == nil {
			quotas[row.provider] = map[Quota]bool{}
		}
		quotas[row.provider][row.quota] = true
	}
	if want := "map[Anthropic:map[requests:true tokens:true input_tokens:true output_tokens:true] OpenAI, Azure:map[requests:true tokens:true]]"; fmt.Sprint(quotas) != want {
		t.Errorf("quotas read per provider: %v\nwant %s", quotas, want)
	}
}

// TestReadRateLimitAllocs: reading an answer's figures allocates nothing, whatever it reports.
func TestReadRateLimitAllocs(t *testing.T) {
	for _, fixture := range []string{"openai-chat", "azure-chat", "anthropic-output-spent", "azure-responses-unknown", "none"} {
		t.Run(fixture, func(t *testing.T) {
			h := headerFixture(t, fixture)
			if got := testing.AllocsPerRun(1000, func() { readRateLimit(h, t0) }); got != 0 {
				t.Errorf("ReadRateLimit allocates %v times per answer, want 0", got)
			}
		})
	}
}

// FuzzRateLimitValue runs every parser over one value: never a panic, never a negative figure, and each agrees
// with the standard library wherever the standard library reads the same form.
func FuzzRateLimitValue(f *testing.F) {
	for _, s := range []string{
		"0", "4999", "-1", "9223372036854775808", "6m0s", "2m59.56s", "20ms", "1h2m3s", "1.5µs", "1s1m", "55",
		"2026-12-01T14:05:00Z", "2026-03-01T13:00:30.5+01:00", "2016-12-31T23:59:60Z", "2026-02-29T00:00:00Z",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := string(trimSpace(b))

		n, ok := parseCount(b)
		want, err := strconv.ParseInt(s, 10, 64)
		wantOK := err == nil && s != "" && s[0] != '+' && s[0] != '-'
		if ok != wantOK || ok && n != want {
			t.Errorf("parseCount(%q) = %d, %v; strconv says %d, %v", b, n, ok, want, err)
		}

		d, ok := parseResetDuration(b)
		if ok && d < 0 {
			t.Errorf("parseResetDuration(%q) = %v: negative", b, d)
		}
		if _, isCount := parseCount(b); ok && !isCount {
			// What is read as a Go duration, Go reads too, within the nanoseconds its float fractions lose.
			gd, err := time.ParseDuration(s)
			if err != nil || max(gd-d, d-gd) > 8 {
				t.Errorf("parseResetDuration(%q) = %v; time.ParseDuration says %v, %v", b, d, gd, err)
			}
		}

		tm, ok := parseRFC3339(b)
		gt, err := time.Parse(time.RFC3339, s)
		// time.Parse refuses lower case "t" and "z" and leap seconds, which RFC 3339 has.
		lenient := strings.ContainsAny(s, "tz") || len(s) >= 19 && s[17:19] == "60"
		switch {
		case ok && err == nil && !tm.Equal(gt):
			t.Errorf("parseRFC3339(%q) = %v; time.Parse says %v", b, tm, gt)
		case ok && err != nil && !lenient:
			t.Errorf("parseRFC3339(%q) = %v; time.Parse refuses it: %v", b, tm, err)
		case err == nil:
			// time.Parse also reads shapes RFC 3339 does not have (one-digit fields, a comma before the
			// fraction, an offset minute of 60): what it reads must be read once written as RFC 3339.
			canonical := gt.Format(time.RFC3339Nano)
			if ct, ok := parseRFC3339([]byte(canonical)); !ok || !ct.Equal(gt) {
				t.Errorf("parseRFC3339(%q) = %v, %v; want %v", canonical, ct, ok, gt)
			}
		}
	})
}

func BenchmarkReadRateLimit(b *testing.B) {
	for _, fixture := range []string{"openai-chat", "azure-chat", "anthropic-messages", "none"} {
		b.Run(fixture, func(b *testing.B) {
			h := headerFixture(b, fixture)
			b.ReportAllocs()
			for b.Loop() {
				readRateLimit(h, t0)
			}
		})
	}
}

// TestRateLimitScanTaken: Taken is what lets the proxy skip Figures and Observe, so a scan that
// took nothing must have nothing to report.
func TestRateLimitScanTaken(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, name := range []string{"anthropic-messages", "anthropic-output-spent", "azure-chat", "azure-tokens-spent", "none", "openai-chat", "openai-daily-spent", "openai-requests-spent"} {
		var s RateLimitScan
		for k, v := range headerFixture(t, name).All() {
			s.Header(k, v)
		}
		f := s.Figures(now)
		if reported := f.Reported(); reported != s.Taken() || s.Taken() == (name == "none") {
			t.Errorf("%s: Taken %v, figures reported %v", name, s.Taken(), reported)
		}
	}
	var s RateLimitScan
	s.Header([]byte("X-RateLimit-Remaining-Requests"), []byte("many")) // taken, though unreadable
	if f := s.Figures(now); !s.Taken() || f.Reported() {
		t.Errorf("a malformed figure: Taken %v, reported %v", s.Taken(), f.Reported())
	}
}
