package classify

import "testing"

func TestResume(t *testing.T) {
	all := Interruption{Enabled: true, Resumable: true, ResumesLeft: true, Candidate: true, ElapsedOK: true, RetryBudgetOK: true}
	for _, tc := range []struct {
		name string
		edit func(*Interruption)
		want ResumeReason
	}{
		{"everything allows it", func(*Interruption) {}, ResumeOK},
		{"the client left", func(i *Interruption) { i.ClientGone = true }, ResumeCancelled},
		{"the shutdown cut it", func(i *Interruption) { i.Cut = true }, ResumeCancelled},
		{"FAILOVER_ENABLED=false", func(i *Interruption) { i.Enabled = false }, ResumeDisabled},
		{"not resumable", func(i *Interruption) { i.Resumable = false }, ResumeNotResumable},
		{"FAILOVER_RESUME_MAX reached", func(i *Interruption) { i.ResumesLeft = false }, ResumeLimit},
		{"no candidate", func(i *Interruption) { i.Candidate = false }, ResumeNoCandidate},
		{"FAILOVER_MAX_ELAPSED spent", func(i *Interruption) { i.ElapsedOK = false }, ResumeElapsedLimit},
		{"the retry budget spent", func(i *Interruption) { i.RetryBudgetOK = false }, ResumeRetryBudget},
		// The order: a budget is only the reason when everything before it allowed the resume,
		// so a token is never spent on a resume that could not happen.
		{"no candidate before the budgets", func(i *Interruption) { i.Candidate, i.ElapsedOK, i.RetryBudgetOK = false, false, false }, ResumeNoCandidate},
		{"the limit before the candidate", func(i *Interruption) { i.ResumesLeft, i.Candidate = false, false }, ResumeLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := all
			tc.edit(&in)
			if got := Resume(in); got != tc.want {
				t.Fatalf("Resume = %v, want %v", got, tc.want)
			}
		})
	}
}

// A resume attempt's outcome has the health effect of any attempt's, except a 4xx: a target
// that refuses the prefill is misconfigured, not down.
func TestDecideResumeHealth(t *testing.T) {
	p := defaultPolicy()
	for _, tc := range []struct {
		name         string
		out          Outcome
		plain, resum Health
	}{
		{"400 refusing the prefill", Outcome{Kind: KindResponse, Status: 400, Body: []byte(openAI400)}, HealthNone, HealthNone},
		{"400 error event", Outcome{Kind: KindStreamError, Body: []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"final assistant content cannot end with trailing whitespace"}}`)}, HealthNone, HealthNone},
		{"429", Outcome{Kind: KindResponse, Status: 429, Body: []byte(openAIRate)}, HealthFailure, HealthNone},
		{"408", Outcome{Kind: KindResponse, Status: 408}, HealthFailure, HealthNone},
		{"quota still ejects", Outcome{Kind: KindResponse, Status: 429, Body: []byte(openAIQuota)}, HealthEject, HealthEject},
		{"own key refused still ejects", Outcome{Kind: KindResponse, Status: 401, Body: []byte(anthropicAuth), OwnKey: true}, HealthEject, HealthEject},
		{"503", Outcome{Kind: KindResponse, Status: 503, Body: []byte(openAI503)}, HealthFailure, HealthFailure},
		{"overloaded event", Outcome{Kind: KindStreamError, Body: []byte(anthropicOver)}, HealthFailure, HealthFailure},
		{"timeout", Outcome{Kind: KindTransport, Transport: TransportTimeout}, HealthSilent, HealthSilent},
		{"reset", Outcome{Kind: KindTransport, Transport: TransportReset}, HealthFailure, HealthFailure},
		{"empty stream", Outcome{Kind: KindStreamEmpty}, HealthFailure, HealthFailure},
		{"content commits", Outcome{Kind: KindStreamCommit, Status: 200}, HealthSuccess, HealthSuccess},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.out
			plain := p.Decide(&o)
			o.Resume = true
			resumed := p.Decide(&o)
			if plain.Health != tc.plain || resumed.Health != tc.resum {
				t.Fatalf("health %v, as a resume %v; want %v, %v", plain.Health, resumed.Health, tc.plain, tc.resum)
			}
			resumed.Health = plain.Health
			if resumed != plain {
				t.Fatalf("a resume changed more than the health: %+v, want %+v", resumed, plain)
			}
		})
	}
}

// A resume attempt that does not continue the stream stops: one that failed keeps its class,
// reason and health; one that would have committed (its first content was not text) says the
// resume was abandoned, not that it went well (docs/operations.md, The request record).
func TestResumeStopped(t *testing.T) {
	p := defaultPolicy()
	for _, tc := range []struct {
		name   string
		out    Outcome
		class  Class
		reason Reason
		health Health
	}{
		{"content that is not text", Outcome{Kind: KindStreamCommit, Status: 200}, ClassNone, ReasonNotResumable, HealthSuccess},
		{"503", Outcome{Kind: KindResponse, Status: 503, Body: []byte(openAI503)}, ClassServerError, ReasonRetryableStatus, HealthFailure},
		{"400 refusing the prefill", Outcome{Kind: KindResponse, Status: 400, Body: []byte(openAI400)}, ClassClientError, ReasonNotRetryable, HealthNone},
		{"the client left", Outcome{Kind: KindStreamCommit, Status: 200, ClientGone: true}, ClassCancelled, ReasonCancelled, HealthNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.out
			o.Resume = true
			v := ResumeStopped(p.Decide(&o))
			if v.Action != ActionStop || v.Wait != 0 || v.Class != tc.class || v.Reason != tc.reason || v.Health != tc.health {
				t.Fatalf("%+v, want stop, class %v, reason %v, health %v", v, tc.class, tc.reason, tc.health)
			}
		})
	}
}
