package e2e_test

import (
	"bufio"
	"net/http"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// gaugeOf reads one unlabelled series from the metrics listener at maddr.
func gaugeOf(t *testing.T, maddr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s on /metrics", name)
	return 0
}

// Without GOMAXPROCS the sidecar runs on half the processors while few requests are in flight
// and on all of them while many are (docs/reliability.md, Performance); an explicit GOMAXPROCS is left as
// the operator set it.
func TestGOMAXPROCS(t *testing.T) {
	t.Parallel()
	up, err := pt.New(pt.Step{Status: 200, Body: pt.ChatCompletion("slow"), Delay: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	// The sidecar's runtime default is this process's: same machine, same limits, and go test
	// sets no GOMAXPROCS.
	all := runtime.GOMAXPROCS(0)
	low, high, says := max(1, all/2), all, `"gomaxprocs":"adaptive"`
	if all < 2 {
		low, says = all, `"gomaxprocs":"runtime default"` // nothing to halve
	}
	stop := func(t *testing.T, cmd *exec.Cmd) { // the log is read once the process is done with it
		t.Helper()
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("explicit", func(t *testing.T) {
		t.Parallel()
		cmd, logs, _, maddr := startSidecar(t, "FAILOVER_TARGET_0_URL="+up.URL, "FAILOVER_LOG_FORMAT=json", "GOMAXPROCS=3")
		if got := gaugeOf(t, maddr, "failover_gomaxprocs"); got != 3 {
			t.Fatalf("failover_gomaxprocs = %v with GOMAXPROCS=3", got)
		}
		stop(t, cmd)
		if !strings.Contains(logs.String(), `"gomaxprocs":"GOMAXPROCS"`) {
			t.Fatalf("the listening record does not say GOMAXPROCS was set:\n%s", logs.String())
		}
	})
	t.Run("adaptive", func(t *testing.T) {
		t.Parallel()
		cmd, logs, addr, maddr := startSidecar(t, "FAILOVER_TARGET_0_URL="+up.URL, "FAILOVER_LOG_FORMAT=json")
		if got := gaugeOf(t, maddr, "failover_gomaxprocs"); got != float64(low) {
			t.Fatalf("failover_gomaxprocs = %v at rest, want %d (half of %d)", got, low, all)
		}
		var wg sync.WaitGroup
		for range 40 { // in flight for 1.5 s each: well past the two samples at 32 that raise it
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := sidecar.Client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
				if err == nil {
					resp.Body.Close()
				}
			}()
		}
		answered := make(chan struct{})
		go func() { wg.Wait(); close(answered) }()
		// Raised while they are in flight: the gauge is read before asking whether they were all
		// answered (once raised, it stays up for seconds after the load).
		for loaded := gaugeOf(t, maddr, "failover_gomaxprocs"); loaded != float64(high); loaded = gaugeOf(t, maddr, "failover_gomaxprocs") {
			select {
			case <-answered:
				t.Fatalf("with 40 requests in flight failover_gomaxprocs stayed %v, want %d", loaded, high)
			case <-time.After(50 * time.Millisecond):
			}
		}
		<-answered
		deadline := time.Now().Add(10 * time.Second)
		for gaugeOf(t, maddr, "failover_gomaxprocs") != float64(low) {
			if time.Now().After(deadline) {
				t.Fatalf("failover_gomaxprocs did not go back to %d after the load", low)
			}
			time.Sleep(200 * time.Millisecond)
		}
		stop(t, cmd)
		if !strings.Contains(logs.String(), says) {
			t.Fatalf("the listening record does not say %s:\n%s", says, logs.String())
		}
	})
}
