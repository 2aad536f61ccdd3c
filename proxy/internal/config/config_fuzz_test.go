package config

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// fuzzMarker starts every secret the fuzzer makes up, so an error message that quotes one
// (or a piece of one that still carries the marker) is caught whatever else it says.
const fuzzMarker = "SeKr1t"

// FuzzLoad feeds the environment loader random values for variables of every kind (URL,
// keys, headers, durations, sizes, lists, patterns, a free-form name). Load must never panic,
// must return either a configuration or a *ConfigError, never both or neither, and no error
// or warning text may contain an _API_KEY, FAILOVER_INBOUND_TOKEN, a _HEADERS value or a URL password.
// Seeds: testdata/fuzz/FuzzLoad.
func FuzzLoad(f *testing.F) {
	f.Add("http://127.0.0.1:8080/v1", "sk-test", "token", "anthropic-version=2023-06-01", "429,5xx", "model not found", "5s", "128KiB", "gpt-4o*", "/v1/chat", "(?i)overloaded", "FAILOVER_TARGET_1_URL")
	f.Add("https://user:pass@api.openai.com/v1?key=x#frag", "sk-a\nb", " tok ", "Host=x;bad name=y", "5xx,600", "404", "5", "1GiB", "a*b", "v1", "(", "FAILOVER_RETRY_ON_STATUS")
	f.Add("", "", "", "", "", "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, targetURL, apiKey, token, headers, statuses, phrases, duration, size, models, paths, pattern, extraName string) {
		secretKey, secretToken := fuzzMarker+apiKey, fuzzMarker+token
		environ := []string{
			"FAILOVER_TARGET_0_URL=" + targetURL,
			"FAILOVER_TARGET_0_API_KEY=" + secretKey,
			"FAILOVER_TARGET_0_HEADERS=" + headers,
			"FAILOVER_TARGET_0_MODELS=" + models,
			"FAILOVER_TARGET_0_PATHS=" + paths,
			"FAILOVER_TARGET_1_URL=" + targetURL,
			"FAILOVER_TARGET_1_API_KEY=" + secretKey,
			"FAILOVER_TARGET_1_AUTH=" + models,
			"FAILOVER_INBOUND_TOKEN=" + secretToken,
			"FAILOVER_RETRY_ON_STATUSES=" + statuses,
			"FAILOVER_RETRY_ON_ERRORS=" + phrases,
			"FAILOVER_FIRST_BYTE_TIMEOUT=" + duration,
			"FAILOVER_PEEK_BYTES=" + size,
			"FAILOVER_MAX_ATTEMPTS=" + size,
			"FAILOVER_RETRY_BUDGET_RATIO=" + duration,
			"FAILOVER_HEDGE_AFTER=" + duration,
			"FAILOVER_STOP_RULE_0_STATUSES=" + statuses,
			"FAILOVER_STOP_RULE_0_PATTERN=" + pattern,
			"FAILOVER_SUCCESS_RULE_0_PATTERN=" + pattern,
			"FAILOVER_STRATEGY=" + paths,
			extraName + "=" + duration,
		}
		cfg, err := Load(environ, true)
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Load returned config %v and error %v: want exactly one", cfg != nil, err)
		}
		var msg string // the errors, or the warnings of a configuration that loads
		if err == nil {
			for _, w := range cfg.Warnings {
				msg += w.Message + "\n"
			}
		} else {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Load returned %T, want *ConfigError: %v", err, err)
			}
			msg = err.Error()
		}
		// A secret must not appear, whole or cut, unless another, non-secret value put the
		// same text there.
		public := strings.Join([]string{targetURL, statuses, phrases, duration, size, models, paths, pattern, extraName}, "\x00")
		if !strings.Contains(public, fuzzMarker) && strings.Contains(msg, fuzzMarker) {
			t.Fatalf("the error quotes a secret (key, token or header):\n%s", msg)
		}
		for _, secret := range []string{secretKey, secretToken} {
			if strings.Contains(msg, secret) {
				t.Fatalf("the error quotes a secret %q:\n%s", secret, msg)
			}
		}
		for _, v := range headerValues(headers) {
			if len(v) >= 8 && strings.Count(headers, v) == 1 && !strings.Contains(public, v) && strings.Contains(msg, v) {
				t.Fatalf("the error quotes a header value %q:\n%s", v, msg)
			}
		}
		if u, perr := url.Parse(targetURL); perr == nil && u.User != nil {
			if p, ok := u.User.Password(); ok && len(p) >= 8 && strings.Count(public, p) == 1 && strings.Contains(msg, p) {
				t.Fatalf("the error quotes the URL's password %q:\n%s", p, msg)
			}
		}
	})
}

// headerValues returns the values of a _HEADERS setting ("Name=value;Name2=value2").
func headerValues(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ";") {
		if _, v, ok := strings.Cut(part, "="); ok {
			out = append(out, strings.TrimSpace(v))
		}
	}
	return out
}
