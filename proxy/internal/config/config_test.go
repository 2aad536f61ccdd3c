package config

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLoadDefaults(t *testing.T) {
	c, err := Load([]string{"FAILOVER_TARGET_0_URL=https://api.openai.com/v1", "PATH=/usr/bin", "HOME=/root"}, true)
	if err != nil {
		t.Fatal(err)
	}
	s := c.Server
	if s.Listen != "127.0.0.1:4000" || s.MetricsListen != ":9464" || s.LogLevel != "info" || s.LogFormat != "auto" ||
		s.ShutdownTimeout != 30*time.Second || s.MaxRequestBytes != 32<<20 || s.MaxResponseBytes != 32<<20 ||
		s.Strategy != "failover" || s.StickyHeader != "X-Session-Id" || s.ConnectTimeout != 5*time.Second ||
		s.FirstByteTimeout != 60*time.Second || s.IdleTimeout != 300*time.Second || s.AttemptTimeout != 600*time.Second ||
		s.PeekBytes != 128<<10 || s.MaxInflight != 0 || s.InboundToken != "" {
		t.Errorf("server defaults: %+v", s)
	}
	b := c.Budget
	if !b.Enabled || b.MaxAttempts != 0 || b.SameTargetRetries != 1 || b.BackoffBase != 200*time.Millisecond ||
		b.BackoffMax != 5*time.Second || b.RetryAfterMax != 10*time.Second || b.EjectAfter != 5 || b.RetryBudgetRatio != 0.2 || b.RetryBudgetMin != 10 ||
		b.EjectBase != 10*time.Second || b.EjectMax != 10*time.Second || b.EjectSilent != 60*time.Second || b.ProbeInterval != 5*time.Second {
		t.Errorf("budget defaults: %+v", b)
	}
	tg := c.Targets[0]
	if tg.Name != "api.openai.com" || tg.Auth != "bearer" || tg.Weight != 1 || tg.Retries != 1 {
		t.Errorf("target defaults: %+v", tg)
	}
}

