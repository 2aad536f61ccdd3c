package proxy

import (
	"bytes"
	"log/slog"
	"time"

	"github.com/llm-failover/failover/budget"
)

// observeHead reads the head of the answer just read, in one walk over its lines (a lookup per
// name would walk them once per name): its Retry-After (or Retry-After-Ms) into a, what
// copyResponseHeaders will need of it, and its quota figures for its target's rate limit
// (docs/decisions.md, Rate limits), on every answer whatever its status: a 200 that shows a quota spent is
// what lets the next requests go elsewhere before a 429 costs them an attempt. The rate limit
// reads policy time, as the selection that consults it does. It allocates nothing, except for
// the log event of a limit that begins (and fasthttp's one allocation when it walks the headers
// of an answer with a Trailer header).
func (ex *exchange) observeHead(a *attempt) {
	var scan budget.RateLimitScan
	var ra, ms []byte
	var hasRA, hasMs, hasID bool // the first line of each name counts, as a lookup would find it
	up := &a.up
	up.connLines, up.drop, up.requestID = up.connLines[:0], up.drop[:0], nil
	for k, v := range up.resp.Header.All() {
		// fasthttp gives each name in canonical form (it normalises the head it reads).
		switch {
		case !hasRA && bytes.Equal(k, headerRetryAfter):
			ra, hasRA = v, true
		case !hasMs && bytes.Equal(k, headerRetryAfterMs):
			ms, hasMs = v, true
		case !hasID && bytes.Equal(k, headerRequestID):
			up.requestID, hasID = v, true
		case hopByHop.has(k):
			up.drop = append(up.drop, k)
			if sameName(k, headerConnection) {
				up.connLines = append(up.connLines, v)
			}
		case hasFailoverPrefix(k):
			up.drop = append(up.drop, k)
		default:
			scan.Header(k, v)
		}
	}
	a.retryAfter, a.hasRetryAfter = 0, false
	if len(ra) > 0 || len(ms) > 0 {
		// A date is the upstream's wall-clock time, so it is read against the wall clock
		// (Options.Clock): what it gives is how long to wait from now.
		a.retryAfter, a.hasRetryAfter = budget.ParseRetryAfter(ra, ms, time.Now())
	}
	if !scan.Taken() {
		return // no figures: nothing for the rate limit (RateLimit.Observe)
	}
	now := ex.srv.clock.Now()
	f := scan.Figures(now)
	if until, began := a.t.health.RateLimit().Observe(now, f); began {
		ex.event(slog.LevelInfo, "target_ratelimited", a, slog.Float64("seconds", until.Sub(now).Seconds()))
	}
}
