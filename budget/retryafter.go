package budget

import (
	"math"
	"time"
)

// ParseRetryAfter reads how long a response asks to wait: retry-after-ms (milliseconds, possibly fractional as
// "1500.5"; sent by OpenAI and Azure) wins when valid, else Retry-After as delay-seconds or as an HTTP-date in
// any of the three forms RFC 9110 requires recipients to accept (IMF-fixdate, RFC 850, ANSI C asctime), taken
// relative to now, a date in the past meaning 0.
//
// Garbage, negative and empty values give ok=false. Optional whitespace around a value is ignored, and
// delay-seconds may carry a fraction ("1.5") although RFC 9110 has integers only: honouring what the upstream
// plainly meant beats ignoring it. A value too large for a Duration saturates at the largest Duration, so a
// huge Retry-After still reads as "longer than any limit". The seconds and ms forms do not allocate.
func ParseRetryAfter(retryAfter, retryAfterMs []byte, now time.Time) (d time.Duration, ok bool) {
	if d, ok := parseDecimal(trimSpace(retryAfterMs), time.Millisecond); ok {
		return d, true
	}
	v := trimSpace(retryAfter)
	if d, ok := parseDecimal(v, time.Second); ok {
		return d, true
	}
	return parseHTTPDate(v, now)
}

// httpDateLayouts are the HTTP-date forms of RFC 9110 section 5.6.7, in the order net/http.ParseTime tries
// them. The first is net/http.TimeFormat, spelled out rather than importing net/http for one constant.
var httpDateLayouts = [...]string{
	"Mon, 02 Jan 2006 15:04:05 GMT", // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
	time.RFC850,                     // obsolete RFC 850: Sunday, 06-Nov-94 08:49:37 GMT
	time.ANSIC,                      // asctime: Sun Nov  6 08:49:37 1994
}

// parseHTTPDate converts (and so allocates) only what could be a date: the shortest form is 24 bytes, the
// longest 33 (RFC 850 with "Wednesday"); a little slack is kept for odd zone names.
func parseHTTPDate(v []byte, now time.Time) (time.Duration, bool) {
	if len(v) < 24 || len(v) > 40 || !isLetter(v[0]) {
		return 0, false
	}
	s := string(v)
	for _, layout := range httpDateLayouts {
		t, err := time.Parse(layout, s)
		if err != nil {
			continue
		}
		// Sub saturates on overflow; a past date means the wait is already over.
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// parseDecimal parses DIGIT+ [ "." DIGIT+ ] as a count of unit (which divides a second), truncated to the
// nanosecond and saturated at the largest Duration. A sign, an exponent or anything else fails.
func parseDecimal(b []byte, unit time.Duration) (time.Duration, bool) {
	i := 0
	var whole int64
	saturated := false
	for ; i < len(b) && isDigit(b[i]); i++ {
		if whole > (math.MaxInt64-9)/10 {
			saturated = true
			continue
		}
		whole = whole*10 + int64(b[i]-'0')
	}
	if i == 0 {
		return 0, false
	}
	var frac int64
	if i < len(b) && b[i] == '.' {
		i++
		start := i
		for scale := int64(unit); i < len(b) && isDigit(b[i]); i++ {
			scale /= 10 // reaches 0 past nanosecond precision: the digits are still checked, no longer counted
			frac += int64(b[i]-'0') * scale
		}
		if i == start {
			return 0, false
		}
	}
	if i != len(b) {
		return 0, false
	}
	if saturated || whole > (math.MaxInt64-frac)/int64(unit) {
		return math.MaxInt64, true
	}
	return time.Duration(whole*int64(unit) + frac), true
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }
