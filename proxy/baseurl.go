package proxy

import (
	"net/url"
	"regexp"
	"strings"
)

// A target's URL is a base URL, as an SDK takes it: the sidecar appends each request's path
// after /v1 to it (README, Configuration reference: Targets). This file catches the base URLs
// that are likely mistakes.

// apiOperations are the paths SDKs append to a base URL. A target URL that ends in one gets it
// twice (POST .../chat/completions/chat/completions) and every request fails with a 404 that
// goes back to the client. A longer one comes before one it ends in (/chat/completions before
// /completions).
var apiOperations = []string{
	"/chat/completions", "/messages/count_tokens", "/messages/batches",
	"/audio/speech", "/audio/transcriptions", "/audio/translations",
	"/images/generations", "/images/edits", "/images/variations",
	"/completions", "/responses", "/messages", "/embeddings", "/moderations", "/models", "/rerank",
}

// endsInOperation returns the API operation a URL path ends in (as written) and the path before
// it, or "" and "" when it ends in none. Two such endings are bases, not operations: a
// deployment named like an operation (Azure OpenAI's /openai/deployments/embeddings), and
// /models as the whole path (Azure AI model inference: https://<resource>.services.ai.azure.com/models).
func endsInOperation(path string) (op, base string) {
	p := strings.TrimRight(path, "/")
	lower := strings.ToLower(p)
	for _, o := range apiOperations {
		if !strings.HasSuffix(lower, o) {
			continue
		}
		base = p[:len(p)-len(o)]
		if strings.HasSuffix(strings.ToLower(base), "/deployments") || o == "/models" && base == "" {
			return "", ""
		}
		return p[len(base):], base
	}
	return "", ""
}

// versionSegment matches a path segment that names an API version: v1, v1beta, v4.
var versionSegment = regexp.MustCompile(`(?i)^v[0-9]+[a-z0-9]*$`)

func hasVersionSegment(path string) bool {
	for _, seg := range strings.Split(path, "/") {
		if versionSegment.MatchString(seg) {
			return true
		}
	}
	return false
}

// withPath returns u with its path replaced, masked for a message.
func withPath(u *url.URL, path string) string {
	v := *u
	v.Path, v.RawPath = path, ""
	return maskURL(v.String())
}

// checkBaseURL reports a valid http(s) target URL (variable name) that ends in an API
// operation, showing the base URL to use instead.
func (l *loader) checkBaseURL(name string, u *url.URL) {
	op, base := endsInOperation(u.Path)
	if op == "" {
		return
	}
	hint := ""
	if !hasVersionSegment(base) {
		hint = ", with the version segment the provider's SDKs use if it has one (often /v1)"
	}
	l.problem("%s: ends in the API operation %s, which the sidecar appends from each request: use the base URL %s%s",
		l.shown(name), op, withPath(u, base), hint)
}
