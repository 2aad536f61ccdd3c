// Package classify is the one place that decides what an attempt's outcome means: its class,
// whether the proxy commits it, retries the same target, transfers to the next one or stops,
// and the effect on the target's health (docs/decisions.md, The decision order). It holds the status list, the error
// phrases, the stop and success rules and error-body extraction.
//
// It is pure: no I/O, no clock, no goroutines, and it imports nothing of this module. The proxy
// describes an attempt as an Outcome, asks Decide for a Verdict, and measures the budgets only
// when the verdict wants to spend them (Limit). No other code decides retry or failover, nor
// whether a cut stream is resumed (Resume) or a slow attempt hedged (Hedge).
package classify

import (
	"fmt"
	"regexp"
	"time"
)

// Config is the FAILOVER_* section this package owns (the prefix is applied by the caller).
// Stop and success rules are indexed groups, read by the caller into Rules.
type Config struct {
	RetryOnStatuses StatusSet `env:"RETRY_ON_STATUSES"`
	RetryOnErrors   Phrases   `env:"RETRY_ON_ERRORS"`
}

// Policy is the immutable decision policy. Safe for concurrent use.
type Policy struct {
	statuses      StatusSet
	phrases       Phrases
	stop          []Rule
	success       []Rule
	stopFilter    *prefilter
	successFilter *prefilter
	retryAfterMax time.Duration
	silentClose   time.Duration // the least silence that makes a close a silent failure (WithConnectTimeout)
}

// NewPolicy builds the policy. Unset lists take their defaults (DefaultStatuses and DefaultPhrases);
// "none" configures an empty list. retryAfterMax is FAILOVER_RETRY_AFTER_MAX.
func NewPolicy(c Config, stop, success []Rule, retryAfterMax time.Duration) *Policy {
	p := &Policy{statuses: c.RetryOnStatuses, phrases: c.RetryOnErrors, stop: stop, success: success, retryAfterMax: retryAfterMax,
		silentClose: SilentCloseAfter}
	if !p.statuses.set {
		p.statuses, _ = ParseStatusSet(DefaultStatuses)
	}
	if !p.phrases.set {
		p.phrases, _ = ParsePhrases(DefaultPhrases)
	}
	p.stopFilter = newPrefilter(patternsOf(stop))
	p.successFilter = newPrefilter(patternsOf(success))
	return p
}

// SilentCloseAfter is the silence from which a target that closes or resets the connection before
// its answer commits has failed silently (class silent_close): after the request was sent with no
// byte of answer, or after the last bytes of an answer that began (Outcome.Silence). Unless
// FAILOVER_CONNECT_TIMEOUT is shorter (WithConnectTimeout).
const SilentCloseAfter = time.Second

// WithConnectTimeout returns a copy of the policy for FAILOVER_CONNECT_TIMEOUT d (0: none): a
// close or reset before commit is a silent failure from min(SilentCloseAfter, d) of silence. An operator who allows a connection that little
// time expects no target to stay silent longer before it closes.
func (p *Policy) WithConnectTimeout(d time.Duration) *Policy {
	c := *p
	c.silentClose = SilentCloseAfter
	if d > 0 && d < c.silentClose {
		c.silentClose = d
	}
	return &c
}

func patternsOf(rules []Rule) []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(rules))
	for i := range rules {
		out[i] = rules[i].Pattern
	}
	return out
}

// DefaultStatuses is FAILOVER_RETRY_ON_STATUSES when unset.
const DefaultStatuses = "408,429,5xx"

// Decide returns the verdict for one attempt's outcome, in the order docs/decisions.md's "The decision
// order" gives: client gone, already committed, stop rules, success rules, no status,
// credentials and quota, context window, statuses, phrases, anything else stops. An answer without content (an empty body or stream, a chat
// completion without choices; not a response that cannot have a body, Outcome.NoBody) is
// recoverable whatever the status list says, as an attempt without an answer is. A
// recoverable outcome becomes a retry while the target has retries left and the class is
// transient, a transfer otherwise; budgets are applied after, by Limit. A resume attempt's
// 4xx has no health effect (Outcome.Resume), and a refused prefill that may be asked again by
// instruction is (Outcome.PrefillAsked). Decide never allocates.
func (p *Policy) Decide(o *Outcome) Verdict {
	if o.Resume {
		v := resumeHealth(p.decide(o))
		if o.PrefillAsked && !o.ClientGone && (o.Kind == KindResponse || o.Kind == KindStreamError) && PrefillRefused(v.Status, o.Body) {
			return prefillRetry(v)
		}
		return v
	}
	return p.decide(o)
}

