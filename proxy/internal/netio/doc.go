// Package netio is the sidecar's socket layer: the connections to targets and to clients, and
// every wait on them. The request path (package proxy) reads plainly through it: get a
// connection, send, wait, read the head, read the body.
//
// Upstream. A Pool holds one target's idle HTTP/1.1 connections and dials new ones (Get, Put,
// CloseIdle; a janitor closes the ones the far side closed, with or without traffic). A Conn
// sends a request (Send), waits for the answer (Wait), reads its head (ReadHead, through
// fasthttp's parser), and a Body decodes the answer's body in place, out of the connection's
// read buffer, which is lent from a pool only while it holds bytes. FailureOf names what went
// wrong with a connection.
//
// Waiting. Wait is the one verb for it. Every wait is bounded by a deadline and by a Stop, the
// one value that says a wait must end and why (the client left, ErrClientGone; the shutdown
// timeout passed, ErrShutdown): reads are cut into slices of PollInterval that ask it, and a
// dial or a request's write, which cannot be, is watched from a goroutine of its own. A Wait
// may also give way at a time its caller set (YieldAt, ErrYield) and be called again later,
// on another goroutine: the reads that follow a Wait never give way, so the answer is left
// where it was.
//
// Clients. A Listener wraps the proxy listener's connections in ClientConn: one read per
// request, a request head with a bare LF refused (ErrBareLF), an answer's body lent to fasthttp
// until it is written (LendBody), and, where the client waits for its answers, the write that
// ends an answer waiting for the next request. Conns lists them, for the server to close the
// idle ones at shutdown and to end waits that last. A Peer is a client's connection as a
// request looks at it to see the client leave (Closed), without reading and without waiting.
//
// The files, each with what it owns:
//
//   - pool.go: Pool, dialing, the janitor (sweep, dropStale) and when an idle connection is
//     spent.
//   - conn.go: Conn, its read buffer, Send and ReadHead.
//   - wait.go: Stop, Wait, the reads in slices (pollReader) and the watch of a call that cannot
//     be sliced.
//   - body.go: Body, the HTTP/1.1 body decoder (length, chunked, until close), read in place.
//   - errors.go: the ends of a wait, ErrBrokenChunk, IsTimeout and FailureOf;
//     sockerr.go and sockerr_windows.go: how each system names a refused or a reset connection.
//   - listener.go: Listener, Conns, EndLongWaits and the wait after an answer as it sees it.
//   - client.go: ClientConn: the read-ahead, Begin and AwaitAfter, Reclaim after a stream.
//   - pace.go: how a client sends its requests, the client connection's named state.
//   - headscan.go: the bare-LF check of a request head, and the request line's target.
//   - lend.go: an answer's body lent to fasthttp, and the pool it comes back to.
//   - deadline.go: when a socket's deadline may stay where it is.
//
// Speed work stays behind one door. Each Linux fast path sits in one file beside the portable
// path it shortcuts, with the same private names: rawsock_linux.go (raw system calls, a send
// that waits for the reply in the same call, a wait without a read buffer, the peeks) beside
// rawsock_portable.go; client_linux.go (the read-ahead without a buffer while it waits, the
// wait for the next request in an answer's last write) beside client_portable.go; rawsys.go
// and rawsys_race.go, the system calls themselves, plain or annotated for the race detector.
// The portable path is what macOS and Windows build, and the build tag failover_portable forces
// it on Linux, for tests (docs/development.md, Running the tests). Agreement tests run on both
// (peek_test.go, wait_test.go, client_test.go): which path did the work never changes what a
// caller sees, only what it costs.
//
// It never decides: it does not read the policy, does not classify an answer, never touches a
// target's health, and never sends a request again on its own. Its errors and Failure are
// facts for the request path to judge. It imports fasthttp and nothing of this module.
package netio
