//go:build failover_portable

package e2e_test

// Tests built with the tag failover_portable test the binary built with it: the portable
// socket path (docs/development.md, Development).
func init() { buildFlags = append(buildFlags, "-tags=failover_portable") }
