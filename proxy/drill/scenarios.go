package drill

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	pt "github.com/llm-failover/failover/proxy/proxytest"
)

// scenario is one drill: what each simulated target does, and what the client sends.
type scenario struct {
	name string
	// script returns the steps of the target at position i of n.
	script func(i, n int) []pt.Step
	path   string
	body   string
	stream bool
	// cancelAfter, when set, makes the client go away after this long.
	cancelAfter time.Duration
	// check is a scenario-specific invariant; "" when it holds.
	check func(r *result) string
	// successRule is a rule the drill adds when the environment configures none.
	successRule string
	// quickTimeouts, when set, caps the policy's connect, first-byte and attempt timeouts for
	// this scenario, so that a drill of a silent target does not wait a minute.
	quickTimeouts time.Duration
	// biggerModel, when set, is the last target's model substitution (FAILOVER_TARGET_<i>_MODEL)
	// when the environment gives it none: the bigger model a context-window error goes to.
	biggerModel string
	// recovery, when set, replaces the one request: the drill sends requests while the first
	// target fails fast, on a simulated clock, until it recovers (see playRecovery).
	recovery bool
	// quota, when set, sends requests until the first target has answered once (its answer
	// reports a quota spent) before the request the row shows (see playQuota).
	quota bool
	// resume, when set, turns FAILOVER_RESUME on with every target resumable by prefill (by
	// resumeForm, when set), when the environment does not turn it on with a target marked
	// (docs/streams.md, Resume a cut stream).
	resume     bool
	resumeForm string
	// respond, when set and not nil for the target at position i of n, chooses its every
	// answer from the request, instead of script.
	respond func(i, n int) func(*pt.Request) pt.Step
	// hedge, when set, is FAILOVER_HEDGE_AFTER when the environment does not turn hedging on
	// (docs/streams.md, Hedging).
	hedge time.Duration
}

const (
	chatPath   = "/chat/completions"
	chatBody   = `{"model":"drill-model","messages":[{"role":"user","content":"drill"}]}`
	streamBody = `{"model":"drill-model","stream":true,"messages":[{"role":"user","content":"drill"}]}`
)

func chatOK(who string) pt.Step { return pt.JSON(200, pt.ChatCompletion("answer from "+who)) }

// quotaReset is how long the target in "quota running out" says its spent quota takes to come
// back: a few seconds, far longer than the drill's requests take.
const quotaReset = 5 * time.Second

// quotaSpentOK is a good answer whose headers say that no request is left in the window
// (OpenAI's x-ratelimit-*: docs/decisions.md, Rate limits).
func quotaSpentOK(who string) pt.Step {
	return pt.JSON(200, pt.ChatCompletion("answer from "+who), "x-ratelimit-limit-requests: 500", "x-ratelimit-remaining-requests: 0",
		"x-ratelimit-reset-requests: "+quotaReset.String(), "x-ratelimit-limit-tokens: 30000", "x-ratelimit-remaining-tokens: 29950",
		"x-ratelimit-reset-tokens: 100ms")
}

func streamOK(who string) pt.Step {
	return pt.SSE(pt.ChatStream(5*time.Millisecond, "answer ", "from ", who)...)
}

