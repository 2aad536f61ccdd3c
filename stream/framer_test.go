package stream

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// describe renders an event for comparison: n:<name> d:<data>/<DataLen>, with
// "-" for a missing name or missing data.
func describe(ev Event) string {
	name, data := "-", "-"
	if ev.Name != nil {
		name = strconv.Quote(string(ev.Name))
	}
	if ev.HasData {
		data = strconv.Quote(string(ev.Data))
	} else if ev.Data != nil || ev.DataLen != 0 {
		data = fmt.Sprintf("BAD(no data but %q/%d)", ev.Data, ev.DataLen)
	}
	return fmt.Sprintf("n:%s d:%s/%d", name, data, ev.DataLen)
}

// frameChunks feeds chunks to a fresh Framer and returns every event, the
// flushed one last and marked "flush ".
func frameChunks(limit int, chunks [][]byte) []string {
	var f Framer
	f.Reset(limit)
	var out []string
	for _, c := range chunks {
		for {
			n, ok := f.Next(c)
			if n > len(c) || n < 0 || (!ok && n != len(c)) {
				return append(out, fmt.Sprintf("BAD consumed %d of %d ok=%v", n, len(c), ok))
			}
			c = c[n:]
			if !ok {
				break
			}
			out = append(out, describe(f.Event()))
		}
	}
	if ev, ok := f.Flush(); ok {
		out = append(out, "flush "+describe(ev))
	}
	return out
}

func whole(s string) [][]byte { return [][]byte{[]byte(s)} }

func splitAt(s string, i int) [][]byte { return [][]byte{[]byte(s[:i]), []byte(s[i:])} }

func byteByByte(s string) [][]byte {
	out := make([][]byte, len(s))
	for i := range len(s) {
		out[i] = []byte{s[i]}
	}
	return out
}

