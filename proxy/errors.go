package proxy

import "errors"

// errShutdown ends a wait when the shutdown timeout has passed.
var errShutdown = errors.New("the sidecar is shutting down")

// errClientGone is the error of a wait cut short because the client disconnected.
var errClientGone = errors.New("client went away")

// errDeadline is the error of a wait that reached its deadline.
var errDeadline = errors.New("deadline reached")

// errBrokenChunk is a chunked body whose framing is not HTTP/1.1's: the connection is unusable.
var errBrokenChunk = errors.New("malformed chunked body from the upstream")
