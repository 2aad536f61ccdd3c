package e2e_test

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// At start each configuration warning is logged once, at warn level, as config_warning with
// the variable's name; a key's value never appears in it.
func TestStartLogsEachWarningOnce(t *testing.T) {
	t.Parallel()
	up, err := pt.New()
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	cmd, logs, _, _ := startSidecar(t, "FAILOVER_TARGET_0_URL="+up.URL, "FAILOVER_TARGET_0_API_KEY=sk-warned-not-logged",
		"FAILOVER_STICKY_HEADER=X-User", "FAILOVER_LOG_FORMAT=json")
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "sk-warned") {
		t.Errorf("a key was logged:\n%s", logs.String())
	}
	seen := map[string]int{}
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "config_warning" {
			continue
		}
		if rec["level"] != "WARN" {
			t.Errorf("level %v, want WARN: %s", rec["level"], line)
		}
		v, _ := rec["variable"].(string)
		if w, _ := rec["warning"].(string); !strings.HasPrefix(w, v) {
			t.Errorf("the warning does not start with its variable: %s", line)
		}
		seen[v]++
	}
	if len(seen) != 1 || seen["FAILOVER_STICKY_HEADER"] != 1 {
		t.Errorf("want FAILOVER_STICKY_HEADER warned once, got %v:\n%s", seen, logs.String())
	}
}
