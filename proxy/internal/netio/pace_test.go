package netio

import "testing"

// The pace a request's first byte leads to, from each pace and the signs seen since the
// request before (pace.go draws the transitions).
func TestPaceNext(t *testing.T) {
	for _, tc := range []struct {
		name  string
		from  pace
		signs signs
		want  pace
	}{
		{"a connection's first request, found at once", paceUnknown, 0, paceUnknown},
		{"a connection's first request, waited for", paceUnknown, signFoundNone, paceUnknown},
		{"after an answer, waited for", paceUnknown, signAnswered | signFoundNone, paceSequential},
		{"after an answer, woke the wait after it", paceUnknown, signAnswered | signWoke, paceSequential},
		{"after an answer, found at once", paceSequential, signAnswered, paceUnknown},
		{"a wait ended by a look, then found at once", paceSequential, signAnswered | signPoked, pacePipelining},
		{"a wait ended by a look, then waited for", paceSequential, signAnswered | signPoked | signFoundNone, paceSequential},
		{"pipelining stays, however the client waits", pacePipelining, signAnswered | signFoundNone | signWoke, pacePipelining},
	} {
		if got := tc.from.next(tc.signs); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
