package budget

import (
	"bytes"
	"math"
	"time"
)

// Quota is one of the quotas a provider reports on its answers.
type Quota uint8

const (
	QuotaRequests     Quota = iota // requests in the current window
	QuotaTokens                    // tokens (OpenAI, Azure: input and output together; Anthropic: the most restrictive token limit in effect)
	QuotaInputTokens               // input tokens (Anthropic)
	QuotaOutputTokens              // output tokens (Anthropic)
	NumQuotas
)

var quotaNames = [NumQuotas]string{"requests", "tokens", "input_tokens", "output_tokens"}

// String names the quota as a metric label does.
func (q Quota) String() string {
	if q < NumQuotas {
		return quotaNames[q]
	}
	return "unknown"
}

// QuotaFigures is what one answer said about one quota. The zero value says nothing.
type QuotaFigures struct {
	Remaining    int64 // what is left in the current window; valid when HasRemaining
	Limit        int64 // the window's total; valid when HasLimit
	HasRemaining bool
	HasLimit     bool
	// Reset is when the quota is full again, read relative to the answer's arrival; zero when not given. A
	// reset already past reads as the arrival time.
	Reset time.Time
}

// RateFigures is what one answer said about each of its quotas, indexed by Quota. The zero value says nothing.
// It is a plain value: it owns no memory of the response it was read from.
type RateFigures [NumQuotas]QuotaFigures

// Reported reports whether the answer gave any remaining figure: without one, it says nothing a decision can
// use, and RateLimit.Observe ignores it.
func (f *RateFigures) Reported() bool {
	for i := range f {
		if f[i].HasRemaining {
			return true
		}
	}
	return false
}

// resetForm is how a provider writes a reset.
type resetForm uint8

const (
	resetDuration resetForm = iota // time left, as a Go-style duration ("6m0s", "20ms") or whole seconds ("55")
	resetRFC3339                   // the moment itself, RFC 3339 ("2026-12-01T14:05:00Z")
)

// rateLimitHeader names the three headers that report one quota of one provider. Names are lower case, as the
// providers document them; lookups ignore case.
type rateLimitHeader struct {
	provider                string
	quota                   Quota
	remaining, limit, reset string
	form                    resetForm
}

// rateLimitHeaders is every header the sidecar reads quota from (docs/decisions.md, Rate limits), in the order they are
// read. Per quota, the first row whose remaining figure is valid wins: an answer carrying both families (a
// gateway in front of both) is read as the OpenAI family's. A row's limit and reset are read only when its
// remaining figure is valid: alone they can decide nothing.
//
//   - OpenAI sends all six x-ratelimit-* headers on every answer; resets are Go-style durations ("1s", "6m0s",
//     "20ms", "2m59.56s"): https://platform.openai.com/docs/guides/rate-limits (rate limits in headers).
//   - Azure OpenAI uses the same names, but often sends only the two remaining-* headers (Azure-Samples/openai
//     #80, Azure/azure-rest-api-specs#26884), and writes a reset as whole seconds ("x-ratelimit-reset-tokens" as
//     an int, openai/openai-dotnet#838, 2025; "55" on a 429, openai/openai-python#937, 2023, there under the
//     spelling x-rate-limit-reset-tokens, which is not read: it was seen on 429s only, which cost the attempt
//     anyway). Its Responses API has been seen sending -1 for remaining-tokens and limit-tokens
//     (openai/openai-dotnet#838): a negative count reads as absent, so it limits nothing.
//   - Anthropic sends anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset},
//     resets as RFC 3339 times: https://docs.anthropic.com/en/api/rate-limits (response headers). Its tokens-*
//     figures are those of the most restrictive token limit in effect.
var rateLimitHeaders = [...]rateLimitHeader{
	{"OpenAI, Azure", QuotaRequests, "x-ratelimit-remaining-requests", "x-ratelimit-limit-requests", "x-ratelimit-reset-requests", resetDuration},
	{"OpenAI, Azure", QuotaTokens, "x-ratelimit-remaining-tokens", "x-ratelimit-limit-tokens", "x-ratelimit-reset-tokens", resetDuration},
	{"Anthropic", QuotaRequests, "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-reset", resetRFC3339},
	{"Anthropic", QuotaTokens, "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-limit", "anthropic-ratelimit-tokens-reset", resetRFC3339},
	{"Anthropic", QuotaInputTokens, "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-limit", "anthropic-ratelimit-input-tokens-reset", resetRFC3339},
	{"Anthropic", QuotaOutputTokens, "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-reset", resetRFC3339},
}

