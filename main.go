// Command failover is a failover sidecar for LLM APIs. Point an OpenAI or Anthropic SDK at it
// (base URL http://127.0.0.1:4000/v1); it forwards each request to an ordered list of
// upstream targets and, while nothing has reached the client yet, retries or moves to the next
// target when an attempt fails in a way that is safe to recover from.
//
// Configuration comes only from FAILOVER_* environment variables.
//
//	failover [serve]      run the sidecar
//	failover -check       validate the environment and the listen addresses, print the effective policy, exit 0 or 2
//	failover drill        play the failure drills against simulated upstreams on loopback
//	failover healthcheck  exit 0 when the running sidecar's /healthz answers (for images without a shell)
//	failover targets      print the running sidecar's target table (/targets)
//	failover version      print the version, the VCS revision and the Go version
//
// The configuration reference is docs/configuration.md.
//
// This file only wires: it reads the configuration, sets up logging, listeners and signals.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lmittmann/tint"

	"github.com/llm-failover/failover/proxy"
	"github.com/llm-failover/failover/proxy/drill"
)

const usage = `usage: failover [serve | -check | drill | targets | healthcheck | version]

  failover [serve]      run the sidecar, configured by FAILOVER_* environment variables
  failover -check       check the environment and listen addresses, print the policy; exit 0 or 2
  failover drill        play the failure drills on loopback, with the environment's policy
  failover targets      print the running sidecar's target table (from FAILOVER_METRICS_LISTEN)
  failover healthcheck  exit 0 if the running sidecar's /healthz answers, else 1
  failover version      print the version, the VCS revision and the Go version

Every FAILOVER_* variable is in the configuration reference, docs/configuration.md:
https://github.com/llm-failover/failover/blob/main/docs/configuration.md
`

