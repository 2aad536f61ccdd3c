package proxy

import (
	"bytes"
	"crypto/subtle"
	"strconv"

	"github.com/valyala/fasthttp"
)

var (
	headerAuthorization = []byte("Authorization")
	headerXAPIKey       = []byte("X-Api-Key")
	headerRequestID     = []byte("X-Request-Id")
	headerUpstreamID    = []byte("X-Upstream-Request-Id")
	headerAttempt       = []byte("X-Failover-Attempt")
	headerTarget        = []byte("X-Failover-Target")
	headerAttempts      = []byte("X-Failover-Attempts")
	headerModel         = []byte("X-Failover-Model")
	headerAcceptEnc     = []byte("Accept-Encoding")
	headerRetryAfter    = []byte("Retry-After")
	headerRetryAfterMs  = []byte("Retry-After-Ms")
	headerAccept        = []byte("Accept")
	headerConnection    = []byte("Connection")
	valueIdentity       = []byte("identity")
	valueEventStream    = []byte("text/event-stream")
	valueChunked        = []byte("chunked")
	prefixFailover      = []byte("x-failover-")
)

// stringConnection names the Connection header for PeekAll, which takes a string.
const stringConnection = "Connection"

// hopByHop are the headers that describe one connection, not the message (RFC 9110 section
// 7.6.1): a proxy must not forward them. Tokens named in Connection are removed too.
var hopByHop = newNameSet(
	[]byte("Connection"), []byte("Proxy-Connection"), []byte("Keep-Alive"), []byte("Proxy-Authenticate"),
	[]byte("Proxy-Authorization"), []byte("Te"), []byte("Trailer"), []byte("Transfer-Encoding"), []byte("Upgrade"),
	[]byte("Expect"),
)

// nameSet holds header names by their length, so that a name is compared (sameName) only with
// the members of its own length: most names a request or an answer carries meet none. Every
// header of every request and answer is looked up in one or more of them.
type nameSet [][][]byte

func newNameSet(names ...[]byte) nameSet {
	var s nameSet
	for _, n := range names {
		for len(s) <= len(n) {
			s = append(s, nil)
		}
		s[len(n)] = append(s[len(n)], n)
	}
	return s
}

// has reports whether k is one of the set's names, as sameName compares them.
func (s nameSet) has(k []byte) bool {
	if len(k) >= len(s) {
		return false
	}
	for _, n := range s[len(k)] {
		if sameName(k, n) {
			return true
		}
	}
	return false
}

// dropHopByHop deletes from the response header h the hop-by-hop headers, the ones the
// upstream's Connection lines (connection) name, and the upstream's own X-Failover-* (the
// sidecar sets those it sends; an upstream that is itself a sidecar or a gateway must not
// speak for this one). The options are read once (appendConnectionOptions), not once per
// header. Each pass deletes the first header it finds, and ends the work when none follows it
// (usually there is one, Connection itself, or none); otherwise another pass follows: however
// many there are, without a buffer. opts is scratch space for the options, returned for reuse.
func dropHopByHop(h *fasthttp.ResponseHeader, connection, opts [][]byte) [][]byte {
	opts, ok := appendConnectionOptions(opts[:0], connection)
	named := opts
	if !ok {
		named = connection // too many to hold: compared line by line, as isHopByHop can
	}
	// At most one pass per header: a header fasthttp would keep yielding after the delete
	// (none does today) cannot make this loop for ever.
	for range h.Len() + 1 {
		var found []byte
		more := false // a second one follows found
		for k := range h.All() {
			if isHopByHop(k, named) || hasFailoverPrefix(k) {
				if found != nil {
					more = true
					break
				}
				found = k
			}
		}
		if found == nil {
			break
		}
		h.DelBytes(found) // every line of that name
		if !more {
			break
		}
	}
	return opts[:0]
}