func TestFramer(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		limit int
		want  []string
	}{
		{"single data line", "data: hello\n\n", 0,
			[]string{`n:- d:"hello"/5`}},
		{"multiple data lines are joined with LF", "data: a\ndata: b\ndata:c\n\n", 0,
			[]string{`n:- d:"a\nb\nc"/5`}},
		{"empty data line keeps its place in the join", "data: a\ndata:\ndata: b\n\n", 0,
			[]string{`n:- d:"a\n\nb"/4`}},
		{"event name and data", "event: message_start\ndata: {}\n\n", 0,
			[]string{`n:"message_start" d:"{}"/2`}},
		{"last event field wins", "event: a\nevent: b\ndata: x\n\n", 0,
			[]string{`n:"b" d:"x"/1`}},
		{"event with empty value is an empty non-nil name", "event:\ndata: x\n\n", 0,
			[]string{`n:"" d:"x"/1`}},
		{"only one leading space is removed", "data:  two\ndata:none\n\n", 0,
			[]string{`n:- d:" two\nnone"/9`}},
		{"a tab is not the optional space", "data:\tx\n\n", 0,
			[]string{`n:- d:"\tx"/2`}},
		{"colon in the value is kept", "data: {\"a\":1}\n\n", 0,
			[]string{`n:- d:"{\"a\":1}"/7`}},
		{"field without colon is a field with empty value", "data\ndata\n\n", 0,
			[]string{`n:- d:"\n"/1`}},
		{"event without colon gives an empty name", "event\n\n", 0,
			[]string{`n:"" d:-/0`}},
		{"comments are ignored", ": hello\ndata: x\n: bye\n\n", 0,
			[]string{`n:- d:"x"/1`}},
		{"comment-only record is an event without data or name", ": ping\n\n", 0,
			[]string{`n:- d:-/0`}},
		{"an error field reads as an error event with its value as data", "error: {\"code\":400}\n\n", 0,
			[]string{`n:"error" d:"{\"code\":400}"/12`}},
		{"an error field joins the data lines", "data: a\nerror: b\n\n", 0,
			[]string{`n:"error" d:"a\nb"/3`}},
		{"a later event field names an error field's record", "error: x\nevent: y\n\n", 0,
			[]string{`n:"y" d:"x"/1`}},
		{"a leading BOM is dropped", "\xEF\xBB\xBFdata: x\n\n", 0,
			[]string{`n:- d:"x"/1`}},
		{"only one leading BOM is dropped", "\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\ndata: y\n\n", 0,
			[]string{`n:- d:-/0`, `n:- d:"y"/1`}},
		{"a BOM after the start is part of the line", "data: x\n\n\xEF\xBB\xBFdata: y\n\n", 0,
			[]string{`n:- d:"x"/1`, `n:- d:-/0`}},
		{"the start of a BOM that differs begins an unknown field", "\xEF\xBBdata: x\n\ndata: y\n\n", 0,
			[]string{`n:- d:-/0`, `n:- d:"y"/1`}},
		{"a stream of half a BOM is a record without data", "\xEF\xBB", 0,
			[]string{`flush n:- d:-/0`}},
		{"id, retry and unknown fields are ignored", "id: 7\nretry: 1000\nfoo: bar\ndatum: x\ndata2: y\ndata: z\n\n", 0,
			[]string{`n:- d:"z"/1`}},
		{"field names are case-sensitive", "Data: x\nEVENT: y\n\n", 0,
			[]string{`n:- d:-/0`}},
		{"blank lines without a record are skipped", "\n\n\r\n\rdata: x\n\n\n\n", 0,
			[]string{`n:- d:"x"/1`}},
		{"CRLF line ends", "event: e\r\ndata: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n", 0,
			[]string{`n:"e" d:"a\nb"/3`, `n:- d:"c"/1`}},
		{"lone CR line ends", "event: e\rdata: a\rdata: b\r\rdata: c\r\r", 0,
			[]string{`n:"e" d:"a\nb"/3`, `n:- d:"c"/1`}},
		{"mixed line ends", "data: a\r\ndata: b\rdata: c\n\r\ndata: d\n\r", 0,
			[]string{`n:- d:"a\nb\nc"/5`, `n:- d:"d"/1`}},
		{"LF CR is two line ends", "data: a\n\rdata: b\n\n", 0,
			[]string{`n:- d:"a"/1`, `n:- d:"b"/1`}},
		{"CR in the middle of a value ends the line", "data: a\rb\n\n", 0,
			[]string{`n:- d:"a"/1`}},
		{"several events", "data: 1\n\ndata: 2\n\nevent: x\ndata: 3\n\n", 0,
			[]string{`n:- d:"1"/1`, `n:- d:"2"/1`, `n:"x" d:"3"/1`}},
		{"capture limit cuts data but counts it", "data: abcdef\ndata: ghi\n\n", 4,
			[]string{`n:- d:"abcd"/10`}},
		{"capture limit counts the join newline", "data: abc\ndata: d\n\n", 4,
			[]string{`n:- d:"abc\n"/5`}},
		{"capture limit cuts the name", "event: abcdefgh\ndata: x\n\n", 4,
			[]string{`n:"abcd" d:"x"/1`}},
		{"capture limit applies per event", "data: 123456\n\ndata: ab\n\n", 3,
			[]string{`n:- d:"123"/6`, `n:- d:"ab"/2`}},
		{"flush returns a record without its blank line", "data: a\n\ndata: b\n", 0,
			[]string{`n:- d:"a"/1`, `flush n:- d:"b"/1`}},
		{"flush keeps an unterminated last line", "event: x\ndata: {\"a\":1}", 0,
			[]string{`flush n:"x" d:"{\"a\":1}"/7`}},
		{"flush of a field name without colon", "data", 0,
			[]string{`flush n:- d:""/0`}},
		{"flush of a comment-only tail", ": tail", 0,
			[]string{`flush n:- d:-/0`}},
		{"flush with nothing pending", "data: a\n\n", 0,
			[]string{`n:- d:"a"/1`}},
		{"empty input", "", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check := func(how string, chunks [][]byte) {
				t.Helper()
				got := frameChunks(tt.limit, chunks)
				if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
					t.Fatalf("%s:\n got %q\nwant %q", how, got, tt.want)
				}
			}
			check("whole", whole(tt.in))
			check("byte by byte", byteByByte(tt.in))
			for i := range len(tt.in) + 1 {
				check(fmt.Sprintf("split at %d", i), splitAt(tt.in, i))
			}
		})
	}
}

