package classify

import "time"

// Kind says what an Outcome describes.
type Kind uint8

const (
	// KindResponse is a non-streaming HTTP response: Status and Body (possibly only its
	// first bytes, when it was larger than the response buffer).
	KindResponse Kind = iota
	// KindStreamCommit is a stream about to commit (business content seen or the peek limit
	// reached): Status is 200 and Body holds the complete events judged so far (up to the
	// decisive one, or those within the peek limit).
	KindStreamCommit
	// KindStreamError is an error event that arrived before any business content: Body is
	// its data. Its status comes from the payload (docs/streams.md, The status of an error event), else 502.
	KindStreamError
	// KindStreamEmpty is a stream that ended ([DONE] or EOF) before any business content.
	KindStreamEmpty
	// KindTransport is an attempt that produced no usable HTTP answer: Transport says why.
	KindTransport
	// KindInterrupted is a committed response that failed after bytes reached the client.
	KindInterrupted
	// KindFinished is a committed response that completed.
	KindFinished
)

// Transport is why an attempt had no HTTP answer (or lost it before commit).
type Transport uint8

const (
	TransportNone    Transport = iota
	TransportRefused           // connection refused
	TransportReset             // reset or closed by the peer
	TransportDNS               // the host did not resolve
	TransportTLS               // handshake or certificate failure
	TransportTimeout           // connect, first-byte, idle or attempt timeout
	TransportOther             // anything else on the wire (garbage instead of HTTP, ...)
)

// Class names what an outcome was. It labels ledger entries and metrics.
type Class uint8

const (
	ClassNone          Class = iota // a good answer
	ClassRefused                    // connection refused
	ClassReset                      // connection reset or closed early
	ClassDNS                        // name resolution failed
	ClassTLS                        // TLS failed
	ClassTimeout                    // a timeout before the answer
	ClassNetwork                    // another transport failure (garbage, protocol error)
	ClassRateLimited                // 429 without a quota code
	ClassQuota                      // quota or billing exhausted
	ClassAuth                       // 401 or 403
	ClassServerError                // 5xx
	ClassClientError                // other 4xx
	ClassRedirect                   // 3xx listed in FAILOVER_RETRY_ON_STATUSES
	ClassEmptyResponse              // 200 with an empty body, or a stream without content
	ClassErrorBody                  // 200 whose body is an error
	ClassNoChoices                  // chat completion with "choices": []
	ClassSuccessRule                // a success rule matched a 200
	ClassCancelled                  // the client went away
	ClassInterrupted                // failed after commit
	ClassBadResponse                // an answer that is no HTTP answer to the request (an unasked-for 101)
	ClassContextWindow              // the prompt does not fit the model's context window
	ClassSilentClose                // closed or reset without a byte of answer, after a silence (Policy.WithConnectTimeout)
	NumClasses                      // number of classes, for pre-created metrics
)

var classNames = [NumClasses]string{
	"ok", "refused", "reset", "dns", "tls", "timeout", "network", "rate_limited", "quota", "auth",
	"server_error", "client_error", "redirect", "empty_response", "error_body", "no_choices", "success_rule",
	"cancelled", "interrupted", "bad_response", "context_window", "silent_close",
}

func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return "unknown"
}

// Action is what the proxy does next with an attempt's outcome.
type Action uint8

const (
	ActionCommit   Action = iota // send this answer to the client
	ActionRetry                  // the same target again, after a wait
	ActionTransfer               // the next candidate target
	ActionStop                   // this answer (or the last error) goes back; nothing more is tried
	NumActions
)

var actionNames = [NumActions]string{"commit", "retry", "transfer", "stop"}

func (a Action) String() string {
	if a < NumActions {
		return actionNames[a]
	}
	return "unknown"
}

// Health is the effect an outcome has on the target's passive health.
type Health uint8