// version and revision name the build where its build information has none: the Dockerfile
// sets them with -ldflags "-X main.version=... -X main.revision=...", since its build context
// has no .git for Go to stamp from.
var version, revision string

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// run is main with its inputs and outputs passed in; it returns the exit code: 0 fine,
// 1 a runtime failure (or a failed drill), 2 a bad configuration or usage.
func run(args, environ []string, stdout, stderr io.Writer) int {
	mode := ""
	for _, a := range args {
		next := ""
		switch a {
		case "serve":
			next = "serve"
		case "-check", "--check", "check":
			next = "check"
		case "drill":
			next = "drill"
		case "healthcheck":
			return healthcheck(environ, stderr)
		case "targets":
			return targets(environ, stdout, stderr)
		case "version", "-version", "--version":
			fmt.Fprintln(stdout, proxy.ReadBuild(version, revision))
			return 0
		case "-h", "-help", "--help", "help":
			fmt.Fprint(stdout, usage)
			return 0
		default:
			fmt.Fprintf(stderr, "failover: unknown argument %q\n%s", a, usage)
			return 2
		}
		if mode != "" && mode != next {
			// "failover -check drill" would run the drill, not the check a CI step expects.
			fmt.Fprintf(stderr, "failover: %s and %s cannot be combined\n%s", mode, next, usage)
			return 2
		}
		mode = next
	}
	if mode == "" {
		mode = "serve"
	}

	var cfg *proxy.Config
	var err error
	if mode == "check" {
		cfg, err = proxy.Check(environ) // also tries the listen addresses
	} else {
		cfg, err = proxy.Load(environ, mode != "drill")
	}
	// Keys and tokens leave the process environment as soon as they are read, so nothing
	// spawned later (or a crash dump of the environment) can see them.
	for _, name := range proxy.SecretVariables(environ) {
		os.Unsetenv(name)
	}
	if err != nil {
		fmt.Fprintf(stderr, "failover: %v\n", err)
		return 2
	}

	build := proxy.ReadBuild(version, revision)
	switch mode {
	case "check":
		fmt.Fprintf(stdout, "# %s\n", build)
		fmt.Fprint(stdout, cfg.Describe())
		for _, w := range cfg.Warnings {
			fmt.Fprintf(stdout, "# warning: %s\n", w)
		}
		fmt.Fprintln(stdout, "# configuration is valid")
		return 0
	case "drill":
		return drill.Run(cfg, stdout)
	}

	// Log lines are batched (at most 100 ms) so that the per-request record does not cost a
	// write(2) of its own under load; everything is flushed before exit.
	logOut := proxy.NewLogWriter(stderr, 100*time.Millisecond)
	defer logOut.Close()
	log := newLogger(cfg.Server.LogLevel, cfg.Server.LogFormat, logOut, isTerminal(stderr))
	// The message shows values as -check does: secrets masked.
	for _, w := range cfg.Warnings {
		log.Warn("config_warning", slog.String("variable", w.Variable), slog.String("warning", w.Message))
	}
	srv, err := proxy.New(cfg, proxy.Options{Logger: log, Build: build})
	if err != nil {
		fmt.Fprintf(stderr, "failover: %v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "failover: FAILOVER_LISTEN=%s: %v\n", cfg.Server.Listen, err)
		return 1
	}
	mln, err := net.Listen("tcp", cfg.Server.MetricsListen)
	if err != nil {
		fmt.Fprintf(stderr, "failover: FAILOVER_METRICS_LISTEN=%s: %v\n", cfg.Server.MetricsListen, err)
		return 1
	}
	// GOMAXPROCS: half the processors while few requests are in flight, all of them while many
	// are (docs/reliability.md, Performance). An explicit GOMAXPROCS is the operator's: left alone.
	procs := "GOMAXPROCS"
	if _, set := lookupEnv(environ, "GOMAXPROCS"); !set {
		procs = "adaptive"
		if srv.AdaptProcs() == 0 {
			procs = "runtime default"
		}
	}
	errs := make(chan error, 2)
	go func() { errs <- srv.Serve(ln) }()
	go func() { errs <- srv.ServeProbes(mln) }()
	names := make([]string, len(cfg.Targets))
	for i, t := range cfg.Targets {
		names[i] = t.Name
	}
	log.Info("listening", slog.String("proxy", ln.Addr().String()), slog.String("metrics", mln.Addr().String()),
		slog.String("strategy", cfg.Server.Strategy), slog.String("targets", strings.Join(names, ",")),
		slog.String("gomaxprocs", procs), slog.String("version", build.Version), slog.String("revision", build.Revision),
		slog.String("goversion", build.GoVersion))

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-signals:
		log.Info("shutting_down", slog.String("signal", sig.String()), slog.String("timeout", cfg.Server.ShutdownTimeout.String()))
	case err := <-errs:
		log.Error("listener_failed", slog.String("error", err.Error()))
		return 1
	}
	timeout := cfg.Server.ShutdownTimeout
	if timeout <= 0 {
		timeout = time.Duration(1<<63 - 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		// A second signal ends the drain now, as its timeout would: committed streams get the
		// interrupted event, waiting requests a 503. Without it, FAILOVER_SHUTDOWN_TIMEOUT=0
		// could only be cut short by SIGKILL.
		select {
		case sig := <-signals:
			log.Warn("shutting_down_now", slog.String("signal", sig.String()))
			cancel()
		case <-ctx.Done():
		}
	}()
	srv.Shutdown(ctx)
	log.Info("stopped")
	return 0
}

// healthcheck asks a running sidecar's /healthz on the metrics listener, for container
// health checks in images without a shell or curl.
func healthcheck(environ []string, stderr io.Writer) int {
	resp, err := getMetricsListener(environ, "/healthz")
	if err != nil {
		fmt.Fprintf(stderr, "failover: healthcheck: %v\n", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "failover: healthcheck: %s\n", resp.Status)
		return 1
	}
	return 0
}

// targets prints the running sidecar's target table (docs/operations.md, The target table), read from
// /targets on the metrics listener, for a person.
func targets(environ []string, stdout, stderr io.Writer) int {
	resp, err := getMetricsListener(environ, "/targets")
	if err != nil {
		fmt.Fprintf(stderr, "failover: targets: %s\n", unreachable(environ, err))
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "failover: targets: %s\n", resp.Status)
		return 1
	}
	var table proxy.TargetTable
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
		fmt.Fprintf(stderr, "failover: targets: the answer is not a target table: %v\n", err)
		return 1
	}
	if err := proxy.WriteTargetTable(stdout, &table); err != nil {
		fmt.Fprintf(stderr, "failover: targets: %v\n", err)
		return 1
	}
	return 0
}

