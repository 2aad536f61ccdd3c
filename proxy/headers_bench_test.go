package proxy

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkDropHopByHop copies an upstream answer's header to the client's and drops what must
// stay behind, as copyResponseHeaders does for every answer: an OpenAI-like header with
// Connection: keep-alive (the common case), and one whose Connection line names two more headers.
func BenchmarkDropHopByHop(b *testing.B) {
	const common = "HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 21:00:00 GMT\r\nContent-Type: application/json\r\n" +
		"Content-Length: 641\r\nConnection: keep-alive\r\nopenai-organization: org-x\r\nopenai-processing-ms: 123\r\n" +
		"openai-version: 2020-10-01\r\nx-ratelimit-limit-requests: 10000\r\nx-ratelimit-remaining-requests: 9999\r\n" +
		"x-request-id: req_abc\r\nstrict-transport-security: max-age=31536000\r\ncf-ray: 8f1e2d3c4b5a6978-SJC\r\nServer: cloudflare\r\n"
	for _, bc := range []struct{ name, head string }{
		{"keep-alive", common + "\r\n"},
		{"named", strings.Replace(common, "keep-alive", "keep-alive, X-Hop-1, X-Hop-2", 1) + "X-Hop-1: a\r\nX-Hop-2: b\r\n\r\n"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var up, h fasthttp.ResponseHeader
			if err := up.Read(bufio.NewReader(strings.NewReader(bc.head))); err != nil {
				b.Fatal(err)
			}
			conn := up.PeekAll(stringConnection)
			var opts [][]byte
			b.ReportAllocs()
			for b.Loop() {
				up.CopyTo(&h)
				opts = dropHopByHop(&h, conn, opts)
			}
			for _, name := range []string{"Connection", "X-Hop-1", "X-Hop-2"} {
				if len(h.Peek(name)) > 0 {
					b.Fatalf("%s was kept", name)
				}
			}
			if h.Len() != up.Len()-strings.Count(bc.head, "X-Hop-")/2-1 {
				b.Fatalf("%d headers left of %d", h.Len(), up.Len())
			}
		})
	}
}