const (
	HealthNone    Health = iota // does not count (4xx the caller caused, cancellation, ...)
	HealthSuccess               // resets consecutive failures
	HealthFailure               // counts towards ejection
	HealthEject                 // ejects at once (the target's credentials are rejected or its quota is gone)
	// HealthSilent is a failure by timing out (connect, first byte, attempt) or by a silent close: it counts
	// as HealthFailure does, and an ejection it causes is the silent kind, whose live probes are spaced
	// further apart because each one keeps a request waiting (docs/decisions.md, Health).
	HealthSilent
)

// Reason is why the verdict's action was chosen, for the ledger.
type Reason uint8

const (
	ReasonOK                Reason = iota // a good answer commits
	ReasonNoResponse                      // no HTTP answer: always recoverable
	ReasonRetryableStatus                 // status in FAILOVER_RETRY_ON_STATUSES
	ReasonPhrase                          // FAILOVER_RETRY_ON_ERRORS matched
	ReasonCredential                      // the target's own key was refused
	ReasonQuota                           // the target's quota is exhausted
	ReasonEmpty                           // a 200 or a stream without an answer
	ReasonRetryAfter                      // Retry-After longer than FAILOVER_RETRY_AFTER_MAX
	ReasonSuccessRule                     // a success rule matched
	ReasonStopRule                        // a stop rule matched
	ReasonNotRetryable                    // nothing says this error is recoverable
	ReasonCallerCredentials               // 401/403 to the client's own credentials
	ReasonCancelled                       // the client went away
	ReasonCommitted                       // bytes already reached the client
	ReasonDisabled                        // FAILOVER_ENABLED=false
	ReasonTransferLimit                   // FAILOVER_MAX_ATTEMPTS reached
	ReasonElapsedLimit                    // FAILOVER_MAX_ELAPSED reached
	ReasonRetryBudget                     // the fleet-wide retry budget is spent
	ReasonExhausted                       // a transfer found no candidate left (set by the proxy's sweep)
	ReasonContextWindow                   // the prompt is too long for the model: only a different model can help
	ReasonNotResumable                    // a resume attempt's continuation did not start with text (ResumeStopped)
	ReasonPrefillRefused                  // a resume attempt's prefill was refused: asked again by instruction (prefillRetry)
	NumReasons
)

var reasonNames = [NumReasons]string{
	"ok", "no_response", "retryable_status", "phrase", "credential", "quota", "empty", "retry_after",
	"success_rule", "stop_rule", "not_retryable", "caller_credentials", "cancelled", "committed",
	"disabled", "transfer_limit", "elapsed_limit", "retry_budget", "exhausted", "context_window",
	"not_resumable", "prefill_refused",
}

func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Outcome is everything the decision needs to know about one attempt. The proxy fills it;
// Decide reads it and keeps nothing. Body is only read during the call.
type Outcome struct {
	Kind      Kind
	Status    int       // HTTP status; 0 when there was none
	Transport Transport // KindTransport: why there was no answer
	Body      []byte    // see Kind
	// Silence, for KindTransport: how long the target had been silent when it closed or reset
	// the connection: since the request was sent, when no byte of answer came; since the last
	// bytes of the answer, when it began but had not committed (0 when the request was not sent
	// whole, or the connection ended some other way).
	Silence time.Duration
	// Truncated: Body holds only the first bytes of a response larger than the buffer, or
	// none of it (an image, which commits at headers). A success status then commits: the
	// checks on a 200's body need the whole body, and past the buffer it is streamed through.
	Truncated bool
	// NoBody: the response cannot have a body (the answer to a HEAD request, a 204 or a 304,
	// RFC 9110 sections 9.3.2, 15.3.5 and 15.4.5), so its emptiness says nothing: the checks on
	// a 200's body (empty, error document, no choices) and the success rules do not apply.
	NoBody bool

	Chat        bool // chat completions: a 200 without choices is a failure
	Image       bool // image generation: success rules never apply
	OwnKey      bool // the target sends its own key, so a 401/403 is the target's, not the caller's
	RetriesLeft bool // the target has same-target retries left

	RetryAfter    time.Duration // the attempt's Retry-After / retry-after-ms, when HasRetryAfter
	HasRetryAfter bool

	ClientGone bool // the client went away
	Committed  bool // bytes already reached the client
	// Resume: the attempt continues a cut stream (docs/streams.md, Resume a cut stream); a 4xx has no
	// health effect (resumeHealth).
	Resume bool
	// PrefillAsked: a resume attempt that asked for the continuation as a prefill in the auto
	// form, which may still ask by instruction: a refusal of the prefill (PrefillRefused) is
	// asked again at once on the same target (prefillRetry).
	PrefillAsked bool
}

