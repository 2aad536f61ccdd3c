package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/proxy/internal/observe"
)

// Target is one upstream as the request path uses it: everything precomputed at start so an
// attempt only copies bytes. Immutable after New, except health, latency, the pool and the
// models it refused a prefill for, which are safe for concurrent use.
type Target struct {
	Index int
	Name  string
	name  []byte // Name, for the X-Failover-Target header

	isTLS    bool
	addr     string // host:port to dial
	host     []byte // Host header
	basePath []byte // the base URL's path without a trailing slash ("/v1")
	query    []byte // the base URL's raw query, kept first in every request
	// queryKey are the query's keys, decoded, in lower case (targetHasKey).
	queryKey [][]byte

	authName  []byte // upstream auth header, nil when the client's credentials are forwarded
	authValue []byte // "Bearer <key>" or "<key>"; never logged
	ownKey    bool

	headers [][2][]byte
	model   []byte // model substitution, nil when none
	models  []modelPattern
	paths   [][]byte
	weight  int
	retries int
	resume  resumeMode // how it continues a cut stream (README, Resume a cut stream)
	// prefillRefused are the models it refused a prefill for, which auto asks by instruction.
	prefillRefused prefillRefusals

	health  *budget.Health
	pool    *pool
	metrics *observe.TargetMetrics
	// latencyNS is an exponentially weighted time to first byte, for least-latency: a failed
	// attempt counts as a slow sample (failedAttemptLatency).
	latencyNS atomic.Int64
	// answerNS is the same average over the target's answers alone, as they came, for the
	// target table (targettable.go): never a failure's charge.
	answerNS atomic.Int64
	// probeReq is what the background probe asks (prober.go); bgProbe is set while one runs.
	probeReq atomic.Pointer[probeRequest]
	bgProbe  atomic.Bool
	// shownURL is the base URL as -check shows it (maskURL), for the target table.
	shownURL string
	// lastError is the class of the target's last failed attempt plus one (0: none yet), and
	// lastErrorAt its policy time in Unix nanoseconds, for the target table (targettable.go).
	lastError   atomic.Uint32
	lastErrorAt atomic.Int64
}

// targetFields are the parsed forms of a target's _HEADERS, _MODELS and _PATHS
// (TargetConfig.fields). Immutable once parsed: targets share them with their configuration.
type targetFields struct {
	headers [][2][]byte
	models  []modelPattern
	paths   [][]byte
}

type modelPattern struct {
	text   []byte
	prefix bool // "gpt-4o*"
}

// newTarget builds the runtime target from its validated configuration. roots verifies an
// https target's certificate (nil: the system roots).
func newTarget(i int, tc *TargetConfig, s *ServerConfig, b *budget.Config, roots *x509.CertPool) (*Target, error) {
	u, err := url.Parse(tc.URL)
	if err != nil {
		return nil, err
	}
	t := &Target{Index: i, Name: tc.Name, name: []byte(tc.Name), isTLS: u.Scheme == "https", weight: tc.Weight, retries: tc.Retries}
	port := u.Port()
	if port == "" {
		port = "80"
		if t.isTLS {
			port = "443"
		}
	}
	t.shownURL = maskURL(tc.URL)
	t.addr = net.JoinHostPort(u.Hostname(), port)
	t.host = []byte(u.Host)
	t.basePath = []byte(strings.TrimRight(u.EscapedPath(), "/"))
	if u.RawQuery != "" {
		t.query = []byte(u.RawQuery)
		for k := range u.Query() {
			t.queryKey = append(t.queryKey, lowerASCII(k))
		}
	}
	if tc.APIKey != "" {
		t.ownKey = true
		switch tc.Auth {
		case "bearer":
			t.authName, t.authValue = []byte("Authorization"), []byte("Bearer "+tc.APIKey)
		case "x-api-key":
			t.authName, t.authValue = []byte("X-Api-Key"), []byte(tc.APIKey)
		case "api-key":
			t.authName, t.authValue = []byte("Api-Key"), []byte(tc.APIKey)
		}
	}
	f, err := tc.fields()
	if err != nil {
		return nil, err
	}
	t.headers, t.models, t.paths = f.headers, f.models, f.paths
	if tc.Model != "" {
		t.model = []byte(tc.Model)
	}
	var ok bool
	if t.resume, ok = parseResumeMode(tc.Resume); !ok {
		// Load refuses it; a configuration built in code must not be resumed some other way.
		return nil, fmt.Errorf("RESUME=%q: %s", tc.Resume, resumeModeHelp)
	}
	t.health = budget.NewHealth(b)
	var tlsConfig *tls.Config
	if t.isTLS {
		tlsConfig = &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
			RootCAs: roots}
	}
	t.pool = newPool(t.addr, tlsConfig, s.ConnectTimeout)
	return t, nil
}

// lowerASCII returns s with its ASCII letters in lower case, the others as they are.
func lowerASCII(s string) []byte {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return b
}

// serves reports whether the target serves this request path and requested model. A path
// prefix matches whole segments ("/v1/chat" serves /v1/chat/completions, not /v1/chatter). A
// request without a model (multipart audio, GET /v1/models) is not filtered by model.
func (t *Target) serves(path, model []byte) bool {
	if len(t.paths) > 0 {
		ok := false
		for _, p := range t.paths {
			if hasPathPrefix(path, b2s(p)) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(t.models) == 0 || len(model) == 0 {
		return true
	}
	for _, m := range t.models {
		if m.prefix && bytes.HasPrefix(model, m.text) || !m.prefix && bytes.Equal(model, m.text) {
			return true
		}
	}
	return false
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
func parseModels(s string) ([]modelPattern, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []modelPattern
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
			out = append(out, modelPattern{text: []byte(strings.TrimSuffix(m, "*")), prefix: true})
		default:
			out = append(out, modelPattern{text: []byte(m)})
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
