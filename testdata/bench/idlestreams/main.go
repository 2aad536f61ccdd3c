//go:build linux

// Command idlestreams measures the sidecar's resident memory per idle committed stream: it
// starts an upstream on loopback that opens every chat stream (the role chunk and one content
// chunk) and then stays silent, starts the sidecar binary pointed at it with a long idle
// timeout, opens N streaming requests through it, waits until every one has committed (the
// client received the content), and reads the sidecar's VmRSS from /proc/PID/status.
//
//	go run ./testdata/bench/idlestreams            # 10,000 streams, builds the binary
//	go run ./testdata/bench/idlestreams -n 2000 -bin /tmp/failover
//
// Linux only (it reads /proc). It talks to 127.0.0.1 only, and ends everything it started.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", 10000, "concurrent idle streams")
	bin := flag.String("bin", "", "sidecar binary (default: go build the module at the current directory)")
	parallel := flag.Int("parallel", 128, "streams opened at the same time")
	settle := flag.Duration("settle", 3*time.Second, "wait after the last stream committed before reading memory")
	serveUpstream := flag.Bool("upstream", false, "internal: be the upstream (a child process), until stdin closes")
	flag.Parse()
	if *serveUpstream {
		if err := runUpstream(); err != nil {
			fmt.Fprintln(os.Stderr, "idlestreams upstream:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*n, *bin, *parallel, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "idlestreams:", err)
		os.Exit(1)
	}
}

// The opening of a chat stream and its first content: enough for the sidecar to commit.
const (
	roleEvent    = `data: {"id":"chatcmpl-idle","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
	contentEvent = `data: {"id":"chatcmpl-idle","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}` + "\n\n"
	requestBody  = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Write a long story."}]}`
)

func run(n int, bin string, parallel int, settle time.Duration) error {
	// Each stream holds two descriptors in the sidecar (client and upstream) and one here and
	// one in the upstream process. The sidecar inherits this process's limit.
	limit, err := raiseFileLimit(uint64(2*n + 64))
	if err != nil {
		return err
	}
	if fit := int(limit-64) / 2; n > fit {
		fmt.Printf("NOTE: the open-file limit here is %d (hard) and cannot be raised, so at most %d streams fit in "+
			"the sidecar (two descriptors each): measuring %d streams instead of %d\n", limit, fit, fit, n)
		n = fit
	}
	tmp, err := os.MkdirTemp("", "idlestreams-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if bin == "" {
		bin = filepath.Join(tmp, "failover")
		fmt.Println("building the sidecar ...")
		build := exec.Command("go", "build", "-o", bin, ".")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build (run from the module's root): %w", err)
		}
	}

	upAddr, stopUpstream, err := startUpstreamProcess()
	if err != nil {
		return err
	}
	defer stopUpstream()

	listen, metrics := freePort(), freePort()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"FAILOVER_TARGET_0_URL=http://"+upAddr+"/v1",
		"FAILOVER_TARGET_0_NAME=idle",
		"FAILOVER_LISTEN="+listen,
		"FAILOVER_METRICS_LISTEN="+metrics,
		"FAILOVER_IDLE_TIMEOUT=1h",
		"FAILOVER_FIRST_BYTE_TIMEOUT=5m",
		"FAILOVER_SHUTDOWN_TIMEOUT=1s",
		"FAILOVER_LOG_LEVEL=warn",
		"FAILOVER_LOG_FORMAT=json",
	)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM) // it may be gone already
		waitOrKill(cmd, 10*time.Second)
	}()
	pid := cmd.Process.Pid
	if err := waitReady("http://" + metrics + "/healthz"); err != nil {
		return err
	}

	// A few complete requests first, so the baseline includes what every request path
	// warms (pools, metric series, buffers) and the delta is the streams' own.
	for range 20 {
		if err := oneShot(listen); err != nil {
			return fmt.Errorf("warm-up request: %w", err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	baseRSS, err := rssKiB(pid)
	if err != nil {
		return err
	}
	baseHeap := scrape("http://"+metrics+"/metrics", "go_memstats_heap_inuse_bytes")
	baseStack := scrape("http://"+metrics+"/metrics", "go_memstats_stack_inuse_bytes")
	fmt.Printf("sidecar pid %d: %d KiB resident before the streams\n", pid, baseRSS)

	fmt.Printf("opening %d streams (%d at a time) ...\n", n, parallel)
	start := time.Now()
	conns := make([]net.Conn, n)
	var opened atomic.Int64
	var firstErr error
	var errOnce sync.Once
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := openStream(listen)
			if err != nil {
				errOnce.Do(func() { firstErr = fmt.Errorf("stream %d: %w", i, err) })
				return
			}
			conns[i] = c
			opened.Add(1)
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if firstErr != nil {
		return fmt.Errorf("%d of %d streams committed; first error: %w", opened.Load(), n, firstErr)
	}
	fmt.Printf("all %d streams committed in %s\n", n, time.Since(start).Round(time.Millisecond))
	time.Sleep(settle)

	rss, err := rssKiB(pid)
	if err != nil {
		return err
	}
	heap := scrape("http://"+metrics+"/metrics", "go_memstats_heap_inuse_bytes")
	stack := scrape("http://"+metrics+"/metrics", "go_memstats_stack_inuse_bytes")
	goroutines := scrape("http://"+metrics+"/metrics", "go_goroutines")
	perStream := float64(rss-baseRSS) / float64(n)
	fmt.Printf("sidecar resident memory: %d KiB with %d idle committed streams (%d KiB before)\n", rss, n, baseRSS)
	fmt.Printf("RESULT idle_streams=%d rss_kib=%d base_rss_kib=%d rss_per_stream_kib=%.1f heap_inuse_per_stream_kib=%.1f stack_inuse_per_stream_kib=%.1f goroutines=%.0f\n",
		n, rss, baseRSS, perStream, (heap-baseHeap)/1024/float64(n), (stack-baseStack)/1024/float64(n), goroutines)
	if perStream < 20 {
		fmt.Printf("target (< 20 KiB per idle committed stream): met\n")
	} else {
		fmt.Printf("target (< 20 KiB per idle committed stream): NOT met\n")
	}
	return nil
}

// raiseFileLimit lifts RLIMIT_NOFILE to want, raising the hard limit too where that is
// allowed (root with CAP_SYS_RESOURCE), else to the hard limit; it returns the limit in force.
// Child processes (the sidecar, the upstream) inherit it.
func raiseFileLimit(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	if lim.Max < want {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}); err == nil {
			return want, nil
		}
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("raising the open-file limit to %d: %w", lim.Cur, err)
	}
	return lim.Cur, nil
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startUpstreamProcess runs this program again as the upstream (its descriptors then do not
// count against this process's limit) and returns its address and how to stop it.
func startUpstreamProcess() (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self, "-upstream")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		stdin.Close() // the upstream ends when its stdin closes
		waitOrKill(cmd, 10*time.Second)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("the upstream process did not start: %w", err)
	}
	return strings.TrimSpace(line), stop, nil
}

