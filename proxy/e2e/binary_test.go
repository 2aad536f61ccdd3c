package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

var binary string

// buildFlags are added to the binary's go build: the tests' own build tags (portable_test.go).
var buildFlags []string

func TestMain(m *testing.M) {
	flag.Parse()
	pt.RaiseParallel(16)
	dir, err := os.MkdirTemp("", "failover-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "failover")
	args := append(append([]string{"build"}, buildFlags...), "-o", binary, "../..")
	build := exec.Command("go", args...)
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBinary runs the binary to completion with env and args.
func runBinary(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestBadConfigurationExits2NamingEveryProblem(t *testing.T) {
	env := []string{
		"FAILOVER_TARGET_0_URL=ftp://example/v1",
		"FAILOVER_TARGET_0_API_KEY=sk-live-do-not-print-1",
		"FAILOVER_TARGET_2_URL=https://gap.example/v1",
		"FAILOVER_RETRY_ON_STATUS=5xx",
		"FAILOVER_CONNECT_TIMEOUT=5",
		"FAILOVER_INBOUND_TOKEN= padded-token-do-not-print-2",
		"FAILOVER_TARGET_0_HEADERS=Authorization=Bearer do-not-print-3;Host=x",
	}
	for _, args := range [][]string{nil, {"-check"}} {
		stdout, stderr, code := runBinary(t, env, args...)
		if code != 2 {
			t.Fatalf("%v: exit %d, want 2\n%s", args, code, stderr)
		}
		for _, want := range []string{"FAILOVER_TARGET_0_URL", "FAILOVER_TARGET_<i>: indices must be contiguous", "FAILOVER_RETRY_ON_STATUS: unknown variable",
			"did you mean FAILOVER_RETRY_ON_STATUSES", "FAILOVER_CONNECT_TIMEOUT", "FAILOVER_INBOUND_TOKEN", "FAILOVER_TARGET_0_HEADERS"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", args, want, stderr)
			}
		}
		for _, secret := range []string{"do-not-print"} {
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("%v: a secret was printed:\n%s%s", args, stdout, stderr)
			}
		}
	}
}

func TestCheckPrintsTheEffectivePolicy(t *testing.T) {
	stdout, stderr, code := runBinary(t, []string{"FAILOVER_LISTEN=127.0.0.1:0", "FAILOVER_METRICS_LISTEN=127.0.0.1:0", // -check binds them
		"FAILOVER_TARGET_0_URL=https://api.openai.com/v1", "FAILOVER_TARGET_0_API_KEY=sk-hidden-1",
		"FAILOVER_TARGET_1_URL=https://api.anthropic.com/v1", "FAILOVER_TARGET_1_AUTH=x-api-key", "FAILOVER_TARGET_1_API_KEY=sk-hidden-2",
		"FAILOVER_STOP_RULE_0_STATUSES=400", "FAILOVER_STOP_RULE_0_PATTERN=context_length"}, "-check")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"name=api.openai.com", "name=api.anthropic.com", "auth=x-api-key key=<set>", "FAILOVER_RETRY_ON_STATUSES=408,429,5xx",
		`FAILOVER_STOP_RULE_0: statuses=400 pattern="context_length"`, "configuration is valid"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "sk-hidden") {
		t.Errorf("a key was printed:\n%s", stdout)
	}
}

func TestDrill(t *testing.T) {
	t.Parallel()
	t.Run("the default policy", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := runBinary(t, nil, "drill")
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		for _, row := range []string{"primary down before headers", "429 with Retry-After", "503 then success", "in-stream error before content",
			"error after visible output", "invalid request (400)", "success rule on a 200", "empty stream", "quota running out", "every target failing", "client cancels",
			"cut stream resumed by instruction", "slow first token"} {
			if !strings.Contains(stdout, row) {
				t.Errorf("no row %q:\n%s", row, stdout)
			}
		}
		// Under the default policy the drills that adapt it show what they are there to show: a
		// resume by instruction after a refused prefill, and a hedge that beats a slow first token.
		for _, shown := range []string{"primary 200 interrupted→resumed, secondary 400→instruct, secondary 200→commit",
			"primary slow→lost, secondary 200→commit"} {
			if !strings.Contains(stdout, shown) {
				t.Errorf("no %q:\n%s", shown, stdout)
			}
		}
		for _, inv := range []string{"ok   no replay after commit", "ok   no attempt after the client left", "ok   budgets respected", "ok   one final answer per request", "ok   ledger complete"} {
			if !strings.Contains(stdout, inv) {
				t.Errorf("invariant line %q missing:\n%s", inv, stdout)
			}
		}
		// Written to a pipe, the table has no colour, and it reads in a 100-column terminal
		// (README, Quick start).
		for _, line := range strings.Split(stdout, "\n") {
			if strings.Contains(line, "\x1b") || utf8.RuneCountInString(line) > 100 {
				t.Errorf("a line with an escape sequence or wider than 100 columns: %q", line)
			}
		}
	})
	// The effective policy is used: with failover disabled, nothing transfers.
	t.Run("FAILOVER_ENABLED=false", func(t *testing.T) {
		t.Parallel()
		stdout, _, code := runBinary(t, []string{"FAILOVER_ENABLED=false"}, "drill")
		if code != 0 || !strings.Contains(stdout, "primary reset→stop") {
			t.Errorf("drill with FAILOVER_ENABLED=false: exit %d\n%s", code, stdout)
		}
	})
}

