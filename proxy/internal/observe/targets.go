package observe

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llm-failover/failover/budget"
)

// TargetTable is the live target table (docs/operations.md, The target table): GET /targets
// on the metrics listener, and what `failover targets` prints. It holds no secret: no key, no
// header, and the URL masked as -check masks it. The proxy builds it from its targets' state;
// this package renders it (JSON, WriteTargetTable).
type TargetTable struct {
	// Time is the sidecar's policy time when the table was taken: each Until is against it.
	Time    time.Time     `json:"time"`
	Targets []TargetState `json:"targets"`
}

// TargetState is one target's line in the table.
type TargetState struct {
	Name string `json:"name"`
	URL  string `json:"url"` // the base URL, credentials and query values other than api-version masked
	// State is up, ejected, probing, cooling or ratelimited (docs/decisions.md, Health).
	State string `json:"state"`
	// Until is when the state ends by itself (an ejection, a cooldown, a rate limit); absent
	// for up and probing.
	Until time.Time `json:"until,omitzero"`
	// ConsecutiveFailures are the health failures since the target last succeeded, towards
	// FAILOVER_EJECT_AFTER: an ejected target shows the ones that ejected it.
	ConsecutiveFailures int    `json:"consecutive_failures"`
	Ejections           uint64 `json:"ejections"`
	// LastError is the class of the target's last failed attempt (docs/operations.md, Metrics:
	// the attempt classes), and LastErrorAt when it ended; absent before any.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// AnswerLatencyMS is the recent time to response headers of the target's answers, in
	// milliseconds, whatever their status; absent before any answer. It is what the
	// LATENCY column shows.
	AnswerLatencyMS float64 `json:"answer_latency_ms,omitzero"`
	// LatencyMS is the recent time to response headers that least-latency ranks by, in
	// milliseconds: a failed attempt counts as at least FAILOVER_CONNECT_TIMEOUT, so that a
	// target failing fast is not the favourite. Absent before any attempt.
	LatencyMS float64 `json:"latency_ms,omitzero"`
	// RateLimit is what the target's last answer that reported quota said, by quota
	// (requests, tokens, input_tokens, output_tokens); absent before any.
	RateLimit map[string]QuotaState `json:"ratelimit,omitempty"`
	// PrefillRefused lists the models the target refused a prefill for since start, which
	// resumes in the auto form ask by instruction (docs/streams.md, Resume a cut stream);
	// absent before any.
	PrefillRefused []string `json:"prefill_refused,omitempty"`
	// HedgeDelayMS is how long an attempt on the target runs before a hedge may start beside
	// it, in milliseconds (docs/streams.md, Hedging): FAILOVER_HEDGE_AFTER's fixed delay, or the
	// percentile of the target's recent times to commit it names. Absent when hedging is off.
	HedgeDelayMS float64 `json:"hedge_delay_ms,omitzero"`
}

// QuotaState is one quota as an answer reported it.
type QuotaState struct {
	Remaining int64     `json:"remaining"`
	Limit     int64     `json:"limit,omitzero"`
	Reset     time.Time `json:"reset,omitzero"` // when it is full again, in policy time
}

// JSON renders the table as GET /targets serves it: indented JSON and a final newline.
func (t *TargetTable) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteTargetTable prints the table for a person (`failover targets`): one line per target,
// times left counted from the table's Time. LATENCY is the latency of the target's answers,
// "-" before any: a failed attempt's charge for least-latency says nothing a person can read.
func WriteTargetTable(w io.Writer, table *TargetTable) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tSTATE\tFOR\tFAILURES\tEJECTIONS\tLAST ERROR\tLATENCY\tQUOTA LEFT")
	for _, t := range table.Targets {
		lastError := "-"
		if t.LastError != "" {
			lastError = t.LastError + " " + ago(table.Time.Sub(t.LastErrorAt)) + " ago"
		}
		latency := "-"
		if d := time.Duration(t.AnswerLatencyMS * float64(time.Millisecond)); d >= time.Millisecond {
			latency = roundDuration(d).String()
		} else if d > 0 {
			latency = d.Round(time.Microsecond).String() // loopback
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", t.Name, t.State, timeLeft(table.Time, t.Until),
			t.ConsecutiveFailures, t.Ejections, lastError, latency, quotaText(table.Time, t.RateLimit))
	}
	return tw.Flush()
}

// timeLeft renders how long until runs past now: "-" when it is zero.
func timeLeft(now, until time.Time) string {
	if until.IsZero() {
		return "-"
	}
	return ago(until.Sub(now))
}

// ago renders a span for a person, rounded to what matters at its size.
func ago(d time.Duration) string { return roundDuration(max(d, 0)).String() }

// roundDuration rounds d to a millisecond below a second, to a tenth of a second below a
// minute, and to a second above.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// quotaText renders the reported quotas: "requests 0/500 full in 2m59s, tokens 29950/30000".
func quotaText(now time.Time, quotas map[string]QuotaState) string {
	var parts []string
	for q := range budget.NumQuotas {
		qs, ok := quotas[q.String()]
		if !ok {
			continue
		}
		p := fmt.Sprintf("%s %d", q, qs.Remaining)
		if qs.Limit > 0 {
			p += fmt.Sprintf("/%d", qs.Limit)
		}
		if qs.Reset.After(now) {
			p += " full in " + ago(qs.Reset.Sub(now))
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