// getMetricsListener asks path of the running sidecar's metrics listener
// (FAILOVER_METRICS_LISTEN, read from environ; an address on every interface is asked on
// loopback), waiting at most metricsWait.
func getMetricsListener(environ []string, path string) (*http.Response, error) {
	addr, err := metricsListenerAddr(environ)
	if err != nil {
		return nil, err
	}
	client := http.Client{Timeout: metricsWait}
	return client.Get("http://" + addr + path)
}

// metricsWait is how long getMetricsListener waits for the sidecar's answer.
const metricsWait = 2 * time.Second

// metricsListenerAddr returns the address getMetricsListener asks: FAILOVER_METRICS_LISTEN
// (:9464 when unset), on loopback when it names every interface.
func metricsListenerAddr(environ []string) (string, error) {
	addr := ":9464"
	if v, _ := lookupEnv(environ, "FAILOVER_METRICS_LISTEN"); v != "" {
		addr = v
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("FAILOVER_METRICS_LISTEN=%s: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// unreachable explains, for a person, an error from getMetricsListener: which address was
// asked, which variable sets it, and what to do. The usual cause is that no sidecar runs
// there, or that it runs with another FAILOVER_METRICS_LISTEN than this command was given.
func unreachable(environ []string, err error) string {
	addr, aerr := metricsListenerAddr(environ)
	if aerr != nil {
		return aerr.Error()
	}
	var what string
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		what = fmt.Sprintf("no sidecar answered on %s within %s", addr, metricsWait)
	case errors.As(err, &opErr) && opErr.Op == "dial":
		what = fmt.Sprintf("no sidecar answers on %s (%v)", addr, opErr.Err)
	default:
		what = fmt.Sprintf("cannot ask %s: %v", addr, err)
	}
	where := "FAILOVER_METRICS_LISTEN (not set here, so the default :9464)"
	if v, _ := lookupEnv(environ, "FAILOVER_METRICS_LISTEN"); v != "" {
		where = "FAILOVER_METRICS_LISTEN=" + v
		if host, _, _ := net.SplitHostPort(v); host == "" || host == "0.0.0.0" || host == "::" {
			where += " (every interface: asked on loopback)"
		}
	}
	return what + "\n  The address comes from " + where + "." +
		"\n  Start the sidecar, or set FAILOVER_METRICS_LISTEN here to the value the sidecar runs with."
}

// newLogger returns the slog logger: tint (coloured on a terminal, NO_COLOR respected) for
// text, slog's JSON handler for json; auto picks text on a terminal and json otherwise.
func newLogger(level, format string, w io.Writer, tty bool) *slog.Logger {
	var lv slog.Level
	lv.UnmarshalText([]byte(level)) // validated by proxy.Load
	if format == "text" || format == "auto" && tty {
		_, noColor := os.LookupEnv("NO_COLOR")
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lv, TimeFormat: "15:04:05.000", NoColor: !tty || noColor}))
	}
	return slog.New(proxy.NewJSONHandler(w, lv))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// lookupEnv finds name in an environment given as KEY=value entries, as os.LookupEnv does in
// the process's own.
func lookupEnv(environ []string, name string) (string, bool) {
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}
