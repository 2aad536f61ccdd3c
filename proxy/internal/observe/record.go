package observe

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

// Phase is how far an attempt got relative to the client (docs/operations.md, The request
// record).
type Phase uint8

const (
	PhaseBeforeHeaders Phase = iota // no response headers from the upstream
	PhaseBeforeContent              // upstream headers seen, nothing sent to the client
	PhaseCommitted                  // bytes reached the client
	PhaseResumed                    // a cut stream and its continuation (docs/streams.md, Resume a cut stream)
)

var phaseNames = [...]string{"before_headers", "before_content", "committed", "resumed"}

func (p Phase) String() string { return phaseNames[p] }

// maxLedger bounds the attempts one record lists; further attempts are counted, not listed.
// The first inlineLedger live in the Ledger itself; the rest in a slice kept with it.
const (
	maxLedger    = 32
	inlineLedger = 6
)

// Entry is one attempt's line in the ledger. Target is the target's name, which outlives the
// record.
type Entry struct {
	Target   string
	Status   int // 0: no answer
	Class    classify.Class
	Reason   classify.Reason
	Phase    Phase
	Action   classify.Action
	Duration time.Duration
	Wait     time.Duration // sleep before the retry that followed
	// Continued marks a continuation of a cut stream: Delivered is the bytes of text the
	// client had, and Seam what the seam took off the start of the continuation's text
	// (docs/streams.md, Resume a cut stream, The seam).
	Continued bool
	Delivered int
	Seam      stream.Seam
	// Hedge marks an attempt of a hedge race (docs/streams.md, Hedging): the one that committed
	// first won; the other, cut or failed while the first ran, lost (its action shows as hedge:
	// the request went on with the other). The one that ended the race otherwise (a stop, or the
	// last of two to fail) carries its own action and no mark. Offset is when the hedge started,
	// after the request's arrival; zero for the attempt it raced.
	Hedge  HedgeMark
	Offset time.Duration
}

// HedgeMark is an attempt's part in a hedge race.
type HedgeMark uint8

const (
	HedgeNone     HedgeMark = iota // no race
	HedgeMarkWon                   // it committed first
	HedgeMarkLost                  // the other committed first and it was cut, or it failed while the other ran
	// HedgeMarkEnded is the attempt that ended the race, before its verdict is known: shown as
	// won if it committed, and as no mark otherwise.
	HedgeMarkEnded
)

var hedgeMarkNames = [...]string{"", "won", "lost", ""}

func (m HedgeMark) String() string { return hedgeMarkNames[m] }

// action is the entry's action as the record shows it: hedge for an attempt a race cut.
func (r *Entry) action() string {
	if r.Hedge == HedgeMarkLost {
		return "hedge"
	}
	return r.Action.String()
}

// Ledger lists a request's attempts. It renders as a JSON array for the JSON log and as a
// compact line for the text log. Owned by one request; not safe for concurrent use.
type Ledger struct {
	n      int
	inline [inlineLedger]Entry
	more   []Entry
}

// Reset empties the ledger for the next request, keeping its memory.
func (l *Ledger) Reset() { l.n, l.more = 0, l.more[:0] }

// Add appends an attempt's entry; past maxLedger it is counted, not listed.
func (l *Ledger) Add(e Entry) {
	switch {
	case l.n < inlineLedger:
		l.inline[l.n] = e
	case l.n < maxLedger:
		l.more = append(l.more, e)
	}
	l.n++
}

// Len returns how many attempts were added, listed or not.
func (l *Ledger) Len() int { return l.n }

// entry returns the i-th listed entry (i < min(n, maxLedger)).
func (l *Ledger) entry(i int) *Entry {
	if i < inlineLedger {
		return &l.inline[i]
	}
	return &l.more[i-inlineLedger]
}