func TestFramerCRAtChunkBoundary(t *testing.T) {
	// "\r" ends the first chunk and "\n" starts the second: one line end, so
	// the record is not dispatched early and no extra blank line appears.
	got := frameChunks(0, [][]byte{[]byte("data: a\r"), []byte("\ndata: b\r"), []byte("\n\r"), []byte("\n")})
	want := []string{`n:- d:"a\nb"/3`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	// An empty chunk between the CR and the LF must not lose the pending CR.
	got = frameChunks(0, [][]byte{[]byte("data: a\r"), nil, []byte("\n"), []byte("data: b\r"), {}, []byte("\n\n")})
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("with empty chunks: got %q, want %q", got, want)
	}
}

func TestFramerNextStopsAfterFirstEvent(t *testing.T) {
	var f Framer
	f.Reset(0)
	in := []byte("data: 1\r\n\r\ndata: 2\n\n: tail")
	// The event ends at the CR of the blank line's CRLF; its LF is left for
	// the next call, which skips it.
	n, ok := f.Next(in)
	if !ok || n != len("data: 1\r\n\r") {
		t.Fatalf("first Next = %d, %v; want %d, true", n, ok, len("data: 1\r\n\r"))
	}
	if got := string(f.Event().Data); got != "1" {
		t.Fatalf("first event data %q", got)
	}
	in = in[n:]
	n, ok = f.Next(in)
	if !ok || n != len("\ndata: 2\n\n") || string(f.Event().Data) != "2" {
		t.Fatalf("second Next = %d, %v, %q", n, ok, f.Event().Data)
	}
	in = in[n:]
	n, ok = f.Next(in)
	if ok || n != len(in) {
		t.Fatalf("partial Next = %d, %v; want all consumed, false", n, ok)
	}
}

func TestFramerResetForgetsPartialRecord(t *testing.T) {
	var f Framer
	f.Reset(0)
	f.Next([]byte("event: old\ndata: stale\r"))
	f.Reset(0)
	n, ok := f.Next([]byte("\ndata: new\n\n"))
	if !ok || n != len("\ndata: new\n\n") {
		t.Fatalf("Next = %d, %v", n, ok)
	}
	// The leading LF is a blank line of its own after Reset (no pending CR),
	// and the old name must not leak into the new record.
	if got := describe(f.Event()); got != `n:- d:"new"/3` {
		t.Fatalf("event after Reset = %s", got)
	}
}

func TestFramerBuffersStayBounded(t *testing.T) {
	var f Framer
	f.Reset(256)
	big := bytes.Repeat([]byte("x"), 1<<20)
	f.Next([]byte("event: "))
	f.Next(big)
	f.Next([]byte("\ndata: "))
	for range 8 {
		f.Next(big)
	}
	n, ok := f.Next([]byte("\n\n"))
	if !ok || n != 2 {
		t.Fatalf("Next = %d, %v", n, ok)
	}
	ev := f.Event()
	if len(ev.Data) != 256 || ev.DataLen != 8<<20 || len(ev.Name) != 256 {
		t.Fatalf("len(Data)=%d DataLen=%d len(Name)=%d", len(ev.Data), ev.DataLen, len(ev.Name))
	}
	if cap(f.data) > 4096 || cap(f.name) > 4096 {
		t.Fatalf("buffers grew past the capture limit: data cap %d, name cap %d", cap(f.data), cap(f.name))
	}
}

