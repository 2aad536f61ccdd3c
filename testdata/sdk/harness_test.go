package sdk

import (
	"fmt"
	"strings"
	"testing"

	pt "github.com/llm-failover/failover/proxy/proxytest"
	"github.com/llm-failover/failover/proxy/proxytest/sidecar"
)

// conversation is one request an app makes with an SDK through the sidecar, as a table row:
// what each target answers, how the sidecar is configured, and what the app must end up with.
// A new behaviour (a cut stream resumed from another target, say) is one more row.
type conversation struct {
	name string
	// targets are the scripts of FAILOVER_TARGET_0, _1, ... in order. Each step answers exactly
	// one attempt, so a target must be called as many times as its script has steps (an empty
	// script: never).
	targets [][]pt.Step
	env     []string // FAILOVER_* on top of baseEnv
	single  bool     // a non-streaming request, answered with one JSON document
	// text is the text the app ends up with: what the SDK's accumulator built from the stream,
	// or the answer's text.
	text string
	// seen is the message ids the app saw, in order, a repeat of the previous one folded: one
	// id per stream, so a failed attempt's bytes that reached the app show as an extra id.
	seen []string
	// err is the error object the SDK raised at the end of the stream; nil: no error.
	err *errorObject
}

// errorObject is the error an SDK raised for an error event or an error answer: the HTTP status
// it carries (0: none) and the `error` object's type and code behind it.
type errorObject struct {
	status    int
	typ, code string
}

func (e errorObject) String() string {
	return fmt.Sprintf("status %d, error type %q, code %q", e.status, e.typ, e.code)
}

// client is one SDK as an app uses it.
type client struct {
	// run makes the request against the sidecar (addr: its host:port) and returns what the app
	// ends up with: the text, the message ids seen (as conversation.seen), and the error.
	run func(t *testing.T, addr string, single bool) (text string, seen []string, err error)
	// errorObject reads the error object behind an error run returned; ok is false when err is
	// not one the SDK raises for an error event or answer (a transport or JSON error). shape
	// lists how err differs from what docs/streams.md documents for this SDK ("When a stream is cut
	// after output began").
	errorObject func(err error) (obj errorObject, ok bool, shape []string)
}

// dummyKey is the key the SDKs send: the sidecar under test forwards it to the fake upstreams,
// and no real provider is ever reached.
const dummyKey = "sk-dummy-not-a-key"

// baseEnv is the configuration every conversation runs with. The timeouts are short enough
// that a sidecar which waits where it should not fails the test in seconds, and far longer
// than any scripted answer takes on a loaded machine.
var baseEnv = []string{
	"FAILOVER_SAME_TARGET_RETRIES=0", // a failed attempt transfers at once: one step, one attempt
	"FAILOVER_CONNECT_TIMEOUT=2s",
	"FAILOVER_FIRST_BYTE_TIMEOUT=5s",
	"FAILOVER_IDLE_TIMEOUT=5s",
	"FAILOVER_ATTEMPT_TIMEOUT=10s",
}

// resumeEnv turns resume on (docs/streams.md, Resume a cut stream), with FAILOVER_TARGET_1 resumable.
var resumeEnv = []string{"FAILOVER_RESUME=on", "FAILOVER_TARGET_1_RESUME=prefill"}

// instructEnv and autoEnv make FAILOVER_TARGET_1 resumable by instruction, and by prefill or
// else instruction (docs/streams.md, Resume a cut stream).
var (
	instructEnv = []string{"FAILOVER_RESUME=on", "FAILOVER_TARGET_1_RESUME=instruct"}
	autoEnv     = []string{"FAILOVER_RESUME=on", "FAILOVER_TARGET_1_RESUME=auto"}
)

// play runs each conversation with the SDK, in parallel, each through a sidecar of its own.
func play(t *testing.T, sdk client, conversations []conversation) {
	for _, c := range conversations {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.play(t, sdk)
		})
	}
}

func (c conversation) play(t *testing.T, sdk client) {
	ups := make([]*pt.Upstream, len(c.targets))
	urls := make([]string, len(c.targets))
	for i, script := range c.targets {
		ups[i] = sidecar.Upstream(t, script...)
		urls[i] = ups[i].URL
	}
	s := sidecar.Start(t, sidecar.Env(sidecar.Targets(urls...), baseEnv, c.env)...)

	text, seen, err := sdk.run(t, s.Addr, c.single)

	if text != c.text {
		t.Errorf("the app ended up with the text %q, want %q", text, c.text)
	}
	if strings.Join(seen, " ") != strings.Join(c.seen, " ") {
		t.Errorf("the app saw the messages %q, want %q", seen, c.seen)
	}
	want := "no error"
	if c.err != nil {
		want = c.err.String()
	}
	if err == nil {
		if c.err != nil {
			t.Errorf("the SDK reported no error, want %s", want)
		}
	} else {
		// An SDK error's message holds the error document it got: only its fields are shown.
		got, ok, shape := sdk.errorObject(err)
		switch {
		case !ok:
			t.Errorf("the SDK reported %T: %v; want %s", err, err, want)
		case c.err == nil || got != *c.err:
			t.Errorf("the SDK reported %T with %s; want %s", err, got, want)
		case len(shape) > 0:
			t.Errorf("the SDK's error is not as docs/streams.md documents it: %s", strings.Join(shape, "; "))
		}
	}
	for i, u := range ups {
		if got, want := u.Calls(), len(c.targets[i]); got != want {
			t.Errorf("target %d was called %d times, want %d", i, got, want)
		}
	}
	if t.Failed() { // what the sidecar decided (its records hold no body and no key)
		for _, rec := range s.WaitLedger(1) {
			t.Logf("the sidecar's record: outcome %v, status %v, attempts %v", rec["outcome"], rec["status"], rec["ledger"])
		}
	}
}

// relabel returns step with every from in its body or chunks replaced by to: a fixture's
// message id made the target's own, so the app's view tells the targets apart.
func relabel(step pt.Step, from, to string) pt.Step {
	step.Body = strings.ReplaceAll(step.Body, from, to)
	chunks := make([]pt.Chunk, len(step.Chunks))
	for i, ch := range step.Chunks {
		ch.Data = strings.ReplaceAll(ch.Data, from, to)
		chunks[i] = ch
	}
	step.Chunks = chunks
	return step
}

// cutAfter returns step with its connection closed (FIN, no final chunk) right after the first
// occurrence of marker in its raw response; a marker that does not end an event cuts the
// stream inside that event.
func cutAfter(step pt.Step, marker string) pt.Step {
	step.Fault, step.FaultBytes = pt.FaultCloseAfter, pt.RawOffset(step, marker, 0)
	return step
}
