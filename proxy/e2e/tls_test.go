package e2e_test

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// Every real provider is an https target: the binary verifies the target's certificate against
// the system roots (here SSL_CERT_FILE, holding the loopback server's own certificate), keeps
// the TLS connection for the next request, streams through it, and a target whose TLS fails
// is transferred from with class tls.
func TestHTTPSTargets(t *testing.T) {
	t.Parallel()
	stream := pt.ChatStream(5*time.Millisecond, "Hello", " over", " TLS")
	var streamBytes strings.Builder
	for _, c := range stream {
		streamBytes.WriteString(c.Data)
	}
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, pt.ChatCompletion("Hello over TLS"))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range stream {
			time.Sleep(c.Delay)
			io.WriteString(w, c.Data)
			w.(http.Flusher).Flush()
		}
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.StartTLS()
	defer up.Close()
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	plain, err := pt.New() // speaks plain HTTP: a TLS handshake with it fails
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()

	_, _, addr, _ := startSidecar(t, "SSL_CERT_FILE="+roots, "FAILOVER_LOG_FORMAT=json", "FAILOVER_TARGET_0_URL="+up.URL+"/v1", "FAILOVER_TARGET_0_NAME=tls")
	base := "http://" + addr + "/v1/chat/completions"
	for i := range 3 {
		resp, err := sidecar.Client.Post(base, "application/json", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != pt.ChatCompletion("Hello over TLS") {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d TLS connections for three requests, want 1 (kept alive)", n)
	}
	req, _ := http.NewRequest("POST", base, strings.NewReader(`{"model":"m","stream":true}`))
	req.Header.Set("Accept", "text/event-stream")
	resp, err := sidecar.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(body) != streamBytes.String() {
		t.Fatalf("stream: %d %v %q", resp.StatusCode, err, body)
	}

	// A target whose TLS handshake fails is left for the next one.
	cmd2, logs2, addr2, _ := startSidecar(t, "SSL_CERT_FILE="+roots, "FAILOVER_LOG_FORMAT=json",
		"FAILOVER_TARGET_0_URL="+strings.Replace(plain.URL, "http://", "https://", 1),
		"FAILOVER_TARGET_1_URL="+up.URL+"/v1")
	resp, err = sidecar.Client.Post("http://"+addr2+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Failover-Attempts") != "2" {
		t.Fatalf("%d in %s attempts, want 200 in 2", resp.StatusCode, resp.Header.Get("X-Failover-Attempts"))
	}
	cmd2.Process.Signal(syscall.SIGTERM)
	if err := cmd2.Wait(); err != nil { // the log is read once the process has written it all
		t.Fatal(err)
	}
	var rec struct {
		Ledger []struct{ Class, Action string } `json:"ledger"`
	}
	for _, line := range strings.Split(logs2.String(), "\n") {
		if strings.Contains(line, `"msg":"request"`) {
			json.Unmarshal([]byte(line), &rec) // checked below
		}
	}
	if len(rec.Ledger) != 2 || rec.Ledger[0].Class != "tls" || rec.Ledger[0].Action != "transfer" {
		t.Fatalf("ledger %+v, want tls→transfer first\n%s", rec.Ledger, logs2.String())
	}
}