// refFrame is a deliberately naive framer used as an oracle by the tests and
// FuzzFramer: it splits the whole input into lines first, then applies the
// WHATWG field rules line by line.
func refFrame(in []byte, limit int) []string {
	capped := func(b []byte) []byte { return b[:min(len(b), limitOr(limit, len(b)))] }
	var (
		out           []string
		line          []byte
		lines         [][]byte
		name, data    []byte
		hasName       bool
		hasData, seen bool
		dataLen       int
	)
	in = bytes.TrimPrefix(in, []byte("\xEF\xBB\xBF")) // one leading BOM is not part of the stream
	for i := 0; i < len(in); i++ {
		switch in[i] {
		case '\r':
			lines = append(lines, line)
			line = nil
			if i+1 < len(in) && in[i+1] == '\n' {
				i++
			}
		case '\n':
			lines = append(lines, line)
			line = nil
		default:
			line = append(line, in[i])
		}
	}
	if len(line) > 0 {
		lines = append(lines, line) // the unterminated last line counts at EOF
	}
	emit := func(prefix string) {
		ev := Event{DataLen: dataLen, HasData: hasData}
		if hasName {
			ev.Name = append([]byte{}, capped(name)...)
		}
		if hasData {
			ev.Data = append([]byte{}, capped(data)...)
		}
		out = append(out, prefix+describe(ev))
		name, hasName, data, hasData, seen, dataLen = nil, false, nil, false, false, 0
	}
	for _, l := range lines {
		if len(l) == 0 {
			if seen {
				emit("")
			}
			continue
		}
		seen = true
		if l[0] == ':' {
			continue
		}
		field, value := l, []byte(nil)
		if c := bytes.IndexByte(l, ':'); c >= 0 {
			field, value = l[:c], l[c+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "error": // llama.cpp's dialect: event "error" with the value as data
			name, hasName = []byte("error"), true
			fallthrough
		case "data":
			if hasData {
				data = append(data, '\n')
				dataLen++
			}
			hasData = true
			data = append(data, value...)
			dataLen += len(value)
		case "event":
			name = append([]byte{}, value...)
			hasName = true
		}
	}
	if seen {
		emit("flush ")
	}
	return out
}

func limitOr(limit, n int) int {
	if limit <= 0 {
		return n
	}
	return limit
}

func TestFramerMatchesReferenceOnFixtures(t *testing.T) {
	for _, path := range fixturePaths(t) {
		in := readFile(t, path)
		for _, variant := range lineEndVariants(in) {
			for _, limit := range []int{0, 16} {
				want := refFrame(variant.data, limit)
				if len(want) == 0 {
					t.Fatalf("%s: reference found no events", path)
				}
				got := frameChunks(limit, [][]byte{variant.data})
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("%s (%s, limit %d):\n got %q\nwant %q", path, variant.name, limit, got, want)
				}
				got = frameChunks(limit, chunked(variant.data, 7))
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("%s (%s, limit %d, 7-byte chunks):\n got %q\nwant %q", path, variant.name, limit, got, want)
				}
			}
		}
	}
}

type variant struct {
	name string
	data []byte
}

// lineEndVariants returns in (written with LF) also with CRLF and lone CR
// line ends.
func lineEndVariants(in []byte) []variant {
	return []variant{
		{"LF", in},
		{"CRLF", bytes.ReplaceAll(in, []byte("\n"), []byte("\r\n"))},
		{"CR", bytes.ReplaceAll(in, []byte("\n"), []byte("\r"))},
	}
}

func chunked(in []byte, size int) [][]byte {
	var out [][]byte
	for len(in) > size {
		out = append(out, in[:size])
		in = in[size:]
	}
	return append(out, in)
}

func TestIndexLineEnd(t *testing.T) {
	naive := func(b []byte) int {
		for i, c := range b {
			if c == '\r' || c == '\n' {
				return i
			}
		}
		return -1
	}
	buf := bytes.Repeat([]byte("a"), 2100)
	check := func(b []byte) {
		t.Helper()
		if got, want := indexLineEnd(b), naive(b); got != want {
			t.Fatalf("indexLineEnd = %d, want %d", got, want)
		}
	}
	check(buf)
	check(nil)
	// Around every window edge (256, 768, 1792) and elsewhere.
	for _, p := range []int{0, 1, 254, 255, 256, 257, 300, 511, 512, 767, 768, 769, 1791, 1792, 1793, 2099} {
		for _, first := range []byte{'\r', '\n'} {
			b := bytes.Clone(buf)
			b[p] = first
			check(b)
			for _, q := range []int{p + 1, p + 256, 2099} {
				if q <= p || q >= len(b) {
					continue
				}
				c := bytes.Clone(b)
				c[q] = '\r' + '\n' - first // the other one, later
				check(c)
			}
		}
	}
}
