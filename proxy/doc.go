// Package proxy is the sidecar's request path: the fasthttp server, the exchange that carries
// one request, the sweep over its candidate targets and the one attempt step, header and body
// rewriting, the answer, the committed pipe, resume and hedging. Its sockets are package
// netio's (proxy/internal/netio): an attempt gets a connection, sends, waits, reads the head
// and the body, and a request sees its client leave, through netio's API alone. What it did is
// counted and rendered by package observe (proxy/internal/observe); its configuration is
// package config's (proxy/internal/config); the processor count is package procs', and the
// pooled byte buffers are package bufpool's.
//
// It executes verdicts and never makes them: every attempt's outcome goes to classify.Decide
// (through judge, its one call), the budgets are measured through package budget and applied
// by classify.Limit, whether a cut stream is resumed or a slow attempt hedged is
// classify.Resume's and classify.Hedge's to say, and SSE streams are held and judged by
// stream.Gate.
//
// A request's way through the files:
//
//	server.go       Server: New, Serve, Shutdown; serveProxy takes an exchange for the request
//	                and answers what needs no target; tend, the server's periodic look
//	exchange.go     the exchange: what one request holds, and who owns it when (its lifetime)
//	request.go      what is read of the request: its API family, its body's model, stream, store
//	tracecontext.go the trace id of the client's traceparent
//	sweep.go        exchange.run, the sweep: the candidates, one attempt after another through
//	                the step, each verdict executed (commit, retry, transfer, stop); the budgets
//	                a retry or a transfer must fit (limit)
//	step.go         exchange.step, the one attempt step: send (do), decide (judge), settle:
//	                health (applyHealth), the ledger (record), the probe lease (settleProbe)
//	selection.go    the strategies that pick a request's first candidate
//	attemptio.go    one attempt's I/O on a netio connection (do, send, readBody, peek), and how
//	                the client is seen to leave (clientGone, the exchange's netio.Stop)
//	headers.go      the upstream request's head, and the response headers the client gets
//	ratelimit.go    an answer's rate-limit headers
//	answer.go       the answer: commit, answer after a stop or an exhausted sweep, reject
//	respond.go      the sidecar's own error bodies and events, shaped per family
//	pipe.go         a committed stream or large body, piped on a stream worker
//	workers.go      the goroutines kept for the stream path
//	resume.go       a cut stream continued on another target (FAILOVER_RESUME), its attempts
//	                made through the step
//	hedge.go        a race: a slow attempt with a hedge beside it (FAILOVER_HEDGE_AFTER): the
//	                attempt gives way at the delay, and each attempt's I/O goes on on a leg of
//	                its own, each settled by the step's settle
//
// Around it:
//
//	target.go       a target as the request path uses it, precomputed, with its netio.Pool, and
//	                what requests learn of it (the models it refuses a prefill for, its probe's request)
//	prober.go       the background probe of targets ejected for timing out
//	targettable.go  the target table (/targets), built from the targets' state for observe
//	observe.go      what main uses of package observe (the log handler, the target table)
//	config.go       what main uses of package config (Load, Check)
//	build.go        the binary's build information (failover version, failover_build_info)
//
// Where things are decided and done, for a reader in a hurry:
//
//   - Whether another attempt is made, and where: the step (settle: judge, then limit, with a
//     transfer's candidate found by nextCandidate); the sweep only executes what the step
//     returns. A resume's attempt is decided by classify.Resume (tryResume) and made through
//     the step; a hedge is decided by classify.Hedge (startHedge).
//   - Who releases a probe: settleProbe, the one place a probe lease ends; a request that
//     finishes with one still held is a bug, counted (Server.LeakedProbes) and given back.
//   - Who owns an exchange: the handler, until the answer is piped; then, after the hijack, a
//     stream worker, which finishes it (exchange.go says each hand-off).
//   - How the client's departure is seen: clientGone (a look at its socket, netio.Peer), asked
//     by every wait through the exchange's netio.Stop, by a retry's backoff, and by judge before
//     any new attempt; a committed stream also sees it when a write fails.
//
// Goroutines. The handler (serveProxy) owns a request's exchange while it runs. A piped answer
// hijacks the client connection: fasthttp calls exchange.hijacked on a goroutine of its own,
// which hands the exchange to a stream worker (Server.streams, serveStream), its owner from
// then on. After a clean end the stream hands the connection back to the server, served on a
// worker of its own (Server.handedBack). netio's watch goroutines ask the exchange's Stop while
// its owner is blocked in a dial or a request's write. An attempt that a hedge may race runs on
// the handler's goroutine until the hedge delay (or until a dial, which cannot give way); when
// the delay passes first, its wait gives way and the race begins: each attempt's I/O runs on a
// leg, a goroutine kept for legs (Server.legs, as streams have theirs) that writes only its
// attempt and reports when it ended; the handler alone settles them and touches the exchange
// (hedge.go).
package proxy
