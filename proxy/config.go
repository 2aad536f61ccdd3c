package proxy

import "github.com/llm-failover/failover/proxy/internal/config"

// The configuration loader is package proxy/internal/config (docs/configuration.md). The
// command, outside proxy, cannot import it: this is the part of it that the command uses.
// Code under proxy/ imports the loader itself.

// Config is the whole configuration, read once at start: config.Config.
type Config = config.Config

// Load reads the configuration from environ: config.Load.
func Load(environ []string, requireTargets bool) (*Config, error) {
	return config.Load(environ, requireTargets)
}

// Check is Load for `failover -check`, which also tries the listen addresses: config.Check.
func Check(environ []string) (*Config, error) { return config.Check(environ) }

// SecretVariables names the variables in environ that hold secrets: config.SecretVariables.
func SecretVariables(environ []string) []string { return config.SecretVariables(environ) }
