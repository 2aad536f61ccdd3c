package main

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestEvents(t *testing.T) {
	got := events([]byte("data: a\n\ndata: b\n\ndata: [DONE]\n\n"))
	want := []string{"data: a\n\n", "data: b\n\n", "data: [DONE]\n\n"}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Fatalf("event %d: got %q, want %q", i, got[i], want[i])
		}
	}
	if got := events([]byte("data: a\n\ndata: b")); len(got) != 2 || string(got[1]) != "data: b" {
		t.Fatalf("a stream without its last blank line: got %q", got)
	}
}

// The stream arrives whole, one event at a time, gap apart.
func TestPaced(t *testing.T) {
	const gap = 30 * time.Millisecond
	ln, err := listenLoopback("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler(events([]byte("data: a\n\ndata: b\n\ndata: [DONE]\n\n")), gap)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	var lines []string
	var at []time.Time
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "data: ") {
			lines = append(lines, line)
			at = append(at, time.Now())
		}
	}
	if strings.Join(lines, "") != "data: a\ndata: b\ndata: [DONE]\n" {
		t.Fatalf("got %q", lines)
	}
	if d := at[2].Sub(at[0]); d < 2*gap-5*time.Millisecond {
		t.Fatalf("the three events arrived within %v, want them %v apart", d, gap)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, a := range []string{"0.0.0.0:0", ":0", "10.1.2.3:0"} {
		if ln, err := listenLoopback(a); err == nil {
			ln.Close()
			t.Errorf("listenLoopback(%q) listened", a)
		}
	}
}
