// Command paced is an upstream for testdata/bench/run.sh's paced workload: it answers every
// request with one SSE stream, sending its events one at a time, -gap apart, as a model
// streams its tokens. The stream reaches the client through the proxy's piping path (read,
// watch, write, per event), which a stream that arrives in one piece never takes.
//
//	go run ./testdata/bench/paced -listen 127.0.0.1:29000 -body sse.txt -gap 1ms
//
// The body file is the stream; it is cut into events after each blank line. It listens on
// loopback only and uses the standard library only.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on (loopback only)")
	bodyFile := flag.String("body", "", "the SSE stream to send, events separated by blank lines")
	gap := flag.Duration("gap", time.Millisecond, "time between two events")
	flag.Parse()
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		log.Fatalf("paced: -body: %v", err)
	}
	ln, err := listenLoopback(*listen)
	if err != nil {
		log.Fatalf("paced: %v", err)
	}
	log.Fatal(http.Serve(ln, handler(events(body), *gap)))
}

// listenLoopback listens on addr, which must be a loopback address.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-listen %q: want host:port", addr)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("-listen %q: only loopback addresses (127.0.0.1, ::1, localhost)", addr)
	}
	return net.Listen("tcp", addr)
}

// events cuts a stream after each blank line ("\n\n"); what follows the last one, if
// anything, is an event too.
func events(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\n\n"))
		if i < 0 {
			return append(out, b)
		}
		out = append(out, b[:i+2])
		b = b[i+2:]
	}
	return out
}

// handler reads the request's body and answers with evs, each flushed on its own, gap apart.
func handler(evs [][]byte, gap time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		f := w.(http.Flusher)
		for i, ev := range evs {
			if i > 0 {
				time.Sleep(gap)
			}
			if _, err := w.Write(ev); err != nil {
				return
			}
			f.Flush()
		}
	})
}