// isHopByHop reports whether header k describes one connection: a hop-by-hop header, or one
// a Connection line of the message (connection, every line) names (compared with sameName).
func isHopByHop(k []byte, connection [][]byte) bool {
	if hopByHop.has(k) {
		return true
	}
	for _, line := range connection {
		for len(line) > 0 {
			var tok []byte
			tok, line = cutList(line, ',')
			if sameName(k, bytes.TrimSpace(tok)) {
				return true
			}
		}
	}
	return false
}

// hasFailoverPrefix reports whether header k is an X-Failover-* header (X_Failover_* too:
// sameName).
func hasFailoverPrefix(k []byte) bool {
	return len(k) >= len(prefixFailover) && sameName(k[:len(prefixFailover)], prefixFailover)
}

// clientCredentials are removed when the target sends its own key, so the provider never sees
// the caller's: the keys, and OpenAI's organisation and project headers, which scope a key
// (the caller's organisation with the target's key is answered 401, and a 401 to a target's
// own key ejects the target for every client).
var clientCredentials = newNameSet([]byte("Authorization"), []byte("X-Api-Key"), []byte("Api-Key"), []byte("X-Goog-Api-Key"),
	[]byte("OpenAI-Organization"), []byte("OpenAI-Project"))

// buildRequest writes the upstream request's head for attempt a into ex.upHead, and points
// ex.upBody at its body (docs/decisions.md, Headers). The head is built by hand rather than through a
// fasthttp.RequestHeader: the client's headers are copied once, skipping the ones the sidecar
// drops or sets itself, instead of copied whole and then deleted and set one by one.
func (ex *exchange) buildRequest(a *attempt) {
	t := a.t
	rh, query := ex.requestHead()
	ex.uri = appendUpstreamURI(ex.uri[:0], t, ex.Path, query)
	up := &a.up
	b := append(up.head[:0], rh.Method()...)
	b = append(b, ' ')
	b = append(b, ex.uri...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, t.host...)
	b = append(b, '\r', '\n')

	underscores := 0
	for k, v := range rh.All() {
		if hasUnderscore(k) && !ex.srv.cfg.Server.AllowUnderscoreHeaders {
			underscores++
			continue
		}
		if ex.dropped(t, k, v, ex.connection) {
			continue
		}
		b = appendHeaderLine(b, k, v)
	}
	if underscores > 0 && a.n == 1 { // counted once per request, not per attempt
		ex.srv.metrics.DroppedUnderscore(underscores)
	}
	if t.ownKey {
		b = appendHeaderLine(b, t.authName, t.authValue)
	}
	for _, kv := range t.headers {
		b = appendHeaderLine(b, kv[0], kv[1])
	}
	b = appendHeaderLine(b, headerAcceptEnc, valueIdentity)
	b = appendHeaderLine(b, headerRequestID, ex.RequestID)
	b = append(b, headerAttempt...)
	b = append(b, ':', ' ')
	b = strconv.AppendInt(b, int64(a.n), 10)
	b = append(b, '\r', '\n')

	body := ex.reqBody
	if t.model != nil && ex.fields.modelStart >= 0 {
		up.sub = appendSubstitutedBody(up.sub[:0], ex.reqBody, &ex.fields, t.model)
		body = up.sub
	}
	// As fasthttp writes a request: a length for any body, and for every method but GET and
	// HEAD even when empty.
	if len(body) > 0 || !rh.IsGet() && !rh.IsHead() {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, '\r', '\n')
	}
	up.head = append(b, '\r', '\n')
	up.body = body
}

// maxConnectionOptions bounds the options a request's Connection lines may name. Each one is
// compared with every header the client sent, on every attempt: a 16 KiB header block of a few
// thousand options and a few thousand empty headers would cost some 60 ms of CPU per attempt
// (a hundred times a plain request). Clients name one or two (keep-alive, Upgrade).
const maxConnectionOptions = 32

