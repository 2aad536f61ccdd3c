// Package config is the configuration loader: it reads the FAILOVER_* environment variables
// once, at start, into a Config that is immutable afterwards (docs/configuration.md, the
// Configuration reference). Each package owns its section's type (budget.Config,
// classify.Config); this package reads them, with its own sections (ServerConfig, the
// targets, the rules, ResumeConfig, HedgeConfig), and validates every variable: Load reports
// every problem at once, each naming its variable, never showing a secret. It also finds the
// settings that load but likely do not do what they were set for (Warnings), and renders the
// effective policy for `failover -check` (Describe).
//
// It never serves a request and never decides anything about one: it opens no socket, except
// Check's test that the listen addresses can be bound, and it imports nothing of the request
// path. Package proxy builds its server from a Config.
//
// The files, each with what it owns:
//
//   - config.go: Config, its own sections (ServerConfig, TargetConfig, the rules'), the
//     strategy names, ConfigError.
//   - load.go: Load and Check; the loader, which reads each section with caarlos0/env and
//     turns every failure into a problem that names its variable.
//   - names.go: the variables' names: the unknown-variable scan, the indexed groups
//     (FAILOVER_TARGET_<i>_*, the rules) and their gaps, Kubernetes' service links, and the
//     did-you-mean for names and for enumerated values (editDistance).
//   - validate.go: the server section, the targets and the rules, checked and completed
//     (default names, inherited retries, key files read).
//   - fields.go: a target's _HEADERS, _MODELS and _PATHS, parsed once (TargetFields).
//   - baseurl.go: a target URL that ends in an API operation, or that misses a well-known
//     provider's base path.
//   - resume.go: ResumeConfig, the resume modes (ResumeMode) and their validation.
//   - hedge.go: HedgeConfig, FAILOVER_HEDGE_AFTER's two forms (HedgeAfter) and their
//     validation.
//   - check.go: Check's bind test of the listen addresses, and what to do when one fails.
//   - warnings.go: Warning, and the settings that the rest of the configuration leaves
//     without effect.
//   - describe.go: Describe, the effective policy as `failover -check` prints it.
//   - secret.go: which variables hold secrets (SecretVariables) and how a URL is shown
//     (MaskURL).
//   - size.go: Size, a byte count with an optional KiB, MiB or GiB suffix.
package config
