package stream

import (
	"bytes"
	"math"

	"github.com/llm-failover/failover/stream/jsonscan"
)

// Event is one complete SSE event. Name and Data are views into the Framer's
// memory, valid until the next call on the Framer.
type Event struct {
	// Name is the value of the last `event:` field, cut to the capture limit;
	// nil if the record had none (an `event:` with an empty value gives a
	// non-nil empty Name).
	Name []byte
	// Data is the record's data lines joined with "\n", cut to the capture
	// limit; nil when HasData is false.
	Data []byte
	// DataLen is the full length of the joined data; it exceeds len(Data) when
	// the capture limit cut it.
	DataLen int
	// HasData reports that at least one data field was present.
	HasData bool
}

// lineState is where the Framer stands inside the current line.
type lineState uint8

const (
	atLineStart lineState = iota // nothing of the current line seen yet
	inFieldName                  // reading the field name, before any ':'
	afterColon                   // just past ':', one space may be dropped
	inValue                      // reading the field value
	inComment                    // a ':' line, skipped to its end
)

// fieldKind is what the value of the current line feeds.
type fieldKind uint8

const (
	fieldIgnored fieldKind = iota // id, retry and unknown fields
	fieldData
	fieldEvent
)

// maxFieldName is the longest field name the Framer needs to tell apart
// ("event", "retry"); a longer name is unknown and ignored.
const maxFieldName = 5

// Framer splits a byte stream into SSE events (the WHATWG event-stream
// grammar, plus llama.cpp's `error:` field, read as `event: error` with its
// value as data) under any chunking. A record is dispatched at the blank line that
// ends it; a record holding only comments or ignored fields is still
// reported, with HasData false and Name nil, while a blank line with nothing
// before it is skipped.
//
// The zero value is not ready: call Reset. A Framer owns the memory behind the
// Events it returns and reuses it, so steady-state framing allocates nothing;
// its buffers grow to the largest event kept (at most the capture limit).
// A Framer is not safe for concurrent use.
type Framer struct {
	limit int // most data (and name) bytes kept per event; <= 0 keeps all
	room  int // limit, or math.MaxInt when it keeps all: addData's one comparison

	data    []byte
	dropped int // data bytes past the capture, not kept
	hasData bool
	name    []byte
	hasName bool
	seen    bool // the record has at least one line (field or comment)

	// Once the record's data outgrows the capture, its shape is followed (shaping), so that
	// openEnd can tell a whole object from one cut short (jsonscan.ObjectEnd). Lazily, the fast
	// path: the data a call of Next reads is fed only if the record is still open when the call
	// returns (most events end in the read that brought them, and then nothing is fed);
	// slowPaths feeds every piece as it comes. shapeHead is how much of data to feed first (-1:
	// fed); pend are the pieces past it, views into Next's p.
	shape     jsonscan.ObjectEnd
	shaping   bool
	shapeHead int
	pend      [4][]byte
	npend     int

	line      lineState
	kind      fieldKind
	field     [maxFieldName]byte
	fieldLen  int  // bytes of the field name so far; maxFieldName+1 = too long
	cr        bool // the last byte consumed was a CR ending a line: skip one LF
	delivered bool // the last call returned an event: clear the record first
	bom       int  // bytes of a leading U+FEFF matched so far; bomDone once decided
	bomDone   bool // past the stream's first bytes: a BOM can no longer start

	ev Event
}

// Reset readies f for a new stream, keeping its buffers. captureLimit is the
// most data bytes (and event-name bytes) kept per event; <= 0 keeps all.
func (f *Framer) Reset(captureLimit int) {
	f.limit, f.room = captureLimit, roomFor(captureLimit)
	if f.name == nil {
		f.name = make([]byte, 0, 32)
	}
	if f.data == nil {
		f.data = make([]byte, 0, 256)
	}
	f.clearRecord()
	f.line = atLineStart
	f.cr = false
	f.delivered = false
	f.bom, f.bomDone = 0, false
	f.ev = Event{}
}

