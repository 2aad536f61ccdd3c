package observe

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/llm-failover/failover/proxy/internal/bufpool"
	"github.com/llm-failover/failover/stream/jsonscan"
)

// JSONHandler is the slog.Handler for FAILOVER_LOG_FORMAT=json: one JSON object per line,
// the same shape as slog.JSONHandler ("time", "level", "msg", then the attributes), written
// without reflection and, for what the request path logs, without allocating. It matters
// because the sidecar writes one record per request: slog.JSONHandler spends more time on
// that record (reflection, floats through encoding/json) than the proxy spends on the request.
//
// An attribute whose value implements FieldsAppender (whatever its key) is spliced in as
// top-level fields; one that implements JSONAppender renders its own value. Other values of
// kind Any fall back to encoding/json. Safe for concurrent use: each record is built in a
// pooled buffer and written with one Write, under a mutex shared by the handler's derivatives
// unless the writer is a LogWriter (which serialises its writes itself).
type JSONHandler struct {
	mu    *sync.Mutex // nil when w is a LogWriter, which takes each Write whole under its own
	w     io.Writer
	level slog.Leveler
	pre   []byte      // attributes from WithAttrs, rendered, each followed by a comma
	open  int         // groups opened by WithGroup
	stamp *stampCache // shared by the derivatives too
}

// FieldsAppender renders a value as JSON object fields ("a":1,"b":2), without braces.
type FieldsAppender interface {
	AppendJSONFields(dst []byte) []byte
}

// JSONAppender renders a value as one JSON value.
type JSONAppender interface {
	AppendJSON(dst []byte) []byte
}

// NewJSONHandler returns a handler writing to w at level and above.
func NewJSONHandler(w io.Writer, level slog.Leveler) *JSONHandler {
	if level == nil {
		level = slog.LevelInfo
	}
	h := &JSONHandler{w: w, level: level, stamp: &stampCache{head: make([]byte, 0, 32), zone: make([]byte, 0, 8)}}
	if _, ok := w.(*LogWriter); !ok {
		h.mu = &sync.Mutex{}
	}
	return h
}

// Enabled reports whether records at level are written.
func (h *JSONHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= h.level.Level()
}

// lineBuffers lend the buffer a line is written in, for one write.
var lineBuffers = bufpool.New(2048, 64<<10)

// Handle writes one record as one line.
func (h *JSONHandler) Handle(_ context.Context, r slog.Record) error {
	bp := lineBuffers.Get()
	b := h.appendHead((*bp)[:0], r.Time, r.Level, r.Message)
	if len(h.pre) > 0 || r.NumAttrs() > 0 {
		b = append(b, ',')
		b = append(b, h.pre...)
		r.Attrs(func(a slog.Attr) bool {
			b = appendAttr(b, a)
			return true
		})
		b = trimComma(b)
	}
	return h.writeLine(bp, b)
}

// handleFields writes a record whose one attribute is f, spliced in as Handle splices a
// FieldsAppender, without the slog.Record around it: the request record takes this way
// (Record.Log), once per request.
func (h *JSONHandler) handleFields(t time.Time, level slog.Level, msg string, f FieldsAppender) error {
	bp := lineBuffers.Get()
	b := append(h.appendHead((*bp)[:0], t, level, msg), ',')
	b = append(b, h.pre...)
	return h.writeLine(bp, trimComma(f.AppendJSONFields(b)))
}

// appendHead opens a line: the time, the level and the message.
func (h *JSONHandler) appendHead(b []byte, t time.Time, level slog.Level, msg string) []byte {
	b = append(b, '{')
	if !t.IsZero() {
		b = append(b, `"time":"`...)
		b = h.stamp.appendTime(b, t)
		b = append(b, `",`...)
	}
	b = append(b, `"level":"`...)
	b = append(b, level.String()...)
	b = append(b, `","msg":`...)
	return jsonscan.AppendQuote(b, msg)
}

// writeLine closes the groups and the line, writes it with one Write, and gives the buffer
// back.
func (h *JSONHandler) writeLine(bp *[]byte, b []byte) error {
	for range h.open {
		b = append(b, '}')
	}
	b = append(b, '}', '\n')
	var err error
	if h.mu != nil {
		h.mu.Lock()
		_, err = h.w.Write(b)
		h.mu.Unlock()
	} else {
		_, err = h.w.Write(b)
	}
	*bp = b
	lineBuffers.Put(bp)
	return err
}

// stampCache writes record times as time.RFC3339Nano does, keeping the text of the last second
// it wrote: the date, the time of day and the zone change once a second, and formatting them
// is most of the cost of a record's time field. Safe for concurrent use; it allocates nothing.
type stampCache struct {
	mu   sync.Mutex
	sec  int64          // the Unix second of head and zone
	loc  *time.Location // and their location
	head []byte         // "2006-01-02T15:04:05"
	zone []byte         // "Z07:00"
}

