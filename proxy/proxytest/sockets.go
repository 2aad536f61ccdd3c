package proxytest

import (
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

// The faults no listener produces: a port that refuses and a port that stalls, made of sockets
// a net.Listener cannot be: bound but not listening, or listening but never accepting.
// sockets_unix.go and sockets_windows.go open and close them.

// RefusedAddr returns a loopback address that refuses connections for the rest of the test
// binary's life. The port is held by a socket that is bound but never listens: a connection
// to it is refused, and no listener can be given the port. A port that was merely freed can
// be handed to the next listener asked for, in this binary or in another package's test
// binary running beside it, and the "refused" target then answers.
func RefusedAddr() string {
	fd, err := openSocket()
	if err != nil {
		panic("proxytest: socket for a refused port: " + err.Error())
	}
	// No SO_REUSEADDR: with it unset here, no other socket may bind the port.
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		panic("proxytest: bind a refused port: " + err.Error())
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		panic("proxytest: the refused port's address: " + err.Error())
	}
	return "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
}

// StalledListener is a loopback port where a connect neither succeeds nor is refused: its
// accept queue (backlog 0) is filled by one connection the listener never accepts, and Linux
// drops further SYNs while the queue is full, so a dialer waits until its own timeout. It is
// the closest loopback equivalent of an address whose SYN is never answered (a black-holed
// route or a dead host). Other systems may refuse a connect to a full queue instead: the tests
// that use it are run on Linux. Close releases it.
type StalledListener struct {
	// URL is a base URL a target uses: http://127.0.0.1:<port>/v1.
	URL  string
	fd   socket
	fill net.Conn
}

// NewStalledListener opens a stalled port; see StalledListener.
func NewStalledListener() (*StalledListener, error) {
	fd, err := openSocket()
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	fail := func(op string, err error) (*StalledListener, error) {
		closeSocket(fd)
		return nil, os.NewSyscallError(op, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fail("bind", err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		return fail("listen", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return fail("getsockname", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
	// The one connection the queue holds: it completes, and is never accepted.
	fill, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return fail("connect", err)
	}
	return &StalledListener{URL: "http://" + addr + "/v1", fd: fd, fill: fill}, nil
}

// Close releases the port.
func (l *StalledListener) Close() {
	l.fill.Close()
	closeSocket(l.fd)
}
