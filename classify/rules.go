package classify

import (
	"fmt"
	"regexp"
	"strings"
)

// Limits on rule groups (docs/configuration.md, Configuration reference, Rules).
const (
	MaxRules         = 64   // rules per group (stop, success)
	MaxPatternBytes  = 4096 // bytes per pattern
	minRuleStatus    = 400
	maxRuleStatus    = 599
	ruleStatusReason = "stop rule statuses must be in 400-599"
)

// Rule is one stop or success rule. A stop rule with both statuses and a pattern needs both
// to hold; with only statuses, those statuses always stop; with only a pattern, it is matched
// on every error status. A success rule has only a pattern. Immutable and safe for concurrent use.
type Rule struct {
	Statuses StatusSet
	Pattern  *regexp.Regexp
}

// ParseRuleStatuses parses a stop rule's status list: tokens as in StatusSet, all within 400–599.
func ParseRuleStatuses(list string) (StatusSet, error) {
	s, err := ParseStatusSet(list)
	if err != nil {
		return s, err
	}
	for st := 100; st < minRuleStatus; st++ {
		if s.Has(st) {
			return StatusSet{}, fmt.Errorf("%s (got %s)", ruleStatusReason, s.text)
		}
	}
	return s, nil
}

// CompilePattern checks and compiles a rule pattern (Go RE2 syntax; "(?i)" works).
func CompilePattern(p string) (*regexp.Regexp, error) {
	if strings.TrimSpace(p) == "" {
		return nil, fmt.Errorf("pattern is empty")
	}
	if len(p) > MaxPatternBytes {
		return nil, fmt.Errorf("pattern is %d bytes, the limit is %d", len(p), MaxPatternBytes)
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("pattern does not compile: %v", err)
	}
	return re, nil
}

// describe renders a rule for the effective-policy print.
func (r *Rule) describe() string {
	var parts []string
	if !r.Statuses.Empty() {
		parts = append(parts, "statuses="+r.Statuses.text)
	}
	if r.Pattern != nil {
		parts = append(parts, fmt.Sprintf("pattern=%q", r.Pattern.String()))
	}
	return strings.Join(parts, " ")
}
