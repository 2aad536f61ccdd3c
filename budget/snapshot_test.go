package budget

import (
	"fmt"
	"testing"
	"time"
)

// describe renders a snapshot taken at now: "<state> [until +<d from now>] failures <n> ejections <n> [requests <n>]".
func (s Snapshot) describe(now time.Time) string {
	out := s.State.String()
	if !s.Until.IsZero() {
		out += " until +" + s.Until.Sub(now).String()
	}
	out += fmt.Sprintf(" failures %d ejections %d", s.Failures, s.Ejections)
	if q := s.Figures[QuotaRequests]; q.HasRemaining {
		out += fmt.Sprintf(" requests %d", q.Remaining)
	}
	return out
}

// TestSnapshot plays a Health script (step) and reads the snapshot at t0+at: each state with
// the end it gives, and the counts.
func TestSnapshot(t *testing.T) {
	const s = time.Second
	c := &Config{EjectAfter: 3, EjectBase: 30 * s, EjectMax: 300 * s, RateLimitAware: true}
	tests := []struct {
		name  string
		steps []step
		at    time.Duration
		want  string
	}{
		{"a new target is up", nil, 0, "up failures 0 ejections 0"},
		{"failures below the ejection count", []step{{0, "fail", "-"}, {0, "fail", "-"}}, s, "up failures 2 ejections 0"},
		{"ejected: until the ejection ends", []step{{0, "fail", "-"}, {0, "fail", "-"}, {0, "fail", "ejected 30s"}}, 10 * s,
			"ejected until +20s failures 3 ejections 1"},
		{"failures while ejected are not counted", []step{{0, "fail", "-"}, {0, "fail", "-"}, {0, "fail", "ejected 30s"}, {5 * s, "fail", "-"}}, 10 * s,
			"ejected until +20s failures 3 ejections 1"},
		{"a failed probe adds one", []step{{0, "fail", "-"}, {0, "fail", "-"}, {0, "fail", "ejected 30s"}, {31 * s, "avail", "probe"}, {32 * s, "fail", "ejected 1m0s"}},
			33 * s, "ejected until +59s failures 4 ejections 2"},
		{"a credential failure counts as one", []step{{0, "fail", "-"}, {0, "eject", "30s"}}, 10 * s, "ejected until +20s failures 2 ejections 1"},
		{"probing once the ejection ran out", []step{{0, "eject", "30s"}}, 30 * s, "probing failures 1 ejections 1"},
		{"probing while the probe runs", []step{{0, "eject", "30s"}, {31 * s, "avail", "probe"}}, 32 * s, "probing failures 1 ejections 1"},
		{"cooling: until the cooldown ends", []step{{0, "cool 1m", ""}}, 15 * s, "cooling until +45s failures 0 ejections 0"},
		{"ratelimited: until the reset, with the figures", []step{{0, "limit 40s", ""}}, 10 * s,
			"ratelimited until +30s failures 0 ejections 0 requests 0"},
		{"the reset passed: up, the figures stay", []step{{0, "limit 40s", ""}}, 40 * s, "up failures 0 ejections 0 requests 0"},
		{"quota left: up with the figures", []step{{0, "quota", ""}}, 0, "up failures 0 ejections 0 requests 5"},
		{"ejection ran out while rate-limited: ratelimited, until the reset", []step{{0, "eject", "30s"}, {0, "limit 1m", ""}}, 40 * s,
			"ratelimited until +20s failures 1 ejections 1 requests 0"},
		{"ejected and rate-limited: ejected, until the ejection ends", []step{{0, "eject", "30s"}, {0, "limit 1m", ""}}, 10 * s,
			"ejected until +20s failures 1 ejections 1 requests 0"},
		{"a success after an ejection", []step{{0, "eject", "30s"}, {31 * s, "avail", "probe"}, {32 * s, "ok", "restored"}}, 33 * s,
			"up failures 0 ejections 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHealth(c)
			for i, st := range tt.steps {
				if got := st.run(h); got != st.want {
					t.Fatalf("step %d %q: got %q, want %q", i, st.op, got, st.want)
				}
			}
			now := t0.Add(tt.at)
			if got := h.Snapshot(now).describe(now); got != tt.want {
				t.Errorf("snapshot %q, want %q", got, tt.want)
			}
			if got, want := h.Snapshot(now).State, h.State(now); got != want {
				t.Errorf("snapshot state %v, State %v", got, want)
			}
		})
	}
}
