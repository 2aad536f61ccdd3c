package classify

// Interruption is what the proxy knows when a committed stream is interrupted with resume on
// (docs/streams.md, Resume a cut stream): what the stream delivered, and what the budgets still permit.
// The proxy looks up the candidate before it asks the retry budget, so that no token goes to a
// resume that cannot happen (as for a transfer).
type Interruption struct {
	Enabled bool // FAILOVER_ENABLED: false allows one attempt, and no resume either
	// Resumable: the request may be resumed (a chat or messages stream, n = 1, no logprobs, no
	// prefill of the client's own), and the stream delivered text and nothing else, and not its end.
	Resumable   bool
	ClientGone  bool // the client left
	Cut         bool // the sidecar is shutting down (draining, or past its timeout): a new generation would be cut too
	ResumesLeft bool // fewer resumes than FAILOVER_RESUME_MAX so far
	Candidate   bool // a candidate marked resumable is usable now
	ElapsedOK   bool // FAILOVER_MAX_ELAPSED allows starting an attempt now
	// RetryBudgetOK: the fleet-wide retry budget admits one more attempt (a resume is counted
	// in it like a transfer).
	RetryBudgetOK bool
}

// ResumeReason says whether an interrupted stream is resumed, and why not.
type ResumeReason uint8

const (
	ResumeOK           ResumeReason = iota // resume it
	ResumeCancelled                        // the client left or the sidecar is shutting down
	ResumeDisabled                         // FAILOVER_ENABLED=false
	ResumeNotResumable                     // the request or what the stream delivered cannot be resumed
	ResumeLimit                            // FAILOVER_RESUME_MAX resumes were made
	ResumeNoCandidate                      // no candidate marked resumable is usable
	ResumeElapsedLimit                     // FAILOVER_MAX_ELAPSED is spent
	ResumeRetryBudget                      // the retry budget is spent
	NumResumeReasons
)

var resumeReasonNames = [NumResumeReasons]string{"ok", "cancelled", "disabled", "not_resumable", "resume_limit", "no_candidate", "elapsed_limit", "retry_budget"}

func (r ResumeReason) String() string {
	if r < NumResumeReasons {
		return resumeReasonNames[r]
	}
	return "unknown"
}

// Resume decides whether an interrupted stream is continued on another attempt: only with
// failover enabled, when it may be, within FAILOVER_RESUME_MAX, with a candidate to go to, and within the elapsed and
// retry budgets, in that order. Otherwise it ends as interrupted, as it would without resume.
func Resume(in Interruption) ResumeReason {
	switch {
	case in.ClientGone || in.Cut:
		return ResumeCancelled
	case !in.Enabled:
		return ResumeDisabled
	case !in.Resumable:
		return ResumeNotResumable
	case !in.ResumesLeft:
		return ResumeLimit
	case !in.Candidate:
		return ResumeNoCandidate
	case !in.ElapsedOK:
		return ResumeElapsedLimit
	case !in.RetryBudgetOK:
		return ResumeRetryBudget
	}
	return ResumeOK
}

// resumeHealth is the health effect of a resume attempt's outcome (Outcome.Resume): as for any
// attempt, except that a 4xx counts neither way. A target that refuses the prefill (a 400,
// an error event that says so) is configured as resumable by mistake, it is not down; and its
// 408 or 429 is no news the request's own attempts would not bring. A key the target refuses
// and a quota it has used up still eject it: they say nothing of the prefill.
func resumeHealth(v Verdict) Verdict {
	if v.Status >= 400 && v.Status < 500 && v.Health != HealthEject {
		v.Health = HealthNone
	}
	return v
}

// ResumeStopped is the verdict for a resume attempt that does not continue the stream: nothing
// of it reaches the client, and nothing follows it, whatever Decide wanted (a retry or a
// transfer is no resume: FAILOVER_RESUME_MAX bounds those). An attempt Decide would have
// committed is a good answer whose first content is not text (a tool call, reasoning, an end
// without text), which the client's stream cannot take: the resume is abandoned, with reason
// not_resumable. Its class and health effect stay as Decide gave them.
func ResumeStopped(v Verdict) Verdict {
	if v.Action == ActionCommit {
		v.Reason = ReasonNotResumable
	}
	v.Action, v.Wait = ActionStop, 0
	return v
}

// PrefillRetryStopped is the verdict for a refused prefill (prefillRetry) whose retry by
// instruction Resume does not allow, for why: the client left or the sidecar is shutting down
// (the attempt is cancelled, as any whose client left), or FAILOVER_MAX_ELAPSED or the retry
// budget is spent. The resume ends there, as one that failed.
func PrefillRetryStopped(v Verdict, why ResumeReason) Verdict {
	v.Action, v.Wait = ActionStop, 0
	switch why {
	case ResumeCancelled:
		return Verdict{Class: ClassCancelled, Action: ActionStop, Reason: ReasonCancelled, Status: 499}
	case ResumeElapsedLimit:
		v.Reason = ReasonElapsedLimit
	case ResumeRetryBudget:
		v.Reason = ReasonRetryBudget
	}
	return v
}