// The drill needs no keys (README, Quick start). With the deployment's env file, whose keys are in files
// mounted only where the sidecar runs, it still runs; the start itself still needs the files.
func TestDrillWithKeyFilesNotMounted(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "env", "openai-anthropic.env"))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	if !strings.Contains(string(b), "_API_KEY_FILE=/run/secrets/") {
		t.Fatal("the env file no longer reads its keys from files")
	}
	if stdout, stderr, code := runBinary(t, env, "drill"); code != 0 {
		t.Errorf("drill: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if _, stderr, code := runBinary(t, env, "-check"); code != 2 || !strings.Contains(stderr, "cannot read the key file") {
		t.Errorf("-check without the key files: exit %d\n%s", code, stderr)
	}
}

// -check (exit 2) refuses listener addresses that the start would refuse.
func TestCheckRejectsListenersThatCannotWork(t *testing.T) {
	for _, extra := range [][]string{
		{"FAILOVER_LISTEN=127.0.0.1:99999"},
		{"FAILOVER_LISTEN=localhost:abc"},
		{"FAILOVER_LISTEN=127.0.0.1:4999", "FAILOVER_METRICS_LISTEN=127.0.0.1:4999"},
		// localhost binds 127.0.0.1: the start would fail with "address already in use".
		{"FAILOVER_LISTEN=127.0.0.1:4999", "FAILOVER_METRICS_LISTEN=localhost:4999"},
	} {
		env := append([]string{"FAILOVER_TARGET_0_URL=https://api.example/v1"}, extra...)
		if _, stderr, code := runBinary(t, env, "-check"); code != 2 || !strings.Contains(stderr, "FAILOVER_LISTEN") {
			t.Errorf("%v: -check exit %d, want 2 naming FAILOVER_LISTEN:\n%s", extra, code, stderr)
		}
	}
}

