package drill

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/llm-failover/failover/proxy/internal/config"
)

// invariantNames are the invariants that hold under any policy, in the order they print.
var invariantNames = []string{"no replay after commit", "no attempt after the client left", "no attempt that cannot help",
	"budgets respected", "one final answer per request", "ledger complete", "every probe settled"}

// checkInvariants checks what holds under any policy.
func (r *result) checkInvariants(cfg *config.Config) {
	if r.record == nil {
		r.problems = append(r.problems, "[ledger complete] no ledger record for the request")
		return
	}
	ledger, _ := r.record["ledger"].([]any)
	// A long ledger lists its first attempts, then {"more_attempts": N} for the rest.
	more := 0
	if n := len(ledger); n > 0 {
		if m, _ := ledger[n-1].(map[string]any); m["more_attempts"] != nil {
			f, _ := m["more_attempts"].(float64)
			more, ledger = int(f), ledger[:n-1]
		}
	}
	if attempts, _ := r.record["attempts"].(float64); int(attempts) != len(ledger)+more {
		r.problems = append(r.problems, fmt.Sprintf("[ledger complete] the record counts %d attempts, its ledger lists %d", int(attempts), len(ledger)+more))
	}
	// Every call a target received is in the ledger, and every answer the ledger lists came
	// from a call. An attempt that ended before its request reached the target (a connect or
	// attempt timeout) is listed without a status, and that target saw no call for it.
	listed, answered := make([]int, len(r.names)), make([]int, len(r.names))
	for _, e := range ledger {
		m, _ := e.(map[string]any)
		for i, name := range r.names {
			if m["target"] == name {
				listed[i]++
				if _, ok := m["status"].(float64); ok {
					answered[i]++
				}
			}
		}
	}
	for i, name := range r.names {
		if i < len(r.calls) && (r.calls[i] > listed[i]+more || answered[i] > r.calls[i]) {
			r.problems = append(r.problems, fmt.Sprintf("[ledger complete] the ledger lists %d attempts on %s (%d answered), the target saw %d calls",
				listed[i], name, answered[i], r.calls[i]))
		}
	}
	transfers, committed := 0, false
	perTarget := map[string]int{}
	prev, instructs := "", false
	for _, e := range ledger {
		m, _ := e.(map[string]any)
		target, _ := m["target"].(string)
		if committed {
			r.problems = append(r.problems, "[no replay after commit] an attempt followed a committed one")
		}
		if m["phase"] == "committed" {
			committed = true
		}
		if prev != "" && target != prev {
			transfers++
		}
		// A resume's instruction after a refused prefill is no retry of FAILOVER_SAME_TARGET_RETRIES.
		if target == prev && !instructs {
			perTarget[target]++
		}
		prev, instructs = target, m["reason"] == "prefill_refused"
	}
	if cfg.Budget.MaxAttempts > 0 && transfers > cfg.Budget.MaxAttempts {
		r.problems = append(r.problems, fmt.Sprintf("[budgets respected] %d transfers, FAILOVER_MAX_ATTEMPTS=%d", transfers, cfg.Budget.MaxAttempts))
	}
	calls := 0
	for _, c := range r.calls {
		calls += c
	}
	total := max(len(ledger)+more, calls)
	if !cfg.Budget.Enabled && total > 1 {
		r.problems = append(r.problems, fmt.Sprintf("[budgets respected] %d attempts with FAILOVER_ENABLED=false", total))
	}
	for i, name := range r.names {
		limit := cfg.Budget.SameTargetRetries
		if i < len(cfg.Targets) {
			limit = cfg.Targets[i].Retries
		}
		if perTarget[name] > limit {
			r.problems = append(r.problems, fmt.Sprintf("[budgets respected] %d retries on %s, its limit is %d", perTarget[name], name, limit))
		}
	}
	if r.sc.cancelAfter > 0 && !r.clientOK && r.record["outcome"] != "cancelled" {
		r.problems = append(r.problems, fmt.Sprintf("[no attempt after the client left] outcome %v, want cancelled", r.record["outcome"]))
	}
}

// noReplayCheck checks a stream cut after output (the primary's, which has shown) that was not
// resumed. Output reached the client when it got the primary's bytes or the ledger says the
// first attempt committed. A policy that gives up on the primary before its first token
// (FAILOVER_FIRST_BYTE_TIMEOUT shorter than the drill's pauses) moves on before anything is
// committed, and the next target answering is no replay.
func (r *result) noReplayCheck(shown string) string {
	reached := bytes.Contains(r.body, []byte(shown))
	if !reached && !r.firstCommitted() {
		return ""
	}
	for i := 1; i < len(r.calls); i++ {
		if r.calls[i] > 0 {
			return "a target was called after output reached the client (replay after commit)"
		}
	}
	if !reached {
		return "the client did not get the output that was produced"
	}
	if r.bodyErr == nil && !bytes.Contains(r.body, []byte("stream_interrupted")) {
		return "the client saw a clean end of an interrupted stream"
	}
	return ""
}

// resumed reports whether the ledger shows a resumed stream.
func (r *result) resumed() bool {
	ledger, _ := r.record["ledger"].([]any)
	for _, e := range ledger {
		if m, _ := e.(map[string]any); m["phase"] == "resumed" {
			return true
		}
	}
	return false
}

// resumedCheck checks what the client read of a resumed chat stream: one stream (every chunk
// with the first one's id, one [DONE], last), no error, a clean end, and, when text is set,
// exactly that text: nothing the client had was sent again.
func (r *result) resumedCheck(text string) string {
	var got strings.Builder
	ids := map[string]bool{}
	done, last := 0, ""
	for _, ev := range strings.Split(string(r.body), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			continue
		}
		last = data
		if data == "[DONE]" {
			done++
			continue
		}
		var chunk struct {
			ID      string `json:"id"`
			Error   any    `json:"error"`
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &chunk) != nil || chunk.Error != nil {
			return "the resumed stream carried an error or an event that is not JSON"
		}
		ids[chunk.ID] = true
		for _, c := range chunk.Choices {
			got.WriteString(c.Delta.Content)
		}
	}
	switch {
	case r.bodyErr != nil:
		return "the resumed stream did not end cleanly"
	case len(ids) != 1 || done != 1 || last != "[DONE]":
		return fmt.Sprintf("the client did not read one stream: %d chunk ids, %d [DONE]", len(ids), done)
	case text != "" && got.String() != text:
		return fmt.Sprintf("the client read %q, want %q (replay after commit)", got.String(), text)
	}
	return ""
}

// firstCommitted reports whether the first attempt's ledger entry committed.
func (r *result) firstCommitted() bool {
	if r.record == nil {
		return false
	}
	ledger, _ := r.record["ledger"].([]any)
	if len(ledger) == 0 {
		return false
	}
	m, _ := ledger[0].(map[string]any)
	return m["phase"] == "committed"
}
