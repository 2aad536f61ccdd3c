package stream

import (
	"bytes"

	"github.com/valyala/fastjson"
)

// Decision is what the Gate concluded from the bytes fed so far.
type Decision uint8

const (
	// Hold means keep reading: nothing decisive yet.
	Hold Decision = iota
	// Commit means send the held bytes and pipe the rest (business content
	// seen, the peek limit reached, or a family that commits at headers).
	Commit
	// Error means a complete error event arrived before any content;
	// ErrorData has its data.
	Error
	// Empty means the stream ended ([DONE] or End) before any business content.
	Empty
)

var decisionNames = [...]string{Hold: "hold", Commit: "commit", Error: "error", Empty: "empty"}

// String returns the decision's lower-case name.
func (d Decision) String() string {
	if int(d) < len(decisionNames) {
		return decisionNames[d]
	}
	return "unknown"
}

// CommitReason says why a Gate committed.
type CommitReason uint8

const (
	// ReasonContent means business content arrived.
	ReasonContent CommitReason = iota
	// ReasonPeekLimit means the peek limit was reached before any event
	// ending within it decided.
	ReasonPeekLimit
	// ReasonHeaders means the Gate committed at headers (image, or a peek
	// limit of 0).
	ReasonHeaders

	NumCommitReasons // number of reasons, for tables indexed by CommitReason
)

var reasonNames = [NumCommitReasons]string{ReasonContent: "content", ReasonPeekLimit: "peek_limit", ReasonHeaders: "headers"}