func (p *Policy) decide(o *Outcome) Verdict {
	if o.ClientGone {
		return Verdict{Class: ClassCancelled, Action: ActionStop, Reason: ReasonCancelled, Status: 499}
	}
	if o.Committed {
		if o.Kind == KindInterrupted {
			return Verdict{Class: ClassInterrupted, Action: ActionStop, Health: HealthFailure, Reason: ReasonCommitted, Status: o.Status}
		}
		return Verdict{Class: ClassNone, Action: ActionStop, Health: HealthSuccess, Reason: ReasonCommitted, Status: o.Status}
	}

	switch o.Kind {
	case KindTransport:
		v := Verdict{Class: transportClass(o.Transport), Health: HealthFailure, Reason: ReasonNoResponse, Status: 502}
		switch {
		case o.Transport == TransportTimeout:
			// A silent target is never waited on twice: a timeout transfers at once.
			v.Status, v.Health = 504, HealthSilent
		case o.Transport == TransportReset && o.Silence > 0 && o.Silence >= p.silentClose:
			// A target that kept the request in silence and then closed or reset the
			// connection (a load balancer or an overloaded server ending what it cannot serve)
			// is as silent as one that timed out, and a retry would wait the silence again: it
			// transfers at once and counts as a timeout (docs/decisions.md, Health).
			v.Class, v.Health = ClassSilentClose, HealthSilent
		}
		// Only a refused or reset connection is worth the same target again, and a reset only
		// when it came quickly: a handshake or certificate failure, a name that did not
		// resolve or garbage for an answer will not heal within a backoff.
		v.Transient = v.Class == ClassRefused || v.Class == ClassReset
		return p.recoverable(o, v)
	case KindStreamEmpty:
		return p.emptyAnswer(o, ClassEmptyResponse)
	case KindStreamError:
		parser := parsers.Get()
		info := ExtractError(parser, o.Body)
		status := info.Status
		if status == 0 {
			status = 502
		}
		v := p.errorStatus(o, status, &info, o.Body)
		parsers.Put(parser)
		return v
	case KindInterrupted, KindFinished:
		// Only reachable without Committed set: treat as the committed case.
		c := *o
		c.Committed = true
		return p.Decide(&c)
	}

	// A response: KindResponse or KindStreamCommit.
	if o.Status < 200 || o.Status > 599 {
		// An informational answer as the final one (fasthttp reads past 100 and 103, so this is
		// a 101 nobody asked for), or a status HTTP does not have (999): the target did not
		// answer the request, as garbage would not.
		v := Verdict{Class: ClassBadResponse, Health: HealthFailure, Reason: ReasonNoResponse, Status: 502, Transient: true}
		return p.recoverable(o, v)
	}
	if o.Status >= 300 && o.Status < 400 && p.statuses.Has(o.Status) {
		// A redirect is no error, so stop rules, credentials and phrases (all about errors)
		// do not apply; but the operator listed it, so it fails over like any listed status.
		// Never on the same target (not transient), which would only redirect again.
		// Unlisted, it commits: the client follows it.
		v := Verdict{Class: ClassRedirect, Health: statusHealth(o.Status), Reason: ReasonRetryableStatus, Status: o.Status}
		return p.recoverable(o, v)
	}
	if o.Status >= 400 {
		parser := parsers.Get()
		info := ExtractError(parser, o.Body)
		v := p.errorStatus(o, o.Status, &info, o.Body)
		parsers.Put(parser)
		return v
	}
	if o.Truncated || o.NoBody {
		// Past the buffer, or with no body at all, there is nothing the body checks could read.
		return Verdict{Class: ClassNone, Action: ActionCommit, Health: HealthSuccess, Reason: ReasonOK, Status: o.Status}
	}
	if o.Status == 200 && o.Kind == KindResponse {
		parser := parsers.Get()
		class, status := fakeSuccess(parser, o.Body, o.Chat)
		switch class {
		case ClassNone:
		case ClassErrorBody:
			info := ExtractError(parser, o.Body)
			v := p.errorBody(o, status, &info)
			parsers.Put(parser)
			return v
		default:
			parsers.Put(parser)
			return p.emptyAnswer(o, class)
		}
		parsers.Put(parser)
	}
	if o.Status == 200 && !o.Image && p.matchSuccess(o.Body) {
		return Verdict{Class: ClassSuccessRule, Action: ActionTransfer, Reason: ReasonSuccessRule, Status: 200}
	}
	return Verdict{Class: ClassNone, Action: ActionCommit, Health: HealthSuccess, Reason: ReasonOK, Status: o.Status}
}