// setLimit changes the capture limit mid-stream, cutting what the current
// record already kept. The Gate uses it when it switches to tail mode.
func (f *Framer) setLimit(limit int) {
	f.limit, f.room = limit, roomFor(limit)
	if limit > 0 {
		if len(f.data) > limit {
			if !f.shaping && f.inRecord() { // a record already ended needs no shape
				f.shaping = true
				f.shape.Reset()
				f.shape.Feed(f.data) // all of the data so far: it was kept whole
				f.shapeHead = -1
			}
			f.dropped += len(f.data) - limit
			f.data = f.data[:limit]
		}
		if len(f.name) > limit {
			f.name = f.name[:limit]
		}
	}
}

func (f *Framer) clearRecord() {
	f.data = f.data[:0]
	f.dropped = 0
	f.hasData = false
	f.name = f.name[:0]
	f.hasName = false
	f.seen = false
	f.delivered = false
	f.shaping = false
	clear(f.pend[:f.npend])
	f.npend = 0
}

// Next consumes bytes from p and stops right after the first event completed
// in p. It returns how many bytes of p it consumed and whether an event
// completed (then Event returns it); the event ends at the CR or LF of its
// blank line (the LF of a CRLF is skipped by the next call). When ok is false,
// all of p was consumed and the partial record is remembered, so the next call
// continues it. Call Next again on the unconsumed remainder p[n:].
func (f *Framer) Next(p []byte) (n int, ok bool) {
	if f.delivered {
		f.clearRecord()
	}
	i := 0
	if !f.bomDone {
		i = f.skipBOM(p)
	}
	if f.cr && len(p) > 0 {
		// A CR ended the previous chunk: an LF here is the rest of a CRLF.
		f.cr = false
		if p[0] == '\n' {
			i = 1
		}
	}
	for i < len(p) {
		switch f.line {
		case atLineStart:
			c := p[i]
			if c == '\n' || c == '\r' {
				if f.seen {
					// Stop right after the CR or LF that ends the record. The
					// LF of a CRLF is left to the next call, so where an event
					// ends does not depend on how the stream was chunked.
					f.cr = c == '\r'
					f.dispatch()
					return f.ended(i + 1)
				}
				i = f.lineEnd(p, i)
				continue
			}
			f.seen = true
			if c == ':' {
				f.line = inComment
				i++
				continue
			}
			f.line = inFieldName
			f.fieldLen = 0
		case inFieldName:
			j := i
			for j < len(p) {
				c := p[j]
				if c == ':' || c == '\n' || c == '\r' {
					break
				}
				j++
			}
			f.addFieldName(p[i:j])
			if j == len(p) {
				return f.open(len(p))
			}
			f.startValue()
			if p[j] == ':' {
				f.line = afterColon
				i = j + 1
				continue
			}
			// A line without ':' is a field with an empty value.
			i = f.lineEnd(p, j)
		case afterColon:
			if p[i] == ' ' {
				i++
			}
			f.line = inValue
		case inValue:
			k := indexLineEnd(p[i:])
			if k < 0 {
				f.addValue(p[i:])
				return f.open(len(p))
			}
			f.addValue(p[i : i+k])
			i = f.lineEnd(p, i+k)
		case inComment:
			k := indexLineEnd(p[i:])
			if k < 0 {
				return f.open(len(p))
			}
			i = f.lineEnd(p, i+k)
		}
	}
	return f.open(len(p))
}

// open is Next's return when p ended without ending a record: the pieces of data Next noted
// as views into p are fed to the record's shape before p goes.
func (f *Framer) open(n int) (int, bool) {
	if f.npend > 0 {
		f.feedShape()
	}
	return n, false
}

// ended is Next's return when a record ended in p: the pieces of its data Next noted as views
// into p are needed no more.
func (f *Framer) ended(n int) (int, bool) {
	if f.npend > 0 {
		clear(f.pend[:f.npend])
		f.npend = 0
	}
	return n, true
}

// bom is the UTF-8 byte order mark a stream may open with (the WHATWG grammar's
// `stream = [ bom ] *event`): a decoder drops it, so it is not part of the
// first field name.
var bom = [3]byte{0xEF, 0xBB, 0xBF}

