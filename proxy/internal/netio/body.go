package netio

import (
	"bufio"
	"bytes"
	"io"

	"github.com/valyala/fasthttp"
)

// The sidecar decodes upstream response bodies itself, straight out of the connection's
// buffered reader: fasthttp parses the status line and headers only (Conn.ReadHead).
// Reading in place means no second buffer: the peek hands the gate the bytes in the
// connection's buffer, and a committed stream writes them to the client from there. It also
// means a committed stream that waits for its next event holds no read buffer at all
// (Conn.ExpectLongWaits).

type bodyMode uint8

const (
	bodyNone       bodyMode = iota // HEAD, 1xx, 204, 304: no body
	bodyLength                     // Content-Length bytes
	bodyChunked                    // Transfer-Encoding: chunked
	bodyUntilClose                 // neither: the body ends when the upstream closes
)

// Body is one upstream response body being read in place. Next returns the body bytes the
// connection's buffer holds (reading once when it holds none), Consume moves past them. Owned
// by the attempt that read the response head; not safe for concurrent use. The zero Body is
// ready for Reset.
type Body struct {
	c        *Conn
	mode     bodyMode
	left     int64 // bytes left of the body (bodyLength) or of the current chunk (bodyChunked)
	needCRLF bool  // a chunk's data ended: its CRLF comes before the next size line
	done     bool  // the body ended where its framing says
	err      error // the error that ended it otherwise (sticky)
}

// Reset prepares reading the body of resp, whose head was just read from c (Conn.ReadHead);
// head tells that it answers a HEAD request, whose answer has no body whatever it says.
func (b *Body) Reset(c *Conn, resp *fasthttp.Response, head bool) {
	*b = Body{c: c}
	status := resp.StatusCode()
	switch cl := resp.Header.ContentLength(); {
	case head || status < 200 || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified:
		b.mode, b.done = bodyNone, true
	case cl >= 0:
		b.mode, b.left, b.done = bodyLength, int64(cl), cl == 0
	case cl == -1:
		b.mode = bodyChunked
	default:
		b.mode = bodyUntilClose
	}
}

// Has reports whether the response has a body to read at all.
func (b *Body) Has() bool { return b.mode != bodyNone }

// Reusable reports whether the body was read to its framed end, so the connection can carry
// another request (given the upstream did not ask to close it).
func (b *Body) Reusable() bool { return b.done && b.mode != bodyUntilClose }

// Ended reports whether the body ended, properly or not: Next has nothing more to wait for.
func (b *Body) Ended() bool { return b.done || b.err != nil }

// Next returns the body bytes available now, blocking on one read when the buffer holds none,
// or the error that ended the body: io.EOF at its proper end, io.ErrUnexpectedEOF when the
// upstream closed early, ErrBrokenChunk, a wait's reason when the read gave up (ErrDeadline,
// ErrClientGone, ErrShutdown), or the read's own error. The bytes are valid until Consume or
// the next read on the connection.
func (b *Body) Next() ([]byte, error) {
	if b.err != nil {
		return nil, b.err
	}
	if b.done {
		return nil, io.EOF
	}
	br := b.c.reader()
	if b.mode == bodyChunked && b.left == 0 {
		if err := b.chunkHeader(br); err != nil {
			return nil, b.fail(err)
		}
		if b.done {
			return nil, io.EOF
		}
	}
	if br.Buffered() == 0 {
		if _, err := br.Peek(1); err != nil {
			if err == io.EOF && b.mode == bodyUntilClose {
				b.done = true
				return nil, io.EOF
			}
			return nil, b.fail(err)
		}
	}
	n := br.Buffered()
	if b.mode != bodyUntilClose && int64(n) > b.left {
		n = int(b.left)
	}
	p, _ := br.Peek(n)
	return p, nil
}

// Consume moves past n bytes that Next returned.
func (b *Body) Consume(n int) {
	if n <= 0 {
		return
	}
	b.c.br.Discard(n) // n bytes are buffered: Next returned them
	if b.mode == bodyUntilClose {
		return
	}
	b.left -= int64(n)
	if b.left == 0 {
		switch b.mode {
		case bodyLength:
			b.done = true
		case bodyChunked:
			// The chunk's CRLF is taken now when it is there, so a stream waiting for its next
			// chunk leaves nothing buffered and can wait without a buffer.
			br := b.c.br
			if crlf, _ := br.Peek(min(2, br.Buffered())); string(crlf) == "\r\n" {
				br.Discard(2) // buffered
			} else {
				b.needCRLF = true
			}
		}
	}
}

// EndsInBuffer reports whether the body ends with what the connection's buffer already
// holds: its last bytes arrived with the end of the body (the common case for a short answer).
// It reads only what is buffered, never waits.
func (b *Body) EndsInBuffer() bool {
	switch b.mode {
	case bodyLength:
		return b.done
	case bodyChunked:
		if b.done {
			return true
		}
		// The end of a chunked body is the last chunk's CRLF, "0", CRLF and the empty line:
		// only worth parsing when all of it is there. Parsing reads whole lines, so what is
		// buffered must end with the empty line: a line cut short ("0;ext=1" whose CRLF is
		// still on its way) would make the parse wait for the upstream.
		n := b.c.buffered()
		if b.left != 0 || n < len("0\r\n\r\n") {
			return false
		}
		if p, _ := b.c.br.Peek(n); !bytes.HasSuffix(p, []byte("\n\r\n")) && !bytes.HasSuffix(p, []byte("\n\n")) {
			return false
		}
		_, err := b.Next()
		return err == io.EOF
	}
	return false
}

// fail makes err the body's end; a clean EOF in the middle of a framed body is a truncation.
func (b *Body) fail(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	b.err = b.c.cause(err)
	return b.err
}

// chunkHeader reads up to the next chunk's data: the previous chunk's CRLF, the size line, and
// after the last (zero-size) chunk the trailer section, which ends the body.
func (b *Body) chunkHeader(br *bufio.Reader) error {
	if b.needCRLF {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		if len(line) != 0 {
			return ErrBrokenChunk
		}
		b.needCRLF = false
	}
	line, err := readLine(br)
	if err != nil {
		return err
	}
	size, ok := parseChunkSize(line)
	if !ok {
		return ErrBrokenChunk
	}
	if size > 0 {
		b.left = size
		return nil
	}
	for { // trailer fields, up to the empty line
		line, err := readLine(br)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			b.done = true
			return nil
		}
	}
}

// readLine reads one line ending in LF and returns it without its CRLF or LF.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull:
		return nil, ErrBrokenChunk // longer than the reader's buffer: not a chunk-size or trailer line
	case err != nil:
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// parseChunkSize reads a chunk-size line: hex digits, then optional whitespace and chunk
// extensions (";name=value"), which are ignored.
func parseChunkSize(line []byte) (int64, bool) {
	var size int64
	i := 0
	for ; i < len(line); i++ {
		d, ok := hexDigit(line[i])
		if !ok {
			break
		}
		if size > (1<<62)>>4 {
			return 0, false // larger than anything a body may be
		}
		size = size<<4 | int64(d)
	}
	if i == 0 {
		return 0, false
	}
	for ; i < len(line); i++ {
		switch line[i] {
		case ' ', '\t':
		case ';':
			return size, true
		default:
			return 0, false
		}
	}
	return size, true
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