func scenarios() []*scenario {
	rest := func(i int, ok pt.Step) []pt.Step { return []pt.Step{ok} }
	return []*scenario{
		{name: "primary down before headers", path: chatPath, body: chatBody,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{{Fault: pt.FaultReset}}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "429 with Retry-After: 1", path: chatPath, body: chatBody,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(429, pt.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded"), "Retry-After: 1"), chatOK("0")}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "503 then success", path: chatPath, body: chatBody,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(503, pt.OpenAIError("The server is overloaded", "server_error", "")), chatOK("0")}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "in-stream error before content", path: chatPath, body: streamBody, stream: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.SSE(pt.Events(0, pt.ChatRole, pt.ChatError("The server had an error", "server_error", "server_error"))...)}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if r.status == 200 && bytes.Contains(r.body, []byte(`"role":"assistant"`)) && r.calls[0] > 0 && len(r.calls) > 1 && r.calls[1] > 0 &&
					bytes.Count(r.body, []byte(`"role":"assistant"`)) != 1 {
					return "the client saw opening events from more than one target"
				}
				if bytes.Contains(r.body, []byte("The server had an error")) && r.status == 200 && len(r.calls) > 1 && r.calls[1] > 0 {
					return "the client saw the first target's error and the second target's answer"
				}
				return ""
			}},
		{name: "error after visible output", path: chatPath, body: streamBody, stream: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					s := pt.SSE(pt.Events(5*time.Millisecond, pt.ChatRole, pt.ChatDelta("partial "), pt.ChatDelta("answer"))...)
					s.Fault = pt.FaultTruncate
					return []pt.Step{s}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if r.resumed() { // the environment turns resume on
					return r.resumedCheck("")
				}
				return r.noReplayCheck("partial ")
			}},
		{name: "cut stream resumed", path: chatPath, body: streamBody, stream: true, resume: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					s := pt.SSE(pt.Events(5*time.Millisecond, pt.ChatRole, pt.ChatDelta("The answer "), pt.ChatDelta("is forty"))...)
					s.Fault = pt.FaultTruncate
					return []pt.Step{s}
				}
				// Another target's continuation, with its own chunk id.
				s := pt.SSE(pt.ChatStream(5*time.Millisecond, "-two.")...)
				for j := range s.Chunks {
					s.Chunks[j].Data = strings.ReplaceAll(s.Chunks[j].Data, "chatcmpl-test", fmt.Sprintf("chatcmpl-drill-%d", i))
				}
				return rest(i, s)
			},
			check: func(r *result) string {
				if r.resumed() {
					return r.resumedCheck("The answer is forty-two.")
				}
				return r.noReplayCheck("is forty") // the policy does not resume: it ends as any cut stream
			}},
		{name: "cut stream resumed by instruction", path: chatPath, body: streamBody, stream: true, resume: true, resumeForm: "auto",
			script: func(i, n int) []pt.Step {
				s := pt.SSE(pt.Events(5*time.Millisecond, pt.ChatRole, pt.ChatDelta("The answer "), pt.ChatDelta("is forty"))...)
				s.Fault = pt.FaultTruncate
				return []pt.Step{s}
			},
			// The other targets serve a model that refuses a prefill (Claude 4.6 and later):
			// Anthropic's 400 for a prefill, and for an instruction a continuation that starts
			// by repeating the last words it was given.
			respond: func(i, n int) func(*pt.Request) pt.Step {
				if i == 0 {
					return nil
				}
				return pt.RefusesPrefill(func(*pt.Request) pt.Step {
					s := pt.SSE(pt.ChatStream(5*time.Millisecond, "answer is forty-two.")...)
					for j := range s.Chunks {
						s.Chunks[j].Data = strings.ReplaceAll(s.Chunks[j].Data, "chatcmpl-test", fmt.Sprintf("chatcmpl-drill-%d", i))
					}
					return s
				})
			},
			check: func(r *result) string {
				switch {
				case r.resumed() && r.bodyErr == nil:
					return r.resumedCheck("The answer is forty-two.")
				case r.resumed() && bytes.Contains(r.body, []byte("forty-two")):
					return "a resume that failed reached the client (replay after commit)"
				case r.resumed():
					return "" // the policy asks for a prefill only: the resume fails, the client gets the original error
				}
				return r.noReplayCheck("is forty")
			}},
		{name: "finished stream without [DONE]", path: chatPath, body: streamBody, stream: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.SSE(pt.Events(5*time.Millisecond, pt.ChatRole, pt.ChatDelta("whole "), pt.ChatDelta("answer"), pt.ChatFinish)...)}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			}},
		{name: "invalid request (400)", path: chatPath, body: chatBody,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(400, pt.OpenAIError("Invalid 'messages': empty array.", "invalid_request_error", "invalid_value"))}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "success rule on a 200", path: chatPath, body: chatBody, successRule: `"finish_reason":\s*"content_filter"`,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(200, `{"id":"chatcmpl-drill","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"content_filter"}]}`)}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "empty stream", path: chatPath, body: streamBody, stream: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.SSE(pt.Events(0, pt.ChatRole, pt.Done)...)}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			}},
		{name: "silent target", path: chatPath, body: streamBody, stream: true, quickTimeouts: time.Second,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{{Fault: pt.FaultStall}}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if r.calls[0] > 1 {
					return fmt.Sprintf("the target that did not answer in time was waited on %d times (no attempt that cannot help)", r.calls[0])
				}
				return ""
			}},
		{name: "slow first token", path: chatPath, body: streamBody, stream: true, hedge: 200 * time.Millisecond,
			script: func(i, n int) []pt.Step {
				if i == 0 && n > 1 {
					slow := pt.ChatStream(0, "answer ", "from ", "0")
					slow[1].Delay = 5 * time.Second // its first content, long after the hedge won
					return []pt.Step{pt.SSE(slow...)}
				}
				return rest(i, streamOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if len(r.calls) > 1 && r.calls[1] > 1 {
					return fmt.Sprintf("the second target was called %d times: a hedge is one attempt (no attempt that cannot help)", r.calls[1])
				}
				return ""
			}},
		{name: "context window exceeded", path: chatPath, body: chatBody, biggerModel: "drill-model-1m",
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(400, pt.OpenAIError("This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens.",
						"invalid_request_error", "context_length_exceeded"))}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				for i := 1; i < len(r.calls)-1; i++ {
					if r.calls[i] > 0 {
						return "a target with the same model was tried after a context-window error (no attempt that cannot help)"
					}
				}
				return ""
			}},
		{name: "quota running out", path: chatPath, body: chatBody, quota: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{quotaSpentOK("0")}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if r.quotaSpent && len(r.calls) > 1 && r.calls[0] > 0 {
					return "a target that reported its quota spent was called before its reset (no attempt that cannot help)"
				}
				return ""
			}},
		{name: "recovering primary", path: chatPath, body: chatBody, recovery: true,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{pt.JSON(503, pt.OpenAIError("The server is overloaded", "server_error", ""))}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			}},
		{name: "every target failing", path: chatPath, body: chatBody,
			script: func(i, n int) []pt.Step {
				return []pt.Step{pt.JSON(503, pt.OpenAIError(fmt.Sprintf("target %d is down", i), "server_error", ""))}
			},
			check: func(r *result) string {
				if r.status < 500 {
					return fmt.Sprintf("every target failed but the client got %d", r.status)
				}
				return ""
			}},
		{name: "client cancels", path: chatPath, body: chatBody, cancelAfter: 300 * time.Millisecond,
			script: func(i, n int) []pt.Step {
				if i == 0 {
					return []pt.Step{{Fault: pt.FaultStall}}
				}
				return rest(i, chatOK(fmt.Sprint(i)))
			},
			check: func(r *result) string {
				if r.clientOK {
					return "" // the policy answered before the client left: nothing to check here
				}
				total := 0
				for _, c := range r.calls {
					total += c
				}
				switch {
				case total == 0:
					return "the first target was never called"
				case total != 1:
					return fmt.Sprintf("%d upstream calls after the client left, want none", total-1)
				}
				return ""
			}},
	}
}
