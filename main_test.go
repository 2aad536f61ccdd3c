package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

func TestSecretsLeaveTheProcessEnvironment(t *testing.T) {
	secrets := []string{"FAILOVER_TARGET_0_API_KEY=sk-test-removed-0001", "FAILOVER_TARGET_1_API_KEY=sk-test-removed-0002",
		"FAILOVER_INBOUND_TOKEN=inbound-test-removed-0003", "FAILOVER_TARGET_1_HEADERS=X-Org=org-test-removed-0004"}
	kept := []string{"FAILOVER_TARGET_0_URL=http://127.0.0.1:1/v1", "FAILOVER_TARGET_1_URL=http://127.0.0.1:2/v1"}
	anyPort := []string{"FAILOVER_LISTEN=127.0.0.1:0", "FAILOVER_METRICS_LISTEN=127.0.0.1:0"} // -check binds them
	tests := []struct {
		name     string
		args     []string
		extra    []string
		wantCode int
	}{
		{"after -check of a valid configuration", []string{"-check"}, anyPort, 0},
		{"after a configuration that does not load", []string{"-check"}, append([]string{"FAILOVER_RETRY_ON_STATUS=5xx"}, anyPort...), 2},
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
	environ := []string{"FAILOVER_TARGET_0_URL=http://127.0.0.1:1/v1", "FAILOVER_LISTEN=127.0.0.1:0", "FAILOVER_METRICS_LISTEN=127.0.0.1:0"}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-check", "drill"}, 2},
		{[]string{"drill", "check"}, 2},
		{[]string{"check", "--check"}, 0}, // the same mode twice
		{[]string{"serve", "-check"}, 2},
		{[]string{"drill", "serve"}, 2},
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

// `failover targets` prints the running sidecar's target table for a person, from the metrics
// listener FAILOVER_METRICS_LISTEN names, and exits 1 when nothing answers there.
func TestTargetsPrintsTheTable(t *testing.T) {
	down := sidecar.Upstream(t, pt.JSON(503, pt.OpenAIError("busy", "server_error", "")))
	limited := sidecar.Upstream(t, pt.JSON(200, pt.ChatCompletion("hi"), "x-ratelimit-limit-requests: 500",
		"x-ratelimit-remaining-requests: 0", "x-ratelimit-reset-requests: 1m"))
	s := sidecar.Start(t, sidecar.Env(sidecar.Targets(down.URL, limited.URL), []string{"FAILOVER_EJECT_AFTER=1",
		"FAILOVER_TARGET_0_API_KEY=sk-targets-not-printed"})...)
	if r := s.Post("/chat/completions", `{"model":"m","messages":[]}`); r.Status != 200 {
		t.Fatalf("status %d", r.Status)
	}
	listen := "FAILOVER_METRICS_LISTEN=" + strings.TrimPrefix(s.Metrics, "http://")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"targets"}, []string{listen}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TARGET") {
		t.Fatalf("want a header and one line per target:\n%s", out)
	}
	for i, want := range []*regexp.Regexp{
		// The failure that ejected it, and its answer's latency: not the 5s least-latency charges.
		regexp.MustCompile(`^t0 +ejected +(9\.\d|10)s +1 +1 +server_error \S+ ago +[\d.]+(µs|ms) +-$`),
		regexp.MustCompile(`^t1 +ratelimited +(59|1m0)\S* +0 +0 +- +\S+ +requests 0/500 full in (59|1m0)\S*$`),
	} {
		if !want.MatchString(lines[i+1]) {
			t.Errorf("line %d %q does not match %s", i+1, lines[i+1], want)
		}
	}
	if strings.Contains(out, "sk-targets") {
		t.Errorf("a key was printed:\n%s", out)
	}
}

// `failover targets` with no sidecar to answer says, in words, which address it asked, which
// variable sets it and what to do, and exits 1.
func TestTargetsWithoutASidecar(t *testing.T) {
	refused := pt.RefusedAddr()
	_, port, _ := net.SplitHostPort(refused)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // never accepts: connects, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for _, tc := range []struct {
		name   string
		listen string
		want   []string
	}{
		{"nothing listens", refused,
			[]string{"failover: targets: no sidecar answers on " + refused + " (", "refused", "FAILOVER_METRICS_LISTEN=" + refused + ".", "Start the sidecar"}},
		{"an address on every interface", ":" + port,
			[]string{"no sidecar answers on 127.0.0.1:" + port + " (", "FAILOVER_METRICS_LISTEN=:" + port + " (every interface: asked on loopback)"}},
		{"a sidecar that does not answer", silent.Addr().String(),
			[]string{"no sidecar answered on " + silent.Addr().String() + " within 2s", "FAILOVER_METRICS_LISTEN=" + silent.Addr().String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"targets"}, []string{"FAILOVER_METRICS_LISTEN=" + tc.listen}, &stdout, &stderr)
			checkUnreachable(t, code, stderr.String(), tc.want)
		})
	}
	// Unset, the variable's default is named. (Asked on a refused port: :9464 may be in use here.)
	_, err = http.Get("http://" + refused)
	checkUnreachable(t, 1, "failover: targets: "+unreachable(nil, err)+"\n",
		[]string{"on 127.0.0.1:9464 (", "FAILOVER_METRICS_LISTEN (not set here, so the default :9464)"})
}

