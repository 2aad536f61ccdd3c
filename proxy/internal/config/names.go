package config

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
)

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
	names = append(names, envNames(reflect.TypeOf(HedgeConfig{}), envPrefix)...)
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
