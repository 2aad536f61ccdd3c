package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// The binary says which build it is the same way everywhere: `failover version`, the -check
// header, the listening record and the failover_build_info gauge.
func TestTheBuildIsNamedEverywhere(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runBinary(t, nil, "version")
	m := regexp.MustCompile(`^failover (\S+), revision (\S+), (go\S+)\n$`).FindStringSubmatch(stdout)
	if code != 0 || m == nil {
		t.Fatalf("failover version: exit %d, %q %q", code, stdout, stderr)
	}
	version, revision, goversion := m[1], m[2], m[3]

	stdout, stderr, code = runBinary(t, []string{"FAILOVER_TARGET_0_URL=https://api.openai.com/v1",
		"FAILOVER_LISTEN=127.0.0.1:0", "FAILOVER_METRICS_LISTEN=127.0.0.1:0"}, "-check")
	if first, _, _ := strings.Cut(stdout, "\n"); code != 0 || first != "# "+strings.TrimSuffix(m[0], "\n") {
		t.Errorf("-check: exit %d, first line %q, want %q\n%s", code, first, "# "+m[0], stderr)
	}

	up, err := pt.New()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	cmd, logs, _, maddr := startSidecar(t, "FAILOVER_TARGET_0_URL="+up.URL, "FAILOVER_LOG_FORMAT=json")
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("failover_build_info{version=%q,revision=%q,goversion=%q} 1\n", version, revision, goversion); !strings.Contains(string(page), want) {
		t.Errorf("/metrics lacks %q", want)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "listening" {
			continue
		}
		if rec["version"] != version || rec["revision"] != revision || rec["goversion"] != goversion {
			t.Errorf("the listening record says %v, %v, %v; want %s, %s, %s", rec["version"], rec["revision"], rec["goversion"], version, revision, goversion)
		}
		return
	}
	t.Fatalf("no listening record:\n%s", logs.String())
}
