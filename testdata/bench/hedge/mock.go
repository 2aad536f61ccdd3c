package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// distribution is the mock's time to first content: slowFrac of the answers after slow, the
// others after fast × a uniform factor in [1-jitter, 1+jitter].
type distribution struct {
	fast     time.Duration
	jitter   float64
	slow     time.Duration
	slowFrac float64
}

func (d distribution) String() string {
	return fmt.Sprintf("%.0f%% at %s ±%.0f%%, %.0f%% at %s", (1-d.slowFrac)*100, d.fast, d.jitter*100, d.slowFrac*100, d.slow)
}

// draw returns one time to first content, and whether it came from the tail.
func (d distribution) draw(r *rand.Rand) (time.Duration, bool) {
	if r.Float64() < d.slowFrac {
		return d.slow, true
	}
	f := 1 + d.jitter*(2*r.Float64()-1)
	return time.Duration(float64(d.fast) * f), false
}

// Chunks of the chat stream the mock answers with: the opening (the role, no content: the sidecar
// holds it), then after the drawn delay the content, the finish and [DONE].
const (
	streamHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n" +
		"Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
	roleEvent    = `data: {"id":"chatcmpl-hedge","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
	contentEvent = `data: {"id":"chatcmpl-hedge","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Hello there"},"finish_reason":null}]}` + "\n\n"
	finishEvent  = `data: {"id":"chatcmpl-hedge","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	doneEvent    = "data: [DONE]\n\n"
)

// chunk frames s as one HTTP/1.1 chunk.
func chunk(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }

var (
	opening = []byte(streamHead + chunk(roleEvent))
	rest    = []byte(chunk(contentEvent) + chunk(finishEvent) + chunk(doneEvent) + "0\r\n\r\n")
)

// phaseHeader tags a load generator's request with its run and phase ("off/measure"); the
// sidecar forwards it, and the mock counts the upstream requests of each tag apart.
const phaseHeader = "X-Bench-Phase"

// counts are the upstream requests of one tag.
type counts struct {
	requests atomic.Int64 // streams asked for, on either target
	byTarget [2]atomic.Int64
	slow     atomic.Int64 // drawn from the tail
	cut      atomic.Int64 // closed by the sidecar before their first content
	inflight atomic.Int64 // streams not yet ended
}

// mock is the upstream: two targets on loopback ports, each answering a chat stream whose
// first content comes after a time drawn from dist. Every stream is written by hand on the
// connection (fasthttp reads the request, then hands the connection over), so that a stream
// the sidecar cuts is seen at once: the read that waits on the connection returns. Each
// connection carries one stream. Safe for concurrent use.
type mock struct {
	dist  distribution
	addrs [2]string
	srvs  [2]*fasthttp.Server
	wg    sync.WaitGroup // streams being written

	rngMu sync.Mutex
	rng   *rand.Rand

	mu   sync.Mutex
	tags map[string]*counts
}

// startMock listens on two loopback ports (listen: "" for any free port) and serves until close.
func startMock(dist distribution, seed uint64, listen [2]string) (*mock, error) {
	m := &mock{dist: dist, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), tags: map[string]*counts{}}
	for i := range 2 {
		addr := listen[i]
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		ln, err := listenLoopback(addr)
		if err != nil {
			m.close()
			return nil, err
		}
		m.addrs[i] = ln.Addr().String()
		m.srvs[i] = &fasthttp.Server{Handler: m.handler(i), NoDefaultServerHeader: true, NoDefaultDate: true,
			KeepHijackedConns: true, Logger: quiet{}}
		go m.srvs[i].Serve(ln) // ends with close
	}
	return m, nil
}

// listenLoopback listens on addr, which must be a loopback address: this is load.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listen %q: want host:port", addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("listen %q: only loopback addresses (127.0.0.1, ::1, localhost)", addr)
	}
	return net.Listen("tcp", addr)
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// close stops accepting and waits for the streams being written (at most the slow delay).
func (m *mock) close() {
	for _, s := range m.srvs {
		if s != nil {
			s.Shutdown()
		}
	}
	m.wg.Wait()
}

// of returns the counts of a tag, created at first use.
func (m *mock) of(tag string) *counts {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.tags[tag]
	if c == nil {
		c = &counts{}
		m.tags[tag] = c
	}
	return c
}

func (m *mock) draw() (time.Duration, bool) {
	m.rngMu.Lock()
	defer m.rngMu.Unlock()
	return m.dist.draw(m.rng)
}

// handler serves target i: a streaming POST gets the stream; anything else (the sidecar's
// probe of a target it took out) a 400, which costs nothing.
func (m *mock) handler(i int) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !ctx.IsPost() || !bytes.Contains(ctx.PostBody(), []byte(`"stream":true`)) {
			ctx.SetStatusCode(fasthttp.StatusBadRequest)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"error":{"message":"the hedge mock serves streaming chat requests only","type":"invalid_request_error"}}`)
			return
		}
		c := m.of(string(ctx.Request.Header.Peek(phaseHeader)))
		c.requests.Add(1)
		c.byTarget[i].Add(1)
		c.inflight.Add(1)
		d, slow := m.draw()
		if slow {
			c.slow.Add(1)
		}
		conn := ctx.Conn()
		ctx.HijackSetNoResponse(true)
		m.wg.Add(1)
		ctx.Hijack(func(net.Conn) {
			defer m.wg.Done()
			defer c.inflight.Add(-1)
			if !play(conn, d) {
				c.cut.Add(1)
			}
		})
	}
}

// play writes the stream on c, its content after d, and closes c. It reports false when the
// peer closed the connection before the content was written.
func play(c net.Conn, d time.Duration) bool {
	defer c.Close()
	peerGone := make(chan struct{})
	go func() {
		// The request was read already: a read that returns means the peer closed.
		io.Copy(io.Discard, c)
		close(peerGone)
	}()
	if _, err := c.Write(opening); err != nil {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-peerGone:
		return false
	}
	_, err := c.Write(rest)
	return err == nil
}
