// Package proxy is the sidecar's request path: the fasthttp server, the exchange that carries
// one request, the attempt loop that walks its candidate targets, header and body rewriting,
// the answer, the committed pipe, and resume. Its sockets are package netio's
// (proxy/internal/netio): an attempt gets a connection, sends, waits, reads the head and the
// body, and a request sees its client leave, through netio's API alone.
//
// It executes verdicts and never makes them: every attempt's outcome goes to classify.Decide,
// the budgets are measured through package budget and applied by classify.Limit, and SSE
// streams are held and judged by stream.Gate.
//
// A request's way through the files:
//
//	server.go       Server: New, Serve, Shutdown; serveProxy takes an exchange for the request
//	                and answers what needs no target; tend, the server's periodic look
//	exchange.go     the exchange: what one request holds, and who owns it when (its lifetime)
//	request.go      what is read of the request: its API family, its body's model and stream
//	tracecontext.go the trace id of the client's traceparent
//	attempt.go      exchange.run, the attempt loop: candidates, verdicts, budgets, health, the
//	                probe lease
//	selection.go    the strategies that pick a request's first candidate
//	attemptio.go    one attempt's I/O on a netio connection (do, readBody, peek), and how the
//	                client is seen to leave (clientGone, the exchange's netio.Stop)
//	headers.go      the upstream request's head, and the response headers the client gets
//	ratelimit.go    an answer's rate-limit headers, and their metrics
//	answer.go       the answer: commit, answer after a stop or an exhausted sweep, reject
//	respond.go      the sidecar's own error bodies and events, shaped per family
//	pipe.go         a committed stream or large body, piped on a stream worker
//	workers.go      the goroutines kept for the stream path
//	resume.go       a cut stream continued on another target (FAILOVER_RESUME)
//
// Around it:
//
//	target.go       a target as the request path uses it, precomputed, with its netio.Pool
//	prober.go       the background probe of targets ejected for timing out
//	targets.go      the target table (/targets)
//	metrics.go      the Prometheus metrics
//	ledger.go       the ledger of a request's attempts and its record
//	logjson.go      the JSON log handler
//	procs.go        GOMAXPROCS control
//	config.go       the configuration, as package config loads it
//	build.go        the binary's build information (failover_build_info)
//
// Goroutines. The handler (serveProxy) owns a request's exchange while it runs. A piped answer
// hijacks the client connection: fasthttp calls exchange.hijacked on a goroutine of its own,
// which hands the exchange to a stream worker (Server.streams, serveStream), its owner from
// then on. After a clean end the stream hands the connection back to the server, served on a
// worker of its own (Server.handedBack). netio's watch goroutines ask the exchange's Stop while
// its owner is blocked in a dial or a request's write (exchange documents who owns what, when).
package proxy
