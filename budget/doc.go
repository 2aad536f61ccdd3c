// Package budget decides what a request may still spend and what a target may still take: transfers counted
// against FAILOVER_MAX_ATTEMPTS, the elapsed budget FAILOVER_MAX_ELAPSED, same-target retries and their
// full-jitter backoff, how long a Retry-After asks to wait, the process-wide retry and hedge budgets, and each
// target's passive health (consecutive failures, ejection for a growing time, one probe once it expires,
// Retry-After cooldown), and the provider quotas its answers report (rate-limit headers, read without allocating).
//
// It never decides whether an outcome is retryable, which class it belongs to, or whether it counts against a
// target's health: that is classify's one decision function, and the proxy executes its verdicts. Budget only
// answers "may this request, or this target, still spend X now?".
//
// Time comes in through a Clock or an explicit now argument, so every state machine here is tested without
// sleeping. Budget never sleeps, starts no goroutine, never touches the network, and imports nothing of this module.
package budget
