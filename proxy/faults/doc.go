// Package faults holds the sidecar's fault-injection matrix, soak and hostile-input tests; it has no code of its own.
package faults
