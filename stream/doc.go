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
// A Transcript records what a committed chat or messages stream delivered (its
// text, and whether it showed anything else), so that a cut stream can be
// continued on another target, and turns a continuation's events into events of
// the stream the client has.
//
// Event data is read as JSON in two ways: parsed whole with fastjson before commit, where an
// event is classified, and walked in place with package jsonscan (stream/jsonscan, which proxy
// uses for request bodies too) for an event's leading type, for a chat event before commit
// whenever the walk is sure of the parse's answer, and for the tail's rules.
//
// The files, each with what it owns:
//
//   - gate.go: the Gate before commit (Reset, Feed, End), what it holds (Held, Events,
//     ErrorData, HeldWhole), the commit, and OpenEventEnd; slowPaths, the tests' switch to
//     the slow paths.
//   - family.go: the API families, and classify: what one complete pre-commit event means
//     for each, the typed families (responses, messages) and other by their parsed data.
//   - chat.go: what a chat event means before commit, read two ways: parsed (classifyChat,
//     the slow path) and walked in place (scanChat, the fast path, which classify tries
//     first).
//   - tail.go: the Gate after commit (Observe, Finished, Failed): the tail's per-event rules
//     (isTerminal, isErrorEvent, noteEnd), and beside them their two shortcuts: skipQuiet,
//     which passes over a read's quiet events in one run of its bytes, and
//     chunkChangesNothing, which spares noteEnd's walk of a chunk.
//   - framer.go: the Framer: the event-stream grammar under any chunking, the capture limit,
//     and the shape of an event's data past it (jsonscan.ObjectEnd), fed lazily, only when a
//     record is still open at the end of a read.
//   - transcript.go: the Transcript, for resume: what a committed chat or messages stream
//     delivered (Feed), and its API for a continuation (Splice, Rewrite).
//   - continuation.go: a continuation's events rewritten into the client's stream, held back
//     until its seam shows.
//   - seam.go: where a continuation's text joins the delivered text: whitespace, and an exact
//     repeat of the last words or of the unfinished last word, dropped (docs/streams.md, The
//     seam).
//
// Speed work stays behind one door: each fast path sits in its file beside the slow path it
// shortcuts, and a test holds the two to the same answers (chat_test.go, tail_test.go,
// jsonscan/objectend_test.go). slowPaths, set only by tests, turns every fast path off:
// slowpaths_test.go runs the gate's tests with it and compares a gate on each path over the
// fixtures and the fuzz corpora. Which path took the work never changes what the Gate
// decides.
//
// The package decides only what the bytes say. It never retries, never picks a
// target, never maps an error to a status, never touches HTTP or sockets and
// never reads a clock: timeouts, verdicts and I/O belong to its callers.
package stream
