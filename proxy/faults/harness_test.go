package faults_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// Short names for the shared harness.
var (
	start   = sidecar.Start
	targets = sidecar.Targets
	env     = sidecar.Env
)

func upstream(t testing.TB, script ...pt.Step) *pt.Upstream { return sidecar.Upstream(t, script...) }

// Request bodies per family, as SDKs send them.
const (
	chatBody            = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}]}`
	chatStreamBody      = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello"}]}`
	messagesStreamBody  = `{"model":"claude-test","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Say hello"}]}`
	responsesStreamBody = `{"model":"gpt-4o-mini","stream":true,"input":"Say hello"}`
	imageBody           = `{"model":"gpt-image-1","prompt":"a lighthouse","size":"1024x1024"}`
)

// timeouts are the short timeouts every fault test runs with: long enough for a loaded CI
// machine running -race, short enough that a stall costs well under a second.
var timeouts = []string{
	"FAILOVER_CONNECT_TIMEOUT=400ms", // also the silent-close threshold: a close sooner than this after the send is a reset
	"FAILOVER_FIRST_BYTE_TIMEOUT=500ms",
	"FAILOVER_IDLE_TIMEOUT=300ms",
	"FAILOVER_ATTEMPT_TIMEOUT=1s",
	"FAILOVER_BACKOFF_BASE=10ms",
	"FAILOVER_BACKOFF_MAX=20ms",
	"FAILOVER_RETRY_AFTER_MAX=5s",
}

// concurrency is how many rows of a table test run at once. The tests marked t.Parallel run
// at -parallel's default (GOMAXPROCS) at a time: with these short timeouts, sixteen at once
// made loopback connects miss FAILOVER_CONNECT_TIMEOUT under -race on a busy two-core machine.
const concurrency = 8

// runConcurrently runs play for each row as a subtest, concurrency at a time.
func runConcurrently[R any](t *testing.T, rows []R, name func(R) string, play func(*testing.T, R)) {
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for _, r := range rows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(name(r), func(t *testing.T) { play(t, r) })
		}()
	}
	wg.Wait()
}

// post sends a JSON body to path (relative to /v1) like Sidecar.Post, but returns the error
// of a request that got no response at all instead of failing the test.
func post(s *sidecar.Sidecar, path, body string, headers ...string) (sidecar.Response, error) {
	req, err := http.NewRequest("POST", s.URL+path, strings.NewReader(body))
	if err != nil {
		return sidecar.Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	resp, err := sidecar.Client.Do(req)
	if err != nil {
		return sidecar.Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return sidecar.Response{Status: resp.StatusCode, Header: resp.Header, Body: b, Err: err}, nil
}

// attemptsOf returns the ledger entries of a request record.
func attemptsOf(t testing.TB, rec map[string]any) []map[string]any {
	t.Helper()
	raw, ok := rec["ledger"].([]any)
	if !ok {
		t.Fatalf("record without a ledger: %v", rec)
	}
	out := make([]map[string]any, 0, len(raw))
	for _, a := range raw {
		out = append(out, a.(map[string]any))
	}
	return out
}

// rowName names a matrix or client-leaves row: family/mode/name.
func rowName(fam family, name string) string {
	mode := "non-streaming"
	if fam.stream {
		mode = "streaming"
	}
	return fmt.Sprintf("%s/%s/%s", fam.name, mode, name)
}

// onlyRecord waits for the request's one ledger record and fails unless there is exactly one.
func onlyRecord(t testing.TB, s *sidecar.Sidecar) map[string]any {
	t.Helper()
	s.WaitLedger(1)
	time.Sleep(20 * time.Millisecond) // a second record, if any, would be written by now
	if recs := s.Ledger(); len(recs) != 1 {
		t.Fatalf("%d ledger records, want exactly 1:\n%s", len(recs), s.Log.String())
	}
	return s.Ledger()[0]
}

// waitLedger waits up to d until n request records were written.
func waitLedger(s *sidecar.Sidecar, n int, d time.Duration) []map[string]any {
	deadline := time.Now().Add(d)
	for {
		recs := s.Ledger()
		if len(recs) >= n || time.Now().After(deadline) {
			return recs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ledgerLine renders a record's attempts for failure messages.
func ledgerLine(rec map[string]any) string {
	b, _ := json.Marshal(rec["ledger"])
	return fmt.Sprintf("outcome=%v status=%v ledger=%s", rec["outcome"], rec["status"], b)
}

// interruptedTail returns where the sidecar's final interrupted-stream event starts in a
// client's body (-1 when there is none): the sidecar writes a blank line first, then the
// family's error event, with the code stream_interrupted.
func interruptedTail(body []byte, family string) int {
	marker := []byte("\n\ndata: {\"error\":{")
	switch family {
	case "messages":
		marker = []byte("\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"")
	case "responses":
		marker = []byte("\n\nevent: error\ndata: {\"type\":\"error\",\"code\":\"stream_interrupted\"")
	}
	i := bytes.LastIndex(body, marker)
	if i < 0 || !bytes.Contains(body[i:], []byte(`"stream_interrupted"`)) {
		return -1
	}
	return i
}

// isErrorDocument reports whether b is a JSON error an SDK raises on: a top-level "error"
// object (OpenAI shape) or "type":"error" (Anthropic shape).
func isErrorDocument(b []byte) bool {
	var doc struct {
		Type  string          `json:"type"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return false
	}
	return len(doc.Error) > 0 && string(doc.Error) != "null" || doc.Type == "error"
}

func joinChunks(chunks []pt.Chunk) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString(c.Data)
	}
	return b.String()
}
