package e2e_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

func TestDebugLevelLogsEveryAttempt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		level        string
		wantAttempts int
	}{
		{"debug", 3},
		{"info", 0},
	}
	for _, tc := range tests {
		t.Run("FAILOVER_LOG_LEVEL="+tc.level, func(t *testing.T) {
			t.Parallel()
			a, err := pt.New(pt.JSON(503, pt.OpenAIError("The server is overloaded", "server_error", "")))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := pt.New()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			cmd, logs, addr, _ := startSidecar(t, "FAILOVER_TARGET_0_URL="+a.URL, "FAILOVER_TARGET_0_NAME=t0", "FAILOVER_TARGET_1_URL="+b.URL,
				"FAILOVER_TARGET_1_NAME=t1", "FAILOVER_LOG_FORMAT=json", "FAILOVER_LOG_LEVEL="+tc.level)
			resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			// With the defaults, the 503 is retried once on t0 before the transfer to t1.
			if resp.StatusCode != 200 || resp.Header.Get("X-Failover-Attempts") != "3" {
				t.Fatalf("status %d, attempts %q", resp.StatusCode, resp.Header.Get("X-Failover-Attempts"))
			}
			cmd.Process.Signal(syscall.SIGTERM)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("exit: %v\n%s", err, logs.String())
			}
			var attempts []map[string]any
			requests := 0
			sc := bufio.NewScanner(strings.NewReader(logs.String()))
			for sc.Scan() {
				var rec map[string]any
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
					t.Fatalf("log line is not JSON: %s", sc.Text())
				}
				switch rec["msg"] {
				case "attempt":
					attempts = append(attempts, rec)
				case "request":
					requests++
				}
			}
			if requests != 1 || len(attempts) != tc.wantAttempts {
				t.Fatalf("%d request records and %d attempt records at %s, want 1 and %d", requests, len(attempts), tc.level, tc.wantAttempts)
			}
			want := []struct{ target, phase, action string }{{"t0", "before_content", "retry"}, {"t0", "before_content", "transfer"}, {"t1", "committed", "commit"}}
			for i, rec := range attempts {
				if rec["target"] != want[i].target || rec["phase"] != want[i].phase || rec["action"] != want[i].action || rec["attempt"] != float64(i+1) {
					t.Errorf("attempt record %d: %v, want target %s, phase %s, action %s", i+1, rec, want[i].target, want[i].phase, want[i].action)
				}
			}
		})
	}
}