// errorBody handles a 200 whose body is an error document: it is an error with the status it
// carries (else 502) and goes through the same rules as an upstream error.
func (p *Policy) errorBody(o *Outcome, status int, info *ErrorInfo) Verdict {
	v := p.errorStatus(o, status, info, o.Body)
	if v.Class == ClassServerError || v.Class == ClassClientError {
		v.Class = ClassErrorBody
	}
	if v.Reason == ReasonRetryableStatus {
		v.Reason = ReasonEmpty
	}
	return v
}

// emptyAnswer handles a 200 or a stream that carried no answer at all (class empty_response or
// no_choices). The client would get a 502 of the sidecar's own, so stop rules hold for it as for
// any 502. But FAILOVER_RETRY_ON_STATUSES names statuses upstreams send, and this one no upstream
// sent: like an attempt without an answer (rule 5), it is recoverable whatever the list says
// (docs/decisions.md, The decision order: an empty stream is recoverable), transient and a health failure, as a 5xx is.
func (p *Policy) emptyAnswer(o *Outcome, class Class) Verdict {
	v := Verdict{Class: class, Health: HealthFailure, Reason: ReasonEmpty, Status: 502}
	if p.matchStop(v.Status, o.Body) {
		v.Action, v.Reason = ActionStop, ReasonStopRule
		return v
	}
	v.Transient = true
	return p.recoverable(o, v)
}

// errorStatus decides an error answer with this status (steps 3, 5a, 6, 7 and 8).
func (p *Policy) errorStatus(o *Outcome, status int, info *ErrorInfo, body []byte) Verdict {
	v := Verdict{Class: statusClass(status), Status: status, Health: statusHealth(status)}
	if p.matchStop(status, body) {
		v.Action, v.Reason = ActionStop, ReasonStopRule
		return v
	}
	switch {
	case (status == 401 || status == 403) && o.OwnKey:
		v.Class, v.Health, v.Reason = ClassAuth, HealthEject, ReasonCredential
		v.Action = ActionTransfer
		return v
	case status == 401 || status == 403:
		v.Class, v.Health = ClassAuth, HealthNone
		v.Action, v.Reason = ActionStop, ReasonCallerCredentials
		return v
	case status == 429 && isQuota(info):
		v.Class, v.Health, v.Reason = ClassQuota, HealthEject, ReasonQuota
		v.Action = ActionTransfer
		return v
	case status != 408 && status != 429 && isContextWindow(info):
		// Rule 5b: the same model cannot take this prompt on any target; a candidate that
		// sends another (bigger) model may. Not the target's fault: no health effect.
		v.Class, v.Health, v.Reason = ClassContextWindow, HealthNone, ReasonContextWindow
		v.Action, v.NewModel = ActionTransfer, true
		return v
	}
	switch {
	case p.statuses.Has(status):
		v.Reason = ReasonRetryableStatus
	case p.phrases.Match(status, info.Code, info.Type, info.Message):
		v.Reason = ReasonPhrase
	default:
		v.Action, v.Reason = ActionStop, ReasonNotRetryable
		return v
	}
	v.Transient = status == 429 || status == 408 || status >= 500
	return p.recoverable(o, v)
}

