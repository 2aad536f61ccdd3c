package classify

// PrefillRefusals are the phrases by which a provider refuses a conversation that ends with an
// assistant message: a continuation asked as a prefill (docs/streams.md, Resume a cut stream). Each is
// lower-case ASCII and is matched, ignoring ASCII case, anywhere in the error body's first 64
// KiB, so that it is found in a message, in a provider error a gateway nests in its own
// (OpenRouter's metadata.raw), or in a body that is plain text (GitHub Copilot's).
// TestPrefillRefusalFixtures holds them against real error bodies (testdata/prefill).
var PrefillRefusals = [...]string{
	// Anthropic, for Claude Opus 4.6, Sonnet 4.6 and later, also through Amazon Bedrock,
	// Google Vertex AI and GitHub Copilot: "This model does not support assistant message
	// prefill. The conversation must end with a user message."
	"does not support assistant message prefill",
	"conversation must end with a user message",
	// Mistral's API, and mistral-common in vLLM: "Expected last role User or Tool (or Assistant
	// with prefix True) for serving but got assistant".
	"expected last role user or tool",
	// DeepSeek, deepseek-reasoner: "The last message of deepseek-reasoner must be a user
	// message, or an assistant message with prefix mode on".
	"must be a user message, or an assistant message with prefix mode",
	// Gemini: "Please ensure that multiturn requests ends with a user role or a function response."
	"multiturn requests end",
}

var prefillRefusals = func() [][]byte {
	out := make([][]byte, len(PrefillRefusals))
	for i, p := range PrefillRefusals {
		out[i] = []byte(p)
	}
	return out
}()

// PrefillRefused reports whether an error answer with this status and body refuses a prefill:
// a 400 whose body holds one of PrefillRefusals. An error event before content counts with
// the status it maps to (docs/streams.md, The status of an error event). It never allocates.
func PrefillRefused(status int, body []byte) bool {
	if status != 400 {
		return false
	}
	if len(body) > maxTextBytes {
		body = body[:maxTextBytes]
	}
	for _, p := range prefillRefusals {
		if containsFold(body, p) {
			return true
		}
	}
	return false
}

// prefillRetry is the verdict for a resume attempt asked as a prefill in the auto form
// (Outcome.PrefillAsked) that the target refused (PrefillRefused): the same target is asked
// again at once in the instruct form. That retry is part of the same resume, not a retry of
// FAILOVER_SAME_TARGET_RETRIES, and the refusal says nothing of the target's health.
func prefillRetry(v Verdict) Verdict {
	v.Action, v.Reason, v.Health, v.Wait, v.Cooldown = ActionRetry, ReasonPrefillRefused, HealthNone, 0, 0
	return v
}