// Kubernetes injects service-link variables into every pod of a namespace with a Service
// named "failover"; they are not typos of FAILOVER_* settings.
func TestCheckAcceptsKubernetesServiceLinks(t *testing.T) {
	_, stderr, code := runBinary(t, []string{"FAILOVER_TARGET_0_URL=https://api.example/v1",
		"FAILOVER_LISTEN=127.0.0.1:0", "FAILOVER_METRICS_LISTEN=127.0.0.1:0", // -check binds them
		"FAILOVER_SERVICE_HOST=10.96.12.34", "FAILOVER_SERVICE_PORT=9464", "FAILOVER_SERVICE_PORT_METRICS=9464",
		"FAILOVER_PORT=tcp://10.96.12.34:9464", "FAILOVER_PORT_9464_TCP=tcp://10.96.12.34:9464",
		"FAILOVER_PORT_9464_TCP_PROTO=tcp", "FAILOVER_PORT_9464_TCP_PORT=9464", "FAILOVER_PORT_9464_TCP_ADDR=10.96.12.34"}, "-check")
	if code != 0 {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
}

// The start-up error for a malformed _HEADERS entry shows no part of it.
func TestCheckHeadersErrorHidesTheKey(t *testing.T) {
	_, stderr, code := runBinary(t, []string{"FAILOVER_TARGET_0_URL=https://api.example/v1",
		"FAILOVER_TARGET_0_HEADERS=anthropic-version=2023-06-01;x-api-key: sk-test-not-a-key=="}, "-check")
	if code != 2 || !strings.Contains(stderr, "FAILOVER_TARGET_0_HEADERS") || !strings.Contains(stderr, "entry 2") {
		t.Errorf("exit %d, want 2 naming the variable and entry 2:\n%s", code, stderr)
	}
	if strings.Contains(stderr, "sk-test-not-a-key") {
		t.Errorf("the key is printed:\n%s", stderr)
	}
}

// listeningRe reads the addresses of the proxy and metrics listeners from the listening
// record, JSON ("proxy":"127.0.0.1:port") or text (proxy=127.0.0.1:port).
var listeningRe = regexp.MustCompile(`listening.*\bproxy"?[=:]"?(127\.0\.0\.1:[0-9]+).*\bmetrics"?[=:]"?(127\.0\.0\.1:[0-9]+)`)

// startSidecar starts the binary with env and its listeners on ports the system chooses
// (127.0.0.1:0), and waits until its metrics listener answers /healthz; it returns their
// addresses, read from the listening record. (A port found free, and closed for the binary to
// bind, can be taken meanwhile by any listener on the machine, whose /healthz would then answer
// for the sidecar.) The process is killed when the test ends; its standard error (the log) goes
// to the returned buffer.
func startSidecar(t *testing.T, env ...string) (cmd *exec.Cmd, logs *pt.SyncBuffer, addr, maddr string) {
	t.Helper()
	cmd = exec.Command(binary)
	cmd.Env = slices.Concat(env, []string{"FAILOVER_LISTEN=127.0.0.1:0", "FAILOVER_METRICS_LISTEN=127.0.0.1:0"})
	logs = &pt.SyncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := listeningRe.FindStringSubmatch(logs.String()); m != nil {
			addr, maddr = m[1], m[2]
			if resp, err := http.Get("http://" + maddr + "/healthz"); err == nil {
				resp.Body.Close()
				return cmd, logs, addr, maddr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar did not start:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSIGTERMLetsAStreamFinishAndExits0(t *testing.T) {
	t.Parallel()
	up, err := pt.New(pt.SSE(pt.ChatStream(200*time.Millisecond, "one", "two", "three", "four", "five")...))
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	cmd, logs, addr, maddr := startSidecar(t, "FAILOVER_TARGET_0_URL="+up.URL, "FAILOVER_LOG_FORMAT=json", "FAILOVER_SHUTDOWN_TIMEOUT=10s")
	if _, stderr, code := runBinary(t, []string{"FAILOVER_METRICS_LISTEN=" + maddr}, "healthcheck"); code != 0 {
		t.Fatalf("healthcheck of a running sidecar: exit %d %s", code, stderr)
	}
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := sidecar.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(rest), pt.Done) {
		t.Fatalf("the stream did not complete: %v %q", err, rest)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-ctx.Done():
		t.Fatal("the sidecar did not exit after the stream finished")
	}
	if _, stderr, code := runBinary(t, []string{"FAILOVER_METRICS_LISTEN=" + maddr}, "healthcheck"); code != 1 {
		t.Errorf("healthcheck of a stopped sidecar: exit %d %s", code, stderr)
	}
	if !strings.Contains(logs.String(), `"msg":"shutting_down"`) || !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Errorf("logs:\n%s", logs.String())
	}
	// New connections are refused once shutdown began.
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("still accepting after exit")
	}
}

func TestTextLogFormat(t *testing.T) {
	t.Parallel()
	up, err := pt.New()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	cmd, logs, addr, _ := startSidecar(t, "FAILOVER_TARGET_0_URL="+up.URL, "FAILOVER_LOG_FORMAT=text")
	if resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`)); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if strings.Contains(out, `"msg":`) || !strings.Contains(out, "INF listening") || !strings.Contains(out, "INF request") || !strings.Contains(out, "outcome=ok") {
		t.Fatalf("not the text log:\n%s", out)
	}
}

// A second SIGTERM ends the drain at once, even without a shutdown timeout: the stream still
// running gets the interrupted event and the process exits 0.
func TestSecondSignalEndsTheDrain(t *testing.T) {
	t.Parallel()
	up, err := pt.New(pt.SSE(pt.ChatStream(time.Second, "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")...))
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	cmd, logs, addr, _ := startSidecar(t, "FAILOVER_TARGET_0_URL="+up.URL, "FAILOVER_LOG_FORMAT=json", "FAILOVER_SHUTDOWN_TIMEOUT=0")
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := sidecar.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	done := make(chan error, 1)
	cmd.Process.Signal(syscall.SIGTERM)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("exited during the drain (%v) although the stream still runs", err)
	case <-time.After(300 * time.Millisecond):
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a second SIGTERM did not end the drain")
	}
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), "stream_interrupted") {
		t.Errorf("the stream did not end with the interrupted event: %q", rest)
	}
	if !strings.Contains(logs.String(), `"msg":"shutting_down_now"`) {
		t.Errorf("log:\n%s", logs.String())
	}
}