// readConnection collects the options the client's Connection lines name into ex.connection
// (appendConnectionOptions); false when there are more than maxConnectionOptions.
func (ex *exchange) readConnection() bool { return ex.readConnectionOf(&ex.ctx.Request.Header) }

// readConnectionOf is readConnection on the request header h: ex.connection are views into it.
func (ex *exchange) readConnectionOf(h *fasthttp.RequestHeader) bool {
	var ok bool
	ex.connection, ok = appendConnectionOptions(ex.connection[:0], h.PeekAll(stringConnection))
	return ok
}

// appendConnectionOptions appends to dst the options that Connection lines (lines: fasthttp
// keeps each line) name, one per entry, which isHopByHop reads as one-item lines. Options that
// hopByHop holds (keep-alive, as a rule the only one) are left out: those headers go anyway.
// It reports false when the lines name more than maxConnectionOptions, all options counted.
func appendConnectionOptions(dst, lines [][]byte) ([][]byte, bool) {
	n := 0
	for _, line := range lines {
		for len(line) > 0 {
			var tok []byte
			tok, line = cutList(line, ',')
			if tok = bytes.TrimSpace(tok); len(tok) == 0 {
				continue
			}
			if n++; n > maxConnectionOptions {
				return dst, false
			}
			if !hopByHop.has(tok) {
				dst = append(dst, tok)
			}
		}
	}
	return dst, true
}

// requestHead returns the client's request header and query string: the request's own while
// the handler runs, and after it the copies a stream that may be resumed keeps (resume.go).
func (ex *exchange) requestHead() (*fasthttp.RequestHeader, []byte) {
	if ex.ctx == nil {
		return &ex.resume.header, ex.resume.query
	}
	return &ex.ctx.Request.Header, ex.ctx.URI().QueryString()
}

// appendHeaderLine appends "k: v" and CRLF.
func appendHeaderLine(b, k, v []byte) []byte {
	b = append(b, k...)
	b = append(b, ':', ' ')
	b = append(b, v...)
	return append(b, '\r', '\n')
}

// hasUnderscore reports whether header name k has a '_'. Such a client header is dropped
// unless FAILOVER_ALLOW_UNDERSCORE_HEADERS=true (docs/decisions.md, Headers), as nginx does by default: a
// server that reads headers CGI-style (HTTP_X_API_KEY), behind a target or a proxy in front of
// it, takes X_Api_Key for X-Api-Key, a header the sidecar removed or set itself.
func hasUnderscore(k []byte) bool { return bytes.IndexByte(k, '_') >= 0 }

// dropped reports whether the client's header k (value v) stays behind: hop-by-hop headers
// and the ones the client's Connection lines name, X-Failover-* (the sidecar's own), any
// header that carries FAILOVER_INBOUND_TOKEN (not only the one it was accepted from: a client
// may send it twice, as Authorization and x-api-key), the client's credentials when the
// target sends its own key, and every header the sidecar sets itself (Host, Content-Length,
// Accept-Encoding, X-Request-Id, the target's configured headers). Names are compared with
// sameName: where underscore headers are forwarded, X_Api_Key stays behind as X-Api-Key does.
func (ex *exchange) dropped(t *Target, k, v []byte, connection [][]byte) bool {
	if hasFailoverPrefix(k) || isHopByHop(k, connection) {
		return true
	}
	if setUpstream.has(k) {
		return true
	}
	if ex.tokenHeader != nil && (sameName(k, ex.tokenHeader) || carriesToken(v, ex.srv.inboundToken)) {
		return true
	}
	if t.ownKey {
		if sameName(k, t.authName) || clientCredentials.has(k) {
			return true
		}
	}
	for _, kv := range t.headers {
		if sameName(k, kv[0]) {
			return true
		}
	}
	return false
}

