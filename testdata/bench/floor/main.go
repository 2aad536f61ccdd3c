// Command floor is the least a reverse proxy built on fasthttp does: each request is handed to a
// fasthttp.HostClient for the one upstream, and its answer to the client, with nothing decided,
// gated, scanned or logged. testdata/bench/run.sh measures it in place of a second sidecar, to
// tell what the sidecar's own work costs from what its stack (fasthttp's server and client, Go's
// scheduler and poller) costs before any of it (BENCHMARKS.md, The tail and the stream path):
//
//	go build -o /tmp/floor ./testdata/bench/floor
//	SIDECAR_B_BIN=/tmp/floor bash testdata/bench/run.sh
//
// It reads the variables run.sh gives a sidecar: FAILOVER_LISTEN, FAILOVER_METRICS_LISTEN (which
// answers /healthz) and FAILOVER_TARGET_0_URL, and only ever listens on and connects to loopback.
package main

import (
	"fmt"
	"log"
	"net"
	"net/url"
	"os"

	"github.com/valyala/fasthttp"
)

func main() {
	listen, health, target := os.Getenv("FAILOVER_LISTEN"), os.Getenv("FAILOVER_METRICS_LISTEN"), os.Getenv("FAILOVER_TARGET_0_URL")
	up, err := upstreamAddr(target)
	if err == nil {
		err = loopback("FAILOVER_LISTEN", listen)
	}
	if err == nil {
		err = loopback("FAILOVER_METRICS_LISTEN", health)
	}
	if err != nil {
		log.Fatalf("floor: %v", err)
	}
	go func() {
		log.Fatal(fasthttp.ListenAndServe(health, func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok\n") }))
	}()
	log.Fatal(newServer(up).ListenAndServe(listen))
}

// newServer is the proxy: fasthttp's server with the sidecar's settings that bear on cost (no
// Date or Server header, no default Content-Type, buffers released between requests), and one
// HostClient for the upstream at addr.
func newServer(addr string) *fasthttp.Server {
	hc := &fasthttp.HostClient{Addr: addr, MaxConns: 1024, DisablePathNormalizing: true, NoDefaultUserAgentHeader: true}
	return &fasthttp.Server{
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		ReduceMemoryUsage:     true,
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.Request.Header.Del("Connection") // hop-by-hop: HostClient keeps its own connections
			if err := hc.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Error("upstream: "+err.Error(), fasthttp.StatusBadGateway)
			}
		},
	}
}

// upstreamAddr is the host:port of target, an http URL on loopback.
func upstreamAddr(target string) (string, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return "", fmt.Errorf("FAILOVER_TARGET_0_URL=%q: want an http URL like http://127.0.0.1:8080/v1", target)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	return host, loopback("FAILOVER_TARGET_0_URL", host)
}

// loopback refuses an address that is not on loopback: a benchmark talks to nothing else.
func loopback(name, hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%s=%q: want host:port", name, hostport)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%s=%q: only loopback addresses (127.0.0.1, ::1, localhost)", name, hostport)
	}
	return nil
}
