package config

import (
	"errors"
	"fmt"
	"strings"
)

// TargetFields are the parsed forms of a target's _HEADERS, _MODELS and _PATHS
// (TargetConfig.Fields). Immutable once parsed: targets share them with their configuration.
type TargetFields struct {
	Headers [][2][]byte    // name and value, in the order written
	Models  []ModelPattern // nil: every model
	Paths   [][]byte       // request path prefixes, without a trailing slash; nil: every path
}

// ModelPattern is one entry of a target's _MODELS.
type ModelPattern struct {
	Text   []byte
	Prefix bool // "gpt-4o*": Text is a prefix
}

// Fields returns Headers, Models and Paths parsed: as Load parsed them, or, for a TargetConfig
// built in code (the drill's), parsed now.
func (tc *TargetConfig) Fields() (*TargetFields, error) {
	if tc.parsed != nil {
		return tc.parsed, nil
	}
	var f TargetFields
	var errs [3]error
	f.Headers, errs[0] = parseHeaders(tc.Headers)
	f.Models, errs[1] = parseModels(tc.Models)
	f.Paths, errs[2] = parsePaths(tc.Paths)
	return &f, errors.Join(errs[:]...)
}

// forbiddenHeaders cannot be set through _HEADERS: they frame the message or are set by the
// sidecar itself.
var forbiddenHeaders = []string{"host", "content-length", "transfer-encoding", "connection", "keep-alive",
	"upgrade", "te", "trailer", "proxy-connection", "x-request-id", "x-failover-attempt", "accept-encoding"}

// parseHeaders reads "Name=value;Name2=value2". Its errors name an entry by its position (from
// 1) and never quote it: an entry written wrongly (x-api-key: sk-...) may be all value, and
// header values are secrets.
func parseHeaders(s string) ([][2][]byte, error) {
	var out [][2][]byte
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var errs []error
	for i, part := range strings.Split(s, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		n := i + 1
		switch {
		case !ok || name == "":
			errs = append(errs, fmt.Errorf("entry %d is not Name=value", n))
		case !isToken(name):
			errs = append(errs, fmt.Errorf("entry %d: the header name has characters a header name cannot have (spaces, ':' or others; write Name=value)", n))
		case contains(forbiddenHeaders, strings.ToLower(name)):
			// name is one of forbiddenHeaders, so printing it shows nothing secret.
			errs = append(errs, fmt.Errorf("entry %d: header %s is set by the sidecar and cannot be configured", n, name))
		case strings.ContainsAny(value, "\r\n\x00"):
			errs = append(errs, fmt.Errorf("entry %d: the value has a line break or a NUL byte", n))
		default:
			out = append(out, [2][]byte{[]byte(name), []byte(value)})
		}
	}
	return out, errors.Join(errs...)
}

func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// parseModels reads a comma list of model names, "*" as a trailing wildcard.
func parseModels(s string) ([]ModelPattern, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []ModelPattern
	all := false
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		switch {
		case m == "":
			return nil, fmt.Errorf("empty model name (two commas in a row, or a trailing comma?)")
		case m == "*":
			all = true // every model; the rest of the list is still checked
		case strings.Contains(strings.TrimSuffix(m, "*"), "*"):
			return nil, fmt.Errorf("%q: '*' is only allowed at the end", m)
		case strings.HasSuffix(m, "*"):
			out = append(out, ModelPattern{Text: []byte(strings.TrimSuffix(m, "*")), Prefix: true})
		default:
			out = append(out, ModelPattern{Text: []byte(m)})
		}
	}
	if all {
		return nil, nil
	}
	return out, nil
}

// parsePaths reads a comma list of request path prefixes.
func parsePaths(s string) ([][]byte, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out [][]byte
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if !strings.HasPrefix(p, "/v1/") && p != "/v1" {
			return nil, fmt.Errorf("%q: a path prefix starts with /v1/, like /v1/messages", p)
		}
		if strings.ContainsAny(p, "*?# \t") {
			// "/v1/chat/*" (the _MODELS wildcard) would match no request path, and the
			// target would silently serve nothing there: a prefix already covers what follows.
			return nil, fmt.Errorf("%q: a path prefix is a plain path matched on whole segments (no '*', '?', '#' or spaces): /v1/chat serves /v1/chat/completions", p)
		}
		if trimmed := strings.TrimRight(p, "/"); trimmed != "" {
			p = trimmed
		}
		out = append(out, []byte(p))
	}
	return out, nil
}
