// Package proxytest provides a scripted fake LLM provider for tests and the drill: a real
// fasthttp server on 127.0.0.1:0 that answers each call with the next step of a script
// (status, headers, body, SSE chunks, delays) or a fault produced on the real socket
// (refused port, connect stall, reset, stall, garbage, truncated body, trickle), and records
// what it received. Nothing is mocked: the sidecar under test talks TCP to it.
package proxytest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Fault is what goes wrong on the socket for one step.
type Fault int

const (
	FaultNone          Fault = iota
	FaultReset               // reset the connection before any byte of the response
	FaultClose               // close the connection (FIN) before any byte of the response
	FaultResetAfter          // send FaultBytes bytes of the raw response, then reset
	FaultStall               // never answer; hold the connection until the peer closes it
	FaultStallAfter          // send FaultBytes bytes of the raw response, then hold the connection silently
	FaultGarbage             // answer with bytes that are not HTTP, then close
	FaultTruncate            // send the chunks, then close without the final zero-length chunk
	FaultTrickle             // send the raw response one byte at a time, ChunkDelay apart
	FaultCloseAfter          // send FaultBytes bytes of the raw response, then close (FIN): a body cut short
	FaultGarbageAfter        // send FaultBytes bytes of the raw response, then bytes that are not HTTP, then close
	FaultTruncateReset       // send the chunks, then reset the connection instead of the final zero-length chunk
)

// Step is one scripted answer.
type Step struct {
	Status int      // default 200
	Header []string // "Name: value" lines
	Body   string   // a body sent with Content-Length
	// Chunks, when set, are sent with chunked encoding, each written and flushed on its
	// own after its Delay (an SSE stream is a list of chunks).
	Chunks     []Chunk
	Delay      time.Duration // before anything is sent
	Fault      Fault
	FaultBytes int           // for the Fault*After faults: bytes of the raw response first
	ChunkDelay time.Duration // for FaultTrickle
}

// Chunk is one piece of a chunked body.
type Chunk struct {
	Data  string
	Delay time.Duration // before this chunk
	// Raw: Data is written as it is, without the chunk's framing around it: a piece of the
	// framing itself (a chunk-size line cut short, the last chunk arriving in two parts).
	Raw bool
}

// Request is what the upstream received on one call.
type Request struct {
	N        int // 1-based call number
	Method   string
	URI      string // request URI as sent (path and query)
	Host     string
	Header   map[string]string // canonical names; the last value wins
	Body     []byte
	Received time.Time
}

// Upstream is one fake provider. Safe for concurrent use.
type Upstream struct {
	// URL is the base URL a target uses: http://127.0.0.1:<port>/v1.
	URL string

	ln      net.Listener
	srv     *fasthttp.Server
	mu      sync.Mutex
	script  []Step
	respond func(*Request) Step // when set, chooses every step instead of the script
	base    int                 // calls before the current script
	reqs    []Request
	forget  bool // received requests are not kept (a long soak)
	calls   atomic.Int64
	// closedAt records when the peer closed a connection the upstream was still answering on
	// (a stalled or streaming step): how the sidecar's "close the upstream at once" is seen.
	closed chan time.Time
	wg     sync.WaitGroup
}

// New starts an upstream answering with script (the last step repeats; an empty script
// answers 200 with a small chat completion).
func New(script ...Step) (*Upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &Upstream{ln: ln, script: script, closed: make(chan time.Time, 64)}
	u.URL = "http://" + ln.Addr().String() + "/v1"
	// Hijacked connections are kept: play owns the raw socket until it closes it.
	// Providers take header blocks far larger than fasthttp's 4 KiB default: so does this one,
	// so the sidecar's own 16 KiB limit is what a test sees. Bodies up to the sidecar's default
	// limit (32 MiB; OpenAI takes 25 MB of audio) are taken, and a multipart body is recorded
	// as it arrived, not parsed into a form and encoded again.
	u.srv = &fasthttp.Server{Handler: u.handle, NoDefaultServerHeader: true, NoDefaultDate: true, Logger: quiet{}, KeepHijackedConns: true,
		ReadBufferSize: 64 << 10, MaxRequestBodySize: 32 << 20, DisablePreParseMultipartForm: true}
	go u.srv.Serve(ln) // ends at Close
	return u, nil
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// Close stops the upstream and every connection it holds.
func (u *Upstream) Close() {
	u.srv.Shutdown() // test helper
	u.ln.Close()
	u.wg.Wait()
}

// Script replaces the script: the next call gets its first step (recorded requests stay).
func (u *Upstream) Script(steps ...Step) {
	u.mu.Lock()
	u.script = steps
	u.base = int(u.calls.Load())
	u.mu.Unlock()
}

// NewResponder starts an upstream whose every answer is chosen by respond from the request
// it received (respond runs on the upstream's goroutines, concurrently: it must be safe for
// that). Faults and delays work as in a script.
func NewResponder(respond func(*Request) Step) (*Upstream, error) {
	u, err := New()
	if err != nil {
		return nil, err
	}
	u.Respond(respond)
	return u, nil
}

// Respond makes respond choose the answer to every following call, instead of the script.
func (u *Upstream) Respond(respond func(*Request) Step) {
	u.mu.Lock()
	u.respond = respond
	u.mu.Unlock()
}

// KeepRequests(false) stops keeping what arrives (Requests then lists only what came
// before), so a long soak does not hold every request body; KeepRequests(true) resumes.
func (u *Upstream) KeepRequests(keep bool) {
	u.mu.Lock()
	u.forget = !keep
	u.mu.Unlock()
}

// Calls returns how many requests arrived.
func (u *Upstream) Calls() int { return int(u.calls.Load()) }

// Requests returns a copy of what arrived, in order.
func (u *Upstream) Requests() []Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Request(nil), u.reqs...)
}

