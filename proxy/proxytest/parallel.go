package proxytest

import (
	"flag"
	"strconv"
)

// RaiseParallel raises -test.parallel to n unless the command line set it. A test package's
// TestMain calls it after flag.Parse: the tests marked t.Parallel spend their time waiting on
// loopback sockets and timers, not on a processor, and the default (GOMAXPROCS) would run only
// two at once on a two-core machine.
func RaiseParallel(n int) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if p := flag.Lookup("test.parallel"); p != nil && !given && p.Value.(flag.Getter).Get().(int) < n {
		p.Value.Set(strconv.Itoa(n))
	}
}
