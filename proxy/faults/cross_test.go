package faults_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy/internal/config"
	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

var echoRe = regexp.MustCompile(`echo-[0-9]+-[0-9]+-`)

// Every request carries its id in its body and its header, and every target answers with the
// id it was sent: no request may see another's body upstream, nor another's answer, whatever
// the pooled exchanges, connections and buffers carried before. Shutdown comes in the middle.
// Not parallel: it counts the process's goroutines and open descriptors.
func TestAnswersNeverCrossRequests(t *testing.T) {
	base := quiesce(5 * time.Second)
	var upstreamProblems sync.Map
	responder := func(who string, share float64) func(*pt.Request) pt.Step {
		return func(r *pt.Request) pt.Step {
			id := r.Header["X-Request-Id"]
			if ids := echoRe.FindAllString(string(r.Body), -1); len(ids) != 1 || ids[0] != id+"-" {
				upstreamProblems.Store(id, fmt.Sprintf("%s got body ids %v", who, ids))
			}
			stream := bytes.Contains(r.Body, []byte(`"stream":true`))
			rng := rand.New(rand.NewPCG(uint64(r.N), 7))
			if rng.Float64() < share {
				switch rng.IntN(3) {
				case 0:
					return pt.Step{Fault: pt.FaultReset}
				case 1:
					return pt.JSON(503, pt.OpenAIError("overloaded", "server_error", ""))
				}
				if stream {
					s := pt.SSE(pt.ChatStream(0, id+"-", "more")...)
					return fault(s, pt.FaultResetAfter, pt.RawOffset(s, id+"-", 4))
				}
				return pt.Step{Fault: pt.FaultClose}
			}
			pad := strings.Repeat("p", rng.IntN(3)*6000) // past FAILOVER_MAX_RESPONSE_BYTES at times
			if stream {
				return pt.SSE(pt.ChatStream(time.Duration(rng.IntN(3))*time.Millisecond, id+"-", pad, "end")...)
			}
			return pt.JSON(200, pt.ChatCompletion(id+"-"+pad))
		}
	}
	u0, err := pt.NewResponder(responder("t0", 0.3))
	if err != nil {
		t.Fatal(err)
	}
	u1, err := pt.NewResponder(responder("t1", 0))
	if err != nil {
		t.Fatal(err)
	}
	u0.KeepRequests(false)
	u1.KeepRequests(false)
	defer u0.Close()
	defer u1.Close()
	cfg, err := config.Load(env(targets(u0.URL, u1.URL), timeouts, []string{
		"FAILOVER_SAME_TARGET_RETRIES=1", "FAILOVER_RETRY_BUDGET_RATIO=0", "FAILOVER_EJECT_AFTER=0",
		"FAILOVER_MAX_RESPONSE_BYTES=8KiB", "FAILOVER_TARGET_1_MODEL=gpt-4o-substitute",
	}), true)
	if err != nil {
		t.Fatal(err)
	}
	s := sidecar.StartWith(t, cfg, sidecar.Options{Log: io.Discard})

	transport := &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	var crossed, answered atomic.Int64
	var problems sync.Map
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("echo-%d-%d", w, n)
				stream := rng.IntN(2) == 0
				body := fmt.Sprintf(`{"model":"gpt-4o-mini","stream":%t,"messages":[{"role":"user","content":"%s- %s"}]}`,
					stream, id, strings.Repeat("q", rng.IntN(3)*20000)) // past the copied-body size at times
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(10) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(30))*time.Millisecond, cancel)
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/chat/completions", strings.NewReader(body))
				req.Header.Set("X-Request-Id", id)
				resp, err := client.Do(req)
				if err != nil {
					cancel()
					continue
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				cancel()
				if h := resp.Header.Get("X-Request-Id"); h != id {
					problems.Store(id, "X-Request-Id "+h)
				}
				for _, other := range echoRe.FindAllString(string(got), -1) {
					if other != id+"-" {
						crossed.Add(1)
						problems.Store(id, "answer carries "+other)
					}
				}
				if resp.StatusCode == 200 {
					answered.Add(1)
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	s.Srv.Shutdown(shutdownCtx) // with the load still running
	cancel()
	close(stop)
	wg.Wait()
	t.Logf("%d answered, %d crossed", answered.Load(), crossed.Load())
	for _, m := range []*sync.Map{&upstreamProblems, &problems} {
		m.Range(func(k, v any) bool {
			t.Errorf("%v: %v", k, v)
			return true
		})
	}
	if answered.Load() < 100 {
		t.Errorf("only %d answers", answered.Load())
	}
	transport.CloseIdleConnections()
	u0.Close()
	u1.Close()
	end := settle(base, 10, 5, 10*time.Second)
	if end.goroutines > base.goroutines+10 || end.fds > base.fds+5 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines %d (baseline %d), fds %d (baseline %d)\n%s", end.goroutines, base.goroutines, end.fds, base.fds,
			buf[:runtime.Stack(buf, true)])
	}
}