// Last returns the newest listed entry, to amend it when a committed stream ends; nil when
// there is none or it was not listed.
func (l *Ledger) Last() *Entry {
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
		b = jsonscan.AppendQuote(b, r.Target)
		if r.Status != 0 {
			b = append(b, `,"status":`...)
			b = strconv.AppendInt(b, int64(r.Status), 10)
		}
		b = append(b, `,"class":"`...)
		b = append(b, r.Class.String()...)
		b = append(b, `","phase":"`...)
		b = append(b, r.Phase.String()...)
		b = append(b, `","action":"`...)
		b = append(b, r.action()...)
		b = append(b, `","reason":"`...)
		b = append(b, r.Reason.String()...)
		b = append(b, `","duration_ms":`...)
		b = appendMillis(b, r.Duration)
		if r.Wait > 0 {
			b = append(b, `,"wait_ms":`...)
			b = appendMillis(b, r.Wait)
		}
		if r.Continued {
			b = append(b, `,"delivered_bytes":`...)
			b = strconv.AppendInt(b, int64(r.Delivered), 10)
			b = append(b, `,"seam":"`...)
			b = r.Seam.AppendText(b)
			b = append(b, '"')
		}
		if r.Hedge != HedgeNone {
			b = append(b, `,"hedge":"`...)
			b = append(b, r.Hedge.String()...)
			b = append(b, '"')
			if r.Offset > 0 {
				b = append(b, `,"offset_ms":`...)
				b = appendMillis(b, r.Offset)
			}
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
		b = append(b, r.Target...)
		if r.Status != 0 {
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(r.Status), 10)
		}
		b = append(b, ' ')
		b = append(b, r.Class.String()...)
		b = append(b, ' ')
		b = append(b, r.Phase.String()...)
		b = append(b, ' ')
		b = append(b, r.action()...)
		if r.Reason != classify.ReasonOK {
			b = append(b, '(')
			b = append(b, r.Reason.String()...)
			b = append(b, ')')
		}
		b = append(b, ' ')
		b = append(b, r.Duration.Round(time.Microsecond).String()...)
		if r.Continued {
			b = append(b, " delivered="...)
			b = strconv.AppendInt(b, int64(r.Delivered), 10)
			b = append(b, " seam="...)
			b = r.Seam.AppendText(b)
		}
		if r.Hedge != HedgeNone {
			b = append(b, " hedge="...)
			b = append(b, r.Hedge.String()...)
			if r.Offset > 0 {
				b = append(b, " offset="...)
				b = append(b, r.Offset.Round(time.Microsecond).String()...)
			}
		}
	}
	if l.n > maxLedger {
		b = append(b, " | +"...)
		b = strconv.AppendInt(b, int64(l.n-maxLedger), 10)
		b = append(b, " more"...)
	}
	return b
}

// Record is a request as its one log record shows it (msg=request: docs/operations.md, The
// request record). The proxy fills it as the request goes: what the request asked when it
// begins, each attempt into the Ledger, the outcome and the answer's status when it ends; Log
// writes it once. It renders itself for the JSON handler (AppendJSONFields, without
// allocating) and for any other (LogValue).
//
// Its byte slices are the proxy's own buffers, reused from one request to the next: Log must
// be called before they are. No key, prompt or body is in a record; the path and the model
// are the client's, and rendered so that they cannot reach a terminal as escape sequences.
// Owned by one request; not safe for concurrent use.
type Record struct {
	RequestID []byte // printable ASCII (the client's X-Request-Id, or one made up)
	// TraceID is the trace id of the client's traceparent, in lower-case hex (docs/operations.md,
	// Joining traces); empty when there was none or it was not valid.
	TraceID []byte
	Family  stream.Family
	Path    []byte // the normalised request path, without the query (it can carry keys)
	Stream  bool   // the client asked for a stream
	Model   []byte // the requested model, decoded; empty when the request named none
	Outcome Outcome
	Status  int // the status the client got (499: it left)
	// Target is the name of the target whose answer, or the sidecar's error about it, went
	// back; empty when none did.
	Target string
	// ServedModel is the model the target substituted (its _MODEL), which the answer was
	// produced for; nil when it substituted none.
	ServedModel []byte
	Duration    time.Duration
	Ledger      Ledger
}

// Log writes the one record per request (msg=request) at time at, a warning when the client
// got an error after output or after every candidate or a budget ran out. Through a
// JSONHandler it allocates nothing.
func (r *Record) Log(log *slog.Logger, at time.Time) {
	level := slog.LevelInfo
	if r.Outcome == OutcomePartial || r.Outcome == OutcomeExhausted || r.Outcome == OutcomeBudgetExhausted {
		level = slog.LevelWarn
	}
	h := log.Handler()
	if !h.Enabled(context.Background(), level) {
		return
	}
	if jh, ok := h.(*JSONHandler); ok {
		jh.handleFields(at, level, "request", r) // no slog.Record to build and walk
		return
	}
	// Straight to the handler: Logger.LogAttrs would also capture the caller's program counter
	// (runtime.Callers), which no handler here prints.
	rec := slog.NewRecord(at, level, "request", 0)
	rec.AddAttrs(slog.Any("", r))
	h.Handle(context.Background(), rec) // as Logger.LogAttrs: a failed log write has nowhere to go
}