// rateLimitKeys holds rateLimitHeaders' names as []byte, made once, for RateLimitScan.Header.
var rateLimitKeys = func() (keys [len(rateLimitHeaders)][3][]byte) {
	for i, h := range rateLimitHeaders {
		keys[i] = [3][]byte{[]byte(h.remaining), []byte(h.limit), []byte(h.reset)}
	}
	return keys
}()

// rateLimitByLen lists, for each name length, the names of that length (as rateLimitKeys' row and
// column): a header line is compared with the one to three names of its own length only.
var rateLimitByLen = func() (by [64][][2]uint8) {
	for i := range rateLimitKeys {
		for j, k := range rateLimitKeys[i] {
			by[len(k)] = append(by[len(k)], [2]uint8{uint8(i), uint8(j)})
		}
	}
	return by
}()

// RateLimitScan gathers the rate-limit headers of one answer (rateLimitHeaders) while the caller
// walks the answer's header lines once, handing each to Header; Figures then reads them. One
// walk costs less than a lookup per name (a provider's answer carries twenty-odd headers, and
// each lookup walks them all), and an answer without such headers costs a byte compare per
// line. The zero value is ready; a RateLimitScan holds views of the header values it was given,
// so Figures must be called before they change. It allocates nothing.
type RateLimitScan struct {
	raw   [len(rateLimitHeaders)][3][]byte // the first value of each name, nil when absent
	taken bool                             // a line of one of the names was taken
}

// Taken reports whether any line was one of rateLimitHeaders: when none was, Figures reports
// nothing and the answer has nothing to give a RateLimit.
func (s *RateLimitScan) Taken() bool { return s.taken }

// Header takes one header line. Names are compared ignoring case; a name sent twice is read
// from its first line.
func (s *RateLimitScan) Header(key, value []byte) {
	if len(key) >= len(rateLimitByLen) {
		return
	}
	for _, n := range rateLimitByLen[len(key)] {
		if bytes.EqualFold(rateLimitKeys[n[0]][n[1]], key) {
			s.taken = true
			if raw := &s.raw[n[0]][n[1]]; *raw == nil {
				*raw = value[:len(value):len(value)]
			}
			return
		}
	}
}

// Figures reads the quota figures from the headers taken (rateLimitHeaders), resets taken
// relative to now, the answer's arrival. Absent, empty, negative, malformed and overflowing
// values read as absent, each on its own: nothing here is an error. Per quota, the first row
// whose remaining figure is valid wins; a row's limit and reset count only with it.
func (s *RateLimitScan) Figures(now time.Time) (f RateFigures) {
	for i := range rateLimitHeaders {
		row, raw := &rateLimitHeaders[i], &s.raw[i]
		q := &f[row.quota]
		if q.HasRemaining {
			continue
		}
		if q.Remaining, q.HasRemaining = parseCount(raw[0]); !q.HasRemaining {
			continue
		}
		q.Limit, q.HasLimit = parseCount(raw[1])
		q.Reset = parseReset(raw[2], row.form, now)
	}
	return f
}

// parseReset reads a reset written in form, as a moment no earlier than now; the zero Time when absent or
// malformed.
func parseReset(b []byte, form resetForm, now time.Time) time.Time {
	if form == resetRFC3339 {
		t, ok := parseRFC3339(b)
		if !ok {
			return time.Time{}
		}
		// now plus the wait, rather than t itself: the reading keeps now's monotonic clock, so a later step of
		// the wall clock does not move it. Sub saturates; a past moment means the quota is already back.
		return now.Add(max(t.Sub(now), 0))
	}
	d, ok := parseResetDuration(b)
	if !ok {
		return time.Time{}
	}
	return now.Add(d)
}