// skipBOM consumes the bytes of a leading BOM at the start of p (which may cut
// it anywhere) and returns how many. Bytes that begin one but then differ
// begin the first field's name: a name no field has, so that line is ignored.
func (f *Framer) skipBOM(p []byte) int {
	i := 0
	for i < len(p) && f.bom < len(bom) {
		if p[i] != bom[f.bom] {
			if f.bom > 0 {
				f.seen, f.line, f.fieldLen = true, inFieldName, maxFieldName+1
			}
			f.bomDone = true
			return i
		}
		i++
		f.bom++
	}
	f.bomDone = f.bom == len(bom)
	return i
}

// inRecord reports that bytes of a record were read and its blank line was not:
// the stream stopped there now would leave an event cut short.
func (f *Framer) inRecord() bool { return f.seen && !f.delivered }

// Event returns the event the last Next or Flush completed.
func (f *Framer) Event() Event { return f.ev }

// Flush ends the stream: a record in progress (a line seen but no blank line
// after it, even when the last line itself has no line end) is returned as an
// event with ok true. The Framer is then at the start of a new stream.
func (f *Framer) Flush() (ev Event, ok bool) {
	if f.delivered {
		f.clearRecord()
	}
	if f.line == inFieldName {
		f.startValue()
	}
	if !f.bomDone && f.bom > 0 {
		f.seen = true // the stream was only the start of a BOM: a line of an unknown field
	}
	f.line = atLineStart
	f.cr = false
	f.bom, f.bomDone = 0, false
	if !f.seen {
		return Event{}, false
	}
	f.dispatch()
	return f.ev, true
}

func (f *Framer) dispatch() {
	f.ev = f.view()
	f.delivered = true
}

func (f *Framer) view() Event {
	ev := Event{DataLen: len(f.data) + f.dropped, HasData: f.hasData}
	if f.hasName {
		ev.Name = f.name
	}
	if f.hasData {
		ev.Data = f.data
	}
	return ev
}

// lineEnd consumes the line terminator at p[j] (CR, LF or CRLF) and returns
// the index after it. A CR that is the last byte of p leaves f.cr set so that
// an LF opening the next chunk is not read as a second line end.
func (f *Framer) lineEnd(p []byte, j int) int {
	f.line = atLineStart
	if p[j] == '\r' {
		if j+1 < len(p) {
			if p[j+1] == '\n' {
				return j + 2
			}
		} else {
			f.cr = true
		}
	}
	return j + 1
}

func (f *Framer) addFieldName(b []byte) {
	if f.fieldLen+len(b) > maxFieldName {
		f.fieldLen = maxFieldName + 1
		return
	}
	f.fieldLen += copy(f.field[f.fieldLen:], b)
}

// startValue acts on a complete field name.
func (f *Framer) startValue() {
	f.kind = fieldIgnored
	if f.fieldLen > maxFieldName {
		return
	}
	switch string(f.field[:f.fieldLen]) {
	case "data":
		f.kind = fieldData
		if f.hasData {
			f.addData(newline)
		}
		f.hasData = true
	case "event":
		f.kind = fieldEvent
		f.name = f.name[:0]
		f.hasName = true
	case "error":
		// Not a WHATWG field: llama.cpp's server sent a streamed failure as an `error:` line
		// (`error: {"code":400,...}`, then `data: [DONE]`) until ggml-org/llama.cpp#16109. A
		// strict reader drops it and sees an empty stream; read as `event: error` with its
		// value as data, the error is judged with the status it carries.
		f.kind = fieldData
		if f.hasData {
			f.addData(newline)
		}
		f.hasData = true
		f.name = appendCapped(f.name[:0], nameError, f.limit)
		f.hasName = true
	}
}

var newline = []byte{'\n'}

func (f *Framer) addValue(b []byte) {
	switch f.kind {
	case fieldData:
		f.addData(b)
	case fieldEvent:
		f.name = appendCapped(f.name, b, f.limit)
	}
}

func (f *Framer) addData(b []byte) {
	if len(f.data)+len(b) > f.room {
		f.addPastCapture(b)
		return
	}
	f.data = append(f.data, b...)
}

// roomFor returns the room for a capture limit (Framer.room).
func roomFor(limit int) int {
	if limit <= 0 {
		return math.MaxInt
	}
	return limit
}

