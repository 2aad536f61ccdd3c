// Package observe counts, records and renders what the sidecar did (docs/operations.md,
// Observability): the metrics, the one log record per request and its ledger of attempts, the
// named log events, and the target table.
//
// The proxy tells it what happened in plain values (a family and an outcome, a class and an
// action, a target's name, a duration) and it turns them into what an operator reads:
//
//   - metrics.go: the metric catalogue (Metrics, and a target's series, TargetMetrics), made
//     once at start from the targets' names, in their declared order, so that counting on the
//     request path allocates nothing; /metrics in Prometheus text format (Metrics.Write).
//   - record.go: the request record (Record), which the proxy fills as a request goes and Log
//     writes once at its end; the Ledger of its attempts (Entry, Phase), rendered as JSON and
//     as one line of text; LogText for a value the client chose.
//   - logjson.go: JSONHandler, the slog handler for the JSON log, which writes the request
//     record without allocating; LogWriter, which batches log lines into few writes.
//   - events.go: the named events about an attempt or a target's health, and the debug line
//     per attempt.
//   - targets.go: the target table's values (TargetTable), which the proxy builds from its
//     targets' state, and their renderings for GET /targets (JSON) and `failover targets`
//     (WriteTargetTable).
//
// It never decides anything (what an outcome means is classify's, what a budget allows is
// budget's, what to do next is the proxy's), never touches a socket or a request's or an
// answer's bytes, and never logs a key, a prompt or a body: the path and the model are the
// only values of the client's it renders, escaped so that they cannot reach a terminal as
// escape sequences. It imports nothing of proxy; the proxy imports it.
package observe