func TestLoadTargets(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	os.WriteFile(keyFile, []byte("sk-from-file\n"), 0o600)
	c, err := Load([]string{
		"FAILOVER_TARGET_0_URL=https://api.openai.com/v1",
		"FAILOVER_TARGET_0_API_KEY_FILE=" + keyFile,
		"FAILOVER_TARGET_1_URL=https://api.openai.com/v1",
		"FAILOVER_TARGET_1_RETRIES=2",
		"FAILOVER_TARGET_2_URL=https://api.anthropic.com/v1",
		"FAILOVER_TARGET_2_AUTH=X-API-KEY",
		"FAILOVER_SAME_TARGET_RETRIES=1",
		"FAILOVER_PEEK_BYTES=64KiB",
		"FAILOVER_MAX_REQUEST_BYTES=1048576",
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Targets[0].APIKey != "sk-from-file" {
		t.Errorf("key file not read or not trimmed: %q", c.Targets[0].APIKey)
	}
	if c.Targets[0].Name != "api.openai.com" || c.Targets[1].Name != "api.openai.com-2" || c.Targets[2].Name != "api.anthropic.com" {
		t.Errorf("default names: %s %s %s", c.Targets[0].Name, c.Targets[1].Name, c.Targets[2].Name)
	}
	if c.Targets[0].Retries != 1 || c.Targets[1].Retries != 2 {
		t.Errorf("retries: %d %d", c.Targets[0].Retries, c.Targets[1].Retries)
	}
	if c.Targets[2].Auth != "x-api-key" || c.Server.PeekBytes != 64<<10 || c.Server.MaxRequestBytes != 1<<20 {
		t.Errorf("parsed: %+v %+v", c.Targets[2], c.Server)
	}
}

func TestLoadTargetRetries(t *testing.T) {
	tests := []struct {
		name  string
		value string // FAILOVER_TARGET_0_RETRIES; "unset" leaves it out
		want  int
	}{
		{"unset inherits FAILOVER_SAME_TARGET_RETRIES", "unset", 2},
		{"empty inherits FAILOVER_SAME_TARGET_RETRIES", "", 2},
		{"0 overrides", "0", 0},
		{"a count overrides", "5", 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			environ := []string{"FAILOVER_TARGET_0_URL=https://api.openai.com/v1", "FAILOVER_SAME_TARGET_RETRIES=2"}
			if tc.value != "unset" {
				environ = append(environ, "FAILOVER_TARGET_0_RETRIES="+tc.value)
			}
			c, err := Load(environ, true)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Targets[0].Retries; got != tc.want {
				t.Errorf("Retries = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestLoadZeroCapsAreNoCap: "0 disables a limit" (docs/configuration.md), also for
// the two caps, and -check says so rather than printing a cap or a timeout of 0s.
func TestLoadZeroCapsAreNoCap(t *testing.T) {
	c, err := Load([]string{"FAILOVER_TARGET_0_URL=https://api.openai.com/v1", "FAILOVER_BACKOFF_MAX=0", "FAILOVER_EJECT_MAX=0",
		"FAILOVER_CONNECT_TIMEOUT=0", "FAILOVER_FIRST_BYTE_TIMEOUT=0", "FAILOVER_IDLE_TIMEOUT=0", "FAILOVER_ATTEMPT_TIMEOUT=0"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Budget.BackoffMax != 0 || c.Budget.EjectMax != 0 {
		t.Errorf("BackoffMax %v, EjectMax %v; want 0, 0", c.Budget.BackoffMax, c.Budget.EjectMax)
	}
	d := c.Describe()
	for _, want := range []string{"FAILOVER_BACKOFF_MAX=<no cap>", "FAILOVER_EJECT_MAX=<no cap>", "FAILOVER_MAX_ELAPSED=<no limit>",
		"FAILOVER_CONNECT_TIMEOUT=<no limit>", "FAILOVER_FIRST_BYTE_TIMEOUT=<no limit>", "FAILOVER_IDLE_TIMEOUT=<no limit>", "FAILOVER_ATTEMPT_TIMEOUT=<no limit>"} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe lacks %q:\n%s", want, d)
		}
	}
}

// FAILOVER_ALLOW_UNDERSCORE_HEADERS is false unless set, and -check says which.
func TestLoadUnderscoreHeadersSwitch(t *testing.T) {
	for value, want := range map[string]bool{"": false, "false": false, "true": true} {
		c, err := Load([]string{"FAILOVER_TARGET_0_URL=https://api.openai.com/v1", "FAILOVER_ALLOW_UNDERSCORE_HEADERS=" + value}, true)
		if err != nil {
			t.Fatal(err)
		}
		line := "\nFAILOVER_ALLOW_UNDERSCORE_HEADERS=" + strconv.FormatBool(want) + "\n"
		if c.Server.AllowUnderscoreHeaders != want || !strings.Contains(c.Describe(), line) {
			t.Errorf("%q: %v, -check:\n%s", value, c.Server.AllowUnderscoreHeaders, c.Describe())
		}
	}
}

// TestLoadLowerCasesLogSettings: the log settings are accepted in any case, and whoever reads
// the Config (main picks the handler by comparing them) sees them in lower case.
func TestLoadLowerCasesLogSettings(t *testing.T) {
	c, err := Load([]string{"FAILOVER_TARGET_0_URL=https://api.openai.com/v1", "FAILOVER_LOG_LEVEL=DEBUG", "FAILOVER_LOG_FORMAT=Text"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.LogLevel != "debug" || c.Server.LogFormat != "text" {
		t.Errorf("LogLevel %q, LogFormat %q; want debug, text", c.Server.LogLevel, c.Server.LogFormat)
	}
	if d := c.Describe(); !strings.Contains(d, "FAILOVER_LOG_LEVEL=debug  FAILOVER_LOG_FORMAT=text\n") {
		t.Errorf("Describe:\n%s", d)
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	longPattern := strings.Repeat("a", 4097)
	tests := []struct {
		name string
		env  []string
		want []string // every one must be in the message
	}{
		{"unknown variable with a hint", []string{"FAILOVER_RETRY_ON_STATUS=5xx"}, []string{"FAILOVER_RETRY_ON_STATUS: unknown variable", "did you mean FAILOVER_RETRY_ON_STATUSES"}},
		{"unknown target field with a hint", []string{"FAILOVER_TARGET_0_APIKEY=x"}, []string{"FAILOVER_TARGET_0_APIKEY: unknown variable", "did you mean FAILOVER_TARGET_0_API_KEY"}},
		{"swapped letters in a target field", []string{"FAILOVER_TARGET_0_MODLES=gpt-4o"}, []string{"FAILOVER_TARGET_0_MODLES: unknown variable", "did you mean FAILOVER_TARGET_0_MODELS?"}},
		{"a typo in a group's name", []string{"FAILOVER_TARGETS_1_URL=https://x.example/v1"}, []string{"FAILOVER_TARGETS_1_URL: unknown variable", "did you mean FAILOVER_TARGET_1_URL?"}},
		{"gap in targets", []string{"FAILOVER_TARGET_2_URL=http://c/v1"}, []string{"FAILOVER_TARGET_<i>: indices must be contiguous from 0; missing 0, 1"}},
		{"gap in rules", []string{"FAILOVER_STOP_RULE_1_STATUSES=400"}, []string{"FAILOVER_STOP_RULE_<i>: indices must be contiguous from 0; missing 0"}},
		{"leading zero index", []string{"FAILOVER_TARGET_01_URL=http://c/v1"}, []string{"FAILOVER_TARGET_01_URL: the index \"01\" must be written without leading zeros"}},
		{"index too large to be a number", []string{"FAILOVER_TARGET_99999999999999999999_URL=http://c/v1"}, []string{"FAILOVER_TARGET_99999999999999999999_URL: at most 1024 FAILOVER_TARGET_<i> groups"}},
		{"a name in lower case", []string{"FAILOVER_target_0_url=http://c/v1"}, []string{"FAILOVER_target_0_url: unknown variable (did you mean FAILOVER_TARGET_0_URL?)"}},
		{"a fixed name in mixed case", []string{"FAILOVER_Max_Attempts=2"}, []string{"did you mean FAILOVER_MAX_ATTEMPTS?"}},
		{"duration without unit", []string{"FAILOVER_CONNECT_TIMEOUT=5"}, []string{`FAILOVER_CONNECT_TIMEOUT="5": not a duration`}},
		{"bad size", []string{"FAILOVER_PEEK_BYTES=128KB"}, []string{`FAILOVER_PEEK_BYTES="128KB": not a size`}},
		{"bad integer", []string{"FAILOVER_MAX_ATTEMPTS=two"}, []string{`FAILOVER_MAX_ATTEMPTS="two": not a whole number`}},
		{"bad boolean", []string{"FAILOVER_ENABLED=yes please"}, []string{`FAILOVER_ENABLED="yes please": not a boolean`}},
		{"bad underscore switch", []string{"FAILOVER_ALLOW_UNDERSCORE_HEADERS=on"}, []string{`FAILOVER_ALLOW_UNDERSCORE_HEADERS="on": not a boolean`}},
		{"underscore switch misspelt", []string{"FAILOVER_ALLOW_UNDERSCORES_HEADERS=true"}, []string{"did you mean FAILOVER_ALLOW_UNDERSCORE_HEADERS?"}},
		{"bad status token", []string{"FAILOVER_RETRY_ON_STATUSES=429,6xx"}, []string{`FAILOVER_RETRY_ON_STATUSES="429,6xx"`, `"6xx" is not a status`}},
		{"success status in the retry list", []string{"FAILOVER_RETRY_ON_STATUSES=2xx"}, []string{"FAILOVER_RETRY_ON_STATUSES", "200 is not an error status"}},
		{"phrase of status words only", []string{"FAILOVER_RETRY_ON_ERRORS=model gone, 404 5xx"}, []string{"FAILOVER_RETRY_ON_ERRORS", "has only status words"}},
		{"stop rule status outside 400-599", []string{"FAILOVER_STOP_RULE_0_STATUSES=302"}, []string{"FAILOVER_STOP_RULE_0_STATUSES=\"302\"", "400-599"}},
		{"pattern that does not compile", []string{"FAILOVER_STOP_RULE_0_PATTERN=(unclosed"}, []string{"FAILOVER_STOP_RULE_0_PATTERN", "does not compile"}},
		{"pattern too long", []string{"FAILOVER_SUCCESS_RULE_0_PATTERN=" + longPattern}, []string{"FAILOVER_SUCCESS_RULE_0_PATTERN", "4097 bytes, the limit is 4096"}},
		{"empty stop rule", []string{"FAILOVER_STOP_RULE_0_PATTERN="}, []string{"FAILOVER_STOP_RULE_0_PATTERN", "pattern is empty"}},
		{"statuses on a success rule", []string{"FAILOVER_SUCCESS_RULE_0_STATUSES=500"}, []string{"FAILOVER_SUCCESS_RULE_0_STATUSES: unknown variable"}},
		{"65 rules", rules(65), []string{"at most 64 FAILOVER_STOP_RULE_<i> groups"}},
		{"bad url scheme", []string{"FAILOVER_TARGET_0_URL=ftp://files/v1"}, []string{"FAILOVER_TARGET_0_URL", "http:// or https://"}},
		{"url with credentials", []string{"FAILOVER_TARGET_0_URL=https://user:hunter2@api.example.com/v1"}, []string{"FAILOVER_TARGET_0_URL", "must not carry credentials"}},
		{"group without url", []string{"FAILOVER_TARGET_0_NAME=primary"}, []string{"FAILOVER_TARGET_0_URL: required"}},
		{"no targets", []string{}, []string{"no target is configured"}},
		{"bad auth", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_AUTH=basic"}, []string{"FAILOVER_TARGET_0_AUTH=\"basic\"", "bearer, x-api-key, api-key, none"}},
		{"key and key file", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_API_KEY=sk-x", "FAILOVER_TARGET_0_API_KEY_FILE=/nope"}, []string{"set one, not both"}},
		{"missing key file", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_API_KEY_FILE=/does/not/exist"}, []string{"FAILOVER_TARGET_0_API_KEY_FILE=\"/does/not/exist\": cannot read the key file"}},
		{"auth none with a key", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_AUTH=none", "FAILOVER_TARGET_0_API_KEY=sk-x"}, []string{"AUTH=none with a key set"}},
		{"bad headers", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_HEADERS=Host=evil;X-Ok=1"}, []string{"FAILOVER_TARGET_0_HEADERS=<redacted>", "entry 1: header Host is set by the sidecar"}},
		{"headers setting the key's own header", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_API_KEY=sk-x",
			"FAILOVER_TARGET_0_HEADERS=authorization=Bearer sk-other", "FAILOVER_TARGET_1_URL=http://b/v1", "FAILOVER_TARGET_1_API_KEY=sk-y",
			"FAILOVER_TARGET_1_AUTH=x-api-key", "FAILOVER_TARGET_1_HEADERS=X-Api-Key=k2"},
			[]string{"FAILOVER_TARGET_0_HEADERS=<redacted>: sets Authorization, which the target's key already sets (FAILOVER_TARGET_0_AUTH=bearer)",
				"FAILOVER_TARGET_1_HEADERS=<redacted>: sets x-api-key"}},
		{"url with a port out of range", []string{"FAILOVER_TARGET_0_URL=https://x:99999/v1"}, []string{`FAILOVER_TARGET_0_URL="https://x:99999/v1": the port must be a number in 1-65535`}},
		{"url with port 0", []string{"FAILOVER_TARGET_0_URL=https://x:0/v1"}, []string{`FAILOVER_TARGET_0_URL="https://x:0/v1": the port must be a number in 1-65535`}},
		{"near-miss of a service link variable", []string{"FAILOVER_SERVICE_HOSTS=10.96.0.1"}, []string{"FAILOVER_SERVICE_HOSTS: unknown variable"}},
		{"near-miss of a service link port variable", []string{"FAILOVER_PORTS=tcp://10.96.0.1:9464"}, []string{"FAILOVER_PORTS: unknown variable"}},
		{"service link with an unknown protocol", []string{"FAILOVER_PORT_9464_HTTP=tcp://10.96.0.1:9464"}, []string{"FAILOVER_PORT_9464_HTTP: unknown variable"}},
		{"bad models", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_MODELS=gpt-*-mini"}, []string{"FAILOVER_TARGET_0_MODELS", "only allowed at the end"}},
		{"bad paths", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_PATHS=chat"}, []string{"FAILOVER_TARGET_0_PATHS", "starts with /v1/"}},
		{"duplicate names", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_NAME=x", "FAILOVER_TARGET_1_URL=http://b/v1", "FAILOVER_TARGET_1_NAME=x"}, []string{"FAILOVER_TARGET_1_NAME=\"x\": the name is already used"}},
		{"bad strategy", []string{"FAILOVER_STRATEGY=random"}, []string{"FAILOVER_STRATEGY=\"random\"", "failover, round-robin, sticky, least-latency"}},
		{"bad log level", []string{"FAILOVER_LOG_LEVEL=verbose"}, []string{"FAILOVER_LOG_LEVEL=\"verbose\""}},
		{"bad log format shows the value as set", []string{"FAILOVER_LOG_FORMAT=YAML"}, []string{"FAILOVER_LOG_FORMAT=\"YAML\": must be auto, text or json"}},
		{"bad listen", []string{"FAILOVER_LISTEN=4000"}, []string{"FAILOVER_LISTEN=\"4000\": must be host:port"}},
		{"listen port out of range", []string{"FAILOVER_LISTEN=127.0.0.1:99999"}, []string{`FAILOVER_LISTEN="127.0.0.1:99999": the port must be a number in 0-65535`}},
		{"listen port not a number", []string{"FAILOVER_LISTEN=localhost:abc"}, []string{`FAILOVER_LISTEN="localhost:abc": the port must be a number in 0-65535`}},
		{"negative metrics port", []string{"FAILOVER_METRICS_LISTEN=:-1"}, []string{`FAILOVER_METRICS_LISTEN=":-1": the port must be a number in 0-65535`}},
		{"both listeners on one address", []string{"FAILOVER_LISTEN=127.0.0.1:4999", "FAILOVER_METRICS_LISTEN=127.0.0.1:4999"}, []string{`FAILOVER_LISTEN="127.0.0.1:4999" / FAILOVER_METRICS_LISTEN="127.0.0.1:4999": the proxy and the metrics listeners cannot share an address`}},
		{"listener on a port the wildcard metrics listener holds", []string{"FAILOVER_LISTEN=127.0.0.1:9464"}, []string{"FAILOVER_METRICS_LISTEN", "cannot share an address"}},
		{"both listeners on every address of one port", []string{"FAILOVER_LISTEN=0.0.0.0:9000", "FAILOVER_METRICS_LISTEN=[::]:9000"}, []string{"cannot share an address"}},
		{"negative values", []string{"FAILOVER_MAX_INFLIGHT=-1", "FAILOVER_IDLE_TIMEOUT=-1s", "FAILOVER_EJECT_AFTER=-2"}, []string{"FAILOVER_MAX_INFLIGHT", "FAILOVER_IDLE_TIMEOUT", "FAILOVER_EJECT_AFTER"}},
		{"backoff max below base", []string{"FAILOVER_BACKOFF_BASE=2s", "FAILOVER_BACKOFF_MAX=1s"}, []string{"FAILOVER_BACKOFF_MAX"}},
		{"target retries -1", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_RETRIES=-1"}, []string{`FAILOVER_TARGET_0_RETRIES="-1": must be >= 0`}},
		{"negative target retries", []string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_RETRIES=-3"}, []string{`FAILOVER_TARGET_0_RETRIES="-3": must be >= 0`}},
		{"zero weights for round-robin", []string{"FAILOVER_STRATEGY=round-robin", "FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_TARGET_0_WEIGHT=0"}, []string{"every weight is 0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.env, true)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a ConfigError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message lacks %q:\n%v", w, err)
				}
			}
		})
	}
	t.Run("all problems at once", func(t *testing.T) {
		_, err := Load([]string{"FAILOVER_CONNECT_TIMEOUT=5", "FAILOVER_STRATEGY=random", "FAILOVER_TARGET_0_URL=ftp://x", "FAILOVER_TARGET_1_URL=http://b/v1",
			"FAILOVER_TARGET_1_WEIGHT=heavy", "FAILOVER_TYPO=1"}, true)
		var ce *ConfigError
		if !errors.As(err, &ce) || len(ce.Problems) != 5 {
			t.Fatalf("want 5 problems, got %v", err)
		}
	})
}

func TestLoadListenAddresses(t *testing.T) {
	for _, tc := range []struct {
		name, listen, metrics string
	}{
		{"defaults", "127.0.0.1:4000", ":9464"},
		{"different ports on one host", "127.0.0.1:4000", "127.0.0.1:4001"},
		{"one port on two hosts", "127.0.0.1:9000", "10.0.0.1:9000"},
		{"any free port for both", "127.0.0.1:0", ":0"},
		{"the highest port", "127.0.0.1:65535", ":9464"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_LISTEN=" + tc.listen, "FAILOVER_METRICS_LISTEN=" + tc.metrics}, true)
			if err != nil {
				t.Errorf("listen %q, metrics %q: %v", tc.listen, tc.metrics, err)
			}
		})
	}
}

// Kubernetes injects these into every pod of a namespace with a Service named "failover".
func TestLoadIgnoresKubernetesServiceLinks(t *testing.T) {
	env := []string{"FAILOVER_TARGET_0_URL=https://api.example/v1",
		"FAILOVER_SERVICE_HOST=10.96.12.34", "FAILOVER_SERVICE_PORT=9464", "FAILOVER_SERVICE_PORT_METRICS=9464",
		"FAILOVER_SERVICE_PORT_HTTP_ALT=4000",
		"FAILOVER_PORT=tcp://10.96.12.34:9464", "FAILOVER_PORT_9464_TCP=tcp://10.96.12.34:9464",
		"FAILOVER_PORT_9464_TCP_PROTO=tcp", "FAILOVER_PORT_9464_TCP_PORT=9464", "FAILOVER_PORT_9464_TCP_ADDR=10.96.12.34",
		"FAILOVER_PORT_53_UDP=udp://10.96.12.34:53", "FAILOVER_PORT_53_UDP_ADDR=10.96.12.34",
		"FAILOVER_PORT_9_SCTP_PROTO=sctp"}
	if _, err := Load(env, true); err != nil {
		t.Fatal(err)
	}
}

// An entry written with ':' for '=' puts the key into what would be the header name; the
// message names the variable and the entry's position and nothing of the entry itself.
func TestLoadHeadersErrorHidesTheEntry(t *testing.T) {
	const key = "sk-test-not-a-key=="
	for _, tc := range []struct{ name, headers, want string }{
		{"colon for equals", "anthropic-version=2023-06-01;x-api-key:" + key, "entry 2: the header name has characters"},
		{"colon and space", "x-api-key: " + key, "entry 1: the header name has characters"},
		{"no equals sign", "anthropic-version=2023-06-01;;sk-test-not-a-key", "entry 3 is not Name=value"},
		{"line break in the value", "X-Key=sk-test-not-a-key\nX-Other: 1", "entry 1: the value has a line break"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]string{"FAILOVER_TARGET_0_URL=https://api.example/v1", "FAILOVER_TARGET_0_HEADERS=" + tc.headers}, true)
			if err == nil {
				t.Fatal("expected an error")
			}
			msg := err.Error()
			if !strings.Contains(msg, "FAILOVER_TARGET_0_HEADERS=<redacted>") || !strings.Contains(msg, tc.want) {
				t.Errorf("message lacks the variable or %q:\n%s", tc.want, msg)
			}
			for _, part := range []string{"sk-", "not-a-key", "x-api-key", "X-Key", "X-Other"} {
				if strings.Contains(msg, part) {
					t.Errorf("message shows %q of the entry:\n%s", part, msg)
				}
			}
		})
	}
}

// The drill uses no keys (README, Quick start), so a key file that is not mounted where it runs must not
// stop it; the normal start still reads every key file and fails on a missing one.
func TestLoadKeyFilesOnlyWhenTargetsAreRequired(t *testing.T) {
	missing := []string{"FAILOVER_TARGET_0_URL=https://api.example/v1", "FAILOVER_TARGET_0_API_KEY_FILE=/does/not/exist"}
	if _, err := Load(missing, false); err != nil {
		t.Errorf("without required targets a missing key file stops Load: %v", err)
	}
	if _, err := Load(missing, true); err == nil || !strings.Contains(err.Error(), "cannot read the key file") {
		t.Errorf("with required targets a missing key file gives %v", err)
	}
	file := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(file, []byte("sk-test-not-a-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{"FAILOVER_TARGET_0_URL=https://api.example/v1", "FAILOVER_TARGET_0_API_KEY_FILE=" + file}, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Targets[0].APIKey != "sk-test-not-a-key" {
		t.Errorf("the key file was not read: key %d bytes", len(c.Targets[0].APIKey))
	}
	// Mistakes that need no file are still reported to the drill.
	if _, err := Load(append(missing, "FAILOVER_TARGET_0_API_KEY=sk-test-not-a-key"), false); err == nil || !strings.Contains(err.Error(), "set one, not both") {
		t.Errorf("key and key file without required targets: %v", err)
	}
}

func rules(n int) []string {
	var env []string
	for i := 0; i < n; i++ {
		env = append(env, "FAILOVER_STOP_RULE_"+strconv.Itoa(i)+"_STATUSES=400")
	}
	return append(env, "FAILOVER_TARGET_0_URL=http://a/v1")
}

func TestNoSecretInErrorsOrDescribe(t *testing.T) {
	secrets := []string{"sk-live-SECRET1", "tok-SECRET2", "Bearer SECRET3", "hunter2"}
	env := []string{
		"FAILOVER_TARGET_0_URL=https://api.example.com/v1?key=SECRET-IN-QUERY&api-version=2024-10-21",
		"FAILOVER_TARGET_0_API_KEY=sk-live-SECRET1",
		"FAILOVER_INBOUND_TOKEN= tok-SECRET2",
		"FAILOVER_TARGET_0_HEADERS=Authorization=Bearer SECRET3;Host=x",
		"FAILOVER_TARGET_1_URL=https://u:hunter2@api.example.com/v1",
		"FAILOVER_TARGET_0_AUTH=none",
	}
	_, err := Load(env, true)
	if err == nil {
		t.Fatal("expected errors")
	}
	for _, s := range append(secrets, "SECRET-IN-QUERY") {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error message contains secret %q:\n%v", s, err)
		}
	}
	c, err := Load([]string{
		"FAILOVER_TARGET_0_URL=https://api.example.com/v1?key=SECRET-IN-QUERY&api-version=2024-10-21",
		"FAILOVER_TARGET_0_API_KEY=sk-live-SECRET1",
		"FAILOVER_INBOUND_TOKEN=tok-SECRET2",
		"FAILOVER_TARGET_0_HEADERS=X-Custom=Bearer SECRET3",
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Describe()
	for _, s := range append(secrets, "SECRET-IN-QUERY") {
		if strings.Contains(d, s) {
			t.Errorf("Describe shows secret %q:\n%s", s, d)
		}
	}
	if !strings.Contains(d, "api-version=2024-10-21") || !strings.Contains(d, "headers: X-Custom (values hidden)") {
		t.Errorf("Describe lost useful detail:\n%s", d)
	}
}

// A target URL without "https://" (or with a mistyped one) is rejected, and the message that
// says so must not quote the password or key in front of its '@'.
func TestURLErrorHidesCredentialsWithoutAHost(t *testing.T) {
	for _, raw := range []string{
		"user:hunter2@api.example.com/v1",
		"sk-live-hunter2@api.example.com/v1",
		"https:user:hunter2@api.example.com/v1",
		"http:/user:hunter2@api.example.com/v1",
		"user:hunter2@api.example.com/v1?key=hunter2",
	} {
		t.Run(raw, func(t *testing.T) {
			_, err := Load([]string{"FAILOVER_TARGET_0_URL=" + raw}, true)
			if err == nil || !strings.Contains(err.Error(), "FAILOVER_TARGET_0_URL=") || !strings.Contains(err.Error(), "api.example.com/v1") {
				t.Fatalf("want an error naming the variable and the host, got %v", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the message shows the credential:\n%v", err)
			}
		})
	}
}

func TestSecretVariables(t *testing.T) {
	got := SecretVariables([]string{"FAILOVER_TARGET_0_API_KEY=x", "FAILOVER_INBOUND_TOKEN=y", "FAILOVER_TARGET_3_HEADERS=a=b", "FAILOVER_LISTEN=z", "HOME=/",
		"FAILOVER_TARGET_1_URL=https://g.example/v1beta?key=k", "FAILOVER_TARGET_2_URL=https://api.example/v1"})
	if strings.Join(got, ",") != "FAILOVER_TARGET_0_API_KEY,FAILOVER_INBOUND_TOKEN,FAILOVER_TARGET_3_HEADERS,FAILOVER_TARGET_1_URL" {
		t.Fatalf("got %v", got)
	}
}

func TestSize(t *testing.T) {
	for in, want := range map[string]Size{"0": 0, "131072": 131072, "128KiB": 128 << 10, "32MiB": 32 << 20, "1GiB": 1 << 30, " 4 KiB ": 4 << 10} {
		var s Size
		if err := s.UnmarshalText([]byte(in)); err != nil || s != want {
			t.Errorf("%q: got %d, %v", in, s, err)
		}
	}
	for _, bad := range []string{"", "-1", "1.5MiB", "12KB", "MiB", "99999999999999999999"} {
		var s Size
		if err := s.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Two listener addresses that bind the same socket are refused by Load (so -check exits 2),
// however each host is written; the start would otherwise fail with "address already in use".
func TestLoadListenersThatCollide(t *testing.T) {
	for _, tc := range []struct {
		listen, metrics string
		collide         bool
	}{
		{"127.0.0.1:4000", "127.0.0.1:4000", true},
		{"127.0.0.1:4000", "localhost:4000", true},
		{"LOCALHOST:4000", "127.0.0.1:4000", true},
		{"[::1]:4000", "[0:0:0:0:0:0:0:1]:4000", true},
		{"127.0.0.1:4000", "[0::0]:4000", true},
		{"127.0.0.1:4000", ":4000", true},
		{"127.0.0.1:4000", "[::1]:4000", false},
		{"127.0.0.1:4000", "127.0.0.2:4000", false},
		{"localhost:4000", "localhost:4001", false},
		{"localhost:0", "127.0.0.1:0", false},
	} {
		t.Run(tc.listen+"/"+tc.metrics, func(t *testing.T) {
			_, err := Load([]string{"FAILOVER_TARGET_0_URL=http://a/v1", "FAILOVER_LISTEN=" + tc.listen, "FAILOVER_METRICS_LISTEN=" + tc.metrics}, true)
			if got := err != nil && strings.Contains(err.Error(), "cannot share an address"); got != tc.collide {
				t.Errorf("collision reported %v, want %v (err %v)", got, tc.collide, err)
			}
		})
	}
}

// Values that would silently disable a rule are refused: a sticky header name that no request
// header can have, a _PATHS prefix written with the _MODELS wildcard, and a bad _MODELS entry
// after a "*".
func TestLoadRejectsSilentNoOps(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string // "" = valid
	}{
		{"sticky header with a leading space", []string{"FAILOVER_STRATEGY=sticky", "FAILOVER_STICKY_HEADER= X-User"}, `FAILOVER_STICKY_HEADER=" X-User": not a header name`},
		{"sticky header with a trailing space", []string{"FAILOVER_STRATEGY=sticky", "FAILOVER_STICKY_HEADER=X-User "}, `FAILOVER_STICKY_HEADER="X-User ": not a header name`},
		{"sticky header with a colon", []string{"FAILOVER_STRATEGY=sticky", "FAILOVER_STICKY_HEADER=X-User:"}, "not a header name"},
		{"sticky header in lower case", []string{"FAILOVER_STRATEGY=sticky", "FAILOVER_STICKY_HEADER=x-user"}, ""},
		{"sticky header unused by another strategy", []string{"FAILOVER_STICKY_HEADER= X-User"}, ""},
		{"paths with a trailing wildcard", []string{"FAILOVER_TARGET_0_PATHS=/v1/chat/*"}, `FAILOVER_TARGET_0_PATHS="/v1/chat/*": "/v1/chat/*": a path prefix is a plain path`},
		{"paths with a query", []string{"FAILOVER_TARGET_0_PATHS=/v1/messages,/v1/chat?x=1"}, "a path prefix is a plain path"},
		{"paths with an empty entry", []string{"FAILOVER_TARGET_0_PATHS=/v1/chat,,/v1/messages"}, "starts with /v1/"},
		{"models: an empty entry after *", []string{"FAILOVER_TARGET_0_MODELS=*,,gpt-4o"}, "empty model name"},
		{"models: a bad wildcard after *", []string{"FAILOVER_TARGET_0_MODELS=*,gpt-*-mini"}, "only allowed at the end"},
		{"models: an empty entry before *", []string{"FAILOVER_TARGET_0_MODELS=gpt-4o,,*"}, "empty model name"},
		{"models: * with others", []string{"FAILOVER_TARGET_0_MODELS=gpt-4o, *"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(append([]string{"FAILOVER_TARGET_0_URL=http://a/v1"}, tc.env...), true)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("want valid, got %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("want an error with %q, got %v", tc.want, err)
			}
		})
	}
}

// A key variable that is set but empty is not "no key": an unset shell variable leaves
// FAILOVER_TARGET_0_API_KEY="$OPENAI_API_KEY" empty, and forwarding the client's credentials
// would send the SDK's placeholder upstream. Unset still means forward them.
func TestLoadEmptyKeyIsAnError(t *testing.T) {
	dir := t.TempDir()
	emptyFile := filepath.Join(dir, "empty")
	if err := os.WriteFile(emptyFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		env      []string
		required bool
		want     string // "" = valid, forwarding the client's credentials
	}{
		{"empty key is an error that says to unset it", []string{"FAILOVER_TARGET_0_API_KEY="}, true,
			"FAILOVER_TARGET_0_API_KEY: set but empty: unset it to forward the client's own credentials, or give it the key"},
		{"a blank key is empty too", []string{"FAILOVER_TARGET_0_API_KEY=  "}, true, "FAILOVER_TARGET_0_API_KEY: set but empty"},
		{"an empty key file variable is an error that says to unset it", []string{"FAILOVER_TARGET_0_API_KEY_FILE="}, true,
			"FAILOVER_TARGET_0_API_KEY_FILE: set but empty: unset it to forward the client's own credentials, or name the file that holds the key"},
		{"a key file that reads empty is an error that says to unset the variable", []string{"FAILOVER_TARGET_0_API_KEY_FILE=" + emptyFile}, true,
			"the key file is empty: write the key into it, or unset FAILOVER_TARGET_0_API_KEY_FILE to forward the client's own credentials"},
		{"the drill is told too", []string{"FAILOVER_TARGET_0_API_KEY="}, false, "FAILOVER_TARGET_0_API_KEY: set but empty"},
		{"unset forwards the client's credentials", nil, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(append([]string{"FAILOVER_TARGET_0_URL=https://api.example.com/v1"}, tc.env...), tc.required)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.want == "":
				if d := c.Describe(); !strings.Contains(d, "key=<client credentials forwarded>") {
					t.Errorf("Describe:\n%s", d)
				}
			case err == nil || !strings.Contains(err.Error(), tc.want):
				t.Errorf("want an error with %q, got %v", tc.want, err)
			case strings.Count(err.Error(), "\n  - ") != 1:
				t.Errorf("want one problem, got %v", err)
			}
		})
	}
}

// A listen address the system refuses is explained with what to do about it.
func TestListenProblemSaysWhatToDo(t *testing.T) {
	refused := func(errno syscall.Errno) error {
		return &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", errno)}
	}
	for _, tc := range []struct {
		name, addr string
		err        error
		want       string
	}{
		{"in use", "127.0.0.1:4000", refused(syscall.EADDRINUSE), "the address is in use: stop what listens there, or choose another port"},
		{"a privileged port", ":80", refused(syscall.EACCES), "not permitted: a port below 1024 needs privileges (root, or CAP_NET_BIND_SERVICE); choose a port from 1024 up"},
		{"refused otherwise", ":4000", refused(syscall.EACCES), "not permitted: bind: permission denied"},
		{"not this machine's address", "10.1.2.3:4000", refused(syscall.EADDRNOTAVAIL), "the host is not an address of this machine"},
		{"anything else", "nowhere.invalid:4000", errors.New("lookup nowhere.invalid: no such host"), "cannot listen: lookup nowhere.invalid: no such host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := listenProblem(tc.addr, tc.err); !strings.HasPrefix(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// An enumerated value that is a typo or a synonym of an accepted one gets a did-you-mean, as
// variable names do.
func TestLoadSuggestsEnumeratedValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  string
		want string // "" = the message has no suggestion
	}{
		{"strategy without its hyphen", "FAILOVER_STRATEGY=roundrobin", `FAILOVER_STRATEGY="roundrobin": must be one of failover, round-robin, sticky, least-latency (did you mean round-robin?)`},
		{"strategy with an underscore", "FAILOVER_STRATEGY=least_latency", "(did you mean least-latency?)"},
		{"strategy in another case", "FAILOVER_STRATEGY=Sticky", "(did you mean sticky?)"},
		{"strategy far from any", "FAILOVER_STRATEGY=random", ""},
		{"auth without its hyphen", "FAILOVER_TARGET_0_AUTH=apikey", `FAILOVER_TARGET_0_AUTH="apikey": must be one of bearer, x-api-key, api-key, none (did you mean api-key?)`},
		{"auth with underscores", "FAILOVER_TARGET_0_AUTH=x_api_key", "(did you mean x-api-key?)"},
		{"auth far from any", "FAILOVER_TARGET_0_AUTH=basic", ""},
		{"a resume mode misspelt", "FAILOVER_TARGET_0_RESUME=prefil", `FAILOVER_TARGET_0_RESUME="prefil": must be prefill, prefix, continue, instruct, auto, or empty (not resumable) (did you mean prefill?)`},
		{"resume as a boolean", "FAILOVER_RESUME=true", `FAILOVER_RESUME="true": must be on or off (did you mean on?)`},
		{"resume as yes", "FAILOVER_RESUME=yes", "(did you mean on?)"},
		{"resume as no", "FAILOVER_RESUME=no", "(did you mean off?)"},
		{"log level warning", "FAILOVER_LOG_LEVEL=warning", `FAILOVER_LOG_LEVEL="warning": must be debug, info, warn or error (did you mean warn?)`},
		{"log level misspelt", "FAILOVER_LOG_LEVEL=debgu", "(did you mean debug?)"},
		{"log level far from any", "FAILOVER_LOG_LEVEL=verbose", ""},
		{"log format misspelt", "FAILOVER_LOG_FORMAT=jsno", `FAILOVER_LOG_FORMAT="jsno": must be auto, text or json (did you mean json?)`},
		{"log format console", "FAILOVER_LOG_FORMAT=console", "(did you mean text?)"},
		{"a boolean misspelt", "FAILOVER_ENABLED=flase", `FAILOVER_ENABLED="flase": not a boolean: use true or false (did you mean false?)`},
		{"a boolean as on", "FAILOVER_RATELIMIT_AWARE=on", "(did you mean true?)"},
		{"a boolean as off", "FAILOVER_ALLOW_UNDERSCORE_HEADERS=off", "(did you mean false?)"},
		{"a boolean far from any", "FAILOVER_ENABLED=yes please", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]string{"FAILOVER_TARGET_0_URL=http://a/v1", tc.env}, true)
			if err == nil {
				t.Fatal("want an error")
			}
			switch msg := err.Error(); {
			case tc.want == "" && strings.Contains(msg, "did you mean"):
				t.Errorf("a suggestion where none is close:\n%s", msg)
			case tc.want != "" && !strings.Contains(msg, tc.want):
				t.Errorf("message lacks %q:\n%s", tc.want, msg)
			}
		})
	}
}

// -check shows both settings.
func TestCheckShowsRateLimitSettings(t *testing.T) {
	c, err := Load([]string{"FAILOVER_TARGET_0_URL=https://api.openai.com/v1", "FAILOVER_RATELIMIT_FLOOR=0.05"}, true)
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Describe(); !strings.Contains(d, "\nFAILOVER_RATELIMIT_AWARE=true  FAILOVER_RATELIMIT_FLOOR=0.05\n") {
		t.Errorf("-check:\n%s", d)
	}
}
