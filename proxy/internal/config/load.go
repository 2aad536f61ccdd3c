package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

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
	l.section(&c.Hedge, envPrefix)

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
	l.validateHedge(c)

	if len(l.problems) > 0 {
		return nil, &ConfigError{Problems: l.problems}
	}
	l.warnNoEffect(c) // judged on a configuration that loads
	c.Warnings = l.warnings
	return c, nil
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
