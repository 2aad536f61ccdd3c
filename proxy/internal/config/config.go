package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
)

// envPrefix starts every variable this program reads.
const envPrefix = "FAILOVER_"

// Size is a byte count read from plain bytes ("131072") or with a KiB, MiB or GiB suffix
// ("128KiB", "32MiB"). 0 disables the limit it configures.
type Size int64

// UnmarshalText parses a size (for caarlos0/env).
func (s *Size) UnmarshalText(text []byte) error {
	v := strings.TrimSpace(string(text))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("not a size: use bytes or a KiB/MiB/GiB suffix, like 128KiB or 32MiB")
	}
	if n > (1<<62)/mult {
		return fmt.Errorf("size too large")
	}
	*s = Size(n * mult)
	return nil
}

// String renders the size the way it is best written.
func (s Size) String() string {
	switch {
	case s != 0 && s%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", s>>20)
	case s != 0 && s%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", s>>10)
	}
	return strconv.FormatInt(int64(s), 10)
}

// ServerConfig is the proxy's own FAILOVER_* section: listeners, logging, limits, strategy
// and timeouts.
type ServerConfig struct {
	Listen           string        `env:"LISTEN" envDefault:"127.0.0.1:4000"`
	MetricsListen    string        `env:"METRICS_LISTEN" envDefault:":9464"`
	LogLevel         string        `env:"LOG_LEVEL" envDefault:"info"`
	LogFormat        string        `env:"LOG_FORMAT" envDefault:"auto"`
	ShutdownTimeout  time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"30s"`
	InboundToken     string        `env:"INBOUND_TOKEN"`
	MaxRequestBytes  Size          `env:"MAX_REQUEST_BYTES" envDefault:"32MiB"`
	MaxResponseBytes Size          `env:"MAX_RESPONSE_BYTES" envDefault:"32MiB"`
	MaxInflight      int           `env:"MAX_INFLIGHT" envDefault:"0"`
	Strategy         string        `env:"STRATEGY" envDefault:"failover"`
	StickyHeader     string        `env:"STICKY_HEADER" envDefault:"X-Session-Id"`
	ConnectTimeout   time.Duration `env:"CONNECT_TIMEOUT" envDefault:"5s"`
	FirstByteTimeout time.Duration `env:"FIRST_BYTE_TIMEOUT" envDefault:"60s"`
	IdleTimeout      time.Duration `env:"IDLE_TIMEOUT" envDefault:"300s"`
	AttemptTimeout   time.Duration `env:"ATTEMPT_TIMEOUT" envDefault:"600s"`
	PeekBytes        Size          `env:"PEEK_BYTES" envDefault:"128KiB"`

	// AllowUnderscoreHeaders forwards the client's headers whose names contain '_'
	// (docs/decisions.md, Headers); by default they are dropped.
	AllowUnderscoreHeaders bool `env:"ALLOW_UNDERSCORE_HEADERS" envDefault:"false"`
}

// TargetConfig is one FAILOVER_TARGET_<i>_* group.
type TargetConfig struct {
	URL        string `env:"URL"`
	Name       string `env:"NAME"`
	APIKey     string `env:"API_KEY"`
	APIKeyFile string `env:"API_KEY_FILE"`
	Auth       string `env:"AUTH" envDefault:"bearer"`
	Headers    string `env:"HEADERS"`
	Model      string `env:"MODEL"`
	Models     string `env:"MODELS"`
	Paths      string `env:"PATHS"`
	Weight     int    `env:"WEIGHT" envDefault:"1"`
	Retries    int    `env:"RETRIES"` // unset: FAILOVER_SAME_TARGET_RETRIES (filled in by Load)
	Resume     string `env:"RESUME"`  // how the target continues a cut stream: "" or a ResumeMode's name (resume.go)

	// parsed is Headers, Models and Paths as Load parsed them, once: Fields returns it.
	// A pointer, so that printing a TargetConfig never prints header values.
	parsed *TargetFields
}

// ruleConfig is one FAILOVER_STOP_RULE_<i>_* or FAILOVER_SUCCESS_RULE_<i>_* group.
type ruleConfig struct {
	Statuses string `env:"STATUSES"`
	Pattern  string `env:"PATTERN"`
}

// Config is the whole configuration, read once at start: each package owns its section.
// It is immutable after Load.
type Config struct {
	Server       ServerConfig
	Budget       budget.Config
	Classify     classify.Config
	Targets      []TargetConfig
	StopRules    []classify.Rule
	SuccessRules []classify.Rule
	Resume       ResumeConfig

	// Warnings are the likely mistakes that still load: -check prints them, the start logs
	// each once (config_warning).
	Warnings []Warning
}

// Warning is a setting that loads but likely does not do what it was set for
// (docs/configuration.md): a target URL on a well-known provider's host without the path its
// SDKs use, or a setting that has no effect with the others.
type Warning struct {
	Variable string // the variable's name
	Message  string // the whole line: the variable, its value masked as in errors, and why
}

func (w Warning) String() string { return w.Message }

// strategyNames are the values FAILOVER_STRATEGY accepts, in the order errors list them.
// Package proxy builds one strategy per name from a table of its own, which its tests hold to
// this list.
var strategyNames = []string{"failover", "round-robin", "sticky", "least-latency"}

// StrategyNames returns the values FAILOVER_STRATEGY accepts, in the order errors list them.
func StrategyNames() []string { return slices.Clone(strategyNames) }

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

// groupPattern matches an indexed variable: FAILOVER_<GROUP>_<i>_<FIELD>.
var groupPattern = regexp.MustCompile(`^FAILOVER_(TARGET|STOP_RULE|SUCCESS_RULE)_([0-9]+)_([A-Z0-9_]+)$`)

// groups describes the indexed groups: the field suffixes each accepts and its size limit.
var groups = map[string]struct {
	fields []string
	max    int
}{
	"TARGET":       {envNames(reflect.TypeOf(TargetConfig{}), ""), 1024},
	"STOP_RULE":    {[]string{"STATUSES", "PATTERN"}, classify.MaxRules},
	"SUCCESS_RULE": {[]string{"PATTERN"}, classify.MaxRules},
}

// ConfigError lists every problem found in the environment. Its message has one line per
// problem, each naming the variable; secrets are never part of it.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string {
	return "invalid configuration:\n  - " + strings.Join(e.Problems, "\n  - ")
}

// Load reads the configuration from environ (KEY=value strings, as os.Environ returns) and
// the files _API_KEY_FILE names. It reports every problem at once in a *ConfigError.
// requireTargets is false for the drill, which brings its own simulated targets and uses no
// keys: then the _API_KEY_FILE files are not read.
func Load(environ []string, requireTargets bool) (*Config, error) {
	return load(environ, requireTargets, false)
}

// Check is Load for `failover -check` (targets required). It also binds both listen addresses
// and closes them at once, so that one in use or not permitted fails the check, with the other
// problems, rather than the start.
func Check(environ []string) (*Config, error) {
	return load(environ, true, true)
}

func load(environ []string, requireTargets, bind bool) (*Config, error) {
	vars := make(map[string]string)
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, envPrefix) {
			vars[k] = v
		}
	}
	l := loader{vars: vars, bind: bind}
	c := &Config{}
	l.section(&c.Server, envPrefix)
	l.section(&c.Budget, envPrefix)
	l.section(&c.Classify, envPrefix)
	l.section(&c.Resume, envPrefix)

	indices := l.checkNames()
	for i := range indices["TARGET"] {
		if !indices["TARGET"][i] {
			continue // the gap is reported; the group does not exist
		}
		var t TargetConfig
		l.section(&t, fmt.Sprintf("%sTARGET_%d_", envPrefix, i))
		c.Targets = append(c.Targets, t)
	}
	c.StopRules = l.rules("STOP_RULE", indices["STOP_RULE"], true)
	c.SuccessRules = l.rules("SUCCESS_RULE", indices["SUCCESS_RULE"], false)

	l.validateServer(&c.Server)
	for _, err := range c.Budget.Validate() {
		l.problem("%v", err)
	}
	for _, err := range c.Classify.Validate() {
		l.problem("%v", err)
	}
	l.validateTargets(c, requireTargets)
	l.validateResume(c)

	if len(l.problems) > 0 {
		return nil, &ConfigError{Problems: l.problems}
	}
	l.warnNoEffect(c) // judged on a configuration that loads
	c.Warnings = l.warnings
	return c, nil
}

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

type loader struct {
	vars     map[string]string
	bind     bool // try the listen addresses (Check)
	problems []string
	warnings []Warning
}

func (l *loader) problem(format string, args ...any) {
	l.problems = append(l.problems, fmt.Sprintf(format, args...))
}

// warn records a warning about the variable name: one per variable, the first reason found.
func (l *loader) warn(name, format string, args ...any) {
	for _, w := range l.warnings {
		if w.Variable == name {
			return
		}
	}
	l.warnings = append(l.warnings, Warning{Variable: name, Message: l.shown(name) + ": " + fmt.Sprintf(format, args...)})
}

// shown renders a variable and its value for an error message, masking secrets.
func (l *loader) shown(name string) string {
	v, ok := l.vars[name]
	switch {
	case !ok:
		return name
	case isSecret(name):
		return name + "=<redacted>"
	case strings.HasSuffix(name, "_URL"):
		return fmt.Sprintf("%s=%q", name, MaskURL(v))
	}
	return fmt.Sprintf("%s=%q", name, v)
}

// section reads one struct with caarlos0/env and turns its errors into problems that name
// the variable.
func (l *loader) section(dst any, prefix string) {
	err := env.ParseWithOptions(dst, env.Options{Prefix: prefix, Environment: l.vars})
	if err == nil {
		return
	}
	fields := fieldVars(reflect.TypeOf(dst).Elem(), prefix)
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		l.problem("%s*: %v", prefix, err)
		return
	}
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			name := fields[pe.Name]
			l.problem("%s: %v", l.shown(name), friendlyParseError(pe, l.vars[name]))
			continue
		}
		l.problem("%s*: %v", prefix, e)
	}
}

// friendlyParseError explains the common parse failures of value better than the library does.
func friendlyParseError(pe env.ParseError, value string) string {
	switch pe.Type {
	case reflect.TypeOf(time.Duration(0)):
		return "not a duration: use Go syntax with a unit, like 250ms, 90s or 5m"
	case reflect.TypeOf(0):
		return "not a whole number"
	case reflect.TypeOf(true):
		return "not a boolean: use true or false" + valueHint(value, []string{"true", "false"})
	case reflect.TypeOf(0.0):
		return "not a number"
	}
	return pe.Err.Error()
}

// envNames returns the env tag names of a struct's fields, prefixed.
func envNames(t reflect.Type, prefix string) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("env")
		if name, _, _ := strings.Cut(tag, ","); name != "" {
			names = append(names, prefix+name)
		}
	}
	return names
}

// fieldVars maps a struct's field names to their full variable names.
func fieldVars(t reflect.Type, prefix string) map[string]string {
	m := make(map[string]string)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("env"), ","); name != "" {
			m[f.Name] = prefix + name
		}
	}
	return m
}

// knownNames lists every fixed variable name.
func knownNames() []string {
	var names []string
	names = append(names, envNames(reflect.TypeOf(ServerConfig{}), envPrefix)...)
	names = append(names, envNames(reflect.TypeOf(budget.Config{}), envPrefix)...)
	names = append(names, envNames(reflect.TypeOf(classify.Config{}), envPrefix)...)
	names = append(names, envNames(reflect.TypeOf(ResumeConfig{}), envPrefix)...)
	return names
}

// serviceLinkPattern matches the variables Kubernetes injects into every pod of a namespace
// that has a Service named "failover" (enableServiceLinks defaults to true):
// FAILOVER_SERVICE_HOST, FAILOVER_SERVICE_PORT, FAILOVER_SERVICE_PORT_<PORT NAME>, FAILOVER_PORT,
// FAILOVER_PORT_<n>_<PROTOCOL> and its _PROTO, _PORT and _ADDR. Rejecting them as typos would
// crash-loop the pod; anything shaped differently (FAILOVER_PORTS) is still an unknown variable.
var serviceLinkPattern = regexp.MustCompile(`^FAILOVER_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$`)

// checkNames rejects unknown FAILOVER_* variables (with a did-you-mean hint) and gaps in
// indexed groups, and returns which members each group has (index → present).
func (l *loader) checkNames() map[string][]bool {
	known := make(map[string]bool)
	for _, n := range knownNames() {
		known[n] = true
	}
	seen := map[string]map[int]bool{}
	names := make([]string, 0, len(l.vars))
	for k := range l.vars {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if known[k] || serviceLinkPattern.MatchString(k) {
			continue
		}
		if m := groupPattern.FindStringSubmatch(k); m != nil {
			group, idx, field := m[1], m[2], m[3]
			g := groups[group]
			i, err := strconv.Atoi(idx)
			switch {
			case len(idx) > 1 && idx[0] == '0':
				l.problem("%s: the index %q must be written without leading zeros", k, idx)
			case err != nil || i >= g.max:
				l.problem("%s: at most %d FAILOVER_%s_<i> groups are allowed (0 to %d)", k, g.max, group, g.max-1)
			case !contains(g.fields, field):
				l.problem("%s: unknown variable%s", k, didYouMean(field, g.fields, fmt.Sprintf("FAILOVER_%s_%d_", group, i)))
			default:
				if seen[group] == nil {
					seen[group] = map[int]bool{}
				}
				seen[group][i] = true
			}
			continue
		}
		l.problem("%s: unknown variable%s", k, didYouMean(k, append(knownNames(), indexedNames(k)...), ""))
	}
	present := map[string][]bool{}
	for group, idx := range seen {
		n := 0
		for i := range idx {
			n = max(n, i+1)
		}
		var missing []string
		present[group] = make([]bool, n)
		for i := 0; i < n; i++ {
			present[group][i] = idx[i]
			if !idx[i] {
				missing = append(missing, strconv.Itoa(i))
			}
		}
		if len(missing) > 0 {
			l.problem("FAILOVER_%s_<i>: indices must be contiguous from 0; missing %s", group, strings.Join(missing, ", "))
		}
	}
	return present
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// indexedNames lists the indexed variables at the index written in name (its first run of
// digits, else 0), so that a typo in a group's name (FAILOVER_TARGETS_0_URL) gets a hint too.
func indexedNames(name string) []string {
	idx := regexp.MustCompile(`[0-9]+`).FindString(name)
	if idx == "" {
		idx = "0"
	}
	var names []string
	for group, g := range groups {
		for _, f := range g.fields {
			names = append(names, fmt.Sprintf("FAILOVER_%s_%s_%s", group, idx, f))
		}
	}
	sort.Strings(names) // map order must not pick between equally close names
	return names
}

// didYouMean suggests the closest known name when it is close enough to be a typo.
func didYouMean(name string, candidates []string, prefix string) string {
	// Variable names are case-sensitive, but a name in the wrong case is a typo like any other.
	best, d := closest(name, candidates)
	if best == "" || d > max(2, len(name)/4) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s%s?)", prefix, best)
}

// closest returns the candidate nearest to s, in any case, and its editDistance; "" when there
// are no candidates.
func closest(s string, candidates []string) (string, int) {
	best, bestD := "", 1<<30
	upper := strings.ToUpper(s)
	for _, c := range candidates {
		if d := editDistance(upper, strings.ToUpper(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD
}

// valueSynonyms are words for an accepted value that no spelling is close to: FAILOVER_RESUME
// takes on, a boolean true, and either may be written as the other, or as yes.
var valueSynonyms = [][]string{
	{"true", "on", "yes", "y", "enable", "enabled"},
	{"false", "off", "no", "n", "disable", "disabled"},
	{"warn", "warning"},
	{"error", "err"},
	{"text", "console", "pretty", "logfmt"},
}

// valueHint suggests which of the accepted values of an enumerated setting v was meant as: a
// synonym, or the closest spelling (also one that differs only in case or spaces). "" when none
// is close enough to be a typo. Never used on a secret.
func valueHint(v string, accepted []string) string {
	lv := strings.ToLower(strings.TrimSpace(v))
	for _, words := range valueSynonyms {
		if contains(words, lv) {
			for _, a := range accepted {
				if contains(words, a) {
					return fmt.Sprintf(" (did you mean %s?)", a)
				}
			}
		}
	}
	best, d := closest(lv, accepted)
	if best == "" || d >= len(lv) || d > max(1, len(lv)/3) {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// editDistance counts the insertions, deletions, substitutions and swaps of two neighbouring
// letters (the commonest typo: MODLES for MODELS) that turn a into b.
func editDistance(a, b string) int {
	pprev := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], pprev[j-2]+1)
			}
		}
		pprev, prev, cur = prev, cur, pprev
	}
	return prev[len(b)]
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

// tryListen binds both listen addresses, both at once, then closes them: one that is in use
// or not permitted is a problem, as the start would fail on it.
func (l *loader) tryListen(s *ServerConfig) {
	var open []net.Listener
	for _, v := range []struct{ name, addr string }{{"LISTEN", s.Listen}, {"METRICS_LISTEN", s.MetricsListen}} {
		ln, err := net.Listen("tcp", v.addr)
		if err != nil {
			l.problem("%s: %s", l.shown(envPrefix+v.name), listenProblem(v.addr, err))
			continue
		}
		open = append(open, ln)
	}
	for _, ln := range open {
		ln.Close()
	}
}

// listenProblem explains why net.Listen refused addr, and what to do.
func listenProblem(addr string, err error) string {
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return "the address is in use: stop what listens there, or choose another port"
	case (errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)) && n > 0 && n < 1024:
		return "not permitted: a port below 1024 needs privileges (root, or CAP_NET_BIND_SERVICE); choose a port from 1024 up"
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
		return fmt.Sprintf("not permitted: %v", errors.Unwrap(err))
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "the host is not an address of this machine: use 127.0.0.1, 0.0.0.0 or one of its own addresses"
	}
	return fmt.Sprintf("cannot listen: %v", err)
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

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return len(s) > 0 && len(s) <= 64
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

// Describe renders the effective policy for `failover -check`, one setting per line, with
// every secret masked: keys are reported as set or not, header values are left out.
func (c *Config) Describe() string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	s := &c.Server
	line("# server")
	line("FAILOVER_LISTEN=%s", s.Listen)
	line("FAILOVER_METRICS_LISTEN=%s", s.MetricsListen)
	line("FAILOVER_LOG_LEVEL=%s  FAILOVER_LOG_FORMAT=%s", s.LogLevel, s.LogFormat)
	line("FAILOVER_SHUTDOWN_TIMEOUT=%s", s.ShutdownTimeout)
	if s.InboundToken != "" {
		line("FAILOVER_INBOUND_TOKEN=<set>")
	} else {
		line("FAILOVER_INBOUND_TOKEN=<not set: any local client may call>")
	}
	line("FAILOVER_MAX_REQUEST_BYTES=%s  FAILOVER_MAX_RESPONSE_BYTES=%s  FAILOVER_MAX_INFLIGHT=%d", s.MaxRequestBytes, s.MaxResponseBytes, s.MaxInflight)
	line("FAILOVER_ALLOW_UNDERSCORE_HEADERS=%t", s.AllowUnderscoreHeaders)
	line("# targets")
	for i, t := range c.Targets {
		key := "<client credentials forwarded>"
		if t.APIKey != "" {
			key = "<set>"
			if t.APIKeyFile != "" {
				key = "<set from " + t.APIKeyFile + ">"
			}
		}
		line("FAILOVER_TARGET_%d: name=%s url=%s auth=%s key=%s", i, t.Name, MaskURL(t.URL), t.Auth, key)
		if f, _ := t.Fields(); len(f.Headers) > 0 {
			names := make([]string, len(f.Headers))
			for j, h := range f.Headers {
				names[j] = string(h[0])
			}
			line("    headers: %s (values hidden)", strings.Join(names, ", "))
		}
		var extra []string
		if t.Model != "" {
			extra = append(extra, "model="+t.Model)
		}
		if t.Models != "" {
			extra = append(extra, "models="+t.Models)
		}
		if t.Paths != "" {
			extra = append(extra, "paths="+t.Paths)
		}
		extra = append(extra, fmt.Sprintf("weight=%d retries=%d", t.Weight, t.Retries))
		if t.Resume != "" {
			extra = append(extra, "resume="+t.Resume)
		}
		line("    %s", strings.Join(extra, " "))
	}
	line("# policy")
	line("FAILOVER_STRATEGY=%s%s", s.Strategy, map[bool]string{true: "  FAILOVER_STICKY_HEADER=" + s.StickyHeader}[s.Strategy == "sticky"])
	bc := &c.Budget
	line("FAILOVER_ENABLED=%t  FAILOVER_MAX_ATTEMPTS=%d  FAILOVER_MAX_ELAPSED=%s", bc.Enabled, bc.MaxAttempts, limitText(bc.MaxElapsed))
	line("FAILOVER_SAME_TARGET_RETRIES=%d  FAILOVER_BACKOFF_BASE=%s  FAILOVER_BACKOFF_MAX=%s  FAILOVER_RETRY_AFTER_MAX=%s",
		bc.SameTargetRetries, bc.BackoffBase, capText(bc.BackoffMax), bc.RetryAfterMax)
	line("FAILOVER_CONNECT_TIMEOUT=%s  FAILOVER_FIRST_BYTE_TIMEOUT=%s  FAILOVER_IDLE_TIMEOUT=%s  FAILOVER_ATTEMPT_TIMEOUT=%s",
		limitText(s.ConnectTimeout), limitText(s.FirstByteTimeout), limitText(s.IdleTimeout), limitText(s.AttemptTimeout))
	line("FAILOVER_PEEK_BYTES=%s", s.PeekBytes)
	line("FAILOVER_EJECT_AFTER=%d  FAILOVER_EJECT_BASE=%s  FAILOVER_EJECT_MAX=%s  FAILOVER_EJECT_SILENT=%s  FAILOVER_PROBE_INTERVAL=%s",
		bc.EjectAfter, bc.EjectBase, capText(bc.EjectMax), bc.EjectSilent, offText(bc.ProbeInterval))
	line("FAILOVER_RETRY_BUDGET_RATIO=%g  FAILOVER_RETRY_BUDGET_MIN=%d", bc.RetryBudgetRatio, bc.RetryBudgetMin)
	line("FAILOVER_RATELIMIT_AWARE=%t  FAILOVER_RATELIMIT_FLOOR=%g", bc.RateLimitAware, bc.RateLimitFloor)
	line("%s", c.Resume.describe(c.Targets))
	for _, l := range classify.NewPolicy(c.Classify, c.StopRules, c.SuccessRules, bc.RetryAfterMax).Describe() {
		line("%s", l)
	}
	return b.String()
}

// limitText renders a time limit for -check: 0 turns it off (docs/configuration.md),
// which a bare "0s" would not say.
func limitText(d time.Duration) string {
	if d == 0 {
		return "<no limit>"
	}
	return d.String()
}

// offText renders a setting for -check that 0 turns off.
func offText(d time.Duration) string {
	if d == 0 {
		return "<off>"
	}
	return d.String()
}

// capText renders a cap for -check. A bare "0s" would read as "capped at nothing" where it
// means the opposite (docs/configuration.md: 0 disables a limit).
func capText(d time.Duration) string {
	if d == 0 {
		return "<no cap>"
	}
	return d.String()
}