// PeerClosed returns a channel that receives the time whenever the sidecar closed a
// connection the upstream was still answering on.
func (u *Upstream) PeerClosed() <-chan time.Time { return u.closed }

// RefusedURL returns a base URL on a loopback port that refuses connections (see RefusedAddr).
func RefusedURL() string { return "http://" + RefusedAddr() + "/v1" }

func (u *Upstream) handle(ctx *fasthttp.RequestCtx) {
	n := int(u.calls.Add(1))
	r := Request{N: n, Method: string(ctx.Method()), URI: string(ctx.RequestURI()), Host: string(ctx.Host()),
		Header: map[string]string{}, Body: append([]byte(nil), ctx.PostBody()...), Received: time.Now()}
	for k, v := range ctx.Request.Header.All() {
		r.Header[string(k)] = string(v)
	}
	u.mu.Lock()
	if !u.forget {
		u.reqs = append(u.reqs, r)
	}
	step := Step{Status: 200, Header: []string{"Content-Type: application/json"}, Body: ChatCompletion("Hello")}
	respond := u.respond
	if len(u.script) > 0 {
		step = u.script[min(n-u.base, len(u.script))-1]
	}
	u.mu.Unlock()
	if respond != nil {
		step = respond(&r)
	}
	if step.Status == 0 {
		step.Status = 200
	}

	if step.Fault == FaultNone && step.Delay == 0 && len(step.Chunks) == 0 {
		ctx.SetStatusCode(step.Status)
		for _, h := range step.Header {
			k, v, _ := strings.Cut(h, ":")
			ctx.Response.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		ctx.SetBodyString(step.Body)
		return
	}
	// Everything else is written by hand on the raw connection, so each fault is exactly
	// what the socket does.
	rawConn := ctx.Conn()
	ctx.HijackSetNoResponse(true)
	u.wg.Add(1)
	ctx.Hijack(func(net.Conn) {
		defer u.wg.Done()
		u.play(rawConn, step)
	})
}

// play writes one step on the hijacked connection.
func (u *Upstream) play(c net.Conn, s Step) {
	tcp, _ := c.(*net.TCPConn)
	peerGone := make(chan struct{})
	go func() {
		// The request was read already; a read that returns means the peer closed (or sent
		// another request, which this upstream does not serve on a hijacked connection).
		io.Copy(io.Discard, c)
		close(peerGone)
	}()
	wait := func(d time.Duration) bool {
		if d <= 0 {
			return true
		}
		select {
		case <-time.After(d):
			return true
		case <-peerGone:
			u.notePeerClosed()
			return false
		}
	}
	reset := func() {
		if tcp != nil {
			tcp.SetLinger(0)
		}
		c.Close()
	}
	if !wait(s.Delay) {
		return
	}
	raw := rawResponse(s)
	switch s.Fault {
	case FaultReset:
		reset()
		return
	case FaultClose:
		c.Close()
		return
	case FaultGarbage:
		c.Write([]byte(garbage))
		c.Close()
		return
	case FaultStall:
		<-peerGone
		u.notePeerClosed()
		c.Close()
		return
	case FaultResetAfter, FaultStallAfter, FaultCloseAfter, FaultGarbageAfter:
		n := min(s.FaultBytes, len(raw.head)+len(raw.body))
		all := append(append([]byte(nil), raw.head...), raw.body...)
		c.Write(all[:n])
		switch s.Fault {
		case FaultGarbageAfter:
			c.Write([]byte(garbage))
			time.Sleep(10 * time.Millisecond)
			c.Close()
			return
		case FaultResetAfter:
			time.Sleep(10 * time.Millisecond) // let the bytes leave before the reset
			reset()
			return
		case FaultCloseAfter:
			c.Close()
			return
		}
		<-peerGone
		u.notePeerClosed()
		c.Close()
		return
	case FaultTrickle:
		all := append(append([]byte(nil), raw.head...), raw.body...)
		for i := range all {
			if _, err := c.Write(all[i : i+1]); err != nil {
				u.notePeerClosed() // the peer closed: the write failed
				c.Close()
				return
			}
			if !wait(s.ChunkDelay) { // notes the peer's close itself
				c.Close()
				return
			}
		}
		c.Close()
		return
	}
	// A scripted answer, possibly chunked with delays, possibly truncated.
	if _, err := c.Write(raw.head); err != nil {
		c.Close()
		return
	}
	if len(s.Chunks) == 0 {
		c.Write(raw.body)
		c.Close()
		return
	}
	for _, ch := range s.Chunks {
		if !wait(ch.Delay) {
			c.Close()
			return
		}
		var err error
		if ch.Raw {
			_, err = io.WriteString(c, ch.Data)
		} else {
			_, err = fmt.Fprintf(c, "%x\r\n%s\r\n", len(ch.Data), ch.Data)
		}
		if err != nil {
			u.notePeerClosed()
			c.Close()
			return
		}
	}
	switch s.Fault {
	case FaultTruncate:
	case FaultTruncateReset:
		reset()
		return
	default:
		c.Write([]byte("0\r\n\r\n"))
		// Keep the connection open briefly so a clean end is not also a close.
		wait(50 * time.Millisecond)
	}
	c.Close()
}

func (u *Upstream) notePeerClosed() {
	select {
	case u.closed <- time.Now():
	default:
	}
}

// garbage is what FaultGarbage sends: a TLS record header and text, neither HTTP nor a chunk.
const garbage = "\x16\x03\x01 this is not HTTP at all\r\n\r\n"

type raw struct{ head, body []byte }

// rawResponse renders a step as HTTP/1.1 bytes.
func rawResponse(s Step) raw {
	var h strings.Builder
	status := s.Status
	if status == 0 {
		status = 200
	}
	fmt.Fprintf(&h, "HTTP/1.1 %d %s\r\n", status, fasthttp.StatusMessage(status))
	for _, line := range s.Header {
		h.WriteString(line + "\r\n")
	}
	var body []byte
	if len(s.Chunks) > 0 {
		h.WriteString("Transfer-Encoding: chunked\r\n")
		for _, c := range s.Chunks {
			body = fmt.Appendf(body, "%x\r\n%s\r\n", len(c.Data), c.Data)
		}
		if s.Fault != FaultTruncate {
			body = append(body, "0\r\n\r\n"...)
		}
	} else {
		h.WriteString("Content-Length: " + strconv.Itoa(len(s.Body)) + "\r\n")
		body = []byte(s.Body)
	}
	h.WriteString("Connection: close\r\n\r\n")
	return raw{head: []byte(h.String()), body: body}
}

// Raw returns the bytes a step puts on the wire when nothing goes wrong (status line,
// headers, body in its transfer coding): what FaultBytes counts.
func (s Step) Raw() []byte {
	r := rawResponse(s)
	return append(append([]byte(nil), r.head...), r.body...)
}

// RawOffset returns the offset in s.Raw() just past the first occurrence of marker, plus
// extra (negative extra lands inside the marker), for FaultBytes: "reset after the role
// event", "stall halfway through the second delta". It panics when marker is absent, which is
// a mistake in the test.
func RawOffset(s Step, marker string, extra int) int {
	raw := s.Raw()
	i := bytes.Index(raw, []byte(marker))
	if i < 0 {
		panic(fmt.Sprintf("proxytest.RawOffset: %q is not in the step's raw response", marker))
	}
	return i + len(marker) + extra
}

// BodyBytes returns what a client reads from the step's body when nothing goes wrong: Body, or
// the chunks' data joined (the chunked coding removed).
func (s Step) BodyBytes() []byte {
	if len(s.Chunks) == 0 {
		return []byte(s.Body)
	}
	var b []byte
	for _, c := range s.Chunks {
		b = append(b, c.Data...)
	}
	return b
}
