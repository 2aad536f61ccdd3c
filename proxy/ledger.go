package proxy

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/llm-failover/failover/classify"
)

// Phase is how far an attempt got relative to the client (SPEC section 8).
type Phase uint8

const (
	PhaseBeforeHeaders Phase = iota // no response headers from the upstream
	PhaseBeforeContent              // upstream headers seen, nothing sent to the client
	PhaseCommitted                  // bytes reached the client
)

var phaseNames = [...]string{"before_headers", "before_content", "committed"}

func (p Phase) String() string { return phaseNames[p] }

// maxLedger bounds the attempts one record lists; further attempts are counted, not listed.
const maxLedger = 32

// attemptRecord is one line of the ledger. Target points at the target's immutable name.
type attemptRecord struct {
	target   string
	status   int
	class    classify.Class
	reason   classify.Reason
	phase    Phase
	action   classify.Action
	duration time.Duration
	wait     time.Duration // sleep before the retry that followed
}

// Ledger lists a request's attempts. It renders as a JSON array for the JSON log and as a
// compact line for the text log. Owned by one exchange; not safe for concurrent use.
type Ledger struct {
	n       int
	entries [maxLedger]attemptRecord
	buf     []byte
}

func (l *Ledger) reset() { l.n = 0 }

func (l *Ledger) add(r attemptRecord) {
	if l.n < maxLedger {
		l.entries[l.n] = r
	}
	l.n++
}

// last returns the newest listed record, to amend its action after the budgets ruled.
func (l *Ledger) last() *attemptRecord {
	if l.n == 0 || l.n > maxLedger {
		return nil
	}
	return &l.entries[l.n-1]
}

// MarshalJSON renders the attempts as an array of objects; no key, prompt or body is in it.
// The returned slice is the ledger's own buffer, valid until the next call.
func (l *Ledger) MarshalJSON() ([]byte, error) {
	b := l.buf[:0]
	b = append(b, '[')
	for i := 0; i < min(l.n, maxLedger); i++ {
		r := &l.entries[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"attempt":`...)
		b = strconv.AppendInt(b, int64(i+1), 10)
		b = append(b, `,"target":`...)
		b = appendJSONString(b, r.target)
		if r.status != 0 {
			b = append(b, `,"status":`...)
			b = strconv.AppendInt(b, int64(r.status), 10)
		}
		b = append(b, `,"class":"`...)
		b = append(b, r.class.String()...)
		b = append(b, `","phase":"`...)
		b = append(b, r.phase.String()...)
		b = append(b, `","action":"`...)
		b = append(b, r.action.String()...)
		b = append(b, `","reason":"`...)
		b = append(b, r.reason.String()...)
		b = append(b, `","duration_ms":`...)
		b = strconv.AppendFloat(b, float64(r.duration.Microseconds())/1000, 'f', -1, 64)
		if r.wait > 0 {
			b = append(b, `,"wait_ms":`...)
			b = strconv.AppendFloat(b, float64(r.wait.Microseconds())/1000, 'f', -1, 64)
		}
		b = append(b, '}')
	}
	if l.n > maxLedger {
		b = append(b, `,{"more_attempts":`...)
		b = strconv.AppendInt(b, int64(l.n-maxLedger), 10)
		b = append(b, '}')
	}
	b = append(b, ']')
	l.buf = b
	return b, nil
}

// MarshalText renders the attempts on one line for people:
// "1:openai 503 server_error before_content transfer 12ms | 2:anthropic 200 ok ...".
func (l *Ledger) MarshalText() ([]byte, error) {
	b := l.buf[:0]
	for i := 0; i < min(l.n, maxLedger); i++ {
		r := &l.entries[i]
		if i > 0 {
			b = append(b, " | "...)
		}
		b = strconv.AppendInt(b, int64(i+1), 10)
		b = append(b, ':')
		b = append(b, r.target...)
		if r.status != 0 {
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(r.status), 10)
		}
		b = append(b, ' ')
		b = append(b, r.class.String()...)
		b = append(b, ' ')
		b = append(b, r.phase.String()...)
		b = append(b, ' ')
		b = append(b, r.action.String()...)
		if r.reason != classify.ReasonOK {
			b = append(b, '(')
			b = append(b, r.reason.String()...)
			b = append(b, ')')
		}
		b = append(b, ' ')
		b = append(b, r.duration.Round(time.Microsecond).String()...)
	}
	if l.n > maxLedger {
		b = append(b, " | +"...)
		b = strconv.AppendInt(b, int64(l.n-maxLedger), 10)
		b = append(b, " more"...)
	}
	l.buf = b
	return b, nil
}

// logRequest writes the one record per request (msg=request).
func (ex *exchange) logRequest() {
	s := ex.srv
	if !s.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := ex.attrs[:0]
	attrs = append(attrs,
		slog.String("request_id", string(ex.requestID)),
		slog.String("family", familyNames[ex.family]),
		slog.String("path", ex.logPath()),
		slog.Bool("stream", ex.streaming),
		slog.String("outcome", ex.outcome.String()),
		slog.Int("status", ex.status),
		slog.Int("attempts", ex.ledger.n),
	)
	if len(ex.model) > 0 {
		attrs = append(attrs, slog.String("model", ex.logModel()))
	}
	if ex.servedModel != nil {
		attrs = append(attrs, slog.String("served_model", string(ex.servedModel)))
	}
	if ex.servedBy != nil {
		attrs = append(attrs, slog.String("target", ex.servedBy.Name))
	}
	attrs = append(attrs,
		slog.Float64("duration_ms", float64(ex.duration.Microseconds())/1000),
		slog.Any("ledger", &ex.ledger),
	)
	level := slog.LevelInfo
	if ex.outcome == OutcomePartial || ex.outcome == OutcomeExhausted || ex.outcome == OutcomeBudgetExhausted {
		level = slog.LevelWarn
	}
	s.log.LogAttrs(context.Background(), level, "request", attrs...)
	ex.attrs = attrs[:0]
}

// logPath is the request path for the log (the query is left out: it can carry keys).
func (ex *exchange) logPath() string {
	p := ex.path
	if len(p) > 256 {
		p = p[:256]
	}
	return string(p)
}

// logModel is the requested model for the log, cut to a sane length.
func (ex *exchange) logModel() string {
	m := ex.model
	if len(m) > 128 {
		m = m[:128]
	}
	return string(m)
}
