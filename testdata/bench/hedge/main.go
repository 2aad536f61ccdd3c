// Command hedge measures what hedging does to a heavy tail of slow first tokens
// (docs/streams.md#hedging): the time to first content at the client, and what it costs in
// upstream requests. It has three modes:
//
//	go run ./testdata/bench/hedge                        # run: build the sidecar, measure, print the table
//	go run ./testdata/bench/hedge -bin /tmp/failover -rate 100 -duration 100s -configs off,1s,p95
//	go run ./testdata/bench/hedge -mode mock             # only the two mock targets, until interrupted
//	go run ./testdata/bench/hedge -mode load -url http://127.0.0.1:4000/v1/chat/completions
//
// The mock is two targets on loopback ports that answer every streaming chat request with its
// opening at once and its first content after a delay drawn from a heavy tail: 95% at 500 ms
// ±20%, 5% at 10 s (-fast, -jitter, -slow, -slow-frac). It counts the upstream requests it
// receives, and those the sidecar cut before their first content.
//
// The load generator sends streaming chat requests at a fixed rate (an open loop, as
// testdata/bench/latency: a slow answer delays no other request) and measures each one's time to
// first content at the client, from its intended start to the first data event with content.
//
// The runner starts the mock, then the sidecar (-bin; built from the module at the current
// directory when empty) once per -configs entry, FAILOVER_HEDGE_AFTER unset ("off") or set to
// the entry, with the two mock targets, runs the load against it (a warm-up, then the measured
// part), and prints p50, p99 and p99.9 of the time to first content and the extra upstream
// requests in percent of the client's, per entry. Everything listens on 127.0.0.1; the sidecars
// it starts are ended when it ends.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	var (
		mode     = flag.String("mode", "run", "run (the sidecar side by side per -configs), mock (the targets only) or load (against -url)")
		bin      = flag.String("bin", "", "run: the sidecar binary (default: go build the module at the current directory)")
		configs  = flag.String("configs", "off,1s,p95", `run: FAILOVER_HEDGE_AFTER per sidecar, comma-separated; "off" leaves it unset`)
		target   = flag.String("url", "", "load: the streaming chat URL to send to (loopback only)")
		rate     = flag.Float64("rate", 100, "requests per second")
		duration = flag.Duration("duration", 100*time.Second, "measured time per configuration")
		warmup   = flag.Duration("warmup", 10*time.Second, "time before -duration, on the same schedule, not measured (fills the targets' samples and the hedge budget's window)")
		timeout  = flag.Duration("timeout", time.Minute, "the longest one request may take")
		seed     = flag.Uint64("seed", 1, "the mock's random seed")
		listenA  = flag.String("listen-a", "", "mock: the first target's address (default: a free loopback port)")
		listenB  = flag.String("listen-b", "", "mock: the second target's address (default: a free loopback port)")
		dist     distribution
		env      []string
	)
	flag.DurationVar(&dist.fast, "fast", 500*time.Millisecond, "the mock's usual time to first content")
	flag.Float64Var(&dist.jitter, "jitter", 0.2, "the usual time's spread: uniform within ± this fraction of -fast")
	flag.DurationVar(&dist.slow, "slow", 10*time.Second, "the mock's time to first content in the tail")
	flag.Float64Var(&dist.slowFrac, "slow-frac", 0.05, "the fraction of answers in the tail")
	flag.Func("env", "run: a FAILOVER_NAME=value for every sidecar, beside the runner's own (repeatable)", func(s string) error {
		if !strings.HasPrefix(s, "FAILOVER_") || !strings.Contains(s, "=") {
			return errors.New("want FAILOVER_NAME=value")
		}
		env = append(env, s)
		return nil
	})
	flag.Parse()
	if err := dist.validate(); err != nil {
		fail(err)
	}
	load := loadConfig{rate: *rate, duration: *duration, warmup: *warmup, timeout: *timeout}

	var err error
	switch *mode {
	case "run":
		err = run(runConfig{bin: *bin, configs: strings.Split(*configs, ","), env: env, dist: dist, seed: *seed, load: load})
	case "mock":
		err = serveMock(dist, *seed, [2]string{*listenA, *listenB})
	case "load":
		load.url, load.tag = *target, "load"
		err = loadOnly(load)
	default:
		err = fmt.Errorf("-mode %q: want run, mock or load", *mode)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "hedge:", err)
	os.Exit(1)
}

func (d distribution) validate() error {
	switch {
	case d.fast <= 0 || d.slow <= 0:
		return errors.New("-fast and -slow must be positive")
	case !(d.jitter >= 0 && d.jitter < 1):
		return errors.New("-jitter must be in [0, 1)")
	case !(d.slowFrac >= 0 && d.slowFrac <= 1):
		return errors.New("-slow-frac must be in [0, 1]")
	}
	return nil
}

// interrupted is closed on SIGINT or SIGTERM: every mode ends what it started, then returns.
func interrupted() <-chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return c
}

// serveMock serves the two targets until interrupted, then prints what they received.
func serveMock(dist distribution, seed uint64, listen [2]string) error {
	m, err := startMock(dist, seed, listen)
	if err != nil {
		return err
	}
	fmt.Printf("mock targets (%s): http://%s/v1 and http://%s/v1\n", dist, m.addrs[0], m.addrs[1])
	<-interrupted()
	m.mu.Lock()
	for tag, c := range m.tags {
		fmt.Printf("%q: %d upstream requests (%d, %d by target), %d in the tail, %d cut before their content\n",
			tag, c.requests.Load(), c.byTarget[0].Load(), c.byTarget[1].Load(), c.slow.Load(), c.cut.Load())
	}
	m.mu.Unlock()
	go func() { <-interrupted(); os.Exit(130) }() // a second interrupt does not wait for the streams
	m.close()
	return nil
}

// loadOnly runs the load against load.url and prints the time to first content. The upstream
// requests are not known here: the mock mode prints them, under the tag "load/measure".
func loadOnly(load loadConfig) error {
	res, err := runLoad(load)
	if err != nil {
		return err
	}
	fmt.Println(tableHeader)
	fmt.Println(tableRow("-", res, nil))
	if res.firstErr != "" {
		fmt.Println("first error:", res.firstErr)
	}
	return nil
}

const tableHeader = "| FAILOVER_HEDGE_AFTER | requests | errors | p50 | p99 | p99.9 | p99 / p50 | upstream requests | extra | cut before content |\n" +
	"|---|---|---|---|---|---|---|---|---|---|"

// tableRow renders one configuration's figures; c nil: the upstream's are not known.
func tableRow(name string, res loadResult, c *counts) string {
	p50, p99, p999 := percentile(res.ttfc, 0.5), percentile(res.ttfc, 0.99), percentile(res.ttfc, 0.999)
	ratio := "-"
	if p50 > 0 {
		ratio = fmt.Sprintf("%.1f×", float64(p99)/float64(p50))
	}
	upstream, extra, cut := "-", "-", "-"
	if c != nil {
		n := c.requests.Load()
		upstream = fmt.Sprintf("%d (%d + %d)", n, c.byTarget[0].Load(), c.byTarget[1].Load())
		extra = fmt.Sprintf("%+.1f%%", extraPercent(n, int64(res.requests+res.errors)))
		cut = fmt.Sprint(c.cut.Load())
	}
	return fmt.Sprintf("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s |", name, res.requests, res.errors,
		ms(p50), ms(p99), ms(p999), ratio, upstream, extra, cut)
}

// ms renders a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
