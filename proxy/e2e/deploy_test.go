package e2e_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy/internal/config"
)

// The deployment examples in testdata/deploy and testdata/env are read line by line (no YAML
// library): they are small, and the checks are about what an operator copies from them.

const deployDir = "../../testdata/deploy"

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

func indentOf(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

func isBlankOrComment(line string) bool {
	s := strings.TrimSpace(line)
	return s == "" || strings.HasPrefix(s, "#")
}

// children returns the lines nested under lines[i] (more indented than it), comments and blank
// lines included.
func children(lines []string, i int) []string {
	var out []string
	for _, l := range lines[i+1:] {
		if !isBlankOrComment(l) && indentOf(l) <= indentOf(lines[i]) {
			break
		}
		out = append(out, l)
	}
	return out
}

// index returns the index of the first line matching re, or -1.
func index(lines []string, re string) int {
	rx := regexp.MustCompile(re)
	for i, l := range lines {
		if rx.MatchString(l) {
			return i
		}
	}
	return -1
}

// find is index for a line that must be there.
func find(t *testing.T, lines []string, re string) int {
	t.Helper()
	i := index(lines, re)
	if i < 0 {
		t.Fatalf("no line matches %s", re)
	}
	return i
}

// scalar is a YAML scalar without its trailing comment and quotes.
func scalar(s string) string {
	if i := strings.Index(s, " #"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimSpace(s)
	if uq, err := strconv.Unquote(s); err == nil {
		return uq
	}
	return s
}

// field returns the scalar of the first "name: value" line in lines.
func field(t *testing.T, lines []string, name string) string {
	t.Helper()
	i := find(t, lines, `^\s*(- )?`+regexp.QuoteMeta(name)+`:`)
	_, v, _ := strings.Cut(lines[i], name+":")
	return scalar(v)
}

// failoverNames lists every FAILOVER_* name a file mentions, comments included: a misspelt
// variable in an example is copied as it is.
func failoverNames(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range regexp.MustCompile(`FAILOVER_[A-Z0-9_]*[A-Z0-9](_?<)?`).FindAllString(string(b), -1) {
		if !strings.HasSuffix(n, "<") { // a pattern such as FAILOVER_TARGET_<i>_URL
			names = append(names, n)
		}
	}
	return names
}

// withKeyFiles replaces every _API_KEY_FILE path with a file holding a fake key, so that the
// configuration can be loaded here.
func withKeyFiles(t *testing.T, env map[string]string) []string {
	dir := t.TempDir()
	var out []string
	for k, v := range env {
		if strings.HasSuffix(k, "_API_KEY_FILE") {
			v = filepath.Join(dir, k)
			if err := os.WriteFile(v, []byte("sk-test-from-file\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, k+"="+v)
	}
	return out
}

func seconds(t *testing.T, what, v string) float64 {
	t.Helper()
	if n, err := strconv.Atoi(v); err == nil {
		return float64(n)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %q is neither seconds nor a duration", what, v)
	}
	return d.Seconds()
}

func TestDeployFilesNameOnlyKnownVariables(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	envFiles, _ := filepath.Glob("../../testdata/env/*.env")
	files = append(files, envFiles...)
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	for _, f := range files {
		for _, name := range failoverNames(t, f) {
			_, err := config.Load([]string{name + "="}, false)
			var ce *config.ConfigError
			if !errors.As(err, &ce) {
				continue
			}
			for _, p := range ce.Problems {
				if strings.HasPrefix(p, name+": unknown variable") || strings.HasPrefix(p, name+": the index") || strings.HasPrefix(p, name+": at most") {
					t.Errorf("%s names %s: %s", filepath.Base(f), name, p)
				}
			}
		}
	}
}

func TestKubernetesManifest(t *testing.T) {
	lines := readLines(t, filepath.Join(deployDir, "kubernetes.yaml"))
	container := children(lines, find(t, lines, `^\s*- name: failover\s*$`))

	// The sidecar's environment: every FAILOVER_* entry, with its value or where it comes from.
	env := map[string]string{}
	entry := regexp.MustCompile(`^\s*- name: (FAILOVER_[A-Z0-9_]+)\s*$`)
	for i, l := range container {
		m := entry.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name, body := m[1], strings.Join(children(container, i), "\n")
		fromSecret := strings.Contains(body, "valueFrom:") && strings.Contains(body, "secretKeyRef:")
		secret := strings.HasSuffix(name, "_API_KEY") || name == "FAILOVER_INBOUND_TOKEN"
		switch {
		case secret && !fromSecret:
			t.Errorf("%s is not read from a Secret through secretKeyRef", name)
		case secret:
			env[name] = "sk-test-from-secret"
		case fromSecret:
			t.Errorf("%s comes from a Secret but is not a secret variable", name)
		default:
			env[name] = field(t, children(container, i), "value")
		}
	}
	if len(env) < 5 {
		t.Fatalf("found only %v in the failover container", env)
	}
	if _, err := config.Load(withKeyFiles(t, env), true); err != nil {
		t.Errorf("the manifest's configuration does not load: %v", err)
	}

	// Probes on the metrics port 9464: /healthz for liveness, /readyz for readiness.
	metricsPort := ""
	for i, l := range container {
		if regexp.MustCompile(`^\s*- name: metrics\s*$`).MatchString(l) {
			metricsPort = field(t, children(container, i), "containerPort")
		}
	}
	if metricsPort != "9464" || !strings.HasSuffix(env["FAILOVER_METRICS_LISTEN"], ":9464") {
		t.Errorf("metrics port %q, FAILOVER_METRICS_LISTEN %q: want 9464 for both", metricsPort, env["FAILOVER_METRICS_LISTEN"])
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		p := children(container, find(t, container, `^\s*`+probe+`:`))
		gotPath, port := field(t, p, "path"), field(t, p, "port")
		if gotPath != path || (port != "metrics" && port != "9464") {
			t.Errorf("%s asks %s on port %s, want %s on 9464", probe, gotPath, port, path)
		}
	}

	// Service links off: a Service named "failover" would otherwise put FAILOVER_SERVICE_HOST,
	// FAILOVER_PORT and the like into the sidecar's environment.
	if v := field(t, lines, "enableServiceLinks"); v != "false" {
		t.Errorf("enableServiceLinks: %q, want false in the pod spec", v)
	}

	// The kubelet's grace period covers the preStop sleep and then the whole drain.
	grace := seconds(t, "terminationGracePeriodSeconds", field(t, lines, "terminationGracePeriodSeconds"))
	preStop := 0.0
	if i := index(container, `^\s*preStop:`); i >= 0 {
		preStop = seconds(t, "preStop sleep", field(t, children(container, i), "seconds"))
	}
	drain := seconds(t, "FAILOVER_SHUTDOWN_TIMEOUT", env["FAILOVER_SHUTDOWN_TIMEOUT"])
	if drain == 0 || grace <= preStop+drain {
		t.Errorf("terminationGracePeriodSeconds %v must exceed the preStop sleep (%v s) plus FAILOVER_SHUTDOWN_TIMEOUT (%v s)", grace, preStop, drain)
	}
}

func TestComposeFile(t *testing.T) {
	lines := readLines(t, filepath.Join(deployDir, "compose.yaml"))
	service := children(lines, find(t, lines, `^  failover:\s*$`))

	// The sidecar's environment: env_file, then environment (which wins).
	env := map[string]string{}
	envFile := field(t, service, "env_file")
	for _, l := range readLines(t, filepath.Join(deployDir, envFile)) {
		if k, v, ok := strings.Cut(l, "="); ok && !isBlankOrComment(l) {
			env[k] = v
		}
	}
	for _, l := range children(service, find(t, service, `^\s*environment:\s*$`)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && !isBlankOrComment(l) {
			env[k] = scalar(v)
		}
	}
	var declared []string
	for _, l := range children(service, find(t, service, `^\s*secrets:\s*$`)) {
		if !isBlankOrComment(l) {
			declared = append(declared, scalar(strings.TrimPrefix(strings.TrimSpace(l), "- ")))
		}
	}
	keyFiles := 0
	for k, v := range env {
		if strings.HasSuffix(k, "_API_KEY") || k == "FAILOVER_INBOUND_TOKEN" {
			t.Errorf("%s is set inline; keys belong in secrets (_API_KEY_FILE)", k)
		}
		if strings.HasSuffix(k, "_API_KEY_FILE") {
			keyFiles++
			name, ok := strings.CutPrefix(v, "/run/secrets/")
			if !ok || !slices.Contains(declared, name) {
				t.Errorf("%s=%s is not one of the service's secrets %v", k, v, declared)
			}
		}
	}
	if keyFiles == 0 {
		t.Error("no target reads its key from a secret file")
	}
	if _, err := config.Load(withKeyFiles(t, env), true); err != nil {
		t.Errorf("the compose configuration does not load: %v", err)
	}

	// The health check asks /healthz through the binary, on the metrics port 9464, which is
	// published for Prometheus.
	if hc := field(t, children(service, find(t, service, `^\s*healthcheck:`)), "test"); !strings.Contains(hc, `"healthcheck"`) {
		t.Errorf("healthcheck test %s does not run `failover healthcheck`", hc)
	}
	if !strings.HasSuffix(env["FAILOVER_METRICS_LISTEN"], ":9464") {
		t.Errorf("FAILOVER_METRICS_LISTEN %q, want port 9464", env["FAILOVER_METRICS_LISTEN"])
	}
	if ports := strings.Join(children(service, find(t, service, `^\s*ports:\s*$`)), "\n"); !strings.Contains(ports, ":9464:9464") {
		t.Errorf("the metrics port is not published:\n%s", ports)
	}

	// Docker waits stop_grace_period after SIGTERM before SIGKILL: longer than the drain.
	grace := seconds(t, "stop_grace_period", field(t, service, "stop_grace_period"))
	drain := seconds(t, "FAILOVER_SHUTDOWN_TIMEOUT", env["FAILOVER_SHUTDOWN_TIMEOUT"])
	if drain == 0 || grace <= drain {
		t.Errorf("stop_grace_period %v s must exceed FAILOVER_SHUTDOWN_TIMEOUT %v s", grace, drain)
	}
}

// The compose file's header says what to run from the repository root: the secret files it
// writes there are the ones the file mounts (compose resolves the file's paths from its own
// directory), the -f path is this file, and secrets/ is kept out of git and of the image's
// build context.
func TestComposeRunsFromTheRepositoryRoot(t *testing.T) {
	path := filepath.Join(deployDir, "compose.yaml")
	lines := readLines(t, path)

	var header []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "#") {
			break
		}
		header = append(header, l)
	}
	commands := strings.Join(header, "\n")
	if !strings.Contains(commands, "from the repository root") {
		t.Error("the header does not say where to run its commands")
	}
	fileFlag := regexp.MustCompile(`docker compose -f (\S+)`).FindStringSubmatch(commands)
	if fileFlag == nil {
		t.Fatal("the header has no docker compose -f command")
	}
	if filepath.Clean(filepath.Join(repoRoot, fileFlag[1])) != filepath.Clean(path) {
		t.Errorf("docker compose -f %s, from the repository root, is not %s", fileFlag[1], path)
	}

	// The build context is the repository root, where the Dockerfile is.
	service := children(lines, find(t, lines, `^  failover:\s*$`))
	if ctx := filepath.Join(deployDir, field(t, service, "build")); filepath.Clean(ctx) != filepath.Clean(repoRoot) {
		t.Errorf("build: %s is not the repository root", field(t, service, "build"))
	}

	secrets := children(lines, find(t, lines, `^secrets:\s*$`))
	files := 0
	for i, l := range secrets {
		m := regexp.MustCompile(`^  ([a-z0-9-]+):\s*$`).FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name, file := m[1], field(t, children(secrets, i), "file")
		files++
		fromRoot, err := filepath.Rel(repoRoot, filepath.Join(deployDir, file))
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join("secrets", name); fromRoot != want {
			t.Errorf("secret %s: file %s is %s from the repository root, want %s", name, file, fromRoot, want)
		}
		if !strings.Contains(commands, "> "+filepath.ToSlash(fromRoot)+"\n") {
			t.Errorf("secret %s: the header does not write %s", name, fromRoot)
		}
	}
	if files == 0 {
		t.Fatal("no secret files")
	}

	for file, want := range map[string]string{".gitignore": "/secrets/", ".dockerignore": "secrets"} {
		if !slices.Contains(readLines(t, filepath.Join(repoRoot, file)), want) {
			t.Errorf("%s does not list %s", file, want)
		}
	}
}

// The image built without build args reports the version under development: the Dockerfile's
// default VERSION is a release after the last one CHANGELOG.md lists, marked -dev. A release
// that adds its section to the changelog without moving the default fails here.
func TestDockerfileDefaultVersionFollowsTheChangelog(t *testing.T) {
	docker, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ARG VERSION="(\d+)\.(\d+)\.(\d+)-dev"$`).FindSubmatch(docker)
	if m == nil {
		t.Fatal(`the Dockerfile has no ARG VERSION="X.Y.Z-dev" default`)
	}
	changelog, err := os.ReadFile(filepath.Join(repoRoot, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	r := regexp.MustCompile(`(?m)^## \[(\d+)\.(\d+)\.(\d+)\]`).FindSubmatch(changelog)
	if r == nil {
		t.Fatal("CHANGELOG.md lists no release")
	}
	num := func(b []byte) int { n, _ := strconv.Atoi(string(b)); return n }
	dev := [3]int{num(m[1]), num(m[2]), num(m[3])}
	last := [3]int{num(r[1]), num(r[2]), num(r[3])}
	if !(dev[0] > last[0] || dev[0] == last[0] && (dev[1] > last[1] || dev[1] == last[1] && dev[2] > last[2])) {
		t.Errorf("the Dockerfile's default VERSION %d.%d.%d-dev is not after the last release in CHANGELOG.md, %d.%d.%d", dev[0], dev[1], dev[2], last[0], last[1], last[2])
	}
}
