package proxy

import (
	"context"
	"log/slog"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/llm-failover/failover/classify"
	"github.com/llm-failover/failover/stream"
	"github.com/llm-failover/failover/stream/jsonscan"
)

// Phase is how far an attempt got relative to the client (README, The request record).
type Phase uint8

const (
	PhaseBeforeHeaders Phase = iota // no response headers from the upstream
	PhaseBeforeContent              // upstream headers seen, nothing sent to the client
	PhaseCommitted                  // bytes reached the client
	PhaseResumed                    // a cut stream and its continuation (README, Resume a cut stream)
)

var phaseNames = [...]string{"before_headers", "before_content", "committed", "resumed"}

func (p Phase) String() string { return phaseNames[p] }

// maxLedger bounds the attempts one record lists; further attempts are counted, not listed.
// The first inlineLedger live in the exchange itself; the rest in a slice kept with it.
const (
	maxLedger    = 32
	inlineLedger = 6
)

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
	// A continuation of a cut stream: the bytes of text the client had, and what the seam
	// took off the start of the continuation's text (README, Resume a cut stream, The seam).
	cont      bool
	delivered int
	seam      stream.Seam
}

// Ledger lists a request's attempts. It renders as a JSON array for the JSON log and as a
// compact line for the text log. Owned by one exchange; not safe for concurrent use.
type Ledger struct {
	n      int
	inline [inlineLedger]attemptRecord
	more   []attemptRecord
}

func (l *Ledger) reset() { l.n, l.more = 0, l.more[:0] }

func (l *Ledger) add(r attemptRecord) {
	switch {
	case l.n < inlineLedger:
		l.inline[l.n] = r
	case l.n < maxLedger:
		l.more = append(l.more, r)
	}
	l.n++
}

// entry returns the i-th listed record (i < min(n, maxLedger)).
func (l *Ledger) entry(i int) *attemptRecord {
	if i < inlineLedger {
		return &l.inline[i]
	}
	return &l.more[i-inlineLedger]
}

// last returns the newest listed record, to amend it when a committed stream ends.
func (l *Ledger) last() *attemptRecord {
	if l.n == 0 || l.n > maxLedger {
		return nil
	}
	return l.entry(l.n - 1)
}

// AppendJSON renders the attempts as a JSON array of objects; no key, prompt or body is in it.
func (l *Ledger) AppendJSON(b []byte) []byte {
	b = append(b, '[')
	for i := 0; i < min(l.n, maxLedger); i++ {
		r := l.entry(i)
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"attempt":`...)
		b = strconv.AppendInt(b, int64(i+1), 10)
		b = append(b, `,"target":`...)
		b = jsonscan.AppendQuote(b, r.target)
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
		b = appendMillis(b, r.duration)
		if r.wait > 0 {
			b = append(b, `,"wait_ms":`...)
			b = appendMillis(b, r.wait)
		}
		if r.cont {
			b = append(b, `,"delivered_bytes":`...)
			b = strconv.AppendInt(b, int64(r.delivered), 10)
			b = append(b, `,"seam":"`...)
			b = r.seam.AppendText(b)
			b = append(b, '"')
		}
		b = append(b, '}')
	}
	if l.n > maxLedger {
		b = append(b, `,{"more_attempts":`...)
		b = strconv.AppendInt(b, int64(l.n-maxLedger), 10)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendMillis appends d in milliseconds with microsecond precision.
// Integer arithmetic, not strconv.AppendFloat: the same text ("12", "12.3", "12.345") at a
// fraction of the cost, twice or more in every request's record.
func appendMillis(b []byte, d time.Duration) []byte {
	us := d.Microseconds()
	if us < 0 {
		b = append(b, '-')
		us = -us
	}
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	if frac == 0 {
		return b
	}
	digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
	n := 3
	for digits[n-1] == '0' {
		n--
	}
	b = append(b, '.')
	return append(b, digits[:n]...)
}

// AppendText renders the attempts on one line for people:
// "1:openai 503 server_error before_content transfer(retryable_status) 12ms | 2:anthropic 200 ...".
func (l *Ledger) AppendText(b []byte) []byte {
	for i := 0; i < min(l.n, maxLedger); i++ {
		r := l.entry(i)
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
		if r.cont {
			b = append(b, " delivered="...)
			b = strconv.AppendInt(b, int64(r.delivered), 10)
			b = append(b, " seam="...)
			b = r.seam.AppendText(b)
		}
	}
	if l.n > maxLedger {
		b = append(b, " | +"...)
		b = strconv.AppendInt(b, int64(l.n-maxLedger), 10)
		b = append(b, " more"...)
	}
	return b
}

// requestRecord is an exchange seen as its ledger record (msg=request: README, The request record).
type requestRecord exchange

// AppendJSONFields renders the record's fields for the JSON log, without allocating.
func (r *requestRecord) AppendJSONFields(b []byte) []byte {
	ex := (*exchange)(r)
	b = append(b, `"request_id":`...)
	b = jsonscan.AppendQuote(b, b2s(ex.requestID))
	if len(ex.traceID) > 0 { // lower-case hex (traceIDOf): nothing to escape
		b = append(b, `,"trace_id":"`...)
		b = append(b, ex.traceID...)
		b = append(b, '"')
	}
	b = append(b, `,"family":"`...)
	b = append(b, ex.family.String()...)
	b = append(b, `","path":`...)
	b = jsonscan.AppendQuote(b, b2s(ex.logPath()))
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, ex.streaming)
	b = append(b, `,"outcome":"`...)
	b = append(b, ex.outcome.String()...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(ex.status), 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(ex.ledger.n), 10)
	if len(ex.model) > 0 {
		b = append(b, `,"model":`...)
		b = jsonscan.AppendQuote(b, b2s(ex.logModel()))
	}
	if m := ex.logServedModel(); m != nil {
		b = append(b, `,"served_model":`...)
		b = jsonscan.AppendQuote(b, b2s(m))
	}
	if ex.servedBy != nil {
		b = append(b, `,"target":`...)
		b = jsonscan.AppendQuote(b, ex.servedBy.Name)
	}
	b = append(b, `,"duration_ms":`...)
	b = appendMillis(b, ex.duration)
	b = append(b, `,"ledger":`...)
	return ex.ledger.AppendJSON(b)
}

