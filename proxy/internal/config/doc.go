// Package config is the configuration loader: it reads the FAILOVER_* environment variables
// once, at start, into a Config that is immutable afterwards (docs/configuration.md, the
// Configuration reference). Each package owns its section's type (budget.Config,
// classify.Config); this package reads them, with its own sections (ServerConfig, the
// targets, the rules, ResumeConfig), and validates every variable: Load reports every problem
// at once, each naming its variable, never showing a secret. It also finds the settings that
// load but likely do not do what they were set for (Warnings), and renders the effective
// policy for `failover -check` (Describe).
//
// It never serves a request and never decides anything about one: it opens no socket, except
// Check's test that the listen addresses can be bound, and it imports nothing of the request
// path. Package proxy builds its server from a Config.
package config
