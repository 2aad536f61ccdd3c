package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestSecretsLeaveTheProcessEnvironment(t *testing.T) {
	secrets := []string{"FAILOVER_TARGET_0_API_KEY=sk-test-removed-0001", "FAILOVER_TARGET_1_API_KEY=sk-test-removed-0002",
		"FAILOVER_INBOUND_TOKEN=inbound-test-removed-0003", "FAILOVER_TARGET_1_HEADERS=X-Org=org-test-removed-0004"}
	kept := []string{"FAILOVER_TARGET_0_URL=http://127.0.0.1:1/v1", "FAILOVER_TARGET_1_URL=http://127.0.0.1:2/v1"}
	tests := []struct {
		name     string
		args     []string
		extra    []string
		wantCode int
	}{
		{"after -check of a valid configuration", []string{"-check"}, nil, 0},
		{"after a configuration that does not load", []string{"-check"}, []string{"FAILOVER_RETRY_ON_STATUS=5xx"}, 2},
		{"before the drill runs", []string{"drill"}, []string{"FAILOVER_LISTEN=not an address"}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			environ := append(append(append([]string(nil), secrets...), kept...), tc.extra...)
			for _, kv := range environ {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v) // restored after the test
			}
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, environ, &stdout, &stderr); code != tc.wantCode {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.wantCode, stdout.String(), stderr.String())
			}
			for _, kv := range secrets {
				k, _, _ := strings.Cut(kv, "=")
				if v, ok := os.LookupEnv(k); ok {
					t.Errorf("%s is still in the environment (%d bytes)", k, len(v))
				}
			}
			for _, kv := range kept {
				k, v, _ := strings.Cut(kv, "=")
				if os.Getenv(k) != v {
					t.Errorf("%s was removed: only secrets leave the environment", k)
				}
			}
			for _, env := range os.Environ() {
				if strings.Contains(env, "-removed-") {
					t.Errorf("a secret value is still in the environment: %s", env)
				}
			}
			if out := stdout.String() + stderr.String(); strings.Contains(out, "-removed-") {
				t.Errorf("a secret was printed:\n%s", out)
			}
		})
	}
}

// Two different modes on one command line are refused rather than the last one winning:
// "failover -check drill" in a CI step would run the drill instead of checking.
func TestModesCannotBeCombined(t *testing.T) {
	environ := []string{"FAILOVER_TARGET_0_URL=http://127.0.0.1:1/v1"}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-check", "drill"}, 2},
		{[]string{"drill", "check"}, 2},
		{[]string{"check", "--check"}, 0}, // the same mode twice
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, environ, &stdout, &stderr); code != tc.want {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, code, tc.want, stderr.String())
		}
		if tc.want == 2 && !strings.Contains(stderr.String(), "cannot be combined") {
			t.Errorf("%v: %q", tc.args, stderr.String())
		}
	}
}
