package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
)

// tryListen binds both listen addresses, both at once, then closes them: one that is in use
// or not permitted is a problem, as the start would fail on it.
func (l *loader) tryListen(s *ServerConfig) {
	var open []net.Listener
	for _, v := range []struct{ name, addr string }{{"LISTEN", s.Listen}, {"METRICS_LISTEN", s.MetricsListen}} {
		ln, err := net.Listen("tcp", v.addr)
		if err != nil {
			l.problem("%s: %s", l.shown(envPrefix+v.name), listenProblem(v.addr, err))
			continue
		}
		open = append(open, ln)
	}
	for _, ln := range open {
		ln.Close()
	}
}

// listenProblem explains why net.Listen refused addr, and what to do.
func listenProblem(addr string, err error) string {
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return "the address is in use: stop what listens there, or choose another port"
	case (errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM)) && n > 0 && n < 1024:
		return "not permitted: a port below 1024 needs privileges (root, or CAP_NET_BIND_SERVICE); choose a port from 1024 up"
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
		return fmt.Sprintf("not permitted: %v", errors.Unwrap(err))
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "the host is not an address of this machine: use 127.0.0.1, 0.0.0.0 or one of its own addresses"
	}
	return fmt.Sprintf("cannot listen: %v", err)
}
