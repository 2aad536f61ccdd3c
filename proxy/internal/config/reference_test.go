package config

import (
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
)

// referencePage is the configuration reference: a table row per variable.
const referencePage = "../../../docs/configuration.md"

// referenceRows returns the variable and default cells of the reference's table rows.
func referenceRows(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(referencePage)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	row := regexp.MustCompile("(?m)^\\| `(FAILOVER_[^`]+)` \\| ([^|]*) \\|")
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		if _, dup := rows[m[1]]; dup {
			t.Errorf("%s has two rows", m[1])
		}
		rows[m[1]] = strings.TrimSpace(m[2])
	}
	if len(rows) < 40 {
		t.Fatalf("only %d variables found in %s: is the table still there?", len(rows), referencePage)
	}
	return rows
}

// The configuration reference has a row for every variable the loader knows, and no other; a
// variable with a default in its env tag shows that default.
func TestDocsConfigurationListsEveryVariable(t *testing.T) {
	rows := referenceRows(t)

	defaults := map[string]string{}
	known := map[string]bool{}
	for _, n := range knownNames() {
		known[n] = true
	}
	for group, g := range groups {
		for _, f := range g.fields {
			known["FAILOVER_"+group+"_<i>_"+f] = true
		}
	}
	for _, section := range []struct {
		prefix string
		typ    reflect.Type
	}{
		{envPrefix, reflect.TypeOf(ServerConfig{})},
		{envPrefix, reflect.TypeOf(budget.Config{})},
		{envPrefix, reflect.TypeOf(classify.Config{})},
		{envPrefix, reflect.TypeOf(ResumeConfig{})},
		{envPrefix, reflect.TypeOf(HedgeConfig{})},
		{envPrefix + "TARGET_<i>_", reflect.TypeOf(TargetConfig{})},
		{envPrefix + "STOP_RULE_<i>_", reflect.TypeOf(ruleConfig{})},
	} {
		for i := 0; i < section.typ.NumField(); i++ {
			f := section.typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
			if def, ok := f.Tag.Lookup("envDefault"); ok && name != "" {
				defaults[section.prefix+name] = def
			}
		}
	}

	var names []string
	for n := range known {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		cell, ok := rows[n]
		switch {
		case !ok:
			t.Errorf("%s is not in %s", n, referencePage)
		case defaults[n] != "" && cell != "`"+defaults[n]+"`":
			t.Errorf("%s: the reference's default is %s, the code's `%s`", n, cell, defaults[n])
		}
	}
	for n := range rows {
		if !known[n] {
			t.Errorf("%s is in %s, but the loader does not know it", n, referencePage)
		}
	}
}