// appendTime appends t as t.AppendFormat(b, time.RFC3339Nano) would.
func (c *stampCache) appendTime(b []byte, t time.Time) []byte {
	// ".999999999": nine digits, trailing zeros dropped, none at all for a whole second.
	var frac [10]byte
	n := 0
	if ns := t.Nanosecond(); ns != 0 {
		frac[0] = '.'
		for i := 9; i > 0; i-- {
			frac[i] = byte('0' + ns%10)
			ns /= 10
		}
		n = 10
		for frac[n-1] == '0' {
			n--
		}
	}
	sec, loc := t.Unix(), t.Location()
	c.mu.Lock()
	if sec != c.sec || loc != c.loc || len(c.head) == 0 {
		c.sec, c.loc = sec, loc
		c.head = t.AppendFormat(c.head[:0], "2006-01-02T15:04:05")
		c.zone = t.AppendFormat(c.zone[:0], "Z07:00")
	}
	b = append(b, c.head...)
	b = append(b, frac[:n]...)
	b = append(b, c.zone...)
	c.mu.Unlock()
	return b
}

// WithAttrs returns a handler whose records carry attrs.
func (h *JSONHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.pre = append([]byte(nil), h.pre...)
	for _, a := range attrs {
		h2.pre = appendAttr(h2.pre, a)
	}
	return &h2
}

// WithGroup returns a handler that nests the following attributes under name.
func (h *JSONHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.pre = jsonscan.AppendQuote(append([]byte(nil), h.pre...), name)
	h2.pre = append(h2.pre, ':', '{')
	h2.open++
	return &h2
}

// appendAttr appends `"key":value,` (or spliced fields followed by a comma).
func appendAttr(b []byte, a slog.Attr) []byte {
	if a.Value.Kind() == slog.KindLogValuer || a.Value.Kind() == slog.KindAny {
		switch v := a.Value.Any().(type) {
		case FieldsAppender:
			n := len(b)
			b = v.AppendJSONFields(b)
			if len(b) > n {
				b = append(b, ',')
			}
			return b
		case JSONAppender:
			b = jsonscan.AppendQuote(b, a.Key)
			b = append(b, ':')
			return append(v.AppendJSON(b), ',')
		}
	}
	v := a.Value.Resolve()
	if a.Key == "" && v.Kind() != slog.KindGroup {
		return b
	}
	if v.Kind() == slog.KindGroup {
		attrs := v.Group()
		if len(attrs) == 0 {
			return b
		}
		if a.Key == "" {
			for _, ga := range attrs {
				b = appendAttr(b, ga)
			}
			return b
		}
		b = jsonscan.AppendQuote(b, a.Key)
		b = append(b, ':', '{')
		for _, ga := range attrs {
			b = appendAttr(b, ga)
		}
		return append(trimComma(b), '}', ',')
	}
	b = jsonscan.AppendQuote(b, a.Key)
	b = append(b, ':')
	switch v.Kind() {
	case slog.KindString:
		b = jsonscan.AppendQuote(b, v.String())
	case slog.KindInt64:
		b = strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		b = strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindFloat64:
		b = strconv.AppendFloat(b, v.Float64(), 'f', -1, 64)
	case slog.KindBool:
		b = strconv.AppendBool(b, v.Bool())
	case slog.KindDuration:
		b = strconv.AppendInt(b, int64(v.Duration()), 10)
	case slog.KindTime:
		b = append(b, '"')
		b = v.Time().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	default:
		if err, ok := v.Any().(error); ok {
			b = jsonscan.AppendQuote(b, err.Error())
			break
		}
		j, err := json.Marshal(v.Any())
		if err != nil {
			b = jsonscan.AppendQuote(b, "!ERROR:"+err.Error())
			break
		}
		b = append(b, j...)
	}
	return append(b, ',')
}

func trimComma(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] == ',' {
		return b[:len(b)-1]
	}
	return b
}

// LogWriter batches log lines: writes go to a buffer and reach the underlying writer when it
// holds flushSize bytes, every interval, and on Close. Under load this saves one write(2)
// per request (a third of the sidecar's writes); at rest a line waits at most interval. A
// crash loses at most the last interval's lines. Safe for concurrent use.
type LogWriter struct {
	mu       sync.Mutex
	w        io.Writer
	buf      []byte
	stop     chan struct{}
	done     chan struct{}
	interval time.Duration
}

const logFlushSize = 64 << 10

// NewLogWriter starts batching writes to w; Close flushes and stops it.
func NewLogWriter(w io.Writer, interval time.Duration) *LogWriter {
	l := &LogWriter{w: w, buf: make([]byte, 0, logFlushSize), stop: make(chan struct{}), done: make(chan struct{}), interval: interval}
	go l.loop()
	return l
}

func (l *LogWriter) loop() {
	defer close(l.done)
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.Flush() // a failing log sink has nowhere to report to
		case <-l.stop:
			return
		}
	}
}

// Write buffers p (one log line), flushing first when the buffer is full.
func (l *LogWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf)+len(p) > logFlushSize {
		if err := l.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) > logFlushSize {
			return l.w.Write(p)
		}
	}
	l.buf = append(l.buf, p...)
	return len(p), nil
}

// Flush writes out what is buffered.
func (l *LogWriter) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.flushLocked()
}

func (l *LogWriter) flushLocked() error {
	if len(l.buf) == 0 {
		return nil
	}
	_, err := l.w.Write(l.buf)
	l.buf = l.buf[:0]
	return err
}

// Close flushes and stops the background flusher.
func (l *LogWriter) Close() error {
	close(l.stop)
	<-l.done
	return l.Flush()
}
