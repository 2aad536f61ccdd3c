package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Millisecond}, {0.99, 990 * time.Millisecond}, {0.999, 999 * time.Millisecond}, {1, time.Second}, {0, time.Millisecond}} {
		if got := percentile(d, tc.q); got != tc.want {
			t.Errorf("p%g of 1..1000 ms = %v, want %v", tc.q*100, got, tc.want)
		}
	}
	if got := percentile([]time.Duration{7}, 0.999); got != 7 {
		t.Errorf("one sample: %v", got)
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("no sample: %v", got)
	}
	if got := extraPercent(1063, 1000); got < 6.29 || got > 6.31 {
		t.Errorf("extra of 1063 upstream for 1000 requests: %v%%, want 6.3%%", got)
	}
}

// The default distribution over many draws: 5% in the tail at exactly 10 s, the rest spread
// evenly over 500 ms ±20%.
func TestDistributionShape(t *testing.T) {
	d := distribution{fast: 500 * time.Millisecond, jitter: 0.2, slow: 10 * time.Second, slowFrac: 0.05}
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	slow, below := 0, 0
	var sum time.Duration
	lo, hi := time.Hour, time.Duration(0)
	for range n {
		v, inTail := d.draw(r)
		if inTail {
			if v != d.slow {
				t.Fatalf("a tail draw of %v", v)
			}
			slow++
			continue
		}
		sum += v
		lo, hi = min(lo, v), max(hi, v)
		if v < d.fast {
			below++
		}
	}
	fast := n - slow
	if frac := float64(slow) / n; frac < 0.048 || frac > 0.052 {
		t.Errorf("%.4f of the draws in the tail, want 0.05", frac)
	}
	if lo < 400*time.Millisecond || hi > 600*time.Millisecond || lo > 402*time.Millisecond || hi < 598*time.Millisecond {
		t.Errorf("the usual draws span [%v, %v], want all of [400ms, 600ms]", lo, hi)
	}
	if mean := sum / time.Duration(fast); mean < 498*time.Millisecond || mean > 502*time.Millisecond {
		t.Errorf("the usual draws average %v, want 500ms", mean)
	}
	if half := float64(below) / float64(fast); half < 0.49 || half > 0.51 {
		t.Errorf("%.3f of the usual draws below 500ms, want half", half)
	}
	none := distribution{fast: 100 * time.Millisecond, slow: time.Second}
	for range 1000 {
		if v, inTail := none.draw(r); v != 100*time.Millisecond || inTail {
			t.Fatalf("no jitter and no tail: %v (tail %v)", v, inTail)
		}
	}
}

func TestHasContent(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{roleEvent, false},
		{contentEvent, true},
		{finishEvent, false},
		{doneEvent, false},
		{": a comment with \"content\":\"x\"\n", false},
		{`data: {"choices":[{"delta":{"content":"\"quoted\""}}]}` + "\n", true},
		{`data: {"choices":[{"delta":{"content":""}}]}` + "\n", false},
	} {
		if got := hasContent([]byte(tc.line)); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.line, got, tc.want)
		}
	}
}

// The load generator against the mock itself, on loopback: every measured request is one
// upstream request, its time to first content is the drawn one, and the requests the mock drew
// from the tail are the slow ones the client saw.
func TestLoadAgainstMock(t *testing.T) {
	dist := distribution{fast: 20 * time.Millisecond, jitter: 0.2, slow: 400 * time.Millisecond, slowFrac: 0.2}
	m, err := startMock(dist, 7, [2]string{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	res, err := runLoad(loadConfig{url: "http://" + m.addrs[1] + "/v1/chat/completions", rate: 100, duration: 600 * time.Millisecond,
		warmup: 100 * time.Millisecond, timeout: 10 * time.Second, tag: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if res.errors != 0 || res.requests < 50 || len(res.ttfc) != res.requests {
		t.Fatalf("%d requests, %d errors (first: %s), %d times", res.requests, res.errors, res.firstErr, len(res.ttfc))
	}
	c := m.of("test/measure")
	if got := c.requests.Load(); got != int64(res.requests) || c.byTarget[1].Load() != got || c.cut.Load() != 0 {
		t.Fatalf("the mock counted %d measured requests (%d on the second target), %d cut; the client sent %d", got, c.byTarget[1].Load(), c.cut.Load(), res.requests)
	}
	slowSeen := 0
	for _, d := range res.ttfc {
		if d >= 200*time.Millisecond {
			slowSeen++
		}
	}
	if int64(slowSeen) != c.slow.Load() || slowSeen == 0 {
		t.Errorf("the client saw %d slow first contents, the mock drew %d from the tail", slowSeen, c.slow.Load())
	}
	if p50 := percentile(res.ttfc, 0.5); p50 < 16*time.Millisecond || p50 > 150*time.Millisecond {
		t.Errorf("p50 %v, want about 20ms", p50)
	}
	if row := tableRow("test", res, c); !strings.Contains(row, fmt.Sprintf("| test | %d | 0 |", res.requests)) || !strings.Contains(row, "| +0.0% | 0 |") {
		t.Errorf("row %q", row)
	}
}

// A stream the client closes before its first content is counted as cut, at once.
func TestMockCountsCut(t *testing.T) {
	m, err := startMock(distribution{fast: time.Minute, slow: time.Minute}, 1, [2]string{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	c, err := net.Dial("tcp", m.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s: cut\r\nContent-Length: %d\r\n\r\n%s",
		phaseHeader, len(requestBody), requestBody)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	var got strings.Builder
	for !strings.Contains(got.String(), `"role":"assistant"`) {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("before the opening: %v (%q)", err, got.String())
		}
		got.WriteString(line)
	}
	if !strings.HasPrefix(got.String(), "HTTP/1.1 200 OK\r\n") || strings.Contains(got.String(), "Hello") {
		t.Fatalf("the opening: %q", got.String())
	}
	c.Close()
	counts := m.of("cut")
	for deadline := time.Now().Add(3 * time.Second); counts.cut.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if counts.requests.Load() != 1 || counts.cut.Load() != 1 || counts.inflight.Load() != 0 {
		t.Fatalf("requests %d, cut %d, in flight %d; want 1, 1, 0", counts.requests.Load(), counts.cut.Load(), counts.inflight.Load())
	}
}

// A request that is not a streaming chat request gets a 400 and is not counted.
func TestMockRefusesOtherRequests(t *testing.T) {
	m, err := startMock(distribution{fast: time.Millisecond, slow: time.Millisecond}, 1, [2]string{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	c, err := net.Dial("tcp", m.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 400") {
		t.Fatalf("%q, %v", line, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.tags) != 0 {
		t.Fatalf("counted: %v", m.tags)
	}
}

func TestListenLoopbackOnly(t *testing.T) {
	if _, err := listenLoopback("0.0.0.0:0"); err == nil {
		t.Error("listened on every address")
	}
	if _, err := runLoad(loadConfig{url: "http://10.0.0.1/v1/chat/completions", rate: 1, duration: time.Second, timeout: time.Second}); err == nil {
		t.Error("sent load off loopback")
	}
}