// recoverable turns a recoverable verdict into a retry or a transfer, honouring Retry-After.
func (p *Policy) recoverable(o *Outcome, v Verdict) Verdict {
	if o.HasRetryAfter && o.RetryAfter > p.retryAfterMax {
		// The target asked for more patience than we have: leave it now, and let following
		// requests skip it for as long as it asked.
		v.Action, v.Reason, v.Cooldown = ActionTransfer, ReasonRetryAfter, o.RetryAfter
		return v
	}
	if v.Transient && o.RetriesLeft {
		v.Action = ActionRetry
		if o.HasRetryAfter {
			v.Wait = o.RetryAfter
		}
		return v
	}
	v.Action = ActionTransfer
	return v
}

// matchStop reports whether a stop rule holds for this error. Patterns run only when the
// prefilter says they can match (one pass over the body for the whole group).
func (p *Policy) matchStop(status int, body []byte) bool {
	var candidates uint64
	filtered := false
	for i := range p.stop {
		r := &p.stop[i]
		if !r.Statuses.Empty() && !r.Statuses.Has(status) {
			continue
		}
		if r.Pattern == nil {
			return true
		}
		if !filtered {
			candidates, filtered = p.stopFilter.candidates(body), true
		}
		if candidates&(1<<i) != 0 && r.Pattern.Match(body) {
			return true
		}
	}
	return false
}

func (p *Policy) matchSuccess(body []byte) bool {
	if len(p.success) == 0 {
		return false
	}
	candidates := p.successFilter.candidates(body)
	for i := range p.success {
		if candidates&(1<<i) != 0 && p.success[i].Pattern.Match(body) {
			return true
		}
	}
	return false
}

func transportClass(t Transport) Class {
	switch t {
	case TransportRefused:
		return ClassRefused
	case TransportReset:
		return ClassReset
	case TransportDNS:
		return ClassDNS
	case TransportTLS:
		return ClassTLS
	case TransportTimeout:
		return ClassTimeout
	}
	return ClassNetwork
}

func statusClass(status int) Class {
	switch {
	case status == 429:
		return ClassRateLimited
	case status == 401 || status == 403:
		return ClassAuth
	case status == 408:
		return ClassTimeout
	case status >= 500:
		return ClassServerError
	case status >= 400:
		return ClassClientError
	}
	return ClassNone
}

// statusHealth: 4xx other than 401/403/408/429 do not count against a target; 5xx, 408 and 429
// do. (401/403 are credential failures, decided with the key's owner in errorStatus.)
func statusHealth(status int) Health {
	switch {
	case status >= 500, status == 408, status == 429:
		return HealthFailure
	case status == 401 || status == 403:
		return HealthFailure
	}
	return HealthNone
}

// Validate returns one error per bad setting, naming the variable. Parsing errors are reported
// by the reader; this checks what parses but cannot work.
func (c *Config) Validate() []error {
	var errs []error
	for st := 100; st < 300; st++ {
		if c.RetryOnStatuses.Has(st) {
			errs = append(errs, fmt.Errorf("FAILOVER_RETRY_ON_STATUSES=%q: %d is not an error status; "+
				"only 3xx-5xx can fail over (a 200 that is really a failure is caught by FAILOVER_SUCCESS_RULE_<i>_PATTERN)",
				c.RetryOnStatuses.text, st))
			break
		}
	}
	return errs
}

// Describe renders the effective policy, one setting per line, for `failover -check`.
func (p *Policy) Describe() []string {
	lines := []string{
		"FAILOVER_RETRY_ON_STATUSES=" + p.statuses.text,
		"FAILOVER_RETRY_ON_ERRORS=" + p.phrases.text,
	}
	for i := range p.stop {
		lines = append(lines, fmt.Sprintf("FAILOVER_STOP_RULE_%d: %s", i, p.stop[i].describe()))
	}
	for i := range p.success {
		lines = append(lines, fmt.Sprintf("FAILOVER_SUCCESS_RULE_%d: %s", i, p.success[i].describe()))
	}
	return lines
}
