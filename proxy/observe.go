package proxy

import (
	"io"
	"log/slog"
	"time"

	"github.com/llm-failover/failover/proxy/internal/observe"
)

// The names of package observe that main uses, which Go keeps from importing
// proxy/internal/...: the JSON log, its batching writer, and the target table.

type (
	// JSONHandler is the slog.Handler for FAILOVER_LOG_FORMAT=json (observe.JSONHandler).
	JSONHandler = observe.JSONHandler
	// LogWriter batches log lines into few writes (observe.LogWriter).
	LogWriter = observe.LogWriter
	// TargetTable is the live target table (observe.TargetTable).
	TargetTable = observe.TargetTable
	// TargetState is one target's line in the table (observe.TargetState).
	TargetState = observe.TargetState
	// QuotaState is one quota as an answer reported it (observe.QuotaState).
	QuotaState = observe.QuotaState
)

// NewJSONHandler returns a handler writing to w at level and above (observe.NewJSONHandler).
func NewJSONHandler(w io.Writer, level slog.Leveler) *JSONHandler {
	return observe.NewJSONHandler(w, level)
}

// NewLogWriter starts batching writes to w; Close flushes and stops it (observe.NewLogWriter).
func NewLogWriter(w io.Writer, interval time.Duration) *LogWriter {
	return observe.NewLogWriter(w, interval)
}

// WriteTargetTable prints the table for a person, as `failover targets` does
// (observe.WriteTargetTable).
func WriteTargetTable(w io.Writer, table *TargetTable) error {
	return observe.WriteTargetTable(w, table)
}