func checkUnreachable(t *testing.T, code int, stderr string, want []string) {
	t.Helper()
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("no %q in:\n%s", w, stderr)
		}
	}
	if strings.Contains(stderr, "dial tcp") {
		t.Errorf("the bare network error:\n%s", stderr)
	}
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if n := utf8.RuneCountInString(line); n > 100 {
			t.Errorf("a line of %d columns: %q", n, line)
		}
	}
}

// `failover version` (and -version, --version) prints the version, the revision and the Go
// version on one line.
func TestVersionSaysWhichBuild(t *testing.T) {
	for _, arg := range []string{"version", "-version", "--version"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{arg}, nil, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s", arg, code, stderr.String())
		}
		if want := regexp.MustCompile(`^failover \S+, revision \S+, ` + regexp.QuoteMeta(runtime.Version()) + "\n$"); !want.MatchString(stdout.String()) {
			t.Errorf("%s: %q does not match %s", arg, stdout.String(), want)
		}
	}
}

// A binary built without VCS information (the Dockerfile's: its build context has no .git)
// reports the version and revision given with -ldflags -X rather than (devel).
func TestVersionFallsBackToLinkerFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "failover")
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags", "-X main.version=v9.8.7-test -X main.revision=0123abcd", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "failover v9.8.7-test, revision 0123abcd, " + runtime.Version() + "\n"; string(out) != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

// -check prints each warning after the policy and before its verdict, and the exit stays 0.
func TestCheckPrintsWarnings(t *testing.T) {
	listen := []string{"FAILOVER_LISTEN=127.0.0.1:0", "FAILOVER_METRICS_LISTEN=127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		url  string
		want string // the warning line; "" = none
	}{
		{"a provider host without its base path", "https://api.groq.com/v1",
			`# warning: FAILOVER_TARGET_0_URL="https://api.groq.com/v1": the base URL for Groq is https://api.groq.com/openai/v1`},
		{"nothing to warn about", "https://api.groq.com/openai/v1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run([]string{"-check"}, append([]string{"FAILOVER_TARGET_0_URL=" + tc.url}, listen...), &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			out := stdout.String()
			policy, warning, valid := strings.Index(out, "\n# policy\n"), strings.Index(out, "\n# warning: "), strings.Index(out, "\n# configuration is valid\n")
			switch {
			case tc.want == "" && warning >= 0:
				t.Errorf("a warning where none was due:\n%s", out)
			case tc.want != "" && (!strings.Contains(out, "\n"+tc.want) || !(policy < warning && warning < valid)):
				t.Errorf("want %q after the policy and before the verdict:\n%s", tc.want, out)
			}
		})
	}
}

// -check binds both listen addresses, reports one in use (with any other problem, exit 2), and
// leaves them free.
func TestCheckTriesTheListenAddresses(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	busy := held.Addr().String()
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	for _, tc := range []struct {
		name            string
		listen, metrics string
		extra           []string
		want            []string // in stderr; none = valid
	}{
		{"a proxy address in use is an error", busy, free(), nil,
			[]string{`FAILOVER_LISTEN="` + busy + `": the address is in use: stop what listens there, or choose another port`}},
		{"a metrics address in use is an error", free(), busy, nil,
			[]string{`FAILOVER_METRICS_LISTEN="` + busy + `": the address is in use`}},
		{"with the other problems", busy, free(), []string{"FAILOVER_STRATEGY=random"},
			[]string{`FAILOVER_LISTEN="` + busy + `": the address is in use`, `FAILOVER_STRATEGY="random"`}},
		{"free addresses are valid", free(), free(), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			environ := append([]string{"FAILOVER_TARGET_0_URL=https://api.example.com/v1", "FAILOVER_LISTEN=" + tc.listen,
				"FAILOVER_METRICS_LISTEN=" + tc.metrics}, tc.extra...)
			var stdout, stderr bytes.Buffer
			code := run([]string{"-check"}, environ, &stdout, &stderr)
			if want := map[bool]int{true: 0, false: 2}[tc.want == nil]; code != want {
				t.Fatalf("exit %d, want %d\n%s", code, want, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			for _, addr := range []string{tc.listen, tc.metrics} {
				if addr == busy {
					continue
				}
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					t.Errorf("-check left %s bound: %v", addr, err)
					continue
				}
				ln.Close()
			}
		})
	}
}

// failover -h lists every command, one line each, and says where the configuration reference is.
func TestUsageListsEveryCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-h"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, cmd := range []string{"[serve]", "-check", "drill", "targets", "healthcheck", "version"} {
		if n := strings.Count(out, "\n  failover "+cmd+" "); n != 1 {
			t.Errorf("%d lines for failover %s:\n%s", n, cmd, out)
		}
	}
	if !strings.Contains(out, "docs/configuration.md") {
		t.Errorf("the configuration reference is not named:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 100 {
			t.Errorf("longer than 100 columns: %q", line)
		}
	}
}
