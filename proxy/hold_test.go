package proxy

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/llm-failover/failover/proxy/internal/config"
	"github.com/llm-failover/failover/stream"
)

// loopbackPair returns both ends of a loopback TCP connection: the accepted one and the
// dialled one. Both close when the test ends.
func loopbackPair(tb testing.TB) (accepted, dialled net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	dialled, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dialled.Close() })
	if accepted, err = ln.Accept(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { accepted.Close() })
	return accepted, dialled
}

// A committed SSE stream holds the start of an event back in a buffer lent only while it holds
// one (docs/streams.md, Streams): a stream waiting between events holds none, and holding and sending
// an event that came in two reads allocates nothing once the pool has a buffer.
func TestPipeHoldsAnEventStartOnlyWhileItWaitsForItsEnd(t *testing.T) {
	w, peer := loopbackPair(t)
	ex := &exchange{srv: &Server{cfg: &config.Config{Server: config.ServerConfig{IdleTimeout: time.Minute}}}}
	ex.tries[0].up.gate.Reset(stream.Chat, 0) // commits at headers
	ex.tries[0].up.gate.Feed(nil)
	p := &pipe{ex: ex, a: &ex.tries[0], sse: true}
	received := func(n int) string {
		t.Helper()
		b := make([]byte, n)
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(peer, b); err != nil {
			t.Fatalf("reading %d bytes: %v", n, err)
		}
		return string(b)
	}
	read := func(data string) {
		t.Helper()
		d := []byte(data)
		if err := p.forward(w, nil, d, ex.tries[0].up.gate.Observe(d)); err != nil {
			t.Fatal(err)
		}
	}
	const a, b = "data: {\"a\":1}\n\n", "data: {\"b\":2}\n\n"

	read(a + b[:9])
	if s := received(len(a)); s != a || p.hold == nil || string(*p.hold) != b[:9] {
		t.Fatalf("sent %q, holding %v; want the whole event sent and the next one's start held", s, p.hold)
	}
	read(b[9:])
	if s := received(len(b)); s != b || p.hold != nil {
		t.Fatalf("sent %q; want the held start and its end, and the buffer given back", s)
	}

	// An event larger than holdLimit goes out as it comes, its end too.
	big := "data: \"" + strings.Repeat("x", holdLimit) + "\"\n\n"
	read(big[:holdLimit/2])
	if p.hold == nil {
		t.Fatal("half of the large event was not held")
	}
	read(big[holdLimit/2 : holdLimit+8])
	if s := received(holdLimit + 8); s != big[:holdLimit+8] || p.hold != nil || !p.passing {
		t.Fatal("the event past holdLimit was not sent as it came")
	}
	read(big[holdLimit+8:] + a[:3])
	if s := received(len(big) - holdLimit - 8); s != big[holdLimit+8:] || p.passing || p.hold == nil || string(*p.hold) != a[:3] {
		t.Fatalf("after the large event: sent %q, passing %v; want its end sent and the next event's start held", s, p.passing)
	}
	p.release()
	if raceEnabled {
		return // allocation counts are not meaningful under the race detector
	}

	go io.Copy(io.Discard, peer) // ends when the test closes the connection
	first, second := []byte(a+b[:9]), []byte(b[9:])
	allocs := testing.AllocsPerRun(100, func() {
		p.forward(w, nil, first, ex.tries[0].up.gate.Observe(first)) // the peer reads all
		p.forward(w, nil, second, ex.tries[0].up.gate.Observe(second))
	})
	if allocs != 0 {
		t.Errorf("%v allocations per event held and sent, want 0", allocs)
	}
	if p.hold != nil {
		t.Fatal("a buffer is still lent between events")
	}
}

// BenchmarkPipeForward sends a committed chat stream's events to a loopback socket as the pipe
// does after commit: one read per event (the common case, sent from where it was read), or
// each event in two reads (its start held back, then sent with its end).
//
//	go test -run xxx -bench PipeForward -benchmem ./proxy
func BenchmarkPipeForward(b *testing.B) {
	for _, split := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "split"}[split]
		b.Run(name, func(b *testing.B) {
			w, peer := loopbackPair(b)
			go io.Copy(io.Discard, peer) // ends when the benchmark closes the connection
			ex := &exchange{srv: &Server{cfg: &config.Config{Server: config.ServerConfig{IdleTimeout: time.Minute}}}}
			p := &pipe{ex: ex, a: &ex.tries[0], sse: true, chunked: true}
			var reads [][]byte
			for range 20 {
				ev := []byte(`data: {"id":"chatcmpl-test","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}` + "\n\n")
				if split {
					reads = append(reads, ev[:len(ev)/2], ev[len(ev)/2:])
				} else {
					reads = append(reads, ev)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				ex.tries[0].up.gate.Reset(stream.Chat, 0)
				ex.tries[0].up.gate.Feed(nil)
				for _, r := range reads {
					if err := p.forward(w, nil, r, ex.tries[0].up.gate.Observe(r)); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*20), "ns/event")
		})
	}
}

// deadlineConn records the write deadlines set on a connection and checks, at every write, that
// the one in force gives the client at least idle (less 15ms for the moments between armWrite's
// clock reading and the write) and at most idle+slack.
type deadlineConn struct {
	net.Conn
	t           *testing.T
	idle, slack time.Duration
	set         time.Time
	sets        int
}

func (c *deadlineConn) SetWriteDeadline(d time.Time) error {
	c.set = d
	c.sets++
	return c.Conn.SetWriteDeadline(d)
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	now := time.Now() // a little after armWrite's reading: a deadline just kept may seem a little short
	if c.set.Before(now.Add(c.idle-15*time.Millisecond)) || c.set.After(now.Add(c.idle+c.slack)) {
		c.t.Errorf("a write at %v has its deadline %v away, want between %v and %v", now.Format(time.StampMicro), c.set.Sub(now), c.idle, c.idle+c.slack)
	}
	return c.Conn.Write(b)
}

// A committed stream gives the client FAILOVER_IDLE_TIMEOUT for each write, moving the write
// deadline only when the one set would come sooner, and then writeSlack later: events a few
// milliseconds apart move it once per slack, not once each.
func TestPipeMovesTheWriteDeadlineOncePerSlack(t *testing.T) {
	const idle = 160 * time.Millisecond // slack 20ms
	w, peer := loopbackPair(t)
	dc := &deadlineConn{Conn: w, t: t, idle: idle, slack: writeSlack(idle)}
	ex := &exchange{srv: &Server{cfg: &config.Config{Server: config.ServerConfig{IdleTimeout: idle}}}}
	ex.tries[0].up.gate.Reset(stream.Chat, 0)
	ex.tries[0].up.gate.Feed(nil)
	p := &pipe{ex: ex, a: &ex.tries[0], sse: true}
	go io.Copy(io.Discard, peer) // ends when the test closes the connection
	const events, gap = 40, 2 * time.Millisecond
	ev := []byte("data: {\"a\":1}\n\n")
	began := time.Now()
	for range events {
		if err := p.forward(dc, nil, ev, ex.tries[0].up.gate.Observe(ev)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(gap)
	}
	// One move per slack that passed, and the first: far fewer than one per event.
	if most := int(time.Since(began)/dc.slack) + 2; dc.sets > most || dc.sets >= events {
		t.Fatalf("%d events moved the write deadline %d times, want at most %d", events, dc.sets, most)
	}
}
