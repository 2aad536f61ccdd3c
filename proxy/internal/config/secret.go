package config

import (
	"net/url"
	"strings"
)

// SecretVariables returns the names of the variables in environ that hold secrets, so the
// caller can remove them from the process environment once read: keys, the inbound token,
// _HEADERS, and a target _URL whose query or user part may carry a key (?key=..., as some
// providers take it).
func SecretVariables(environ []string) []string {
	var names []string
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		if isSecret(k) || strings.HasPrefix(k, envPrefix) && strings.HasSuffix(k, "_URL") && strings.ContainsAny(v, "?@") {
			names = append(names, k)
		}
	}
	return names
}

// isSecret reports whether a variable's value must never be printed (a switch that merely
// ends in _HEADERS is no header list).
func isSecret(name string) bool {
	return name == envPrefix+"INBOUND_TOKEN" || strings.HasSuffix(name, "_API_KEY") ||
		strings.HasSuffix(name, "_HEADERS") && name != envPrefix+"ALLOW_UNDERSCORE_HEADERS"
}

// MaskURL hides the password and query values of a URL, which can carry keys.
func MaskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparseable URL>"
	}
	if u.Host == "" {
		// Not scheme://host (a missing or mistyped "https://"): url.Parse reads a
		// "user:password@" as a scheme and an opaque part, or as a path, and would print it.
		// Everything up to the last '@' before the query goes.
		head, _, _ := strings.Cut(raw, "?")
		if i := strings.LastIndexByte(head, '@'); i >= 0 {
			return "redacted@" + MaskURL(raw[i+1:])
		}
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if k != "api-version" {
				q.Set(k, "redacted")
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}
