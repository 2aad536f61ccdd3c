package classify

import (
	"regexp"
	"strings"
	"testing"
)

func TestRequiredLiterals(t *testing.T) {
	tests := []struct {
		pattern string
		want    []string // nil: no prefilter
	}{
		{`context_length_exceeded`, []string{"context_length_exceeded"}},
		{`(?i)content.filter`, []string{"content"}}, // (?i) literals come upper-cased; compared lower
		{`"code":\s*"insufficient_quota"`, []string{`"insufficient_quota"`}},
		{`(?i)(safety|policy) violation`, []string{" violation"}}, // the longest required piece
		{`(?i)(safety|policy)-\d`, []string{"safety", "policy"}},  // an alternation: any of them
		{`foo(bar|baz)+`, []string{"foo"}},
		{`abc|de`, nil},           // "de" is too short to filter on
		{`a.*b`, nil},             // nothing literal long enough
		{`(xyz)?`, nil},           // can match the empty string
		{`\d{3}-\d{4}`, nil},      // classes only
		{`(?i)größe`, []string{}}, // Unicode folding: no prefilter on that literal
	}
	for _, tc := range tests {
		set, _, ok := requiredLiterals(regexp.MustCompile(tc.pattern))
		if len(tc.want) == 0 {
			if ok {
				t.Errorf("%s: got %q, want no prefilter", tc.pattern, set)
			}
			continue
		}
		if !ok || strings.ToLower(strings.Join(set, "|")) != strings.Join(tc.want, "|") {
			t.Errorf("%s: got %q ok=%v, want %q", tc.pattern, set, ok, tc.want)
		}
	}
}

func TestPrefilterCandidates(t *testing.T) {
	patterns := []*regexp.Regexp{
		regexp.MustCompile(`context_length_exceeded`),
		regexp.MustCompile(`(?i)content.filter`),
		regexp.MustCompile(`\d{3}`),
		nil,
		regexp.MustCompile(`(?i)kkk`),
	}
	p := newPrefilter(patterns)
	tests := []struct {
		body string
		want uint64
	}{
		{`{"error":{"code":"context_length_exceeded"}}`, 1<<0 | 1<<2},
		{`"finish_reason":"CONTENT_FILTER"`, 1<<1 | 1<<2},
		{`nothing here`, 1 << 2},
		{`please KKK me`, 1<<2 | 1<<4},
		{"a\u212a\u212a\u212a", 1<<2 | 1<<4}, // KELVIN SIGN folds to k under (?i)
	}
	for _, tc := range tests {
		if got := p.candidates([]byte(tc.body)); got != tc.want {
			t.Errorf("%q: candidates %b, want %b", tc.body, got, tc.want)
		}
	}
	if !patterns[4].MatchString("a\u212a\u212a\u212a") {
		t.Fatal("(?i)kkk should match three kelvin signs; the test premise changed")
	}
}

// FuzzPrefilter: the prefilter may let through patterns that do not match, never hide one
// that does.
func FuzzPrefilter(f *testing.F) {
	f.Add(`(?i)content.filter`, `"finish_reason":"Content_Filter"`)
	f.Add(`(foo|bar)baz+`, `xxbarbazz`)
	f.Add(`(?i)kkk`, "\u212aK\u212a")
	f.Add(`(?i)SS`, "\u017f\u017f")
	f.Add(`a(b|c)d\w+`, `acdx`)
	f.Fuzz(func(t *testing.T, pattern, body string) {
		if len(pattern) > 256 {
			return
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			return
		}
		p := newPrefilter([]*regexp.Regexp{re})
		if re.MatchString(body) && p.candidates([]byte(body))&1 == 0 {
			t.Fatalf("%q matches %q but the prefilter hid it", pattern, body)
		}
	})
}
