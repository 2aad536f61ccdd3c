// Command latency measures response latency at a fixed request rate (an open loop), so that
// the latency a proxy adds is measured as its service overhead. A closed-loop tool such as wrk
// at saturation reports p50 ≈ connections / throughput: that is throughput again, not overhead.
//
//	go run ./testdata/bench/latency -url http://127.0.0.1:29000/v1/chat/completions \
//		-body '{"model":"m","messages":[]}' -conns 10 -rate 2000 -duration 3s [-sse] [-json]
//
// Each connection is one persistent HTTP/1.1 keep-alive TCP connection with its own schedule:
// request i of connection k is intended at start + (i*conns + k)/rate, and is sent then, or at
// once if the previous response on that connection ended late. Two figures per response:
//
//   - latency: from the intended send time to the last byte of the response. A slow response
//     delays the requests queued behind it, and that delay is counted (no coordinated omission).
//     It also holds this tool's own lateness: time.Sleep overshoots, and on Linux by up to about
//     1 ms, because a Go process with nothing else to run waits for its next timer in
//     epoll_wait, whose timeout is in whole milliseconds (runtime/netpoll_epoll.go).
//   - service: from the actual send to the last byte. This is the figure to compare between
//     proxies, measured in the same run against the same upstream.
//
// It talks to loopback only (127.0.0.1, ::1, localhost) and uses the standard library only.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// config is one measurement: where to send, how fast, for how long, and what.
type config struct {
	url      string
	conns    int
	rate     float64 // requests per second across all connections
	duration time.Duration
	warmup   time.Duration // sent on the same schedule before duration, not recorded
	body     string
	headers  []string // "Name: value"
	sse      bool     // send Accept: text/event-stream
}

// result is what measure reports. Latency and Service are in microseconds.
type result struct {
	Requests   int     `json:"requests"` // recorded responses with status 200
	Errors     int     `json:"errors"`   // recorded requests that failed: status, framing, connection
	FirstError string  `json:"first_error,omitempty"`
	TargetRate float64 `json:"target_rate"`
	Rate       float64 `json:"rate"` // recorded responses per second, up to the last one's end
	Conns      int     `json:"conns"`
	Latency    summary `json:"latency_us"` // from the intended send time
	Service    summary `json:"service_us"` // from the actual send time
}

type summary struct {
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99.9"`
	Max  float64 `json:"max"`
}

func main() {
	var cfg config
	flag.StringVar(&cfg.url, "url", "", "http://127.0.0.1:PORT/path (loopback only)")
	flag.IntVar(&cfg.conns, "conns", 10, "persistent connections")
	flag.Float64Var(&cfg.rate, "rate", 2000, "requests per second, across all connections")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "recorded time")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "time before duration, not recorded")
	flag.StringVar(&cfg.body, "body", "", "request body (POST)")
	flag.Func("header", `request header "Name: value" (repeatable)`, func(h string) error {
		cfg.headers = append(cfg.headers, h)
		return nil
	})
	flag.BoolVar(&cfg.sse, "sse", false, "send Accept: text/event-stream")
	asJSON := flag.Bool("json", false, "print the result as one JSON object")
	asTSV := flag.Bool("tsv", false, "print one tab-separated line: requests, errors, rate, latency p50 and p99, service p50 and p99 (µs)")
	flag.Parse()

	res, err := measure(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		os.Exit(1)
	}
	if *asTSV {
		fmt.Printf("%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\n", res.Requests, res.Errors, res.Rate,
			res.Latency.P50, res.Latency.P99, res.Service.P50, res.Service.P99)
		return
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(res) // stdout
		return
	}
	fmt.Printf("%s: %d conns, %.0f req/s target, %s (after %s warm-up)\n", cfg.url, res.Conns, res.TargetRate, cfg.duration, cfg.warmup)
	fmt.Printf("requests %d, achieved %.1f req/s, errors %d\n", res.Requests, res.Rate, res.Errors)
	if res.FirstError != "" {
		fmt.Printf("first error: %s\n", res.FirstError)
	}
	fmt.Printf("%-8s %8s %8s %8s %8s %8s %8s\n", "µs", "min", "p50", "p90", "p99", "p99.9", "max")
	row := func(name string, s summary) {
		fmt.Printf("%-8s %8.0f %8.0f %8.0f %8.0f %8.0f %8.0f\n", name, s.Min, s.P50, s.P90, s.P99, s.P999, s.Max)
	}
	row("latency", res.Latency)
	row("service", res.Service)
}