// LogValue renders the record for other handlers (the text log): a group with an empty key,
// which handlers inline.
func (r *requestRecord) LogValue() slog.Value {
	ex := (*exchange)(r)
	attrs := []slog.Attr{slog.String("request_id", string(ex.requestID))}
	if len(ex.traceID) > 0 {
		attrs = append(attrs, slog.String("trace_id", string(ex.traceID)))
	}
	attrs = append(attrs,
		slog.String("family", ex.family.String()),
		slog.String("path", logText(ex.logPath())),
		slog.Bool("stream", ex.streaming),
		slog.String("outcome", ex.outcome.String()),
		slog.Int("status", ex.status),
		slog.Int("attempts", ex.ledger.n),
	)
	if len(ex.model) > 0 {
		attrs = append(attrs, slog.String("model", logText(ex.logModel())))
	}
	if m := ex.logServedModel(); m != nil {
		attrs = append(attrs, slog.String("served_model", logText(m)))
	}
	if ex.servedBy != nil {
		attrs = append(attrs, slog.String("target", ex.servedBy.Name))
	}
	attrs = append(attrs, slog.Float64("duration_ms", float64(ex.duration.Microseconds())/1000), slog.String("ledger", string(ex.ledger.AppendText(nil))))
	return slog.GroupValue(attrs...)
}

// logText renders a value the client chose (the path, the model) for the text log. tint, on
// a terminal, quotes a value with strconv.Quote and then turns every `\x1b` of the result back
// into ESC, so that values may carry colours: a raw ESC in the value, or the four characters
// \x1b after a backslash, would reach the operator's terminal as an escape sequence (clearing
// the screen, moving the cursor over earlier lines, setting the title). Here every rune that
// is not printable becomes a \u escape, an invalid byte \xNN (never 1b), and the backslash
// itself \u005c, so no `\x1b` can appear in what tint writes. Without colours tint cuts a
// value at its first invalid byte or U+FFFD; escaped, the value is kept whole.
func logText(b []byte) string {
	plain := true
	for _, c := range b {
		if c < ' ' || c >= 0x7f || c == '\\' {
			plain = false
			break
		}
	}
	if plain {
		return string(b)
	}
	const hex = "0123456789abcdef"
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			out = append(out, '\\', 'x', hex[b[i]>>4], hex[b[i]&15])
		case r == '\\' || r == utf8.RuneError || !unicode.IsPrint(r):
			if r > 0xffff {
				out = append(out, '\\', 'U', hex[r>>28&15], hex[r>>24&15], hex[r>>20&15], hex[r>>16&15])
			} else {
				out = append(out, '\\', 'u')
			}
			out = append(out, hex[r>>12&15], hex[r>>8&15], hex[r>>4&15], hex[r&15])
		default:
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return string(out)
}

// logRequest writes the one record per request (msg=request).
func (ex *exchange) logRequest() {
	s := ex.srv
	level := slog.LevelInfo
	if ex.outcome == OutcomePartial || ex.outcome == OutcomeExhausted || ex.outcome == OutcomeBudgetExhausted {
		level = slog.LevelWarn
	}
	h := s.log.Handler()
	if !h.Enabled(context.Background(), level) {
		return
	}
	at := ex.start.Add(ex.duration) // the time finish measured
	if jh, ok := h.(*JSONHandler); ok {
		jh.handleFields(at, level, "request", (*requestRecord)(ex)) // no slog.Record to build and walk
		return
	}
	// Straight to the handler: Logger.LogAttrs would also capture the caller's program counter
	// (runtime.Callers), which no handler here prints.
	r := slog.NewRecord(at, level, "request", 0)
	r.AddAttrs(slog.Any("", (*requestRecord)(ex)))
	h.Handle(context.Background(), r) // as Logger.LogAttrs: a failed log write has nowhere to go
}

// logPath is the request path for the log (the query is left out: it can carry keys).
func (ex *exchange) logPath() []byte {
	p := ex.path
	if len(p) > 256 {
		p = p[:256]
	}
	return p
}

// logModel is the requested model for the log, cut to a sane length.
func (ex *exchange) logModel() []byte {
	m := ex.model
	if len(m) > 128 {
		m = m[:128]
	}
	return m
}

// logServedModel is the model the answer was produced for (README, The request record:
// served_model): the one substituted by _MODEL, else the requested one; nil when no target
// answered or the request named no model.
func (ex *exchange) logServedModel() []byte {
	switch {
	case ex.servedModel != nil:
		return ex.servedModel
	case ex.servedBy != nil && len(ex.model) > 0:
		return ex.logModel()
	}
	return nil
}

// b2s views b as a string without copying; the string must not outlive b's contents.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
