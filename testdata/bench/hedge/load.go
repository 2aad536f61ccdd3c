package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"
)

// loadConfig is one fixed-rate run: where, how fast, for how long, and the tag the mock counts
// its measured requests under (tag+"/measure"; the warm-up's under tag+"/warmup").
type loadConfig struct {
	url      string
	rate     float64 // requests per second
	duration time.Duration
	warmup   time.Duration // sent on the same schedule before duration, not recorded
	timeout  time.Duration // for one request, from its intended start to its end
	tag      string
}

// loadResult is what runLoad measured of the requests intended within duration.
type loadResult struct {
	requests int             // answered with a complete stream that had content
	errors   int             // anything else
	firstErr string          // the first error's text
	ttfc     []time.Duration // time to first content of each answered request, sorted
}

// requestBody is the chat request the load generator sends.
const requestBody = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"Say hello."}]}`

// runLoad sends requests on a fixed schedule, request i at start + i/rate, each at its time
// whatever the others are doing (an open loop: a slow answer delays no other request), and
// measures each one's time to first content: from its intended start to the first data event
// that carries content. It talks to loopback only.
func runLoad(cfg loadConfig) (loadResult, error) {
	u, err := url.Parse(cfg.url)
	if err != nil || u.Scheme != "http" || !loopbackHosts[u.Hostname()] {
		return loadResult{}, fmt.Errorf("-url %q: want http://127.0.0.1:PORT/..., on loopback", cfg.url)
	}
	if !(cfg.rate > 0) || cfg.duration <= 0 || cfg.warmup < 0 || cfg.timeout <= 0 {
		return loadResult{}, errors.New("the rate, duration and timeout must be positive, the warm-up not negative")
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}, Timeout: cfg.timeout}
	defer client.CloseIdleConnections()

	var (
		mu  sync.Mutex
		res loadResult
		wg  sync.WaitGroup
	)
	start := time.Now().Add(20 * time.Millisecond)
	from, end := start.Add(cfg.warmup), start.Add(cfg.warmup+cfg.duration)
	for i := 0; ; i++ {
		intended := start.Add(time.Duration(float64(i) * float64(time.Second) / cfg.rate))
		if !intended.Before(end) {
			break
		}
		time.Sleep(time.Until(intended))
		measured := !intended.Before(from)
		phase := cfg.tag + "/warmup"
		if measured {
			phase = cfg.tag + "/measure"
		}
		wg.Go(func() {
			d, err := firstContent(client, cfg.url, phase, intended)
			if !measured {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.errors++
				if res.firstErr == "" {
					res.firstErr = err.Error()
				}
				return
			}
			res.requests++
			res.ttfc = append(res.ttfc, d)
		})
	}
	wg.Wait()
	slices.Sort(res.ttfc)
	return res, nil
}

// loopbackHosts are the only hosts the load generator sends to.
var loopbackHosts = map[string]bool{"127.0.0.1": true, "::1": true, "localhost": true}

// firstContent sends one streaming request and returns the time from intended to its first
// content. The rest of the stream is read to its [DONE]: a stream that ends without it, or
// without content, is an error.
func firstContent(client *http.Client, target, phase string, intended time.Time) (time.Duration, error) {
	req, err := http.NewRequest(http.MethodPost, target, bytes.NewReader([]byte(requestBody)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer sk-bench-not-a-key")
	req.Header.Set(phaseHeader, phase)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var ttfc time.Duration
	done := false
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadSlice('\n')
		if ttfc == 0 && hasContent(line) {
			ttfc = time.Since(intended)
		}
		done = done || bytes.HasPrefix(line, []byte("data: [DONE]"))
		if errors.Is(err, bufio.ErrBufferFull) {
			continue // a long line: its start was looked at
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	switch {
	case ttfc == 0:
		return 0, errors.New("the stream had no content")
	case !done:
		return 0, errors.New("the stream ended without [DONE]")
	}
	return ttfc, nil
}

// hasContent reports whether an SSE line is a chat chunk with content: a data line with a
// "content" string that is not empty.
func hasContent(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("data:")) {
		return false
	}
	_, after, ok := bytes.Cut(line, []byte(`"content":"`))
	return ok && len(after) > 0 && after[0] != '"'
}

// percentile returns the nearest-rank q-quantile (0 < q <= 1) of sorted, 0 when it is empty.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// extraPercent is how many more upstream requests than client requests there were, in percent
// of the client requests.
func extraPercent(upstream, client int64) float64 {
	if client == 0 {
		return 0
	}
	return float64(upstream-client) / float64(client) * 100
}