// loopbackHosts are the only hosts measure sends to: this tool makes load, and load belongs
// on the machine that asked for it.
var loopbackHosts = map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true}

// target checks rawURL and returns the address to dial, the Host header and the request
// line's path.
func target(rawURL string) (addr, host, path string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", "", fmt.Errorf("-url: %w", err)
	}
	if u.Scheme != "http" {
		return "", "", "", fmt.Errorf("-url %q: only http:// is supported", rawURL)
	}
	if !loopbackHosts[u.Hostname()] {
		return "", "", "", fmt.Errorf("-url %q: host must be 127.0.0.1, ::1 or localhost", rawURL)
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port), u.Host, u.RequestURI(), nil
}

// measure runs cfg's schedule on cfg.conns connections and summarizes the recorded responses.
func measure(cfg config) (result, error) {
	addr, host, path, err := target(cfg.url)
	if err != nil {
		return result{}, err
	}
	if cfg.conns < 1 || cfg.rate <= 0 || cfg.duration <= 0 || cfg.warmup < 0 {
		return result{}, errors.New("-conns, -rate and -duration must be positive, -warmup not negative")
	}
	req := buildRequest(host, path, cfg)

	start := time.Now().Add(50 * time.Millisecond) // every connection dialled before the first send
	from := start.Add(cfg.warmup)
	end := from.Add(cfg.duration)
	perConn := int(math.Ceil(cfg.rate*cfg.duration.Seconds()/float64(cfg.conns))) + 1
	runs := make([]*run, cfg.conns)
	var wg sync.WaitGroup
	for k := range runs {
		r := &run{addr: addr, req: req, deadline: end.Add(10 * time.Second),
			latency: make([]time.Duration, 0, perConn), service: make([]time.Duration, 0, perConn)}
		runs[k] = r
		wg.Go(func() { r.loop(k, cfg.conns, cfg.rate, start, from, end) })
	}
	wg.Wait()

	res := result{TargetRate: cfg.rate, Conns: cfg.conns}
	var latency, service []time.Duration
	last := end
	for _, r := range runs {
		latency = append(latency, r.latency...)
		service = append(service, r.service...)
		res.Errors += r.errors
		if res.FirstError == "" && r.firstErr != nil {
			res.FirstError = r.firstErr.Error()
		}
		if r.lastDone.After(last) {
			last = r.lastDone
		}
	}
	res.Requests = len(latency)
	res.Rate = float64(res.Requests) / last.Sub(from).Seconds()
	res.Latency, res.Service = summarize(latency), summarize(service)
	return res, nil
}

// buildRequest returns the request's bytes, built once and written as they are every time.
func buildRequest(host, path string, cfg config) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", path, host, len(cfg.body))
	hasType := false
	for _, h := range cfg.headers {
		name, _, _ := strings.Cut(h, ":")
		hasType = hasType || strings.EqualFold(strings.TrimSpace(name), "Content-Type")
		b.WriteString(strings.TrimSpace(h) + "\r\n")
	}
	if !hasType {
		b.WriteString("Content-Type: application/json\r\n")
	}
	if cfg.sse {
		b.WriteString("Accept: text/event-stream\r\n")
	}
	b.WriteString("\r\n" + cfg.body)
	return b.Bytes()
}

// run is one connection's schedule and its records. It is used by one goroutine only.
type run struct {
	addr     string
	req      []byte
	deadline time.Time // for every read and write: a stalled server ends the run, not hangs it
	conn     net.Conn  // nil until dialled, and after an error
	br       *bufio.Reader

	latency, service []time.Duration // preallocated for the whole schedule
	errors           int
	firstErr         error
	lastDone         time.Time
}