// carriesToken reports whether header value v is the inbound token, bare or after "Bearer ",
// compared in constant time.
func carriesToken(v, tok []byte) bool {
	v = bytes.TrimSpace(v)
	if len(v) > 7 && bytes.EqualFold(v[:7], []byte("bearer ")) {
		v = bytes.TrimSpace(v[7:])
	}
	return subtle.ConstantTimeCompare(v, tok) == 1
}

// setUpstream are the headers the sidecar writes itself on every upstream request.
var setUpstream = newNameSet([]byte("Host"), []byte("Content-Length"), headerAcceptEnc, headerRequestID)

// sameName reports whether two header names are one header: compared in any ASCII case, and
// with '_' read as '-', as a server that reads headers CGI-style does (hasUnderscore).
func sameName(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if nameFold[a[i]] != nameFold[b[i]] {
			return false
		}
	}
	return true
}

// nameFold maps a header name's byte to the one sameName compares: upper-case letters to
// lower case, '_' to '-', every other byte to itself.
var nameFold = func() (t [256]byte) {
	for i := range t {
		t[i] = byte(i)
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = byte(c) + 'a' - 'A'
	}
	t['_'] = '-'
	return t
}()

// hasPrefixFold reports whether s starts with the ASCII word prefix in any case.
func hasPrefixFold(s, prefix []byte) bool {
	return len(s) >= len(prefix) && bytes.EqualFold(s[:len(prefix)], prefix)
}

// acceptsEventStream reports whether an Accept header names text/event-stream, in any case
// (media types are case-insensitive: Accept: Text/Event-Stream asks for a stream too). It is
// a substring search, not a parse of the header's media ranges.
func acceptsEventStream(accept []byte) bool {
	n := len(valueEventStream)
	for i := 0; i+n <= len(accept); i++ {
		if bytes.EqualFold(accept[i:i+n], valueEventStream) {
			return true
		}
	}
	return false
}

// copyResponseHeaders copies the upstream's response headers to the client, minus hop-by-hop
// headers (and those its Connection lines name) and the upstream's X-Failover-*.
func (ex *exchange) copyResponseHeaders(a *attempt) {
	u := &a.up
	up := &u.resp.Header
	h := &ex.ctx.Response.Header
	up.CopyTo(h)
	// CopyTo also copies the upstream header's own "no default Content-Type" flag, which is
	// off: an answer without a Content-Type would reach the client as text/plain.
	h.SetNoDefaultContentType(true)
	// observeHead found the lines to drop as it read the head. When the Connection lines name
	// no option of their own (keep-alive names a hop-by-hop header anyway), those are all of
	// them; otherwise dropHopByHop walks the copy with the options in hand: close among them
	// (which would drop a header named Close).
	if opts, ok := appendConnectionOptions(u.connection[:0], u.connLines); ok && len(opts) == 0 {
		for _, k := range u.drop {
			h.DelBytes(k) // every line of that name
		}
	} else {
		u.connection = dropHopByHop(h, u.connLines, opts)
	}
	h.ResetConnectionClose()
	// X-Request-Id becomes the sidecar's (setFailoverHeaders); the provider's own id (OpenAI's
	// req_..., the one its support asks for) goes back under a name of its own.
	if id := u.requestID; len(id) > 0 && !bytes.Equal(id, ex.RequestID) {
		h.SetCanonical(headerUpstreamID, id)
	}
}

// setFailoverHeaders adds X-Failover-* and X-Request-Id to the answer.
func (ex *exchange) setFailoverHeaders(served *Target) {
	h := &ex.ctx.Response.Header
	// SetCanonical: the names are written in canonical form, so fasthttp need not normalise them.
	if served != nil {
		h.SetCanonical(headerTarget, served.name)
	}
	var num [20]byte
	h.SetCanonical(headerAttempts, strconv.AppendInt(num[:0], int64(ex.Ledger.Len()), 10))
	if ex.ServedModel != nil {
		h.SetCanonical(headerModel, ex.ServedModel)
	}
	h.SetCanonical(headerRequestID, ex.RequestID)
}
