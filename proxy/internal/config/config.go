package config

import (
	"slices"
	"strings"
	"time"

	"github.com/llm-failover/failover/budget"
	"github.com/llm-failover/failover/classify"
)

// envPrefix starts every variable this program reads.
const envPrefix = "FAILOVER_"

// ServerConfig is the proxy's own FAILOVER_* section: listeners, logging, limits, strategy
// and timeouts.
type ServerConfig struct {
	Listen           string        `env:"LISTEN" envDefault:"127.0.0.1:4000"`
	MetricsListen    string        `env:"METRICS_LISTEN" envDefault:":9464"`
	LogLevel         string        `env:"LOG_LEVEL" envDefault:"info"`
	LogFormat        string        `env:"LOG_FORMAT" envDefault:"auto"`
	ShutdownTimeout  time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"30s"`
	InboundToken     string        `env:"INBOUND_TOKEN"`
	MaxRequestBytes  Size          `env:"MAX_REQUEST_BYTES" envDefault:"32MiB"`
	MaxResponseBytes Size          `env:"MAX_RESPONSE_BYTES" envDefault:"32MiB"`
	MaxInflight      int           `env:"MAX_INFLIGHT" envDefault:"0"`
	Strategy         string        `env:"STRATEGY" envDefault:"failover"`
	StickyHeader     string        `env:"STICKY_HEADER" envDefault:"X-Session-Id"`
	ConnectTimeout   time.Duration `env:"CONNECT_TIMEOUT" envDefault:"5s"`
	FirstByteTimeout time.Duration `env:"FIRST_BYTE_TIMEOUT" envDefault:"60s"`
	IdleTimeout      time.Duration `env:"IDLE_TIMEOUT" envDefault:"300s"`
	AttemptTimeout   time.Duration `env:"ATTEMPT_TIMEOUT" envDefault:"600s"`
	PeekBytes        Size          `env:"PEEK_BYTES" envDefault:"128KiB"`

	// AllowUnderscoreHeaders forwards the client's headers whose names contain '_'
	// (docs/decisions.md, Headers); by default they are dropped.
	AllowUnderscoreHeaders bool `env:"ALLOW_UNDERSCORE_HEADERS" envDefault:"false"`
}

// TargetConfig is one FAILOVER_TARGET_<i>_* group.
type TargetConfig struct {
	URL        string `env:"URL"`
	Name       string `env:"NAME"`
	APIKey     string `env:"API_KEY"`
	APIKeyFile string `env:"API_KEY_FILE"`
	Auth       string `env:"AUTH" envDefault:"bearer"`
	Headers    string `env:"HEADERS"`
	Model      string `env:"MODEL"`
	Models     string `env:"MODELS"`
	Paths      string `env:"PATHS"`
	Weight     int    `env:"WEIGHT" envDefault:"1"`
	Retries    int    `env:"RETRIES"` // unset: FAILOVER_SAME_TARGET_RETRIES (filled in by Load)
	Resume     string `env:"RESUME"`  // how the target continues a cut stream: "" or a ResumeMode's name (resume.go)

	// parsed is Headers, Models and Paths as Load parsed them, once: Fields returns it.
	// A pointer, so that printing a TargetConfig never prints header values.
	parsed *TargetFields
}

// ruleConfig is one FAILOVER_STOP_RULE_<i>_* or FAILOVER_SUCCESS_RULE_<i>_* group.
type ruleConfig struct {
	Statuses string `env:"STATUSES"`
	Pattern  string `env:"PATTERN"`
}

// Config is the whole configuration, read once at start: each package owns its section.
// It is immutable after Load.
type Config struct {
	Server       ServerConfig
	Budget       budget.Config
	Classify     classify.Config
	Targets      []TargetConfig
	StopRules    []classify.Rule
	SuccessRules []classify.Rule
	Resume       ResumeConfig
	Hedge        HedgeConfig

	// Warnings are the likely mistakes that still load: -check prints them, the start logs
	// each once (config_warning).
	Warnings []Warning
}

// strategyNames are the values FAILOVER_STRATEGY accepts, in the order errors list them.
// Package proxy builds one strategy per name from a table of its own, which its tests hold to
// this list.
var strategyNames = []string{"failover", "round-robin", "sticky", "least-latency"}

// StrategyNames returns the values FAILOVER_STRATEGY accepts, in the order errors list them.
func StrategyNames() []string { return slices.Clone(strategyNames) }

// ConfigError lists every problem found in the environment. Its message has one line per
// problem, each naming the variable; secrets are never part of it.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string {
	return "invalid configuration:\n  - " + strings.Join(e.Problems, "\n  - ")
}
