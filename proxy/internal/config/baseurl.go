package config

import (
	"net/url"
	"regexp"
	"strings"
)

// A target's URL is a base URL, as an SDK takes it: the sidecar appends each request's path
// after /v1 to it (docs/configuration.md, Targets). This file catches the base URLs
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
	return MaskURL(v.String())
}

// providerBases are the base paths well-known providers' SDKs use, by host: a target there
// whose path starts with none of them gets a warning (docs/configuration.md, Targets,
// lists them). An Anthropic SDK's base URL has no /v1 (it adds /v1/messages itself), but a
// target's URL does, since the sidecar appends the path after the client's /v1.
var providerBases = []struct {
	host  string   // the host, or ".domain" for every host under domain
	name  string   // the provider, for the message
	bases []string // base paths; "" is the bare host; a "<name>" segment stands for the operator's own
}{
	{"api.openai.com", "OpenAI", []string{"/v1"}},
	{"api.anthropic.com", "Anthropic", []string{"/v1"}},
	{".openai.azure.com", "Azure OpenAI", []string{"/openai/v1", "/openai/deployments/<deployment>"}},
	{".cognitiveservices.azure.com", "Azure OpenAI", []string{"/openai/v1", "/openai/deployments/<deployment>"}},
	{"generativelanguage.googleapis.com", "Gemini's OpenAI-compatible API", []string{"/v1beta/openai"}},
	{"api.groq.com", "Groq", []string{"/openai/v1"}},
	{"api.mistral.ai", "Mistral", []string{"/v1"}},
	{"openrouter.ai", "OpenRouter", []string{"/api/v1"}},
	{"api.deepseek.com", "DeepSeek", []string{"/v1", "", "/beta", "/anthropic/v1"}},
	{"api.together.xyz", "Together AI", []string{"/v1"}},
	{"api.together.ai", "Together AI", []string{"/v1"}},
	{"api.fireworks.ai", "Fireworks AI", []string{"/inference/v1"}},
	{"api.x.ai", "xAI", []string{"/v1"}},
	{"api.cerebras.ai", "Cerebras", []string{"/v1"}},
}

// providerOf returns the index in providerBases of the provider serving host, or -1.
func providerOf(host string) int {
	host = strings.ToLower(host)
	for i, p := range providerBases {
		if host == p.host || strings.HasPrefix(p.host, ".") && strings.HasSuffix(host, p.host) {
			return i
		}
	}
	return -1
}

// underBase reports whether path (without a trailing slash) is base or below it, on whole
// segments; a "<name>" segment of base matches one segment of any name.
func underBase(path, base string) bool {
	if base == "" {
		return path == ""
	}
	want, got := strings.Split(base, "/"), strings.Split(path, "/")
	if len(got) < len(want) {
		return false
	}
	for i, seg := range want {
		if got[i] != seg && !(strings.HasPrefix(seg, "<") && got[i] != "") {
			return false
		}
	}
	return true
}

// knownBase reports whether path is under one of provider i's bases.
func knownBase(i int, path string) bool {
	for _, b := range providerBases[i].bases {
		if underBase(path, b) {
			return true
		}
	}
	return false
}

// baseURLs renders provider i's base URLs on the origin of u, joined with "or".
func baseURLs(i int, u *url.URL) string {
	urls := make([]string, len(providerBases[i].bases))
	for j, b := range providerBases[i].bases {
		urls[j] = u.Scheme + "://" + u.Host + b
	}
	return strings.Join(urls, " or ")
}

// checkBaseURL reports a valid http(s) target URL (variable name) that ends in an API
// operation, showing the base URL to use instead, and warns about one on a well-known
// provider's host without the path its SDKs use.
func (l *loader) checkBaseURL(name string, u *url.URL) {
	provider := providerOf(u.Hostname())
	path := strings.TrimRight(u.Path, "/")
	if op, base := endsInOperation(path); op != "" {
		use, hint := withPath(u, base), ""
		switch {
		case provider >= 0 && !knownBase(provider, base):
			use = baseURLs(provider, u)
		case !hasVersionSegment(base):
			hint = ", with the version segment the provider's SDKs use if it has one (often /v1)"
		}
		l.problem("%s: ends in the API operation %s, which the sidecar appends from each request: use the base URL %s%s",
			l.shown(name), op, use, hint)
		return
	}
	if provider >= 0 && !knownBase(provider, path) {
		l.warn(name, "the base URL for %s is %s: a request for /v1/chat/completions would go to %s",
			providerBases[provider].name, baseURLs(provider, u), u.Scheme+"://"+u.Host+path+"/chat/completions")
	}
}
