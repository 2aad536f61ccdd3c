// Package stream frames server-sent events and decides when the start of a
// streamed LLM response may reach the client.
//
// A Framer splits any chunking of an SSE byte stream into events (LF, CRLF and
// lone CR line ends, a CR and its LF may arrive in different reads). A Gate
// holds the first bytes of one response and classifies each complete event by
// API family as opening (keep holding), business content (commit: the held
// bytes may be sent), an in-stream error, or the end of an empty stream. After
// commit it watches the piped bytes, without holding them, for the family's
// terminal event (for chat and other, also for the finish_reason or ".done"
// event that completes a stream) so the proxy can tell a proper end from a cut.
// Chat events that arrive together and could change nothing it knows are passed
// over in one read of their bytes (quiet.go), with the result of reading each.
// A Transcript records what a committed chat or messages stream delivered (its
// text, and whether it showed anything else), so that a cut stream can be
// continued on another target, and turns a continuation's events into events of
// the stream the client has.
//
// Event data is read as JSON in two ways: parsed whole with fastjson before commit, where an
// event is classified, and walked in place with package jsonscan (stream/jsonscan, which proxy
// uses for request bodies too) for an event's leading type and for the tail's rules.
//
// The package decides only what the bytes say. It never retries, never picks a
// target, never maps an error to a status, never touches HTTP or sockets and
// never reads a clock: timeouts, verdicts and I/O belong to its callers.
package stream