// runUpstream is the upstream process: it prints its address, serves until stdin closes.
func runUpstream() error {
	up, err := startUpstream()
	if err != nil {
		return err
	}
	fmt.Println(up.addr)
	io.Copy(io.Discard, os.Stdin) // EOF: the parent is done
	up.close()
	return nil
}

// upstream answers every request with an SSE stream's opening and first content, then holds
// the connection silently until the peer closes it.
type upstream struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	cs   map[net.Conn]struct{}
}

func startUpstream() (*upstream, error) {
	if _, err := raiseFileLimit(1 << 20); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{addr: ln.Addr().String(), ln: ln, cs: map[net.Conn]struct{}{}}
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
	opening := []byte(head + chunk(roleEvent) + chunk(contentEvent))
	healthy := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.cs[c] = struct{}{}
			u.mu.Unlock()
			u.wg.Add(1)
			go u.serve(c, opening, healthy)
		}
	}()
	return u, nil
}

func chunk(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }

func (u *upstream) serve(c net.Conn, opening, healthy []byte) {
	defer u.wg.Done()
	defer func() {
		c.Close()
		u.mu.Lock()
		delete(u.cs, c)
		u.mu.Unlock()
	}()
	br := bufio.NewReader(c)
	for {
		length, err := readRequestHead(br)
		if err != nil {
			return
		}
		body := make([]byte, length)
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			if _, err := c.Write(healthy); err != nil {
				return
			}
			continue
		}
		if _, err := c.Write(opening); err != nil {
			return
		}
		io.Copy(io.Discard, c) // silent until the sidecar closes
		return
	}
}

// readRequestHead reads one request's header block and returns its Content-Length.
func readRequestHead(br *bufio.Reader) (int, error) {
	length := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return 0, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return length, nil
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "Content-Length") {
			length, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
}

func (u *upstream) close() {
	u.ln.Close()
	u.mu.Lock()
	for c := range u.cs {
		c.Close()
	}
	u.mu.Unlock()
	u.wg.Wait()
}

func waitReady(url string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("the sidecar did not become healthy within 10s")
}

func request(addr string, body string) string {
	return "POST /v1/chat/completions HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\n" +
		"Authorization: Bearer sk-bench-not-a-key\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// oneShot sends one non-streaming request and reads its answer.
func oneShot(addr string) error {
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// openStream sends a streaming request and returns the connection once the content event
// arrived: the stream is committed and idle.
func openStream(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(c, request(addr, requestBody)); err != nil {
		c.Close()
		return nil, err
	}
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(got, []byte(`"content":"Hello"`)) {
		m, err := c.Read(buf)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("before the content arrived: %w (got %q)", err, got)
		}
		got = append(got, buf[:m]...)
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
		c.Close()
		return nil, fmt.Errorf("answer %q", got)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// rssKiB reads VmRSS of a process.
func rssKiB(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// scrape reads one unlabelled series from the sidecar's /metrics (0 when absent).
func scrape(url, name string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

// waitOrKill waits for a child asked to end, and kills it if it has not after d.
func waitOrKill(cmd *exec.Cmd, d time.Duration) {
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() // ended on purpose
	select {
	case <-done:
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
	}
}
