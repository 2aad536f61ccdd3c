package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llm-failover/failover/classify"
)

func (l *loader) validateServer(s *ServerConfig) {
	// Checked here, not left to net.Listen, so that -check fails (exit 2) on an address that
	// the start would then refuse (exit 1).
	valid := true
	for _, v := range []struct{ name, addr string }{{"LISTEN", s.Listen}, {"METRICS_LISTEN", s.MetricsListen}} {
		if _, port, err := net.SplitHostPort(v.addr); err != nil || port == "" {
			l.problem("%s: must be host:port or :port", l.shown(envPrefix+v.name))
			valid = false
		} else if !validPort(port, 0) {
			l.problem("%s: the port must be a number in 0-65535", l.shown(envPrefix+v.name))
			valid = false
		}
	}
	if valid && sameListener(s.Listen, s.MetricsListen) {
		l.problem("%s / %s: the proxy and the metrics listeners cannot share an address", l.shown(envPrefix+"LISTEN"), l.shown(envPrefix+"METRICS_LISTEN"))
	} else if valid && l.bind {
		l.tryListen(s)
	}
	// Accepted in any case, kept in lower case: main and -check compare and print these values.
	s.LogLevel, s.LogFormat = strings.ToLower(s.LogLevel), strings.ToLower(s.LogFormat)
	if levels := []string{"debug", "info", "warn", "error"}; !contains(levels, s.LogLevel) {
		l.problem("%s: must be debug, info, warn or error%s", l.shown(envPrefix+"LOG_LEVEL"), valueHint(s.LogLevel, levels))
	}
	if formats := []string{"auto", "text", "json"}; !contains(formats, s.LogFormat) {
		l.problem("%s: must be auto, text or json%s", l.shown(envPrefix+"LOG_FORMAT"), valueHint(s.LogFormat, formats))
	}
	if names := StrategyNames(); !contains(names, s.Strategy) {
		l.problem("%s: must be one of %s%s", l.shown(envPrefix+"STRATEGY"), strings.Join(names, ", "), valueHint(s.Strategy, names))
	}
	if s.Strategy == "sticky" && strings.TrimSpace(s.StickyHeader) == "" {
		l.problem("%s: must name a header for FAILOVER_STRATEGY=sticky", l.shown(envPrefix+"STICKY_HEADER"))
	} else if s.Strategy == "sticky" && !isToken(s.StickyHeader) {
		// A name with a space (" X-Session-Id", "X-Session-Id ") or a ':' matches no request
		// header: every request would silently go in declared order.
		l.problem("%s: not a header name (no spaces, ':' or other separators), like X-Session-Id", l.shown(envPrefix+"STICKY_HEADER"))
	}
	if s.MaxInflight < 0 {
		l.problem("%s: must be >= 0 (0 = no limit)", l.shown(envPrefix+"MAX_INFLIGHT"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"SHUTDOWN_TIMEOUT", s.ShutdownTimeout}, {"CONNECT_TIMEOUT", s.ConnectTimeout}, {"FIRST_BYTE_TIMEOUT", s.FirstByteTimeout},
		{"IDLE_TIMEOUT", s.IdleTimeout}, {"ATTEMPT_TIMEOUT", s.AttemptTimeout}} {
		if d.v < 0 {
			l.problem("%s: must be >= 0 (0 = no limit)", l.shown(envPrefix+d.name))
		}
	}
	if s.InboundToken != "" && strings.TrimSpace(s.InboundToken) != s.InboundToken {
		l.problem("%s: has leading or trailing whitespace", l.shown(envPrefix+"INBOUND_TOKEN"))
	}
}

// validPort reports whether port is a decimal number from lowest to 65535. Service names
// ("http") are not accepted: a number is what an operator can check against a Service or a probe.
func validPort(port string, lowest int) bool {
	n, err := strconv.Atoi(port)
	return err == nil && port[0] >= '0' && port[0] <= '9' && n >= lowest && n <= 65535
}

// sameListener reports whether two valid host:port listener addresses would collide: the same
// port (0, "any free port", never collides) on the same host, or on any host when either
// side is a wildcard ("", 0.0.0.0, ::) that already binds every address. Hosts are compared
// as the addresses they bind: IP literals by value (::1 is 0:0:0:0:0:0:0:1), and localhost as
// 127.0.0.1, the address net.Listen takes for it (its first IPv4 address).
func sameListener(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	na, _ := strconv.Atoi(pa)
	nb, _ := strconv.Atoi(pb)
	if na != nb || na == 0 {
		return false
	}
	ipa, ipb := listenIP(ha), listenIP(hb)
	wildcard := func(h string, ip net.IP) bool { return h == "" || ip != nil && ip.IsUnspecified() }
	if wildcard(ha, ipa) || wildcard(hb, ipb) {
		return true
	}
	if ipa != nil && ipb != nil {
		return ipa.Equal(ipb)
	}
	return strings.EqualFold(ha, hb)
}

// listenIP is the address a listener host binds when it can be known without a lookup: an IP
// literal, or localhost. Nil for other host names.
func listenIP(host string) net.IP {
	if strings.EqualFold(host, "localhost") {
		return net.IPv4(127, 0, 0, 1)
	}
	return net.ParseIP(host)
}

func (l *loader) validateTargets(c *Config, required bool) {
	if len(c.Targets) == 0 && required {
		l.problem("FAILOVER_TARGET_0_URL: no target is configured; set at least FAILOVER_TARGET_0_URL (e.g. https://api.openai.com/v1)")
	}
	names := map[string]int{}
	for i := range c.Targets {
		t := &c.Targets[i]
		p := fmt.Sprintf("%sTARGET_%d_", envPrefix, i)
		if t.URL == "" {
			l.problem("%sURL: required (the group FAILOVER_TARGET_%d_* is set)", p, i)
		} else if u, err := url.Parse(t.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			l.problem("%s: must be an http:// or https:// base URL, like https://api.openai.com/v1", l.shown(p+"URL"))
		} else if u.Fragment != "" {
			l.problem("%s: must not have a #fragment", l.shown(p+"URL"))
		} else if u.User != nil {
			l.problem("%s: must not carry credentials; set %sAPI_KEY or %sAPI_KEY_FILE", l.shown(p+"URL"), p, p)
		} else if port := u.Port(); port != "" && !validPort(port, 1) {
			l.problem("%s: the port must be a number in 1-65535", l.shown(p+"URL"))
		} else {
			l.checkBaseURL(p+"URL", u)
		}
		if t.APIKey != "" && t.APIKeyFile != "" {
			l.problem("%sAPI_KEY / %sAPI_KEY_FILE: set one, not both", p, p)
		}
		// Unset, not empty, forwards the client's own credentials (docs/configuration.md,
		// Targets). An unset shell variable leaves FAILOVER_TARGET_0_API_KEY="$OPENAI_API_KEY"
		// empty in compose or docker run -e, and the SDK's placeholder key would then go to the
		// provider, which answers 401.
		if v, set := l.vars[p+"API_KEY"]; set && strings.TrimSpace(v) == "" {
			l.problem("%sAPI_KEY: set but empty: unset it to forward the client's own credentials, or give it the key", p)
		}
		if v, set := l.vars[p+"API_KEY_FILE"]; set && strings.TrimSpace(v) == "" {
			l.problem("%sAPI_KEY_FILE: set but empty: unset it to forward the client's own credentials, or name the file that holds the key", p)
		}
		// Without required targets (the drill) the keys are never used: a key file that is not
		// mounted where the drill runs must not stop it (README, Quick start: no keys or targets).
		if strings.TrimSpace(t.APIKeyFile) != "" && required {
			b, err := os.ReadFile(t.APIKeyFile)
			switch {
			case err != nil:
				l.problem("%s: cannot read the key file: %v", l.shown(p+"API_KEY_FILE"), errors.Unwrap(err))
			case strings.TrimSpace(string(b)) == "":
				l.problem("%s: the key file is empty: write the key into it, or unset %sAPI_KEY_FILE to forward the client's own credentials",
					l.shown(p+"API_KEY_FILE"), p)
			default:
				t.APIKey = strings.TrimRight(string(b), " \t\r\n")
			}
		}
		if strings.ContainsAny(t.APIKey, "\r\n") {
			l.problem("%s: the key contains a line break", l.shown(p+"API_KEY"))
		}
		t.Auth = strings.ToLower(t.Auth)
		if !contains(authModes, t.Auth) {
			l.problem("%s: must be one of %s%s", l.shown(p+"AUTH"), strings.Join(authModes, ", "), valueHint(t.Auth, authModes))
		} else if t.Auth == "none" && t.APIKey != "" {
			l.problem("%sAUTH=none with a key set: the key would never be sent; choose bearer, x-api-key or api-key", p)
		}
		var f TargetFields
		var err error
		if f.Headers, err = parseHeaders(t.Headers); err != nil {
			l.problem("%s: %v", l.shown(p+"HEADERS"), err)
		} else if name := authHeaderName(t.Auth); t.APIKey != "" && name != "" {
			for _, h := range f.Headers {
				if strings.EqualFold(string(h[0]), name) {
					// The name is the auth mode's, so printing it shows nothing secret.
					l.problem("%s: sets %s, which the target's key already sets (%sAUTH=%s): the upstream would get two", l.shown(p+"HEADERS"), name, p, t.Auth)
				}
			}
		}
		if f.Models, err = parseModels(t.Models); err != nil {
			l.problem("%s: %v", l.shown(p+"MODELS"), err)
		}
		if f.Paths, err = parsePaths(t.Paths); err != nil {
			l.problem("%s: %v", l.shown(p+"PATHS"), err)
		}
		t.parsed = &f
		if strings.ContainsAny(t.Model, "\"\\\r\n") {
			l.problem("%s: a model name cannot contain quotes, backslashes or line breaks", l.shown(p+"MODEL"))
		}
		if t.Weight < 0 || t.Weight > 1000 {
			l.problem("%s: must be in 0-1000", l.shown(p+"WEIGHT"))
		}
		// Whether the variable is set, not a sentinel value, says whether the target inherits:
		// a sentinel would let that one negative value through. Empty counts as unset, as it
		// does for every variable with a default.
		if l.vars[p+"RETRIES"] == "" {
			t.Retries = c.Budget.SameTargetRetries
		} else if t.Retries < 0 {
			l.problem("%s: must be >= 0", l.shown(p+"RETRIES"))
		}
		if t.Name != "" {
			if !validName(t.Name) {
				l.problem("%s: use letters, digits, '.', '_' or '-' (it labels logs, metrics and X-Failover-Target)", l.shown(p+"NAME"))
			}
			if j, dup := names[t.Name]; dup {
				l.problem("%s: the name is already used by FAILOVER_TARGET_%d_NAME", l.shown(p+"NAME"), j)
			}
			names[t.Name] = i
		}
	}
	// Default names come from the URL's host, made unique.
	for i := range c.Targets {
		t := &c.Targets[i]
		if t.Name != "" {
			continue
		}
		base := "target"
		if u, err := url.Parse(t.URL); err == nil && u.Hostname() != "" {
			base = u.Hostname()
		}
		name := base
		for n := 2; ; n++ {
			if _, dup := names[name]; !dup {
				break
			}
			name = fmt.Sprintf("%s-%d", base, n)
		}
		t.Name = name
		names[name] = i
	}
	if c.Server.Strategy == "round-robin" && len(c.Targets) > 0 {
		total := 0
		for _, t := range c.Targets {
			total += t.Weight
		}
		if total == 0 {
			l.problem("FAILOVER_TARGET_<i>_WEIGHT: every weight is 0; round-robin needs at least one positive weight")
		}
	}
}

// authModes accepted by FAILOVER_TARGET_<i>_AUTH.
var authModes = []string{"bearer", "x-api-key", "api-key", "none"}

// authHeaderName is the header an auth mode sends the target's key in ("" for none).
func authHeaderName(mode string) string {
	switch mode {
	case "bearer":
		return "Authorization"
	case "x-api-key", "api-key":
		return mode
	}
	return ""
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return len(s) > 0 && len(s) <= 64
}

// rules reads and compiles one indexed rule group.
func (l *loader) rules(group string, present []bool, stop bool) []classify.Rule {
	var out []classify.Rule
	for i := range present {
		if !present[i] {
			continue
		}
		prefix := fmt.Sprintf("%s%s_%d_", envPrefix, group, i)
		var rc ruleConfig
		l.section(&rc, prefix)
		var r classify.Rule
		ok := true
		if strings.TrimSpace(rc.Statuses) != "" {
			s, err := classify.ParseRuleStatuses(rc.Statuses)
			if err != nil {
				l.problem("%s: %v", l.shown(prefix+"STATUSES"), err)
				ok = false
			}
			r.Statuses = s
		}
		if _, set := l.vars[prefix+"PATTERN"]; set {
			re, err := classify.CompilePattern(rc.Pattern)
			if err != nil {
				l.problem("%s: %v", l.shown(prefix+"PATTERN"), err)
				ok = false
			}
			r.Pattern = re
		}
		switch {
		case !ok:
		case stop && r.Statuses.Empty() && r.Pattern == nil:
			l.problem("%sSTATUSES / %sPATTERN: the rule is empty: set statuses, a pattern, or both", prefix, prefix)
		case !stop && r.Pattern == nil:
			l.problem("%sPATTERN: the rule is empty: set a pattern", prefix)
		default:
			out = append(out, r)
		}
	}
	return out
}
