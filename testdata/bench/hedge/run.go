package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// runConfig is the runner's: the sidecar, the FAILOVER_HEDGE_AFTER of each of its runs, the
// mock's distribution and the load.
type runConfig struct {
	bin     string
	configs []string // "off" leaves FAILOVER_HEDGE_AFTER unset
	env     []string // FAILOVER_NAME=value for every run
	dist    distribution
	seed    uint64
	load    loadConfig
}

// run measures the sidecar once per configuration, one after the other, against one mock, and
// prints the table.
func run(cfg runConfig) error {
	tmp, err := os.MkdirTemp("", "hedge-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if cfg.bin == "" {
		cfg.bin = filepath.Join(tmp, "failover")
		fmt.Fprintln(os.Stderr, "building the sidecar ...")
		build := exec.Command("go", "build", "-o", cfg.bin, ".")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build (run from the module's root, or give -bin): %w", err)
		}
	}
	m, err := startMock(cfg.dist, cfg.seed, [2]string{})
	if err != nil {
		return err
	}
	defer m.close()

	stop := interrupted()
	var rows []string
	for _, name := range cfg.configs {
		name = strings.TrimSpace(name)
		row, err := runOne(cfg, m, name, stop)
		if err != nil {
			return fmt.Errorf("FAILOVER_HEDGE_AFTER=%s: %w", name, err)
		}
		rows = append(rows, row)
	}
	fmt.Printf("\nmock: %s, two targets; %.0f requests/s for %s after a %s warm-up; time to first content at the client\n\n",
		cfg.dist, cfg.load.rate, cfg.load.duration, cfg.load.warmup)
	fmt.Println(tableHeader)
	for _, r := range rows {
		fmt.Println(r)
	}
	return nil
}

// runOne starts the sidecar with FAILOVER_HEDGE_AFTER=name (unset for "off"), runs the load
// through it, waits for the upstream streams of the measured requests to end, and stops it.
func runOne(cfg runConfig, m *mock, name string, stop <-chan os.Signal) (string, error) {
	var hedge []string
	if name != "off" {
		hedge = []string{"FAILOVER_HEDGE_AFTER=" + name}
	}
	sc, err := startSidecar(cfg.bin, m.addrs, append(hedge, cfg.env...))
	if err != nil {
		return "", err
	}
	defer sc.stop()
	fmt.Fprintf(os.Stderr, "FAILOVER_HEDGE_AFTER=%s: %.0f requests/s, %s warm-up, %s measured ...\n", name, cfg.load.rate, cfg.load.warmup, cfg.load.duration)

	load := cfg.load
	load.url, load.tag = "http://"+sc.listen+"/v1/chat/completions", name
	type result struct {
		res loadResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := runLoad(load)
		done <- result{res, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-stop:
		return "", errors.New("interrupted")
	case <-sc.exited:
		return "", fmt.Errorf("the sidecar exited during the run: %s", sc.stderr.String())
	}
	if r.err != nil {
		return "", r.err
	}
	c := m.of(name + "/measure")
	// A lost attempt's stream ends as soon as the sidecar closes it; wait for that, a little.
	for deadline := time.Now().Add(5 * time.Second); c.inflight.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	row := tableRow(name, r.res, c)
	fmt.Fprintln(os.Stderr, row)
	if r.res.firstErr != "" {
		fmt.Fprintf(os.Stderr, "  first error: %s\n", r.res.firstErr)
	}
	return row, nil
}

// sidecar is one running sidecar process.
type sidecar struct {
	cmd    *exec.Cmd
	listen string
	exited chan struct{} // closed when the process ended
	stderr *tail
}

// startSidecar runs bin with the two mock targets on free loopback ports, and returns once its
// /healthz answers. The runner's own FAILOVER_* variables are not passed on.
func startSidecar(bin string, targets [2]string, extra []string) (*sidecar, error) {
	listen, metrics := freePort(), freePort()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FAILOVER_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"FAILOVER_TARGET_0_URL=http://"+targets[0]+"/v1", "FAILOVER_TARGET_0_NAME=a",
		"FAILOVER_TARGET_1_URL=http://"+targets[1]+"/v1", "FAILOVER_TARGET_1_NAME=b",
		"FAILOVER_LISTEN="+listen, "FAILOVER_METRICS_LISTEN="+metrics,
		"FAILOVER_SHUTDOWN_TIMEOUT=1s", "FAILOVER_LOG_LEVEL=warn", "FAILOVER_LOG_FORMAT=json")
	env = append(env, extra...)
	sc := &sidecar{cmd: exec.Command(bin), listen: listen, exited: make(chan struct{}), stderr: &tail{max: 16 << 10}}
	sc.cmd.Env, sc.cmd.Stdout, sc.cmd.Stderr = env, io.Discard, sc.stderr
	sc.cmd.SysProcAttr = childAttr()
	if err := sc.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { sc.cmd.Wait(); close(sc.exited) }()
	if err := waitHealthy("http://"+metrics+"/healthz", sc.exited); err != nil {
		sc.stop()
		return nil, fmt.Errorf("%w (try: %s -check): %s", err, bin, sc.stderr.String())
	}
	return sc, nil
}

// stop asks the sidecar to end (it drains for FAILOVER_SHUTDOWN_TIMEOUT) and kills it if it
// has not after 10 s.
func (sc *sidecar) stop() {
	sc.cmd.Process.Signal(os.Interrupt) // an error: it ended already (or the system has no interrupt)
	select {
	case <-sc.exited:
	case <-time.After(10 * time.Second):
		sc.cmd.Process.Kill()
		<-sc.exited
	}
}

func waitHealthy(url string, exited <-chan struct{}) error {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		select {
		case <-exited:
			return errors.New("the sidecar exited at start")
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("the sidecar did not become healthy within 15s")
}

// freePort returns a loopback address with a port that was free a moment ago.
func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// tail keeps the last max bytes written to it. Safe for concurrent use.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