// Verdict is the decision for one attempt's outcome.
type Verdict struct {
	Class  Class
	Action Action
	Health Health
	Reason Reason
	// Status is what the client gets if this outcome is the final answer: the upstream's
	// status, the status an error body or event carries, 502 for a broken answer, 504 for a
	// timeout, 499 for a client that left.
	Status int
	// Transient is true when the class may be retried on the same target.
	Transient bool
	// Wait, before a retry, is the upstream's Retry-After when it asked for one within
	// FAILOVER_RETRY_AFTER_MAX (0: use the backoff).
	Wait time.Duration
	// Cooldown, when positive, is how long the target must be skipped (a Retry-After longer
	// than FAILOVER_RETRY_AFTER_MAX).
	Cooldown time.Duration
	// NewModel, on a transfer, restricts it to candidates that send a different model than the
	// attempt did (a context-window error: the same model cannot take the prompt anywhere).
	NewModel bool
}

// Allowance is what the budgets still permit, measured by the proxy through package budget
// when a verdict wants a retry or a transfer.
type Allowance struct {
	Enabled       bool // FAILOVER_ENABLED
	RetryFits     bool // the elapsed budget still fits this retry after its wait
	TransferFits  bool // FAILOVER_MAX_ATTEMPTS allows one more transfer
	ElapsedOK     bool // the elapsed budget allows starting an attempt now
	RetryBudgetOK bool // the fleet-wide retry budget admits one more retry or transfer
	// TargetOut: this outcome took the target out (it ejected it, or cooled it down), so a
	// retry would send the request to a target every other request now skips.
	TargetOut bool
}

// NoCandidate is the verdict for a transfer that found no candidate left (the proxy's sweep
// knows; the decision is here). A transfer the policy chose ends the request as exhausted. A
// transfer Limit made of a retry whose wait did not fit FAILOVER_MAX_ELAPSED (retryRefused) was
// ended by that budget: without it the retry would have run.
//
// A context-window error with no candidate that sends a different model stops as it is: the
// client gets the error unchanged, which no other target could have answered better.
func NoCandidate(v Verdict, retryRefused bool) Verdict {
	if v.NewModel {
		v.Action, v.Wait = ActionStop, 0
		return v
	}
	v.Action, v.Wait, v.Reason = ActionStop, 0, ReasonExhausted
	if retryRefused {
		v.Reason = ReasonElapsedLimit
	}
	return v
}

// Limit applies the budgets to a verdict that wants a retry or a transfer. A retry that the
// elapsed budget cannot wait for, or on a target this outcome took out, becomes a transfer
// (which starts at once); a transfer beyond
// a budget becomes a stop, and the current answer goes back. Other verdicts pass unchanged.
func Limit(v Verdict, a Allowance) Verdict {
	if v.Action != ActionRetry && v.Action != ActionTransfer {
		return v
	}
	if !a.Enabled {
		v.Action, v.Reason = ActionStop, ReasonDisabled
		return v
	}
	if v.Action == ActionRetry && (!a.RetryFits || a.TargetOut) {
		v.Action, v.Wait = ActionTransfer, 0
	}
	if v.Action == ActionTransfer {
		switch {
		case !a.TransferFits:
			v.Action, v.Reason = ActionStop, ReasonTransferLimit
			return v
		case !a.ElapsedOK:
			v.Action, v.Reason = ActionStop, ReasonElapsedLimit
			return v
		}
	}
	if !a.RetryBudgetOK {
		v.Action, v.Reason = ActionStop, ReasonRetryBudget
	}
	return v
}
