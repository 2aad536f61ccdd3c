package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/proxy/internal/config"
	"github.com/llm-failover/failover/proxy/internal/netio"
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
	models  []config.ModelPattern
	paths   [][]byte
	weight  int
	retries int
	resume  config.ResumeMode // how it continues a cut stream (docs/streams.md, Resume a cut stream)
	// prefillRefused are the models it refused a prefill for, which auto asks by instruction.
	prefillRefused prefillRefusals

	health  *budget.Health
	pool    *netio.Pool
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
	// shownURL is the base URL as -check shows it (config.MaskURL), for the target table.
	shownURL string
	// lastError is the class of the target's last failed attempt plus one (0: none yet), and
	// lastErrorAt its policy time in Unix nanoseconds, for the target table (targettable.go).
	lastError   atomic.Uint32
	lastErrorAt atomic.Int64
	// commits are the target's recent times to commit, for FAILOVER_HEDGE_AFTER=pNN
	// (hedge.go).
	commits budget.CommitTimes
}

// newTarget builds the runtime target from its validated configuration. roots verifies an
// https target's certificate (nil: the system roots).
func newTarget(i int, tc *config.TargetConfig, s *config.ServerConfig, b *budget.Config, roots *x509.CertPool) (*Target, error) {
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
	t.shownURL = config.MaskURL(tc.URL)
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
	f, err := tc.Fields()
	if err != nil {
		return nil, err
	}
	t.headers, t.models, t.paths = f.Headers, f.Models, f.Paths
	if tc.Model != "" {
		t.model = []byte(tc.Model)
	}
	if t.resume, err = config.ParseResumeMode(tc.Resume); err != nil {
		// Load refuses it; a configuration built in code must not be resumed some other way.
		return nil, err
	}
	t.health = budget.NewHealth(b)
	var tlsConfig *tls.Config
	if t.isTLS {
		tlsConfig = &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
			RootCAs: roots}
	}
	t.pool = netio.NewPool(t.addr, tlsConfig, s.ConnectTimeout)
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
			if hasPathPrefix(path, p) {
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
		if m.Prefix && bytes.HasPrefix(model, m.Text) || !m.Prefix && bytes.Equal(model, m.Text) {
			return true
		}
	}
	return false
}

// hasPathPrefix reports whether path is prefix or continues it with a new segment.
func hasPathPrefix[P string | []byte](path []byte, prefix P) bool {
	return len(path) >= len(prefix) && string(path[:len(prefix)]) == string(prefix) &&
		(len(path) == len(prefix) || path[len(prefix)] == '/')
}

// probeRequest is the request the background probe sends to a target: the method and path of
// the last request that timed out on it.
type probeRequest struct {
	method string
	path   string
}

// noteSilent remembers the request that timed out on t, for its background probe. On the
// timeout path only: a small allocation is fine there.
func (t *Target) noteSilent(method, path []byte) {
	if p := t.probeReq.Load(); p != nil && p.method == string(method) && p.path == string(path) {
		return
	}
	t.probeReq.Store(&probeRequest{method: string(method), path: string(path)})
}

// prefillRefusals are the models a target refused a prefill for (docs/streams.md, Resume a cut stream):
// learnt by auto's resumes, and kept for the life of the process, at most maxPrefillRefusals
// of them (a model is the client's to name: past that many, auto asks for a prefill first
// again). Part of the Target; safe for concurrent use.
type prefillRefusals struct {
	mu     sync.Mutex
	models map[string]struct{}
}

const maxPrefillRefusals = 64

// has reports whether the model was refused a prefill.
func (p *prefillRefusals) has(model []byte) bool {
	p.mu.Lock()
	_, ok := p.models[string(model)]
	p.mu.Unlock()
	return ok
}

// add remembers that the model was refused a prefill; it reports whether that is news.
func (p *prefillRefusals) add(model []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.models[string(model)]; ok || len(p.models) >= maxPrefillRefusals {
		return false
	}
	if p.models == nil {
		p.models = make(map[string]struct{})
	}
	p.models[string(model)] = struct{}{}
	return true
}

// list returns the models, sorted.
func (p *prefillRefusals) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.models) == 0 {
		return nil
	}
	out := make([]string, 0, len(p.models))
	for m := range p.models {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}