// parseCount parses a count: DIGIT+, optional whitespace around it. A sign, a fraction, anything else, and a
// value past int64 read as absent.
func parseCount(b []byte) (int64, bool) {
	b = trimSpace(b)
	if len(b) == 0 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if !isDigit(c) || n > (math.MaxInt64-int64(c-'0'))/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// durationUnits are the units of a Go-style duration: a reset must name them from longest to shortest, each
// at most once, as Go's time.Duration.String writes them ("1h2m3.5s", "20ms", "1.5µs"). Both spellings of micro
// that time.ParseDuration accepts are here (U+00B5 and U+03BC), and "us".
var durationUnits = [...]struct {
	rank   int // a unit may follow only units of lower rank
	name   string
	amount time.Duration
}{
	{0, "h", time.Hour},
	{3, "ms", time.Millisecond}, // before "m", its prefix
	{1, "m", time.Minute},
	{2, "s", time.Second},
	{4, "us", time.Microsecond},
	{4, "\u00b5s", time.Microsecond},
	{4, "\u03bcs", time.Microsecond},
	{5, "ns", time.Nanosecond},
}

// parseResetDuration parses a reset written as time left, in one of the two forms providers send:
//
//   - a Go-style duration, as OpenAI writes its resets: one or more DIGIT+ [ "." DIGIT+ ] unit, units among h, m,
//     s, ms, us (µs), ns, from longest to shortest, each at most once ("6m0s", "1s", "20ms", "2m59.56s", "0s");
//   - DIGIT+ alone, whole seconds, as Azure OpenAI writes them ("55").
//
// Whitespace around it is ignored. A sign, spaces inside, a fraction without a unit, units out of order or repeated, and a total past the
// largest Duration read as absent. Fractions below a nanosecond are truncated.
func parseResetDuration(b []byte) (time.Duration, bool) {
	b = trimSpace(b)
	if n, ok := parseCount(b); ok {
		if n > int64(math.MaxInt64/time.Second) {
			return 0, false
		}
		return time.Duration(n) * time.Second, true
	}
	if len(b) == 0 {
		return 0, false
	}
	var total time.Duration
	rank := -1
	for len(b) > 0 {
		i := 0
		var whole int64
		for ; i < len(b) && isDigit(b[i]); i++ {
			if whole > (math.MaxInt64-9)/10 {
				return 0, false
			}
			whole = whole*10 + int64(b[i]-'0')
		}
		if i == 0 {
			return 0, false
		}
		fracStart, fracEnd := i, i
		if i < len(b) && b[i] == '.' {
			i++
			fracStart = i
			for i < len(b) && isDigit(b[i]) {
				i++
			}
			if i == fracStart {
				return 0, false
			}
			fracEnd = i
		}
		u := unitAt(b[i:])
		if u < 0 || durationUnits[u].rank <= rank {
			return 0, false
		}
		unit := durationUnits[u].amount
		rank = durationUnits[u].rank
		i += len(durationUnits[u].name)

		if whole > int64(math.MaxInt64/unit) {
			return 0, false
		}
		v := time.Duration(whole) * unit
		// scale reaches 0 past nanosecond precision: later digits no longer count.
		for j, scale := fracStart, unit; j < fracEnd; j++ {
			scale /= 10
			v += time.Duration(b[j]-'0') * scale
		}
		if v < 0 || total > math.MaxInt64-v {
			return 0, false
		}
		total += v
		b = b[i:]
	}
	return total, true
}

// unitAt returns the index in durationUnits of the unit b starts with, or -1.
func unitAt(b []byte) int {
	for i, u := range durationUnits {
		if len(b) >= len(u.name) && string(b[:len(u.name)]) == u.name {
			return i
		}
	}
	return -1
}

// parseRFC3339 parses an RFC 3339 date-time without allocating: YYYY-MM-DD "T" hh:mm:ss [ "." DIGIT+ ] then "Z"
// or an offset ±hh:mm, whitespace around it ignored. "t" and "z" may be lower case (RFC 3339 section 5.6); a leap second (ss = 60) reads as
// the next second. Fractions below a nanosecond are truncated. Out-of-range fields (month 13, 31 April, hour
// 24, offset hour 24) read as absent.
func parseRFC3339(b []byte) (time.Time, bool) {
	b = trimSpace(b)
	if len(b) < len("2006-01-02T15:04:05Z") {
		return time.Time{}, false
	}
	year, ok1 := digits(b[0:4])
	month, ok2 := digits(b[5:7])
	day, ok3 := digits(b[8:10])
	hour, ok4 := digits(b[11:13])
	minute, ok5 := digits(b[14:16])
	sec, ok6 := digits(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || b[4] != '-' || b[7] != '-' || b[10]|0x20 != 't' ||
		b[13] != ':' || b[16] != ':' {
		return time.Time{}, false
	}
	if month < 1 || month > 12 || day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 60 {
		return time.Time{}, false
	}
	b = b[19:]
	nsec := 0
	if len(b) > 0 && b[0] == '.' {
		i := 1
		for scale := int(time.Second); i < len(b) && isDigit(b[i]); i++ {
			scale /= 10
			nsec += int(b[i]-'0') * scale
		}
		if i == 1 {
			return time.Time{}, false
		}
		b = b[i:]
	}
	var offset int // seconds east of UTC
	switch {
	case len(b) == 1 && b[0]|0x20 == 'z':
	case len(b) == 6 && (b[0] == '+' || b[0] == '-') && b[3] == ':':
		oh, okh := digits(b[1:3])
		om, okm := digits(b[4:6])
		if !okh || !okm || oh > 23 || om > 59 {
			return time.Time{}, false
		}
		offset = oh*3600 + om*60
		if b[0] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	return t.Add(-time.Duration(offset) * time.Second), true
}

// digits parses b as a fixed-width unsigned decimal.
func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// daysIn returns the number of days in month (1-12) of year, Gregorian.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
