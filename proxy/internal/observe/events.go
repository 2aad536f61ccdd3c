package observe

import (
	"context"
	"log/slog"
)

// The named log events (docs/operations.md, Named log events) are rare: budget, stream and
// health decisions, a few per request at most and none on a request that goes well. Their
// rendering may allocate; the request record's (Record.Log) may not.

// Event logs a named event about one attempt of a request: its request_id, the target and the
// attempt's number, then extra.
func Event(log *slog.Logger, level slog.Level, msg string, requestID []byte, target string, attempt int, extra ...slog.Attr) {
	attrs := make([]slog.Attr, 0, 4+len(extra))
	attrs = append(attrs, slog.String("request_id", string(requestID)), slog.String("target", target), slog.Int("attempt", attempt))
	attrs = append(attrs, extra...)
	log.LogAttrs(context.Background(), level, msg, attrs...)
}

// TargetEvent logs a named event about a target's health that a request's attempt caused
// (target_ejected, target_cooldown, target_restored): the target, then extra, then the
// request's request_id.
func TargetEvent(log *slog.Logger, level slog.Level, msg string, target string, requestID []byte, extra ...slog.Attr) {
	if !log.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]slog.Attr, 0, 2+len(extra))
	attrs = append(attrs, slog.String("target", target))
	attrs = append(attrs, extra...)
	attrs = append(attrs, slog.String("request_id", string(requestID)))
	log.LogAttrs(context.Background(), level, msg, attrs...)
}

// LogAttempt logs the n-th attempt's ledger entry on its own as the attempt ends (msg=attempt),
// at debug level; below it, it costs the level's check.
func LogAttempt(log *slog.Logger, requestID []byte, n int, e *Entry) {
	if log.Enabled(context.Background(), slog.LevelDebug) {
		logAttempt(log, requestID, n, e)
	}
}

func logAttempt(log *slog.Logger, requestID []byte, n int, e *Entry) {
	log.LogAttrs(context.Background(), slog.LevelDebug, "attempt", slog.String("request_id", string(requestID)),
		slog.Int("attempt", n), slog.String("target", e.Target), slog.Int("status", e.Status),
		slog.String("class", e.Class.String()), slog.String("phase", e.Phase.String()), slog.String("action", e.Action.String()),
		slog.String("reason", e.Reason.String()), slog.Float64("duration_ms", float64(e.Duration.Microseconds())/1000))
}