// addPastCapture adds data that does not fit the capture: what fits is kept, and the record's
// shape is followed from the first byte that does not (it stays on: the capture is full).
func (f *Framer) addPastCapture(b []byte) {
	if !f.shaping {
		f.shaping = true
		f.shape.Reset()
		f.shapeHead = len(f.data) // all of the data before b: none was cut yet
	}
	if f.npend == len(f.pend) {
		f.feedShape()
	}
	f.pend[f.npend] = b
	f.npend++
	if slowPaths {
		f.feedShape() // the slow path: every piece as it comes, whether the record ends or not
	}
	kept := len(f.data)
	f.data = appendCapped(f.data, b, f.limit)
	f.dropped += len(b) - (len(f.data) - kept)
}

// feedShape feeds the shape what it has not read of the record's data: the head kept in data,
// then the pieces pending.
func (f *Framer) feedShape() {
	if f.shapeHead >= 0 {
		f.shape.Feed(f.data[:f.shapeHead])
		f.shapeHead = -1
	}
	for i := range f.npend {
		f.shape.Feed(f.pend[i])
		f.pend[i] = nil
	}
	f.npend = 0
}

// appendCapped appends b to dst without letting dst grow past limit bytes
// (limit <= 0: no cap).
func appendCapped(dst, b []byte, limit int) []byte {
	if limit > 0 {
		room := limit - len(dst)
		if room <= 0 {
			return dst
		}
		if len(b) > room {
			b = b[:room]
		}
	}
	return append(dst, b...)
}

// indexLineEnd returns the index of the first CR or LF in b, or -1. Two
// vectorised IndexByte scans beat a byte loop (most streams have no CR). The
// scans run over windows that double in size, so that a stream with lone CR
// line ends does not make every line search the whole rest of b for an LF.
func indexLineEnd(b []byte) int {
	for w, size := 0, 256; w < len(b); w, size = w+size, size*2 {
		seg := b[w:min(len(b), w+size)]
		lf := bytes.IndexByte(seg, '\n')
		if lf >= 0 {
			seg = seg[:lf]
		}
		if cr := bytes.IndexByte(seg, '\r'); cr >= 0 {
			return w + cr
		}
		if lf >= 0 {
			return w + lf
		}
	}
	return -1
}

// betweenRecords reports that the Framer stands at the start of a line with no record begun
// and nothing pending (no LF owed to a CR, the BOM decided): bytes from here frame as if a new
// stream began, but for a BOM.
func (f *Framer) betweenRecords() bool {
	return !f.inRecord() && f.line == atLineStart && !f.cr && f.bomDone
}

// skipRecords records that the caller consumed whole records and blank lines from a point
// where betweenRecords held, ending after a blank line: the Framer is between records again.
func (f *Framer) skipRecords() {
	f.clearRecord()
	f.line = atLineStart
}

// openEnd returns the bytes that would end the record the stream stopped inside (the line end
// its last line lacks, and the blank line), when its data so far is whole: at least one data
// field, and the last line, if unfinished, a data or comment line or one of an ignored field
// (an unfinished event name may be cut). complete judges data the capture kept whole; data
// the capture cut is whole when it is one JSON object that ended (jsonscan.ObjectEnd). nil
// when no record is open or it cannot be ended so.
func (f *Framer) openEnd(complete func(data []byte) bool) []byte {
	if !f.inRecord() || !f.hasData {
		return nil
	}
	var end []byte
	switch {
	case f.line == atLineStart && f.cr:
		end = endAfterCR // a lone CR or a CRLF's CR ended the last line: a CR is the blank line
	case f.line == atLineStart:
		end = endAfterLF
	case f.line == inComment, f.line == inValue && f.kind != fieldEvent:
		end = endOpenLine
	default:
		return nil
	}
	if cut := f.dropped > 0; cut && !(f.shaping && f.shape.Whole()) || !cut && !complete(f.data) {
		return nil
	}
	return end
}

var (
	endAfterCR  = []byte("\r")
	endAfterLF  = []byte("\n")
	endOpenLine = []byte("\n\n")
)