func (r *run) loop(k, conns int, rate float64, start, from, end time.Time) {
	for i := 0; ; i++ {
		intended := start.Add(time.Duration(float64(i*conns+k) * float64(time.Second) / rate))
		if !intended.Before(end) {
			break
		}
		if r.conn == nil {
			r.dial()
		}
		time.Sleep(time.Until(intended)) // returns at once when the previous response ended late
		sent := time.Now()
		err := r.roundTrip()
		done := time.Now()
		if intended.Before(from) {
			continue // warm-up
		}
		r.lastDone = done
		if err != nil {
			r.errors++
			if r.firstErr == nil {
				r.firstErr = err
			}
			continue
		}
		r.latency = append(r.latency, done.Sub(intended))
		r.service = append(r.service, done.Sub(sent))
	}
	if r.conn != nil {
		r.conn.Close()
	}
}

// dial connects, or leaves conn nil so that the next round trip fails and is counted.
func (r *run) dial() {
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		return
	}
	c.SetDeadline(r.deadline) // a fresh connection
	r.conn = c
	if r.br == nil {
		r.br = bufio.NewReaderSize(c, 64<<10)
	} else {
		r.br.Reset(c)
	}
}

// errStatus is a complete response whose status is not 200: the connection stays usable.
var errStatus = errors.New("status not 200")

// roundTrip writes the request and reads the whole response. On any error but errStatus the
// connection is closed, to be dialled again before the next request.
func (r *run) roundTrip() error {
	if r.conn == nil {
		r.dial()
		if r.conn == nil {
			return fmt.Errorf("dial %s failed", r.addr)
		}
	}
	keep, err := r.exchange()
	if (err != nil && err != errStatus) || !keep {
		r.conn.Close()
		r.conn = nil
	}
	return err
}

// exchange reports whether the connection may carry another request.
func (r *run) exchange() (keep bool, err error) {
	if _, err := r.conn.Write(r.req); err != nil {
		return false, err
	}
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return false, fmt.Errorf("bad status line %q", line)
	}
	ok := string(line[9:12]) == "200"
	keep = line[7] == '1' // HTTP/1.0 closes unless asked otherwise, and this never asks
	length, chunked := int64(-1), false
	for {
		line, err := r.br.ReadSlice('\n')
		if err != nil {
			return false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length = parseInt(value, 10); length < 0 {
				return false, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			// chunked is always the last coding (RFC 9112, section 6.1).
			chunked = len(value) >= 7 && bytes.EqualFold(value[len(value)-7:], []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			keep = keep && !bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case chunked:
		err = r.readChunked()
	case length >= 0:
		_, err = r.br.Discard(int(length))
	default: // the body ends when the server closes the connection
		for err == nil {
			_, err = r.br.Discard(r.br.Size())
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
		keep = false
	}
	if err == nil && !ok {
		err = errStatus
	}
	return keep, err
}

// readChunked consumes a chunked body: size lines (extensions after ';' ignored), chunk data
// with its CRLF, and the trailer section up to its empty line.
func (r *run) readChunked() error {
	for {
		line, err := r.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n := parseInt(bytes.TrimSpace(size), 16)
		if n < 0 {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 {
			break
		}
		if _, err := r.br.Discard(int(n) + 2); err != nil { // data, then CRLF
			return err
		}
	}
	for { // trailers
		line, err := r.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return nil
		}
	}
}

// parseInt parses a non-negative number in base 10 or 16 without converting to a string; it
// returns -1 for anything else, or for a value past 2^40 (no body here is near that).
func parseInt(b []byte, base int64) int64 {
	if len(b) == 0 {
		return -1
	}
	var n int64
	for _, c := range b {
		var d int64
		switch {
		case c >= '0' && c <= '9':
			d = int64(c - '0')
		case base == 16 && c|0x20 >= 'a' && c|0x20 <= 'f':
			d = int64(c|0x20-'a') + 10
		default:
			return -1
		}
		if n = n*base + d; n > 1<<40 {
			return -1
		}
	}
	return n
}

// summarize sorts d in place and reads nearest-rank percentiles, in microseconds.
func summarize(d []time.Duration) summary {
	if len(d) == 0 {
		return summary{}
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		i := max(int(math.Ceil(q*float64(len(d))))-1, 0)
		return float64(d[i].Nanoseconds()) / 1e3
	}
	return summary{Min: at(0), P50: at(0.5), P90: at(0.9), P99: at(0.99), P999: at(0.999), Max: at(1)}
}