// String returns the reason as used in metric labels: "content",
// "peek_limit", "headers".
func (r CommitReason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// tailCaptureLimit is how many data bytes per event the Gate keeps after
// commit: enough for a terminal event's `type` or `[DONE]`, and for the
// finish_reason of a chat chunk (OpenAI's sits past byte 256 of its finish
// chunk, after the id, model, service_tier and system_fingerprint), never a
// whole event, so piping a stream never buffers it.
const tailCaptureLimit = 512

// Gate holds back the start of one SSE response until it commits, then watches
// the tail for the family's terminal event.
//
// Before commit the Gate copies every fed byte (Held) so the proxy can replay
// them byte for byte; after commit it keeps at most tailCaptureLimit data
// bytes of the current event. Held, Events and ErrorData are owned by the Gate
// and valid until the next Feed or Reset. Call Reset before first use; a Gate
// is reused with Reset, which keeps its buffers (steady-state gating
// allocates nothing). A Gate is not safe for concurrent use.
type Gate struct {
	family Family
	peek   int

	held      []byte
	eventsEnd int // len of the prefix of held made of classified events
	wholeEnd  int // after Commit: len of the prefix of held that ends between events (HeldWhole)
	fr        Framer

	decided  bool // a decision other than Hold was returned
	decision Decision
	reason   CommitReason
	errData  []byte
	finished bool // the family's terminal event was seen
	failed   bool // an error event went by after commit

	// What a clean end would mean for chat and other (noteEnd): the choice indexes seen and
	// those that finished, one bit each, and whether the last event's type ended in ".done".
	choicesSeen, choicesDone uint64
	typedDone                bool

	// Tests: no skipQuiet or endsStream for this gate, the reference they are checked against
	// side by side (tail_test.go); slowPaths turns them off for every gate.
	perEventOnly bool
}

// slowPaths turns every fast path of the package off, so that each leaves its work to the slow
// path it shortcuts, which sits in the same file. Only tests set it: slowpaths_test.go runs the
// gate's tests with it, and no test that runs at the same time may read it. Where it is read:
//
//   - chat.go (through classify): every chat event is parsed (classifyChat), none walked
//     (scanChat);
//   - tail.go: observe frames and reads every event of a read (no skipQuiet), Feed reads every
//     event of a read that ends the stream for its choices (no endsStream), and noteEnd walks
//     every chunk (no chunkChangesNothing);
//   - framer.go: the shape of data past the capture is fed as each piece comes, not only when
//     a record is still open at the end of a read.
var slowPaths bool

// Reset readies g for a new response of family f. peekLimit is how many bytes
// from the start of the stream are judged before the Gate commits anyway; <= 0
// commits at headers.
func (g *Gate) Reset(f Family, peekLimit int) {
	g.family = f
	g.peek = peekLimit
	g.held = g.held[:0]
	g.eventsEnd, g.wholeEnd = 0, 0
	g.fr.Reset(0)
	g.decided = false
	g.decision = Hold
	g.reason = ReasonContent
	g.errData = nil
	g.finished = false
	g.failed = false
	g.choicesSeen, g.choicesDone, g.typedDone = 0, 0, false
}

// Feed appends a copy of p to the held bytes, frames the events it completes,
// classifies them in order and returns at the first decisive one (Commit,
// Error or Empty); Hold when none was. For Image, or a peek limit <= 0, the
// first Feed commits with ReasonHeaders.
//
// Only the first peek-limit bytes of the stream are judged, however they were
// split into reads: an event is classified when its end offset in the stream
// (just past the CR or LF of its blank line, as Framer.Next reports it; the LF
// of a CRLF is not part of it) is at most the limit, and never when it ends
// past the limit, even if it came in the same read. When the held bytes reach
// the limit and no event within it decided, Feed commits with ReasonPeekLimit
// at the limit. Held still keeps the whole read that reached the limit (the
// proxy replays it), so it can pass the limit by the rest of that read.
//
// On Commit the held bytes after the commit point (the decisive event's end,
// or the peek limit) have already been watched as tail, so Finished and Failed
// are right even when the whole stream came in one read.
//
// After Commit, Feed acts as Observe and returns Commit; after Error or Empty
// it does nothing and repeats that decision.
func (g *Gate) Feed(p []byte) Decision {
	if g.decided {
		if g.decision == Commit {
			g.Observe(p)
		}
		return g.decision
	}
	start := len(g.held)
	g.held = append(g.held, p...)
	// A read that ends the stream with [DONE] and holds no error (skipQuiet's first kind): once
	// its [DONE] is read the stream is finished or empty, and what its events showed of their
	// choices is read no more, so noteEnd need not read them before commit either.
	ending := g.endsStream(p)
	if g.family == Image || g.peek <= 0 {
		return g.commit(ReasonHeaders, start, ending)
	}
	// Frame no further than the limit: the bytes past it are tail, whatever read they came in.
	judged := min(len(g.held), g.peek)
	off := start
	for off < judged {
		n, ok := g.fr.Next(g.held[off:judged])
		off += n
		if !ok {
			break
		}
		g.eventsEnd = off
		ev := g.fr.Event()
		if g.endsOnFinish() && !ending {
			g.noteEnd(ev)
		}
		switch d := g.classify(ev); d {
		case Commit:
			return g.commit(ReasonContent, off, ending)
		case Error:
			return g.fail(ev.Data)
		case Empty:
			return g.decide(Empty)
		}
	}
	if judged == g.peek {
		// The framer stopped at the limit (a record it cut there goes on as tail).
		return g.commit(ReasonPeekLimit, judged, ending)
	}
	return Hold
}

// End reports EOF from the upstream before commit. A trailing record without
// its blank line counts only when its data is a complete JSON error object
// (End returns Error); otherwise End returns Empty. After a decision, End
// repeats it.
func (g *Gate) End() Decision {
	if g.decided {
		return g.decision
	}
	if ev, ok := g.fr.Flush(); ok && g.classify(ev) == Error && g.isJSONObject(ev.Data) {
		g.eventsEnd = len(g.held)
		return g.fail(ev.Data)
	}
	return g.decide(Empty)
}

// Held returns every byte fed before commit (on commit, the bytes the proxy
// replays byte for byte).
func (g *Gate) Held() []byte { return g.held }

// HeldWhole returns, after Commit, how many bytes of Held from its start end
// between events: the bytes past it begin an event whose blank line has not
// arrived (the read that decided can end inside the next event), which the
// proxy holds back like any incomplete event after commit (Observe).
func (g *Gate) HeldWhole() int { return g.wholeEnd }

// Shed lets go of the held bytes' buffer when its capacity is above limit, once
// the held bytes have been sent after Commit: a Gate that is reused keeps its
// buffer, and one that held a large peek should not keep it for a long stream.
// Held and Events are empty afterwards; Observe, Finished and Failed are not
// affected. Before Commit it does nothing.
func (g *Gate) Shed(limit int) {
	if g.decided && g.decision == Commit && cap(g.held) > limit {
		g.held, g.eventsEnd, g.wholeEnd = nil, 0, 0
	}
}

// ReplaceHeld gives the Gate spare's storage for its held bytes, after Commit, in place of the
// buffer Held returned, which the caller has taken over: a stream that ended in what was held
// goes out as one answer whose body is that buffer, without a copy. Held and Events are empty
// afterwards; Observe, Finished and Failed are not affected. Before Commit it does nothing.
func (g *Gate) ReplaceHeld(spare []byte) {
	if g.decided && g.decision == Commit {
		g.held, g.eventsEnd, g.wholeEnd = spare[:0], 0, 0
	}
}

// Events returns the prefix of Held made of complete events, up to and
// including the decisive one (after a ReasonPeekLimit commit, the events that
// end within the limit): what success rules may match. It ends at the line end
// of the last event's blank line (at its CR when that is a CRLF).
func (g *Gate) Events() []byte { return g.held[:g.eventsEnd] }

// ErrorData returns the data of the error event (its data lines joined) after
// Error, nil otherwise.
func (g *Gate) ErrorData() []byte { return g.errData }

// Reason returns why the Gate committed; meaningful after Commit only.
func (g *Gate) Reason() CommitReason { return g.reason }

func (g *Gate) decide(d Decision) Decision {
	g.decided = true
	g.decision = d
	return d
}

func (g *Gate) fail(data []byte) Decision {
	g.errData = data
	if g.errData == nil {
		g.errData = []byte{}
	}
	return g.decide(Error)
}

// commit switches to tail mode and watches held[from:], the bytes after the
// decisive event that arrived with it; ending tells that they end the read that endsStream
// found to end the stream.
func (g *Gate) commit(r CommitReason, from int, ending bool) Decision {
	g.reason = r
	// The decisive event can itself end the stream (a bare
	// response.completed, message_stop).
	ev := g.fr.Event()
	g.finished = r == ReasonContent && isTerminal(g.family, ev, tailType(g.family, ev))
	g.fr.setLimit(tailCaptureLimit)
	g.decide(Commit)
	if w := g.observe(g.held[from:], ending); w >= 0 {
		g.wholeEnd = from + w
	} else {
		// The record open at the peek limit began after the last event within it.
		g.wholeEnd = skipLineEnds(g.held, g.eventsEnd)
	}
	return Commit
}

func (g *Gate) isJSONObject(b []byte) bool {
	p := parsers.Get()
	v, err := p.ParseBytes(b)
	ok := err == nil && v.Type() == fastjson.TypeObject
	parsers.Put(p)
	return ok
}

// OpenEventEnd returns, when a committed stream's body ended properly inside an event (its
// blank line never came), the bytes that end that event, provided its data is whole: [DONE],
// or a JSON object, parsed when it fits in tailCaptureLimit bytes; past them, one whose
// brackets closed with only whitespace after (the Framer follows them with jsonscan.ObjectEnd
// as the data goes by). Observed and forwarded like any read, they let the event count as the
// writer meant it (docs/streams.md, Streams: the pre-commit peek, an event whose blank line
// the body lacks). nil when the body did not end inside an event, or the event's data is cut
// short (then the stream was cut, and the event never goes out).
func (g *Gate) OpenEventEnd() []byte {
	if !g.decided || g.decision != Commit || g.finished {
		return nil
	}
	return g.fr.openEnd(g.wholeData)
}

// wholeData reports whether an event's data is whole: [DONE], or a JSON object.
func (g *Gate) wholeData(data []byte) bool {
	return bytes.Equal(trimSpace(data), done) || g.isJSONObject(data)
}
