// Package e2e tests the failover binary as an operator runs it: built once, started as a
// process with FAILOVER_* variables, stopped with signals. It has no code of its own.
package e2e