// AppendJSONFields renders the record's fields for the JSON log, without allocating.
func (r *Record) AppendJSONFields(b []byte) []byte {
	b = append(b, `"request_id":`...)
	b = jsonscan.AppendQuote(b, b2s(r.RequestID))
	if len(r.TraceID) > 0 { // lower-case hex: nothing to escape
		b = append(b, `,"trace_id":"`...)
		b = append(b, r.TraceID...)
		b = append(b, '"')
	}
	b = append(b, `,"family":"`...)
	b = append(b, r.Family.String()...)
	b = append(b, `","path":`...)
	b = jsonscan.AppendQuote(b, b2s(r.logPath()))
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, r.Stream)
	b = append(b, `,"outcome":"`...)
	b = append(b, r.Outcome.String()...)
	b = append(b, `","status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Ledger.n), 10)
	if len(r.Model) > 0 {
		b = append(b, `,"model":`...)
		b = jsonscan.AppendQuote(b, b2s(r.logModel()))
	}
	if m := r.logServedModel(); m != nil {
		b = append(b, `,"served_model":`...)
		b = jsonscan.AppendQuote(b, b2s(m))
	}
	if r.Target != "" {
		b = append(b, `,"target":`...)
		b = jsonscan.AppendQuote(b, r.Target)
	}
	b = append(b, `,"duration_ms":`...)
	b = appendMillis(b, r.Duration)
	b = append(b, `,"ledger":`...)
	return r.Ledger.AppendJSON(b)
}

// LogValue renders the record for other handlers (the text log): a group with an empty key,
// which handlers inline.
func (r *Record) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("request_id", string(r.RequestID))}
	if len(r.TraceID) > 0 {
		attrs = append(attrs, slog.String("trace_id", string(r.TraceID)))
	}
	attrs = append(attrs,
		slog.String("family", r.Family.String()),
		slog.String("path", LogText(r.logPath())),
		slog.Bool("stream", r.Stream),
		slog.String("outcome", r.Outcome.String()),
		slog.Int("status", r.Status),
		slog.Int("attempts", r.Ledger.n),
	)
	if len(r.Model) > 0 {
		attrs = append(attrs, slog.String("model", LogText(r.logModel())))
	}
	if m := r.logServedModel(); m != nil {
		attrs = append(attrs, slog.String("served_model", LogText(m)))
	}
	if r.Target != "" {
		attrs = append(attrs, slog.String("target", r.Target))
	}
	attrs = append(attrs, slog.Float64("duration_ms", float64(r.Duration.Microseconds())/1000), slog.String("ledger", string(r.Ledger.AppendText(nil))))
	return slog.GroupValue(attrs...)
}

// logPath is the request path for the log, cut to a sane length.
func (r *Record) logPath() []byte {
	p := r.Path
	if len(p) > 256 {
		p = p[:256]
	}
	return p
}

// logModel is the requested model for the log, cut to a sane length.
func (r *Record) logModel() []byte { return ModelText(r.Model) }

// ModelText is a model name the client sent, cut to the length the log shows.
func ModelText(m []byte) []byte {
	if len(m) > 128 {
		m = m[:128]
	}
	return m
}

// logServedModel is the model the answer was produced for (docs/operations.md, The request
// record: served_model): the one the target substituted, else the requested one; nil when no
// target answered or the request named no model.
func (r *Record) logServedModel() []byte {
	switch {
	case r.ServedModel != nil:
		return r.ServedModel
	case r.Target != "" && len(r.Model) > 0:
		return r.logModel()
	}
	return nil
}

// LogText renders a value the client chose (the path, the model) for the text log. tint, on
// a terminal, quotes a value with strconv.Quote and then turns every `\x1b` of the result back
// into ESC, so that values may carry colours: a raw ESC in the value, or the four characters
// \x1b after a backslash, would reach the operator's terminal as an escape sequence (clearing
// the screen, moving the cursor over earlier lines, setting the title). Here every rune that
// is not printable becomes a \u escape, an invalid byte \xNN (never 1b), and the backslash
// itself \u005c, so no `\x1b` can appear in what tint writes. Without colours tint cuts a
// value at its first invalid byte or U+FFFD; escaped, the value is kept whole.
func LogText(b []byte) string {
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

// b2s views b as a string without copying; the string must not outlive b's contents.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
